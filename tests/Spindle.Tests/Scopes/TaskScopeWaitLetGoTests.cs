using System;
using System.Collections.Concurrent;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Scopes;

/// <summary>
/// A shutdown with a grace period, as a server writes it: <c>if (await WhenAny(scope.WaitAsync(), Delay(grace)) == 1)
/// { log; await scope.WaitAsync(); }</c> (or <c>scope.WaitAsync().WithTimeout(grace)</c>, then the same). WaitAsync
/// promises one awaiter at a time, and WhenAny, WhenAll's timeout and WithTimeout promise to let go of what they no
/// longer wait for, as <c>Task.WhenAny</c> removes its continuations. Found by the journey review of 2026-11-29: the
/// scope's wait was the one Spindle wait a combinator could not let go of, so the second WaitAsync threw the await-once
/// error ("This Spindle task already has an awaiter") while the scope was still running, and a failure that reached the
/// second awaiter was also reported to UnobservedException by the let-go combinator.
/// </summary>
[Collection(SequentialCollection.Name)] // watches the process-wide UnobservedException event
public sealed class TaskScopeWaitLetGoTests
{
    private sealed class ChildFault() : Exception("a child failed after the grace period");

    public static TheoryData<string> LetGoKinds => new() { "WhenAny", "WhenAnySettledAtTheCall", "WithTimeout", "WhenAllTimeout", "WithCancellation" };

    /// <summary>Waits for <paramref name="scope"/> the way <paramref name="kind"/> does, and lets that first wait lose.</summary>
    private static async SpindleTask LoseTheFirstWait(TaskScope scope, string kind)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var cts = new CancellationTokenSource();
        switch (kind)
        {
            case "WhenAny":
            {
                SpindleTask<int> race = SpindleTask.WhenAny(scope.WaitAsync(), wheel.Delay(TimeSpan.FromSeconds(5)));
                clock.Advance(TimeSpan.FromSeconds(5));
                Assert.Equal(1, await race);
                break;
            }
            case "WhenAnySettledAtTheCall":
                Assert.Equal(1, await SpindleTask.WhenAny(scope.WaitAsync(), SpindleTask.CompletedTask));
                break;
            case "WithTimeout":
            {
                SpindleTask timed = scope.WaitAsync().WithTimeout(TimeSpan.FromSeconds(5), wheel, CancellationToken.None);
                clock.Advance(TimeSpan.FromSeconds(5));
                await Assert.ThrowsAsync<TimeoutException>(() => TestUtil.AwaitAsync(timed));
                break;
            }
            case "WhenAllTimeout":
            {
                SpindleTask all = SpindleTask.WhenAll([scope.WaitAsync()], new WhenAllOptions { Timeout = TimeSpan.FromSeconds(5), Timers = wheel }, CancellationToken.None);
                clock.Advance(TimeSpan.FromSeconds(5));
                await Assert.ThrowsAsync<TimeoutException>(() => TestUtil.AwaitAsync(all));
                break;
            }
            default:
            {
                SpindleTask cancellable = scope.WaitAsync().WithCancellation(cts.Token);
                cts.Cancel();
                await Assert.ThrowsAnyAsync<OperationCanceledException>(() => TestUtil.AwaitAsync(cancellable));
                break;
            }
        }
    }

    private static async SpindleTask AwaitSecond(SpindleTask rest, StrongBox box)
    {
        try
        {
            await rest;
        }
        catch (Exception e)
        {
            box.Thrown = e;
        }
    }

    private sealed class StrongBox
    {
        public Exception? Thrown;
    }

    [Theory]
    [MemberData(nameof(LetGoKinds))]
    public async Task SecondWait_AfterTheFirstWasLetGoOf_WaitsForTheChildren(string kind)
    {
        var release = new Promise();
        var scope = new TaskScope(CancellationToken.None);
        scope.Run(async _ => await release.Task);

        await LoseTheFirstWaitOutside(scope, kind);
        var box = new StrongBox();
        SpindleTask second = AwaitSecond(scope.WaitAsync(), box); // the scope still runs: this wait must be taken
        Assert.False(second.IsCompleted, "the second WaitAsync ended while the scope still ran, with " + box.Thrown?.GetType().Name + ": " + box.Thrown?.Message);
        release.SetResult();
        await TestUtil.WithTimeout(second);
        Assert.Null(box.Thrown);
        await scope.DisposeAsync();
    }

    [Theory]
    [MemberData(nameof(LetGoKinds))]
    public async Task SecondWait_AfterTheFirstWasLetGoOf_GetsTheFailure_ReportedNowhereElse(string kind)
    {
        var release = new Promise();
        var scope = new TaskScope(CancellationToken.None);
        var fault = new ChildFault(); // this run's: a Theory's other case cannot count here
        scope.Run(async _ =>
        {
            await release.Task;
            throw fault;
        });

        var box = new StrongBox();
        Exception? disposalThrew = null;
        ConcurrentQueue<Exception> reported = await UnobservedReports.ObserveAsync(UnobservedReports.Own.Instances(fault), async _ =>
        {
            await LoseTheFirstWaitOutside(scope, kind);
            SpindleTask second = AwaitSecond(scope.WaitAsync(), box);
            release.SetResult();
            await TestUtil.WithTimeout(second);
            disposalThrew = await Record.ExceptionAsync(() => scope.DisposeAsync().AsTask());
        });
        Assert.True(box.Thrown is ChildFault, "the second WaitAsync threw " + box.Thrown?.GetType().Name + ": " + box.Thrown?.Message);
        Assert.Null(disposalThrew); // the awaiter had it
        Assert.False(reported.Any(e => e is ChildFault), "the failure the second WaitAsync had was also reported to UnobservedException");
    }

    private static Task LoseTheFirstWaitOutside(TaskScope scope, string kind) => TestUtil.WithTimeout(LoseTheFirstWait(scope, kind));
}

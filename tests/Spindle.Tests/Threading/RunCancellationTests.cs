using System;
using System.Threading;
using System.Threading.Tasks;
using SpindleLib.Tests.Scopes;

namespace SpindleLib.Tests.Threading;

/// <summary>
/// Spindle.Run with a CancellationToken, as Task.Run(work, token): a token that wins before the work starts ends the task
/// as cancelled at once (even while the item still waits in a queue) and the work never runs; once the work has started
/// the token no longer touches the task. Several tests occupy every worker, so these run alone.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class RunCancellationTests
{
    private static void AssertCanceledWith(CancellationToken token, SpindleTask task)
    {
        Assert.Equal(SpindleTaskStatus.Canceled, task.Status);
        OperationCanceledException e = Assert.ThrowsAny<OperationCanceledException>(() => task.GetAwaiter().GetResult());
        Assert.Equal(token, e.CancellationToken);
    }

    private static void AssertCanceledWith<T>(CancellationToken token, SpindleTask<T> task)
    {
        Assert.Equal(SpindleTaskStatus.Canceled, task.Status);
        OperationCanceledException e = Assert.ThrowsAny<OperationCanceledException>(() => task.GetAwaiter().GetResult());
        Assert.Equal(token, e.CancellationToken);
    }

    [Fact]
    public void AlreadyCancelled_EveryOverload_GivesACancelledTask_AndRunsNothing()
    {
        using var cts = new CancellationTokenSource();
        cts.Cancel();
        int ran = 0;

        AssertCanceledWith(cts.Token, Spindle.Run(() => { ran++; }, cts.Token));
        AssertCanceledWith(cts.Token, Spindle.Run(() => ++ran, cts.Token));
        AssertCanceledWith(cts.Token, Spindle.Run(() => { ran++; return SpindleTask.CompletedTask; }, cts.Token));
        AssertCanceledWith(cts.Token, Spindle.Run(() => { ran++; return SpindleTask.FromResult(1); }, cts.Token));

        Thread.Sleep(50); // had anything been queued, a worker would have run it by now
        Assert.Equal(0, Volatile.Read(ref ran));
        Assert.Equal(0, TokenRegistrationLeakTests.RegistrationCount(cts));
    }

    [Fact]
    public async Task TokenNeverCancelled_EveryOverload_RunsAndLeavesNoRegistration()
    {
        using var cts = new CancellationTokenSource();

        await TestUtil.WithTimeout(Spindle.Run(() => Assert.True(TestUtil.OnSpindleWorker), cts.Token));
        Assert.Equal(5, await TestUtil.WithTimeout(Spindle.Run(() => 5, cts.Token)));
        await TestUtil.WithTimeout(Spindle.Run(async () => await Spindle.Yield(), cts.Token));
        Assert.Equal(6, await TestUtil.WithTimeout(Spindle.Run(async () =>
        {
            await Spindle.Yield();
            return 6;
        }, cts.Token)));

        Assert.Equal(0, TokenRegistrationLeakTests.RegistrationCount(cts));
    }

    [Fact]
    public async Task TokenThatCannotBeCancelled_RunsAsWithoutOne()
    {
        Assert.Equal(3, await TestUtil.WithTimeout(Spindle.Run(() => 3, new CancellationToken(false))));
        Assert.Equal(4, await TestUtil.WithTimeout(Spindle.Run(() => SpindleTask.FromResult(4), CancellationToken.None)));
    }

    [Fact]
    public void NullWork_ThrowsWithAToken()
    {
        using var cts = new CancellationTokenSource();
        Assert.Equal("action", Assert.Throws<ArgumentNullException>(() => Spindle.Run((Action)null!, cts.Token)).ParamName);
        Assert.Equal("function", Assert.Throws<ArgumentNullException>(() => Spindle.Run((Func<int>)null!, cts.Token)).ParamName);
        Assert.Equal("function", Assert.Throws<ArgumentNullException>(() => Spindle.Run((Func<SpindleTask>)null!, cts.Token)).ParamName);
        Assert.Equal("function", Assert.Throws<ArgumentNullException>(() => Spindle.Run((Func<SpindleTask<int>>)null!, cts.Token)).ParamName);
        Assert.Equal(0, TokenRegistrationLeakTests.RegistrationCount(cts));
    }

    [Fact]
    public async Task CancelledWhileQueued_EndsAtOnce_TheWorkNeverRuns_AndTheItemIsReusedAfterwards()
    {
        using var cts = new CancellationTokenSource();
        int ran = 0;
        SpindleTask action;
        SpindleTask<int> function;
        SpindleTask asyncAction;
        SpindleTask<int> asyncFunction;
        using (new BusyWorkers())
        {
            action = Spindle.Run(() => { Interlocked.Increment(ref ran); }, cts.Token);
            function = Spindle.Run(() => Interlocked.Increment(ref ran), cts.Token);
            asyncAction = Spindle.Run(() => { Interlocked.Increment(ref ran); return SpindleTask.CompletedTask; }, cts.Token);
            asyncFunction = Spindle.Run(() => SpindleTask.FromResult(Interlocked.Increment(ref ran)), cts.Token);
            Assert.Equal(SpindleTaskStatus.Pending, action.Status);
            Assert.Equal(SpindleTaskStatus.Pending, function.Status);

            cts.Cancel(); // every worker is still busy: the items are in a queue

            // Read before any worker is free: they ended at the cancellation, not when a worker reached them.
            AssertCanceledWith(cts.Token, action);
            AssertCanceledWith(cts.Token, function);
            AssertCanceledWith(cts.Token, asyncAction);
            AssertCanceledWith(cts.Token, asyncFunction);
        }

        // The workers now reach the cancelled items, let go of them, and run nothing.
        await TestUtil.WithTimeout(Spindle.Run(() => { }));
        Thread.Sleep(50);
        Assert.Equal(0, Volatile.Read(ref ran));

        // Later runs, on pooled items (those cancelled ones among them), work as usual.
        for (int i = 0; i < 100; i++)
        {
            using var again = new CancellationTokenSource();
            Assert.Equal(i, await TestUtil.WithTimeout(Spindle.Run(() => i, again.Token)));
            Assert.Equal(0, TokenRegistrationLeakTests.RegistrationCount(again));
        }
        Assert.Equal(0, Volatile.Read(ref ran));
    }

    [Fact]
    public async Task CancelledAfterStarting_TheTaskFollowsTheWork()
    {
        using var cts = new CancellationTokenSource();
        using var started = new ManualResetEventSlim();
        using var finish = new ManualResetEventSlim();

        SpindleTask<int> task = Spindle.Run(() =>
        {
            started.Set();
            finish.Wait();
            return 9;
        }, cts.Token);
        Assert.True(started.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)));
        Assert.Equal(0, TokenRegistrationLeakTests.RegistrationCount(cts)); // dropped when the work started
        cts.Cancel();
        Assert.Equal(SpindleTaskStatus.Pending, task.Status);
        finish.Set();

        Assert.Equal(9, await TestUtil.WithTimeout(task));
    }

    [Fact]
    public async Task AsyncFunction_CancelledAfterStarting_FollowsTheFunctionsTask()
    {
        using var cts = new CancellationTokenSource();
        var inner = new Promise<int>();
        bool started = false;

        SpindleTask<int> task = Spindle.Run(() =>
        {
            Volatile.Write(ref started, true);
            return inner.Task;
        }, cts.Token);
        TestUtil.SpinUntil(() => Volatile.Read(ref started));
        cts.Cancel();
        Thread.Sleep(20);
        Assert.Equal(SpindleTaskStatus.Pending, task.Status);
        inner.SetResult(11);

        Assert.Equal(11, await TestUtil.WithTimeout(task));
    }

    [Fact]
    public async Task WorkThrowsItsTokensCancellation_TheTaskIsCancelled()
    {
        using var cts = new CancellationTokenSource();

        SpindleTask task = Spindle.Run(() =>
        {
            cts.Cancel();
            cts.Token.ThrowIfCancellationRequested();
        }, cts.Token);

        OperationCanceledException e = await Assert.ThrowsAnyAsync<OperationCanceledException>(() => TestUtil.WithTimeout(task));
        Assert.Equal(cts.Token, e.CancellationToken);
    }

    [Fact]
    public async Task WorkFails_TheFailureSurfaces()
    {
        using var cts = new CancellationTokenSource();
        var error = new InvalidTimeZoneException("in run");

        SpindleTask<int> task = Spindle.Run(new Func<int>(() => throw error), cts.Token);

        Assert.Same(error, await Assert.ThrowsAsync<InvalidTimeZoneException>(() => TestUtil.WithTimeout(task)));
    }

    [Fact]
    public void AwaitedTwice_IsTheAwaitOnceError_ForACancelledRunToo()
    {
        using var cts = new CancellationTokenSource();
        SpindleTask task;
        using (new BusyWorkers())
        {
            task = Spindle.Run(() => { }, cts.Token);
            cts.Cancel();
            AssertCanceledWith(cts.Token, task);
            Assert.Throws<InvalidOperationException>(() => task.GetAwaiter().GetResult());
        }
    }

    [Fact]
    public void SteadyState_AllocatesNothing()
    {
        using var cts = new CancellationTokenSource();
        Action action = static () => { };
        Func<int> function = static () => 1;

        TestUtil.AssertSteadyStateAllocatesNothing(_ =>
        {
            Spindle.Run(action, cts.Token).GetAwaiter().GetResult();
            Spindle.Run(function, cts.Token).GetAwaiter().GetResult();
        }, 2_000);
        Assert.Equal(0, TokenRegistrationLeakTests.RegistrationCount(cts));
    }

    /// <summary>
    /// Cancellation against the start, on a fresh token each round, round after round on the same pooled items: each run
    /// either ran its work exactly once and succeeded, or never ran it and was cancelled (checked once the queues have
    /// drained); no work runs twice or for another round, and a run that started left nothing registered.
    /// </summary>
    [Fact]
    public async Task CancelRacingTheStart_ExactlyOneOutcome_EveryRound()
    {
        int rounds = TestUtil.Stress(20_000);
        var ranFor = new int[rounds];
        var cancelledRound = new bool[rounds];
        CancellationTokenSource? cts = null;
        SpindleTask<int> task = default;
        int succeeded = 0;

        int ran = await Race.Run(
            rounds,
            before: i =>
            {
                cts = new CancellationTokenSource();
                int round = i;
                task = Spindle.Run(() =>
                {
                    Interlocked.Increment(ref ranFor[round]);
                    return round;
                }, cts.Token);
            },
            after: i =>
            {
                try
                {
                    Assert.Equal(i, TestUtil.WithTimeout(task).GetAwaiter().GetResult());
                    Assert.Equal(1, Volatile.Read(ref ranFor[i]));
                    Assert.Equal(0, TokenRegistrationLeakTests.RegistrationCount(cts!)); // dropped when it started
                    succeeded++;
                }
                catch (OperationCanceledException e)
                {
                    Assert.Equal(cts!.Token, e.CancellationToken);
                    cancelledRound[i] = true;
                }
                cts!.Dispose();
            },
            i =>
            {
                // A spread of delays, so that the worker's start (a wake-up away) wins some rounds and the token others.
                Thread.SpinWait(i % 32 * 100);
                cts!.Cancel();
            });

        // A cancelled item is let go of by the worker that reaches it, later: wait for the queues to drain.
        await TestUtil.WithTimeout(Spindle.Run(() => { }));
        Thread.Sleep(50);
        int cancelled = 0;
        for (int i = 0; i < ran; i++)
        {
            int count = Volatile.Read(ref ranFor[i]);
            if (cancelledRound[i])
            {
                cancelled++;
                Assert.True(count == 0, $"round {i} was cancelled, and its work ran {count} times");
            }
            else
            {
                Assert.True(count == 1, $"round {i} succeeded, and its work ran {count} times");
            }
        }
        Assert.Equal(ran, succeeded + cancelled);
        Assert.True(ran >= Math.Min(rounds, 1_000), $"only {ran} rounds ran");
        Assert.True(cancelled > 0 && succeeded > 0, $"one side won every round: {succeeded} ran, {cancelled} cancelled");
    }
}

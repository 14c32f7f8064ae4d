using System;
using System.Collections.Concurrent;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using static SpindleLib.Tests.Combinators.CombinatorTestSupport;
using static SpindleLib.Tests.UnobservedReports;

namespace SpindleLib.Tests.Combinators;

/// <summary>
/// The CancellationToken overloads over BCL tasks and ValueTasks: the token cancels the wait, not the inputs; inputs are
/// still read when they finish, and their failures reported, never lost. Sequential: they watch UnobservedException.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class BclCancellationTests
{
    [Fact]
    public async Task WhenAll_Tasks_TokenFiresFirst_CancelledAndALaterFailureIsReported()
    {
        var sources = new[] { new TaskCompletionSource(), new TaskCompletionSource() };
        var late = new InvalidTimeZoneException("late");
        using var cts = new CancellationTokenSource();
        var watch = UnobservedReports.Start(Own.InstancesOrOnTestThreads(late));
        ConcurrentQueue<Exception> reported = watch.Reports;
        using (watch)
        {
            SpindleTask all = SpindleTask.WhenAll([sources[0].Task, sources[1].Task], cts.Token);
            sources[0].SetResult();
            cts.Cancel();
            Assert.Equal(SpindleTaskStatus.Canceled, all.Status);
            OperationCanceledException oce = await Assert.ThrowsAnyAsync<OperationCanceledException>(() => TestUtil.WithTimeout(all));
            Assert.Equal(cts.Token, oce.CancellationToken);
            sources[1].SetException(late);
            // The BCL may schedule the combinator's continuation (it does under xUnit's synchronization context).
            TestUtil.SpinUntil(() => !reported.IsEmpty, 10);
            Thread.Sleep(20); // and a second report, if there were one, would show up
        }
        Assert.Same(late, Assert.Single(reported));
        Assert.False(sources[1].Task.IsCanceled); // the input itself was not cancelled
    }

    [Fact]
    public async Task WhenAny_Tasks_TokenFiresFirst_Cancelled_LaterWinnerChangesNothing()
    {
        var sources = new[] { new TaskCompletionSource(), new TaskCompletionSource() };
        using var cts = new CancellationTokenSource();
        SpindleTask<int> any = SpindleTask.WhenAny([sources[0].Task, sources[1].Task], cts.Token);
        cts.Cancel();
        sources[1].SetResult();
        sources[0].SetResult();
        await Assert.ThrowsAnyAsync<OperationCanceledException>(() => TestUtil.WithTimeout(any));
    }

    [Fact]
    public async Task WhenAny_Tasks_CompletesBeforeTheToken_ReturnsTheIndex()
    {
        using var cts = new CancellationTokenSource();
        for (int round = 0; round < 100; round++)
        {
            var sources = new[] { new TaskCompletionSource(), new TaskCompletionSource() };
            SpindleTask<int> any = SpindleTask.WhenAny([sources[0].Task, sources[1].Task], cts.Token);
            sources[round % 2].SetResult();
            Assert.Equal(round % 2, await TestUtil.WithTimeout(any));
            sources[(round + 1) % 2].SetResult();
        }
        cts.Cancel(); // nothing is registered any more: nothing to cancel
    }

    [Fact]
    public void TokenAlreadyCancelled_EveryKind_CancelledAtOnce_AndTheInputsAreStillRead()
    {
        using var cts = new CancellationTokenSource();
        cts.Cancel();
        var error = new FormatException("read later");
        var typedSource = new CountingValueTaskSource<int>();
        var untypedSource = new CountingValueTaskSource<int>();
        var taskSource = new TaskCompletionSource<int>();
        ConcurrentQueue<Exception> reported = Observe(Own.InstancesOrOnTestThreads(error), () =>
        {
            Assert.Equal(SpindleTaskStatus.Canceled, SpindleTask.WhenAll([Task.CompletedTask], cts.Token).Status);
            Assert.Equal(SpindleTaskStatus.Canceled, SpindleTask.WhenAny([Task.CompletedTask], cts.Token).Status);
            Assert.Equal(SpindleTaskStatus.Canceled, SpindleTask.WhenAll([taskSource.Task], cts.Token).Status);
            Assert.Equal(SpindleTaskStatus.Canceled, SpindleTask.WhenAny([typedSource.Task, new ValueTask<int>(1)], cts.Token).Status);
            Assert.Equal(SpindleTaskStatus.Canceled, SpindleTask.WhenAll([untypedSource.UntypedTask], cts.Token).Status);
            Assert.Equal(SpindleTaskStatus.Canceled, SpindleTask.WhenAny([default(ValueTask)], cts.Token).Status);
            typedSource.SetException(error);
            taskSource.SetResult(1);
        });
        Assert.Same(error, Assert.Single(reported));
        Assert.Equal(1, typedSource.Reads);
        Assert.Equal(0, untypedSource.Reads); // still pending: read when it finishes
    }

    [Fact]
    public async Task TypedForms_TokenFiresFirst_Cancelled()
    {
        using var cts = new CancellationTokenSource();
        var source = new TaskCompletionSource<int>();
        var valueSource = new CountingValueTaskSource<int>();
        SpindleTask<int[]> all = SpindleTask.WhenAll([source.Task, Task.FromResult(2)], cts.Token);
        SpindleTask<(int, int)> any = SpindleTask.WhenAny([valueSource.Task], cts.Token);
        SpindleTask<(int, int)> anySpindle = SpindleTask.WhenAny([Await(new Promise<int>())], cts.Token);
        SpindleTask<(int, int, string)> tuple = SpindleTask.WhenAny(Await(new Promise<int>()), Await(new Promise<string>()), cts.Token);
        cts.Cancel();
        await Assert.ThrowsAnyAsync<OperationCanceledException>(() => TestUtil.WithTimeout(all));
        await Assert.ThrowsAnyAsync<OperationCanceledException>(() => TestUtil.WithTimeout(any));
        await Assert.ThrowsAnyAsync<OperationCanceledException>(() => TestUtil.WithTimeout(anySpindle));
        await Assert.ThrowsAnyAsync<OperationCanceledException>(() => TestUtil.WithTimeout(tuple));
        source.SetResult(1);
        valueSource.SetResult(1);
        Assert.Equal(1, valueSource.Reads);
    }
}

using System;
using System.Collections.Concurrent;
using System.Threading;
using System.Threading.Tasks;
using static SpindleLib.Tests.UnobservedReports;

namespace SpindleLib.Tests.Combinators;

/// <summary>WhenAll / WhenAny with a CancellationToken: the token cancels the wait, never loses an input's failure.</summary>
[Collection(SequentialCollection.Name)]
public sealed class CombinatorCancellationTests
{
    private static async SpindleTask Await(SpindleTask task) => await task;

    [Fact]
    public async Task WhenAll_TokenFiresFirst_CompletesCanceled_AndALaterInputFailureIsReported()
    {
        var late = new FormatException("late");
        var watch = UnobservedReports.Start(Own.InstancesOrOnTestThreads(late));
        ConcurrentQueue<Exception> reported = watch.Reports;
        using (watch)
        {
            using var cts = new CancellationTokenSource();
            var a = new Promise();
            var b = new Promise();
            SpindleTask all = SpindleTask.WhenAll([Await(a.Task), Await(b.Task)], cts.Token);
            a.SetResult();
            Assert.False(all.IsCompleted);
            cts.Cancel();
            Assert.Equal(SpindleTaskStatus.Canceled, all.Status);
            await Assert.ThrowsAnyAsync<OperationCanceledException>(() => TestUtil.WithTimeout(all.AsTask()));
            b.SetException(late);
            Assert.Equal(new Exception[] { late }, reported.ToArray());
        }
    }

    [Fact]
    public void WhenAny_TokenAlreadyCanceled_CancelsAtOnceAndStillReadsTheInputs()
    {
        using var cts = new CancellationTokenSource();
        cts.Cancel();
        var a = new Promise();
        SpindleTask input = Await(a.Task);
        SpindleTask<int> any = SpindleTask.WhenAny([input, SpindleTask.CompletedTask], cts.Token);
        Assert.Equal(SpindleTaskStatus.Canceled, any.Status);
        a.SetResult();
        Assert.Throws<InvalidOperationException>(() => input.GetAwaiter().GetResult()); // consumed (forgotten) by the combinator
    }

    [Fact]
    public async Task WhenAny_CompletesBeforeTheToken_ReturnsTheIndex_AndLaterCancellationChangesNothing()
    {
        using var cts = new CancellationTokenSource();
        var promises = new[] { new Promise(), new Promise() };
        for (int round = 0; round < 200; round++)
        {
            promises[0].Reset();
            promises[1].Reset();
            SpindleTask<int> any = SpindleTask.WhenAny([promises[0].Task, promises[1].Task], cts.Token);
            promises[1].SetResult();
            Assert.Equal(1, await TestUtil.WithTimeout(any.AsTask()));
            promises[0].SetResult();
        }
        cts.Cancel(); // the pooled combinator dropped its registration when its result was read: nothing to cancel now
        promises[0].Reset();
        promises[1].Reset();
        SpindleTask<int> next = SpindleTask.WhenAny(promises[0].Task, promises[1].Task);
        promises[0].SetResult();
        Assert.Equal(0, next.GetAwaiter().GetResult());
        promises[1].SetResult();
    }

    /// <summary>Two inputs of one kind: the pending tasks, and actions completing input 0 and input 1.</summary>
    private static (SpindleTask<int> Any, Action CompleteWinner, Action CompleteLoser) Inputs(string kind, Promise a, Promise b, CancellationToken token)
    {
        if (kind == "Task")
        {
            var x = new TaskCompletionSource();
            var y = new TaskCompletionSource();
            return (SpindleTask.WhenAny([x.Task, y.Task], token), x.SetResult, y.SetResult);
        }
        a.Reset();
        b.Reset();
        return (SpindleTask.WhenAny([a.Task, b.Task], token), a.SetResult, b.SetResult);
    }

    [Theory]
    [InlineData("Spindle")]
    [InlineData("Task")]
    public void CancelVersusComplete_RacingOnTwoThreads_ExactlyOneOutcome(string kind)
    {
        int rounds = TestUtil.Stress(2_000);
        var a = new Promise();
        var b = new Promise();
        a.SetResult();
        b.SetResult();
        int canceled = 0;
        int won = 0;
        for (int round = 0; round < rounds; round++)
        {
            using var cts = new CancellationTokenSource();
            (SpindleTask<int> any, Action completeWinner, Action completeLoser) = Inputs(kind, a, b, cts.Token);
            var counter = new CombinatorTestSupport.ContinuationCounter();
            any.GetAwaiter().UnsafeOnCompleted(counter.Action);
            using var barrier = new Barrier(2);
            Task t = Task.Run(() =>
            {
                barrier.SignalAndWait();
                cts.Cancel();
            });
            barrier.SignalAndWait();
            completeWinner();
            Assert.True(t.Wait(TimeSpan.FromSeconds(10)), $"round {round}: the cancelling thread hung");
            // The BCL may schedule a Task input's continuation (it does under xUnit's synchronization context).
            TestUtil.SpinUntil(() => counter.Count > 0, 10);
            Assert.Equal(1, counter.Count);
            try
            {
                Assert.Equal(0, any.GetAwaiter().GetResult());
                won++;
            }
            catch (OperationCanceledException)
            {
                canceled++;
            }
            completeLoser();
        }
        Assert.Equal(rounds, won + canceled);
    }
}

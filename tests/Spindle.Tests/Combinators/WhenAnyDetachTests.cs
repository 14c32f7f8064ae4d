using System;
using System.Collections.Concurrent;
using System.Threading;
using System.Threading.Tasks;
using static SpindleLib.Tests.Combinators.CombinatorTestSupport;

namespace SpindleLib.Tests.Combinators;

/// <summary>
/// When a WhenAny's race is decided (an input won, or its token cancelled the wait), it detaches from the other inputs
/// that allow it, as <c>Task.WhenAny</c> removes its continuations from the losers: a losing promise can be reset at
/// once, a losing signal wait ends without consuming a later set, a losing async method is forgotten (it reads its own
/// outcome), and a fault that nobody will now read is still reported exactly once.
/// </summary>
[Collection(SequentialCollection.Name)] // UnobservedException is process-wide
public class WhenAnyDetachTests
{
    [Theory]
    [InlineData(2)]
    [InlineData(3)]
    [InlineData(8)]
    public void WhenAny_PromiseLosers_CanBeResetAsSoonAsTheWinnerCompletes(int n)
    {
        Promise[] promises = Promises(n);
        for (int round = 0; round < 3; round++)
        {
            SpindleTask<int> any = SpindleTask.WhenAny(TasksOf(promises));
            int winner = round % n;
            promises[winner].SetResult();
            Assert.Equal(winner, any.GetAwaiter().GetResult());
            foreach (Promise p in promises)
            {
                p.Reset(); // the losers are still pending: before detaching, this threw "an await on it is still pending"
            }
        }
    }

    [Fact]
    public void WhenAny_ContinuationOfTheWinner_CanResetTheLosersInline()
    {
        Promise[] promises = Promises(3);
        SpindleTask<int> any = SpindleTask.WhenAny(TasksOf(promises));
        Exception? failure = null;
        any.GetAwaiter().UnsafeOnCompleted(() =>
        {
            // Runs inline, inside promises[1].SetResult: the losers must already be detached here.
            failure = Record.Exception(() =>
            {
                promises[0].Reset();
                promises[2].Reset();
            });
        });
        promises[1].SetResult();
        Assert.Null(failure);
        Assert.Equal(1, any.GetAwaiter().GetResult());
    }

    [Fact]
    public void WhenAny_DetachedLoser_CannotBeAwaitedAgainInTheSameUse()
    {
        Promise[] promises = Promises(2);
        SpindleTask loser = promises[1].Task;
        SpindleTask<int> any = SpindleTask.WhenAny(promises[0].Task, loser);
        promises[0].SetResult();
        Assert.Equal(0, any.GetAwaiter().GetResult());
        // The WhenAny consumed the task: a second await of it is still the await-once error, never a silent wait.
        var error = Assert.Throws<InvalidOperationException>(() => loser.GetAwaiter().UnsafeOnCompleted(() => { }));
        Assert.Contains("Preserve()", error.Message, StringComparison.Ordinal);
        promises[1].Reset();
        SpindleTask next = promises[1].Task;
        promises[1].SetResult();
        next.GetAwaiter().GetResult();
    }

    [Fact]
    public void WhenAny_LosingPromiseFailsLater_ReportedExactlyOnce_ACancelledOneNot()
    {
        Promise[] promises = Promises(3);
        var error = new InvalidTimeZoneException("loser");
        ConcurrentQueue<Exception> reported = Observe(() =>
        {
            SpindleTask<int> any = SpindleTask.WhenAny(TasksOf(promises));
            promises[0].SetResult();
            Assert.Equal(0, any.GetAwaiter().GetResult());
            promises[1].SetException(error);
            promises[2].SetCanceled();
        });
        Assert.Equal(new Exception[] { error }, reported.ToArray());
    }

    [Fact]
    public void WhenAny_LosingAsyncMethod_IsForgotten_ItsBoxReadsItselfAndItsFaultIsReportedOnce()
    {
        var inner = new Promise();
        var other = new Promise();
        var error = new InvalidTimeZoneException("async loser");
        SpindleTask loser = Await(inner);
        ConcurrentQueue<Exception> reported = Observe(() =>
        {
            SpindleTask<int> any = SpindleTask.WhenAny(loser, other.Task);
            other.SetResult();
            Assert.Equal(1, any.GetAwaiter().GetResult());
            Assert.False(WasConsumed(loser)); // still running
            inner.SetException(error);
        });
        Assert.Equal(new Exception[] { error }, reported.ToArray());
        Assert.True(WasConsumed(loser), "the forgotten box read its own outcome (and went back to its pool)");
    }

    [Fact]
    public void WhenAny_LosingSignalWait_EndsWithoutConsumingALaterSet_AndTheSignalCanBeWaitedAgain()
    {
        var signal = new Signal();
        var other = new Promise();
        for (int round = 0; round < 3; round++)
        {
            other.Reset();
            SpindleTask<int> any = SpindleTask.WhenAny(signal.WaitAsync(), other.Task);
            Assert.True(signal.HasWaiter);
            other.SetResult();
            Assert.Equal(1, any.GetAwaiter().GetResult());
            Assert.False(signal.HasWaiter); // the losing wait is over
        }
        signal.Set();
        Assert.True(signal.IsSet); // kept for the next wait, not swallowed by a wait that lost
        SpindleTask next = signal.WaitAsync();
        Assert.True(next.IsCompleted);
        next.GetAwaiter().GetResult();
        Assert.False(signal.IsSet);
    }

    [Fact]
    public void WhenAny_CancelledByItsToken_DetachesEveryInput()
    {
        Promise[] promises = Promises(3);
        var signal = new Signal();
        using var cts = new CancellationTokenSource();
        SpindleTask<int> any = SpindleTask.WhenAny([promises[0].Task, promises[1].Task, signal.WaitAsync(), promises[2].Task], cts.Token);
        cts.Cancel();
        Assert.ThrowsAny<OperationCanceledException>(() => any.GetAwaiter().GetResult());
        foreach (Promise p in promises)
        {
            p.Reset();
        }
        Assert.False(signal.HasWaiter);
    }

    [Theory]
    [InlineData(2)]
    [InlineData(3)]
    [InlineData(8)]
    public void WhenAny_LosersLeftPendingAndReset_SteadyStateAllocatesNothing(int n)
    {
        Promise[] promises = Promises(n);
        var tasks = new SpindleTask[n];
        TestUtil.AssertSteadyStateAllocatesNothing(i =>
        {
            for (int k = 0; k < n; k++)
            {
                promises[k].Reset();
                tasks[k] = promises[k].Task;
            }
            SpindleTask<int> any = SpindleTask.WhenAny(tasks);
            int winner = i % n;
            promises[winner].SetResult();
            if (any.GetAwaiter().GetResult() != winner)
            {
                throw new InvalidOperationException("wrong winner");
            }
        }, 1_000);
    }

    [Fact]
    public async Task WhenAny_SignalSetRacesTheWinnersDetach_TheSignalIsNeverLeftWaiting()
    {
        var signal = new Signal();
        var other = new Promise();
        SpindleTask<int> any = default;
        await TestUtil.WithTimeout(Race.Run(
            TestUtil.Stress(5_000),
            before: round =>
            {
                other.Reset();
                signal.Reset();
                any = SpindleTask.WhenAny(signal.WaitAsync(), other.Task);
            },
            after: round =>
            {
                int winner = any.GetAwaiter().GetResult();
                Assert.False(signal.HasWaiter, $"round {round}: the losing wait was left pending");
                if (winner == 0)
                {
                    Assert.False(signal.IsSet, $"round {round}: the winning wait did not consume the set");
                }
                // Either way the signal takes a new wait at once (a second pending wait would throw).
                SpindleTask next = signal.WaitAsync();
                signal.Set();
                Assert.True(next.IsCompleted);
                next.GetAwaiter().GetResult();
            },
            _ => other.SetResult(),
            _ => signal.Set()), 60);
    }
}

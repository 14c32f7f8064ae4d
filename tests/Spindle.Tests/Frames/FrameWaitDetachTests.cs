using System;
using System.Collections.Generic;
using System.Threading;
using System.Threading.Tasks;
using static SpindleLib.Tests.Combinators.CombinatorTestSupport;
using static SpindleLib.Tests.UnobservedReports;

namespace SpindleLib.Tests.Frames;

/// <summary>
/// A frame-loop wait (WaitUntil, WaitWhile, Delay, DelayFrame, a token-carrying Yield or NextFrame) passed to a
/// combinator is let go of as soon as the race is decided, as every other Spindle source is (decisions 13): a losing
/// predicate is never polled again, a losing delay's timer leaves the loop's wheel, and the waiter and the combinator go
/// back to their pools once nothing holds them.
/// </summary>
[Collection(SequentialCollection.Name)] // UnobservedException and the pool hook are process-wide
public sealed class FrameWaitDetachTests
{
    private sealed class Gate
    {
        public volatile bool Ready;
        public int Calls;
    }

    private static bool Poll(Gate g)
    {
        Interlocked.Increment(ref g.Calls);
        return g.Ready;
    }

    [Fact]
    public void WhenAny_DelayWins_TheLosingWaitUntilIsNeverPolledAgain_AndItAndTheCombinatorArePooled()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        var gate = new Gate();
        SpindleTask wait = loop.WaitUntil(gate, Poll);
        object waiter = wait._source!;
        SpindleTask<int> any = SpindleTask.WhenAny(wait, loop.Delay(TimeSpan.FromMilliseconds(30)));
        object combinator = any._source!;
        loop.RunUntil(() => any.IsCompleted, 100);
        Assert.Equal(1, any.GetAwaiter().GetResult());
        // Read by its consumer, with the loser let go of: nothing else holds the combinator.
        AssertTopOfThisThreadsPool(combinator, "the combinator");
        int calls = Volatile.Read(ref gate.Calls);
        loop.RunFrames(5);
        Assert.Equal(calls, Volatile.Read(ref gate.Calls));
        Assert.True(WasConsumed(wait));
        Assert.Equal(0, loop.QueuedCount);
        AssertTopOfThisThreadsPool(waiter, "the losing WaitUntil's waiter");
    }

    [Fact]
    public void WhenAny_PromiseWins_TheLosingLoopDelayLeavesTheWheelAtOnce_AndItsWaiterIsPooled()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        var work = new Promise();
        SpindleTask delay = loop.Delay(TimeSpan.FromSeconds(30));
        SpindleTask frames = loop.DelayFrame(1000);
        object waiter = delay._source!;
        SpindleTask<int> any = SpindleTask.WhenAny(work.Task, delay, frames);
        object combinator = any._source!;
        Assert.Equal(2, loop.PendingTimers);
        work.SetResult();
        Assert.Equal(0, any.GetAwaiter().GetResult());
        AssertTopOfThisThreadsPool(combinator, "the combinator");
        Assert.True(WasConsumed(delay));
        Assert.True(WasConsumed(frames));
        loop.RunFrame(); // a loop's wheel takes its cancelled timers out at the next frame's pass, as for a cancellation
        Assert.Equal(0, loop.PendingTimers);
        Assert.Equal(0, loop.QueuedCount);
        AssertInThisThreadsPoolOnce(waiter, "the losing delay's waiter");
    }

    [Fact]
    public void WhenAny_TheWinnerAlreadyFinished_PendingFrameWaitsAreAbandoned()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        var gate = new Gate();
        SpindleTask wait = loop.WaitUntil(gate, Poll);
        SpindleTask delay = loop.Delay(TimeSpan.FromSeconds(30));
        Assert.Equal(0, SpindleTask.WhenAny(SpindleTask.CompletedTask, wait, delay).GetAwaiter().GetResult());
        Assert.True(WasConsumed(wait));
        Assert.True(WasConsumed(delay));
        int calls = Volatile.Read(ref gate.Calls);
        loop.RunFrames(5);
        Assert.Equal(calls, Volatile.Read(ref gate.Calls));
        Assert.Equal(0, loop.QueuedCount);
        Assert.Equal(0, loop.PendingTimers);
    }

    [Fact]
    public void WhenAll_ItsTokenWins_TheFrameWaitsAreLetGoOf()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        var gate = new Gate();
        using var cts = new CancellationTokenSource();
        SpindleTask wait = loop.WaitWhile(gate, static g => !Poll(g));
        SpindleTask delay = loop.Delay(TimeSpan.FromSeconds(30));
        SpindleTask all = SpindleTask.WhenAll([wait, delay], cts.Token);
        loop.RunFrame();
        cts.Cancel();
        Assert.Throws<TaskCanceledException>(() => all.GetAwaiter().GetResult());
        int calls = Volatile.Read(ref gate.Calls);
        loop.RunFrames(5);
        Assert.Equal(calls, Volatile.Read(ref gate.Calls));
        Assert.Equal(0, loop.QueuedCount);
        Assert.Equal(0, loop.PendingTimers);
    }

    [Fact]
    public void WithTimeout_OverAFrameWait_TheTimeoutWins_TheWaitIsLetGoOf()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        var clock = new ManualClock();
        using var timers = new TimerWheel(clock);
        var gate = new Gate();
        SpindleTask bounded = loop.WaitUntil(gate, Poll).WithTimeout(TimeSpan.FromMilliseconds(5), timers);
        loop.RunFrame();
        clock.Advance(TimeSpan.FromMilliseconds(10));
        Assert.Throws<TimeoutException>(() => bounded.GetAwaiter().GetResult());
        int calls = Volatile.Read(ref gate.Calls);
        loop.RunFrames(5);
        Assert.Equal(calls, Volatile.Read(ref gate.Calls));
        Assert.Equal(0, loop.QueuedCount);
        Assert.Equal(0, loop.PendingTimers);
    }

    [Fact]
    public void WhenAny_ATokenOnTheFrameWaitStillCancelsIt_AndTheWaitWins()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        var work = new Promise();
        using var cts = new CancellationTokenSource();
        SpindleTask delay = loop.Delay(TimeSpan.FromSeconds(30), cts.Token);
        SpindleTask<int> any = SpindleTask.WhenAny(work.Task, delay);
        cts.Cancel(); // the delay wins, cancelled: WhenAny passes on its winner's cancellation
        Assert.ThrowsAny<OperationCanceledException>(() => any.GetAwaiter().GetResult());
        work.Reset(); // detached: free at once
        loop.RunFrames(2);
        Assert.Equal(0, loop.QueuedCount);
        Assert.Equal(0, loop.PendingTimers);
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task WhenAny_TheLoopCompletesTheWaitAsAWorkerDecidesTheRace_ExactlyOneOutcome(bool timed)
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        var gate = new Gate();
        var work = new Promise();
        SpindleTask wait = default;
        SpindleTask<int> any = default;
        int[] wins = new int[2];
        // Reports on its own threads (the racers', one of which runs the frames), and a stale read's await-once error
        // wherever it is made.
        var watch = UnobservedReports.Start(Own.Any(Own.ReportedOnTestThreads(), Own.AwaitOnceErrors()));
        System.Collections.Concurrent.ConcurrentQueue<Exception> faults = watch.Reports;
        using (watch)
        {
            int rounds = await TestUtil.WithTimeout(Race.Run(
                TestUtil.Stress(4_000),
                before: round =>
                {
                    // Racer 0's thread, which runs the frames: the loop thread.
                    work.Reset();
                    gate.Ready = false;
                    wait = timed ? loop.Delay(FrameUtil.Step) : loop.WaitUntil(gate, Poll);
                    gate.Ready = true;
                    any = SpindleTask.WhenAny(work.Task, wait);
                },
                after: round =>
                {
                    int winner = any.GetAwaiter().GetResult();
                    wins[winner]++;
                    Assert.True(WasConsumed(wait), $"round {round}: the frame wait (winner {winner}) was not let go of or read");
                    loop.RunFrame(); // a detached waiter still in a queue is dropped by its phase
                    Assert.Equal(0, loop.QueuedCount);
                    Assert.Equal(0, loop.PendingTimers);
                    AssertNoWaiterTwiceInThePool(round);
                },
                _ => loop.RunFrame(),
                _ => work.SetResult()), 120);
            Assert.Equal(rounds, wins[0] + wins[1]);
        }
        Assert.Empty(faults);
    }

#if DEBUG
    [Fact]
    public void TryDetach_ThePhaseCompletesTheWaitBetweenItsAbandonAndItsRelease_NothingRunsAndTheWaiterIsPooledOnce()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        var gate = new Gate();
        var work = new Promise();
        SpindleTask wait = loop.WaitUntil(gate, Poll);
        object waiter = wait._source!;
        SpindleTask<int> any = SpindleTask.WhenAny(work.Task, wait);
        int returned = 0;
        PoolTestHooks.Returning = o => { if (ReferenceEquals(o, waiter)) { Interlocked.Increment(ref returned); } };
        FrameWaiter.TestHookAfterAbandoned = _ =>
        {
            gate.Ready = true;
            loop.RunFrame(); // the phase meets the abandoned wait, which it may complete: nobody runs
        };
        try
        {
            work.SetResult();
        }
        finally
        {
            FrameWaiter.TestHookAfterAbandoned = null;
        }
        try
        {
            Assert.Equal(0, any.GetAwaiter().GetResult());
            Assert.True(WasConsumed(wait));
            loop.RunFrames(2);
            Assert.Equal(0, loop.QueuedCount);
            Assert.Equal(1, Volatile.Read(ref returned));
        }
        finally
        {
            PoolTestHooks.Returning = null;
        }
    }

    [Fact]
    public void TryDetach_ThePredicateThrowsBetweenTheAbandonAndTheRelease_TheFaultIsReportedOnce()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        var work = new Promise();
        bool fail = false;
        var late = new InvalidOperationException("late predicate");
        SpindleTask wait = loop.WaitUntil(() => fail ? throw late : false);
        SpindleTask<int> any = SpindleTask.WhenAny(work.Task, wait);
        FrameWaiter.TestHookAfterAbandoned = _ =>
        {
            fail = true;
            loop.RunFrame();
        };
        System.Collections.Concurrent.ConcurrentQueue<Exception> reported;
        try
        {
            reported = Observe(Own.InstancesOrOnTestThreads(late), () =>
            {
                work.SetResult();
                Assert.Equal(0, any.GetAwaiter().GetResult());
                loop.RunFrames(2);
            });
        }
        finally
        {
            FrameWaiter.TestHookAfterAbandoned = null;
        }
        Exception only = Assert.Single(reported);
        Assert.Equal("late predicate", only.Message);
        Assert.Equal(0, loop.QueuedCount);
    }
#endif

    /// <summary>Asserts <paramref name="item"/> is on top of this thread's pool of its type (rents it, then returns it).</summary>
    private static void AssertTopOfThisThreadsPool(object item, string what)
    {
        object? top = RentLike(item);
        try
        {
            Assert.True(ReferenceEquals(item, top), what + " is not back in its pool");
        }
        finally
        {
            if (top is not null)
            {
                ReturnLike(item, top);
            }
        }
    }

    /// <summary>Asserts <paramref name="item"/> is in this thread's pool of its type exactly once (among its first 64).</summary>
    private static void AssertInThisThreadsPoolOnce(object item, string what)
    {
        var rented = new List<object>();
        try
        {
            while (rented.Count < 64 && RentLike(item) is { } o)
            {
                rented.Add(o);
            }
            int n = rented.FindAll(o => ReferenceEquals(o, item)).Count;
            Assert.True(n == 1, $"{what} is in its pool {n} times");
        }
        finally
        {
            var back = new HashSet<object>(ReferenceEqualityComparer.Instance);
            foreach (object o in rented)
            {
                if (back.Add(o))
                {
                    ReturnLike(item, o);
                }
            }
        }
    }

    /// <summary>A waiter returned to its pool twice would serve two waits at once.</summary>
    private static void AssertNoWaiterTwiceInThePool(int round)
    {
        AssertNoneTwice<PhaseWaiter>(round);
        AssertNoneTwice<PredicateWaiter<Gate>>(round);
    }

    private static void AssertNoneTwice<T>(int round) where T : class, IPoolNode<T>
    {
        var seen = new List<T>();
        try
        {
            while (seen.Count < 64 && ObjectPool<T>.TryRent() is { } o)
            {
                Assert.True(!seen.Contains(o), $"round {round}: a {typeof(T).Name} was in the pool twice");
                seen.Add(o);
            }
        }
        finally
        {
            var back = new HashSet<T>(ReferenceEqualityComparer.Instance);
            foreach (T o in seen)
            {
                if (back.Add(o))
                {
                    ObjectPool<T>.Return(o);
                }
            }
        }
    }

    private static object? RentLike(object item)
        => typeof(ObjectPool<>).MakeGenericType(item.GetType()).GetMethod("TryRent")!.Invoke(null, null);

    private static void ReturnLike(object item, object o)
        => typeof(ObjectPool<>).MakeGenericType(item.GetType()).GetMethod("Return")!.Invoke(null, [o]);
}

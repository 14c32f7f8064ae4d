using System;
using System.Collections.Concurrent;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using static SpindleLib.Tests.Combinators.CombinatorTestSupport;
using static SpindleLib.Tests.UnobservedReports;

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
    public void WhenAny_DetachedPromiseLoser_CanBeAwaitedAgainInTheSameUse_OneAwaiterAtATime()
    {
        Promise[] promises = Promises(2);
        SpindleTask loser = promises[1].Task;
        SpindleTask<int> any = SpindleTask.WhenAny(promises[0].Task, loser);
        promises[0].SetResult();
        Assert.Equal(0, any.GetAwaiter().GetResult());
        // The WhenAny no longer waits on it: the same use may be awaited again, as a Task may (RacedEveryTurnTests), and
        // still by one awaiter at a time.
        int ran = 0;
        loser.GetAwaiter().UnsafeOnCompleted(() => ran++);
        var error = Assert.Throws<InvalidOperationException>(() => loser.GetAwaiter().UnsafeOnCompleted(() => { }));
        Assert.Contains("Preserve()", error.Message, StringComparison.Ordinal);
        promises[1].SetResult();
        Assert.Equal(1, ran);
        loser.GetAwaiter().GetResult();
    }

    [Fact]
    public void WhenAny_LosingPromiseFailsLater_ReportedExactlyOnce_ACancelledOneNot()
    {
        Promise[] promises = Promises(3);
        var error = new InvalidTimeZoneException("loser");
        ConcurrentQueue<Exception> reported = Observe(Own.Any(Own.Instances(error), Own.Cancellations()), () =>
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
        ConcurrentQueue<Exception> reported = Observe(Own.Instances(error), () =>
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

    [Fact]
    public void WhenAny_AnInputAlreadyFinished_PendingPromiseLoserCanBeReset()
    {
        var p = new Promise();
        SpindleTask<int> any = SpindleTask.WhenAny(SpindleTask.CompletedTask, p.Task);
        Assert.Equal(0, any.GetAwaiter().GetResult());
        p.Reset(); // settled without a combinator: the pending loser is abandoned, not forgotten
    }

    [Fact]
    public void WhenAny_AnInputAlreadyFinished_SignalLoserDoesNotSwallowTheNextSet()
    {
        var s = new Signal();
        SpindleTask<int> any = SpindleTask.WhenAny(SpindleTask.CompletedTask, s.WaitAsync());
        Assert.Equal(0, any.GetAwaiter().GetResult());
        Assert.False(s.HasWaiter, "the losing wait is still pending");
        s.Set();
        Assert.True(s.IsSet, "the set went to a wait that lost");
    }

    [Fact]
    public void WhenAny_TokenAlreadyCancelled_PromiseInputsCanBeReset()
    {
        var p = new Promise();
        var q = new Promise();
        SpindleTask<int> any = SpindleTask.WhenAny([p.Task, q.Task], new CancellationToken(true));
        Assert.ThrowsAny<OperationCanceledException>(() => any.GetAwaiter().GetResult());
        p.Reset(); // the race was decided before the inputs were registered: each is let go of as it is registered
        q.Reset();
    }

    [Fact]
    public void WhenAny_AnInputWinsWhileLaterInputsAreRegistered_TheLaterPromiseCanBeReset()
    {
        var later = new Promise();
        // A source that finishes just as it is awaited: what another thread completing input 0 right after its
        // registration (while input 1 is still being registered) looks like, made deterministic.
        var racing = new CompletesWhenAwaited();
        SpindleTask<int> any = SpindleTask.WhenAny(new SpindleTask(racing, 0), later.Task);
        Assert.Equal(0, any.GetAwaiter().GetResult());
        later.Reset();
    }

    [Fact]
    public void WhenAny_LoserCompletedDuringTheRaceWithItsContinuationQueued_IsReadBeforeTheResult_ItsFaultReported()
    {
        // A losing input whose source dispatches its continuations finishes while the race is decided: its slot is
        // queued, so the winner cannot detach it. It must still be read before the combined task completes, so that the
        // winner's continuation may reset it at once: otherwise the queued slot would read the next use's token.
        var manual = new ManualScheduler();
        Scheduler previous = Scheduler.Default;
        Scheduler.Default = manual;
        try
        {
            var winner = new Promise();
            var loser = new Promise(runContinuationsAsynchronously: true);
            var error = new InvalidTimeZoneException("the loser's fault");
            ConcurrentQueue<Exception> reported = Observe(Own.Instances(error), () =>
            {
                SpindleTask<int> any = SpindleTask.WhenAny(winner.Task, loser.Task);
                loser.SetException(error);  // the slot is queued, not yet run
                winner.SetResult();         // wins: the loser cannot be detached (its core has completed)
                Assert.Equal(0, any.GetAwaiter().GetResult());
                loser.Reset();              // "a losing promise can be reset at once"
                manual.RunAll();            // the queued slot finds the loser already read
            });
            Assert.Equal(new Exception[] { error }, reported.ToArray());
        }
        finally
        {
            Scheduler.Default = previous;
        }
    }

    /// <summary>
    /// As above, and the caller then forgets the losing promise's task (a completed promise's task may be read again):
    /// the WhenAny's early read had reported the loser's fault already, and the Forget reported it a second time for the
    /// same completion. The same holds for the slot's own late read, and the other way round (forgotten first).
    /// </summary>
    [Fact]
    public void WhenAny_LoserWhoseFaultTheRaceReported_ForgottenAfterwards_IsNotReportedAgain()
    {
        var manual = new ManualScheduler();
        Scheduler previous = Scheduler.Default;
        Scheduler.Default = manual;
        try
        {
            var error = new InvalidTimeZoneException("the loser's fault");
            var other = new InvalidTimeZoneException("forgotten first");
            ConcurrentQueue<Exception> reported = Observe(Own.Instances(error, other), () =>
            {
                var winner = new Promise();
                var loser = new Promise(runContinuationsAsynchronously: true);
                SpindleTask<int> any = SpindleTask.WhenAny(winner.Task, loser.Task);
                loser.SetException(error);  // the slot is queued, not yet run
                winner.SetResult();         // wins, and reads the completed loser at once: its fault is reported
                Assert.Equal(0, any.GetAwaiter().GetResult());
                manual.RunAll();
                loser.Task.Forget();        // the same completion: nothing more to report

                var winner2 = new Promise();
                var loser2 = new Promise(runContinuationsAsynchronously: true);
                SpindleTask<int> any2 = SpindleTask.WhenAny(winner2.Task, loser2.Task);
                loser2.SetException(other); // queued
                loser2.Task.Forget();       // completed: read and reported here first
                winner2.SetResult();        // the race's early read of the same completion
                Assert.Equal(0, any2.GetAwaiter().GetResult());
                manual.RunAll();
            });
            Assert.Single(reported, e => ReferenceEquals(e, error));
            Assert.Single(reported, e => ReferenceEquals(e, other));
        }
        finally
        {
            Scheduler.Default = previous;
        }
    }

    /// <summary>
    /// The delay's node went back to the calling thread's pool, once: a return keeps the object just returned on top of
    /// the thread's own stack, so the next rent here gets it, and the one after must be another object. (Counting the
    /// pools instead was not robust: a return that spills a chunk past the pool's cap drops 16 objects to the GC.)
    /// </summary>
    private static void AssertBackInThisThreadsPoolOnce(SpindleTask delay)
    {
        var node = (TimerNode)delay._source!;
        TimerNode? top = ObjectPool<TimerNode>.TryRent();
        TimerNode? next = ObjectPool<TimerNode>.TryRent();
        try
        {
            Assert.Same(node, top);
            Assert.NotSame(node, next);
        }
        finally
        {
            if (next is not null)
            {
                ObjectPool<TimerNode>.Return(next);
            }
            if (top is not null)
            {
                ObjectPool<TimerNode>.Return(top);
            }
        }
    }

    private static void WarmTimerPool(ManualClock clock, TimerWheel wheel)
    {
        SpindleTask warm = wheel.Delay(1);
        clock.Advance(TimeSpan.FromMilliseconds(1));
        warm.GetAwaiter().GetResult();
    }

    [Fact]
    public void WhenAny_LosingDelay_LeavesTheWheelAtOnceAndGoesBackToItsPool()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        WarmTimerPool(clock, wheel);
        var work = new Promise();
        using var cts = new CancellationTokenSource();
        SpindleTask delay = wheel.Delay(TimeSpan.FromSeconds(30), cts.Token);
        SpindleTask<int> any = SpindleTask.WhenAny(work.Task, delay);
        Assert.Equal(1, wheel.PendingCount);

        work.SetResult();
        Assert.Equal(0, any.GetAwaiter().GetResult());
        // Out of the wheel now, not in 30 s, and read: the node is back in its pool, its token stale.
        Assert.Equal(0, wheel.PendingCount);
        Assert.True(WasConsumed(delay));
        AssertBackInThisThreadsPoolOnce(delay);
        cts.Cancel(); // its registration was dropped: nothing happens
        clock.Advance(TimeSpan.FromSeconds(60));
        Assert.Equal(0, wheel.PendingCount);
        AssertBackInThisThreadsPoolOnce(delay); // not returned a second time
    }

    [Fact]
    public void WhenAny_AnInputAlreadyFinished_PendingDelayLoserLeavesTheWheel()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        WarmTimerPool(clock, wheel);
        SpindleTask delay = wheel.Delay(TimeSpan.FromSeconds(30));
        Assert.Equal(0, SpindleTask.WhenAny(SpindleTask.CompletedTask, delay).GetAwaiter().GetResult());
        Assert.Equal(0, wheel.PendingCount);
        AssertBackInThisThreadsPoolOnce(delay);
    }

    [Fact]
    public async Task WhenAny_PromiseAndDelayFinishAtOnce_OneWinnerAndTheNodeIsRecycledExactlyOnce()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var work = new Promise();
        SpindleTask<int> any = default;
        SpindleTask delay = default;
        await TestUtil.WithTimeout(Race.Run(
            TestUtil.Stress(5_000),
            before: round =>
            {
                work.Reset();
                delay = wheel.Delay(1);
                any = SpindleTask.WhenAny(work.Task, delay);
            },
            after: round =>
            {
                int winner = any.GetAwaiter().GetResult();
                work.Reset(); // completed, or detached: either way the promise is free
                Assert.Equal(0, wheel.PendingCount);
                Assert.True(WasConsumed(delay), $"round {round}: the delay (winner {winner}) was not read");
                AssertNoTimerNodeTwiceInThePool(round);
            },
            _ => work.SetResult(),
            round =>
            {
                clock.Advance(TimeSpan.FromMilliseconds(1));
                AssertNoTimerNodeTwiceInThePool(round); // this thread may have recycled it
            }), 60);
    }

    /// <summary>
    /// A node returned to its pool twice would be handed to two delays at once: rents what this thread's pool (and the
    /// shared one) holds, checks that no node comes out twice, and returns them.
    /// </summary>
    private static void AssertNoTimerNodeTwiceInThePool(int round)
    {
        var seen = new System.Collections.Generic.List<TimerNode>();
        try
        {
            while (seen.Count < 256 && ObjectPool<TimerNode>.TryRent() is { } node)
            {
                Assert.True(!seen.Contains(node), $"round {round}: a timer node was in the pool twice");
                seen.Add(node);
            }
        }
        finally
        {
            foreach (TimerNode node in seen.Distinct())
            {
                ObjectPool<TimerNode>.Return(node);
            }
        }
    }

#if DEBUG
    [Fact]
    public void WhenAny_RaceDecidedWhileALoserIsBeingRegistered_TheDeciderReadsItWithItsOwnToken()
    {
        // Input 1 fails after the scan; input 0 wins on another thread at the moment input 1's slot is published but not
        // yet registered. The decider meets that slot mid-registration: it must pair the source with this use's token
        // (not the slot's previous one), read the loser, and report its fault, not an await-once error.
        var winner = new Promise();
        var loser = new Promise();
        for (int i = 0; i < 3; i++)
        {
            loser.Reset(); // the loser's version moves on: a token left in the slot from an earlier use would differ
        }
        var error = new InvalidTimeZoneException("the loser's fault");
        CombinatorCore.TestHookAfterSlotPublished = index =>
        {
            if (index != 1)
            {
                return;
            }
            CombinatorCore.TestHookAfterSlotPublished = null;
            loser.SetException(error);
            var decider = new Thread(() => winner.SetResult());
            decider.Start();
            decider.Join();
        };
        ConcurrentQueue<Exception> reported;
        try
        {
            reported = Observe(Own.Instances(error), () => Assert.Equal(0, SpindleTask.WhenAny(winner.Task, loser.Task).GetAwaiter().GetResult()));
        }
        finally
        {
            CombinatorCore.TestHookAfterSlotPublished = null;
        }
        Assert.Equal(new Exception[] { error }, reported.ToArray());
    }
#endif

    private sealed class ManualScheduler : Scheduler
    {
        private readonly System.Collections.Generic.Queue<WorkItem> _items = new();

        public override void Queue(WorkItem item)
        {
            lock (_items)
            {
                _items.Enqueue(item);
            }
        }

        public override bool IsWorkerThread => false;

        public override bool TryRunOne() => false;

        public void RunAll()
        {
            while (_items.Count > 0)
            {
                _items.Dequeue().Execute();
            }
        }
    }

    private sealed class CompletesWhenAwaited : ISpindleSource
    {
        private volatile bool _done;

        public SpindleTaskStatus GetStatus(short token) => _done ? SpindleTaskStatus.Succeeded : SpindleTaskStatus.Pending;

        System.Threading.Tasks.Sources.ValueTaskSourceStatus System.Threading.Tasks.Sources.IValueTaskSource.GetStatus(short token)
            => (System.Threading.Tasks.Sources.ValueTaskSourceStatus)GetStatus(token);

        public void GetResult(short token)
        {
        }

        public void OnCompleted(Action<object?> continuation, object? state, short token)
        {
            _done = true;
            continuation(state);
        }

        void System.Threading.Tasks.Sources.IValueTaskSource.OnCompleted(Action<object?> continuation, object? state, short token,
            System.Threading.Tasks.Sources.ValueTaskSourceOnCompletedFlags flags) => OnCompleted(continuation, state, token);
    }
}

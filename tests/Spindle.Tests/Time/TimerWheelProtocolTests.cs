using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Diagnostics;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Time;

/// <summary>
/// The wheel's owner protocols on deterministic clocks: a provider's kick is never lost behind the owner's re-arm, and
/// continuations that run inline on the owner (cancel, add, dispose) leave every timer ending exactly once.
/// </summary>
public class TimerWheelProtocolTests
{
    private static TimeSpan Ms(long ms) => TimeSpan.FromMilliseconds(ms);

    /// <summary>
    /// A continuation run by the owner's pass cancels a far timer: the cancellation kicks the provider's timer (due now),
    /// and the owner then re-arms it for the far deadline. The owner must notice the cancel inbox before it stops, or the
    /// cancelled node stays linked (and counted) until its deadline an hour later.
    /// </summary>
    [Fact]
    public void ACancellationQueuedDuringAPassIsNotLostBehindTheReArm()
    {
        var clock = new DeferredClock();
        using var wheel = new TimerWheel(clock);
        using var cts = new CancellationTokenSource();
        SpindleTask far = wheel.Delay(TimeSpan.FromHours(1), cts.Token);
        SpindleTask near = wheel.Delay(10);
        clock.RunDue(); // the inserts kicked the driver
        Assert.Equal(2, wheel.PendingCount);
        near.GetAwaiter().OnCompleted(cts.Cancel);

        clock.Advance(Ms(10));
        clock.RunDue(); // whatever the cancellation kicked

        Assert.Equal(SpindleTaskStatus.Succeeded, near.Status);
        Assert.Equal(SpindleTaskStatus.Canceled, far.Status);
        Assert.Equal(0, wheel.PendingCount);
        near.GetAwaiter().GetResult();
        Assert.ThrowsAny<OperationCanceledException>(() => far.GetAwaiter().GetResult());
    }

    /// <summary>
    /// Continuations running inline in one slot: the first adds a delay, cancels a timer of the same slot and one of a
    /// later slot, the second disposes the wheel. Every timer ends exactly once; due ones fire, the rest are cancelled.
    /// </summary>
    [Fact]
    public void ContinuationsThatAddCancelAndDisposeDuringAPassEndEveryTimerOnce()
    {
        var clock = new ManualClock();
        var wheel = new TimerWheel(clock);
        using var sameSlot = new CancellationTokenSource();
        using var laterSlot = new CancellationTokenSource();
        var outcomes = new ConcurrentDictionary<string, List<SpindleTaskStatus>>();
        SpindleTask added = default;

        void Watch(string name, SpindleTask task, Action? then = null)
        {
            SpindleTask.Awaiter awaiter = task.GetAwaiter();
            awaiter.OnCompleted(() =>
            {
                outcomes.GetOrAdd(name, _ => new List<SpindleTaskStatus>()).Add(task.Status);
                try
                {
                    awaiter.GetResult();
                }
                catch (OperationCanceledException)
                {
                }
                then?.Invoke();
            });
        }

        // The first delay kicks a pass and is linked alone; the rest wait in the inbox until the primer (earlier than
        // the planned wake-up) kicks another pass, which appends them to their slots in the order they were started: the
        // slot due at 5 ms is then actor -> victim -> disposer, so the actor cancels a node of the slot being fired.
        SpindleTask actor = wheel.Delay(5);
        SpindleTask victim = wheel.Delay(5, sameSlot.Token);
        SpindleTask disposer = wheel.Delay(5);
        SpindleTask later = wheel.Delay(50, laterSlot.Token);
        SpindleTask farther = wheel.Delay(5000);
        SpindleTask primer = wheel.Delay(1);
        Assert.Equal(6, wheel.PendingCount);
        Watch("primer", primer);
        Watch("victim", victim);
        Watch("later", later);
        Watch("farther", farther);
        Watch("disposer", disposer, wheel.Dispose);
        Watch("actor", actor, () =>
        {
            added = wheel.Delay(1);
            Watch("added", added);
            sameSlot.Cancel();
            laterSlot.Cancel();
        });

        clock.Advance(Ms(5));

        foreach (string name in new[] { "primer", "victim", "disposer", "actor", "later", "farther", "added" })
        {
            Assert.True(outcomes.TryGetValue(name, out List<SpindleTaskStatus>? seen), name + " never ended");
            Assert.True(seen!.Count == 1, name + " ended " + seen.Count + " times");
        }
        Assert.Equal(SpindleTaskStatus.Succeeded, outcomes["actor"][0]);
        Assert.Equal(SpindleTaskStatus.Canceled, outcomes["victim"][0]);
        Assert.Equal(SpindleTaskStatus.Succeeded, outcomes["disposer"][0]);
        Assert.Equal(SpindleTaskStatus.Canceled, outcomes["later"][0]);
        Assert.Equal(SpindleTaskStatus.Canceled, outcomes["farther"][0]);
        Assert.Equal(SpindleTaskStatus.Canceled, outcomes["added"][0]);
        Assert.Equal(0, wheel.PendingCount);
        Assert.Throws<ObjectDisposedException>(() => wheel.Delay(1));
    }

    /// <summary>
    /// A cancellation whose continuation throws: the exception reaches the canceller (as any inline continuation's does),
    /// but the node must still be handed to the wheel, or it stays linked and counted until its deadline.
    /// </summary>
    [Fact]
    public void ACancellationWhoseContinuationThrowsStillLeavesTheWheel()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var cts = new CancellationTokenSource();
        SpindleTask delay = wheel.Delay(TimeSpan.FromHours(1), cts.Token);
        delay.GetAwaiter().OnCompleted(() => throw new InvalidOperationException("continuation failed"));
        Assert.Equal(1, wheel.PendingCount);

        AggregateException e = Assert.Throws<AggregateException>(() => cts.Cancel());
        Assert.IsType<InvalidOperationException>(e.InnerException);

        Assert.Equal(SpindleTaskStatus.Canceled, delay.Status);
        Assert.Equal(0, wheel.PendingCount);
        Assert.ThrowsAny<OperationCanceledException>(() => delay.GetAwaiter().GetResult());
    }
}

/// <summary>Inline continuations that throw must not break the wheel's owner. Sequential: watches UnobservedException.</summary>
[Collection(SequentialCollection.Name)]
public class TimerWheelThrowingContinuationTests
{
    /// <summary>
    /// On a manual clock the owner runs continuations inline. One that throws must not stop the pass half way (the rest
    /// of its slot lost) or leave the drive held (every later pass refused): it is reported, as a dispatched batch
    /// reports it, and the wheel goes on.
    /// </summary>
    [Fact]
    public void AThrowingContinuationIsReportedAndTheWheelGoesOn()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var failed1 = new InvalidOperationException("continuation failed");
        var failed2 = new InvalidOperationException("continuation failed");
        var watch = UnobservedReports.Start(UnobservedReports.Own.InstancesOrOnTestThreads(failed1, failed2));
        ConcurrentQueue<Exception> reported = watch.Reports;
        using (watch)
        {
            SpindleTask first = wheel.Delay(5);
            SpindleTask second = wheel.Delay(5);
            SpindleTask third = wheel.Delay(9);
            first.GetAwaiter().OnCompleted(() => throw failed1);
            second.GetAwaiter().OnCompleted(() => throw failed2);

            clock.Advance(Ms(10));

            Assert.Equal(2, reported.Count);
            Assert.Equal(SpindleTaskStatus.Succeeded, third.Status);
            third.GetAwaiter().GetResult();
            SpindleTask after = wheel.Delay(3);
            clock.Advance(Ms(3));
            Assert.Equal(SpindleTaskStatus.Succeeded, after.Status);
            after.GetAwaiter().GetResult();
            Assert.Equal(0, wheel.PendingCount);
        }
    }

    private static TimeSpan Ms(long ms) => TimeSpan.FromMilliseconds(ms);
}

/// <summary>
/// Worker shards on the real clock: which wheel a worker's shard belongs to, and a blocked worker that keeps finding
/// work. Sequential: they need the workers.
/// </summary>
[Collection(SequentialCollection.Name)]
public class WorkerShardOwnershipTests
{
    /// <summary>
    /// A worker has one shard, made by the first system-clock wheel that used it (normally Default). A delay on another
    /// wheel on the system clock, started on that worker, must not go into it: that shard counts ticks from Default's
    /// origin (so the delay fired early, at once), and that wheel's Dispose never cancelled it.
    /// </summary>
    [Fact]
    public async Task ADelayOfAnotherSystemClockWheelStartedOnAWorkerIsTimedAndDisposedByThatWheel()
    {
        // Default must be older than the delay below, so that a tick count from its origin is past the deadline.
        TimerWheel.Default.Delay(1).GetAwaiter().GetResult();
        if (TimerWheel.Default.NowTick() < 300)
        {
            Thread.Sleep(TimeSpan.FromMilliseconds(300 - TimerWheel.Default.NowTick()));
        }
        var wheel = new TimerWheel(TimeProvider.System);
        try
        {
            SpindleTask<(double waited, bool canceled)> run = Spindle.Run(() =>
            {
                Spindle.Delay(1).GetAwaiter().GetResult(); // this worker now has a shard of Default's
                var watch = Stopwatch.StartNew();
                wheel.Delay(100).GetAwaiter().GetResult();
                double waited = watch.Elapsed.TotalMilliseconds;
                SpindleTask pending = wheel.Delay(TimeSpan.FromSeconds(30));
                wheel.Dispose();
                try
                {
                    pending.GetAwaiter().GetResult();
                    return (waited, false);
                }
                catch (OperationCanceledException)
                {
                    return (waited, true);
                }
            });
            // A hang, not speed; half the default, since a Dispose that did not cancel shows as the 30 s delay running out.
            (double waited, bool canceled) = await TestUtil.WithTimeout(run, TestUtil.DefaultTimeoutSeconds / 2);
            Assert.True(waited >= 100, $"a 100 ms delay completed after {waited:F1} ms");
            Assert.True(canceled, "the wheel's Dispose did not cancel a delay started on a worker");
        }
        finally
        {
            wheel.Dispose();
        }
    }

    /// <summary>
    /// A worker blocked on a result helps run work (TryRunOne) and runs its own due timers when it finds none. If it
    /// always finds some (here an item that re-queues itself to the worker's run-next slot; one worker, so nothing
    /// steals it), it must still look at its timers now and then, as its loop does every few dozen items: the result it
    /// waits for may be one of them. A private one-worker pool and fake timers make it exact.
    /// </summary>
    [Fact]
    public async Task AWorkerHelpingWhileBlockedStillPollsItsTimersWhenItAlwaysFindsWork()
    {
        var pool = new WorkerPool(1, "private timer-poll pool");
        try
        {
            var timers = new CountingTimers();
            var requeue = new RequeueItem(pool);
            var driver = new DriverItem(pool, timers, requeue);
            pool.Queue(driver);
            await TestUtil.WithTimeout(driver.Done.Task); // a hang, not speed: the default bound
            Assert.Equal(DriverItem.Rounds, requeue.Runs); // it always found work
            Assert.True(driver.PollsWhileBlocked > 0, $"{DriverItem.Rounds} items run while blocked, and the worker's timers never polled");
        }
        finally
        {
            pool.Dispose();
        }
    }

    private sealed class CountingTimers : WorkerTimers
    {
        public int Polls;

        public override bool HasPending => true;

        public override bool Poll(out TimeSpan untilNext)
        {
            Polls++;
            untilNext = Timeout.InfiniteTimeSpan;
            return false;
        }
    }

    private sealed class RequeueItem : WorkItem
    {
        private readonly WorkerPool _pool;
        public int Runs;
        public bool Stop;

        public RequeueItem(WorkerPool pool) => _pool = pool;

        public override void Execute()
        {
            Runs++;
            if (!Stop)
            {
                _pool.Queue(this); // from the worker: its run-next slot
            }
        }
    }

    private sealed class DriverItem : WorkItem
    {
        public const int Rounds = 10_000;
        private readonly WorkerPool _pool;
        private readonly CountingTimers _timers;
        private readonly RequeueItem _requeue;
        public readonly TaskCompletionSource Done = new(TaskCreationOptions.RunContinuationsAsynchronously);
        public int PollsWhileBlocked;

        public DriverItem(WorkerPool pool, CountingTimers timers, RequeueItem requeue)
        {
            _pool = pool;
            _timers = timers;
            _requeue = requeue;
        }

        public override void Execute()
        {
            try
            {
                Assert.Same(_timers, _pool.GetOrAddCurrentWorkerTimers(static t => t, _timers));
                _pool.Queue(_requeue);
                // What BlockingWait does on a worker: help while the result is pending.
                for (int i = 0; i < Rounds; i++)
                {
                    if (i == Rounds - 1)
                    {
                        _requeue.Stop = true;
                    }
                    Assert.True(_pool.TryRunOne(), "found no work in round " + i);
                }
                PollsWhileBlocked = _timers.Polls; // before the worker's own loop polls them, once this item returns
                Done.SetResult();
            }
            catch (Exception ex)
            {
                _requeue.Stop = true;
                Done.SetException(ex);
            }
        }
    }
}

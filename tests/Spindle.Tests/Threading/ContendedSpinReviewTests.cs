#if DEBUG
using System;
using System.Diagnostics;
using System.Threading;
using Xunit;

namespace SpindleLib.Tests.Threading;

/// <summary>
/// Stop 46's review of the contended spin (timers46, <c>docs/decisions.md</c> section 43): a worker inside the window
/// after a slow round of yields parks after its pause rounds without yielding. Its park is the one every spin ends in
/// (announce, look again, block), so work queued from outside or from an item is never left with every worker parked,
/// and a worker with a timer parks only until the timer is due. The hook's sleep stands in for a yield that gave the
/// core away; its calls count the yielding rounds, which must stay at the slow ones (every later spin inside the window).
/// </summary>
[Collection(SequentialCollection.Name)] // the spin hook is process-wide
public sealed class ContendedSpinReviewTests
{
    [Fact]
    public void WorkersInsideTheContendedWindow_RunEveryItem_QueuedFromOutsideOrFromAnItem()
    {
        const string Name = "contended-review worker";
        int rounds = 0;
        WorkerPool.TestHookSpinYield = _ =>
        {
            if (Thread.CurrentThread.Name?.StartsWith(Name, StringComparison.Ordinal) == true && Interlocked.Increment(ref rounds) <= 2)
            {
                Thread.Sleep(5); // each worker's first yielding round is slow: both enter the window
            }
        };
        var pool = new WorkerPool(2, Name);
        pool.SetContendedForTests(TimeSpan.FromMinutes(10));
        try
        {
            TestUtil.SpinUntil(() => pool.IdleWorkers == 2 && Volatile.Read(ref rounds) == 2, () => pool.Describe());
            using var ran = new SemaphoreSlim(0);
            int chained = 0;
            for (int i = 0; i < 3000; i++)
            {
                int depth = i % 4; // 0: one item from outside; else a chain queued from inside items, on the worker's own queue
                void Step(int left)
                {
                    if (left == 0)
                    {
                        ran.Release();
                        return;
                    }
                    Interlocked.Increment(ref chained);
                    pool.Queue(new ActionItem(() => Step(left - 1)));
                }
                pool.Queue(new ActionItem(() => Step(depth)));
                if (i % 50 == 49)
                {
                    // A burst: more items than workers, queued while both may be parking.
                    for (int k = 0; k < 16; k++)
                    {
                        pool.Queue(new ActionItem(() => ran.Release()));
                    }
                    for (int k = 0; k < 16; k++)
                    {
                        Assert.True(ran.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), $"a burst's item never ran: {pool.Describe()}");
                    }
                }
                Assert.True(ran.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), $"item {i} never ran: {pool.Describe()}");
            }
            Assert.True(chained > 0);
            // Every spin after the first two parked without yielding: the items ran through the window's park path.
            Assert.Equal(2, Volatile.Read(ref rounds));
        }
        finally
        {
            WorkerPool.TestHookSpinYield = null;
            pool.Dispose();
        }
    }

    /// <summary>Timers due a fixed time after they are made, fired by the owner's poll once due.</summary>
    private sealed class DueAt : WorkerTimers
    {
        private readonly long _due = Stopwatch.GetTimestamp() + Stopwatch.Frequency / 20; // 50 ms
        public readonly ManualResetEventSlim Fired = new(false);

        public override bool HasPending => !Fired.IsSet;

        private TimeSpan Left => TimeSpan.FromSeconds(Math.Max(0, _due - Stopwatch.GetTimestamp()) / (double)Stopwatch.Frequency);

        public override bool Poll(out TimeSpan untilNext)
        {
            untilNext = Left;
            if (untilNext > TimeSpan.Zero || Fired.IsSet)
            {
                untilNext = Fired.IsSet ? Timeout.InfiniteTimeSpan : untilNext;
                return false;
            }
            untilNext = Timeout.InfiniteTimeSpan;
            Fired.Set();
            return true;
        }

        public override TimeSpan UntilDue() => Fired.IsSet ? Timeout.InfiniteTimeSpan : Left;
    }

    [Fact]
    public void AWorkerInsideTheContendedWindow_ParksOnlyUntilItsTimerIsDue()
    {
        const string Name = "contended-review timer worker";
        int rounds = 0;
        WorkerPool.TestHookSpinYield = _ =>
        {
            if (Thread.CurrentThread.Name?.StartsWith(Name, StringComparison.Ordinal) == true && Interlocked.Increment(ref rounds) == 1)
            {
                Thread.Sleep(5);
            }
        };
        var pool = new WorkerPool(1, Name);
        pool.SetContendedForTests(TimeSpan.FromMinutes(10));
        try
        {
            TestUtil.SpinUntil(() => pool.IdleWorkers == 1 && Volatile.Read(ref rounds) == 1, () => pool.Describe());
            DueAt timers = null!;
            using var installed = new ManualResetEventSlim();
            pool.Queue(new ActionItem(() =>
            {
                timers = new DueAt();
                pool.GetOrAddCurrentWorkerTimers(static t => t, (WorkerTimers)timers);
                installed.Set();
            }));
            Assert.True(installed.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)));
            // Nothing else wakes the worker: only its park's time-out, at the timer's due time, can fire it.
            Assert.True(timers.Fired.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), $"the timer never fired: {pool.Describe()}");
            Assert.Equal(1, Volatile.Read(ref rounds)); // parked inside the window, never yielding
        }
        finally
        {
            WorkerPool.TestHookSpinYield = null;
            pool.Dispose();
        }
    }
}
#endif

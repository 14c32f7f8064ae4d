#if DEBUG
using System;
using System.Threading;
using Xunit;

namespace SpindleLib.Tests.Threading;

/// <summary>
/// A worker that runs out of work spins before it parks (looks for work between pause loops, then between yields), and
/// while it spins it neither runs its timers nor sleeps until they fall due. A yield gives the core away for a whole time
/// slice when other threads want it: beside two CPU hogs on two cores, the spin's 64 yields took 135-207 ms, and 10,000
/// loops of <c>Spindle.Delay(50)</c> fired 222-318 ms late (p50) against <c>Task.Delay</c>'s 6-7 ms (docs/decisions.md
/// section 42). The worker now stops spinning once one of its timers is due. Counted in spin rounds, not in time: the
/// test's hook stands in for the yields, and the timers fall due during one of them.
/// </summary>
public class SpinningWorkerTimersTests
{
    /// <summary>Timers that fall due when the test says so (<see cref="Due"/>), and fire at the owner's next poll.</summary>
    private sealed class DueOnCue : WorkerTimers
    {
        public volatile bool Due;
        public volatile int RoundsWhileDue;
        public int RoundsWhenFired = -1;
        public readonly ManualResetEventSlim Fired = new(false);

        public override bool HasPending => true;

        public override bool Poll(out TimeSpan untilNext)
        {
            untilNext = TimeSpan.FromSeconds(1);
            if (!Due)
            {
                return false;
            }
            Due = false;
            RoundsWhenFired = RoundsWhileDue;
            Fired.Set();
            return true;
        }

        public override TimeSpan UntilDue() => Due ? TimeSpan.Zero : TimeSpan.FromSeconds(1);
    }

    [Fact]
    public void ATimerThatFallsDueWhileItsWorkerSpins_FiresBeforeTheNextYieldingRound()
    {
        var pool = new WorkerPool(1, "spinning-worker-timers worker");
        var timers = new DueOnCue();
        int installed = 0;
        WorkerPool.TestHookSpinYield = p =>
        {
            if (!ReferenceEquals(p, pool) || Volatile.Read(ref installed) == 0 || timers.Fired.IsSet)
            {
                return;
            }
            if (!timers.Due && timers.RoundsWhenFired < 0)
            {
                timers.Due = true; // the timer falls due during this round's yields
                return;
            }
            if (timers.Due)
            {
                timers.RoundsWhileDue++; // a whole round of yields more, the timer due all the while
            }
        };
        try
        {
            pool.Queue(new ActionItem(() =>
            {
                pool.GetOrAddCurrentWorkerTimers(static t => t, (WorkerTimers)timers);
                Volatile.Write(ref installed, 1);
            }));
            Assert.True(timers.Fired.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "the timer never fired");
            // Before the change the worker went on spinning to the end (31 more rounds of two yields), then fired it on its
            // park path.
            Assert.Equal(0, timers.RoundsWhenFired);
        }
        finally
        {
            WorkerPool.TestHookSpinYield = null;
            pool.Dispose();
        }
    }
}
#endif

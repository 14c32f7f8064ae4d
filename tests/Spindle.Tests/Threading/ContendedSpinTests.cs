#if DEBUG
using System;
using System.Threading;
using Xunit;

namespace SpindleLib.Tests.Threading;

/// <summary>
/// A worker that runs out of work spins before it parks, its later rounds yielding the core. When other threads want
/// the cores, a yield gives the core away for a time slice: beside two CPU hogs and a loaded machine, the actor program's
/// rounds of two yields took 16-50 ms, a producer woke nobody meanwhile (a worker was spinning), and the worker's timers
/// that fell due waited for the yield: its ask timeouts fired 16-50 ms late on the park path (docs/decisions.md section
/// 43). Now a round of yields that takes longer than <see cref="WorkerPool.SlowYieldMicroseconds"/> ends the spin, and
/// for a while after it (<see cref="WorkerPool.ContendedMilliseconds"/>) the worker parks without yielding. The test's
/// hook sleeps in one round, standing in for a yield that gave the core away; rounds are counted, not timed.
/// </summary>
[Collection(SequentialCollection.Name)] // the spin hook is process-wide: another test setting it would take this one's rounds
public class ContendedSpinTests
{
    private const string PoolName = "contended-spin worker";

    [Fact]
    public void ASlowRoundOfYields_EndsTheSpin_AndTheNextSpinParksWithoutYielding()
    {
        int rounds = 0;
        int slowRounds = 1; // the first yielding round the hook sees is slow
        WorkerPool.TestHookSpinYield = _ =>
        {
            if (Thread.CurrentThread.Name?.StartsWith(PoolName, StringComparison.Ordinal) != true)
            {
                return;
            }
            Interlocked.Increment(ref rounds);
            if (Interlocked.Decrement(ref slowRounds) >= 0)
            {
                Thread.Sleep(5); // as a yield that gave the core to another thread for a time slice
            }
        };
        var pool = new WorkerPool(1, PoolName);
        pool.SetContendedForTests(TimeSpan.FromMinutes(10)); // however slow this machine, the second spin is inside it
        try
        {
            // The new worker finds nothing to run, spins, and parks with no timer: until woken.
            TestUtil.SpinUntil(() => pool.IdleWorkers == 1, () => pool.Describe());
            // Before the change the spin went on after the slow round: 32 yielding rounds (8 pure spins, then 32 of 40).
            Assert.Equal(1, Volatile.Read(ref rounds));

            // Woken for an item, the worker runs it, runs out of work again and parks: it yields no more, the cores
            // having been wanted moments ago. Before the change: 32 rounds again.
            Volatile.Write(ref rounds, 0);
            var ran = new ManualResetEventSlim();
            pool.Queue(new ActionItem(ran.Set));
            Assert.True(ran.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "the item never ran");
            TestUtil.SpinUntil(() => pool.IdleWorkers == 1, () => pool.Describe());
            Assert.Equal(0, Volatile.Read(ref rounds));
        }
        finally
        {
            WorkerPool.TestHookSpinYield = null;
            pool.Dispose();
        }
    }
}
#endif

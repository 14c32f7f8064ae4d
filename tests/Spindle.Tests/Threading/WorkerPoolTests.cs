using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Threading;

/// <summary>A private WorkerPool, driven directly with work items (the shared pool is left alone).</summary>
public class WorkerPoolTests
{
    [Fact]
    public void Constructor_NoWorkers_ThrowsArgumentOutOfRange()
    {
        Assert.Throws<ArgumentOutOfRangeException>(() => new WorkerPool(0, "none"));
    }

    [Fact]
    public async Task Queue_FromOutsideAndFromItsWorkers_RunsEveryItemOnceOnThePoolsThreads()
    {
        var pool = new WorkerPool(3, "private pool");
        try
        {
            Assert.Equal(3, pool.WorkerCount);
            const int Outer = 2_000;
            const int Inner = 5;
            var counters = new int[Outer * (1 + Inner)];
            int done = 0;
            int offPool = 0;
            using var allDone = new ManualResetEventSlim();

            void Hit(int id)
            {
                Interlocked.Increment(ref counters[id]);
                if (!pool.IsWorkerThread || Thread.CurrentThread.Name?.StartsWith("private pool", StringComparison.Ordinal) != true)
                {
                    Interlocked.Increment(ref offPool);
                }
                if (Interlocked.Increment(ref done) == counters.Length)
                {
                    allDone.Set();
                }
            }

            for (int i = 0; i < Outer; i++)
            {
                int baseId = i * (1 + Inner);
                pool.Queue(new ActionItem(() =>
                {
                    // Queued from a worker of this pool: run-next slot, then the deque.
                    for (int k = 1; k <= Inner; k++)
                    {
                        int id = baseId + k;
                        pool.Queue(new ActionItem(() => Hit(id)));
                    }
                    Hit(baseId);
                }));
            }

            await TestUtil.WithTimeout(Task.Run(() => allDone.Wait()));
            Assert.All(counters, c => Assert.Equal(1, c));
            Assert.Equal(0, offPool);
        }
        finally
        {
            pool.Dispose();
        }
    }

    [Fact]
    public void Queue_TwoItemsWhileAWorkerSpins_BothStartWhileAnotherWorkerIsIdle()
    {
        var pool = new WorkerPool(2, "private pool");
        try
        {
            for (int attempt = 0; attempt < 50; attempt++)
            {
                // Both workers parked; then one runs a trivial item and enters its spin phase.
                TestUtil.SpinUntil(() => pool.IdleWorkers == 2);
                int trivialRan = 0;
                pool.Queue(new ActionItem(() => Volatile.Write(ref trivialRan, 1)));
                TestUtil.SpinUntil(() => Volatile.Read(ref trivialRan) == 1);

                // Two long items at once: each must get a worker.
                using var release = new ManualResetEventSlim();
                int started = 0;
                pool.Queue(new ActionItem(() => { Interlocked.Increment(ref started); release.Wait(); }));
                pool.Queue(new ActionItem(() => { Interlocked.Increment(ref started); release.Wait(); }));
                // A lost wake-up, not speed: a worker that parked while nothing ran sleeps with no timeout, and the other
                // is held by its item until the release below, so a second item nobody woke for waits for ever; the
                // suite's default bound tells that apart from a loaded machine (it was 5 s).
                bool bothStarted = SpinWait.SpinUntil(() => Volatile.Read(ref started) == 2, TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds));
                int idleMeanwhile = pool.IdleWorkers;
                release.Set();
                TestUtil.SpinUntil(() => Volatile.Read(ref started) == 2);

                Assert.True(bothStarted, $"attempt {attempt}: the second item waited {TestUtil.DefaultTimeoutSeconds} s in the injection queue while {idleMeanwhile} worker(s) slept");
            }
        }
        finally
        {
            pool.Dispose();
        }
    }
}

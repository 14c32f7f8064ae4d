using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Threading;

/// <summary>
/// <see cref="Spindle.Yield"/> queues its continuation behind the work already waiting, as <c>Task.Yield</c> on the .NET
/// ThreadPool and Go's <c>Gosched</c> do. Before, a worker's yield went to its own run-next slot, and the work queued from
/// outside the workers (an IO thread posting to actors) ran only at a worker's fair look, every 61st: a ninth user's
/// review (an actor runtime whose actors yield every so many messages) saw messages posted from a plain thread wait
/// 1.4–1.6 s on average (worst 3 s) behind four yielding loops of 100 µs slices, against 0.4–2.5 ms on the ThreadPool.
/// Counted, not timed: the loops' yields while a batch of outside items waits.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class YieldFairnessTests
{
    [Fact]
    public async Task WorkQueuedFromOutsideRunsWithinAFewYieldsOfLoopsThatYieldOnEveryWorker()
    {
        const int Items = 400;
        int loopCount = 2 * Spindle.WorkerCount;
        long yields = 0;
        int stop = 0, running = 0;

        async SpindleTask Loop()
        {
            Interlocked.Increment(ref running);
            while (Volatile.Read(ref stop) == 0)
            {
                Interlocked.Increment(ref yields);
                await Spindle.Yield();
            }
        }

        var loops = new Task[loopCount];
        for (int i = 0; i < loopCount; i++)
        {
            loops[i] = Spindle.Run(Loop).AsTask();
        }
        try
        {
            TestUtil.SpinUntil(() => Volatile.Read(ref running) == loopCount && Volatile.Read(ref yields) > 10_000);
            await TestUtil.LeaveSpindleWorkers();
            var queuedAt = new long[Items];
            var ranAt = new long[Items];
            int ran = 0;
            for (int i = 0; i < Items; i++)
            {
                int index = i;
                // From a thread that is not a worker: queued from outside. The count is read after the call, so a
                // preemption of this thread can only shorten the wait measured.
                Spindle.Run(() =>
                {
                    Volatile.Write(ref ranAt[index], Volatile.Read(ref yields));
                    Interlocked.Increment(ref ran);
                }).Forget();
                Volatile.Write(ref queuedAt[i], Volatile.Read(ref yields));
            }
            TestUtil.SpinUntil(() => Volatile.Read(ref ran) == Items);
            var waits = new long[Items];
            for (int i = 0; i < Items; i++)
            {
                waits[i] = Volatile.Read(ref ranAt[i]) - Volatile.Read(ref queuedAt[i]);
            }
            Array.Sort(waits);
            // In order, an item waits behind the items queued before it and each loop's one yield ahead of it: a few
            // yields. At one outside item per fair look (every 61st), item i waited about 61 * i / workers: the 360th
            // about 11,000 yields with two workers. The 90th percentile, not the worst: a worker that has taken an item
            // and is then preempted by the OS (a second test process on two cores) lets the other workers' loops count
            // thousands of yields before the item records its run (the fresh-clone CI saw 23,244 once, the test passing
            // alone 8 of 8 and in its namespace 2 of 2); that delays a few items, not a tenth of them.
            long p90 = waits[Items * 9 / 10];
            Assert.True(p90 < 300, $"a tenth of the items queued from outside waited while the yielding loops made {p90:N0} yields or more (worst {waits[Items - 1]:N0})");
        }
        finally
        {
            Volatile.Write(ref stop, 1);
            await TestUtil.WithTimeout(Task.WhenAll(loops));
        }
    }
}

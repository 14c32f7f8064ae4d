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
            long worst = 0;
            for (int i = 0; i < Items; i++)
            {
                worst = Math.Max(worst, Volatile.Read(ref ranAt[i]) - Volatile.Read(ref queuedAt[i]));
            }
            // In order, an item waits behind the items queued before it and each loop's one yield ahead of it: a few
            // yields. At one outside item per fair look (every 61st), the last of 400 waited about 61 * 400 / workers.
            Assert.True(worst < 300, $"an item queued from outside waited while the yielding loops made {worst:N0} yields");
        }
        finally
        {
            Volatile.Write(ref stop, 1);
            await TestUtil.WithTimeout(Task.WhenAll(loops));
        }
    }
}

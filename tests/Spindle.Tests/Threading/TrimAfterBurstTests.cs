using System;
using System.Collections.Concurrent;
using System.Reflection;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Threading;

/// <summary>
/// <see cref="SpindlePool.Trim"/> after a burst gives back what the burst grew and nothing else would: the worker pool's
/// injection queue's last segment (a <see cref="ConcurrentQueue{T}"/> keeps it, a million slots after a million-item
/// burst), a worker's deque array, and the pool stacks of Spindle's own threads, which no user code can trim. Each is
/// measured through the structure itself (segment slots, array length, a stack's count), not through the GC's heap.
/// Sequential, as every test that trims: a trim request empties the stacks of every Spindle thread, and a test beside it
/// that counts its allocations in steady state then finds the objects its thread would have rented again gone (a
/// `SignalTimeoutTests` case counted 7,088 bytes in one CI run with this class running in parallel).
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class TrimAfterBurstTests
{
    private const int Burst = 100_000;

    [Fact]
    public void InjectionQueue_AfterABurst_GivesItsGrownSegmentBack_AndStillRunsEveryItemOnce()
    {
        var pool = new WorkerPool(1, "trim-test worker");
        try
        {
            using var gate = new ManualResetEventSlim(false);
            int ran = 0;
            pool.Queue(new ActionItem(() => gate.Wait()));
            for (int i = 0; i < Burst; i++)
            {
                pool.Queue(new ActionItem(() => Interlocked.Increment(ref ran)));
            }
            gate.Set();
            TestUtil.SpinUntil(() => Volatile.Read(ref ran) == Burst, () => $"ran {ran} of {Burst}");
            long grown = QueueSlots(pool, "_injection");
            Assert.True(grown >= 65_536, $"the burst should have grown the segment: {grown} slots");

            pool.ReleaseIdleMemory();

            TestUtil.SpinUntil(() => QueueSlots(pool, "_injection") <= 64,
                () => $"the injection queue still holds {QueueSlots(pool, "_injection")} slots (had {grown})", seconds: 10);
            for (int i = 0; i < 1_000; i++)
            {
                pool.Queue(new ActionItem(() => Interlocked.Increment(ref ran)));
            }
            TestUtil.SpinUntil(() => Volatile.Read(ref ran) == Burst + 1_000, () => $"ran {ran} of {Burst + 1_000}");
            Assert.Equal(Burst + 1_000, Volatile.Read(ref ran));
        }
        finally
        {
            pool.Dispose();
        }
    }

    /// <summary>
    /// Trims freeze each shared queue seen empty while producers feed it: the injection queue, and the fired timers'
    /// batches' queue (<c>WorkerPool.QueueTimers</c>, stop 39), which the same freeze covers.
    /// </summary>
    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public void TrimsRacingProducers_NeitherLoseNorRepeatAnItem(bool timersQueue)
    {
        const int PerProducer = 100_000;
        var pool = new WorkerPool(2, "trim-race worker");
        try
        {
            var runs = new int[2 * PerProducer];
            int done = 0;
            using var stop = new CancellationTokenSource();
            int trims = 0;
            var trimmer = new Thread(() =>
            {
                while (!stop.IsCancellationRequested)
                {
                    pool.ReleaseIdleMemory();
                    trims++;
                    Thread.Yield();
                }
            });
            trimmer.Start();
            var producers = new Thread[2];
            for (int p = 0; p < producers.Length; p++)
            {
                int first = p * PerProducer;
                producers[p] = new Thread(() =>
                {
                    for (int i = 0; i < PerProducer; i++)
                    {
                        int index = first + i;
                        var item = new ActionItem(() =>
                        {
                            Interlocked.Increment(ref runs[index]);
                            Interlocked.Increment(ref done);
                        });
                        if (timersQueue)
                        {
                            pool.QueueTimers(item);
                        }
                        else
                        {
                            pool.Queue(item);
                        }
                        if ((i & 255) == 0)
                        {
                            Thread.Yield(); // let the queue run empty now and then, so trims freeze it under the producers
                        }
                    }
                });
                producers[p].Start();
            }
            foreach (Thread t in producers)
            {
                t.Join();
            }
            TestUtil.SpinUntil(() => Volatile.Read(ref done) >= runs.Length, () => $"ran {done} of {runs.Length} after {trims} trims");
            stop.Cancel();
            trimmer.Join();
            int lost = 0, repeated = 0;
            foreach (int r in runs)
            {
                lost += r == 0 ? 1 : 0;
                repeated += r > 1 ? 1 : 0;
            }
            Assert.True(lost == 0 && repeated == 0, $"{lost} items lost, {repeated} run more than once, over {trims} trims");
            Assert.True(trims > 0);
        }
        finally
        {
            pool.Dispose();
        }
    }

    [Fact]
    public void AWorkersPoolStacksAndGrownDeque_AreLetGoOfAtItsNextPark_AfterATrim()
    {
        var pool = new WorkerPool(1, "trim-stacks worker");
        try
        {
            // The shared stack of a type only this test uses, filled from this thread; a worker whose own stack is empty
            // takes all of it at its first rent and keeps it (as a timer thread keeps timer batches).
            for (int i = 0; i < 600; i++)
            {
                ObjectPool<Node>.Return(new Node());
            }
            int heldByWorker = -1;
            RunOn(pool, () =>
            {
                GC.KeepAlive(ObjectPool<Node>.TryRent());
                heldByWorker = ObjectPool<Node>.LocalCount;
                // A burst queued from the worker itself grows its deque (each item displaces the last from run-next).
                for (int i = 0; i < 5_000; i++)
                {
                    pool.Queue(new ActionItem(static () => { }));
                }
            });
            Assert.True(heldByWorker >= 500, $"the worker's stack held {heldByWorker}");
            TestUtil.SpinUntil(() => pool.DequeCapacities()[0] >= 4_096 && pool.GlobalQueueLength == 0 && pool.LocalQueueLength == 0,
                () => $"deque {pool.DequeCapacities()[0]}, local queue {pool.LocalQueueLength}");

            ThreadSlots.RequestTrim();
            pool.ReleaseIdleMemory();

            int seen = -1;
            TestUtil.SpinUntil(() =>
            {
                // Look only while the worker is parked: a look right after the last one would keep it from ever parking.
                if (pool.IdleWorkers == 0)
                {
                    return false;
                }
                RunOn(pool, () => seen = ObjectPool<Node>.LocalCount);
                return seen == 0 && pool.DequeCapacities()[0] == 64;
            }, () => $"the worker's stack holds {seen}, its deque {pool.DequeCapacities()[0]} slots", seconds: 10);
        }
        finally
        {
            pool.Dispose();
        }
    }

    /// <summary>
    /// A trim requested before a worker existed is not one for it: a new worker whose first item came before its first
    /// park took every earlier trim request for a new one at that park, and let go of what the item's burst grew (a CI
    /// run: the stack-and-deque case above found the deque at 64 slots right after its burst, 1 run). The worker adopts
    /// the requests made before it starts (<c>ThreadSlots.AdoptTrimRequests</c>).
    /// </summary>
    [Fact]
    public void ANewWorker_TakesNoTrimRequestedBeforeItStarted_ForANewOne()
    {
        int tookAStaleRequest = 0;
        for (int attempt = 0; attempt < 20; attempt++)
        {
            ThreadSlots.RequestTrim();
            var pool = new WorkerPool(1, "trim-adopt worker");
            try
            {
                // Queued at once: most often before the new worker's first park, where it would look for requests.
                RunOn(pool, () =>
                {
                    if (ThreadSlots.TrimIfRequested())
                    {
                        tookAStaleRequest++;
                    }
                });
            }
            finally
            {
                pool.Dispose();
            }
        }
        Assert.Equal(0, tookAStaleRequest);
    }

    /// <summary>
    /// A trim request is answered once per Spindle thread: the idle moment after the one that emptied the stacks, with no
    /// request made since, keeps what the thread has pooled meanwhile. A thread that did not record the requests it had
    /// seen (a mutation of <c>ThreadSlots.TrimIfRequested</c>, decisions section 53's M27) emptied its stacks at every
    /// idle moment after the first trim, for good: every worker's park threw its pooled objects to the GC.
    /// </summary>
    [Fact]
    public void ATrimRequest_IsAnsweredOnce_AndTheNextIdleMomentKeepsTheStacks()
    {
        bool? first = null, second = null, third = null;
        int keptAfterSecond = -1;
        Task thread = TestUtil.RunOnThread(() =>
        {
            ThreadSlots.AdoptTrimRequests();
            ThreadSlots.RequestTrim();
            first = ThreadSlots.TrimIfRequested();
            ObjectPool<Node>.Return(new Node());
            ObjectPool<Node>.Return(new Node());
            second = ThreadSlots.TrimIfRequested();
            keptAfterSecond = ObjectPool<Node>.LocalCount;
            ThreadSlots.RequestTrim();
            third = ThreadSlots.TrimIfRequested();
        }, "trim-once thread");
        Assert.True(thread.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)));
        Assert.True(first, "the idle moment after a request should trim");
        Assert.False(second, "the next idle moment, with no request since, trimmed again");
        Assert.Equal(2, keptAfterSecond);
        Assert.True(third, "a new request should be answered");
    }

    private static void RunOn(WorkerPool pool, Action action)
    {
        using var ran = new ManualResetEventSlim(false);
        pool.Queue(new ActionItem(() =>
        {
            action();
            ran.Set();
        }));
        Assert.True(ran.Wait(TimeSpan.FromSeconds(10)), "the worker did not run the item");
    }

    /// <summary>The slots of every segment of one of the pool's <see cref="ConcurrentQueue{T}"/>s (.NET's implementation's fields).</summary>
    private static long QueueSlots(WorkerPool pool, string field)
    {
        const BindingFlags Private = BindingFlags.NonPublic | BindingFlags.Instance;
        object queue = typeof(WorkerPool).GetField(field, Private)!.GetValue(pool)!;
        object? segment = queue.GetType().GetField("_head", Private)!.GetValue(queue);
        long slots = 0;
        while (segment is not null)
        {
            slots += ((Array)segment.GetType().GetField("_slots", Private)!.GetValue(segment)!).Length;
            segment = segment.GetType().GetField("_nextSegment", Private)!.GetValue(segment);
        }
        return slots;
    }

    private sealed class Node : IPoolNode<Node>
    {
        private Node? _next;

        ref Node? IPoolNode<Node>.Next => ref _next;
    }
}

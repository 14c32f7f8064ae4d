using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Reflection;
using System.Runtime.CompilerServices;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Sources;

/// <summary>
/// The internal ObjectPool and the public SpindlePool settings. The cap and the counts are process-wide, so these
/// tests run alone. Each test pools its own node type, so no test sees another's objects.
/// </summary>
[Collection(SequentialCollection.Name)]
public class ObjectPoolTests
{
    private abstract class Node<TSelf> : IPoolNode<TSelf>
        where TSelf : Node<TSelf>
    {
        private TSelf? _next;

        public int InUse;

        public ref TSelf? Next => ref _next;
    }

    private sealed class SlotNode : Node<SlotNode>;

    private sealed class CapNode : Node<CapNode>;

    private sealed class LowCapNode : Node<LowCapNode>;

    private sealed class ZeroCapNode : Node<ZeroCapNode>;

    private sealed class TrimNode : Node<TrimNode>;

    private sealed class CrossThreadNode : Node<CrossThreadNode>;

    private sealed class ConcurrentNode : Node<ConcurrentNode>;

    private sealed class BulkNode : Node<BulkNode>;

    private sealed class LoopRentNode : Node<LoopRentNode>;

    private sealed class LoopKeepNode : Node<LoopKeepNode>;

    private sealed class GateNode : Node<GateNode>;

    private sealed class CirculatingGateNode : Node<CirculatingGateNode>;

    private sealed class LoopRaceNode : Node<LoopRaceNode>;

    private sealed class ThreadEndNode : Node<ThreadEndNode>;

    private sealed class IdleRenterNode : Node<IdleRenterNode>;

    private sealed class GateRaceCapNode : Node<GateRaceCapNode>;

    /// <summary>Returns <paramref name="count"/> new nodes on a thread of its own (not a loop's): its stack keeps LocalMax, the rest go to the shared stack.</summary>
    private static void ReturnOnAnotherThread<T>(int count)
        where T : Node<T>, new()
    {
        var thread = new Thread(() =>
        {
            foreach (T node in Make<T>(count))
            {
                ObjectPool<T>.Return(node);
            }
        });
        thread.Start();
        thread.Join();
    }

    /// <summary>Runs <paramref name="body"/> inside a frame of a new loop, on the calling thread (a loop step).</summary>
    private static void InsideAFrame(Action body)
    {
        var loop = new FrameLoop();
        loop.SynchronizationContext.Post(_ => body(), null);
        Exception? fault = null;
        Action<Exception> report = ex => fault = ex;
        Spindle.UnobservedException += report;
        try
        {
            loop.RunFrame();
        }
        finally
        {
            Spindle.UnobservedException -= report;
        }
        if (fault is not null)
        {
            throw new Xunit.Sdk.XunitException("the frame's body failed: " + fault);
        }
    }

    /// <summary>Empties this thread's slot for <typeparamref name="T"/> and its shared stack.</summary>
    private static void Drain<T>()
        where T : Node<T>
    {
        while (ObjectPool<T>.TryRent() is not null)
        {
        }
    }

    private static T[] Make<T>(int count)
        where T : Node<T>, new()
    {
        var nodes = new T[count];
        for (int i = 0; i < count; i++)
        {
            nodes[i] = new T();
        }
        return nodes;
    }

    /// <summary>
    /// A thread that ends holding pooled objects in its own stack (what it returned, or the chunk its first rent kept)
    /// does not give them back to the pool, and does not keep them either: they are garbage with the thread's
    /// statics, and the pool's count never included them. A program that starts and ends many threads (a thread per
    /// connection, a test runner) therefore makes such objects again on each thread, but does not grow: 10,000 short
    /// threads that each awaited delays in an async method and ran two jobs kept the heap after a full collection at
    /// 191–203 KB and the working set at 58–64 MB from the first 1,000 threads on (/tmp/leads48-threads,
    /// docs/decisions.md section 45).
    /// </summary>
    [Fact]
    public void ObjectsHeldByAThreadThatEnded_AreCollected_AndNeverCountedAsPooled()
    {
        SpindlePool.Trim();
        ReturnOnAnotherThread<ThreadEndNode>(ObjectPool<ThreadEndNode>.LocalMax + 4 * ObjectPool<ThreadEndNode>.Chunk);
        int shared = ObjectPool<ThreadEndNode>.Count;
        Assert.True(shared >= 2 * ObjectPool<ThreadEndNode>.Chunk, $"the setup left {shared} in the shared stack");

        WeakReference[] held = EndAThreadHoldingPooledObjects(out int takenByFirstRent);
        Assert.Equal(ObjectPool<ThreadEndNode>.Chunk - 1, takenByFirstRent); // a plain thread's first rent keeps one chunk
        Assert.Equal(0, ObjectPool<ThreadEndNode>.Count);
        int alive = TestUtil.CountAliveAfterCollection(held);
        Assert.True(alive == 0, $"{alive} of {held.Length} objects a finished thread held are still alive");
        Assert.Equal(0, ObjectPool<ThreadEndNode>.Count);
    }

    /// <summary>
    /// A plain thread (none of Spindle's own, so no trim request reaches it) whose stack is empty keeps one chunk of the
    /// shared stack and gives the rest back. Before (leads49), its first rent took the whole shared stack, up to the cap,
    /// and a thread that then idled (a request thread that awaited once after a burst) kept it beyond every
    /// <see cref="SpindlePool.Trim"/>: 478 KB of one method's boxes after a burst of 20,000 (docs/decisions.md section 46).
    /// A trim on another thread now empties the shared stack of all but that chunk.
    /// </summary>
    [Fact]
    public void FirstRentOnAPlainThread_KeepsOneChunk_AndGivesTheRestOfTheSharedStackBack_WhichATrimReaches()
    {
        SpindlePool.Trim();
        ReturnOnAnotherThread<IdleRenterNode>(ObjectPool<IdleRenterNode>.LocalMax + 6 * ObjectPool<IdleRenterNode>.Chunk);
        int shared = ObjectPool<IdleRenterNode>.Count;
        Assert.True(shared >= 4 * ObjectPool<IdleRenterNode>.Chunk, $"the setup left {shared} in the shared stack");

        int kept = -1;
        int sharedAfterRent = -1;
        using var rented = new ManualResetEventSlim();
        using var end = new ManualResetEventSlim();
        var renter = new Thread(() =>
        {
            IdleRenterNode? node = ObjectPool<IdleRenterNode>.TryRent();
            kept = node is null ? -1 : ObjectPool<IdleRenterNode>.LocalCount;
            sharedAfterRent = ObjectPool<IdleRenterNode>.Count;
            rented.Set();
            end.Wait(); // the thread idles, as a server's request thread does between requests
            GC.KeepAlive(node);
        });
        renter.Start();
        try
        {
            Assert.True(rented.Wait(TimeSpan.FromSeconds(30)), "the renter did not rent");
            Assert.Equal(ObjectPool<IdleRenterNode>.Chunk - 1, kept); // before: shared - 1, the whole shared stack
            Assert.Equal(shared - ObjectPool<IdleRenterNode>.Chunk, sharedAfterRent);

            SpindlePool.Trim(); // on this thread: reaches the shared stack, never the idle renter's own
            Assert.Equal(0, ObjectPool<IdleRenterNode>.Count);
        }
        finally
        {
            end.Set();
            renter.Join();
        }
    }

    /// <summary>
    /// A new thread rents one object (its first rent keeps one chunk of the shared stack in its own), rents the rest of the
    /// shared stack, returns <see cref="ObjectPool{T}.LocalMax"/> of them (they stay in its stack) and ends; weak references to
    /// those it ended with.
    /// </summary>
    [MethodImpl(MethodImplOptions.NoInlining)]
    private static WeakReference[] EndAThreadHoldingPooledObjects(out int takenByFirstRent)
    {
        var references = new List<WeakReference>();
        int taken = -1, keptAtEnd = -1;
        var thread = new Thread(() =>
        {
            var rented = new List<ThreadEndNode> { ObjectPool<ThreadEndNode>.TryRent()! };
            taken = ObjectPool<ThreadEndNode>.LocalCount;
            while (ObjectPool<ThreadEndNode>.TryRent() is { } node)
            {
                rented.Add(node);
            }
            for (int i = 0; i < ObjectPool<ThreadEndNode>.LocalMax; i++)
            {
                references.Add(new WeakReference(rented[i]));
                ObjectPool<ThreadEndNode>.Return(rented[i]);
            }
            keptAtEnd = ObjectPool<ThreadEndNode>.LocalCount;
        });
        thread.Start();
        thread.Join();
        Assert.Equal(ObjectPool<ThreadEndNode>.LocalMax, keptAtEnd);
        takenByFirstRent = taken;
        return references.ToArray();
    }

    [Fact]
    public void TryRent_AfterReturnOnTheSameThread_ReturnsThatObjectFromTheThreadSlot()
    {
        Drain<SlotNode>();
        var node = new SlotNode();

        ObjectPool<SlotNode>.Return(node);

        Assert.Equal(0, ObjectPool<SlotNode>.Count); // held in the thread slot, not the shared stack
        Assert.Same(node, ObjectPool<SlotNode>.TryRent());
        Assert.Null(ObjectPool<SlotNode>.TryRent());
    }

    [Fact]
    public void Return_MoreThanTheCap_SharedStackKeepsAtMostTheCap()
    {
        Drain<CapNode>();
        int cap = SpindlePool.MaxRetainedPerType;
        CapNode[] nodes = Make<CapNode>(cap + 200);

        foreach (CapNode node in nodes)
        {
            ObjectPool<CapNode>.Return(node);
        }

        // Chunks of ObjectPool.Chunk move to the shared stack until one more would pass the cap.
        int shared = ObjectPool<CapNode>.Count;
        Assert.True(shared <= cap && shared > cap - ObjectPool<CapNode>.Chunk, $"shared {shared}, cap {cap}");
        int rented = 0;
        while (ObjectPool<CapNode>.TryRent() is not null)
        {
            rented++;
        }
        // The shared stack plus at most a thread stack's worth; the rest went to the GC.
        Assert.InRange(rented, shared, shared + ObjectPool<CapNode>.LocalMax);
        Assert.Equal(0, ObjectPool<CapNode>.Count);
    }

    [Fact]
    public void ReturnBurst_AfterABulkRent_KeepsEveryObjectOnce()
    {
        // Regression: a rent that takes the whole shared stack leaves this thread holding thousands of objects; each
        // chunk returned afterwards walked that whole stack (quadratic in a burst, as a frame loop's waiters return).
        // Returns now split chunks in a fixed number of links, or go straight to the shared stack while the thread's
        // stack is long. What must hold whatever the path: every object comes back, once, and none is handed out twice.
        Drain<BulkNode>();
        int saved = SpindlePool.MaxRetainedPerType;
        const int Count = 20_000;
        try
        {
            SpindlePool.MaxRetainedPerType = 2 * Count;
            foreach (BulkNode node in Make<BulkNode>(Count))
            {
                ObjectPool<BulkNode>.Return(node);
            }
            // Half rented: the first rents empty this thread's stack, the next one takes the shared stack in bulk.
            var rented = new System.Collections.Generic.List<BulkNode>();
            for (int i = 0; i < Count / 2; i++)
            {
                rented.Add(ObjectPool<BulkNode>.TryRent()!);
            }
            // Returned while the thread still holds the other half.
            foreach (BulkNode node in rented)
            {
                ObjectPool<BulkNode>.Return(node);
            }
            var seen = new System.Collections.Generic.HashSet<BulkNode>();
            for (int i = 0; i < Count; i++)
            {
                BulkNode? n = ObjectPool<BulkNode>.TryRent();
                Assert.NotNull(n);
                Assert.Null(n!.Next);
                Assert.True(seen.Add(n), "an object was handed out twice");
            }
            Assert.Null(ObjectPool<BulkNode>.TryRent());
        }
        finally
        {
            SpindlePool.MaxRetainedPerType = saved;
            Drain<BulkNode>();
        }
    }

    [Fact]
    public void MaxRetainedPerType_Lowered_CapsLaterReturnsAndKeepsObjectsAlreadyPooled()
    {
        Drain<LowCapNode>();
        int saved = SpindlePool.MaxRetainedPerType;
        int chunk = ObjectPool<LowCapNode>.Chunk;
        try
        {
            foreach (LowCapNode node in Make<LowCapNode>(200))
            {
                ObjectPool<LowCapNode>.Return(node);
            }
            int before = ObjectPool<LowCapNode>.Count;
            Assert.True(before >= 4 * chunk, $"expected several chunks in the shared stack, found {before}");

            SpindlePool.MaxRetainedPerType = 2 * chunk + 8;

            Assert.Equal(2 * chunk + 8, SpindlePool.MaxRetainedPerType);
            Assert.Equal(before, ObjectPool<LowCapNode>.Count); // lowering the cap drops nothing
            foreach (LowCapNode node in Make<LowCapNode>(100))
            {
                ObjectPool<LowCapNode>.Return(node);
            }
            Assert.Equal(before, ObjectPool<LowCapNode>.Count); // but nothing more is kept
            Drain<LowCapNode>();
            foreach (LowCapNode node in Make<LowCapNode>(200))
            {
                ObjectPool<LowCapNode>.Return(node);
            }
            Assert.Equal(2 * chunk, ObjectPool<LowCapNode>.Count); // whole chunks, up to the cap
        }
        finally
        {
            SpindlePool.MaxRetainedPerType = saved;
            Drain<LowCapNode>();
        }
    }

    [Fact]
    public void MaxRetainedPerType_Zero_DisablesTheSharedStack()
    {
        Drain<ZeroCapNode>();
        int saved = SpindlePool.MaxRetainedPerType;
        try
        {
            SpindlePool.MaxRetainedPerType = 0;

            foreach (ZeroCapNode node in Make<ZeroCapNode>(5))
            {
                ObjectPool<ZeroCapNode>.Return(node);
            }

            Assert.Equal(0, ObjectPool<ZeroCapNode>.Count);
        }
        finally
        {
            SpindlePool.MaxRetainedPerType = saved;
            Drain<ZeroCapNode>();
        }
    }

#if DEBUG // the two hooks exist only in a Debug build
    /// <summary>
    /// Two threads give a chunk back at once to a shared stack with room for one: the second passes the look at the room
    /// made outside the gate, then waits for the gate while the first fills the stack. Under the gate it must look again
    /// and drop its chunk. Without that second look it linked its chunk too, and the stack held twice its cap, as many
    /// threads returning at once could make it hold many times over (mutation testing, mut52: no test failed with the
    /// look under the gate removed). The hooks hold the first thread in the gate until the second has split its chunk off,
    /// then a little longer, for the second to pass the first look and reach the gate; each waits with a bound.
    /// </summary>
    [Fact]
    public void TwoChunksGivenBackAtOnce_ToAStackWithRoomForOne_LeaveItWithinItsCap()
    {
        const string Holder = "gate-race holder", Second = "gate-race second";
        int chunk = ObjectPool<GateRaceCapNode>.Chunk, localMax = ObjectPool<GateRaceCapNode>.LocalMax;
        Drain<GateRaceCapNode>();
        int saved = SpindlePool.MaxRetainedPerType;
        using var holding = new ManualResetEventSlim();
        using var secondSplit = new ManualResetEventSlim();
        bool secondCameInTime = true;
        try
        {
            SpindlePool.MaxRetainedPerType = chunk; // room for one chunk
            PoolTestHooks.GateHeld = () =>
            {
                if (Thread.CurrentThread.Name == Holder)
                {
                    holding.Set();
                    secondCameInTime = secondSplit.Wait(TimeSpan.FromSeconds(30));
                    Thread.Sleep(100); // the second thread looks at the room (still empty) and spins on the gate
                }
            };
            PoolTestHooks.ChunkSplitOff = () =>
            {
                if (Thread.CurrentThread.Name == Second)
                {
                    secondSplit.Set();
                }
            };
            // Each thread's stack keeps LocalMax; the return after that gives a chunk back.
            Task holder = TestUtil.RunOnThread(() => ReturnNew(localMax + 1), Holder);
            Assert.True(holding.Wait(TimeSpan.FromSeconds(30)), "the first thread never held the gate");
            Task second = TestUtil.RunOnThread(() => ReturnNew(localMax + 1), Second);
            Assert.True(Task.WaitAll(new[] { holder, second }, TimeSpan.FromSeconds(30)), "a returning thread did not finish");
            Assert.True(secondCameInTime, "the second thread never split its chunk off");
            int shared = ObjectPool<GateRaceCapNode>.Count;
            Assert.True(shared <= chunk, $"the shared stack holds {shared}, over its cap of {chunk}: the second chunk was linked without a look at the room under the gate");
        }
        finally
        {
            PoolTestHooks.GateHeld = null;
            PoolTestHooks.ChunkSplitOff = null;
            secondSplit.Set();
            SpindlePool.MaxRetainedPerType = saved;
            Drain<GateRaceCapNode>();
        }

        static void ReturnNew(int count)
        {
            for (int i = 0; i < count; i++)
            {
                ObjectPool<GateRaceCapNode>.Return(new GateRaceCapNode());
            }
        }
    }
#endif

    [Fact]
    public void MaxRetainedPerType_Negative_ThrowsArgumentOutOfRangeAndKeepsTheCap()
    {
        int saved = SpindlePool.MaxRetainedPerType;
        try
        {
            Assert.Throws<ArgumentOutOfRangeException>(() => SpindlePool.MaxRetainedPerType = -1);
            Assert.Throws<ArgumentOutOfRangeException>(() => SpindlePool.MaxRetainedPerType = int.MinValue);
            Assert.Equal(saved, SpindlePool.MaxRetainedPerType);
        }
        finally
        {
            SpindlePool.MaxRetainedPerType = saved;
        }
    }

    private static async SpindleTask<int> Box(Promise<int> promise) => await promise.Task;

    [Fact]
    public void Trim_AfterObjectsWerePooled_RetainedCountIsZero()
    {
        foreach (TrimNode node in Make<TrimNode>(100))
        {
            ObjectPool<TrimNode>.Return(node); // past a thread stack's worth, chunks go to the shared stack
        }
        // And real Spindle objects: boxes completed and read on this thread.
        var promises = new Promise<int>[20];
        var tasks = new SpindleTask<int>[20];
        for (int i = 0; i < tasks.Length; i++)
        {
            promises[i] = new Promise<int>();
            tasks[i] = Box(promises[i]);
        }
        for (int i = 0; i < tasks.Length; i++)
        {
            promises[i].SetResult(i);
            Assert.Equal(i, tasks[i].GetAwaiter().GetResult());
        }
        Assert.True(SpindlePool.RetainedCount >= 100 - ObjectPool<TrimNode>.LocalMax);

        SpindlePool.Trim();

        Assert.Equal(0, SpindlePool.RetainedCount);
        Assert.Equal(0, ObjectPool<TrimNode>.Count);
        Drain<TrimNode>();
    }

    [Fact]
    public void Trim_ObjectInTheCallingThreadsSlot_IsDropped()
    {
        // SpindlePool.Trim documents that it also empties the calling thread's per-thread caches.
        Drain<TrimNode>();
        ObjectPool<TrimNode>.Return(new TrimNode());

        SpindlePool.Trim();

        Assert.Null(ObjectPool<TrimNode>.TryRent());
    }

    [Fact]
    public async Task TryRent_ObjectsReturnedOnAnotherThread_ComeFromTheSharedStackAChunkAtATime()
    {
        Drain<CrossThreadNode>();
        int chunk = ObjectPool<CrossThreadNode>.Chunk;
        CrossThreadNode[] nodes = Make<CrossThreadNode>(ObjectPool<CrossThreadNode>.LocalMax + 1);

        await TestUtil.WithTimeout(TestUtil.RunOnThread(() =>
        {
            foreach (CrossThreadNode node in nodes)
            {
                ObjectPool<CrossThreadNode>.Return(node); // one past a full thread stack moves a chunk to the shared stack
            }
        }));

        Assert.Equal(chunk, ObjectPool<CrossThreadNode>.Count);
        var seen = new System.Collections.Generic.HashSet<CrossThreadNode>();
        for (int i = 0; i < chunk; i++)
        {
            CrossThreadNode? n = ObjectPool<CrossThreadNode>.TryRent();
            Assert.NotNull(n);
            Assert.Null(n!.Next);
            Assert.True(seen.Add(n), "an object was handed out twice");
        }
        Assert.Null(ObjectPool<CrossThreadNode>.TryRent());
        Assert.Equal(0, ObjectPool<CrossThreadNode>.Count);
    }

    [Fact]
    public async Task RentAndReturn_FromManyThreadsAtOnce_NeverHandsOneObjectToTwoRenters()
    {
        const int Threads = 4;
        int iterations = TestUtil.Stress(200_000);
        int doubleRents = 0;

        var workers = new Task[Threads];
        for (int t = 0; t < Threads; t++)
        {
            workers[t] = TestUtil.RunOnThread(() =>
            {
                var held = new ConcurrentNode?[4];
                for (int i = 0; i < iterations; i++)
                {
                    int slot = i & 3;
                    if (held[slot] is { } node)
                    {
                        Volatile.Write(ref node.InUse, 0);
                        ObjectPool<ConcurrentNode>.Return(node);
                        held[slot] = null;
                    }
                    else
                    {
                        ConcurrentNode rented = ObjectPool<ConcurrentNode>.TryRent() ?? new ConcurrentNode();
                        if (Interlocked.Exchange(ref rented.InUse, 1) != 0)
                        {
                            Interlocked.Increment(ref doubleRents);
                        }
                        held[slot] = rented;
                    }
                }
            }, "pool user " + t);
        }

        await TestUtil.WithTimeout(Task.WhenAll(workers), TestUtil.StressTimeout(60));

        Assert.Equal(0, doubleRents);
        Assert.InRange(ObjectPool<ConcurrentNode>.Count, 0, SpindlePool.MaxRetainedPerType);
    }

    private sealed class Payload;

    private static async SpindleTask<int> HoldAcrossAwait(Promise<int> promise, Payload payload)
    {
        int before = payload.GetHashCode();
        int value = await promise.Task;
        return value + (payload.GetHashCode() - before);
    }

    private static async SpindleTask<Payload> ReturnPayload(Promise<int> promise)
    {
        await promise.Task;
        return new Payload();
    }

    private static async SpindleTask<int> ThrowPayloadException(Promise<int> promise)
    {
        await promise.Task;
        throw new InvalidTimeZoneException("payload");
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    private static (WeakReference Local, WeakReference Result, WeakReference Error, WeakReference Closure, WeakReference RunResult) UseAndReturnToPools()
    {
        var localPayload = new Payload();
        var localRef = new WeakReference(localPayload);
        var p1 = new Promise<int>();
        SpindleTask<int> t1 = HoldAcrossAwait(p1, localPayload);
        p1.SetResult(1);
        if (t1.GetAwaiter().GetResult() != 1)
        {
            throw new InvalidOperationException("wrong result");
        }

        var p2 = new Promise<int>();
        SpindleTask<Payload> t2 = ReturnPayload(p2);
        p2.SetResult(0);
        var resultRef = new WeakReference(t2.GetAwaiter().GetResult());

        var p3 = new Promise<int>();
        SpindleTask<int> t3 = ThrowPayloadException(p3);
        p3.SetResult(0);
        WeakReference errorRef;
        try
        {
            t3.GetAwaiter().GetResult();
            throw new InvalidOperationException("no exception");
        }
        catch (InvalidTimeZoneException ex)
        {
            errorRef = new WeakReference(ex);
        }

        var captured = new Payload();
        Action closure = () => GC.KeepAlive(captured);
        var closureRef = new WeakReference(closure);
        Spindle.Run(closure).GetAwaiter().GetResult();

        SpindleTask<Payload> run = Spindle.Run(() => new Payload());
        var runResultRef = new WeakReference(run.GetAwaiter().GetResult());

        return (localRef, resultRef, errorRef, closureRef, runResultRef);
    }

    [Fact]
    public async Task Return_AfterAUseIsRead_PooledObjectsHoldNothingFromThatUse()
    {
        // The boxes and run items of these uses sit in pools afterwards; they must not keep the use's locals,
        // result, exception or delegate alive.
        var refs = await TestUtil.WithTimeout(Task.Factory.StartNew(
            UseAndReturnToPools, CancellationToken.None, TaskCreationOptions.LongRunning, TaskScheduler.Default));

        GC.Collect();
        GC.WaitForPendingFinalizers();
        GC.Collect();

        Assert.False(refs.Local.IsAlive, "a box kept a local of its last use alive");
        Assert.False(refs.Result.IsAlive, "a box kept the result of its last use alive");
        Assert.False(refs.Error.IsAlive, "a box kept the exception of its last use alive");
        Assert.False(refs.Closure.IsAlive, "a run item kept the delegate of its last use alive");
        Assert.False(refs.RunResult.IsAlive, "a run item kept the result of its last use alive");
    }

    [Fact]
    public void RentInsideALoopStep_WithItsStackEmpty_TakesOneChunk_NotTheWholeSharedStack()
    {
        // Many matches in one server, each its own FrameLoop: a loop thread keeps what it returns past the cap, so a
        // whole shared stack it took stayed with it, and the other loops found the shared stack empty and allocated (100
        // loops of 500 entities racing a delay against a WaitUntil: 1.8 KB a frame, all of it kept; the heap grew without
        // end). Inside a loop step a rent takes one chunk; outside one it still takes the whole stack.
        Drain<LoopRentNode>();
        int saved = SpindlePool.MaxRetainedPerType;
        try
        {
            SpindlePool.MaxRetainedPerType = 256;
            ReturnOnAnotherThread<LoopRentNode>(256 + ObjectPool<LoopRentNode>.LocalMax);
            Assert.Equal(256, ObjectPool<LoopRentNode>.Count);

            int sharedAfterLoopRent = -1, localAfterLoopRent = -1;
            LoopRentNode? rented = null;
            InsideAFrame(() =>
            {
                rented = ObjectPool<LoopRentNode>.TryRent();
                sharedAfterLoopRent = ObjectPool<LoopRentNode>.Count;
                localAfterLoopRent = ObjectPool<LoopRentNode>.LocalCount;
            });

            Assert.NotNull(rented);
            Assert.Equal(256 - ObjectPool<LoopRentNode>.Chunk, sharedAfterLoopRent); // before the fix: 0
            Assert.Equal(ObjectPool<LoopRentNode>.Chunk - 1, localAfterLoopRent); // before: 255

            // Outside a loop step, a rent still takes the rest in one go.
            Drain<LoopRentNode>();
            Assert.Equal(0, ObjectPool<LoopRentNode>.Count);
        }
        finally
        {
            SpindlePool.MaxRetainedPerType = saved;
            Drain<LoopRentNode>();
        }
    }

    /// <summary>
    /// Loop steps renting one chunk (a walk of 16 links under the gate) and keeping the chunks they split off, beside
    /// threads outside any step, objects that circulate between the threads, and trims of the shared stack, with a cap
    /// low enough that the shared stack is full most of the time: no object is rented twice at once, the gate is never
    /// left held (a walk past the end of a stack shorter than its count would throw under it, and every thread would
    /// then hang), and afterwards every stack's count equals its links, no object is linked in two stacks, and the shared
    /// stack is within its cap. (A review of stop 40's changes: the rent of one chunk and the kept chunk, a56ebb7.)
    /// </summary>
    [Fact]
    public void LoopStepsAndOtherThreads_RentingReturningAndTrimming_KeepEveryStacksCountEqualToItsLinks()
    {
        const int Threads = 4, Rounds = 4_000, Cap = 64;
        Drain<LoopRaceNode>();
        int saved = SpindlePool.MaxRetainedPerType;
        int slotIndex = (int)typeof(ObjectPool<LoopRaceNode>).GetField("s_slotIndex", BindingFlags.NonPublic | BindingFlags.Static)!.GetValue(null)!;
        var trim = (Action)typeof(ObjectPool<LoopRaceNode>).GetMethod("Trim", BindingFlags.NonPublic | BindingFlags.Static)!.CreateDelegate(typeof(Action));
        var handoff = new ConcurrentQueue<LoopRaceNode>();
        var linked = new ConcurrentDictionary<LoopRaceNode, byte>(ReferenceEqualityComparer.Instance);
        var failures = new ConcurrentQueue<string>();
        int doubleRents = 0, finished = 0;
#if DEBUG // the split's hook, and so these counts, exist only in a Debug build
        int splitsInSteps = 0, keptAfterSplit = 0;
#endif
        using var fillRequest = new AutoResetEvent(false);
        using var filled = new AutoResetEvent(false);
#if DEBUG
        Thread? filler = null;
#endif

        // Walks the calling thread's own stack: its links must number its count (checked after every round: a stack that
        // runs empty is counted afresh, so a wrong count may not last), and at the end no node may be in two stacks.
        bool CheckOwnStack(string who, bool last)
        {
            object? head = ThreadSlots.Get(slotIndex).Head;
            int count = ObjectPool<LoopRaceNode>.LocalCount, links = 0;
            for (var n = (LoopRaceNode?)head; n is not null && links <= count; n = n.Next)
            {
                links++;
                if (last && !linked.TryAdd(n, 0))
                {
                    failures.Enqueue(who + ": a node linked in two stacks (or twice in one)");
                    return false;
                }
            }
            if (links != count)
            {
                failures.Enqueue($"{who}: its stack counts {count} and links {(links > count ? "more" : links.ToString())}");
                return false;
            }
            return true;
        }

        try
        {
            SpindlePool.MaxRetainedPerType = Cap;
#if DEBUG
            // Every 32nd chunk a loop step splits off, another thread fills the shared stack meanwhile (between the split and
            // the second look), so that the step links the chunk back (KeepInLoopStepOrDrop): left to chance, that
            // happened 2 to 50 times a run.
            PoolTestHooks.ChunkSplitOff = () =>
            {
                if (ThreadSlots.IsInsideLoopStep && Thread.CurrentThread.Name == "loop-race" && Interlocked.Increment(ref splitsInSteps) % 32 == 0)
                {
                    lock (fillRequest)
                    {
                        fillRequest.Set();
                        filled.WaitOne();
                    }
                    if (ObjectPool<LoopRaceNode>.Count + ObjectPool<LoopRaceNode>.Chunk > Cap)
                    {
                        Interlocked.Increment(ref keptAfterSplit);
                    }
                }
            };
            filler = new Thread(() =>
            {
                while (true)
                {
                    fillRequest.WaitOne();
                    if (Volatile.Read(ref finished) == Threads)
                    {
                        return;
                    }
                    for (int i = 0; i < Cap + ObjectPool<LoopRaceNode>.LocalMax; i++)
                    {
                        ObjectPool<LoopRaceNode>.Return(new LoopRaceNode());
                    }
                    filled.Set();
                }
            })
            { IsBackground = true };
            filler.Start();
#endif
            var threads = new Thread[Threads + 1];
            for (int t = 0; t < Threads; t++)
            {
                bool loopThread = t < 2; // two loop threads (in a step most of the time), two others
                int seed = t;
                threads[t] = new Thread(() =>
                {
                    var random = new Random(seed);
                    var held = new List<LoopRaceNode>();
                    try
                    {
                        for (int round = 0; round < Rounds; round++)
                        {
                            bool step = loopThread && round % 8 != 7; // a loop thread between its frames now and then
                            object? outer = null;
                            if (step)
                            {
                                outer = ThreadSlots.EnterLoopStep(held); // any object stands for the loop
                            }
                            try
                            {
                                int rent = random.Next(1, 3 * ObjectPool<LoopRaceNode>.LocalMax);
                                for (int i = 0; i < rent; i++)
                                {
                                    LoopRaceNode node = ObjectPool<LoopRaceNode>.TryRent() ?? new LoopRaceNode();
                                    if (Interlocked.Exchange(ref node.InUse, 1) != 0)
                                    {
                                        Interlocked.Increment(ref doubleRents);
                                    }
                                    held.Add(node);
                                }
                                // Some go to another thread, which returns them there; the rest come back here, with
                                // what other threads handed over.
                                for (int i = 0; i < held.Count; i++)
                                {
                                    LoopRaceNode node = held[i];
                                    Volatile.Write(ref node.InUse, 0);
                                    if (random.Next(4) == 0)
                                    {
                                        handoff.Enqueue(node);
                                    }
                                    else
                                    {
                                        ObjectPool<LoopRaceNode>.Return(node);
                                    }
                                }
                                held.Clear();
                                for (int i = random.Next(ObjectPool<LoopRaceNode>.LocalMax); i > 0 && handoff.TryDequeue(out LoopRaceNode? other); i--)
                                {
                                    ObjectPool<LoopRaceNode>.Return(other);
                                }
                                for (int i = loopThread ? 0 : random.Next(ObjectPool<LoopRaceNode>.Chunk); i > 0; i--)
                                {
                                    ObjectPool<LoopRaceNode>.Return(new LoopRaceNode()); // more than they rent: the shared stack fills
                                }
                            }
                            finally
                            {
                                if (step)
                                {
                                    ThreadSlots.ExitLoopStep(outer);
                                }
                            }
                            if (!CheckOwnStack((loopThread ? "loop thread " : "thread ") + seed + " at round " + round, last: false))
                            {
                                break;
                            }
                        }
                        CheckOwnStack((loopThread ? "loop thread " : "thread ") + seed, last: true);
                    }
                    catch (Exception e)
                    {
                        failures.Enqueue(e.ToString());
                    }
                    finally
                    {
                        Interlocked.Increment(ref finished);
                    }
                });
            }
            threads[Threads] = new Thread(() =>
            {
                while (Volatile.Read(ref finished) < Threads)
                {
                    trim();
                    Thread.Sleep(1);
                }
            });
            foreach (Thread thread in threads)
            {
                thread.IsBackground = true;
                thread.Name = "loop-race"; // the hook acts on these threads only
                thread.Start();
            }
            foreach (Thread thread in threads)
            {
                Assert.True(thread.Join(TimeSpan.FromMinutes(2)), "a thread never finished: the pool's gate was left held?");
            }

            Assert.Empty(failures);
            Assert.Equal(0, doubleRents);
#if DEBUG
            Assert.True(keptAfterSplit > 0, $"no loop step found the shared stack full after its split ({splitsInSteps} splits): the kept chunk's path was not exercised");
#endif
            // The shared stack: its count is its links, within the cap, and no node of it is in a thread's stack.
            var sharedHead = (LoopRaceNode?)typeof(ObjectPool<LoopRaceNode>).GetField("s_head", BindingFlags.NonPublic | BindingFlags.Static)!.GetValue(null);
            int shared = ObjectPool<LoopRaceNode>.Count, sharedLinks = 0;
            for (LoopRaceNode? n = sharedHead; n is not null && sharedLinks <= shared; n = n.Next)
            {
                sharedLinks++;
                Assert.True(linked.TryAdd(n, 0), "a node of the shared stack is also in a thread's stack, or linked twice");
            }
            Assert.Equal(shared, sharedLinks);
            Assert.True(shared <= Cap, $"the shared stack holds {shared}, over its cap of {Cap}");
        }
        finally
        {
#if DEBUG
            PoolTestHooks.ChunkSplitOff = null;
            Volatile.Write(ref finished, Threads);
            fillRequest.Set();
            filler?.Join();
#endif
            SpindlePool.MaxRetainedPerType = saved;
            Drain<LoopRaceNode>();
        }
    }

#if DEBUG // the hook between a chunk's split and the shared stack's second check exists only in a Debug build
    [Fact]
    public void ReturnChunkInsideALoopStep_WhenOtherThreadsFillTheSharedStackMeanwhile_KeepsTheChunk()
    {
        // A loop thread's return found room in the shared stack, split a chunk off, and by the time it looked again other
        // threads had filled the stack: the chunk was dropped, though inside a loop step a full stack means "keep it",
        // and the loop rented those objects again next frame (16 objects allocated per lost race, with many loops).
        Drain<LoopKeepNode>();
        int saved = SpindlePool.MaxRetainedPerType;
        Thread me = Thread.CurrentThread;
        int fills = 0;
        try
        {
            SpindlePool.MaxRetainedPerType = 64;
            ReturnOnAnotherThread<LoopKeepNode>(48 + ObjectPool<LoopKeepNode>.LocalMax);
            Assert.Equal(48, ObjectPool<LoopKeepNode>.Count);
            PoolTestHooks.ChunkSplitOff = () =>
            {
                if (Thread.CurrentThread == me && Interlocked.Exchange(ref fills, 1) == 0)
                {
                    // Another thread returns one chunk's worth meanwhile: the shared stack is at its cap.
                    ReturnOnAnotherThread<LoopKeepNode>(ObjectPool<LoopKeepNode>.Chunk + ObjectPool<LoopKeepNode>.LocalMax);
                }
            };

            int local = -1, shared = -1;
            LoopKeepNode[] mine = Make<LoopKeepNode>(ObjectPool<LoopKeepNode>.LocalMax + 1);
            InsideAFrame(() =>
            {
                foreach (LoopKeepNode node in mine)
                {
                    ObjectPool<LoopKeepNode>.Return(node);
                }
                local = ObjectPool<LoopKeepNode>.LocalCount;
                shared = ObjectPool<LoopKeepNode>.Count;
            });

            Assert.Equal(1, fills);
            Assert.Equal(64, shared);
            Assert.Equal(mine.Length, local); // before the fix: 17 (a chunk of 16 dropped)
            var back = new System.Collections.Generic.HashSet<LoopKeepNode>();
            for (int i = 0; i < mine.Length; i++)
            {
                back.Add(ObjectPool<LoopKeepNode>.TryRent()!);
            }
            Assert.True(back.SetEquals(mine), "every node the loop returned is rented back from its own stack");
        }
        finally
        {
            PoolTestHooks.ChunkSplitOff = null;
            SpindlePool.MaxRetainedPerType = saved;
            Drain<LoopKeepNode>();
        }
    }
    [Fact]
    public void RentInsideALoopStep_WhileAnotherThreadHoldsTheGate_WaitsForIt_InsteadOfAllocating()
    {
        // Many matches in one server, each its own FrameLoop on its own thread (200 loops on two cores): a thread holding
        // a shared stack's gate was often preempted, and a loop thread whose own stack was empty gave up on the gate
        // after a few short tries and allocated. Nearly all of the 590 B a frame those loops still allocated were such
        // rents (a per-type count in the user's program: about 29,000 in 8 s, against 6 rents that found the shared
        // stack empty). Here another thread holds the gate, for far longer than the few tries last, while the rent is
        // made: inside a loop step the rent now waits and takes a pooled node; outside one it still gives up at once
        // (its caller allocates), as before.
        Drain<GateNode>();
        int saved = SpindlePool.MaxRetainedPerType;
        try
        {
            SpindlePool.MaxRetainedPerType = 4096;
            ReturnOnAnotherThread<GateNode>(2 * ObjectPool<GateNode>.Chunk + ObjectPool<GateNode>.LocalMax);
            Assert.Equal(2 * ObjectPool<GateNode>.Chunk, ObjectPool<GateNode>.Count);

            Assert.NotNull(RentWhileTheGateIsHeld(ObjectPool<GateNode>.TryRent, insideALoopStep: true)); // before the fix: null (allocated)
            Assert.Null(RentWhileTheGateIsHeld(ObjectPool<GateNode>.TryRent, insideALoopStep: false));
        }
        finally
        {
            PoolTestHooks.GateHeld = null;
            SpindlePool.MaxRetainedPerType = saved;
            Drain<GateNode>();
        }
    }

    [Fact]
    public void CirculatingRent_OnAPlainThread_WhileAnotherThreadHoldsTheGate_WaitsForIt_InsteadOfAllocating()
    {
        // A frame's job graph scheduled on a game's main thread (a plain thread) and run by the workers: the nodes and
        // edges circulate, rented there and returned on the workers, which give them back to the shared stack a chunk at
        // a time under its gate. On a loaded machine (the two test suites at once on two cores) a worker was now and then
        // preempted holding the gate while the main thread's own stack was empty: the rent gave up on the gate after a
        // few short tries and allocated one node, 200 B in one of 1,000 settled frames
        // (JobGraphSettleAllocationTests, 2 of 6 CI runs). Here another thread holds the gate, for far longer than the
        // few tries last, while a plain thread rents a circulating type: it now waits and takes a pooled node, and the
        // pool makes none. An ordinary type's rent off a loop step still gives up at once (its caller allocates).
        Drain<CirculatingGateNode>();
        int saved = SpindlePool.MaxRetainedPerType;
        try
        {
            SpindlePool.MaxRetainedPerType = 4096;
            ReturnOnAnotherThread<CirculatingGateNode>(2 * ObjectPool<CirculatingGateNode>.Chunk + ObjectPool<CirculatingGateNode>.LocalMax);
            Assert.Equal(2 * ObjectPool<CirculatingGateNode>.Chunk, ObjectPool<CirculatingGateNode>.Count);

            int made = CirculatingPool<CirculatingGateNode>.Made;
            RentWhileTheGateIsHeld<CirculatingGateNode>(CirculatingPool<CirculatingGateNode>.Rent, insideALoopStep: false);
            Assert.True( // before the fix: 1 (the rent gave up on the gate and allocated)
                CirculatingPool<CirculatingGateNode>.Made == made,
                $"the rent made {CirculatingPool<CirculatingGateNode>.Made - made} node(s) while another thread held the gate, instead of waiting for it");

            Assert.Null(RentWhileTheGateIsHeld(ObjectPool<CirculatingGateNode>.TryRent, insideALoopStep: false));
        }
        finally
        {
            PoolTestHooks.GateHeld = null;
            SpindlePool.MaxRetainedPerType = saved;
            Drain<CirculatingGateNode>();
        }
    }

    /// <summary>
    /// Rents a node with <paramref name="rent"/> on a new thread (inside a loop step or not) while a returning thread holds
    /// the shared stack's gate: the holder lets go once the rent has ended, or after 300 ms if it has not (a rent that waits
    /// for the gate ends only then). Returns what the rent got, or null.
    /// </summary>
    private static T? RentWhileTheGateIsHeld<T>(Func<T?> rent, bool insideALoopStep)
        where T : Node<T>, new()
    {
        using var held = new ManualResetEventSlim(false);
        using var rentEnded = new ManualResetEventSlim(false);
        Thread? holder = null;
        PoolTestHooks.GateHeld = () =>
        {
            if (Thread.CurrentThread == holder)
            {
                held.Set();
                rentEnded.Wait(TimeSpan.FromMilliseconds(300)); // the gate stays held meanwhile
            }
        };
        holder = new Thread(() =>
        {
            // One more than the thread's stack keeps: the return moves a chunk to the shared stack, under the gate.
            foreach (T node in Make<T>(ObjectPool<T>.LocalMax + 1))
            {
                ObjectPool<T>.Return(node);
            }
        });
        holder.Start();
        Assert.True(held.Wait(TimeSpan.FromSeconds(30)), "the returning thread never took the gate");

        T? rented = null;
        var renter = new Thread(() =>
        {
            // This thread's own stack is empty: the rent goes to the shared stack.
            if (insideALoopStep)
            {
                InsideAFrame(() => rented = rent());
            }
            else
            {
                rented = rent();
            }
            rentEnded.Set();
        });
        renter.Start();
        Assert.True(renter.Join(TimeSpan.FromSeconds(30)), "the rent never ended");
        Assert.True(holder.Join(TimeSpan.FromSeconds(30)), "the returning thread never ended");
        PoolTestHooks.GateHeld = null;
        return rented;
    }
#endif
}

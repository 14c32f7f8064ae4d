using System;
using System.Runtime.CompilerServices;
using System.Threading;

namespace SpindleLib;

/// <summary>An object that can sit in an <see cref="ObjectPool{T}"/>: it carries its own intrusive link.</summary>
internal interface IPoolNode<T> where T : class
{
    ref T? Next { get; }
}

/// <summary>
/// One pool per pooled type: a small per-thread stack in front of a bounded shared stack.
/// </summary>
/// <remarks>
/// <para>The shared stack is an intrusive singly linked list guarded by a CAS gate (<see cref="s_gate"/>), the design
/// UniTask's TaskPool uses. Invariant: <see cref="s_head"/> and <see cref="s_count"/> change only while the gate is
/// held, so the list has no ABA problem. The gate is held for a few instructions. A renter that cannot take it after a
/// few short retries allocates instead of waiting, except on a frame loop's thread inside a step and for a type that
/// circulates (<see cref="TryRentCirculating"/>), which wait (see <see cref="RentChunk"/>); a returner waits for it,
/// because dropping returned objects under contention made objects that circulate between threads (rented by a
/// scheduler, returned by a worker) leak out of the pool and be allocated again in steady state.</para>
/// <para>Each thread keeps up to <see cref="LocalMax"/> objects of each type in its own stack, with no synchronisation
/// at all, and trades with the shared stack a chunk of <see cref="Chunk"/> objects at a time. A thread that returns
/// what it rented (a continuation chain on one worker) never touches the gate. A producer–consumer pair (jobs
/// scheduled on one thread and finished on another) takes the gate once per <see cref="Chunk"/> objects, instead of
/// once per object. The per-thread stacks live in one non-generic <c>[ThreadStatic]</c> array (<see cref="ThreadSlots"/>),
/// indexed by <see cref="s_slotIndex"/>: a thread-static field of a generic class goes through a slow runtime helper on
/// each access, while a non-generic one is reached inline.</para>
/// <para>Callers clear every field of an object before returning it, so no result, exception, continuation or
/// <see cref="ExecutionContext"/> survives from one use to the next.</para>
/// </remarks>
internal static class ObjectPool<T> where T : class, IPoolNode<T>
{
    internal const int LocalMax = 32;
    internal const int Chunk = 16;

    private static readonly int s_slotIndex = ThreadSlots.AllocateIndex();
    private static readonly bool s_registered = SpindlePool.Register(typeof(T), static () => Count, static () => Trim());
    private static int s_gate;
    private static T? s_head;
    private static int s_count;

    /// <summary>The number of objects in the shared stack (per-thread stacks are not counted).</summary>
    public static int Count => Volatile.Read(ref s_count);

    /// <summary>The number of objects in the calling thread's own stack (for tests that prove nothing leaked).</summary>
    internal static int LocalCount => ThreadSlots.Get(s_slotIndex).Count;

    // Inlined into its (exactly typed) callers, this pool's statics are reached directly: called, the shared generic
    // code looks them up through a runtime helper on every rent and return.
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public static T? TryRent() => Rent(circulating: false);

    /// <summary>
    /// As <see cref="TryRent"/>, for a type that circulates between threads (<see cref="CirculatingPool{T}"/>): a rent
    /// that finds the shared stack's gate busy waits for it on any thread, as a frame loop's step does for every type
    /// (see <see cref="RentChunk"/>). Null only when the shared stack is empty.
    /// </summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public static T? TryRentCirculating() => Rent(circulating: true);

    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    private static T? Rent(bool circulating)
    {
        ref ThreadSlots.Slot local = ref ThreadSlots.Get(s_slotIndex);
        object? top = local.Head;
        if (top is not null)
        {
            T item = (T)top; // T is a sealed class in every use, so this cast is one type-handle compare
            local.Head = item.Next;
            local.Count--;
            item.Next = null;
            return item;
        }
        return RentChunk(ref local, circulating);
    }

    /// <summary>
    /// The thread's stack is empty: take the whole shared stack, in O(1) under the gate, and keep all but one locally
    /// (a thread that is none of Spindle's own then gives back all but a chunk: <see cref="KeepAChunk"/>).
    /// A thread that rents in bulk (scheduling many jobs) then rents from its own stack; it gives back what it does not
    /// need a chunk at a time when it returns objects. Nothing is walked under the gate: the objects were last touched
    /// on other cores, and reaching each one is a cache miss best paid outside it.
    /// </summary>
    /// <remarks>
    /// A frame loop's thread inside a step takes one <see cref="Chunk"/> instead (a walk of that many links under the
    /// gate). It keeps what it returns past the cap (<see cref="ReturnChunk"/>), so a whole shared stack taken by it
    /// stayed with it whenever the shared stack had filled again by the time it returned them: with many loops (a server
    /// hosting a match per loop), each loop thread came to hold up to the cap of each type beyond its own needs, the other
    /// loops found the shared stack empty and allocated, and the process kept growing (100 loops of 500 entities racing
    /// a delay against a WaitUntil: 1.8 KB a frame allocated, all of it kept; ObjectPoolTests.RentInsideALoopStep_...).
    /// A loop thread then holds what it has in flight and what it returned last, as the keep rule means it to.
    /// </remarks>
    private static T? RentChunk(ref ThreadSlots.Slot local, bool circulating)
    {
        if (Volatile.Read(ref s_head) is null)
        {
            return null;
        }
        if (!TryTakeGate())
        {
            if (!circulating && !ThreadSlots.IsInsideLoopStep)
            {
                return null; // the caller allocates
            }
            // A frame loop's thread inside a step waits for the gate, as a return does: what it would allocate instead
            // is an object it rents again every frame, so each lost race was an allocation in steady state. With many
            // loop threads (a server hosting a match per loop, more threads than cores), a holder preempted for a time
            // slice made every loop renting that type meanwhile allocate: nearly all of the 590 B a frame 200 such loops
            // allocated (ObjectPoolTests.RentInsideALoopStep_WhileAnotherThreadHoldsTheGate_...). A type that
            // circulates (a job's node or edge, rented by the thread that schedules and returned by the worker that
            // finishes it) waits on any thread, for the same reason: a game's main thread is a plain thread, and on a
            // loaded machine a worker preempted while giving a chunk back made it allocate a node now and then, long
            // after the graph had settled (ObjectPoolTests.CirculatingRent_OnAPlainThread_WhileAnotherThreadHolds...).
            // Off a loop step the caller of any other type still allocates rather than wait.
            TakeGate();
        }
        T? first = s_head;
        if (first is null)
        {
            Volatile.Write(ref s_gate, 0);
            return null;
        }
        int taken = s_count;
        if (taken > Chunk && ThreadSlots.IsInsideLoopStep)
        {
            T last = first;
            for (int i = 1; i < Chunk; i++)
            {
                last = last.Next!;
            }
            s_head = last.Next;
            s_count = taken - Chunk;
            last.Next = null;
            taken = Chunk;
        }
        else
        {
            s_head = null;
            s_count = 0;
        }
        Volatile.Write(ref s_gate, 0);
        if (taken > Chunk && !ThreadSlots.AnswersTrimRequests && !ThreadSlots.IsInsideLoopStep)
        {
            taken = KeepAChunk(first, taken);
        }
        local.Head = first.Next;
        local.Count = taken - 1;
        first.Next = null;
        return first;
    }

    /// <summary>
    /// A thread that is none of Spindle's own took a whole shared stack (<paramref name="taken"/> objects from
    /// <paramref name="first"/>): it keeps one <see cref="Chunk"/> and gives the rest back. Returns how many it keeps.
    /// </summary>
    /// <remarks>
    /// <see cref="SpindlePool.Trim"/> reaches the calling thread's stacks and Spindle's own threads' (which answer its
    /// requests), never another thread of the program: a plain thread that awaited once after a burst (a request thread, a
    /// socket callback, a .NET ThreadPool thread that then idled) held the whole shared stack of that method's box, up to
    /// the cap, beyond every trim, for as long as it lived (one awaiting thread kept 478 KB of boxes after a burst of
    /// 20,000 and a trim; leads49, docs/decisions.md section 46). The walk splits off one chunk outside the gate (the
    /// renter would reach those objects anyway), and the rest goes back in one store if the shared stack is still empty,
    /// as it usually is an instant after it was taken; if other threads gave objects back meanwhile, or the gate is
    /// busy, the thread keeps them all, as before. A thread that rents in bulk (a game's main thread scheduling jobs)
    /// then takes the gate twice per chunk it rents instead of once per shared stack.
    /// </remarks>
    [MethodImpl(MethodImplOptions.NoInlining)]
    private static int KeepAChunk(T first, int taken)
    {
        T last = first;
        for (int i = 1; i < Chunk; i++)
        {
            last = last.Next!;
        }
        T rest = last.Next!;
        if (!TryTakeGate())
        {
            return taken;
        }
        if (s_head is not null)
        {
            Volatile.Write(ref s_gate, 0);
            return taken;
        }
        last.Next = null;
        s_head = rest;
        s_count = taken - Chunk;
        Volatile.Write(ref s_gate, 0);
        return Chunk;
    }

    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public static void Return(T item) => Push(item, circulating: false);

    /// <summary>
    /// Pushes <paramref name="item"/> on the calling thread's stack, and moves a chunk to the shared stack past the
    /// thread's limit: <see cref="LocalMax"/>, or <see cref="CirculatingMax"/> for a type that circulates. Always inlined
    /// with a constant <paramref name="circulating"/>, so each caller compiles to its own path alone.
    /// </summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    private static void Push(T item, bool circulating)
    {
#if DEBUG
        PoolTestHooks.Returning?.Invoke(item);
#endif
        ref ThreadSlots.Slot local = ref ThreadSlots.Get(s_slotIndex);
        item.Next = (T?)local.Head;
        local.Head = item;
        if (++local.Count > (circulating ? CirculatingMax : LocalMax))
        {
            if (circulating)
            {
                ReturnCirculatingChunk(ref local);
            }
            else
            {
                ReturnChunk(ref local);
            }
        }
    }

    /// <summary>
    /// The thread's stack is full: move <see cref="Chunk"/> of its objects to the shared stack (or to the GC, past the
    /// cap). The newest <see cref="LocalMax"/> - <see cref="Chunk"/> stay: they are the ones in this core's cache, and the
    /// next rent on this thread takes the object it returned last; the chunk is the objects right after them. The walk
    /// is a fixed number of links: after <see cref="RentChunk"/> took a whole shared stack, the thread's stack can be
    /// thousands long, and walking to its oldest objects made every chunk cost the stack's length (quadratic in a burst
    /// of returns, seen with a frame loop returning tens of thousands of waiters in one frame). A long stack then sheds
    /// a chunk on every return until it is back to <see cref="LocalMax"/>, each at a fixed cost, and the object just
    /// returned always stays on top, so the next rent on this thread still reuses it.
    /// </summary>
    private static void ReturnChunk(ref ThreadSlots.Slot local) => GiveBack(ref local, LocalMax - Chunk, Chunk);

    /// <summary>
    /// Moves the <paramref name="count"/> objects after the newest <paramref name="keep"/> of the thread's stack to the
    /// shared stack, or to the GC past the cap (a frame loop's thread inside a step keeps them). See <see cref="ReturnChunk"/>.
    /// </summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    private static void GiveBack(ref ThreadSlots.Slot local, int keep, int count)
    {
        if (ThreadSlots.IsInsideLoopStep && Volatile.Read(ref s_count) + count > SpindlePool.MaxRetainedPerType)
        {
            // A frame loop's thread, inside a frame: what it returns past the cap stays in its own stack, since the loop
            // rents it again, later in the frame or in the next one (see ThreadSlots.EnterLoopStep). Checked before the
            // walk, so that each return past the cap costs two reads.
            return;
        }
        T keepLast = (T)local.Head!;
        for (int i = 1; i < keep; i++)
        {
            keepLast = keepLast.Next!;
        }
        T first = keepLast.Next!;
        T last = first;
        for (int i = 1; i < count; i++)
        {
            last = last.Next!;
        }
        keepLast.Next = last.Next;
        last.Next = null;
        local.Count -= count;
#if DEBUG
        PoolTestHooks.ChunkSplitOff?.Invoke();
#endif
        if (s_count + count > SpindlePool.MaxRetainedPerType)
        {
            KeepInLoopStepOrDrop(ref local, keepLast, first, last, count); // over the cap
            return;
        }
        // Waits for the gate rather than dropping the chunk: objects that circulate between threads (rented on one,
        // returned on another) would otherwise leak out of the pool under contention and be allocated again for ever.
        // The holder keeps the gate for a few instructions; SpinWait yields if it was preempted.
        TakeGate();
#if DEBUG
        PoolTestHooks.GateHeld?.Invoke();
#endif
        if (s_count + count > SpindlePool.MaxRetainedPerType)
        {
            Volatile.Write(ref s_gate, 0);
            KeepInLoopStepOrDrop(ref local, keepLast, first, last, count);
            return;
        }
        last.Next = s_head;
        s_head = first;
        s_count += count;
        Volatile.Write(ref s_gate, 0);
    }

    /// <summary>
    /// The most a thread keeps in its own stack of a type returned with <see cref="ReturnToCirculation"/>: one more, and
    /// it gives all but the newest back to the shared stack at once.
    /// </summary>
    internal const int CirculatingMax = 8;

    /// <summary>
    /// Returns an object of a type that circulates between threads, rented on one and returned on others (a job graph's
    /// nodes and edges, see <see cref="CirculatingPool{T}"/>): as <see cref="Return"/>, except that the thread keeps at
    /// most <see cref="CirculatingMax"/> of the type, not <see cref="LocalMax"/>, and gives back
    /// <see cref="CirculatingMax"/> at a time, keeping only the newest.
    /// </summary>
    /// <remarks>
    /// A worker that finishes jobs another thread scheduled never rents their nodes: what it keeps is out of the renter's
    /// reach. Keeping <see cref="LocalMax"/> of each, two workers held up to 64 nodes of each type, spread at random over the
    /// two, and the scheduling thread, growing the population one node per miss, missed until both stacks happened to be
    /// nearly full at once: a frame's job graph allocated for about 6,000 frames (docs/decisions.md sections 38 and 39).
    /// A separate entry point, so that every other type's <see cref="Return"/> (a box, a signal's waiter) compiles as before.
    /// </remarks>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public static void ReturnToCirculation(T item) => Push(item, circulating: true);

    private static void ReturnCirculatingChunk(ref ThreadSlots.Slot local) => GiveBack(ref local, 1, CirculatingMax);

    /// <summary>
    /// The shared stack filled up after the check at the top of <see cref="GiveBack"/> (other threads returned
    /// meanwhile): the chunk <paramref name="first"/>..<paramref name="last"/>, split off after <paramref name="keepLast"/>,
    /// goes to the GC, except on a frame loop's thread inside a step, which links it back where it was, as the check at
    /// the top would have kept it had it seen the stack full: with many loop threads returning at once, the chunks of all
    /// but one of the threads racing for the shared stack's last room were dropped, and allocated again next frame
    /// (ObjectPoolTests.ReturnChunkInsideALoopStep_...).
    /// </summary>
    private static void KeepInLoopStepOrDrop(ref ThreadSlots.Slot local, T keepLast, T first, T last, int count)
    {
        if (!ThreadSlots.IsInsideLoopStep)
        {
            return; // dropped: the GC takes them
        }
        last.Next = keepLast.Next;
        keepLast.Next = first;
        local.Count += count;
    }

    /// <summary>A few tries at the gate; the holder releases it within a few instructions.</summary>
    private static bool TryTakeGate()
    {
        for (int attempt = 0; attempt < 4; attempt++)
        {
            if (Interlocked.CompareExchange(ref s_gate, 1, 0) == 0)
            {
                return true;
            }
            Spinning.Pause(4 << attempt); // with one processor, the holder runs only if this thread lets it
        }
        return false;
    }

    /// <summary>Takes the gate, waiting as long as it takes (the holder releases it within a few instructions).</summary>
    private static void TakeGate()
    {
        SpinWait spin = default;
        while (Interlocked.CompareExchange(ref s_gate, 1, 0) != 0)
        {
            spin.SpinOnce();
        }
    }

    private static void Trim()
    {
        _ = s_registered;
        // Trim waits for the gate (it is not on a hot path) so that it always empties the stack.
        TakeGate();
        s_head = null;
        s_count = 0;
        Volatile.Write(ref s_gate, 0);
        // The calling thread's stack too (other threads' stacks are theirs alone).
        ref ThreadSlots.Slot local = ref ThreadSlots.Get(s_slotIndex);
        local.Head = null;
        local.Count = 0;
    }
}

/// <summary>
/// The pool of a type that circulates between threads: rented on one thread and returned on others, a job graph's nodes
/// and edges (scheduled on a game's main thread, finished by the workers). Each thread keeps at most
/// <see cref="ObjectPool{T}.CirculatingMax"/> of it (<see cref="ObjectPool{T}.ReturnToCirculation"/>), and a rent that
/// finds the type's pools empty allocates enough for every worker's stack as well (<see cref="Allocate"/>).
/// </summary>
/// <remarks>
/// Only the job system's types use it, through their own calls: every other type's rent and return are
/// <see cref="ObjectPool{T}"/>'s, unchanged (the same policy for every type cost a signal's await path a fifth of its
/// throughput, docs/decisions.md section 39).
/// </remarks>
internal static class CirculatingPool<T> where T : class, IPoolNode<T>, new()
{
    private static int s_made; // written on the miss path only, racy on purpose: for tests

    /// <summary>How many objects of the type this pool has made, on any thread (for tests; a lost increment is possible).</summary>
    internal static int Made => Volatile.Read(ref s_made);

    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public static T Rent() => ObjectPool<T>.TryRentCirculating() ?? Allocate();

    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public static void Return(T item) => ObjectPool<T>.ReturnToCirculation(item);

    /// <summary>
    /// The calling thread's stack was empty, and the shared stack too: a new object (a rent of a circulating type waits
    /// for a busy gate, see <see cref="ObjectPool{T}.TryRentCirculating"/>). When the
    /// shared stack was empty, the pool also gets a refill of <see cref="ObjectPool{T}.CirculatingMax"/> objects for each
    /// worker and two more threads' worth (33 with two workers).
    /// </summary>
    /// <remarks>
    /// <para>A miss means every object of the type is in flight or in another thread's stack, at most
    /// <see cref="ObjectPool{T}.CirculatingMax"/> each. Grown by one object per miss, the population got past that bound
    /// only when the workers' stacks happened to be nearly full at once, ever more rarely the closer it got: a frame's job
    /// graph kept allocating for about 6,000 frames (docs/decisions.md section 39). A refill covers every worker's stack in
    /// one step, on top of what was in flight at the miss: a type in a fixed graph misses in its first frame, and at most
    /// once more. The first miss refills too: made one object only, a type whose jobs the scheduling thread happened to
    /// finish itself while it waited (a loaded machine) missed again hundreds of frames later, the first time a worker kept
    /// one. So a job type scheduled once leaves a refill in the pool (about 8 KB for a parallel-for with two workers),
    /// which <see cref="SpindlePool.Trim"/> gives back.</para>
    /// <para>Growth stays bounded: a refill is a fixed size, made only when the shared stack is empty, so the population
    /// is at most what was once in flight and held plus one refill; a burst rents its refills itself; and the refill goes
    /// through the return path, so past the shared stack's cap it is dropped like any return (a thread in a frame loop's
    /// step keeps it, as it keeps what it returns).</para>
    /// </remarks>
    [MethodImpl(MethodImplOptions.NoInlining)]
    private static T Allocate()
    {
        int made = 1;
        if (ObjectPool<T>.Count == 0)
        {
            // The slot's count starts no workers: a refill is no reason to start threads (a game that only awaits promises
            // would), and after Spindle's collectible context has unloaded it does not throw.
            int refill = Math.Min(ObjectPool<T>.CirculatingMax * (WorkerPool.SharedSlot.WorkerCount + 2), SpindlePool.MaxRetainedPerType);
            for (int i = 0; i < refill; i++)
            {
                ObjectPool<T>.ReturnToCirculation(new T());
            }
            made += refill;
        }
        s_made += made;
        return new T();
    }
}

#if DEBUG
/// <summary>Debug-only hooks on the pools, for tests (a Release build has neither this class nor its calls).</summary>
internal static class PoolTestHooks
{
    /// <summary>
    /// Called with every object handed to <see cref="ObjectPool{T}.Return"/>, before it is linked into a stack, on the
    /// returning thread: the pool hygiene tests check there that the object kept nothing of its use. Process-wide, so
    /// the tests that set it run in the sequential collection.
    /// </summary>
    internal static Action<object>? Returning;

    /// <summary>
    /// Called in <c>ReturnChunk</c> once a chunk is split off the thread's stack, before the shared stack's room is
    /// checked again: a test fills the shared stack there, as other threads returning at that moment would.
    /// </summary>
    internal static Action? ChunkSplitOff;

    /// <summary>
    /// Called in <c>ReturnChunk</c> on the returning thread while it holds the shared stack's gate: a test holds it there,
    /// as a holder preempted by the scheduler does.
    /// </summary>
    internal static Action? GateHeld;
}
#endif

/// <summary>
/// Each thread's own stacks of pooled objects, one per pooled type: a non-generic <c>[ThreadStatic]</c> array of
/// slots, indexed by pooled type. Only its own thread touches it, so it needs no synchronisation.
/// </summary>
internal static class ThreadSlots
{
    private static int s_nextIndex = -1;

    [ThreadStatic]
    private static Slot[]? t_slots;

    [ThreadStatic]
    private static object? t_loopStep; // the frame loop whose step this thread is inside, or null

    // SpindlePool.Trim's requests to Spindle's own threads (workers, the timer thread), which no user code runs on: each
    // empties its stacks at its next idle moment once it sees the count move (TrimIfRequested).
    private static int s_trimRequests;

    [ThreadStatic]
    private static int t_trimRequestsSeen;

    [ThreadStatic]
    private static bool t_answersTrimRequests; // a Spindle thread: a worker or the timer thread (AdoptTrimRequests)

    /// <summary>
    /// True on Spindle's own threads (its workers and its timer thread), whose stacks <see cref="SpindlePool.Trim"/>
    /// empties at their next idle moment (<see cref="TrimIfRequested"/>); false on every other thread of the program.
    /// </summary>
    public static bool AnswersTrimRequests => t_answersTrimRequests;

    /// <summary>The head of a thread's stack for one type (linked through the objects' own pool links), and its length.</summary>
    internal struct Slot
    {
        public object? Head;
        public int Count;
    }

    public static int AllocateIndex() => Interlocked.Increment(ref s_nextIndex);

    /// <summary>True while this thread is inside a step of a frame loop (<see cref="EnterLoopStep"/>).</summary>
    public static bool IsInsideLoopStep => t_loopStep is not null;

    /// <summary>
    /// The frame loop whose step this thread is inside (the innermost, for a frame of one loop run from inside a step of
    /// another), or null: the task tracker records it for a method that suspends there.
    /// </summary>
    public static object? LoopInStep => t_loopStep;

    /// <summary>
    /// This thread enters a step of frame loop <paramref name="loop"/> (a frame, BeginFrame or RunPhase); returns the loop
    /// whose step it was inside before (null if none), which <see cref="ExitLoopStep"/> on the same thread puts back.
    /// Inside a step, a pool whose shared stack is full lets this thread's own stack grow past <c>LocalMax</c> instead of
    /// giving the objects to the GC. A frame returns thousands of objects of one type in one
    /// phase and rents them again in a later phase or frame (a delay's resume returns a phase waiter and rents a predicate
    /// waiter; a WaitUntil's resume does the opposite), and with tens of thousands of entities more of them are in
    /// between than a shared stack holds (<see cref="SpindlePool.MaxRetainedPerType"/>): they were dropped and allocated
    /// again, hundreds of kilobytes a frame. The loop thread keeps at most what it once had in flight; objects that leave
    /// it for other threads still go through the shared stack, which it fills first. <see cref="SpindlePool.Trim"/> on
    /// the loop thread empties its stacks.
    /// </summary>
    public static object? EnterLoopStep(object loop)
    {
        object? outer = t_loopStep;
        t_loopStep = loop;
        return outer;
    }

    /// <summary>Ends a step begun by <see cref="EnterLoopStep"/> on this thread, given what that call returned.</summary>
    public static void ExitLoopStep(object? outer) => t_loopStep = outer;

    /// <summary>
    /// Asks Spindle's own threads to empty their stacks at their next idle moment (<see cref="TrimIfRequested"/>):
    /// <see cref="SpindlePool.Trim"/> reaches only the calling thread's, and user code never runs on a worker's park or
    /// on the timer thread, where a rent of a whole shared stack (up to the cap) could otherwise stay for good.
    /// </summary>
    public static void RequestTrim() => Interlocked.Increment(ref s_trimRequests);

    /// <summary>
    /// Called by a Spindle thread as it starts: the trims requested before it existed have nothing of its to let go of, so
    /// its first idle moment must not take them for new ones. Without this, a worker started after any trim let go of
    /// what its first burst grew (its stacks and its deque's array) at its first park, whenever that burst came before it.
    /// </summary>
    public static void AdoptTrimRequests()
    {
        t_trimRequestsSeen = Volatile.Read(ref s_trimRequests);
        t_answersTrimRequests = true;
    }

    /// <summary>
    /// Called by a Spindle thread at an idle moment, holding no pooled object of its stacks: if a trim was requested
    /// since it last looked, empties all of this thread's stacks and returns true. A thread-static read and a volatile
    /// read when nothing was requested.
    /// </summary>
    public static bool TrimIfRequested()
    {
        int requested = Volatile.Read(ref s_trimRequests);
        if (requested == t_trimRequestsSeen)
        {
            return false;
        }
        t_trimRequestsSeen = requested;
        if (t_slots is { } slots)
        {
            Array.Clear(slots, 0, slots.Length);
        }
        return true;
    }

    public static ref Slot Get(int index)
    {
        Slot[]? slots = t_slots;
        if (slots is null || (uint)index >= (uint)slots.Length)
        {
            slots = Grow(index);
        }
        return ref slots[index];
    }

    private static Slot[] Grow(int index)
    {
        Slot[]? old = t_slots;
        var slots = new Slot[Math.Max(index + 1, Math.Max(16, (old?.Length ?? 0) * 2))];
        old?.CopyTo(slots, 0);
        t_slots = slots;
        return slots;
    }
}

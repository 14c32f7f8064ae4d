using System;
using System.Collections.Generic;
using System.Threading;

namespace SpindleLib;

/// <summary>
/// Settings and maintenance for Spindle's object pools. Spindle keeps one pool per pooled type (state-machine
/// boxes, work items, combinators): a small stack per thread in front of a bounded shared stack.
/// </summary>
/// <remarks>
/// <para>All members are thread-safe.</para>
/// <para>Each thread keeps up to 32 objects of each type, and trades with the shared stack 16 at a time; a Spindle worker
/// whose own stack runs dry takes the whole shared stack at once (a thread that schedules many jobs then rents locally),
/// and any other thread keeps 16 of it and gives the rest back unless other threads refilled the shared stack
/// meanwhile. So a thread may hold more than 32 objects of a type for a while, and a cap below 16 keeps nothing in the
/// shared stack.
/// <see cref="RetainedCount"/> counts the shared stacks only, and <see cref="Trim"/> empties them and the calling
/// thread's own stacks, and asks Spindle's workers and timer thread to empty theirs; the program's other threads' stacks
/// are theirs.</para>
/// <para>A thread running a frame of a <see cref="FrameLoop"/> keeps in its own stacks, past the cap, what it returns
/// while a shared stack is full: a frame returns thousands of objects of one type in one phase and rents them again in a
/// later phase or frame, so a loop with tens of thousands of waiting tasks allocates nothing per frame in steady state
/// whatever the cap. It keeps at most what the loop once had in flight; call <see cref="Trim"/> on the loop thread (for
/// example from a continuation running on the loop) to release it.</para>
/// </remarks>
public static class SpindlePool
{
    private static int s_maxRetainedPerType = 4096;
    private static readonly object s_lock = new();
    private static readonly List<(Type Type, Func<int> Count, Action Trim)> s_pools = new();

    /// <summary>
    /// The most objects each pool keeps in its shared stack (default 4096: enough for a frame's worth of scheduled jobs
    /// and their dependency edges). Objects returned past the cap are left to
    /// the garbage collector. Lowering the cap does not drop objects already pooled; call <see cref="Trim"/> for that.
    /// </summary>
    /// <exception cref="ArgumentOutOfRangeException">The value is negative.</exception>
    public static int MaxRetainedPerType
    {
        get => Volatile.Read(ref s_maxRetainedPerType);
        set
        {
            if (value < 0)
            {
                ThrowHelper.ThrowArgumentOutOfRange(nameof(value), "The pool cap must be zero or positive; use 0 to disable the shared pools.");
            }
            Volatile.Write(ref s_maxRetainedPerType, value);
        }
    }

    /// <summary>The number of objects currently held by all shared pools (per-thread caches excluded).</summary>
    public static int RetainedCount
    {
        get
        {
            lock (s_lock)
            {
                int total = 0;
                foreach (var p in s_pools)
                {
                    total += p.Count();
                }
                return total;
            }
        }
    }

    /// <summary>
    /// Empties every shared pool and the calling thread's per-thread caches, releasing the objects to the GC; Spindle's own
    /// threads (its workers and its timer thread) empty theirs, and the worker pool's queues give back the buffers a burst
    /// grew, at their next idle moment, which for idle threads is at once (they are woken for it).
    /// </summary>
    /// <remarks>
    /// Call it after a burst of load, to give memory back. It does not wait for the other threads: a full collection
    /// made within a millisecond or so of the call may still find what a worker that was busy has not let go of yet.
    /// Other threads of the program keep their own caches (call <see cref="Trim"/> on them too).
    /// </remarks>
    public static void Trim()
    {
        lock (s_lock)
        {
            foreach (var p in s_pools)
            {
                p.Trim();
            }
        }
        ThreadSlots.RequestTrim();
        WorkerPool.SharedIfCreated?.ReleaseIdleMemory();
        TimerWheel.DefaultIfCreated?.KickForTrim();
    }

    /// <summary>
    /// The objects held by the shared pools, summed by kind: a pooled type's name without its generic arguments, so
    /// that every async method's box counts as one kind (<c>StateMachineBox</c>), not one per method.
    /// </summary>
    internal static List<KeyValuePair<string, int>> RetainedByKind()
    {
        var byKind = new Dictionary<string, int>();
        lock (s_lock)
        {
            foreach (var p in s_pools)
            {
                string name = p.Type.Name;
                int tick = name.IndexOf('`');
                string kind = tick < 0 ? name : name.Substring(0, tick);
                byKind.TryGetValue(kind, out int count);
                byKind[kind] = count + p.Count();
            }
        }
        return new List<KeyValuePair<string, int>>(byKind);
    }

    internal static bool Register(Type type, Func<int> count, Action trim)
    {
        lock (s_lock)
        {
            s_pools.Add((type, count, trim));
        }
        return true;
    }
}

using System;
using System.Runtime.CompilerServices;
using System.Threading;

namespace SpindleLib;

/// <summary>
/// A unit of work a scheduler runs. State-machine boxes and Spindle.Run's items derive from it, so queuing them
/// allocates nothing. On .NET it is also an <c>IThreadPoolWorkItem</c>, so the same object can go to the .NET ThreadPool.
/// </summary>
internal abstract class WorkItem
#if NET
    : IThreadPoolWorkItem
#endif
{
    /// <summary>Runs the work. Implementations handle their own exceptions; a scheduler reports any that escape.</summary>
    public abstract void Execute();

    /// <summary>
    /// Runs the work for a caller whose thread is in the default <see cref="ExecutionContext"/> now and that puts the
    /// default back afterwards if the work changed it (a worker's loop, a frame phase): work that would check the
    /// thread's context before and after itself can skip both, which are two thread-static reads. The default runs
    /// <see cref="Execute"/>.
    /// </summary>
    public virtual void ExecuteOnDefaultContext() => Execute();

#if NET
    /// <summary>
    /// The .NET ThreadPool's entry (<see cref="ThreadPoolScheduler"/>): an exception that escapes the work is reported to
    /// <c>Spindle.UnobservedException</c>, as Spindle's own workers report it, instead of reaching the ThreadPool, which
    /// would crash the process (a continuation that throws, run by a <see cref="ContinuationWorkItem"/>). Spindle's
    /// workers call <see cref="Execute"/> directly, inside their own catch, so this adds nothing to their loop.
    /// </summary>
    void IThreadPoolWorkItem.Execute()
    {
        try
        {
            Execute();
        }
        catch (Exception ex)
        {
            UnobservedExceptions.Report(ex);
        }
    }
#endif
}

/// <summary>Where work items go. <see cref="Default"/> is Spindle's own worker pool unless a test or benchmark swaps it.</summary>
internal abstract class Scheduler
{
    private static Scheduler? s_default;

    public static Scheduler Default
    {
        get => Volatile.Read(ref s_default) ?? InitDefault();
        set => Volatile.Write(ref s_default, value);
    }

    private static Scheduler InitDefault()
    {
        WorkerPool pool = WorkerPool.Shared; // throws ObjectDisposedException if the slot was closed before any pool existed
        if (pool.IsDisposed)
        {
            CollectibleContext.ThrowUnloading();
        }
        Interlocked.CompareExchange(ref s_default, pool, null);
        // Invariant (with ForgetDefaultForUnload): the unloading side disposes the pool (a volatile write), then clears
        // s_default (an exchange, a full fence); this side publishes (the CAS above, a full fence), then reads _disposed.
        // So either the clear comes after this publish and removes it, or this read sees the pool disposed, and the
        // publish is taken back: a disposed pool never stays the default, where work queued to it would wait for ever.
        if (pool.IsDisposed)
        {
            Interlocked.CompareExchange(ref s_default, null, pool);
            CollectibleContext.ThrowUnloading();
        }
        return Volatile.Read(ref s_default) ?? InitDefault();
    }

    /// <summary>
    /// <see cref="Default"/>, for a hand-off whose caller cannot be told: a completion's continuation queued to the workers
    /// (<see cref="Continuations.Dispatch"/>), a timer thread's batch. Once Spindle's collectible context is unloading
    /// (<see cref="CollectibleContext"/>), a scheduler that drops what it is given: the completing thread may be any thread
    /// (a BCL timer cancelling a token, the .NET ThreadPool), where an exception would end the process, and the work is
    /// code of the context being unloaded, which the stopped workers would never run anyway. The same cost as
    /// <see cref="Default"/> until then: the difference is on the path that finds no scheduler.
    /// </summary>
    public static Scheduler ForHandOff => Volatile.Read(ref s_default) ?? InitForHandOff();

    [MethodImpl(MethodImplOptions.NoInlining)]
    private static Scheduler InitForHandOff()
    {
        try
        {
            return InitDefault();
        }
        catch (ObjectDisposedException) when (CollectibleContext.IsUnloading)
        {
            return DroppingScheduler.Instance;
        }
    }

    /// <summary>
    /// Spindle's collectible context is unloading, and the shared pool has been disposed (<see cref="CollectibleContext"/>):
    /// forgets the default scheduler, so the next read of <see cref="Default"/> finds the pool disposed and throws
    /// <see cref="ObjectDisposedException"/>. Only the shared pool is forgotten; a scheduler a test swapped in stays.
    /// </summary>
    internal static void ForgetDefaultForUnload()
    {
        if (Volatile.Read(ref s_default) is WorkerPool { IsDisposed: true } pool)
        {
            Interlocked.CompareExchange(ref s_default, null, pool);
        }
    }

    /// <summary>
    /// Starts the default scheduler (the shared workers) now if nothing has: for a call that arranges for work to be
    /// handed to the workers later, from another thread (a wheel's timer thread, a source that queues its
    /// continuations), so that workers which cannot start (an invalid SPINDLE_WORKERS) fail that call, where its caller
    /// sees why, and not the hand-off, where the work would be lost.
    /// </summary>
    /// <exception cref="InvalidOperationException">The workers had not started and SPINDLE_WORKERS is invalid.</exception>
    public static void EnsureDefault()
    {
        if (Volatile.Read(ref s_default) is null)
        {
            InitDefault();
        }
    }

    // 1 once the default scheduler failed to start at a hand-off (CanQueueToDefault): reported once, not per hand-off.
    private static int s_failedAtHandOff;

    /// <summary>
    /// For a hand-off whose caller cannot be told (a continuation past the inline nesting bound): true if the default
    /// scheduler runs, started now if nothing had started it; false if it cannot start (an invalid SPINDLE_WORKERS).
    /// The first failure is reported to <see cref="Spindle.UnobservedException"/>; the caller then runs the work itself
    /// rather than lose it. Every call that needs the workers goes on failing with the same exception.
    /// </summary>
    public static bool CanQueueToDefault()
    {
        try
        {
            EnsureDefault();
            return true;
        }
        catch (ObjectDisposedException) when (CollectibleContext.IsUnloading)
        {
            return true; // the hand-off goes to ForHandOff, which drops it (see there)
        }
        catch (InvalidOperationException ex)
        {
            if (Interlocked.Exchange(ref s_failedAtHandOff, 1) == 0)
            {
                UnobservedExceptions.Report(ex);
            }
            return false;
        }
    }

    /// <summary>Makes the item visible to the workers (and wakes one if needed).</summary>
    public abstract void Queue(WorkItem item);

    /// <summary>
    /// Queues a batch of fired timers' continuations, first in first out, ahead of the work queued from outside the
    /// workers (see <see cref="WorkerPool.QueueTimers"/>). A scheduler with no such queue queues it as any item.
    /// </summary>
    public virtual void QueueTimers(WorkItem item) => Queue(item);

    /// <summary>
    /// Queues <paramref name="item"/> behind the work already waiting for the workers, from a worker too (where
    /// <see cref="Queue"/> puts it next): <see cref="Spindle.Yield"/>, so that loops that yield take turns with the work
    /// queued from outside, as <c>Task.Yield</c> on the .NET ThreadPool and Go's <c>Gosched</c> do.
    /// </summary>
    public virtual void QueueInOrder(WorkItem item) => Queue(item);

    /// <summary>True when the calling thread is one of this scheduler's workers.</summary>
    public abstract bool IsWorkerThread { get; }

    /// <summary>Runs one queued item on the calling thread, if there is one it may take. Used by threads that block on work.</summary>
    public abstract bool TryRunOne();
}

/// <summary>
/// What <see cref="Scheduler.ForHandOff"/> gives once Spindle's collectible context is unloading: it drops every item (the
/// continuations of code being unloaded; see <see cref="CollectibleContext"/>), runs none, and has no workers.
/// </summary>
internal sealed class DroppingScheduler : Scheduler
{
    public static readonly DroppingScheduler Instance = new();

    private DroppingScheduler()
    {
    }

    public override void Queue(WorkItem item)
    {
    }

    public override bool IsWorkerThread => false;

    public override bool TryRunOne() => false;
}

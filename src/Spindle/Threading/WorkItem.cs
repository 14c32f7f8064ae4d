using System;
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
        Interlocked.CompareExchange(ref s_default, WorkerPool.Shared, null);
        return s_default!;
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

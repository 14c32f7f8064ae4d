using System;

namespace SpindleLib;

/// <summary>
/// Timers a worker owns (installed by a higher layer, the timer wheel): the worker runs the due ones between work
/// items, and parks no longer than until the next one is due.
/// </summary>
internal abstract class WorkerTimers
{
    /// <summary>True when the worker has timers (or cancellations) to look after. Read by the owning worker.</summary>
    public abstract bool HasPending { get; }

    /// <summary>
    /// Runs every timer now due (their continuations run on this worker) and tells how long until the next is due
    /// (<see cref="System.Threading.Timeout.InfiniteTimeSpan"/> for none). Returns true if anything ran. Owner only.
    /// </summary>
    public abstract bool Poll(out TimeSpan untilNext);
}

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

    /// <summary>
    /// Called by the owning worker just before it blocks (after its last <see cref="Poll"/>): from now until
    /// <see cref="Unpark"/>, other threads may tidy the timers (release cancelled ones). Returns false, and stays owned,
    /// if something arrived that the worker must handle first: it must then not block, but poll again.
    /// </summary>
    public virtual bool TryPark() => true;

    /// <summary>Called by the owning worker when it wakes from a block that <see cref="TryPark"/> allowed: it owns its timers again.</summary>
    public virtual void Unpark()
    {
    }
}

namespace SpindleLib;

/// <summary>
/// A work item that runs independent pieces one after another (a batch of timers' continuations, <c>TimerBatch</c>), so
/// that one piece that blocks or computes for long would hold every later piece. While a worker runs one
/// (<see cref="WorkerPool.EnterDivisible"/>), an idle worker may take over the pieces not yet begun
/// (<see cref="TryTakeRest"/>) and queue them as an item of their own.
/// </summary>
internal abstract class DivisibleWorkItem : WorkItem
{
    /// <summary>
    /// Called by an idle worker for an item another worker is running: if the item has run long enough to be taken over
    /// and has pieces not yet begun, moves them into a new item, which the caller queues, and returns it; else null. Safe
    /// to call on an item that has finished meanwhile, or been reused (it then takes nothing, or takes from the item's
    /// current run). Any thread.
    /// </summary>
    public abstract WorkItem? TryTakeRest();
}

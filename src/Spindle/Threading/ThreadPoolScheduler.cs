#if NET
using System.Threading;

namespace SpindleLib;

/// <summary>
/// The alternative to <see cref="WorkerPool"/>: the .NET ThreadPool, driven with Spindle's pooled work items through
/// <see cref="ThreadPool.UnsafeQueueUserWorkItem(IThreadPoolWorkItem, bool)"/> (no allocation per item).
/// Kept so the choice between the two stays measurable (bench system <c>SpindleOnThreadPool</c>, docs/decisions.md).
/// </summary>
internal sealed class ThreadPoolScheduler : Scheduler
{
    public static readonly ThreadPoolScheduler Instance = new();

    public override bool IsWorkerThread => Thread.CurrentThread.IsThreadPoolThread;

    public override void Queue(WorkItem item) => ThreadPool.UnsafeQueueUserWorkItem(item, preferLocal: true);

    public override void QueueInOrder(WorkItem item) => ThreadPool.UnsafeQueueUserWorkItem(item, preferLocal: false);

    // The ThreadPool offers no way to run one of its queued items on a foreign thread.
    public override bool TryRunOne() => false;
}
#endif

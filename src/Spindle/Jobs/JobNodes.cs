using System;
using System.Diagnostics;
using System.Threading;

namespace SpindleLib;

/// <summary>The node for an <see cref="IJob"/>: the job struct is stored in the node, so it is never boxed.</summary>
[StackTraceHidden]
internal sealed class JobNode<TJob> : JobNode, IPoolNode<JobNode<TJob>> where TJob : struct, IJob
{
    private TJob _job;
    private JobNode<TJob>? _poolNext;

    ref JobNode<TJob>? IPoolNode<JobNode<TJob>>.Next => ref _poolNext;

    public static JobNode<TJob> Rent(in TJob job)
    {
        JobNode<TJob> node = CirculatingPool<JobNode<TJob>>.Rent();
        node.Initialize();
        node._job = job;
        return node;
    }

    public override void Execute() => RunChain(this);

    protected override bool CanRunInline => true;

    protected override JobNode? RunAndFinish()
    {
        AssertPending();
        if (TryFinishInheritedFault(out JobNode? next))
        {
            return next; // a dependency failed: this job does not run, it fails with the same exception
        }
        SynchronizationContext? sync = SynchronizationContext.Current;
        // Marked running on this thread while its work runs, so that a Complete() inside it on a handle that waits for
        // it throws instead of waiting for ever (ThrowIfWaitsForARunningJob).
        ThreadCounters counters = ThreadCounters.Current;
        counters.PushRunning(this);
        // On the field (what the job writes stays in the node, as before), caught in a frame a trace shows: see UserWork.
        Exception? error = UserWork.Execute(ref _job);
        counters.PopRunning();
        // A SynchronizationContext the job installed and left behind is taken down before its finish runs the awaiting
        // code inline, and before the dependent this returns runs on this thread (RunChain), as RunItem does for a
        // Spindle.Run delegate: neither may find another job's context.
        ContextFlow.RestoreSynchronizationContext(sync);
        return Finish(error, counters);
    }

    protected override void ClearJob() => _job = default;

    protected override void ReturnToPool() => CirculatingPool<JobNode<TJob>>.Return(this);
}

/// <summary>The node behind <see cref="JobHandle.CombineDependencies(JobHandle, JobHandle)"/>: no work, done when its dependencies are.</summary>
internal sealed class CombineNode : JobNode, IPoolNode<CombineNode>
{
    private CombineNode? _poolNext;

    public CombineNode() // for CirculatingPool's new(); rent one with Rent()
        : base(countsAsJob: false)
    {
    }

    ref CombineNode? IPoolNode<CombineNode>.Next => ref _poolNext;

    public static CombineNode Rent()
    {
        CombineNode node = CirculatingPool<CombineNode>.Rent();
        node.Initialize();
        return node;
    }

    public override void Execute() => Finish(null)?.OnReady(); // with or without an inherited fault: nothing to run

    internal override void OnReady() => Finish(null)?.OnReady();

    protected override void ClearJob()
    {
    }

    protected override void ReturnToPool() => CirculatingPool<CombineNode>.Return(this);
}

/// <summary>
/// A parallel-for job: [0, length) split into batches that its runner (queued again as it fans out, up to once per
/// worker) and any thread waiting in Complete() claim from an atomic cursor. A batch is the unit of distribution: an
/// idle worker takes the next one.
/// </summary>
/// <remarks>
/// Invariants: every batch index is claimed exactly once (the cursor only advances, by Interlocked.Add); the job
/// finishes exactly once, when the claimed-and-done count reaches the batch count; a runner or helper touches the
/// node's batches only while holding a reference taken for the use it was given (JobNode), so none can claim batches
/// of a later job that reuses the node, nor of a use that is not ready yet (see <see cref="Runner"/>).
/// </remarks>
internal abstract class ParallelNode : JobNode
{
    /// <summary>Its runner and helpers take references of their own while they run batches (see <see cref="JobNode.TryAcquire"/>).</summary>
    protected ParallelNode()
        : base(sharesReferences: true)
    {
        _runner = new Runner(this);
    }

    private readonly Runner _runner;

    private long _cursor;
    private int _remaining;
    private int _ready;
    private int _runners;
    private Exception? _firstError;
    protected int Length;
    protected int BatchSize;

    protected void InitializeRange(int length, int batchSize)
    {
        Initialize();
        Length = length;
        BatchSize = batchSize;
        _cursor = 0;
        _remaining = length == 0 ? 0 : (int)(((long)length + batchSize - 1) / batchSize);
        _ready = 0;
        _runners = 0;
        _firstError = null;
    }

    /// <summary>Runs the job on [start, start + count).</summary>
    protected abstract void RunRange(int start, int count);

    public override void Execute()
    {
        if (TryFinishInheritedFault(out JobNode? next))
        {
            next?.OnReady();
            return;
        }
        OnReady();
    }

    /// <summary>
    /// The batch was flushed. An empty job has nothing to run and would finish at once, on the flushing thread, running
    /// its awaiters' continuations in the middle of the flush: one that waits for a job later in the same batch would
    /// wait for ever, since that job becomes visible only after the continuation returns. It is queued instead.
    /// </summary>
    public override void MakeVisible()
    {
        if (Volatile.Read(ref _remaining) == 0)
        {
            WorkerPool.Shared.QueueShared(this); // Execute finishes it
            return;
        }
        OnReady();
    }

    internal override void OnReady()
    {
        int batches = Volatile.Read(ref _remaining);
        if (batches == 0)
        {
            Finish(null)?.OnReady();
            return;
        }
        // One runner to start with; each thread that finds batches left behind the one it claims adds another, up to
        // one per worker (see MaybeAddRunner). Queuing one per worker up front left stale runners behind every small
        // job its caller finished alone, faster than the workers could drain them. The count and the version are set
        // before the use is marked ready: until then no thread can run its batches, so none can finish it and recycle
        // the node, and this thread (which holds no reference) reads this use's version and not a later one's.
        _runners = 1;
        _runner.Publish(Version);
        Volatile.Write(ref _ready, 1);
#if DEBUG
        TestHookAfterReady?.Invoke(this);
#endif
        _runner.Queue(); // or it already waits in a queue, and helps this use when it runs
    }

#if DEBUG
    /// <summary>Tests only: runs in OnReady once the use is marked ready, before its runner is queued.</summary>
    internal static Action<ParallelNode>? TestHookAfterReady;

    /// <summary>Tests only: runs in TryHelp (and a runner) between its read of the ready flag and its read of the cursor.</summary>
    internal static Action<ParallelNode, int>? TestHookHelpAfterReadyRead;
#endif

    /// <summary>
    /// Fans out on demand: when batches remain beyond the one just claimed, queues the runner again (unless it already
    /// waits in a queue), while fewer than one per worker have been queued. The caller holds a reference, so the node
    /// cannot be recycled meanwhile.
    /// </summary>
    private void MaybeAddRunner(long claimedStart)
    {
        if (claimedStart + BatchSize >= Length)
        {
            return;
        }
        if (Volatile.Read(ref _runners) < WorkerPool.Shared.WorkerCount && _runner.Queue())
        {
            Interlocked.Increment(ref _runners); // one that is queued: a runner already waiting in a queue counts once
        }
    }

    /// <summary>Claims and runs batches until none are left. The caller holds a reference.</summary>
    public void RunBatches()
    {
        bool first = true;
        // Put back after each batch: a SynchronizationContext a batch installed and left behind must reach neither the
        // next batch nor, through the finish, the awaiting code it runs inline (as in JobNode<TJob>.RunAndFinish).
        SynchronizationContext? sync = SynchronizationContext.Current;
        // Marked running on this thread while it runs batches, as in JobNode<TJob>.RunAndFinish.
        ThreadCounters counters = ThreadCounters.Current;
        counters.PushRunning(this);
        while (true)
        {
            long start = Interlocked.Add(ref _cursor, BatchSize) - BatchSize;
            if (start >= Length)
            {
                counters.PopRunning();
                return;
            }
            if (first)
            {
                first = false;
                MaybeAddRunner(start);
            }
            int count = (int)Math.Min(BatchSize, Length - start);
            if (Volatile.Read(ref _firstError) is null)
            {
                try
                {
                    RunRange((int)start, count);
                }
                catch (Exception ex)
                {
                    // The first failure fails the job; the batches still unclaimed are counted but not run. A batch
                    // that was already running fails too: its exception is not the job's, but it is not lost either.
                    if (Interlocked.CompareExchange(ref _firstError, ex, null) is not null)
                    {
                        UnobservedExceptions.Report(ex);
                    }
                }
                ContextFlow.RestoreSynchronizationContext(sync);
            }
            if (Interlocked.Decrement(ref _remaining) == 0)
            {
                counters.PopRunning();
                // Whatever this makes ready is queued, not run here: a runner must drop its reference promptly.
                Finish(Volatile.Read(ref _firstError), counters)?.OnReady();
                return;
            }
        }
    }

    /// <summary>
    /// A thread waiting in Complete() runs batches of the use it waits for. They are not its own code: they run as a
    /// queued item it helps with does (<see cref="WorkerPool.RunKeepingContext"/>), without its AsyncLocal values and
    /// SynchronizationContext, and what they set does not stay on the thread (run directly, a batch's AsyncLocal value
    /// was still there when Complete() returned).
    /// </summary>
    public override bool TryHelp(int version)
    {
        if (!TryEnter(version))
        {
            return false;
        }
        WorkerPool.RunKeepingContext(s_runBatchesAndRelease, this);
        return true;
    }

    private static readonly ContextCallback s_runBatchesAndRelease = static o => ((ParallelNode)o!).RunBatchesAndRelease();

    /// <summary>Takes a reference if the use <paramref name="version"/> is ready and has batches left to claim.</summary>
    private bool TryEnter(int version)
    {
        if (Volatile.Read(ref _ready) == 0)
        {
            return false;
        }
#if DEBUG
        TestHookHelpAfterReadyRead?.Invoke(this, version);
#endif
        return Volatile.Read(ref _cursor) < Length && TryAcquire(version);
    }

    private void RunBatchesAndRelease()
    {
        RunBatches();
        Release();
    }

    protected override void ClearJob() => _firstError = null;

    /// <summary>
    /// The work item that runs a parallel job's batches on a worker: one per node, made with it, and in at most one
    /// queue at a time.
    /// </summary>
    /// <remarks>
    /// <para>It holds no reference on the node while it waits in a queue. When it runs it helps as a waiting thread
    /// does: it takes a reference only if the node is still at the use it was last published for (<see cref="Publish"/>,
    /// written when a use became ready) and has batches left. So a runner left behind by a job that its caller finished
    /// alone (the common fate of a small job's runner) pins nothing: the node goes back to its pool as soon as it is
    /// done, and the runner, when a worker reaches it, finds a newer version or no batches and does nothing.</para>
    /// <para>It always goes to the pool's shared queue, even from a worker: a use that becomes ready while the runner
    /// still waits in a queue does not queue it again, and relies on the waiting runner (which reads the version only
    /// when it runs), so that runner must be where every idle worker and every thread waiting in Complete() can take it.
    /// In a worker's own queue or run-next slot it waited for that worker (a review found a dependent's Complete() making
    /// no progress while the worker ran a long item). The shared queue is also where fan-out belongs: the thread that
    /// queues a runner is already running batches itself. Invariant: <see cref="_queued"/> is 1
    /// from a successful <see cref="Queue"/> until the queued runner starts. Publish's store and Queue's CAS on one
    /// side, Execute's exchange and its read of the version on the other, form a Dekker pair (each side's interlocked
    /// operation on <see cref="_queued"/> is a full fence before its read of the other's): a Queue that finds the
    /// runner still queued comes before that runner's exchange, which therefore reads the new version.</para>
    /// <para>Before (a runner rented per fan-out, holding a reference until it ran), a scheduler that outran the
    /// workers (one processor, or workers descheduled for a while) kept every recent node and runner out of the pools
    /// and a runner per job in the queue, and allocated a node, a runner and an edge per job, and queue segments.</para>
    /// </remarks>
    private sealed class Runner : WorkItem
    {
        private readonly ParallelNode _node;
        private int _version;
        private int _queued;

        public Runner(ParallelNode node) => _node = node;

        /// <summary>Called when a use becomes ready, before <see cref="Queue"/>.</summary>
        public void Publish(int version) => Volatile.Write(ref _version, version);

        /// <summary>
        /// Queues the runner unless it already waits in a queue, where it will help the current use. True if this call
        /// queued it.
        /// </summary>
        public bool Queue()
        {
            if (Interlocked.CompareExchange(ref _queued, 1, 0) != 0)
            {
                return false;
            }
            WorkerPool.Shared.QueueShared(this);
            return true;
        }

        public override void Execute()
        {
            Interlocked.Exchange(ref _queued, 0);
            // Run as a queued item: whoever runs it (a worker's loop, a helping thread) keeps its own context already.
            if (_node.TryEnter(Volatile.Read(ref _version)))
            {
                _node.RunBatchesAndRelease();
            }
        }
    }
}

/// <summary>The node for an <see cref="IJobParallelFor"/>.</summary>
internal sealed class ParallelForNode<TJob> : ParallelNode, IPoolNode<ParallelForNode<TJob>> where TJob : struct, IJobParallelFor
{
    private TJob _job;
    private ParallelForNode<TJob>? _poolNext;

    ref ParallelForNode<TJob>? IPoolNode<ParallelForNode<TJob>>.Next => ref _poolNext;

    public static ParallelForNode<TJob> Rent(in TJob job, int length, int batchSize)
    {
        ParallelForNode<TJob> node = CirculatingPool<ParallelForNode<TJob>>.Rent();
        node.InitializeRange(length, batchSize);
        node._job = job;
        return node;
    }

    protected override void RunRange(int start, int count)
    {
        TJob job = _job; // each batch runs on its own copy of the job struct
        int end = start + count;
        for (int i = start; i < end; i++)
        {
            job.Execute(i);
        }
    }

    protected override void ClearJob()
    {
        base.ClearJob();
        _job = default;
    }

    protected override void ReturnToPool() => CirculatingPool<ParallelForNode<TJob>>.Return(this);
}

/// <summary>The node for an <see cref="IJobParallelForBatch"/>.</summary>
internal sealed class ParallelForBatchNode<TJob> : ParallelNode, IPoolNode<ParallelForBatchNode<TJob>> where TJob : struct, IJobParallelForBatch
{
    private TJob _job;
    private ParallelForBatchNode<TJob>? _poolNext;

    ref ParallelForBatchNode<TJob>? IPoolNode<ParallelForBatchNode<TJob>>.Next => ref _poolNext;

    public static ParallelForBatchNode<TJob> Rent(in TJob job, int length, int batchSize)
    {
        ParallelForBatchNode<TJob> node = CirculatingPool<ParallelForBatchNode<TJob>>.Rent();
        node.InitializeRange(length, batchSize);
        node._job = job;
        return node;
    }

    protected override void RunRange(int start, int count)
    {
        TJob job = _job;
        job.Execute(start, count);
    }

    protected override void ClearJob()
    {
        base.ClearJob();
        _job = default;
    }

    protected override void ReturnToPool() => CirculatingPool<ParallelForBatchNode<TJob>>.Return(this);
}

/// <summary>
/// The batch of scheduled jobs that are ready but not yet visible to the workers. Scheduling pushes onto it;
/// <see cref="JobHandle.ScheduleBatchedJobs"/> (or completing or awaiting any handle) flushes it.
/// </summary>
/// <remarks>
/// A Treiber stack (see <see cref="JobNode"/>) that is only pushed to and taken whole with an Exchange, so it has no
/// ABA problem. The batch is global rather than per thread, so a handle completed on another thread than the one that
/// scheduled it can still flush what it needs: forgetting the flush can never deadlock.
/// </remarks>
internal static class JobBatch
{
    private static JobNode? s_head;

    public static bool IsEmpty => Volatile.Read(ref s_head) is null;

    /// <summary>
    /// Publishes a rented job: into the batch if it is ready, else behind its dependency. Every Schedule method ends here.
    /// </summary>
    /// <exception cref="ObjectDisposedException">Spindle's collectible context is unloading (<see cref="CollectibleContext"/>):
    /// its workers have stopped, so the job would never run on them, and an await of its handle would never end. The node,
    /// never published, is left to the GC with the rest of the context.</exception>
    public static JobHandle Submit(JobNode node, JobHandle dependsOn)
    {
        if (CollectibleContext.IsUnloading)
        {
            CollectibleContext.ThrowUnloading();
        }
        int version = node.Version; // read first: once the job is reachable it may finish and be recycled at any time
        if (node.DependOnSingle(dependsOn))
        {
            Push(node);
        }
        return new JobHandle(node, version);
    }

    private static void Push(JobNode node)
    {
        while (true)
        {
            JobNode? head = Volatile.Read(ref s_head);
            node.BatchNext = head;
            if (Interlocked.CompareExchange(ref s_head, node, head) == head)
            {
                return;
            }
        }
    }

    public static void Flush()
    {
        if (Volatile.Read(ref s_head) is null)
        {
            return;
        }
        JobNode? list = Interlocked.Exchange(ref s_head, null);
        // The stack holds the jobs newest first: reverse it so they become visible in the order they were scheduled.
        JobNode? ordered = null;
        while (list is not null)
        {
            JobNode next = list.BatchNext!;
            list.BatchNext = ordered;
            ordered = list;
            list = next;
        }
        while (ordered is not null)
        {
            JobNode next = ordered.BatchNext!;
            ordered.BatchNext = null;
            ordered.MakeVisible();
            ordered = next;
        }
    }
}

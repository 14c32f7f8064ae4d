using System;
using System.Threading;

namespace SpindleLib;

/// <summary>The node for an <see cref="IJob"/>: the job struct is stored in the node, so it is never boxed.</summary>
internal sealed class JobNode<TJob> : JobNode, IPoolNode<JobNode<TJob>> where TJob : struct, IJob
{
    private TJob _job;
    private JobNode<TJob>? _poolNext;

    ref JobNode<TJob>? IPoolNode<JobNode<TJob>>.Next => ref _poolNext;

    public static JobNode<TJob> Rent(in TJob job)
    {
        JobNode<TJob> node = ObjectPool<JobNode<TJob>>.TryRent() ?? new JobNode<TJob>();
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
        Exception? error = null;
        try
        {
            _job.Execute(); // a constrained call on the struct: specialised and inlinable, no boxing
        }
        catch (Exception ex)
        {
            error = ex;
        }
        return Finish(error);
    }

    protected override void ClearJob() => _job = default;

    protected override void ReturnToPool() => ObjectPool<JobNode<TJob>>.Return(this);
}

/// <summary>The node behind <see cref="JobHandle.CombineDependencies(JobHandle, JobHandle)"/>: no work, done when its dependencies are.</summary>
internal sealed class CombineNode : JobNode, IPoolNode<CombineNode>
{
    private CombineNode? _poolNext;

    private CombineNode()
        : base(countsAsJob: false)
    {
    }

    ref CombineNode? IPoolNode<CombineNode>.Next => ref _poolNext;

    public static CombineNode Rent()
    {
        CombineNode node = ObjectPool<CombineNode>.TryRent() ?? new CombineNode();
        node.Initialize();
        return node;
    }

    public override void Execute() => Finish(null)?.OnReady(); // with or without an inherited fault: nothing to run

    internal override void OnReady() => Finish(null)?.OnReady();

    protected override void ClearJob()
    {
    }

    protected override void ReturnToPool() => ObjectPool<CombineNode>.Return(this);
}

/// <summary>
/// A parallel-for job: [0, length) split into batches that runners (one per worker, plus any thread waiting in
/// Complete()) claim from an atomic cursor. A batch is the unit of distribution: an idle worker takes the next one.
/// </summary>
/// <remarks>
/// Invariants: every batch index is claimed exactly once (the cursor only advances, by Interlocked.Add); the job
/// finishes exactly once, when the claimed-and-done count reaches the batch count; a runner or helper touches the
/// node only while holding a reference (JobNode), so none can claim batches of a later job that reuses the node.
/// </remarks>
internal abstract class ParallelNode : JobNode
{
    /// <summary>Runners and helpers take references of their own (see <see cref="JobNode.TryAcquire"/>).</summary>
    protected ParallelNode()
        : base(sharesReferences: true)
    {
    }

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
            WorkerPool.Shared.QueueHelpable(this); // Execute finishes it
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
        Volatile.Write(ref _ready, 1);
        // One runner to start with; each thread that finds batches left behind the one it claims adds another, up to
        // one per worker (see MaybeAddRunner). Queuing one per worker up front left stale runners behind every small
        // job its caller finished alone, faster than the workers could drain them.
        _runners = 1;
        AddReferences(1);
        WorkerPool.Shared.QueueHelpable(ParallelRunner.Rent(this));
    }

    /// <summary>
    /// Fans out on demand: when batches remain beyond the one just claimed, queues one more runner, while there are
    /// fewer than one per worker. The caller holds a reference, so the node cannot be recycled meanwhile.
    /// </summary>
    private void MaybeAddRunner(long claimedStart)
    {
        if (claimedStart + BatchSize >= Length)
        {
            return;
        }
        WorkerPool pool = WorkerPool.Shared;
        int runners = Volatile.Read(ref _runners);
        if (runners >= pool.WorkerCount || Interlocked.CompareExchange(ref _runners, runners + 1, runners) != runners)
        {
            return;
        }
        AddReferences(1);
        pool.QueueHelpable(ParallelRunner.Rent(this));
    }

    /// <summary>Claims and runs batches until none are left. The caller holds a reference.</summary>
    public void RunBatches()
    {
        bool first = true;
        while (true)
        {
            long start = Interlocked.Add(ref _cursor, BatchSize) - BatchSize;
            if (start >= Length)
            {
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
            }
            if (Interlocked.Decrement(ref _remaining) == 0)
            {
                // Whatever this makes ready is queued, not run here: a runner must drop its reference promptly.
                Finish(Volatile.Read(ref _firstError))?.OnReady();
                return;
            }
        }
    }

    public override bool TryHelp(int version)
    {
        if (Volatile.Read(ref _ready) == 0 || Volatile.Read(ref _cursor) >= Length || !TryAcquire(version))
        {
            return false;
        }
        RunBatches();
        Release();
        return true;
    }

    protected override void ClearJob() => _firstError = null;
}

/// <summary>A pooled work item that runs a parallel job's batches on one worker, then drops its reference.</summary>
internal sealed class ParallelRunner : WorkItem, IPoolNode<ParallelRunner>
{
    private ParallelNode? _node;
    private ParallelRunner? _poolNext;

    ref ParallelRunner? IPoolNode<ParallelRunner>.Next => ref _poolNext;

    public static ParallelRunner Rent(ParallelNode node)
    {
        ParallelRunner runner = ObjectPool<ParallelRunner>.TryRent() ?? new ParallelRunner();
        runner._node = node;
        return runner;
    }

    public override void Execute()
    {
        ParallelNode node = _node!;
        _node = null;
        ObjectPool<ParallelRunner>.Return(this);
        node.RunBatches();
        node.Release();
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
        ParallelForNode<TJob> node = ObjectPool<ParallelForNode<TJob>>.TryRent() ?? new ParallelForNode<TJob>();
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

    protected override void ReturnToPool() => ObjectPool<ParallelForNode<TJob>>.Return(this);
}

/// <summary>The node for an <see cref="IJobParallelForBatch"/>.</summary>
internal sealed class ParallelForBatchNode<TJob> : ParallelNode, IPoolNode<ParallelForBatchNode<TJob>> where TJob : struct, IJobParallelForBatch
{
    private TJob _job;
    private ParallelForBatchNode<TJob>? _poolNext;

    ref ParallelForBatchNode<TJob>? IPoolNode<ParallelForBatchNode<TJob>>.Next => ref _poolNext;

    public static ParallelForBatchNode<TJob> Rent(in TJob job, int length, int batchSize)
    {
        ParallelForBatchNode<TJob> node = ObjectPool<ParallelForBatchNode<TJob>>.TryRent() ?? new ParallelForBatchNode<TJob>();
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

    protected override void ReturnToPool() => ObjectPool<ParallelForBatchNode<TJob>>.Return(this);
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

    public static JobHandle Submit(JobNode node, JobHandle dependsOn)
    {
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

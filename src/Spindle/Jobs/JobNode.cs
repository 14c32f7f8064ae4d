using System;
using System.Diagnostics;
using System.Runtime.ExceptionServices;
using System.Threading;

namespace SpindleLib;

/// <summary>
/// A scheduled job: the pooled node a <see cref="JobHandle"/> points to. It counts the dependencies it still waits for,
/// keeps a lock-free list of what waits for it (dependent jobs and awaiters), runs its work, and on completion notifies
/// them and returns to its pool.
/// </summary>
/// <remarks>
/// <para><b>Version and references.</b> <see cref="_refState"/> packs the node's version (high 32 bits; a handle carries
/// it) and a reference count (low 32 bits). The count is 1 while the job is pending or running, plus one for every
/// thread running a parallel-for's batches (a worker's runner or a waiting thread), for as long as it runs them; a
/// runner waiting in a queue holds none. A runner or helper takes its reference with a CAS
/// that also checks the version: it can never act on a node that was recycled into another job (the ABA that a bare
/// version check would leave open). Only a parallel-for ever has more than the job's own reference; for every other
/// kind no other thread touches the count, and dropping it is a plain store (<see cref="Release"/>). A push onto the
/// waiter list takes no reference and settles that ABA itself (below). When the count reaches 0 after success the node
/// bumps its version and returns to its pool, so any older handle is stale, and a stale handle means success. A node
/// that failed is never recycled: it keeps its exception for every Complete() and await.</para>
/// <para><b>Waiter list.</b> <see cref="_edges"/> is a Treiber stack (R. K. Treiber, "Systems Programming: Coping with
/// Parallelism", IBM RJ 5118, 1986) that is only pushed to and then taken whole: completion Exchanges it for
/// <see cref="s_sealed"/>. Because nothing is ever popped singly, the stack itself has no ABA problem. A push that finds
/// s_sealed fails, and the pusher handles the completed job itself, so a waiter is notified exactly once. A job with a
/// single dependency pushes its own edge (<see cref="_ownEdge"/>, kept with its node) instead of renting one; the
/// finishing dependency takes each edge off before it makes the edge's job ready, and touches it no more.</para>
/// <para><b>Pushing without a reference.</b> A pusher holds no reference on the node (which would cost two interlocked
/// operations per dependent job), so between its read of the head and its CAS the job may finish, the node be recycled
/// and rented for a later job, and the CAS land the edge in that later job's list (the ABA the reference used to rule
/// out). Each edge therefore carries the version it was pushed for (<see cref="Edge.ExpectedVersion"/>) and a claim,
/// which holds a ticket new for every push of that edge until one side settles it. After its CAS the pusher reads the
/// version again: unchanged, the edge is in the right list (a recycled node resets its list only after its version
/// moved on, with a release store). Changed, the dependency has succeeded (only success recycles a node), and the pusher
/// CASes the claim from its ticket to Revoked: if it wins, it treats the dependency as finished and never reuses the
/// edge, which may still be linked in the later job's list; if it loses, a finisher delivered the edge, after which
/// the dependent may already have run and pushed the same edge again with a new ticket, which is why the CAS expects
/// this push's ticket and not a shared "unclaimed" value. A finisher delivers an edge of its own version after a plain
/// store of Delivered (no pusher can revoke it before this job's version moves on, which comes after); a misplaced
/// edge (another version) it delivers only if its CAS from the ticket to Delivered wins, and then as a success, since
/// the job the edge was meant for succeeded. So every edge is delivered exactly once, by its own job's finisher, by a
/// later job's, or by its pusher, and a revoked edge is only ever skipped. This is the tagged compare-and-swap of
/// lock-free stacks (IBM System/370's version-tagged CAS), with the tag checked after the CAS and a claim settling the
/// rare misplaced push, instead of the tag packed into the CAS.</para>
/// <para><b>Dependencies.</b> <see cref="_pending"/> starts at 1 (a guard held while the job is being scheduled), and
/// rises by one for each dependency that accepted an edge. Each finished dependency decrements it; whoever takes it
/// to 0 (the scheduler releasing its guard, or the last dependency to finish) makes the job ready, exactly once. A job
/// scheduled with a single dependency (<see cref="DependOnSingle"/>) has no guard: its count of 1 stands for that
/// dependency, which is then the count's only writer and sets it to 0 with a plain store.</para>
/// </remarks>
[StackTraceHidden]
internal abstract class JobNode : WorkItem
{
    private static readonly Edge s_sealed = new();

    private long _refState;
    private Edge? _edges;
    private int _pending;
    private bool _singleDependency; // see DependOnSingle: then only the one dependency ever touches _pending

    // The edge this job hangs on its single dependency's waiter list (DependOnSingle), kept with the node so that
    // scheduling a dependent job rents only the node. It cannot be reused while it is in a list: this job is not
    // ready, so cannot finish and be recycled, until the dependency's finish has taken the edge off (FinishCore). A
    // revoked one (see the remarks) may stay linked in another job's list: it is replaced, never reused.
    private Edge _ownEdge;
    private int _state; // Pending, Succeeded, Faulted
    private ExceptionHolder? _fault;
    internal JobNode? BatchNext;
    private readonly bool _countsAsJob;
    private readonly bool _sharesReferences;

    /// <summary>
    /// The latest <see cref="JobWait"/> pushed onto this job's waiter list (<see cref="JobHandle.AsSpindleTask"/> on a
    /// pending job), the head of a chain through the job's waits (JobWait's remarks, "Reviving"): a hint only, written by
    /// JobWait alone and never trusted (every wait found through it is checked against its own job and version, and
    /// revived by a CAS on its own core's word). Cleared when the job finishes, whatever its outcome (a failed node is
    /// never recycled: a link it kept would hold a wait read and pooled since, and whatever that wait is rented for next);
    /// a link written after that (a caller whose push raced the finish) is taken back by that caller
    /// (<c>JobWait.Chain</c>), so a finished or pooled node holds no wait.
    /// </summary>
    internal JobWait? LatestWait;

    private const int Pending = 0;
    private const int Succeeded = 1;
    private const int Faulted = 2;

    /// <param name="countsAsJob">False for nodes that are not a user's job (a combine): the jobs-completed metric skips them.</param>
    /// <param name="sharesReferences">
    /// True for a kind whose runners and helpers take references of their own (a parallel-for). For any other kind the
    /// job's own reference is the only one ever taken (a push onto the waiter list holds none), so dropping it needs no
    /// interlocked operation (see <see cref="Release"/>).
    /// </param>
    protected JobNode(bool countsAsJob = true, bool sharesReferences = false)
    {
        _countsAsJob = countsAsJob;
        _sharesReferences = sharesReferences;
        _ownEdge = new Edge(this);
    }

    public int Version => (int)(Volatile.Read(ref _refState) >> 32);

    /// <summary>Prepares a rented node for a new job: one reference, one pending guard, nothing waiting.</summary>
    protected void Initialize()
    {
        if ((int)Volatile.Read(ref _refState) != 0)
        {
            // An invariant, checked in every build: a pooled node is rented only after its last reference was dropped.
            ThrowHelper.ThrowInvalidOperation("Spindle internal error: a job slot was reused while still referenced. Please report this with the stack trace.");
        }
        _state = Pending;
        _fault = null;
        _pending = 1;
        _singleDependency = false;
        // A release store: a pusher whose CAS finds this reset list must then see the version bump that came before it
        // (see the remarks on pushing without a reference).
        Volatile.Write(ref _edges, null);
        BatchNext = null;
        Volatile.Write(ref _refState, (Volatile.Read(ref _refState) & ~0xFFFFFFFFL) | 1L);
    }

    /// <summary>True when the handle's job has finished (a stale version means it finished successfully).</summary>
    /// <remarks>
    /// The state is read before the version. Versions only grow, so if the version still matches afterwards, the state
    /// belonged to this handle's job; a state read from a later job that reused the node would come with a later version.
    /// </remarks>
    public bool IsCompleted(int version)
    {
        int state = Volatile.Read(ref _state);
        return Version != version || state != Pending;
    }

    /// <summary>The job's exception if the handle's job failed, else null, for Complete() and await: marks it observed.</summary>
    public ExceptionHolder? GetFault(int version)
    {
        ExceptionHolder? holder = PeekFault(version);
        holder?.MarkObserved();
        return holder;
    }

    /// <summary>The job's exception if the handle's job failed, else null, for propagation to dependents: not an observation.</summary>
    public ExceptionHolder? PeekFault(int version)
    {
        int state = Volatile.Read(ref _state);
        ExceptionHolder? holder = Volatile.Read(ref _fault);
        return state == Faulted && Version == version ? holder : null;
    }

    /// <summary>Takes a reference if the node still holds the handle's job. See the class remarks.</summary>
    public bool TryAcquire(int version)
    {
        Debug.Assert(_sharesReferences, "only a kind that shares references may take one (see Release)");
        while (true)
        {
            long rs = Volatile.Read(ref _refState);
            if ((int)(rs >> 32) != version || (int)rs == 0)
            {
                return false;
            }
            if (Interlocked.CompareExchange(ref _refState, rs + 1, rs) == rs)
            {
                return true;
            }
        }
    }

    /// <summary>Drops a reference; the last one, after success, recycles the node.</summary>
    /// <remarks>
    /// A kind that does not share references drops the job's own, the only one there is, with a plain read and a release
    /// store: nothing else writes the count. The release store still orders everything the finish wrote (the state, the
    /// edges it delivered) before the version bump, which is what a pusher looking at the version again relies on.
    /// </remarks>
    public void Release()
    {
        long rs;
        if (_sharesReferences)
        {
            rs = Interlocked.Decrement(ref _refState);
        }
        else
        {
            rs = Volatile.Read(ref _refState) - 1;
            Debug.Assert((int)rs == 0, "a kind that does not share references holds only the job's own");
        }
        if ((int)rs != 0 || Volatile.Read(ref _state) != Succeeded)
        {
            if (!_sharesReferences)
            {
                Volatile.Write(ref _refState, rs); // failed: never recycled, and no other thread writes the count
            }
            return;
        }
        // Nobody can reach the node any more except through a handle, which the version bump makes stale.
        long next = (rs & ~0xFFFFFFFFL) + (1L << 32);
        Volatile.Write(ref _refState, next);
        ClearJob();
        if ((int)(next >> 32) == 0)
        {
            // The 32-bit version wrapped: pooled again, the node would give a later job a version that an old handle
            // still holds (2^32 uses ago), and that handle would wait on that job and rethrow its failure. Retired
            // instead: it stays sealed and succeeded, so every handle to it, version 0 included, counts as completed.
            return;
        }
        ReturnToPool();
    }

    protected abstract void ClearJob();

    protected abstract void ReturnToPool();

    /// <summary>Called by the scheduler after registering the dependencies: releases the scheduling guard.</summary>
    /// <returns>True if the job is ready now (the caller puts it in the batch); false if a dependency will make it ready.</returns>
    public bool ReleaseSchedulingGuard()
    {
        if (Interlocked.Decrement(ref _pending) != 0)
        {
            return false;
        }
        if (Volatile.Read(ref _fault) is not null)
        {
            // A dependency failed while we were being scheduled: fail now without running.
            Finish(null)?.OnReady();
            return false;
        }
        return true;
    }

    /// <summary>Makes this job wait for <paramref name="dependency"/> (the handle's job), unless it already finished.</summary>
    public void DependOn(JobHandle dependency)
    {
        // (Called on the scheduling thread while it holds the scheduling guard.)
        JobNode? node = dependency.Node;
        if (node is null)
        {
            return;
        }
        // Increment while holding the scheduling guard; the node is not yet reachable by any other thread through this
        // edge, but an earlier dependency's edge may already be, so the increment must be atomic.
        Interlocked.Increment(ref _pending);
        Edge edge = Edge.Rent();
        edge.Dependent = this;
        if (!node.TryAddEdge(edge, dependency.Version))
        {
            edge.Return();
            // Finished already (or stale, which means succeeded): take its outcome now. The guard we hold keeps the
            // count above zero, so this never makes the job ready.
            DependencyFinished(node.PeekFault(dependency.Version));
        }
    }

    /// <summary>
    /// Makes a freshly rented job wait for one dependency, the common case, without the scheduling guard: the pending
    /// count of 1 that Initialize set stands for the dependency itself. Once the edge is published only the dependency
    /// touches the count, so no other interlocked step is needed.
    /// </summary>
    /// <returns>True if the job is ready now (the caller puts it in the batch).</returns>
    public bool DependOnSingle(JobHandle dependency)
    {
        JobNode? node = dependency.Node;
        if (node is not null)
        {
            // Before the edge is published: the dependency may finish and read it at once.
            _singleDependency = true;
            if (node.TryAddEdge(_ownEdge, dependency.Version))
            {
                return false; // the dependency makes this job ready when it finishes
            }
            _singleDependency = false;
            _ownEdge.Return();
            if (node.PeekFault(dependency.Version) is { } fault)
            {
                _fault = fault; // not yet reachable by any other thread: a plain write
                Volatile.Write(ref _pending, 0);
                Finish(null)?.OnReady();
                return false;
            }
        }
        Volatile.Write(ref _pending, 0);
        return true;
    }

    /// <summary>Registers an awaiter's continuation; false if the job has already finished (the caller runs it).</summary>
    public bool TryAddWaiter(int version, Action<object?> continuation, object? state)
    {
        Edge edge = Edge.Rent();
        edge.Continuation = continuation;
        edge.State = state;
        if (TryAddEdge(edge, version))
        {
            return true;
        }
        edge.Return();
        return false;
    }

    /// <summary>
    /// Pushes <paramref name="edge"/> onto the waiter list of the handle's job (version <paramref name="version"/>).
    /// False if that job has finished: the caller handles the edge's waiter itself, and may reuse the edge unless it was
    /// revoked (<see cref="Edge.Return"/> leaves a revoked edge alone). See the remarks on pushing without a reference.
    /// </summary>
    private bool TryAddEdge(Edge edge, int version)
    {
        edge.ExpectedVersion = version;
        long ticket = edge.NewTicket();
        while (true)
        {
            Edge? head = Volatile.Read(ref _edges);
            if (head == s_sealed || Version != version)
            {
                return false; // finished (a later version means it succeeded)
            }
            edge.Next = head;
#if DEBUG
            TestHookBeforeEdgePush?.Invoke(this);
#endif
            if (Interlocked.CompareExchange(ref _edges, edge, head) == head)
            {
                break;
            }
        }
#if DEBUG
        TestHookAfterEdgePush?.Invoke(this);
#endif
        if (Version == version)
        {
            return true; // in this job's list: its finish delivers it
        }
        // The job finished and the node moved on while the edge was being pushed: it may be in a later job's list. The
        // CAS expects this push's own ticket: once delivered, the edge may already be in use again for another push.
        if (Interlocked.CompareExchange(ref edge.Claim, Edge.Revoked, ticket) != ticket)
        {
            return true; // delivered already, by the job's own finish or by a later job's
        }
        edge.Abandon();
        return false;
    }

#if DEBUG
    /// <summary>
    /// Tests only (a Debug build): run on a pushing thread just before its CAS onto a job's waiter list, and just after
    /// it, standing in for a preemption there, so that a test can finish and recycle the job at that moment.
    /// </summary>
    internal static Action<JobNode>? TestHookBeforeEdgePush;

    /// <inheritdoc cref="TestHookBeforeEdgePush"/>
    internal static Action<JobNode>? TestHookAfterEdgePush;

    /// <summary>
    /// Tests only (a Debug build): run by a finisher just before it claims a misplaced edge (<see cref="Edge.TryTake"/>),
    /// so that a test can line it up with the pusher's revocation (<c>JobEdgeClaimRaceTests</c>).
    /// </summary>
    internal static Action? TestHookBeforeMisplacedClaim;

    /// <summary>Tests only (a Debug build): how many dependencies the job still waits for.</summary>
    internal int PendingDependenciesForTests => Volatile.Read(ref _pending);

    /// <summary>
    /// Tests only (a Debug build): how many edges of the job of <paramref name="version"/> its waiter list holds (dependents
    /// and awaiters not yet delivered); 0 once it finished. A snapshot, walked without a reference: call it while the job
    /// cannot finish.
    /// </summary>
    internal int WaiterCountForTests(int version)
    {
        int count = 0;
        for (Edge? edge = Volatile.Read(ref _edges); edge is not null && edge != s_sealed; edge = edge.Next)
        {
            if (edge.ExpectedVersion == version)
            {
                count++;
            }
        }
        return count;
    }
#endif

    /// <summary>A revoked own edge may still be linked in another job's list: this job takes a new one.</summary>
    private void ReplaceOwnEdge() => _ownEdge = new Edge(this);

    /// <summary>
    /// A dependency finished. Returns this node if that made it ready: the caller runs it if it can run inline (see
    /// <see cref="CanRunInline"/>), and otherwise calls <see cref="MakeReady"/> once every other dependent it is
    /// delivering is ready.
    /// </summary>
    private JobNode? DependencyFinished(ExceptionHolder? fault)
    {
        if (fault is not null)
        {
            Interlocked.CompareExchange(ref _fault, fault, null);
        }
        if (_singleDependency)
        {
            // The one dependency is the only writer of the count once its edge is published (DependOnSingle): no
            // other thread can race this store, so it needs no interlocked operation.
            _pending = 0;
        }
        else if (Interlocked.Decrement(ref _pending) != 0)
        {
            return null;
        }
        // Ready. A job that can run inline is run (or, with an inherited fault, finished without running) by the
        // caller's loop: no recursion. Any other kind the caller makes ready with MakeReady once it has made all its
        // other dependents ready (see FinishCore).
        return this;
    }

    /// <summary>A ready job that cannot run inline: finishes it (a combine, an empty parallel-for, a failed job) or starts its batches.</summary>
    private void MakeReady()
    {
        if (ThreadCounters.Current.FinishDepth >= MaxNestedFinish)
        {
            // Finishing this kind of job here would nest one more Finish on the stack (a combine, an empty parallel-for,
            // a failed job): past a small depth, queue it instead, and let the thread that runs it finish it.
            WorkerPool.Shared.QueueShared(this);
            return;
        }
        if (Volatile.Read(ref _fault) is not null)
        {
            Finish(null)?.OnReady();
        }
        else
        {
            OnReady();
        }
    }

    private const int MaxNestedFinish = 16;

    /// <summary>
    /// For a job that became ready with a failed dependency: finishes it with that failure, without running it.
    /// Returns false if there is no inherited failure (the caller runs the job).
    /// </summary>
    protected bool TryFinishInheritedFault(out JobNode? inline)
    {
        if (Volatile.Read(ref _fault) is null)
        {
            inline = null;
            return false;
        }
        inline = Finish(null);
        return true;
    }

    /// <summary>Checked before a job's work runs: it must still be pending (a job runs at most once).</summary>
    protected void AssertPending()
    {
        if (Volatile.Read(ref _state) != Pending)
        {
            ThrowHelper.ThrowInvalidOperation("Spindle internal error: a finished job was run again. Please report this with the stack trace.");
        }
    }

    /// <summary>True for a job whose work can run on the thread that made it ready (a plain IJob).</summary>
    protected virtual bool CanRunInline => false;

    /// <summary>Runs the job's work and finishes it; returns a dependent that became ready and can run inline, if any.</summary>
    protected virtual JobNode? RunAndFinish() => throw new InvalidOperationException("This job kind does not run inline.");

    /// <summary>
    /// Runs this job, then, while finishing a job makes exactly one dependent ready, that dependent too, on this thread:
    /// a dependent chain stays on one thread without going through the queues. The run is bounded so that one chain
    /// cannot hold a thread for ever; the rest is queued.
    /// </summary>
    /// <remarks>
    /// Jobs carry no ExecutionContext (as Unity's do not): each runs in the one the thread has. So that an AsyncLocal
    /// value one job sets does not reach the dependent run after it here, the thread's context is put back between them
    /// if a job changed it (one read when none did); whatever the last one leaves, the caller's loop or helping wait
    /// puts back, as after any item. netstandard2.1 cannot restore a context: there a dependent may see it.
    /// </remarks>
    protected static void RunChain(JobNode first)
    {
        JobNode? next = first;
#if NET
        ExecutionContext? context = ExecutionContext.Capture();
#endif
        for (int i = 0; i < MaxInlineChain && next is not null; i++)
        {
            next = next.RunAndFinish();
#if NET
            if (next is not null)
            {
                ContextFlow.RestoreIfChanged(context);
            }
#endif
        }
        next?.OnReady();
    }

    private const int MaxInlineChain = 1024;

    /// <summary>All dependencies finished successfully: queue it (or complete it, if it has no work).</summary>
    internal virtual void OnReady() => WorkerPool.Shared.QueueShared(this);

    /// <summary>The batch was flushed and this job was ready at scheduling time.</summary>
    public virtual void MakeVisible() => OnReady();

    /// <summary>
    /// Completes the job (with <paramref name="exception"/>, or with an inherited dependency fault, or successfully),
    /// notifies everything that waits for it, and drops the job's own reference. Returns one dependent that became
    /// ready and can run inline, for the caller to run (or queue with OnReady); every other ready dependent is queued.
    /// </summary>
    protected JobNode? Finish(Exception? exception) => Finish(exception, ThreadCounters.Current);

    /// <inheritdoc cref="Finish(Exception?)"/>
    /// <param name="exception">The job's own exception, if its work threw.</param>
    /// <param name="counters">The calling thread's counters, when the caller has read them already.</param>
    protected JobNode? Finish(Exception? exception, ThreadCounters counters)
    {
        // One thread-static read for the nesting depth, the metrics' count and the running jobs (ThreadCounters).
        if (_countsAsJob)
        {
            counters.JobsCompleted++;
        }
        counters.FinishDepth++;
        try
        {
            return FinishCore(exception);
        }
        finally
        {
            counters.FinishDepth--;
        }
    }

    private JobNode? FinishCore(Exception? exception)
    {
        JobNode? inline = null;
        if (exception is not null)
        {
            Interlocked.CompareExchange(ref _fault, new ExceptionHolder(exception), null);
        }
        ExceptionHolder? fault = Volatile.Read(ref _fault);
        Volatile.Write(ref _state, fault is null ? Succeeded : Faulted);
        int version = Version; // unchanged until the last reference is dropped, after this
        Edge? edges = Interlocked.Exchange(ref _edges, s_sealed);
        // The chain of the job's waits serves only while it is pending (JobWait's remarks, "Reviving"): dropped now, for
        // every outcome, since a failed node is never recycled and would keep it for ever (and, through a wait read and
        // pooled since, whatever that wait is rented for next). Read after the Exchange (a full fence) and the state
        // store: a link written after this read is taken back by its writer, whose look at the state follows its own CAS
        // (JobWait.Chain). A read, and a store only when a wait was taken: the only cost the revival puts on this path.
        if (Volatile.Read(ref LatestWait) is not null)
        {
            Volatile.Write(ref LatestWait, null);
        }
        // Two passes. Dependents first, so that every job waiting for this one is ready (queued, or kept to run inline)
        // before any awaiter's continuation runs: a continuation may Complete() a dependent, which must then find it.
        Edge? continuations = null;
        // A ready dependent that finishes without running (a combine, an empty parallel-for, a failed job) runs its
        // awaiters' continuations when it finishes, and one may wait for another dependent of this job: it is finished
        // after the loop, once every other dependent is ready. Any further such dependent is queued.
        JobNode? finishAfter = null;
        while (edges is not null && edges != s_sealed)
        {
            Edge next = edges.Next!;
            if (!edges.TryTake(version, out bool misplaced))
            {
                edges = next; // revoked by its pusher: it handled the waiter itself
                continue;
            }
            if (edges.Dependent is { } dependent)
            {
                // Let go of the edge first: once the dependent is ready it may run, finish and reuse its own edge.
                edges.Return();
                // A misplaced edge was meant for an earlier job on this node, which succeeded.
                if (dependent.DependencyFinished(misplaced ? null : fault) is { } ready)
                {
                    if (!ready.CanRunInline)
                    {
                        if (finishAfter is null)
                        {
                            finishAfter = ready;
                        }
                        else
                        {
                            WorkerPool.Shared.QueueShared(ready);
                        }
                    }
                    else if (inline is null)
                    {
                        inline = ready;
                    }
                    else
                    {
                        ready.OnReady();
                    }
                }
            }
            else
            {
                edges.Next = continuations;
                continuations = edges;
            }
            edges = next;
        }
        if (finishAfter is not null || continuations is not null)
        {
            // A continuation (this job's, or the finished dependent's) may block on the dependent this thread meant to
            // run next: make it visible first.
            inline?.OnReady();
            inline = null;
            finishAfter?.MakeReady();
            // A thread outside the workers finishes a job only inside Complete() (BlockingWait.WaitForJob), where it runs
            // jobs only, never other code (docs/decisions.md section 4): the code awaiting this job resumes on a worker,
            // not inside the Complete() of a main thread that owes a frame or holds a lock. What the job's own Execute
            // resumed (a SetResult in it) ran inline already, as part of the job.
            int depth = continuations is not null && !WorkerPool.Shared.IsWorkerThread ? Continuations.BeginQueueing() : -1;
            while (continuations is not null)
            {
                Edge next = continuations.Next!;
                Action<object?> continuation = continuations.Continuation!;
                object? state = continuations.State;
                continuations.Return();
                // A continuation that throws must not unwind the finish: the waiters after it (a thread blocked in
                // Complete() among them) would never be woken, and the job's reference never dropped. It is reported.
                Continuations.InvokeReporting(continuation, state);
                continuations = next;
            }
            if (depth >= 0)
            {
                Continuations.EndQueueing(depth); // InvokeReporting does not throw
            }
        }
        Release();
        return inline;
    }

    /// <summary>
    /// Refuses a wait that could never end: one, on a thread running a job's work, for a handle that finishes only after
    /// that job (its own, or a job that depends on it, directly or through combines). The running job cannot finish
    /// before the wait returns, so the thread would wait for ever (it did, before this check).
    /// </summary>
    /// <remarks>
    /// Called before a thread blocks in Complete() or a blocking read, never on the scheduling or finishing path. The walk
    /// follows the running jobs' waiter lists down to their dependents and theirs. It is safe without references: a job
    /// that runs on this thread cannot finish meanwhile, so its list only grows (pushes at the head), and a dependent
    /// reached through an edge of that job's version waits for it, so cannot finish either; edges of another version
    /// (misplaced by a push that raced an earlier use, see the remarks on pushing) and awaiters' continuations are skipped,
    /// not followed into. Each job (node and version) is looked at once, however many paths lead to it
    /// (<see cref="DeadlockWalk"/>): the walk is linear in the jobs and edges it reaches, and has no bound. It had one (100,000
    /// edges, past which the wait went ahead unchecked), because it followed every path, and a graph of shared paths (each
    /// level's jobs combined and fanned out again) has exponentially many: a wait that could never end, found only past the
    /// bound, hung. Every job it reaches waits for a running job, so what it can reach is the pending graph behind this
    /// thread's jobs, no larger than what the program scheduled. The message names the caller's situation from the thread's
    /// running-jobs stack: the job found is the innermost entry (the caller is that job's own code, or code its Execute ran
    /// inline), or a helping wait's mark lies above it (<see cref="ThreadCounters.EnterHelpingWait"/>: the job is blocked,
    /// and the caller is work its thread picked up meanwhile, such as a Spindle.Run item or another job).
    /// </remarks>
    /// <exception cref="InvalidOperationException">The wait could never end.</exception>
    internal static void ThrowIfWaitsForARunningJob(JobNode target, int version) => ThrowIfWaitsForARunningJob(target, version, null);

    /// <summary>
    /// As <see cref="ThrowIfWaitsForARunningJob(JobNode, int)"/>, for a blocking read of a task whose source is itself
    /// an awaiter on a job's waiter list: an async method suspended in <c>await handle</c>, as
    /// <see cref="JobHandle.AsSpindleTask"/>'s is. Such a source completes only after the awaited job has finished (its
    /// waiter runs on that job's finish), so when that job is a running one or waits for one, the read would wait for
    /// ever. Found as an awaiter edge, of the version it was pushed for, whose state is the source itself: a waiter
    /// delivered or revoked is off a running job's list, or of another version, so a match is one that still waits.
    /// </summary>
    /// <remarks>
    /// Only a source that waits on the job directly is recognised: one that waits through another source (a task that
    /// awaits that task, a preserved copy of it) is not followed, since not every waiter completes only after what it
    /// waits on (a WhenAny does not).
    /// </remarks>
    /// <exception cref="InvalidOperationException">The read could never end.</exception>
    internal static void ThrowIfAwaitsARunningJob(object source) => ThrowIfWaitsForARunningJob(null, 0, source);

    /// <summary>The one check behind both: the target is a job's use (<paramref name="target"/>, <paramref name="version"/>), or an awaiter's state.</summary>
    private static void ThrowIfWaitsForARunningJob(JobNode? target, int version, object? awaiter)
    {
        if (ThreadCounters.CurrentIfRegistered is not { RunningCount: > 0 } counters)
        {
            return;
        }
        DeadlockWalk walk = counters.DeadlockWalk ??= new DeadlockWalk();
#if DEBUG
        walk.EdgesWalkedForTests = 0;
#endif
        int top = counters.RunningCount - 1;
        try
        {
            for (int i = top; i >= 0; i--) // innermost first: a wait both the caller's own job and an outer one would refuse names the caller's
            {
                if (counters.RunningAt(i) is { } running && walk.Reaches(running, target, version, awaiter))
                {
                    // The innermost entry is the job whose own code called (or code its Execute ran inline). Anything above
                    // the job found (a helping wait's mark, and what it ran) means the job is blocked further down the stack,
                    // and the caller is work its waiting thread picked up.
                    ThrowHelper.ThrowInvalidOperation(i == top ? InsideTheJobMessage : NestedInABlockedJobMessage);
                }
            }
        }
        finally
        {
            walk.Clear(counters);
        }
    }

    private const string WhatWasCalled =
        "JobHandle.Complete(), or a blocking read (GetAwaiter().GetResult()) of a task that awaits a job,";

    private const string InsideTheJobMessage =
        WhatWasCalled + " was called inside a job (in its Execute, or in code its Execute ran inline, such as an async method that a SetResult " +
        "in it resumed), on a handle or task that can finish only after that job: its own, or one that depends on it, directly or not. " +
        "It would wait for ever. Schedule the work that needs it as a dependent of this job instead, or complete the handle outside the job.";

    private const string NestedInABlockedJobMessage =
        WhatWasCalled + " was called on a handle or task that can finish only after a job that is blocked further down this thread's stack: " +
        "that job waited (in Complete() or a blocking read), and while it waited this thread picked up the calling code to help " +
        "(a Spindle.Run item, a continuation or another job; a thread that is not a worker helps with jobs only). " +
        "That job cannot return before this code does, so the wait would never end. " +
        "Await the handle or task here instead of blocking, or do not block inside that job: make what it waits for a dependency of it.";

    /// <summary>
    /// A thread's walk for <see cref="ThrowIfWaitsForARunningJob(JobNode?, int, object?)"/>: the jobs still to look at (an
    /// explicit stack, depth first: a dependent chain can be tens of thousands of jobs long) and every job reached, each a
    /// node with the version it was reached for (a handle), so that a job many paths lead to is looked at once. Kept on
    /// the thread (<see cref="ThreadCounters.DeadlockWalk"/>) and reused, so a check allocates nothing once the
    /// collections have grown; emptied on every way out (<see cref="Clear"/>), so that it keeps no node alive.
    /// </summary>
    /// <remarks>
    /// The jobs reached are shared by the walks from each of the thread's running jobs, innermost first: the jobs reached
    /// from one job that did not lead to the target do not lead to it from another either.
    /// </remarks>
    internal sealed class DeadlockWalk
    {
        /// <summary>
        /// A walk that reached more jobs than this leaves its collections to the GC: a thread keeps at most about this
        /// many entries' worth (some 180 KB) after a walk over a huge pending graph, and a walk that large allocates anew.
        /// </summary>
        internal const int MaxKept = 4096;

        private readonly System.Collections.Generic.Stack<JobHandle> _pending = new();
        private readonly System.Collections.Generic.HashSet<JobHandle> _reached = new();

#if DEBUG
        /// <summary>Tests only (a Debug build): how many edges the thread's last check looked at.</summary>
        internal int EdgesWalkedForTests;
#endif

        /// <summary>True if the target (see <see cref="ThrowIfWaitsForARunningJob(JobNode?, int, object?)"/>) is the running job or waits for it.</summary>
        public bool Reaches(JobNode running, JobNode? target, int version, object? awaiter)
        {
            var start = new JobHandle(running, running.Version);
            if (target == running && version == start.Version)
            {
                return true;
            }
            if (!_reached.Add(start))
            {
                return false; // reached from a job further in, which did not lead to the target
            }
            _pending.Push(start);
            while (_pending.Count > 0)
            {
                JobHandle job = _pending.Pop();
                for (Edge? edge = Volatile.Read(ref job.Node!._edges); edge is not null && edge != s_sealed; edge = edge.Next)
                {
#if DEBUG
                    EdgesWalkedForTests++;
#endif
                    if (edge.ExpectedVersion != job.Version)
                    {
                        continue; // misplaced: its job is another one
                    }
                    if (edge.Dependent is not { } dependent)
                    {
                        if (awaiter is not null && edge.State == awaiter)
                        {
                            return true; // the source read is this awaiter: it resumes only after this job has finished
                        }
                        continue; // another awaiter: not followed
                    }
                    var reached = new JobHandle(dependent, dependent.Version);
                    if (dependent == target && reached.Version == version)
                    {
                        return true;
                    }
                    if (_reached.Add(reached))
                    {
                        _pending.Push(reached);
                    }
                }
            }
            return false;
        }

        /// <summary>Empties the walk (it keeps no node alive), or, after a walk past <see cref="MaxKept"/> jobs, drops it.</summary>
        public void Clear(ThreadCounters owner)
        {
            if (_reached.Count > MaxKept)
            {
                owner.DeadlockWalk = null;
                return;
            }
            _pending.Clear();
            _reached.Clear();
        }
    }

    /// <summary>Lets a waiting thread take part in the job's own work (parallel-for batches). Default: nothing to share.</summary>
    public virtual bool TryHelp(int version) => false;

    /// <summary>
    /// One entry in a job's waiter list: a dependent job or an awaiter's continuation. Pooled, except a job's own edge
    /// (<see cref="_ownEdge"/>), which stays with its job and is only cleared when it comes off a list.
    /// </summary>
    internal sealed class Edge : IPoolNode<Edge>
    {
        public const long Delivered = -1;
        public const long Revoked = -2;

        public Edge? Next;
        public JobNode? Dependent;
        public Action<object?>? Continuation;
        public object? State;

        /// <summary>The version of the job this edge was pushed for (see the remarks on pushing without a reference).</summary>
        public int ExpectedVersion;

        /// <summary>
        /// While pushed and unsettled, the push's ticket (positive, new for every push of this edge); then
        /// <see cref="Delivered"/> by a finisher, or <see cref="Revoked"/> by its pusher, whichever moves it first. The
        /// ticket keeps a pusher that looks late from revoking a later push of the same edge (after a delivery the
        /// dependent may run, finish, and push its own edge again).
        /// </summary>
        public long Claim; // 64 bits: a ticket never comes round again (31 bits did after 2^31 pushes of one edge)

        private long _ticket;

        private Edge? _poolNext;
        private readonly JobNode? _owner;
        private bool _abandoned;

        public Edge()
        {
        }

        /// <summary>A job's own edge: it always names that job.</summary>
        public Edge(JobNode owner)
        {
            _owner = owner;
            Dependent = owner;
        }

        ref Edge? IPoolNode<Edge>.Next => ref _poolNext;

        public static Edge Rent() => CirculatingPool<Edge>.Rent();

        /// <summary>
        /// A finisher takes the edge (true) unless its pusher revoked it. One of this job's version is the finisher's
        /// alone (see the remarks): a plain store marks it. A misplaced one is claimed by CAS, and
        /// <paramref name="misplaced"/> says so: its waiter's job succeeded.
        /// </summary>
        public bool TryTake(int version, out bool misplaced)
        {
            misplaced = ExpectedVersion != version;
            if (!misplaced)
            {
                Volatile.Write(ref Claim, Delivered); // Volatile so a 64-bit store cannot tear on a 32-bit platform (docs/decisions.md section 12)
                return true;
            }
            // Misplaced: its pusher may be revoking it. Its ticket cannot change meanwhile: the edge is reused only once
            // it has been settled.
#if DEBUG
            TestHookBeforeMisplacedClaim?.Invoke();
#endif
            long ticket = Volatile.Read(ref Claim);
            return ticket > 0 && Interlocked.CompareExchange(ref Claim, Delivered, ticket) == ticket;
        }

        /// <summary>Starts a push: a new ticket, stored as the unsettled claim (published by the push's CAS).</summary>
        public long NewTicket()
        {
            long ticket = ++_ticket; // positive (never wraps): the settled values are negative
            Volatile.Write(ref Claim, ticket);
            return ticket;
        }

        /// <summary>
        /// Revoked by its pusher while it may still be linked in another job's list, whose finisher will follow its
        /// <see cref="Next"/>: never reused. A job's own edge is replaced; a pooled one is left to the GC.
        /// </summary>
        public void Abandon()
        {
            _abandoned = true;
            _owner?.ReplaceOwnEdge();
        }

        /// <summary>Done with this use: a pooled edge is cleared and pooled; a job's own edge is only unlinked; an abandoned one is left alone.</summary>
        public void Return()
        {
            if (_abandoned)
            {
                return;
            }
            Next = null;
            if (_owner is not null)
            {
                return;
            }
            Dependent = null;
            Continuation = null;
            State = null;
            CirculatingPool<Edge>.Return(this);
        }
    }
}

/// <summary>
/// A failed job's exception, or a task scope child's failure. If no Complete() or await ever observes it (a scope's
/// WaitAsync or disposal delivers it), its finalizer reports the exception to <see cref="Spindle.UnobservedException"/>,
/// as Task does for unobserved faults: the exception is never lost. Created only on the failure path.
/// </summary>
internal sealed class ExceptionHolder
{
    private int _observed;

    public ExceptionHolder(Exception exception) => Info = ExceptionDispatchInfo.Capture(exception);

    /// <summary>Holds a failure captured already (a scope child's, with the trace its read kept).</summary>
    public ExceptionHolder(ExceptionDispatchInfo info) => Info = info;

    public ExceptionDispatchInfo Info { get; }

    public void MarkObserved()
    {
        if (Interlocked.Exchange(ref _observed, 1) == 0)
        {
            GC.SuppressFinalize(this);
        }
    }

    ~ExceptionHolder()
    {
        if (Volatile.Read(ref _observed) == 0)
        {
            UnobservedExceptions.Report(Info.SourceException);
        }
    }
}

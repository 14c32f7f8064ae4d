using System;
using System.Diagnostics;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Threading;

namespace SpindleLib;

/// <summary>
/// A handle to a scheduled job: a small versioned struct. <c>default</c> means "no dependency" and is always complete.
/// Wait for the job with <see cref="Complete"/> (the calling thread runs jobs while it waits), or <c>await</c> it.
/// </summary>
/// <remarks>
/// <para><b>Threads.</b> Jobs can be scheduled, and handles completed, awaited or combined, from any thread, concurrently.</para>
/// <para><b>Batching.</b> Scheduling puts a ready job in a batch that workers do not see yet;
/// <see cref="ScheduleBatchedJobs"/> makes the batch visible and wakes workers. <see cref="Complete"/>,
/// <see cref="IsCompleted"/> and awaiting a handle flush the batch themselves, so forgetting to flush never deadlocks.</para>
/// <para><b>Faults.</b> A job that throws does not harm its worker. Its exception is rethrown by <see cref="Complete"/>
/// and by <c>await</c>, on this handle and on the handle of every job that depends on it, directly or not: the dependents
/// of a failed job do not run, and they complete with the same exception. A failure that nobody observes is reported to
/// <see cref="Spindle.UnobservedException"/> when the failed job is garbage-collected (a failed job is never recycled; it is
/// collected once no handle to it remains). A job that throws an <see cref="System.OperationCanceledException"/> ends
/// canceled rather than faulted: <see cref="Complete"/> and <c>await</c> rethrow it all the same, and its task
/// (<see cref="AsSpindleTask"/>) reads canceled. A data-parallel job fails at its first exception and skips the batches
/// not started yet (<see cref="JobExtensions.Schedule{T}(T, int, int, JobHandle)"/>'s remarks). The pools refill after
/// failures, so a burst of failed jobs is followed by a few allocating frames.</para>
/// <para><b>Stale handles.</b> Once a job has succeeded its slot is reused; an old handle then counts as completed, as
/// in Unity. It never waits on the job that reuses the slot.</para>
/// </remarks>
[StructLayout(LayoutKind.Auto)]
[DebuggerDisplay("{DebuggerDisplay,nq}")]
public readonly struct JobHandle : IEquatable<JobHandle>
{
    internal readonly JobNode? Node;
    internal readonly int Version;

    internal JobHandle(JobNode node, int version)
    {
        Node = node;
        Version = version;
    }

    /// <summary>True when the job has finished, successfully or not. Flushes the batch if the job is still pending.</summary>
    public bool IsCompleted
    {
        get
        {
            if (Node is not { } node || node.IsCompleted(Version))
            {
                return true;
            }
            JobBatch.Flush();
            return node.IsCompleted(Version);
        }
    }

    /// <summary>What a debugger shows: whether the job has finished, read without flushing the batch (as IsCompleted does).</summary>
    private string DebuggerDisplay => Node is not { } node ? "Completed (default handle)" : node.IsCompleted(Version) ? "Completed" : "Pending";

    /// <summary>
    /// Waits until the job has finished, running jobs on the calling thread while it waits (on a thread that is not a
    /// Spindle worker, jobs only, never other queued work, nor the code that awaits a job it finishes there, which resumes
    /// on a worker; a worker runs any of its work, as in a blocking wait on a task).
    /// Flushes the batch first. Rethrows the job's exception, or a failed dependency's.
    /// </summary>
    /// <remarks>
    /// Because the waiting thread may run any queued job, do not call Complete() on a thread that some queued job waits
    /// for (for example, a job that blocks until this thread sets an event later): the thread could pick that job up
    /// and wait on itself. Jobs should not block on other threads; express such orderings as job dependencies. For the
    /// same reason, do not call Complete() from inside a job's Execute (Unity forbids it too): the job blocked there
    /// may pick up a job that waits, directly or not, for the job it is running. Schedule the work as a dependent
    /// instead. A Complete() inside a job on a handle that can finish only after that job (its own, or a job that depends
    /// on it, directly or through combines) could never return: it throws instead. So does a Complete() in work that a
    /// thread blocked inside a job picked up to help (a <see cref="Spindle.Run(System.Action)"/> item, a continuation,
    /// another job), on a handle that can finish only after that blocked job; the message says which case it is.
    /// <para>A thread's first Complete() of a pending job makes the pooled waiter it blocks on, before it can block (a
    /// small object a thread; the first in the process also makes the wait's statics), so a later real block allocates
    /// nothing. <see cref="SpindlePool.Trim"/> on that thread (or, for a worker, any call) takes the waiter back, and the
    /// thread's next wait makes another.</para>
    /// </remarks>
    /// <exception cref="InvalidOperationException">Called inside a job's Execute on a handle that can finish only after
    /// that job, or in work run nested under such a job while it is blocked.</exception>
    [StackTraceHidden]
    public void Complete()
    {
        WaitUntilFinished();
        ThrowIfFailed();
    }

    /// <summary>
    /// Waits until every job in <paramref name="handles"/> has finished, running jobs on the calling thread while it
    /// waits, as <see cref="Complete"/> does for each (Unity's <c>JobHandle.CompleteAll</c>). Default, completed and stale
    /// handles need no wait; a handle may appear more than once. Allocates nothing.
    /// </summary>
    /// <remarks>
    /// <para><b>Faults.</b> Every job has finished when this returns or throws a job's exception: it waits for all of
    /// them first, then rethrows the exception of the first failed handle in span order, as <see cref="Complete"/> on that
    /// handle would (so the data every job touched is free, whichever failed). That is the failure it observes. Another
    /// failed handle's exception is not observed by this call: <see cref="Complete"/> that handle to read it; if nothing
    /// does, it is reported to <see cref="Spindle.UnobservedException"/> when the failed job is collected, as any job failure nobody
    /// observes. (Handles that failed because of one failed dependency share its exception, observed once.)</para>
    /// <para>The rules of <see cref="Complete"/> hold for each wait: do not call it inside a job on a handle that can
    /// finish only after that job (it throws the <see cref="InvalidOperationException"/> Complete() throws, and then
    /// the handles after that one have not been waited for).</para>
    /// </remarks>
    /// <exception cref="InvalidOperationException">A wait was refused, as <see cref="Complete"/> refuses it.</exception>
    [StackTraceHidden]
    public static void CompleteAll(ReadOnlySpan<JobHandle> handles)
    {
        foreach (JobHandle h in handles)
        {
            h.WaitUntilFinished();
        }
        foreach (JobHandle h in handles)
        {
            h.ThrowIfFailed();
        }
    }

    /// <summary>As <see cref="CompleteAll(ReadOnlySpan{JobHandle})"/> over two handles: waits for both, then rethrows the first one's failure, else the second's.</summary>
    /// <exception cref="InvalidOperationException">A wait was refused, as <see cref="Complete"/> refuses it.</exception>
    [StackTraceHidden]
    public static void CompleteAll(JobHandle a, JobHandle b)
    {
        a.WaitUntilFinished();
        b.WaitUntilFinished();
        a.ThrowIfFailed();
        b.ThrowIfFailed();
    }

    /// <summary>As <see cref="CompleteAll(ReadOnlySpan{JobHandle})"/> over three handles: waits for all three, then rethrows the first failure in argument order.</summary>
    /// <exception cref="InvalidOperationException">A wait was refused, as <see cref="Complete"/> refuses it.</exception>
    [StackTraceHidden]
    public static void CompleteAll(JobHandle a, JobHandle b, JobHandle c)
    {
        a.WaitUntilFinished();
        b.WaitUntilFinished();
        c.WaitUntilFinished();
        a.ThrowIfFailed();
        b.ThrowIfFailed();
        c.ThrowIfFailed();
    }

    /// <summary>Complete()'s wait: flushes the batch and waits, helping, if the job is pending. Throws only a refused wait.</summary>
    private void WaitUntilFinished()
    {
        if (Node is { } node && !node.IsCompleted(Version))
        {
            JobBatch.Flush();
            BlockingWait.WaitForJob(node, Version);
        }
    }

    /// <summary>Complete()'s read of a finished job: rethrows its failure (or a failed dependency's), marking it observed.</summary>
    [StackTraceHidden]
    private void ThrowIfFailed() => Node?.GetFault(Version)?.Info.Throw();

    /// <summary>Makes every job scheduled so far visible to the workers, and wakes them.</summary>
    public static void ScheduleBatchedJobs() => JobBatch.Flush();

    /// <summary>A handle that completes when both jobs have.</summary>
    public static JobHandle CombineDependencies(JobHandle a, JobHandle b)
    {
        if (a.IsDoneWithoutFlush)
        {
            return b;
        }
        if (b.IsDoneWithoutFlush)
        {
            return a;
        }
        CombineNode node = CombineNode.Rent();
        int version = node.Version;
        node.DependOn(a);
        node.DependOn(b);
        Finalize(node);
        return new JobHandle(node, version);
    }

    /// <summary>A handle that completes when all three jobs have.</summary>
    public static JobHandle CombineDependencies(JobHandle a, JobHandle b, JobHandle c)
        => CombineDependencies(CombineDependencies(a, b), c);

    /// <summary>A handle that completes when every job in <paramref name="handles"/> has.</summary>
    /// <remarks>
    /// Any number of handles (no cap, as in Unity): the combine is one node, and each pending handle costs one pooled edge
    /// on that job's waiter list. A handle may appear more than once; default, completed and stale ones are skipped.
    /// </remarks>
    public static JobHandle CombineDependencies(ReadOnlySpan<JobHandle> handles)
    {
        JobHandle single = default;
        int pending = 0;
        foreach (JobHandle h in handles)
        {
            if (!h.IsDoneWithoutFlush)
            {
                pending++;
                single = h;
            }
        }
        if (pending <= 1)
        {
            return single;
        }
        CombineNode node = CombineNode.Rent();
        int version = node.Version;
        foreach (JobHandle h in handles)
        {
            node.DependOn(h);
        }
        Finalize(node);
        return new JobHandle(node, version);
    }

    private static void Finalize(CombineNode node)
    {
        if (node.ReleaseSchedulingGuard())
        {
            node.Execute(); // ready at once: nothing to run, it just completes
        }
    }

    /// <summary>Completed successfully, with nothing to rethrow, as far as can be told without flushing.</summary>
    private bool IsDoneWithoutFlush => Node is null || (Node.IsCompleted(Version) && Node.PeekFault(Version) is null);

    /// <summary>A <see cref="SpindleTask"/> that completes when the job does (and faults as it does).</summary>
    /// <remarks>
    /// As for <see cref="Complete"/>, a blocking read of this task (<c>GetAwaiter().GetResult()</c>) inside the job, or
    /// inside a job it depends on, could never return: it throws an <see cref="InvalidOperationException"/> instead,
    /// and leaves the task as it was.
    /// <para>A call on a job that has not finished returns a wait on it: a small pooled object on the job's waiter list,
    /// which goes back to its pool when it is read, or, if nobody will read it, when the job finishes. A combinator can let
    /// go of it (a WhenAny it lost, a
    /// <see cref="SpindleTask.WithTimeout(TimeSpan, TimerWheel, System.Threading.CancellationToken)"/> that timed out): it
    /// then reads nothing and reports nothing, and the job's fault is reported once to
    /// <see cref="Spindle.UnobservedException"/> only if nothing else observes it, as for a job nobody awaits. The next call
    /// on the same job reuses a wait that was let go of (under a new token: a kept copy of the let-go task is the
    /// await-once error) instead of adding one. So a loop that waits for a job with a timeout turn after turn,
    /// <c>await handle.AsSpindleTask().WithTimeout(t)</c>, reports nothing per turn that timed out and holds one wait
    /// however long the job runs (up to four loops polling the same job at once hold about one each; more hold one per turn
    /// until the job finishes). Preserving the wait once before the loop
    /// (<c>var done = handle.AsSpindleTask().Preserve();</c>, then <c>await done.WithTimeout(t)</c> each turn) holds
    /// nothing per turn too, for any number of loops.</para>
    /// </remarks>
    public SpindleTask AsSpindleTask()
    {
        if (Node is not { } node)
        {
            return default;
        }
        // IsCompleted flushes the batch, as an await does.
        if (!IsCompleted && JobWait.TryStart(node, Version, out SpindleTask wait))
        {
            return wait;
        }
        // Finished (before the call, or while the wait was being pushed): its success, or its fault, read as an await reads it.
        return AwaitAsync(this);
    }

    private static async SpindleTask AwaitAsync(JobHandle handle) => await handle;

    /// <summary>Gets an awaiter, so that <c>await handle</c> works. Flushes the batch.</summary>
    public Awaiter GetAwaiter() => new(this);

    /// <inheritdoc/>
    public bool Equals(JobHandle other) => Node == other.Node && Version == other.Version;

    /// <inheritdoc/>
    public override bool Equals(object? obj) => obj is JobHandle other && Equals(other);

    /// <inheritdoc/>
    public override int GetHashCode() => (Node is null ? 0 : RuntimeHelpers.GetHashCode(Node)) ^ Version;

    /// <summary>True when both handles refer to the same scheduled job.</summary>
    public static bool operator ==(JobHandle left, JobHandle right) => left.Equals(right);

    /// <summary>True when the handles refer to different scheduled jobs.</summary>
    public static bool operator !=(JobHandle left, JobHandle right) => !left.Equals(right);

    /// <summary>
    /// Awaits a job. The continuation runs on the thread that finishes the job, or on a worker when that thread is one
    /// outside the workers waiting in <see cref="Complete"/> (which runs jobs only). It captures no context: in frame-loop
    /// code, <c>await loop.Yield()</c> after it to continue on the loop.
    /// </summary>
    [StackTraceHidden]
    public readonly struct Awaiter : ICriticalNotifyCompletion, ISpindleAwaiter
    {
        private readonly JobHandle _handle;

        internal Awaiter(JobHandle handle) => _handle = handle;

        /// <summary>True when the job has finished. Flushes the batch.</summary>
        public bool IsCompleted => _handle.IsCompleted;

        /// <summary>Ends the await: rethrows the job's exception, or a failed dependency's. Blocks (helping) if the job is still pending.</summary>
        /// <exception cref="InvalidOperationException">It would block inside a job's Execute on a handle that can finish only after that job (see <see cref="Complete"/>).</exception>
        public void GetResult() => _handle.Complete();

        /// <summary>Schedules the continuation, flowing the <see cref="ExecutionContext"/>.</summary>
        /// <exception cref="ArgumentNullException"><paramref name="continuation"/> is null.</exception>
        public void OnCompleted(Action continuation)
        {
            if (continuation is null)
            {
                ThrowHelper.ThrowArgumentNull(nameof(continuation));
            }
            ExecutionContext? ec = ExecutionContext.Capture();
            if (ec is null)
            {
                UnsafeOnCompleted(continuation);
                return;
            }
            Register(ContextContinuation.s_run, new ContextContinuation(ActionContinuation.s_invoke, continuation, ec));
        }

        /// <summary>Schedules the continuation without flowing the <see cref="ExecutionContext"/>.</summary>
        /// <exception cref="ArgumentNullException"><paramref name="continuation"/> is null.</exception>
        public void UnsafeOnCompleted(Action continuation)
        {
            if (continuation is null)
            {
                ThrowHelper.ThrowArgumentNull(nameof(continuation));
            }
            Register(ActionContinuation.s_invoke, continuation);
        }

        void ISpindleAwaiter.OnCompletedForBox(StateMachineBoxBase box) => Register(DirectWaiter.s_moveNext, box);

        private void Register(Action<object?> continuation, object state)
        {
            JobBatch.Flush();
            if (_handle.Node is not { } node || !node.TryAddWaiter(_handle.Version, continuation, state))
            {
                Continuations.Invoke(continuation, state);
            }
        }
    }
}

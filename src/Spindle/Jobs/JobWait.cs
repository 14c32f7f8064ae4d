using System;
using System.Diagnostics;
using System.Runtime.ExceptionServices;
using System.Threading;
using System.Threading.Tasks.Sources;

namespace SpindleLib;

/// <summary>
/// The pooled source behind <see cref="JobHandle.AsSpindleTask"/> for a job that has not finished: one waiter on the
/// job's waiter list, and a completion core that a combinator can let go of (a WhenAny it lost, a WithTimeout that timed
/// out), so that a wait nobody will read reports nothing and goes back to its pool when the job finishes, and the next
/// <c>AsSpindleTask()</c> on the same job reuses it meanwhile (see the remarks, "Reviving").
/// </summary>
/// <remarks>
/// <para><b>The outcome is the job's.</b> The core completes with success when the job finishes (its waiter runs on the
/// finishing thread); the job's fault is not copied into it. A read consumes the core's use and then reads the fault from
/// the job's node (<see cref="JobNode.GetFault"/>: a failed node is never recycled and keeps its exception holder, and a
/// stale version means the job succeeded), which marks it observed. So each read throws the fault, as
/// <c>await handle</c> does, and a wait nobody reads observes nothing: the holder reports the fault once, when it is
/// collected, if nothing else observed it, as for a job nobody awaits.</para>
/// <para><b>Letting go.</b> The waiter on the job's list cannot be taken off it (the list is only pushed to, and taken
/// whole when the job finishes: see <see cref="JobNode"/>'s remarks), so a use a combinator let go of (the core's
/// Abandoned state) stays valid until the job's finish runs its waiter, <see cref="OnJobFinished"/>, which ends the use
/// unread and recycles the object there.</para>
/// <para>Invariant: exactly one of {the reader of a use, the job's finish of a use that was let go of} returns the object
/// to its pool, and never while the use's waiter edge may still run. The core decides it: the finish's claim
/// (<see cref="SourceCore{TResult}.TryBeginCompletion"/>) takes the use either from Abandoned (nobody will read it: the
/// finish ends it consumed, in the same publishing store, and recycles) or from Pending or Waiting (it publishes, and the
/// reader, whose consume needs the published use, recycles after it). The finish runs after the job took its waiter list
/// and returned the edge, so a recycled object is on no list. An edge whose push was revoked (it raced the job's finish
/// and may sit in a later job's list, see <see cref="JobNode"/>'s remarks on pushing) is never run and never walked
/// (its version is not that list's): the object went back to its pool at once, since no finish will ever run for it.</para>
/// <para><b>Reviving.</b> A loop that polls a pending job with a new <c>AsSpindleTask()</c> every turn, each let go of
/// by a timeout, would leave one wait per turn on the list until the job finishes. So <see cref="TryStart"/> first looks
/// for a wait of the same job (node and version) that was let go of and is still unclaimed, and gives it a new use
/// instead of pushing a new one: its edge is still on the list, and the job's finish completes whichever use is current
/// then. The waits pushed for a job are chained from the node (<see cref="JobNode.LatestWait"/>, then
/// <see cref="_previous"/>), and the look walks at most <see cref="MaxRevivalWalk"/> of them, so a job polled by up to that
/// many loops at once holds about one wait per loop, not one per turn. The walk takes no reference: a wait found is
/// trusted only through its core's word. It reads the word (Abandoned, token t), then the wait's job and version (which
/// belong to use t while the word is unchanged: they are written before the wait is pushed and cleared only after the
/// word has moved on), and revives with one CAS from that same word to Pending with token t + 1
/// (<see cref="SourceCore{TResult}.TryReviveAbandoned"/>). That CAS and the finish's claim from Abandoned decide against
/// each other, and two revivers likewise: one wins; the others rent a new wait (and a finish that won ends the use
/// unread and recycles, as above). A revived use is an ordinary pending use again: its finish claims it from Pending or
/// Waiting and its reader recycles, or from Abandoned if it is let go of again. The let-go use's token is stale from the
/// revival on, so a copy of its task is the await-once error, never a read of the new use. Reviving never returns the
/// object to its pool, so the invariant above is unchanged. A wait is chained only once its push succeeded (a revoked
/// push recycles at once and is never chained), and the waits of a pending job are never recycled (they complete only
/// at its finish), so the chain of a pending job is intact. The job's finish drops the node's link, whatever the outcome
/// (a failed node is never recycled, and would otherwise hold the wait after its read, and whatever the pooled wait is
/// rented for next), and a caller whose link lands after that takes it back (<see cref="Chain"/>); each wait's own link
/// is dropped when the finish runs its waiter (a wait may be kept unread after that). Until then, a stale
/// link may reach a recycled wait, or one of another job, which the job-and-version check rejects, and the walk stops
/// there; it never walks more than <see cref="MaxRevivalWalk"/> waits, so a stale link can make no cycle it follows for
/// ever.</para>
/// </remarks>
[StackTraceHidden]
internal sealed class JobWait : ISpindleSource, IDetachableSource, IQuietSource, IPoolNode<JobWait>
{
    internal static readonly Action<object?> s_onJobFinished = static o => ((JobWait)o!).OnJobFinished();

    private SourceCore<VoidResult> _core;
    private JobNode? _node;
    private int _jobVersion;
    private JobWait? _previous; // the wait chained before this one on the same job while it is pending (see the remarks, "Reviving")
    private JobWait? _poolNext;

    /// <summary>How many of a job's chained waits <see cref="TryStart"/> looks at for one to revive (see the remarks).</summary>
    private const int MaxRevivalWalk = 4;

    ref JobWait? IPoolNode<JobWait>.Next => ref _poolNext;

#if DEBUG
    /// <summary>Tests only (a Debug build): how many JobWaits are out of their pool (rented and not yet returned).</summary>
    internal static int InUseForTests;

    /// <summary>Tests only (a Debug build): how many times a JobWait was returned while already back in its pool.</summary>
    internal static int DoubleReturnsForTests;

    private bool _pooledForTests = true;

    /// <summary>
    /// Tests only (a Debug build): run by <c>AsSpindleTask()</c> when it has found a let-go wait of its job and is about
    /// to revive it (after its look at the word, before the CAS), standing in for a preemption there, so that a test can
    /// let the job finish, or another caller revive the same wait, at that moment.
    /// </summary>
    internal static Action<JobWait>? TestHookBeforeRevive;
#endif

    /// <summary>
    /// Starts a wait on the job of <paramref name="node"/>, version <paramref name="version"/>: true with the wait's task,
    /// false if the job has finished (then nothing was kept, and the caller takes the job's outcome itself).
    /// </summary>
    public static bool TryStart(JobNode node, int version, out SpindleTask task)
    {
        if (TryRevive(node, version, out task))
        {
            return true;
        }
        JobWait wait = ObjectPool<JobWait>.TryRent() ?? new JobWait();
#if DEBUG
        wait._pooledForTests = false;
        Interlocked.Increment(ref InUseForTests);
#endif
        wait._node = node;
        wait._jobVersion = version;
        short token = wait._core.Version; // the use's token cannot move on before the finish has published it
        if (node.TryAddWaiter(version, s_onJobFinished, wait))
        {
            Chain(node, version, wait);
            task = new SpindleTask(wait, token);
            return true;
        }
        // Finished meanwhile: the token never left, and no finish will run this waiter.
        wait.Recycle();
        task = default;
        return false;
    }

    /// <summary>
    /// Gives a new use to a wait of this job (<paramref name="node"/>, <paramref name="version"/>) that a combinator let go
    /// of and no finish has claimed: true with the new use's task. See the remarks, "Reviving".
    /// </summary>
    private static bool TryRevive(JobNode node, int version, out SpindleTask task)
    {
        JobWait? wait = Volatile.Read(ref node.LatestWait);
        for (int i = 0; i < MaxRevivalWalk && wait is not null; i++)
        {
            // The word first, then what its use is for: both hold together only while the word is unchanged, which the
            // revival's CAS checks.
            bool abandoned = wait._core.IsAbandoned(out short letGo);
            if (!wait.IsFor(node, version))
            {
                break; // another job's, or recycled: the chain of this job ends here
            }
#if DEBUG
            if (abandoned)
            {
                TestHookBeforeRevive?.Invoke(wait);
            }
#endif
            if (abandoned && wait._core.TryReviveAbandoned(letGo, out short next))
            {
                task = new SpindleTask(wait, next);
                return true;
            }
            wait = Volatile.Read(ref wait._previous);
        }
        task = default;
        return false;
    }

    private bool IsFor(JobNode node, int version) => Volatile.Read(ref _node) == node && Volatile.Read(ref _jobVersion) == version;

    /// <summary>
    /// Makes <paramref name="wait"/>, just pushed onto the job's list, the head of the job's chain. A hint: a link lost to
    /// a race (the job finished and the node moved on, or another head won) costs only a wait that cannot be revived.
    /// </summary>
    private static void Chain(JobNode node, int version, JobWait wait)
    {
        JobWait? head = Volatile.Read(ref node.LatestWait);
        while (true)
        {
            // Only a wait of this same job is linked: one of an earlier use of the node (or this very object, in an
            // earlier life) would only end the walk.
            wait._previous = head is not null && head != wait && head.IsFor(node, version) ? head : null;
            JobWait? seen = Interlocked.CompareExchange(ref node.LatestWait, wait, head);
            if (seen == head)
            {
                // The job's finish drops the link (JobNode.FinishCore), but only one it can see: a link made after its
                // look is taken back here. The CAS above is a full fence, paired with the finish's state store and
                // Exchange before its look, so one of the two always sees the other.
                if (node.IsCompleted(version))
                {
                    Interlocked.CompareExchange(ref node.LatestWait, null, wait);
                    // And this wait's own link, which the finish dropped when it ran the waiter but a retry of the CAS
                    // above may have written again since (a link to another caller's wait, chained after the finish).
                    // This caller still owns the wait: its task is not handed out yet, so nothing can read or recycle it.
                    wait._previous = null;
                }
                return;
            }
            head = seen;
        }
    }

    /// <summary>The job finished (or, for an edge a later job delivered, the job it was meant for succeeded): see the remarks.</summary>
    private void OnJobFinished()
    {
        // The link serves only while the job is pending: a wait kept unread after this (which is legal) must not hold the
        // wait chained before it, read and pooled since, and whatever that one is rented for next. Before the claim: once
        // published, the use may be read and the object recycled at once.
        _previous = null;
        // Nothing else completes the core, and the use cannot be consumed before it completes: the claim always wins.
        bool claimed = _core.TryBeginCompletion(out object? waiter);
        Debug.Assert(claimed, "only the job's finish completes a JobWait");
        if (SourceCore<VoidResult>.IsAbandonedWaiter(waiter))
        {
            // Let go of by a combinator: nobody will read this use. Ended consumed in the publishing store (a copy of the
            // task the caller kept is the await-once error from here on), and recycled here, by the invariant's one owner.
            _core.EndAbandonedUnread();
            Recycle();
            return;
        }
        // The reader recycles, after the publication: this thread touches nothing once the waiter may have run.
        _core.EndCompletion(waiter, null);
    }

    /// <summary>
    /// A combinator that no longer needs this wait leaves it: its waiter will never run, and the use is recycled when the
    /// job finishes (see the remarks). A wait that has completed, or is completing, is left to the waiter, which reads it
    /// (a read consumes it).
    /// </summary>
    DetachOutcome IDetachableSource.TryDetach(DirectWaiter waiter)
    {
        DetachOutcome outcome = _core.TryReplaceWaiter(waiter, null, null);
        return outcome == DetachOutcome.Completed ? DetachOutcome.NotWaiting : outcome;
    }

    /// <summary>A combinator settled at the call lets go of a wait it never registered on: as <see cref="IDetachableSource.TryDetach"/>.</summary>
    bool IDetachableSource.TryAbandon(short token) => _core.TryAbandon(token);

    public SpindleTaskStatus GetStatus(short token)
    {
        _core.ValidateToken(token);
        if (!_core.IsCompleted)
        {
            return SpindleTaskStatus.Pending;
        }
        // The fault is the job's (see the remarks), read after the use was seen completed, so the job has finished. The
        // token is checked again afterwards: a read on another thread (misuse) may have consumed and recycled the use
        // meanwhile, and the fields read may then be another use's (or cleared).
        JobNode? node = _node;
        int version = _jobVersion;
        ExceptionHolder? fault = node?.PeekFault(version);
        _core.ValidateToken(token);
        return SourceCore<VoidResult>.StatusOf(fault?.Info);
    }

    ValueTaskSourceStatus IValueTaskSource.GetStatus(short token) => (ValueTaskSourceStatus)GetStatus(token);

    /// <summary>Reads the outcome once (blocking, helping, while the job is pending) and recycles the wait.</summary>
    public void GetResult(short token)
    {
        if (ReadQuietly(token) is { } error)
        {
            throw LazyCancellation.ToThrow(error);
        }
    }

    /// <summary>As <see cref="GetResult"/>, returning the job's failure instead of throwing it (<see cref="IQuietSource"/>).</summary>
    public ExceptionDispatchInfo? ReadQuietly(short token)
    {
        // A blocking read inside a job this waits for throws here (BlockingWait: its edge's state is this object), and
        // leaves the use as it was.
        _core.Consume(token, this, out _);
        JobNode node = _node!;
        int version = _jobVersion;
        Recycle();
        // An observation, as Complete() and await are: the job's holder then reports nothing.
        return node.GetFault(version)?.Info;
    }

    private void Recycle()
    {
        _node = null;
        _jobVersion = 0;
        _previous = null;
        _core.ClearForPool();
#if DEBUG
        if (_pooledForTests)
        {
            Interlocked.Increment(ref DoubleReturnsForTests);
            return;
        }
        _pooledForTests = true;
        Interlocked.Decrement(ref InUseForTests);
#endif
        ObjectPool<JobWait>.Return(this);
    }

    public void OnCompleted(Action<object?> continuation, object? state, short token) => _core.OnCompleted(continuation, state, token);

    public void OnCompleted(Action<object?> continuation, object? state, short token, ValueTaskSourceOnCompletedFlags flags)
        => _core.OnCompleted(continuation, state, token, flags);
}

using System;
using System.Diagnostics;
using System.Runtime.CompilerServices;
using System.Runtime.ExceptionServices;
using System.Runtime.InteropServices;
using System.Threading;
using System.Threading.Tasks;
using System.Threading.Tasks.Sources;

namespace SpindleLib;

/// <summary>What <see cref="SourceCore{TResult}.TryReplaceWaiter"/> (and so a detach) found.</summary>
internal enum DetachOutcome
{
    /// <summary>The waiter is not registered on the current use (not yet, or no longer): nothing changed.</summary>
    NotWaiting,

    /// <summary>Taken back: the waiter will never run.</summary>
    Detached,

    /// <summary>The operation has completed or is completing: the waiter runs, or ran. Nothing changed.</summary>
    Completed,
}

/// <summary>What a new wait on a signal finds (<see cref="SourceCore{TResult}.LookForWait"/>).</summary>
internal enum SignalLook
{
    /// <summary>Idle: the wait can be armed.</summary>
    Idle,

    /// <summary>The signal was set: the wait took it and completes at once.</summary>
    Taken,

    /// <summary>Another wait is still pending.</summary>
    WaitPending,
}

#if DEBUG
/// <summary>Tests only (a Debug build): points inside <see cref="SourceCore{TResult}"/> where a test forces a race.</summary>
internal static class SourceCoreTestHooks
{
    /// <summary>
    /// Runs on the resetting thread once <see cref="SourceCore{TResult}.Reset"/> has read the word and found the use may
    /// be reset, before it changes anything: standing in for another thread that awaits or completes the old use then.
    /// </summary>
    [ThreadStatic]
    internal static Action? ResetSawState;

    /// <summary>
    /// Runs on the completing thread in <see cref="SourceCore{TResult}.EndCompletion"/>, between the claim (Completing)
    /// and the publication: standing in for a completer preempted there while another thread meets the state.
    /// </summary>
    [ThreadStatic]
    internal static Action? CompletionClaimed;

    /// <summary>
    /// Runs on the reading thread in <see cref="SourceCore{TResult}.ReadQuietly"/> (so a promise's GetResult), once the
    /// read has checked its token and seen the use completed, before it reads the outcome: standing in for the owner
    /// resetting the promise (another thread, or this one) at that instant.
    /// </summary>
    [ThreadStatic]
    internal static Action? ReadSawCompleted;

    /// <summary>
    /// Runs on the resetting thread in <see cref="SourceCore{TResult}.Reset"/> of a completed use, while it clears the
    /// old use's outcome: standing in for a resetter preempted there while other threads read the old use or complete
    /// the next one.
    /// </summary>
    [ThreadStatic]
    internal static Action? ResetClearing;

    /// <summary>
    /// Runs on the completing thread in <see cref="SourceCore{TResult}.EndCompletion"/> of an abandoned use, after the
    /// publication and before the fault report's claim (<see cref="SourceCore{TResult}.TryClaimFaultReport"/>): standing in
    /// for a completer preempted there while the owner resets the use it has just published.
    /// </summary>
    [ThreadStatic]
    internal static Action? AbandonedPublished;
}
#endif

/// <summary>Placeholder result for sources that produce no value.</summary>
internal readonly struct VoidResult
{
}

/// <summary>
/// The completion core embedded (as a mutable field) in every Spindle source: one result, one continuation,
/// one version token. It plays the role <c>ManualResetValueTaskSourceCore</c> plays in the BCL, with two
/// differences that Spindle's semantics need: exactly-once completion is decided by a CAS, and a second
/// continuation is rejected without touching the first.
/// </summary>
/// <remarks>
/// <para><b>One word decides everything.</b> <see cref="_word"/> holds the version token (its low 16 bits), the state
/// (three bits) and the "run continuations asynchronously" flag (the sign bit). Every transition is a CAS or a release
/// store of that one int, and every reader decides from that int alone; the other fields are written only by the thread
/// that holds one of the two transient states. An int, not the waiter's object reference: a CAS on an object field goes
/// through a runtime helper and a GC write barrier, which measured 8.4 ns against 6.0 ns for an int CAS on this
/// project's machine, on every registration, completion and detach.</para>
/// <para>The states: Pending (no waiter); Registering (a registrant, or a waiter leaving, holds the waiter fields);
/// Waiting (<see cref="_continuation"/> is the waiter: a <see cref="DirectWaiter"/>, which is its own continuation, or
/// an <c>Action&lt;object?&gt;</c> whose state is in <see cref="_stateOrError"/>); Abandoned (the waiter left before
/// completion, see <see cref="TryReplaceWaiter"/>); Completing (the completer holds the fields); Completed. A
/// <see cref="Signal"/> adds Signaled, its idle-and-set state, which every reader takes as completed (the two are tested
/// together as "at least Completed"); see the Signal section below.</para>
/// <para><b>One slot for a waiter's state and the failure.</b> <see cref="_stateOrError"/> holds a delegate waiter's
/// state while the operation is pending, and the failure (an <see cref="ExceptionDispatchInfo"/>, or null for success)
/// once it has completed: every source is a field smaller (8 bytes per waiting async method, per promise, per timer).
/// The completer owns the slot between its CAS and its publication: it reads the waiter and its state, then writes the
/// outcome. Readers look at the slot only after seeing Completed.</para>
/// <para><b>Completion</b> is one CAS to Completing: that CAS picks the single completer, which then reads the waiter,
/// writes the result and publishes with a release store of Completed. A success with nothing to read or write (no
/// waiter, or an abandoned one, and no value) goes straight to Completed in its one CAS. The completer touches nothing
/// in the core after publishing, so a consumer that sees Completed may recycle a pooled source at once.</para>
/// <para><b>Registration</b> is one CAS from Pending to Registering; the registrant writes the waiter (and its state),
/// then release-stores Waiting. A second waiter finds the word past Pending and throws without touching the first one's
/// fields. A registrant that finds Completed runs its continuation itself; one that finds a transient state waits.</para>
/// <para><b>Leaving.</b> A direct waiter can be taken back before completion (<see cref="TryReplaceWaiter"/>: a combinator
/// whose race is decided detaches from its other inputs): a CAS from Waiting to Registering decides against the
/// completer; under that mark the leaver checks that the waiter is its own, and stores a replacement (a forgotten box
/// observes itself) or Abandoned. An abandoned use counts as awaited while it is pending (a new await is the
/// await-once error; but a promise's may be awaited again, see <see cref="AwaitAfterLetGoBit"/>), may be reset, and
/// completes with nobody to run: a fault is reported to the unobserved-exception event, as any fault nobody reads. A source that is never reset and takes one awaiter at a time (a task scope's wait)
/// leaves for Pending instead (<see cref="TryWithdrawWaiter"/>): the next await registers as the first did, and the
/// outcome stays for it. Once it has completed it is an ordinary completed use (a promise's result can be
/// read, as a completed promise's can).</para>
/// <para><b>Consumption</b> is a CAS from version v to v + 1 (still Completed, until the owner clears the core for its
/// pool), so of two threads racing to read a pooled result exactly one succeeds. The two transient states are held for a few stores; a thread that meets one
/// spins (with <see cref="SpinWait"/>, which yields if the holder was preempted) until it clears. This design descends
/// from the BCL's ManualResetValueTaskSourceCore (a sentinel settles the register/complete race) and UniTask's core
/// (one atomic decides completion); the state word is the classic packed state-and-version word that makes each step
/// one CAS and rules out ABA (the version is part of every comparison).</para>
/// </remarks>
[StructLayout(LayoutKind.Auto)]
[StackTraceHidden]
internal struct SourceCore<TResult>
{
    /// <summary>Handed from <see cref="TryBeginCompletion"/> to <see cref="EndCompletion"/> for an abandoned use.</summary>
    private static readonly object s_abandoned = new Sentinel("abandoned");

    private const int TokenMask = 0xFFFF;
    private const int StateMask = 7 << 16;
    private const int Pending = 0;
    private const int Registering = 1 << 16;
    private const int Waiting = 2 << 16;
    private const int Abandoned = 3 << 16;
    private const int Completing = 4 << 16;
    private const int Completed = 5 << 16;
    // A Signal's idle state while it is set (see the Signal section below); a completed state to every reader, like
    // Completed, so the two are tested together as "at least Completed". No other source uses it.
    private const int Signaled = 6 << 16;
    private const int DispatchBit = int.MinValue;
    // Signal only: set from the CAS that arms a cancelable wait until its WaitAsync has stored the wait's cancellation
    // (Signal.WaitAsync, EndArming), and from the CAS of a wait that arms nothing (it takes a set, or its zero timeout
    // passes) but ends the state a previous, unread wait still holds, until it has ended it. Outside the state bits, so
    // every state test ignores it; a new wait that finds it is a second wait racing that WaitAsync, and is rejected
    // before it touches the cancellation state. Carried by every state change (With), and by the one version step that
    // can meet it on the idle signal: a combinator giving back the set of the wait whose version the mark is on
    // (TryGiveBackSet, under a zero-timeout wait's TryMarkIdle), so that only its own EndArming clears it.
    private const int ArmingBit = 1 << 19;

    // Async methods' boxes only: the use was forgotten while pending (SpindleTask.Forget, or a combinator letting go of it,
    // see TryReplaceWaiter), and the box's own observer reads it; nobody else may. Set in the store that publishes the
    // observer's registration (TryRegisterForgotten) or its replacement of a waiter (TryReplaceWaiter), under the state's
    // own discipline, so no other registrant can slip in between a mark and a registration; carried by every state change (With);
    // taken by the observer's read, in the CAS that consumes the use (TryConsumeForgotten: taken and then read in two
    // steps, a misused read between them consumed the use); dropped by every version step (NextVersion). Invariant:
    // while it is set, the current use is the forgotten one and only its observer may consume it: a Consume that finds
    // it is the await-once error. So a misused read of a forgotten task throws instead of racing the observer for the
    // use, and the observer needs no token of its own (the box stays a field smaller).
    private const int ForgottenBit = 1 << 20;

    // A completed use's fault was reported to Spindle.UnobservedException (TryClaimFaultReport). Set only on a Completed
    // word, by the report that claims it: a Forget() of a source that a read does not consume (a promise), or the report
    // of an abandoned use's fault (EndCompletion); in practice only a promise's core ever has it, since only a promise's
    // abandoned use can fault. Carried by every state change (With) and dropped by every version step (NextVersion, so a
    // Reset), it keeps one completion's fault from being reported twice, and the next use's is reported again.
    private const int ReportedBit = 1 << 21;

    // Signal only: who has the set a completed wait took, so that a combinator gives a set back only if nobody has it
    // (TryGiveBackSet). A signal's wait may be read again, so a set that has reached a reader leaves no other trace: given
    // back as well, one set was counted twice and a later wait completed with nobody having set the signal. Written only
    // on a completed use (Completed, or Signaled with the wait's own version), carried by every state change (With),
    // dropped by every version step (NextVersion). Invariant: a set is given back only from a word with none of them (or,
    // for a read the giving caller made itself, with ReadBit alone), in the CAS that steps the version, so a read that
    // marks afterwards finds its token stale (the await-once error), and a read that marked first keeps the set.
    // HandedToWaiterBit: the set completed the wait while a waiter was registered (SetSignal, in its publishing store, at
    // no cost): the set is that waiter's, whose read then marks nothing. ReadBit: read once by a reader that found the
    // wait completed (one CAS, MarkSetRead). RereadBit: read again after that (one more CAS; later reads mark nothing).
    // A combinator that may give a set back registers on a wait with this same bit as its mark (OnCompletedAsReader),
    // so that in a Waiting word it means "the waiter reads as a reader": the set's publishing store flips the bit (XOR,
    // at no more cost than the OR it replaces), so such a wait completes with no reader bit, and the combinator's read marks
    // ReadBit as any first read does. Every other read marks too then: so a misused read of the wait while the combinator
    // holds it (the caller's, or an awaiter's elsewhere) is seen by the give-back, which requires the combinator's read
    // alone. A cancelled or timed-out wait may keep the mark into Completed: it took no set, so nothing gives one back.
    private const int HandedToWaiterBit = 1 << 22;
    private const int ReadingWaiterMark = HandedToWaiterBit;
    private const int ReadBit = 1 << 23;
    private const int RereadBit = 1 << 24;
    private const int SetReaderBits = HandedToWaiterBit | ReadBit | RereadBit;

    // Promises only: a use that a combinator let go of (Abandoned, still pending) may be awaited again, as a use nobody
    // awaited may, so that the same promise's task can be raced turn after turn (`WhenAny(next, stop.Task)` in a loop,
    // `reply.Task.WithTimeout(t)` until it answers), as a Task can. TryRegister takes such a use as Pending (the CAS from
    // Abandoned to Registering decides against a completer, as the one from Pending does), and TryAbandon finds it let go
    // already. Other sources release an abandoned use at once (ReleaseAbandoned) or never abandon one. Set once before the
    // source is published (AllowAwaitAfterLetGo) and kept by every version step, as DispatchBit is.
    private const int AwaitAfterLetGoBit = 1 << 25;

    // The completer claimed the use with no waiter registered (from Pending or Abandoned): nobody is about to be resumed by
    // this completion. Set only in the claiming CAS (TryBeginCompletionCore) and dropped in the publishing store
    // (EndCompletionWithOutcome), or by the version step of an abandoned use's unread end (EndAbandonedUnread), so a word
    // has it only while it is Completing, and only the owner's Reset reads it (ClaimForReset): such a completion is waited
    // out and then reset, since no awaiter's read can race the clearing; one that resumes an awaiter is refused. Invariant:
    // set ⇒ Completing, and the claim's waiter was null or the abandoned sentinel.
    private const int ClaimedWithoutWaiterBit = 1 << 26;

    private object? _continuation; // the waiter, while Waiting
    private object? _stateOrError; // see the remarks: a delegate waiter's state while pending, the failure once completed
    private TResult _result;
    // The version token (low 16 bits), the state (bits 16-18), the marks above (bits 19-26) and the dispatch flag (the
    // sign bit): see the remarks. The dispatch flag and AwaitAfterLetGoBit are set once before the source is published and
    // kept by every version step (NextVersion), so they cost no field and can be read at any time.
    private int _word;

    /// <summary>The token of the current use.</summary>
    public readonly short Version => (short)_word;

    /// <summary>True if completion queues the waiter to the workers instead of running it on the completing thread.</summary>
    public readonly bool DispatchesContinuations => _word < 0;

    /// <summary>
    /// Makes completion queue the waiter to the workers (the BCL's RunContinuationsAsynchronously). Call once, from the
    /// source's constructor, before the source is reachable by any other thread. Starts the workers if nothing has, so
    /// that workers which cannot start fail the constructor, not a completion (whose waiter would be lost).
    /// </summary>
    /// <exception cref="InvalidOperationException">The workers had not started and SPINDLE_WORKERS is invalid.</exception>
    public void RunContinuationsAsynchronously()
    {
        Scheduler.EnsureDefault();
        _word |= DispatchBit;
    }

    /// <summary>
    /// Promises only: a use a combinator let go of may be awaited again (see <see cref="AwaitAfterLetGoBit"/>). Call from
    /// the constructor, before the source is shared.
    /// </summary>
    public void AllowAwaitAfterLetGo() => _word |= AwaitAfterLetGoBit;

    /// <summary>A promise's use that a combinator let go of, still pending: it may be awaited again (<see cref="AwaitAfterLetGoBit"/>).</summary>
    private static bool IsLetGoPromiseUse(int word) => (word & (StateMask | AwaitAfterLetGoBit)) == (Abandoned | AwaitAfterLetGoBit);

    /// <summary>The word of the next use after <paramref name="word"/>: the token wraps, the flag stays, the state is Pending.</summary>
    internal static int NextVersion(int word) => (word & (DispatchBit | AwaitAfterLetGoBit)) | (unchecked(word + 1) & TokenMask);

    /// <summary>The token of the use after the one in <paramref name="word"/>.</summary>
    internal static short NextToken(int word) => (short)NextVersion(word);

    private static int With(int word, int state) => (word & ~StateMask) | state;

    /// <summary>True once the result has been published.</summary>
    public bool IsCompleted => (Volatile.Read(ref _word) & StateMask) >= Completed;

    /// <summary>True once a continuation is registered (or being registered, or left), or the operation has completed.</summary>
    public bool IsAwaitedOrCompleted => (Volatile.Read(ref _word) & StateMask) != Pending;

    /// <summary>
    /// The error of a reset while an await of the current use is pending. Only <see cref="Promise.Reset"/> and
    /// <see cref="Promise{T}.Reset"/> can meet it: Spindle's own sources reset a use nobody awaits.
    /// </summary>
    internal const string ResetWhileAwaitedMessage =
        "This promise cannot be reset while an await on its current use is pending: the awaiting code would never resume. " +
        "Complete the use first (SetResult, SetException, SetCanceled or a TrySet* method) and reset it once the awaiting code " +
        "has read it, or use a new promise.";

    /// <summary>
    /// The error of a reset that finds the word held (Registering): an await of the current use registering its
    /// continuation at that instant, or another reset of the promise on another thread, between its hold and its
    /// publication (<see cref="Reset"/>). The word cannot tell the two apart, so the message names both.
    /// </summary>
    internal const string ResetWhileHeldMessage =
        "This promise cannot be reset at this instant: another thread is either registering an await on its current use or " +
        "resetting the promise itself. A promise is reset by its owner only, from one thread, once the code awaiting the use " +
        "has read it; use a new promise where several threads would reset it.";

    /// <summary>
    /// The error of a reset that meets a completer of the current use between its claim and its publication: a Set* or
    /// TrySet* call racing the reset on another thread (<see cref="ClaimForReset"/>).
    /// </summary>
    internal const string ResetWhileCompletingMessage =
        "This promise cannot be reset while it is being completed: a SetResult, SetException, SetCanceled or TrySet* call on another " +
        "thread has claimed its current use and is resuming the code that awaits it at this instant, and a reset must not race a completion. " +
        "Reset once that call has returned and the code awaiting the use has read it, or use a new promise.";

    /// <summary>Starts a new use: clears the result, error and continuation, and advances the version.</summary>
    /// <remarks>
    /// An abandoned use (its waiter left, see <see cref="TryReplaceWaiter"/>) may be reset while it is pending. A pending or
    /// abandoned use may meet an await of it (or a completer) at the same instant, so it is claimed first
    /// (<see cref="ClaimForReset"/>). A completed use, found so at once or once the claim saw it complete, is reset with
    /// plain stores, as a seqlock's writer: nothing but its owner writes a completed word's fields, and the one mark another
    /// thread may CAS onto it (<see cref="ReportedBit"/>) is dropped by the version step anyway.
    /// </remarks>
    /// <exception cref="InvalidOperationException">A continuation is still waiting on the current use.</exception>
    public void Reset()
    {
        CancellationToken none = default;
        ResetClearingToken(ref none);
    }

    /// <summary>
    /// As <see cref="Reset"/>, for an owner that keeps the token of a lazy cancellation
    /// (<see cref="TrySetCanceledKeepingToken"/>): <paramref name="canceledBy"/> is
    /// cleared with the failure slot, under the same hold, so neither a read of the old use nor a completer of the next
    /// one meets the other's token.
    /// </summary>
    public void ResetClearingToken(ref CancellationToken canceledBy)
    {
        int w = Volatile.Read(ref _word);
        if ((w & StateMask) != Completed)
        {
            w = ClaimForReset(w); // the claimed word (now held as Registering), or a completed one
        }
        if ((w & StateMask) == Completed)
        {
            // A completed use may be read at this instant (a reset racing a read: misuse, but never silent corruption). The
            // version steps first, held by Registering, so a read whose token check came before this store and whose read
            // of the outcome comes after the clearing below finds its token stale when it checks again (ReadQuietly),
            // instead of taking the cleared slots for a success with a default result; and a completer or registrant of
            // the next use meets the hold and waits, so the clearing cannot wipe its writes. Two plain stores and no CAS:
            // nothing but the owner writes a completed word, bar the report mark, which the version step drops anyway.
            Volatile.Write(ref _word, With(NextVersion(w), Registering));
            WeakMemory.Fence(); // the clearing's stores after that one (a seqlock writer's order; nothing on x86/x64)
        }
        _stateOrError = null;
        canceledBy = default;
#if DEBUG
        SourceCoreTestHooks.ResetClearing?.Invoke();
#endif
        _result = default!;
        _continuation = null;
        Volatile.Write(ref _word, NextVersion(w));
    }

    /// <summary>
    /// <see cref="Reset"/> of a use that is not completed: claims the word by a CAS to Registering from the word the check
    /// passed on (as <see cref="TryArm"/> claims a signal's next use), so that the fields are cleared under the claim, and
    /// hands back that word (or, if the use completed meanwhile, the completed word, which needs no claim). An await of the
    /// old use registering at that instant either wins the CAS, and the reset is refused as for any pending await, or meets
    /// the claim, waits, and finds its token stale; a completer that meets it completes the next use, as the promise's
    /// remarks say a set racing a reset may. Before, a check and then a plain store of the next version wiped such a
    /// registration: its awaiting code was never run, and nothing threw (ResetRaceTests).
    /// </summary>
    /// <remarks>
    /// A completer between its claim and its publication (Completing) of a use nobody awaits (claimed from Pending or
    /// Abandoned, <see cref="ClaimedWithoutWaiterBit"/>: a late reply by token to an ask that timed out) is waited out, and
    /// the use then reset as any completed one: it resumes nobody, so no awaiter's read can race the clearing, and it runs
    /// no user code before it publishes. One that resumes an awaiter is a Set* racing the reset, which the promise's
    /// remarks forbid: it is refused with its own message, before anything is written, so the completer publishes its
    /// outcome and runs its awaiter as if the reset had not been called. Not waited for and then reset: the awaiter the
    /// completer is about to run would race the clearing of the fields, and a read between the clearing and the version
    /// step takes the cleared result as a success (a forced test read 0 for 42). Before, the reset threw the "await
    /// pending" error, which named an await that, for a use nobody awaited, did not exist.
    /// </remarks>
    /// <exception cref="InvalidOperationException">
    /// A continuation is waiting on the use, or registering, or the use is completing, or another reset holds it.
    /// </exception>
    [MethodImpl(MethodImplOptions.NoInlining)]
    private int ClaimForReset(int w)
    {
        SpinWait spin = default;
        while (true)
        {
            int state = w & StateMask;
            if (state == Completed)
            {
                return w;
            }
            if (state == Completing)
            {
                if ((w & ClaimedWithoutWaiterBit) == 0)
                {
                    ThrowHelper.ThrowInvalidOperation(ResetWhileCompletingMessage);
                }
                // Claimed by a completer that resumes nobody: it publishes in a few stores and runs no user code in
                // between, so it is waited out, and the completed use is then reset as any other.
                spin.SpinOnce();
                w = Volatile.Read(ref _word);
                continue;
            }
            if (state == Registering)
            {
                ThrowHelper.ThrowInvalidOperation(ResetWhileHeldMessage);
            }
            if (state != Pending && state != Abandoned)
            {
                ThrowHelper.ThrowInvalidOperation(ResetWhileAwaitedMessage);
            }
#if DEBUG
            SourceCoreTestHooks.ResetSawState?.Invoke();
#endif
            int prev = Interlocked.CompareExchange(ref _word, With(w, Registering), w);
            if (prev == w)
            {
                return w;
            }
            w = prev; // an await registered, or a completer claimed: look again
        }
    }

    /// <summary>
    /// Clears every reference the core holds and makes it Pending again, keeping the version (used before pooling: after
    /// <see cref="Consume"/> advanced it, or by an owner whose token never left it).
    /// </summary>
    /// <remarks>
    /// A pooled core carries its version token and the flags set once by its constructor, nothing else (<see cref="PooledWord"/>):
    /// every mark belongs to one use (a forgotten use's, a reported fault's, a signal's reader and arming marks) and is
    /// dropped here, as a version step drops it, so that none can reach the object's next user (a <see cref="ReportedBit"/>
    /// kept would have hidden the next use's fault; a <see cref="ForgottenBit"/>, made its read the await-once error).
    /// Every caller today comes after a version step that dropped them already (a consumption, or the end of an abandoned
    /// use), or with a use that never left its owner; the Debug assertion holds the suite to that: a source recycled
    /// while its use is still in flight (a waiter registered or registering, a completer between its claim and its
    /// publication) or still marked is a defect of its owner. One AND of the word, as the state-only clear it replaces.
    /// </remarks>
    public void ClearForPool()
    {
        _stateOrError = null;
        _result = default!;
        _continuation = null;
        int w = _word;
        Debug.Assert(
            ((w & StateMask) == Completed || (w & StateMask) == Pending) && PooledWord(w) == (w & ~StateMask),
            "a source is recycled only once its use is over (Completed, or Pending and never handed out), and a version step dropped its marks");
        _word = PooledWord(w);
    }

    /// <summary>
    /// The word a pooled core keeps of <paramref name="word"/> (<see cref="ClearForPool"/>): its version token and the flags
    /// set before the source was published (<see cref="DispatchBit"/>, <see cref="AwaitAfterLetGoBit"/>), in the Pending
    /// state; every mark of the use is dropped.
    /// </summary>
    internal static int PooledWord(int word) => word & (TokenMask | DispatchBit | AwaitAfterLetGoBit);

    public readonly void ValidateToken(short token)
    {
        if (token != (short)_word)
        {
            ThrowHelper.ThrowStaleToken();
        }
    }

    public SpindleTaskStatus GetStatus(short token)
    {
        ValidateToken(token);
        return StatusUnchecked;
    }

    public SpindleTaskStatus StatusUnchecked
    {
        get
        {
            if (!IsCompleted)
            {
                return SpindleTaskStatus.Pending;
            }
            return StatusOfOutcome(_stateOrError);
        }
    }

    /// <summary>The status of a completed use whose slot holds <paramref name="outcome"/> (a failure, a lazy cancellation, or null).</summary>
    private static SpindleTaskStatus StatusOfOutcome(object? outcome)
        => outcome is null ? SpindleTaskStatus.Succeeded
            : outcome is ExceptionDispatchInfo failure ? StatusOf(failure)
            : SpindleTaskStatus.Canceled; // LazyCancellation.Marker

    /// <summary>The status of a completed operation whose failure is <paramref name="failure"/> (null: it succeeded).</summary>
    internal static SpindleTaskStatus StatusOf(ExceptionDispatchInfo? failure)
        => failure is null ? SpindleTaskStatus.Succeeded
            : failure.SourceException is OperationCanceledException ? SpindleTaskStatus.Canceled
            : SpindleTaskStatus.Faulted;

    /// <summary>
    /// The status of use <paramref name="token"/>, read by a thread that may race the owner's reading and reuse of the
    /// source (the task tracker's snapshot): never throws, and is at worst stale. False when that use is over (its
    /// result was read, so the version moved on): whatever the core holds then belongs to no use, or to a later one, and
    /// must not be reported as this one's. The failure slot holds a waiter's state outside the completed states, so it
    /// is read with a type test, and the word is read again: a change means the use was consumed (and maybe the source
    /// reused) between the two reads, and the slot may belong to the next use.
    /// </summary>
    public bool TryGetStatusRacy(short token, out SpindleTaskStatus status)
    {
        status = SpindleTaskStatus.Pending;
        int w = Volatile.Read(ref _word);
        if ((short)w != token)
        {
            return false;
        }
        if ((w & StateMask) < Completed)
        {
            return true;
        }
        object? slot = Volatile.Read(ref _stateOrError);
        if (Volatile.Read(ref _word) != w)
        {
            return false; // consumed meanwhile: the use is over, and the slot may be the next use's
        }
        status = slot is null || slot is ExceptionDispatchInfo || slot == LazyCancellation.Marker ? StatusOfOutcome(slot) : SpindleTaskStatus.Succeeded;
        return true;
    }

    /// <summary>
    /// Reads the outcome without consuming it. Throws the stored exception on fault or cancellation. If the operation
    /// is still pending, blocks until it completes (a synchronous <c>GetAwaiter().GetResult()</c>), helping run work.
    /// </summary>
    public TResult GetResult(short token, ISpindleSource owner)
    {
        TResult result = ReadQuietly(token, owner, out ExceptionDispatchInfo? error);
        if (error is not null)
        {
            ThrowFailure(error, owner, token);
        }
        return result;
    }

    /// <summary>
    /// Throws the failure of use <paramref name="token"/> to its reader; an owner a read does not consume (a promise, a
    /// scope's wait) names itself first, for a combinator reading it through a ValueTask (<see cref="ValueTaskOrigin"/>).
    /// </summary>
    [MethodImpl(MethodImplOptions.NoInlining)]
    private static void ThrowFailure(ExceptionDispatchInfo error, ISpindleSource owner, short token)
    {
        if (owner is IRereadableSource rereadable)
        {
            ValueTaskOrigin.Note(rereadable, token);
        }
        throw LazyCancellation.ToThrow(error);
    }

    /// <summary>As <see cref="GetResult"/>, but the failure goes to <paramref name="error"/> instead of being thrown (<see cref="IQuietSource"/>).</summary>
    /// <remarks>
    /// A reader as a seqlock's: it reads the outcome, then checks its token again. A reset racing the read (misuse: the
    /// promise's remarks say such a read "may read either use") may clear the outcome between the first check and the read
    /// (<see cref="Reset"/> steps the version before it clears); the second check then finds the token stale, and the read
    /// is the await-once error, never the cleared slots taken for a success with a default result, which is neither use's
    /// outcome. The same check covers a read woken from a blocking wait after its owner has reset the source. One load and
    /// a compare on x86/x64 (<see cref="WeakMemory.Fence"/>).
    /// </remarks>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public TResult ReadQuietly(short token, ISpindleSource owner, out ExceptionDispatchInfo? error)
    {
        ValidateToken(token);
        if (!IsCompleted)
        {
            BlockingWait.Wait(owner, token);
        }
#if DEBUG
        SourceCoreTestHooks.ReadSawCompleted?.Invoke();
#endif
        error = ErrorOnceCompleted(owner);
        TResult result = _result;
        WeakMemory.Fence(); // the outcome's loads before the check's (a seqlock reader's order; nothing on x86/x64)
        if (token != (short)Volatile.Read(ref _word)) // a volatile read: never merged with the check above
        {
            ThrowHelper.ThrowStaleToken();
        }
        return result;
    }

    /// <summary>
    /// Reads the outcome and consumes this use in one step: the CAS on the word guarantees that of two threads racing
    /// to read the same pooled result, exactly one succeeds and the other gets the await-once error.
    /// The caller must then clear the core (<see cref="ClearForPool"/>) and return its object to the pool.
    /// </summary>
    public TResult Consume(short token, ISpindleSource owner, out ExceptionDispatchInfo? error)
    {
        int w = Volatile.Read(ref _word);
        if (token != (short)w || (w & ForgottenBit) != 0)
        {
            ThrowHelper.ThrowStaleToken(); // or the use was forgotten: its observer reads it
        }
        if ((w & StateMask) != Completed)
        {
            BlockingWait.Wait(owner, token);
            w = Volatile.Read(ref _word);
            if ((w & ForgottenBit) != 0)
            {
                // Forgotten (and completed) while this read was registering: the word tested above is stale, and the
                // use is its observer's. Tested here, off the fast path, on the word the CAS below consumes.
                ThrowHelper.ThrowStaleToken();
            }
        }
        error = ErrorOnceCompleted(owner);
        TResult result = _result;
        // Still Completed afterwards (until ClearForPool): an owner may look at IsCompleted after its consumer has read.
        if ((short)w != token || Interlocked.CompareExchange(ref _word, With(NextVersion(w), Completed), w) != w)
        {
            ThrowHelper.ThrowStaleToken();
        }
        return result;
    }

    /// <summary>
    /// The stored exception, if the operation has completed and failed (for observers that must not throw; a lazy
    /// cancellation is the shared <see cref="LazyCancellation.CanceledValue"/>'s, which tells only that it was canceled).
    /// </summary>
    public Exception? Error => IsCompleted ? ErrorOnceCompleted(null)?.SourceException : null;

    /// <summary>
    /// The failure, read after completion has been seen (before it, the slot may hold a waiter's state). A cancellation
    /// stored lazily (<see cref="TrySetCanceledLazily"/>) is built here, for a reader that needs the exception, from
    /// <paramref name="owner"/>'s token, or handed back as <see cref="LazyCancellation"/>'s sentinel to the one reader
    /// that asked for the cancellation as a value (and to <paramref name="owner"/> null: a reader that only tests it).
    /// </summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    private readonly ExceptionDispatchInfo? ErrorOnceCompleted(ISpindleSource? owner)
    {
        object? outcome = _stateOrError;
        return outcome is null ? null : outcome as ExceptionDispatchInfo ?? LazyCancellation.Build(owner);
    }

    /// <summary>Completes with <paramref name="result"/>; false if already completed.</summary>
    public bool TrySetResult(TResult result)
    {
        if (typeof(TResult) == typeof(VoidResult))
        {
            return TrySetVoidResult();
        }
        if (!TryBeginCompletion(out object? waiter))
        {
            return false;
        }
        EndCompletionWithResult(waiter, result);
        return true;
    }

    /// <summary>
    /// Success with no value has nothing to write: with no waiter to read it completes in one CAS straight to Completed,
    /// skipping the Completing state (the JIT removes this branch for every other TResult).
    /// </summary>
    private bool TrySetVoidResult()
    {
        if (!TrySetVoidResultDeferred(out object? waiter, out object? state))
        {
            return false;
        }
        if (waiter is not null)
        {
            RunWaiter(waiter, state);
        }
        return true;
    }

    /// <summary>
    /// Runs a completed operation's waiter here, or queues it to the workers if the source asked for that
    /// (<see cref="RunContinuationsAsynchronously"/>). Safe after publication: the flag never changes.
    /// </summary>
    /// <remarks>
    /// A thread blocked in GetResult (<see cref="BlockingWait"/>) and the observer of a forgotten task are run here even
    /// then: see <see cref="Continuations.NeverQueued"/>.
    /// </remarks>
    private readonly void RunWaiter(object waiter, object? state)
    {
        if (DispatchesContinuations && !Continuations.NeverQueued(waiter))
        {
            Continuations.Dispatch(waiter, state);
        }
        else
        {
            Continuations.Invoke(waiter, state);
        }
    }

    /// <summary>
    /// Completes with success, as <see cref="TrySetVoidResult"/>, but hands the waiter (and its state) back instead of
    /// running it, so that a completer finishing many sources at once (the timer wheel) can run or dispatch the
    /// continuations in a batch. The caller must run a non-null waiter exactly once, with <see cref="Continuations.Invoke"/>.
    /// </summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public bool TrySetVoidResultDeferred(out object? waiter, out object? state)
    {
        int w = Volatile.Read(ref _word);
        SpinWait spin = default;
        while (true)
        {
            int current = w & StateMask;
            if (current >= Completing)
            {
                waiter = null;
                state = null;
                return false;
            }
            if (current == Registering)
            {
                spin.SpinOnce();
                w = Volatile.Read(ref _word);
                continue;
            }
            if (current != Waiting)
            {
                // Pending or abandoned: nobody to resume, and a success has nothing to write or report.
                int prev = Interlocked.CompareExchange(ref _word, With(w, Completed), w);
                if (prev == w)
                {
                    waiter = null;
                    state = null;
                    return true;
                }
                w = prev;
                continue;
            }
            int taken = Interlocked.CompareExchange(ref _word, With(w, Completing), w);
            if (taken != w)
            {
                w = taken;
                continue;
            }
            TakeWaiterAndPublishSuccess(w, 0, out waiter, out state);
            return true;
        }
    }

    /// <summary>
    /// Under Completing, claimed from Waiting in word <paramref name="w"/>: takes the waiter (and a delegate's state),
    /// clears both fields, and publishes a success with no value, with <paramref name="mark"/> flipped in (a constant: a
    /// signal's <see cref="HandedToWaiterBit"/>, or none; a waiter registered with <see cref="ReadingWaiterMark"/> has
    /// it already, so it is cleared). The caller runs the waiter exactly once.
    /// </summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    private void TakeWaiterAndPublishSuccess(int w, int mark, out object? waiter, out object? state)
    {
        waiter = _continuation;
        state = waiter!.GetType() == typeof(Action<object?>) ? _stateOrError : null;
        _continuation = null;
        _stateOrError = null;
        Volatile.Write(ref _word, With(w, Completed) ^ mark);
    }

    /// <summary>Fails with <paramref name="exception"/>; false if already completed.</summary>
    public bool TrySetException(Exception exception) => TrySetExceptionOfUse(AnyUse, exception);

    /// <summary>
    /// A promise's completion of one use: as <see cref="TrySetResult"/>, but only while use <paramref name="token"/> is
    /// the current one (pending, awaited, or let go of by a combinator) and not completed. False once the use is
    /// completed or the owner has reset the promise: a completer that kept an earlier use's token (an actor's reply that
    /// comes after its asker timed out and started the next ask) completes nothing, instead of the later use.
    /// </summary>
    public bool TrySetResultOfUse(short token, TResult result)
    {
        if (!TryBeginCompletionCore(token, abandonedToo: true, out object? waiter))
        {
            return false;
        }
        EndCompletionWithResult(waiter, result);
        return true;
    }

    /// <summary>As <see cref="TrySetException(Exception)"/>, for use <paramref name="onlyUse"/> only (see <see cref="TrySetResultOfUse"/>), or any (<see cref="AnyUse"/>).</summary>
    public bool TrySetExceptionOfUse(int onlyUse, Exception exception)
    {
        if (IsCompletingOrCompleted || (onlyUse != AnyUse && Version != onlyUse))
        {
            return false; // spares the capture below (for a use already completed, or a late completer of an earlier one)
        }
        // Captured before the core is claimed: others wait while it is held, and a capture that failed (out of memory)
        // under the claim would leave it held for ever.
        return TryComplete(ExceptionDispatchInfo.Capture(exception), onlyUse);
    }

    /// <summary>
    /// Fails with a failure captured elsewhere (an input's, passed on by a combinator), which is rethrown with the trace it
    /// saved; false if already completed.
    /// </summary>
    public bool TrySetException(ExceptionDispatchInfo error) => !IsCompletingOrCompleted && TryComplete(error);

    /// <summary>
    /// Completes as canceled by <paramref name="cancellationToken"/>, building no exception (<see cref="LazyCancellation"/>):
    /// the token goes to the owner's <paramref name="canceledBy"/> (its <see cref="ILazyCanceledSource.CanceledBy"/>) while
    /// this call holds the core (Completing), before the marker is published, so a reader that sees the marker sees the
    /// token. A promise's cancellation. False if already completed.
    /// </summary>
    public bool TrySetCanceledKeepingToken(ref CancellationToken canceledBy, CancellationToken cancellationToken)
        => TrySetCanceledKeepingTokenOfUse(AnyUse, ref canceledBy, cancellationToken);

    /// <summary>
    /// As <see cref="TrySetCanceledKeepingToken"/>, for use <paramref name="onlyUse"/> only (see
    /// <see cref="TrySetResultOfUse"/>), or any (<see cref="AnyUse"/>): the token is stored only by the call that claimed
    /// that use, so a late canceller of an earlier use writes nothing.
    /// </summary>
    public bool TrySetCanceledKeepingTokenOfUse(int onlyUse, ref CancellationToken canceledBy, CancellationToken cancellationToken)
    {
        if (IsCompletingOrCompleted || !TryBeginCompletionCore(onlyUse, abandonedToo: true, out object? waiter))
        {
            return false;
        }
        canceledBy = cancellationToken;
        EndCompletionCanceledLazily(waiter);
        return true;
    }

    /// <summary>Completes as canceled by <paramref name="cancellationToken"/>; false if already completed.</summary>
    public bool TrySetCanceled(CancellationToken cancellationToken)
    {
        if (IsCompletingOrCompleted)
        {
            return false;
        }
        return TryComplete(ExceptionDispatchInfo.Capture(ThrowHelper.Canceled(cancellationToken)));
    }

    /// <summary>
    /// Completes as canceled, building no exception: the owner, an <see cref="ILazyCanceledSource"/>, keeps the token,
    /// and a reader that throws builds the <see cref="OperationCanceledException"/> then (<see cref="LazyCancellation"/>),
    /// as the BCL's Task does. False if already completed.
    /// </summary>
    public bool TrySetCanceledLazily() => !IsCompletingOrCompleted && TryComplete(LazyCancellation.Marker);

    /// <summary>
    /// Completes with a failure captured beforehand, or a lazy cancellation's marker; false if already completed (or, for
    /// <paramref name="onlyUse"/> other than <see cref="AnyUse"/>, if that use is no longer the current one).
    /// </summary>
    private bool TryComplete(object error, int onlyUse = AnyUse)
    {
        if (!TryBeginCompletionCore(onlyUse, abandonedToo: true, out object? waiter))
        {
            return false;
        }
        EndCompletionWithOutcome(waiter, error);
        return true;
    }

    /// <summary>
    /// The one CAS that picks the completer: Pending, Waiting or Abandoned → Completing. After a true return the caller
    /// owns the core until it calls <see cref="EndCompletion"/> with the waiter it got, which it must do exactly once and
    /// promptly (a registrant or a competing completer that meets the state waits). A caller that completes nothing else
    /// in between uses the TrySet* methods; a combinator decides its race with this CAS and finishes its own work under
    /// the state.
    /// </summary>
    public bool TryBeginCompletion(out object? waiter) => TryBeginCompletionCore(AnyUse, abandonedToo: true, out waiter);

    /// <summary>
    /// As <see cref="TryBeginCompletion"/>, but only for use <paramref name="token"/> while it is pending
    /// (armed or waited on): a signal's cancellation, which must never complete a later wait, nor one that was let go of.
    /// </summary>
    public bool TryBeginCompletionOfUse(short token, out object? waiter) => TryBeginCompletionCore(token, abandonedToo: false, out waiter);

    /// <summary>Any use: <see cref="TryBeginCompletionCore"/> checks no token (outside a token's range).</summary>
    private const int AnyUse = int.MinValue;

    /// <summary>
    /// The two above, and a promise's completion of one use (<see cref="TrySetResultOfUse"/>): <paramref name="onlyUse"/>
    /// is <see cref="AnyUse"/>, or the one use (a token) that may be completed, and then only while it is the current use
    /// and not completed, and, unless <paramref name="abandonedToo"/>, not abandoned either. Inlined into each with
    /// constant arguments, so each tests only what it needs.
    /// </summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    private bool TryBeginCompletionCore(int onlyUse, bool abandonedToo, out object? waiter)
    {
        int w = Volatile.Read(ref _word);
        SpinWait spin = default;
        while (true)
        {
            int current = w & StateMask;
            if (current >= Completing || (onlyUse != AnyUse && ((short)w != onlyUse || (!abandonedToo && current == Abandoned))))
            {
                waiter = null;
                return false;
            }
            if (current == Registering)
            {
                spin.SpinOnce();
                w = Volatile.Read(ref _word);
                continue;
            }
            int prev = Interlocked.CompareExchange(ref _word, With(w, Completing) | (current == Waiting ? 0 : ClaimedWithoutWaiterBit), w);
            if (prev == w)
            {
                waiter = current == Waiting ? _continuation : current == Abandoned ? s_abandoned : null;
                return true;
            }
            w = prev;
        }
    }

    /// <summary>
    /// Under Completing (after <see cref="TryBeginCompletion"/>): takes a delegate waiter's state, writes the outcome into
    /// its slot, publishes, and runs the waiter (or, for an abandoned use, reports a fault nobody will read). A result, if
    /// any, must be written before.
    /// </summary>
    public void EndCompletion(object? waiter, ExceptionDispatchInfo? error) => EndCompletionWithOutcome(waiter, error);

    /// <summary>
    /// As <see cref="EndCompletion"/>, as canceled lazily (<see cref="TrySetCanceledLazily"/>): for a completer that claimed
    /// the core itself (a signal's wait, a combinator) and has stored the token in its <see cref="ILazyCanceledSource"/> first.
    /// </summary>
    public void EndCompletionCanceledLazily(object? waiter) => EndCompletionWithOutcome(waiter, LazyCancellation.Marker);

    /// <summary>As <see cref="EndCompletion"/>; <paramref name="outcome"/> may also be <see cref="LazyCancellation.Marker"/>.</summary>
    private void EndCompletionWithOutcome(object? waiter, object? outcome)
    {
        ExceptionDispatchInfo? error = outcome as ExceptionDispatchInfo;
        object? state = waiter is not null && waiter.GetType() == typeof(Action<object?>) ? _stateOrError : null;
        _stateOrError = outcome;
        _continuation = null;
#if DEBUG
        SourceCoreTestHooks.CompletionClaimed?.Invoke();
#endif
        // The publication point: from here on the operation is complete to every reader, and the core is not touched.
        // Only the completer writes the word while it is Completing, so this read is the word it set; its claim's mark
        // (ClaimedWithoutWaiterBit) is dropped here.
        int published = (_word & ~(StateMask | ClaimedWithoutWaiterBit)) | Completed;
        Volatile.Write(ref _word, published);
        if (waiter == s_abandoned)
        {
#if DEBUG
            SourceCoreTestHooks.AbandonedPublished?.Invoke();
#endif
            // Nobody waits any more: a fault nobody will read is reported, never lost (a cancellation is an outcome);
            // once, should a Forget() of the same completed use come first. The owner may have reset the use since the
            // publication (its Reset waits for this completer's publication, ClaimedWithoutWaiterBit): the claim then
            // finds another use and reports anyway (ResetWaitReviewTests).
            if (FaultReport.IsFault(error) && TryClaimFaultReport((short)published))
            {
                UnobservedExceptions.Report(error.SourceException);
            }
        }
        else if (waiter is not null)
        {
            RunWaiter(waiter, state);
        }
    }

    /// <summary>True if <paramref name="waiter"/>, handed back by <see cref="TryBeginCompletion"/>, stands for an abandoned use.</summary>
    public static bool IsAbandonedWaiter(object? waiter) => waiter == s_abandoned;

    /// <summary>
    /// Under Completing claimed from Abandoned (<see cref="TryBeginCompletion"/> handed back a waiter for which
    /// <see cref="IsAbandonedWaiter"/> holds): ends the use with nothing to run, write or report, completed and already
    /// consumed in the publishing store, as <see cref="ReleaseAbandoned"/> ends one from Abandoned: nobody reads it, and a
    /// copy of its task the caller kept (misuse) is the await-once error from here on, never a read of a use the owner
    /// recycles. For a source whose completer, not its leaver, ends an abandoned use (a job's wait, which cannot leave
    /// the job's waiter list): the caller owns the object afterwards, and clears it (<see cref="ClearForPool"/>).
    /// </summary>
    public void EndAbandonedUnread()
    {
        _stateOrError = null;
        _result = default!;
        _continuation = null;
        // Only the completer writes the word while it is Completing.
        Volatile.Write(ref _word, With(NextVersion(_word), Completed));
    }

    /// <summary>
    /// As <see cref="EndCompletion"/> for a success with <paramref name="result"/>, written under the claim before the
    /// publication (a signal's wait that timed out: see <see cref="TryBeginCompletionOfUse"/>).
    /// </summary>
    public void EndCompletionWithResult(object? waiter, TResult result)
    {
        _result = result;
        EndCompletion(waiter, null);
    }

    /// <summary>
    /// The result of a use seen completed, read without a token check or consumption: for a reader that knows the use
    /// cannot move on meanwhile (a combinator reading a signal's wait it holds, see <c>Signal.TookSet</c>).
    /// </summary>
    public readonly TResult ResultUnchecked => _result;

    /// <summary>
    /// Takes back <paramref name="registered"/>, a <see cref="DirectWaiter"/> registered on this use, before the operation
    /// completes, and puts <paramref name="waiter"/> (with <paramref name="waiterState"/>, for a delegate) in its place,
    /// or, for a null <paramref name="waiter"/>, leaves the use abandoned: the old waiter will never run.
    /// </summary>
    /// <returns>
    /// <see cref="DetachOutcome.Detached"/>; <see cref="DetachOutcome.Completed"/> if the operation has completed or is
    /// completing (a registered waiter runs, or ran), changing nothing; <see cref="DetachOutcome.NotWaiting"/> if that
    /// waiter is not registered (not yet, or already gone), changing nothing.
    /// </returns>
    /// <remarks>
    /// The CAS from Waiting to Registering decides against a completer (whichever moves the word first wins); the word
    /// carries the version, so the use cannot have changed in between. Under the mark nothing else writes the fields, so
    /// the identity check is exact. A registration in progress (Registering) is waited for, so that a registrant that
    /// then looks at its owner's state (a combinator's race) and this caller cannot both miss the registration.
    /// </remarks>
    public DetachOutcome TryReplaceWaiter(DirectWaiter registered, object? waiter, object? waiterState, bool forgotten = false)
        => ReplaceWaiter(registered, waiter, waiterState, forgotten, out _);

    /// <summary>
    /// As <see cref="TryReplaceWaiter"/> with no replacement (the use is left
    /// abandoned), handing back the token of the use it abandoned, taken from the word its CAS decided on. A source
    /// that goes on to release the abandoned use (<see cref="ReleaseAbandoned"/>) must name it by this token, never by
    /// the version it reads later: once abandoned, the use can complete, be consumed by a misused read and recycled, and
    /// the version then belongs to the object's next use.
    /// </summary>
    public DetachOutcome TryAbandonWaiter(DirectWaiter registered, out short abandoned)
        => ReplaceWaiter(registered, null, null, false, out abandoned);

    /// <summary>
    /// As <see cref="TryReplaceWaiter"/> with no replacement, but the use goes back to Pending, as if it had never been
    /// awaited, instead of Abandoned: for a source that is never reset and promises one awaiter at a time (a task scope's
    /// wait), so that the next await can register. Its completion then runs nobody and reports nothing: the outcome stays
    /// for the next read.
    /// </summary>
    public DetachOutcome TryWithdrawWaiter(DirectWaiter registered)
        => ReplaceWaiter(registered, null, null, false, out _, backToPending: true);

    /// <summary>
    /// True if use <paramref name="token"/> is pending with no waiter registered (a source that is never reset and lets a
    /// combinator settled at the call go without a mark: see <see cref="TryWithdrawWaiter"/>). A snapshot: an await may
    /// register, or the operation complete, right after.
    /// </summary>
    public bool IsPendingWithoutWaiter(short token)
    {
        int w = Volatile.Read(ref _word);
        return (short)w == token && (w & StateMask) == Pending;
    }

    private DetachOutcome ReplaceWaiter(DirectWaiter registered, object? waiter, object? waiterState, bool forgotten, out short token, bool backToPending = false)
    {
        token = 0;
        int w = Volatile.Read(ref _word);
        SpinWait spin = default;
        while (true)
        {
            int current = w & StateMask;
            if (current == Registering)
            {
                spin.SpinOnce();
                w = Volatile.Read(ref _word);
                continue;
            }
            if (current >= Completing)
            {
                return DetachOutcome.Completed;
            }
            if (current != Waiting)
            {
                return DetachOutcome.NotWaiting; // not registered yet (Pending), or already left (Abandoned)
            }
            // The waiter is compared only under the mark: read before it, the field could already have been cleared by a
            // completer whose state change this thread has not seen yet, and a completing use would pass for another
            // waiter's (a late read of it would follow: found by a stress test).
            int prev = Interlocked.CompareExchange(ref _word, With(w, Registering), w);
            if (prev != w)
            {
                w = prev; // a completer, or another thread taking the same waiter back: look again
                continue;
            }
            if (_continuation != registered)
            {
                Volatile.Write(ref _word, w);
                return DetachOutcome.NotWaiting;
            }
            token = (short)w;
            if (waiter is null)
            {
                _continuation = null;
                Volatile.Write(ref _word, With(w, backToPending ? Pending : Abandoned));
                return DetachOutcome.Detached;
            }
            _stateOrError = waiterState;
            _continuation = waiter;
            Volatile.Write(ref _word, forgotten ? w | ForgottenBit : w);
            return DetachOutcome.Detached;
        }
    }

    /// <summary>
    /// The forgotten use's observer, once the use has completed: takes the mark (see <see cref="ForgottenBit"/>) and
    /// consumes the use in the same CAS, handing back its failure; the caller then recycles the box. False if no use is
    /// marked (nothing to read). One CAS, not a take and then a <see cref="Consume"/>: between the two, the use was an
    /// ordinary completed one, and a misused read of the forgotten task would consume it first.
    /// </summary>
    public bool TryConsumeForgotten(out ExceptionDispatchInfo? error)
    {
        int w = Volatile.Read(ref _word);
        while ((w & ForgottenBit) != 0)
        {
            Debug.Assert((w & StateMask) == Completed, "the observer runs after the publication");
            if (TryConsumeAt(w, out error))
            {
                return true;
            }
            w = Volatile.Read(ref _word);
        }
        error = null;
        return false;
    }

    /// <summary>
    /// Consumes the completed use of word <paramref name="w"/> in one CAS (the version moves on, still Completed until the
    /// owner clears the core), reading its failure first: false if the word changed since it was read.
    /// </summary>
    private bool TryConsumeAt(int w, out ExceptionDispatchInfo? error)
    {
        error = ErrorOnceCompleted(null); // its callers only test a cancellation for null, or report faults
        if (Interlocked.CompareExchange(ref _word, With(NextVersion(w), Completed), w) == w)
        {
            return true;
        }
        error = null;
        return false;
    }

    /// <summary>
    /// Abandons use <paramref name="token"/> while nobody waits on it (a combinator settled without registering): as
    /// <see cref="TryReplaceWaiter"/> with no replacement. False if it is awaited, completed, or not the current use.
    /// </summary>
    public bool TryAbandon(short token)
    {
        int w = Volatile.Read(ref _word);
        SpinWait spin = default;
        while (true)
        {
            if ((short)w != token)
            {
                return false;
            }
            int current = w & StateMask;
            if (current == Registering || current == Completing)
            {
                spin.SpinOnce();
                w = Volatile.Read(ref _word);
                continue;
            }
            if (current != Pending)
            {
                return IsLetGoPromiseUse(w); // let go of already (and awaited by nobody since)
            }
            int prev = Interlocked.CompareExchange(ref _word, With(w, Abandoned), w);
            if (prev == w)
            {
                return true;
            }
            w = prev;
        }
    }

    /// <summary>
    /// A job's wait only (<see cref="JobWait"/>: see its remarks, "Reviving"): true with the use's token if the current use
    /// is Abandoned (a combinator let go of it, and no completer has claimed it). A snapshot, for a caller that checks what
    /// the use is for and then calls <see cref="TryReviveAbandoned"/> with this token.
    /// </summary>
    public bool IsAbandoned(out short token)
    {
        int w = Volatile.Read(ref _word);
        token = (short)w;
        return (w & StateMask) == Abandoned;
    }

    /// <summary>
    /// A job's wait only: turns abandoned use <paramref name="token"/> into a new use, Pending, with the next token
    /// (<paramref name="next"/>), in one CAS from that very word: true if this call did. The CAS decides against the
    /// completer's claim (<see cref="TryBeginCompletion"/> from Abandoned, which would end the use unread) and against
    /// another reviver: exactly one of them moves the word. The old token is stale from then on (a copy of the let-go task
    /// is the await-once error, never a read of the new use). An abandoned use holds no waiter and no state (the waiter it
    /// had was a direct waiter, taken out by <see cref="TryReplaceWaiter"/>, which writes no state), so there is nothing
    /// to clear.
    /// </summary>
    public bool TryReviveAbandoned(short token, out short next)
    {
        int w = Volatile.Read(ref _word);
        int revived = NextVersion(w); // Pending, with the next token; the marks are dropped, as by every version step
        next = (short)revived;
        return (short)w == token && (w & StateMask) == Abandoned && Interlocked.CompareExchange(ref _word, revived, w) == w;
    }

    /// <summary>
    /// Claims the report of completed use <paramref name="token"/>'s fault (<see cref="ReportedBit"/>): true the first
    /// time, false once claimed. True when the use is not the current completed one (reset meanwhile, or not published
    /// yet): the caller reports, as before there was a claim, rather than drop a fault.
    /// </summary>
    public bool TryClaimFaultReport(short token)
    {
        int w = Volatile.Read(ref _word);
        while (true)
        {
            if ((short)w != token || (w & StateMask) != Completed)
            {
                return true;
            }
            if ((w & ReportedBit) != 0)
            {
                return false;
            }
            int prev = Interlocked.CompareExchange(ref _word, w | ReportedBit, w);
            if (prev == w)
            {
                return true;
            }
            w = prev;
        }
    }

    /// <summary>True once a completer has claimed the use (Completing) or published it (Completed).</summary>
    public bool IsCompletingOrCompleted => (Volatile.Read(ref _word) & StateMask) >= Completing;

    // ---- Signal: an auto-reset event on one core (see Signal's remarks). Idle is Completed (the last wait is over) or
    // Signaled (set, and no wait has taken it); a wait is a use armed from idle, Pending, then Registering and Waiting as
    // for any source; a set completes it. A wait-and-set cycle is three CASes: arm, register, set.

    /// <summary>Signal only: starts idle, set or not. Call from the constructor, before the signal is shared.</summary>
    public void InitializeSignal(bool set) => _word = (_word & DispatchBit) | (set ? Signaled : Completed);

    /// <summary>Signal only: set, and no wait has taken it yet.</summary>
    public bool IsSignaled => (Volatile.Read(ref _word) & StateMask) == Signaled;

    /// <summary>Signal only, for tests: a wait's waiter has registered (a set now resumes it on the setting thread, or queues it).</summary>
    public bool IsWaitRegistered => (Volatile.Read(ref _word) & StateMask) == Waiting;

    /// <summary>Signal only: a wait is armed, whether or not its waiter has registered yet.</summary>
    public bool IsWaitPending
    {
        get
        {
            int current = Volatile.Read(ref _word) & StateMask;
            return current == Pending || current == Registering || current == Waiting;
        }
    }

    /// <summary>
    /// Signal only: what a new wait finds. A set signal is taken (the wait completes at once, and the version moves on,
    /// so an earlier wait's token is stale from here on, as after arming), leaving the arming mark if
    /// <paramref name="marking"/> (cleared by <see cref="EndArming"/>); idle returns the word for <see cref="TryArm"/>
    /// or <see cref="TryMarkIdle"/>; a pending wait is the caller's error. The previous wait's set or cancellation being
    /// published, or a combinator letting go of it (<see cref="ReleaseAbandoned"/>), is a few stores away: waited for.
    /// </summary>
    public SignalLook LookForWait(bool marking, out int idle)
    {
        int w = Volatile.Read(ref _word);
        SpinWait spin = default;
        while (true)
        {
            int current = w & StateMask;
            if ((w & ArmingBit) != 0)
            {
                idle = 0;
                return SignalLook.WaitPending; // another WaitAsync is still storing its wait's cancellation
            }
            if (current == Completed)
            {
                idle = w;
                return SignalLook.Idle;
            }
            if (current == Signaled)
            {
                // The use this moves to is never handed out (the next wait arms the one after it), so its fields need no clearing.
                int prev = Interlocked.CompareExchange(ref _word, With(NextVersion(w), Completed) | (marking ? ArmingBit : 0), w);
                if (prev == w)
                {
                    idle = 0;
                    return SignalLook.Taken;
                }
                w = prev;
                continue;
            }
            if (current == Pending || current == Registering || current == Waiting)
            {
                idle = 0;
                return SignalLook.WaitPending;
            }
            spin.SpinOnce(); // Completing or Abandoned
            w = Volatile.Read(ref _word);
        }
    }

    /// <summary>
    /// Signal only: arms the next wait over <paramref name="idle"/>, the word <see cref="LookForWait"/> returned: one CAS
    /// claims the new use (as Registering, so others wait a few stores), the previous wait's outcome is dropped, and a
    /// release store publishes the use as Pending. False if the word moved meanwhile (a set landed, or another wait
    /// started): look again. Nothing is written before the CAS, so a thread that loses it has changed nothing.
    /// </summary>
    public bool TryArm(int idle, bool arming, out short token)
    {
        int next = With(NextVersion(idle), Registering) | (arming ? ArmingBit : 0);
        token = (short)next;
        if (Interlocked.CompareExchange(ref _word, next, idle) != idle)
        {
            return false;
        }
        // The waiter field is already null (a completion and a leaving waiter both clear it); the failure slot may hold
        // the previous wait's cancellation, and the result its timeout (Signal.WaitAsync with a timeout), which a set
        // completing the new use with nothing written would otherwise keep.
        _stateOrError = null;
        _result = default!;
        Volatile.Write(ref _word, With(next, Pending));
        return true;
    }

    /// <summary>
    /// Signal only: puts the arming mark on <paramref name="idle"/>, the word <see cref="LookForWait"/> returned, arming
    /// nothing (a wait whose zero timeout has passed, which ends a previous wait's state under the mark; cleared by
    /// <see cref="EndArming"/>). False if the word moved meanwhile (a set landed, or another wait started): look again.
    /// </summary>
    public bool TryMarkIdle(int idle) => Interlocked.CompareExchange(ref _word, idle | ArmingBit, idle) == idle;

    /// <summary>
    /// Signal only: the WaitAsync that set the arming mark (<see cref="TryArm"/> with <c>arming</c>,
    /// <see cref="LookForWait"/> with <c>marking</c>, or <see cref="TryMarkIdle"/>) has ended the previous wait's state
    /// and stored its own: new waits are judged by the state alone again. A CAS, never under a transient state (its holder
    /// writes the word it claimed).
    /// </summary>
    public void EndArming()
    {
        int w = Volatile.Read(ref _word);
        SpinWait spin = default;
        while ((w & ArmingBit) != 0)
        {
            int current = w & StateMask;
            if (current == Registering || current == Completing)
            {
                spin.SpinOnce();
                w = Volatile.Read(ref _word);
                continue;
            }
            int prev = Interlocked.CompareExchange(ref _word, w & ~ArmingBit, w);
            if (prev == w)
            {
                return;
            }
            w = prev;
        }
    }

    /// <summary>
    /// Signal only: sets the signal. An armed wait completes (its waiter, if registered, runs here or is dispatched); an
    /// idle signal is left set for the next wait; a set signal stays set. A wait a combinator let go of (Abandoned)
    /// counts as idle: the set is kept for the next wait.
    /// </summary>
    public void SetSignal()
    {
        int w = Volatile.Read(ref _word);
        SpinWait spin = default;
        while (true)
        {
            int current = w & StateMask;
            if (current == Signaled)
            {
                return;
            }
            if (current == Registering || current == Completing)
            {
                spin.SpinOnce();
                w = Volatile.Read(ref _word);
                continue;
            }
            if (current == Waiting)
            {
                int taken = Interlocked.CompareExchange(ref _word, With(w, Completing), w);
                if (taken != w)
                {
                    w = taken;
                    continue;
                }
                TakeWaiterAndPublishSuccess(w, HandedToWaiterBit, out object? waiter, out object? state); // the set is the waiter's
                RunWaiter(waiter!, state);
                return;
            }
            // Pending: an armed wait with no waiter yet completes (TryArm cleared its outcome). Completed or Abandoned:
            // idle, so the signal is kept (SignaledFromIdle).
            int next = current == Pending ? With(w, Completed) : SignaledFromIdle(w);
            int prev = Interlocked.CompareExchange(ref _word, next, w);
            if (prev == w)
            {
                return;
            }
            w = prev;
        }
    }

    /// <summary>
    /// Signal only: sets an idle signal (as <see cref="SetSignal"/> does) but never completes a wait: true if the signal
    /// is set now (it was idle, abandoned or set already), false if a wait is armed or completing (the caller then sets
    /// it with <see cref="SetSignal"/> where no claim is held, since that may run the waiter). Runs nothing, so it may be
    /// called under a claim.
    /// </summary>
    public bool TryKeepSignal()
    {
        int w = Volatile.Read(ref _word);
        while (true)
        {
            int current = w & StateMask;
            if (current == Signaled)
            {
                return true;
            }
            if (current != Completed && current != Abandoned)
            {
                return false;
            }
            int prev = Interlocked.CompareExchange(ref _word, SignaledFromIdle(w), w);
            if (prev == w)
            {
                return true;
            }
            w = prev;
        }
    }

    /// <summary>
    /// Signal only: the word of an idle signal (Completed, or Abandoned) once a set is kept. An abandoned wait never
    /// completes: the version moves on, so its token is stale (a second await of it is the await-once error, and it never
    /// reads as signalled).
    /// </summary>
    private static int SignaledFromIdle(int word)
        => (word & StateMask) == Abandoned ? With(NextVersion(word), Signaled) : With(word, Signaled);

    /// <summary>
    /// Signal only: gives back the set that completed wait <paramref name="token"/> took, read by a WhenAny that let go of
    /// it or that threw after reading it (Combine.SettleNow), if that set has reached nobody else: the signal is set again
    /// and the version moves on in the same CAS, so the wait's token is stale and no copy of it reads the set a second
    /// time (a later read is the await-once error). <paramref name="readByCaller"/>: the caller read the wait with a read
    /// that marks (<see cref="MarkSetRead"/>), so its own <see cref="ReadBit"/> is expected; otherwise it read without
    /// marking. A set that landed on the idle signal since the wait completed (Signaled) is the same set afterwards: two
    /// sets of an auto-reset signal collapse into one. A new wait that armed nothing and is ending the old wait's state
    /// under the arming mark (a zero timeout, the caller's second wait) does not stop it: the mark is carried.
    /// </summary>
    /// <returns>
    /// True if given back. False if the set has reached a reader (its waiter, or a read besides the caller's: the set is
    /// theirs), or the wait is no longer the signal's current one (another wait began, the caller's error: a second
    /// waiter may lose a wake-up, as the Signal's remarks say, but a set is never handed out twice).
    /// </returns>
    public bool TryGiveBackSet(short token, bool readByCaller)
    {
        int readers = readByCaller ? ReadBit : 0;
        int w = Volatile.Read(ref _word);
        while (true)
        {
            int current = w & StateMask;
            if ((short)w != token || (w & SetReaderBits) != readers || (current != Completed && current != Signaled))
            {
                return false;
            }
            // An arming mark on the wait's own version is a new wait's that armed nothing (TryMarkIdle: its zero timeout had
            // passed on the idle signal) and is still ending the state the old wait left: the set is given back under it,
            // and the mark is carried, so that no third wait starts before that wait's EndArming. Refused, as it was, the
            // set reached nobody: the zero-timeout wait had returned false, and the set was lost without a trace.
            int prev = Interlocked.CompareExchange(ref _word, With(NextVersion(w), Signaled) | (w & ArmingBit), w);
            if (prev == w)
            {
                return true;
            }
            w = prev; // a set landed on the idle signal, or a read marked the wait: look again
        }
    }

    /// <summary>
    /// Signal only: a read of completed wait <paramref name="token"/> found that it took a set: the set has reached a
    /// reader, so no combinator may give it back (<see cref="TryGiveBackSet"/>). Nothing to write for the waiter a set
    /// resumed (the set marked it) or once read twice; else one CAS.
    /// </summary>
    /// <exception cref="InvalidOperationException">The set was given back (or the signal's next wait began) since this
    /// read: it is not this reader's (the await-once error, as for any read of a wait after that).</exception>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public void MarkSetRead(short token)
    {
        int w = Volatile.Read(ref _word);
        if ((w & (HandedToWaiterBit | RereadBit)) == 0 || (short)w != token)
        {
            MarkSetReadSlow(w, token);
        }
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    private void MarkSetReadSlow(int w, short token)
    {
        while (true)
        {
            if ((short)w != token)
            {
                ThrowHelper.ThrowStaleToken();
            }
            if ((w & (HandedToWaiterBit | RereadBit)) != 0)
            {
                return;
            }
            int prev = Interlocked.CompareExchange(ref _word, w | ((w & ReadBit) == 0 ? ReadBit : RereadBit), w);
            if (prev == w)
            {
                return;
            }
            w = prev;
        }
    }

    /// <summary>Signal only: clears a set signal that no wait has taken. False if it was not set.</summary>
    public bool TryClearSignal()
    {
        int w = Volatile.Read(ref _word);
        return (w & StateMask) == Signaled && Interlocked.CompareExchange(ref _word, With(w, Completed), w) == w;
    }

    /// <summary>
    /// After a combinator let go of a use (<c>Abandoned</c>, by <see cref="TryReplaceWaiter"/> or <see cref="TryAbandon"/>):
    /// ends it, completed and already consumed, in one CAS. A signal is idle again (its owner dropped what the wait held;
    /// a set that landed meanwhile, Abandoned to Signaled, is kept); a delay is stopped (TimerNode.ReleaseAbandoned). True
    /// if this call ended it; false if a completer (a set, a timer firing, a cancellation) took the use first.
    /// </summary>
    /// <remarks>
    /// The version moves on in the same CAS that ends the use: the abandoned use never completes for anyone, so its token
    /// goes stale rather than reading as a success nobody produced. A copy of the task the caller kept (misuse) is the
    /// await-once error from that moment on, and can never consume a use whose owner still holds what it held (a timer
    /// node still linked in its wheel).
    /// <para>Invariant: only use <paramref name="token"/>, the one the caller abandoned (the token its abandoning CAS
    /// decided on: <see cref="TryAbandon"/>'s, or <see cref="TryAbandonWaiter"/>'s), is ended here. Read afresh, the
    /// version may already be the object's next use's: the abandoned use fired, a misused read consumed it, and the
    /// pooled object went on to another user.</para>
    /// </remarks>
    public bool ReleaseAbandoned(short token)
    {
        int w = Volatile.Read(ref _word);
        return (short)w == token && (w & StateMask) == Abandoned
            && Interlocked.CompareExchange(ref _word, With(NextVersion(w), Completed), w) == w;
    }

    /// <summary>
    /// Spins while use <paramref name="token"/> is the current one and not yet published: a leaver whose abandoning lost to
    /// a completer (<see cref="ReleaseAbandoned"/> returned false) waits for that completer, which is between its claim and
    /// its publication, a few stores. Returns once it is published, or once it is no longer the current use (it was
    /// consumed: the object may already be another use's, and must not be waited on for this one).
    /// </summary>
    public void WaitUntilPublished(short token)
    {
        SpinWait spin = default;
        while (true)
        {
            int w = Volatile.Read(ref _word);
            if ((short)w != token || (w & StateMask) >= Completed)
            {
                return;
            }
            spin.SpinOnce();
        }
    }

    /// <summary>
    /// Consumes use <paramref name="token"/>, seen completed, as <see cref="Consume"/> does but never throwing and never
    /// blocking: false if it is not completed or no longer the current use (another reader consumed it first, and holds
    /// what a reader holds), and then <paramref name="error"/> is null and the caller must not touch the owner again.
    /// </summary>
    public bool TryConsumeCompleted(short token, out ExceptionDispatchInfo? error)
    {
        int w = Volatile.Read(ref _word);
        if ((short)w == token && (w & (StateMask | ForgottenBit)) == Completed)
        {
            return TryConsumeAt(w, out error);
        }
        error = null;
        return false;
    }


    public void OnCompleted(Action<object?> continuation, object? state, short token)
    {
        if (continuation is null)
        {
            ThrowHelper.ThrowArgumentNull(nameof(continuation));
        }
        if (!TryRegister(continuation, state, token, 0))
        {
            Continuations.Invoke((object)continuation == DirectWaiter.s_moveNext ? state! : continuation, state);
        }
    }

    /// <summary>
    /// Signal only: registers a combinator's slot on wait <paramref name="token"/> as <see cref="OnCompleted(Action{object?}, object?, short)"/>
    /// does, but as a waiter that reads as a reader (<see cref="ReadingWaiterMark"/>): a set that completes the wait marks no
    /// reader, and the slot's read marks <see cref="ReadBit"/>, so that the combinator may give the set back only if no
    /// other read has it (<see cref="TryGiveBackSet"/>).
    /// </summary>
    public void OnCompletedAsReader(DirectWaiter waiter, short token)
    {
        if (!TryRegister(DirectWaiter.s_moveNext, waiter, token, ReadingWaiterMark))
        {
            Continuations.Invoke(waiter, waiter);
        }
    }

    /// <summary>
    /// Registers a forgotten box's own observer on use <paramref name="token"/>, marking the use forgotten (see
    /// <see cref="ForgottenBit"/>) in the store that publishes the registration: true. False if the use has completed: the
    /// caller reads it now (nothing is marked, and the observer is not run).
    /// </summary>
    /// <exception cref="InvalidOperationException">The token is stale, or the use already has an awaiter.</exception>
    public bool TryRegisterForgotten(Action<object?> observer, object state, short token)
        => TryRegister(observer, state, token, ForgottenBit);

    /// <summary>
    /// Registers the waiter on use <paramref name="token"/> and publishes it (Waiting, with <paramref name="mark"/>): true.
    /// False if the use has completed: the caller runs (or reads) it itself. Throws for a stale token or a second waiter.
    /// </summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    private bool TryRegister(Action<object?> continuation, object? state, short token, int mark)
    {
        int w = Volatile.Read(ref _word);
        SpinWait spin = default;
        while (true)
        {
            if (token != (short)w)
            {
                ThrowHelper.ThrowStaleToken();
            }
            int current = w & StateMask;
            if (current == Pending || IsLetGoPromiseUse(w))
            {
                int prev = Interlocked.CompareExchange(ref _word, With(w, Registering), w);
                if (prev != w)
                {
                    w = prev; // a completion (or another registrant) moved first: look again
                    continue;
                }
                if ((object)continuation == DirectWaiter.s_moveNext) // a reference compare: delegate == would compare targets and methods
                {
                    // Hot path: a direct waiter (a box, a combinator slot) is its own continuation (s_moveNext is internal
                    // and only ever paired with one), so there is no state to write.
                    _continuation = state!;
                }
                else
                {
                    _stateOrError = state;
                    _continuation = continuation;
                }
                Volatile.Write(ref _word, With(w, Waiting) | mark);
                return true;
            }
            if (current >= Completed)
            {
                return false;
            }
            if (current == Completing || current == Registering)
            {
                // Held for a few stores: a completion about to publish, or another registrant (or a leaving waiter) about
                // to finish, after which this one is rejected below.
                spin.SpinOnce();
                w = Volatile.Read(ref _word);
                continue;
            }
            if ((w & ForgottenBit) != 0)
            {
                // Forgotten (Forget(), or a combinator that ended without it let go of it): only its observer reads it,
                // so this is the await-once error, not a second awaiter, whose message would send the caller looking for one.
                ThrowHelper.ThrowStaleToken();
            }
            ThrowHelper.ThrowAlreadyAwaited(); // Waiting, or Abandoned (but a promise's): this use already has (or had) its waiter
        }
    }

    /// <summary>
    /// The <see cref="IValueTaskSource"/> form, for a <see cref="System.Threading.Tasks.ValueTask"/> made from a Spindle
    /// source: its flags are honored as <c>ManualResetValueTaskSourceCore</c> honors them (see
    /// <see cref="ContextContinuation.Apply"/>). Spindle's own awaiters come through the form without flags.
    /// </summary>
    public void OnCompleted(Action<object?> continuation, object? state, short token, ValueTaskSourceOnCompletedFlags flags)
    {
        ContextContinuation.Apply(ref continuation, ref state, flags);
        OnCompleted(continuation, state, token);
    }

    private sealed class Sentinel
    {
        private readonly string _name;

        public Sentinel(string name) => _name = name;

        public override string ToString() => _name;
    }
}

/// <summary>
/// A continuation bound to a captured ExecutionContext, a captured scheduling context, or both (the rare paths that
/// must flow one; allocates).
/// </summary>
internal sealed class ContextContinuation
{
    private static readonly ContextCallback s_invoke = static o =>
    {
        var cc = (ContextContinuation)o!;
        cc._continuation(cc._state);
    };

    private static readonly SendOrPostCallback s_post = static o => ((ContextContinuation)o!).RunInContext();

    /// <summary>Runs the continuation in its ExecutionContext (a binding with no scheduling context).</summary>
    public static readonly Action<object?> s_run = static o => ((ContextContinuation)o!).RunInContext();

    /// <summary>
    /// Hands the continuation to its scheduling context (a binding that captured one). It runs no continuation itself,
    /// so a completer runs it at once even where it would queue other waiters to the workers
    /// (<see cref="Continuations.NeverQueued"/>), as <c>ManualResetValueTaskSourceCore</c> posts from SetResult: the
    /// context's thread never waits for a free worker just to be told.
    /// </summary>
    public static readonly Action<object?> s_schedule = static o =>
    {
        var cc = (ContextContinuation)o!;
        if (cc._scheduling is SynchronizationContext sc)
        {
            sc.Post(s_post, cc);
        }
        else
        {
            Task.Factory.StartNew(s_run, cc, CancellationToken.None, TaskCreationOptions.DenyChildAttach, (TaskScheduler)cc._scheduling!);
        }
    };

    /// <summary>
    /// Applies an <see cref="IValueTaskSource"/> awaiter's flags to its continuation, as the BCL's
    /// <c>ManualResetValueTaskSourceCore</c> does: <see cref="ValueTaskSourceOnCompletedFlags.FlowExecutionContext"/>
    /// binds it to the caller's ExecutionContext (only non-"unsafe" awaiters ask for it), and
    /// <see cref="ValueTaskSourceOnCompletedFlags.UseSchedulingContext"/> (a plain <c>await</c> of the ValueTask, not
    /// <c>ConfigureAwait(false)</c>) makes it resume on the caller's SynchronizationContext, or else its TaskScheduler,
    /// when the caller has one that is not the default. With neither, the continuation is left as it is and nothing
    /// allocates; a Spindle task awaited directly never captures a scheduling context (DESIGN: continuations run where
    /// their source completes).
    /// </summary>
    /// <exception cref="ArgumentNullException"><paramref name="continuation"/> is null: refused here, before it could be
    /// wrapped into a binding that a source would accept and then fail to run in its completer's SetResult.</exception>
    public static void Apply(ref Action<object?> continuation, ref object? state, ValueTaskSourceOnCompletedFlags flags)
    {
        if (continuation is null)
        {
            ThrowHelper.ThrowArgumentNull(nameof(continuation));
        }
        ExecutionContext? ec = (flags & ValueTaskSourceOnCompletedFlags.FlowExecutionContext) != 0 ? ExecutionContext.Capture() : null;
        object? scheduling = null;
        if ((flags & ValueTaskSourceOnCompletedFlags.UseSchedulingContext) != 0)
        {
            SynchronizationContext? sc = SynchronizationContext.Current;
            if (sc is not null && sc.GetType() != typeof(SynchronizationContext))
            {
                scheduling = sc;
            }
            else if (TaskScheduler.Current is { } ts && ts != TaskScheduler.Default)
            {
                scheduling = ts;
            }
        }
        if (ec is null && scheduling is null)
        {
            return;
        }
        state = new ContextContinuation(continuation, state, ec, scheduling);
        continuation = scheduling is null ? s_run : s_schedule;
    }

    private readonly Action<object?> _continuation;
    private readonly object? _state;
    private readonly ExecutionContext? _context;
    private readonly object? _scheduling;

    public ContextContinuation(Action<object?> continuation, object? state, ExecutionContext context)
        : this(continuation, state, context, null)
    {
    }

    private ContextContinuation(Action<object?> continuation, object? state, ExecutionContext? context, object? scheduling)
    {
        _continuation = continuation;
        _state = state;
        _context = context;
        _scheduling = scheduling;
    }

    private void RunInContext()
    {
        if (_context is null)
        {
            _continuation(_state);
        }
        else
        {
            ContextFlow.Run(_context, s_invoke, this);
        }
    }
}

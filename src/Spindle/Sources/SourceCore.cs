using System;
using System.Diagnostics;
using System.Runtime.CompilerServices;
using System.Runtime.ExceptionServices;
using System.Runtime.InteropServices;
using System.Threading;
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
/// completion, see <see cref="TryReplaceWaiter"/>); Completing (the completer holds the fields); Completed.</para>
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
/// await-once error), may be reset, and completes with nobody to run: a fault is reported to the unobserved-exception
/// event, as any fault nobody reads. Once it has completed it is an ordinary completed use (a promise's result can be
/// read, as a completed promise's can).</para>
/// <para><b>Consumption</b> is a CAS from version v to v + 1 (still Completed, until the owner clears the core for its
/// pool), so of two threads racing to read a pooled result exactly one succeeds. The two transient states are held for a few stores; a thread that meets one
/// spins (with <see cref="SpinWait"/>, which yields if the holder was preempted) until it clears. This design descends
/// from the BCL's ManualResetValueTaskSourceCore (a sentinel settles the register/complete race) and UniTask's core
/// (one atomic decides completion); the state word is the classic packed state-and-version word that makes each step
/// one CAS and rules out ABA (the version is part of every comparison).</para>
/// </remarks>
[StructLayout(LayoutKind.Auto)]
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
    private const int DispatchBit = int.MinValue;

    private object? _continuation; // the waiter, while Waiting
    private object? _stateOrError; // see the remarks: a delegate waiter's state while pending, the failure once completed
    private TResult _result;
    // The version token (low 16 bits), the state (bits 16-18) and the dispatch flag (the sign bit): see the remarks. The
    // flag is set once before the source is published and kept by every version step (NextVersion), so it costs no field
    // and can be read at any time.
    private int _word;

    /// <summary>The token of the current use.</summary>
    public readonly short Version => (short)_word;

    /// <summary>True if completion queues the waiter to the workers instead of running it on the completing thread.</summary>
    public readonly bool DispatchesContinuations => _word < 0;

    /// <summary>
    /// Makes completion queue the waiter to the workers (the BCL's RunContinuationsAsynchronously). Call once, from the
    /// source's constructor, before the source is reachable by any other thread.
    /// </summary>
    public void RunContinuationsAsynchronously() => _word |= DispatchBit;

    /// <summary>The word of the next use after <paramref name="word"/>: the token wraps, the flag stays, the state is Pending.</summary>
    internal static int NextVersion(int word) => (word & DispatchBit) | (unchecked(word + 1) & TokenMask);

    private static int With(int word, int state) => (word & ~StateMask) | state;

    /// <summary>True once the result has been published.</summary>
    public bool IsCompleted => (Volatile.Read(ref _word) & StateMask) == Completed;

    /// <summary>True once a continuation is registered (or being registered, or left), or the operation has completed.</summary>
    public bool IsAwaitedOrCompleted => (Volatile.Read(ref _word) & StateMask) != Pending;

    /// <summary>Starts a new use: clears the result, error and continuation, and advances the version.</summary>
    /// <remarks>An abandoned use (its waiter left, see <see cref="TryReplaceWaiter"/>) may be reset while it is pending.</remarks>
    /// <exception cref="InvalidOperationException">A continuation is still waiting on the current use.</exception>
    public void Reset()
    {
        int w = Volatile.Read(ref _word);
        int state = w & StateMask;
        if (state != Pending && state != Completed && state != Abandoned)
        {
            ThrowHelper.ThrowInvalidOperation("The source cannot be reset while an await on it is still pending.");
        }
        _stateOrError = null;
        _result = default!;
        _continuation = null;
        Volatile.Write(ref _word, NextVersion(w));
    }

    /// <summary>
    /// Clears every reference the core holds and makes it Pending again, keeping the version (used before pooling: after
    /// <see cref="Consume"/> advanced it, or by an owner whose token never left it).
    /// </summary>
    public void ClearForPool()
    {
        _stateOrError = null;
        _result = default!;
        _continuation = null;
        _word = With(_word, Pending);
    }

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
            ExceptionDispatchInfo? e = ErrorOnceCompleted;
            return e is null ? SpindleTaskStatus.Succeeded
                : e.SourceException is OperationCanceledException ? SpindleTaskStatus.Canceled
                : SpindleTaskStatus.Faulted;
        }
    }

    /// <summary>
    /// Reads the outcome without consuming it. Throws the stored exception on fault or cancellation. If the operation
    /// is still pending, blocks until it completes (a synchronous <c>GetAwaiter().GetResult()</c>), helping run work.
    /// </summary>
    public TResult GetResult(short token, ISpindleSource owner)
    {
        ValidateToken(token);
        if (!IsCompleted)
        {
            BlockingWait.Wait(owner, token);
        }
        ErrorOnceCompleted?.Throw();
        return _result;
    }

    /// <summary>
    /// Reads the outcome and consumes this use in one step: the CAS on the word guarantees that of two threads racing
    /// to read the same pooled result, exactly one succeeds and the other gets the await-once error.
    /// The caller must then clear the core (<see cref="ClearForPool"/>) and return its object to the pool.
    /// </summary>
    public TResult Consume(short token, ISpindleSource owner, out ExceptionDispatchInfo? error)
    {
        int w = Volatile.Read(ref _word);
        if (token != (short)w)
        {
            ThrowHelper.ThrowStaleToken();
        }
        if ((w & StateMask) != Completed)
        {
            BlockingWait.Wait(owner, token);
            w = Volatile.Read(ref _word);
        }
        error = ErrorOnceCompleted;
        TResult result = _result;
        // Still Completed afterwards (until ClearForPool): an owner may look at IsCompleted after its consumer has read.
        if ((short)w != token || Interlocked.CompareExchange(ref _word, With(NextVersion(w), Completed), w) != w)
        {
            ThrowHelper.ThrowStaleToken();
        }
        return result;
    }

    /// <summary>The stored exception, if the operation has completed and failed (for observers that must not throw).</summary>
    public Exception? Error => IsCompleted ? ErrorOnceCompleted?.SourceException : null;

    /// <summary>The failure, read after completion has been seen (before it, the slot may hold a waiter's state).</summary>
    private readonly ExceptionDispatchInfo? ErrorOnceCompleted => (ExceptionDispatchInfo?)_stateOrError;

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
        _result = result;
        EndCompletion(waiter, null);
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
    /// A thread blocked in GetResult (<see cref="BlockingWait"/>) is woken here even then: its waiter only sets an event,
    /// runs no user code, and queued it would need a free worker to wake a thread that is not one (such a thread never
    /// runs queued work), for ever if the workers wait for that thread. The BCL's Task.Wait is woken inline the same way.
    /// </remarks>
    private readonly void RunWaiter(object waiter, object? state)
    {
        if (DispatchesContinuations && waiter != (object)BlockingWait.s_set)
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
            if (current == Completed || current == Completing)
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
            // Under Completing: take the waiter (and a delegate's state) and clear their fields before publishing.
            waiter = _continuation;
            state = waiter!.GetType() == typeof(Action<object?>) ? _stateOrError : null;
            _continuation = null;
            _stateOrError = null;
            Volatile.Write(ref _word, With(w, Completed));
            return true;
        }
    }

    /// <summary>Fails with <paramref name="exception"/>; false if already completed.</summary>
    public bool TrySetException(Exception exception)
    {
        if (IsCompletingOrCompleted)
        {
            return false; // spares the capture below
        }
        // Captured before the core is claimed: others wait while it is held, and a capture that failed (out of memory)
        // under the claim would leave it held for ever.
        return TryComplete(ExceptionDispatchInfo.Capture(exception));
    }

    /// <summary>Completes as canceled by <paramref name="cancellationToken"/>; false if already completed.</summary>
    public bool TrySetCanceled(CancellationToken cancellationToken)
    {
        if (IsCompletingOrCompleted)
        {
            return false;
        }
        return TryComplete(ExceptionDispatchInfo.Capture(new OperationCanceledException(cancellationToken)));
    }

    /// <summary>Completes with a failure captured beforehand; false if already completed.</summary>
    private bool TryComplete(ExceptionDispatchInfo error)
    {
        if (!TryBeginCompletion(out object? waiter))
        {
            return false;
        }
        EndCompletion(waiter, error);
        return true;
    }

    /// <summary>
    /// The one CAS that picks the completer: Pending, Waiting or Abandoned → Completing. After a true return the caller
    /// owns the core until it calls <see cref="EndCompletion"/> with the waiter it got, which it must do exactly once and
    /// promptly (a registrant or a competing completer that meets the state waits). A caller that completes nothing else
    /// in between uses the TrySet* methods; a combinator decides its race with this CAS and finishes its own work under
    /// the state.
    /// </summary>
    public bool TryBeginCompletion(out object? waiter)
    {
        int w = Volatile.Read(ref _word);
        SpinWait spin = default;
        while (true)
        {
            int current = w & StateMask;
            if (current == Completed || current == Completing)
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
            int prev = Interlocked.CompareExchange(ref _word, With(w, Completing), w);
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
    public void EndCompletion(object? waiter, ExceptionDispatchInfo? error)
    {
        object? state = waiter is not null && waiter.GetType() == typeof(Action<object?>) ? _stateOrError : null;
        _stateOrError = error;
        _continuation = null;
        // The publication point: from here on the operation is complete to every reader, and the core is not touched.
        // Only the completer writes the word while it is Completing, so this read is the word it set.
        Volatile.Write(ref _word, With(_word, Completed));
        if (waiter == s_abandoned)
        {
            // Nobody waits any more: a fault nobody will read is reported, never lost (a cancellation is an outcome).
            if (error is not null && error.SourceException is not OperationCanceledException)
            {
                UnobservedExceptions.Report(error.SourceException);
            }
        }
        else if (waiter is not null)
        {
            RunWaiter(waiter, state);
        }
    }

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
    public DetachOutcome TryReplaceWaiter(DirectWaiter registered, object? waiter, object? waiterState)
    {
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
            if (current == Completing || current == Completed)
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
            if (waiter is null)
            {
                _continuation = null;
                Volatile.Write(ref _word, With(w, Abandoned));
                return DetachOutcome.Detached;
            }
            _stateOrError = waiterState;
            _continuation = waiter;
            Volatile.Write(ref _word, w);
            return DetachOutcome.Detached;
        }
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
                return false;
            }
            int prev = Interlocked.CompareExchange(ref _word, With(w, Abandoned), w);
            if (prev == w)
            {
                return true;
            }
            w = prev;
        }
    }

    /// <summary>True once a completer has claimed the use (Completing) or published it (Completed).</summary>
    public bool IsCompletingOrCompleted
    {
        get
        {
            int current = Volatile.Read(ref _word) & StateMask;
            return current == Completing || current == Completed;
        }
    }

    public void OnCompleted(Action<object?> continuation, object? state, short token)
    {
        if (continuation is null)
        {
            ThrowHelper.ThrowArgumentNull(nameof(continuation));
        }
        int w = Volatile.Read(ref _word);
        SpinWait spin = default;
        while (true)
        {
            if (token != (short)w)
            {
                ThrowHelper.ThrowStaleToken();
            }
            int current = w & StateMask;
            if (current == Pending)
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
                Volatile.Write(ref _word, With(w, Waiting));
                return;
            }
            if (current == Completed)
            {
                Continuations.Invoke((object)continuation == DirectWaiter.s_moveNext ? state! : continuation, state);
                return;
            }
            if (current == Completing || current == Registering)
            {
                // Held for a few stores: a completion about to publish, or another registrant (or a leaving waiter) about
                // to finish, after which this one is rejected below.
                spin.SpinOnce();
                w = Volatile.Read(ref _word);
                continue;
            }
            ThrowHelper.ThrowAlreadyAwaited(); // Waiting or Abandoned: this use already has (or had) its waiter
        }
    }

    /// <summary>
    /// The <see cref="IValueTaskSource"/> form. Honors <see cref="ValueTaskSourceOnCompletedFlags.FlowExecutionContext"/>
    /// (rare: only non-"unsafe" awaiters ask for it, and only then does it allocate). Scheduling contexts are not
    /// captured: Spindle continuations run where the source completes.
    /// </summary>
    public void OnCompleted(Action<object?> continuation, object? state, short token, ValueTaskSourceOnCompletedFlags flags)
    {
        if ((flags & ValueTaskSourceOnCompletedFlags.FlowExecutionContext) != 0)
        {
            ExecutionContext? ec = ExecutionContext.Capture();
            if (ec is not null)
            {
                OnCompleted(ContextContinuation.s_run, new ContextContinuation(continuation, state, ec), token);
                return;
            }
        }
        OnCompleted(continuation, state, token);
    }

    private sealed class Sentinel
    {
        private readonly string _name;

        public Sentinel(string name) => _name = name;

        public override string ToString() => _name;
    }
}

/// <summary>A continuation bound to a captured ExecutionContext (the rare path that must flow it; allocates).</summary>
internal sealed class ContextContinuation
{
    private static readonly ContextCallback s_invoke = static o =>
    {
        var cc = (ContextContinuation)o!;
        cc._continuation(cc._state);
    };

    public static readonly Action<object?> s_run = static o =>
    {
        var cc = (ContextContinuation)o!;
        ContextFlow.Run(cc._context, s_invoke, cc);
    };

    private readonly Action<object?> _continuation;
    private readonly object? _state;
    private readonly ExecutionContext _context;

    public ContextContinuation(Action<object?> continuation, object? state, ExecutionContext context)
    {
        _continuation = continuation;
        _state = state;
        _context = context;
    }
}

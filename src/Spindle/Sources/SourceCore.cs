using System;
using System.Diagnostics;
using System.Runtime.CompilerServices;
using System.Runtime.ExceptionServices;
using System.Runtime.InteropServices;
using System.Threading;
using System.Threading.Tasks.Sources;

namespace SpindleLib;

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
/// <para><b>One field decides everything.</b> <see cref="_continuation"/> holds one of: null (pending, no waiter);
/// <see cref="s_registering"/> (a delegate waiter is writing its state); a waiter, which is either a state-machine box
/// (the hot path: the box is its own continuation, so there is no separate state to write) or an
/// <c>Action&lt;object?&gt;</c> whose state is in <see cref="_stateOrError"/>; <see cref="s_abandoned"/> (the waiter left
/// before completion, see <see cref="TryReplaceWaiter"/>); <see cref="s_completing"/> (the completer is writing the
/// result); or <see cref="s_completed"/>.</para>
/// <para><b>One slot for a waiter's state and the failure.</b> <see cref="_stateOrError"/> holds a delegate waiter's
/// state while the operation is pending, and the failure (an <see cref="ExceptionDispatchInfo"/>, or null for success)
/// once it has completed: every source is a field smaller (8 bytes per waiting async method, per promise, per timer).
/// The completer owns the slot between its CAS and its publication: it reads the waiter's state, then writes the
/// outcome. So a delegate waiter always goes through s_completing (the one-CAS void fast path is for no waiter or a
/// box waiter, which have no state), and readers look at the slot only after seeing s_completed.</para>
/// <para><b>Completion</b> is one CAS from null or a waiter to s_completing: that CAS picks the single completer. The
/// completer then writes the result, reads the waiter's state, and publishes with a release store of s_completed.
/// Completion is read from this field alone, and the completer touches nothing in the core after publishing, so a
/// consumer that sees "completed" may recycle a pooled source at once.</para>
/// <para><b>Registration</b> of a box is one CAS from null to the box. A delegate waiter CASes null to s_registering,
/// writes its state, then release-stores the delegate. A second waiter finds the field occupied and throws without
/// touching the first one's state. A registrant that finds s_completed runs its continuation itself.</para>
/// <para><b>Leaving.</b> A direct waiter can be taken back before completion (<see cref="TryReplaceWaiter"/>: a combinator
/// whose race is decided detaches from its other inputs). One CAS from the waiter object itself to its replacement (or
/// through s_registering, when the replacement has a state to write): another waiter (a forgotten box observes itself)
/// or s_abandoned. An abandoned use counts as awaited (a new await is the await-once
/// error), may be reset, and completes with nobody to run: a fault is reported to the unobserved-exception event, as
/// any fault nobody reads.</para>
/// <para>The two transient marks are held for a few stores; a thread that meets one spins (with <see cref="SpinWait"/>,
/// which yields if the holder was preempted) until it clears. This design descends from the BCL's
/// ManualResetValueTaskSourceCore (a sentinel settles the register/complete race) and UniTask's core (one atomic
/// decides completion).</para>
/// </remarks>
[StructLayout(LayoutKind.Auto)]
internal struct SourceCore<TResult>
{
    internal static readonly object s_completed = new Sentinel("completed");
    internal static readonly object s_completing = new Sentinel("completing");
    internal static readonly object s_registering = new Sentinel("registering");
    internal static readonly object s_abandoned = new Sentinel("abandoned");

    private object? _continuation;
    private object? _stateOrError; // see the remarks: a delegate waiter's state while pending, the failure once completed
    private TResult _result;
    // Only the low 16 bits are the token; an int so that consumption can be a CAS. The sign bit is not part of the
    // version: it is the source's "run continuations asynchronously" flag, set once before the source is published and
    // kept by every increment (NextVersion), so it costs no field and can be read at any time.
    private int _version;

    private const int DispatchBit = int.MinValue;

    /// <summary>The token of the current use.</summary>
    public readonly short Version => (short)_version;

    /// <summary>True if completion queues the waiter to the workers instead of running it on the completing thread.</summary>
    public readonly bool DispatchesContinuations => _version < 0;

    /// <summary>
    /// Makes completion queue the waiter to the workers (the BCL's RunContinuationsAsynchronously). Call once, from the
    /// source's constructor, before the source is reachable by any other thread.
    /// </summary>
    public void RunContinuationsAsynchronously() => _version |= DispatchBit;

    /// <summary>The version after <paramref name="version"/>: the counter bits wrap, the flag bit stays.</summary>
    internal static int NextVersion(int version) => (version & DispatchBit) | (unchecked(version + 1) & ~DispatchBit);

    /// <summary>True once the result has been published.</summary>
    public bool IsCompleted => Volatile.Read(ref _continuation) == s_completed;

    /// <summary>True once a continuation is registered (or being registered), or the operation has completed.</summary>
    public bool IsAwaitedOrCompleted => Volatile.Read(ref _continuation) is not null;

    /// <summary>Starts a new use: clears the result, error and continuation, and advances the version.</summary>
    /// <remarks>An abandoned use (its waiter left, see <see cref="TryReplaceWaiter"/>) may be reset while it is pending.</remarks>
    /// <exception cref="InvalidOperationException">A continuation is still waiting on the current use.</exception>
    public void Reset()
    {
        object? c = Volatile.Read(ref _continuation);
        if (c is not null && c != s_completed && c != s_abandoned)
        {
            ThrowHelper.ThrowInvalidOperation("The source cannot be reset while an await on it is still pending.");
        }
        _version = NextVersion(_version);
        _stateOrError = null;
        _result = default!;
        Volatile.Write(ref _continuation, null);
    }

    /// <summary>Clears every reference the core holds, after <see cref="Consume"/> advanced the version (used before pooling).</summary>
    public void ClearForPool()
    {
        _stateOrError = null;
        _result = default!;
        _continuation = null;
    }

    public readonly void ValidateToken(short token)
    {
        if (token != (short)_version)
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
    /// Reads the outcome and consumes this use in one step: the CAS on the version guarantees that of two threads
    /// racing to read the same pooled result, exactly one succeeds and the other gets the await-once error.
    /// The caller must then clear the core (<see cref="ClearForPool"/>) and return its object to the pool.
    /// </summary>
    public TResult Consume(short token, ISpindleSource owner, out ExceptionDispatchInfo? error)
    {
        int v = Volatile.Read(ref _version);
        if (token != (short)v)
        {
            ThrowHelper.ThrowStaleToken();
        }
        if (!IsCompleted)
        {
            BlockingWait.Wait(owner, token);
        }
        error = ErrorOnceCompleted;
        TResult result = _result;
        if (Interlocked.CompareExchange(ref _version, NextVersion(v), v) != v)
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
    /// Success with no value has nothing to write, so it completes in one CAS straight to s_completed, skipping the
    /// s_completing mark (the JIT removes this branch for every other TResult).
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
        object? c = Volatile.Read(ref _continuation);
        SpinWait spin = default;
        while (true)
        {
            if (c == s_completed || c == s_completing)
            {
                waiter = null;
                state = null;
                return false;
            }
            if (c == s_registering)
            {
                spin.SpinOnce();
                c = Volatile.Read(ref _continuation);
                continue;
            }
            if (c is not null && c.GetType() == typeof(Action<object?>))
            {
                // A delegate waiter's state shares its slot with the outcome: take it under s_completing and clear the
                // slot (success) before publishing, as every other completion does.
                object? p = Interlocked.CompareExchange(ref _continuation, s_completing, c);
                if (p != c)
                {
                    c = p;
                    continue;
                }
                waiter = c;
                state = _stateOrError;
                _stateOrError = null;
                Volatile.Write(ref _continuation, s_completed);
                return true;
            }
            object? prev = Interlocked.CompareExchange(ref _continuation, s_completed, c);
            if (prev == c)
            {
                waiter = c == s_abandoned ? null : c; // nobody to resume; a success has nothing to report
                state = null;
                return true;
            }
            c = prev;
        }
    }

    /// <summary>Fails with <paramref name="exception"/>; false if already completed.</summary>
    public bool TrySetException(Exception exception)
    {
        if (!TryBeginCompletion(out object? waiter))
        {
            return false;
        }
        EndCompletion(waiter, ExceptionDispatchInfo.Capture(exception));
        return true;
    }

    /// <summary>Completes as canceled by <paramref name="cancellationToken"/>; false if already completed.</summary>
    public bool TrySetCanceled(CancellationToken cancellationToken)
    {
        if (!TryBeginCompletion(out object? waiter))
        {
            return false;
        }
        EndCompletion(waiter, ExceptionDispatchInfo.Capture(new OperationCanceledException(cancellationToken)));
        return true;
    }

    /// <summary>
    /// The one CAS that picks the completer: null or a waiter → s_completing. After a true return the caller owns the
    /// core until it calls <see cref="EndCompletion"/>, which it must do exactly once and promptly (a registrant or a
    /// competing completer that meets the mark waits). A caller that completes nothing else in between uses the
    /// TrySet* methods; a combinator decides its race with this CAS and finishes its own work under the mark.
    /// </summary>
    public bool TryBeginCompletion(out object? waiter)
    {
        object? c = Volatile.Read(ref _continuation);
        SpinWait spin = default;
        while (true)
        {
            if (c == s_completed || c == s_completing)
            {
                waiter = null;
                return false;
            }
            if (c == s_registering)
            {
                spin.SpinOnce();
                c = Volatile.Read(ref _continuation);
                continue;
            }
            object? prev = Interlocked.CompareExchange(ref _continuation, s_completing, c);
            if (prev == c)
            {
                waiter = c;
                return true;
            }
            c = prev;
        }
    }

    /// <summary>
    /// Under s_completing (after <see cref="TryBeginCompletion"/>): takes a delegate waiter's state, writes the outcome
    /// into its slot, publishes, and runs the waiter. A result, if any, must be written before.
    /// </summary>
    public void EndCompletion(object? waiter, ExceptionDispatchInfo? error)
    {
        object? state = waiter is not null && waiter.GetType() == typeof(Action<object?>) ? _stateOrError : null;
        _stateOrError = error;
        // The publication point: from here on the operation is complete to every reader, and the core is not touched.
        Volatile.Write(ref _continuation, s_completed);
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
    /// completes, and puts <paramref name="waiter"/> (with <paramref name="waiterState"/>, for a delegate) in its place:
    /// the old waiter will never run. <paramref name="waiter"/> is another waiter, or <see cref="s_abandoned"/> for none.
    /// Returns false, changing nothing, if the operation has completed or is completing (the old waiter runs, or ran).
    /// </summary>
    /// <remarks>
    /// A direct waiter is stored as itself, so the CAS compares the very object that registered: exact, since an object
    /// registers once per use and the caller is that object's owner, still waiting on this use. Against a completer the
    /// CAS decides: whichever moves the field first wins. A replacement with no state takes that one CAS; one with state
    /// takes the field through s_registering, as a delegate registration does, so a completer sees the pair whole.
    /// </remarks>
    public bool TryReplaceWaiter(DirectWaiter registered, object waiter, object? waiterState)
    {
        if (waiterState is null)
        {
            return Interlocked.CompareExchange(ref _continuation, waiter, registered) == registered;
        }
        if (Interlocked.CompareExchange(ref _continuation, s_registering, registered) != registered)
        {
            return false;
        }
        _stateOrError = waiterState;
        Volatile.Write(ref _continuation, waiter);
        return true;
    }

    public void OnCompleted(Action<object?> continuation, object? state, short token)
    {
        if (continuation is null)
        {
            ThrowHelper.ThrowArgumentNull(nameof(continuation));
        }
        ValidateToken(token);

        if ((object)continuation == DirectWaiter.s_moveNext) // a reference compare: delegate == would compare targets and methods
        {
            // Hot path: a direct waiter (a box, a combinator slot) is its own continuation (s_moveNext is internal and only
            // ever paired with one), registered with a single CAS.
            object box = state!;
            object? prev = Interlocked.CompareExchange(ref _continuation, box, null);
            if (prev is not null)
            {
                RegisterLate(prev, box, null);
            }
            return;
        }

        object? p = Interlocked.CompareExchange(ref _continuation, s_registering, null);
        if (p is not null)
        {
            RegisterLate(p, continuation, state);
            return;
        }
        _stateOrError = state;
        Volatile.Write(ref _continuation, continuation);
    }

    /// <summary>Registration found the field occupied: run the continuation if the source completed, else reject it.</summary>
    private void RegisterLate(object? prev, object continuation, object? state)
    {
        SpinWait spin = default;
        while (prev == s_completing)
        {
            spin.SpinOnce();
            prev = Volatile.Read(ref _continuation);
        }
        if (prev == s_completed)
        {
            Continuations.Invoke(continuation, state);
            return;
        }
        ThrowHelper.ThrowAlreadyAwaited();
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

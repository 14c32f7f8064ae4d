using System;
using System.Threading;
using System.Threading.Tasks.Sources;

namespace SpindleLib;

/// <summary>
/// An auto-reset awaitable event for one waiter at a time: <see cref="Set"/> releases the waiter, or, if nobody is
/// waiting, lets the next <see cref="WaitAsync"/> complete at once. A wait-set cycle allocates nothing.
/// </summary>
/// <remarks>
/// <para>Thread-safety: <see cref="Set"/> may be called from any thread, concurrently with a wait and with
/// cancellation; exactly one of a set and a cancellation ends a wait. Only one wait may be pending at a time: a
/// second concurrent <see cref="WaitAsync"/> throws <see cref="InvalidOperationException"/>.</para>
/// <para>A wait given to <see cref="SpindleTask.WhenAny(System.ReadOnlySpan{SpindleTask})"/> that loses ends when the
/// race is decided: the signal is idle again at once, so it can be waited on again, and a later <see cref="Set"/> is
/// kept for that wait. (A Set that lands while the race is being decided may still go to the losing wait, as a release of
/// a <c>SemaphoreSlim</c> may go to a wait that <c>Task.WhenAny</c> lost interest in.) Until the WhenAny completes, the wait
/// is still its own: a second wait started before then, from another thread, is a second waiter and may lose a wake-up.</para>
/// <para>States: Idle, Signaled (set with no waiter) and Waiting. Set moves Idle→Signaled or Waiting→Idle (and then
/// completes the wait); a wait consumes Signaled→Idle, or moves Idle→Waiting; cancellation moves Waiting→Idle. Each
/// transition is one CAS, so a wait ends exactly once.</para>
/// </remarks>
public sealed class Signal : ISpindleSource, IDetachableSource
{
    private const int Idle = 0;
    private const int Signaled = 1;
    private const int Waiting = 2;

#if NET
    private static readonly Action<object?, CancellationToken> s_cancel = static (o, ct) => ((Signal)o!).Cancel(ct);
#else
    // Register has no token argument here: the callback reads the wait's own token (dropping the registration waits for
    // a callback in flight, so it cannot read a later wait's).
    private static readonly Action<object?> s_cancel = static o => ((Signal)o!).Cancel(((Signal)o!)._cancel!.Token);
#endif

    private SourceCore<VoidResult> _core;
    private CancelState? _cancel; // created by the first cancelable wait, then reused: a signal awaited without tokens stays small
    private int _state;

    /// <summary>The current wait's cancellation: its registration, and its token (which a late callback is checked against).</summary>
    private sealed class CancelState
    {
        public CancellationTokenRegistration Registration;
        public CancellationToken Token;
    }

    /// <summary>Creates a signal whose waiter runs on the thread that sets it (as far as a bounded nesting depth).</summary>
    /// <param name="initiallySet">True to start in the set state, so the first wait completes at once.</param>
    public Signal(bool initiallySet = false) => _state = initiallySet ? Signaled : Idle;

    /// <summary>Creates a signal.</summary>
    /// <param name="initiallySet">True to start in the set state, so the first wait completes at once.</param>
    /// <param name="runContinuationsAsynchronously">
    /// True to queue the released waiter to Spindle's workers instead of running it on the thread that calls
    /// <see cref="Set"/> (or cancels the wait), as the BCL's <c>TaskCreationOptions.RunContinuationsAsynchronously</c>
    /// does: the setter returns at once. Still allocates nothing.
    /// </param>
    public Signal(bool initiallySet, bool runContinuationsAsynchronously)
        : this(initiallySet)
    {
        if (runContinuationsAsynchronously)
        {
            _core.RunContinuationsAsynchronously();
        }
    }

    /// <summary>True if a released waiter is queued to the workers, not run on the thread that sets the signal.</summary>
    public bool RunsContinuationsAsynchronously => _core.DispatchesContinuations;

    /// <summary>True when the signal is set and no wait has consumed it yet.</summary>
    public bool IsSet => Volatile.Read(ref _state) == Signaled;

    /// <summary>True when a wait is pending.</summary>
    public bool HasWaiter => Volatile.Read(ref _state) == Waiting;

    /// <summary>
    /// Waits for the signal. Completes at once (consuming the signal) if it is set. A canceled wait completes as
    /// canceled at once and leaves nothing registered.
    /// </summary>
    /// <exception cref="InvalidOperationException">Another wait is already pending.</exception>
    public SpindleTask WaitAsync(CancellationToken cancellationToken = default)
    {
        // A canceled token wins over a set signal (as SemaphoreSlim does), and leaves the signal set for the next wait.
        if (cancellationToken.IsCancellationRequested)
        {
            return SpindleTask.FromCanceled(cancellationToken);
        }
        // Look before the CAS: a CAS that fails is still a locked instruction, and most waits find the signal idle.
        int state = Volatile.Read(ref _state);
        if (state == Signaled && Interlocked.CompareExchange(ref _state, Idle, Signaled) == Signaled)
        {
            return default;
        }
        if (state == Waiting)
        {
            ThrowSecondWaiter();
        }
        _core.Reset();
        // A previous wait that completed but was never read may still hold a registration: drop it, so its token
        // cannot cancel this wait.
        DropRegistration();
        if (cancellationToken.CanBeCanceled)
        {
            (_cancel ??= new CancelState()).Token = cancellationToken;
        }
        short token = _core.Version;
        if (Interlocked.CompareExchange(ref _state, Waiting, Idle) != Idle)
        {
            // A Set landed since the first check; consume it.
            if (Interlocked.CompareExchange(ref _state, Idle, Signaled) == Signaled)
            {
                return default;
            }
            ThrowSecondWaiter();
        }
        if (cancellationToken.CanBeCanceled)
        {
            _cancel!.Registration = CancellationRegistrations.Register(cancellationToken, s_cancel, this);
        }
        return new SpindleTask(this, token);
    }

    /// <summary>Releases the pending wait, or sets the signal if nobody waits. Setting a set signal does nothing.</summary>
    public void Set()
    {
        while (true)
        {
            int state = Volatile.Read(ref _state);
            if (state == Signaled)
            {
                return;
            }
            if (state == Idle)
            {
                if (Interlocked.CompareExchange(ref _state, Signaled, Idle) == Idle)
                {
                    return;
                }
                continue;
            }
            if (Interlocked.CompareExchange(ref _state, Idle, Waiting) == Waiting)
            {
                _core.TrySetResult(default);
                return;
            }
        }
    }

    /// <summary>Clears the signal if it is set and nobody has consumed it.</summary>
    public void Reset() => Interlocked.CompareExchange(ref _state, Idle, Signaled);

    private void Cancel(CancellationToken cancellationToken)
    {
#if NET
        // A callback still running for an earlier wait (Unregister does not wait for one in flight) must not cancel
        // this one: only the current wait's token may.
        if (_cancel is not { } cancel || cancellationToken != cancel.Token)
        {
            return;
        }
#endif
        if (Interlocked.CompareExchange(ref _state, Idle, Waiting) == Waiting)
        {
            _core.TrySetCanceled(cancellationToken);
        }
    }

    /// <summary>
    /// A WhenAny that no longer needs this wait leaves it: the signal goes back to idle without consuming a set (a later
    /// <see cref="Set"/> is kept for the next wait), so the owner can wait on it again at once.
    /// </summary>
    DetachOutcome IDetachableSource.TryDetach(DirectWaiter waiter)
    {
        DetachOutcome outcome = _core.TryReplaceWaiter(waiter, null, null);
        if (outcome == DetachOutcome.Detached)
        {
            EndAbandonedWait();
        }
        return outcome;
    }

    bool IDetachableSource.TryAbandon(short token)
    {
        if (!_core.TryAbandon(token))
        {
            return false;
        }
        EndAbandonedWait();
        return true;
    }

    /// <summary>
    /// The core's current use was just abandoned (nobody will read it): drops its cancellation and returns the signal to
    /// idle, unless a Set or a cancellation took the wait first, in which case it waits for that to finish completing the
    /// abandoned use, so that its late step cannot complete a wait started after this returns.
    /// </summary>
    private void EndAbandonedWait()
    {
        short version = _core.Version;
        // First, so that a registration dropped here can only be this wait's (a new wait starts only once the state is idle).
        DropRegistration();
        if (Interlocked.CompareExchange(ref _state, Idle, Waiting) == Waiting)
        {
            // No Set or cancellation can complete the abandoned use now (both go through this state first); the next wait
            // resets it.
            return;
        }
        SpinWait spin = default;
        while (_core.Version == version && !_core.IsCompleted)
        {
            spin.SpinOnce();
        }
    }

    private static void ThrowSecondWaiter() => ThrowHelper.ThrowInvalidOperation(
        "A wait on this Signal is already pending. A Signal has one waiter at a time; give each waiter its own Signal.");

    /// <inheritdoc/>
    public SpindleTaskStatus GetStatus(short token) => _core.GetStatus(token);

    ValueTaskSourceStatus IValueTaskSource.GetStatus(short token) => (ValueTaskSourceStatus)_core.GetStatus(token);

    /// <inheritdoc/>
    public void GetResult(short token)
    {
        _core.ValidateToken(token);
        try
        {
            _core.GetResult(token, this);
        }
        finally
        {
            // The wait is over: drop the cancellation registration so nothing stays registered behind it.
            DropRegistration();
        }
    }

    private void DropRegistration()
    {
        if (_cancel is { } cancel)
        {
            CancellationRegistrations.Drop(ref cancel.Registration);
            cancel.Token = default;
        }
    }

    /// <inheritdoc/>
    public void OnCompleted(Action<object?> continuation, object? state, short token) => _core.OnCompleted(continuation, state, token);

    void IValueTaskSource.OnCompleted(Action<object?> continuation, object? state, short token, ValueTaskSourceOnCompletedFlags flags)
        => _core.OnCompleted(continuation, state, token, flags);
}

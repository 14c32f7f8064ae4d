using System;
using System.Runtime.ExceptionServices;
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
/// race is decided (so does one given to a WhenAll whose token or timeout wins, or to
/// <see cref="SpindleTask.WithTimeout(TimeSpan, TimerWheel)"/> that times out): the signal is idle again at once, so it
/// can be waited on again, and a later <see cref="Set"/> is kept for that wait. (A Set that lands while the race is being decided may still go to the losing wait, as a release of
/// a <c>SemaphoreSlim</c> may go to a wait that <c>Task.WhenAny</c> lost interest in.) Until the WhenAny completes, the wait
/// is still its own: a second wait started before then, from another thread, is a second waiter and may lose a wake-up.</para>
/// <para>The whole state is the completion core's one word (see <c>SourceCore</c>): idle (the last wait is over), set
/// (nobody has taken the set yet), or a wait in progress, which is a use of the core armed from idle. A wait that finds
/// the signal set takes it with one CAS; otherwise one CAS arms it and one more registers its waiter; a set is one CAS
/// that completes the armed wait or, with nobody waiting, leaves the signal set; a cancellation is one CAS that completes
/// the armed wait of its own version, and never a later one. So a wait-and-set cycle is three atomic operations, and a
/// set and a cancellation racing for a wait have exactly one winner (the loser finds the wait completed; a losing set
/// then leaves the signal set, so no set is lost).</para>
/// </remarks>
public sealed class Signal : ISpindleSource, IDetachableSource
{
#if NET
    private static readonly Action<object?, CancellationToken> s_cancel = static (o, ct) => ((Signal)o!).Cancel(ct);
#else
    // Register has no token argument here: the callback reads the wait's own token (dropping the registration waits for
    // a callback in flight, so it cannot read a later wait's).
    private static readonly Action<object?> s_cancel = static o => ((Signal)o!).Cancel(((Signal)o!)._cancel!.Token);
#endif

    private SourceCore<VoidResult> _core;
    private CancelState? _cancel; // created by the first cancelable wait, then reused: a signal awaited without tokens stays small

    /// <summary>
    /// The current wait's cancellation: its registration, its token (which a late callback is checked against), and the
    /// version of the wait it may cancel.
    /// </summary>
    private sealed class CancelState
    {
        public CancellationTokenRegistration Registration;
        public CancellationToken Token;
        public short Version;
    }

    /// <summary>Creates a signal whose waiter runs on the thread that sets it (as far as a bounded nesting depth).</summary>
    /// <param name="initiallySet">True to start in the set state, so the first wait completes at once.</param>
    public Signal(bool initiallySet = false) => _core.InitializeSignal(initiallySet);

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
    public bool IsSet => _core.IsSignaled;

    /// <summary>True when a wait is pending.</summary>
    public bool HasWaiter => _core.IsWaitPending;

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
        // Read once: a wait racing this one (the caller's error) may create it, and must never have its registration
        // dropped by this wait. A wait that may touch the cancellation state arms with the core's arming mark, so a
        // second WaitAsync racing this one is rejected until the state is stored, even if a Set ends this wait first.
        CancelState? cancel = _cancel;
        bool arming = cancel is not null || cancellationToken.CanBeCanceled;
        short token;
        while (true)
        {
            SignalLook look = _core.LookForWait(out int idle);
            if (look == SignalLook.Taken)
            {
                return default;
            }
            if (look == SignalLook.WaitPending)
            {
                ThrowSecondWaiter();
            }
            if (_core.TryArm(idle, arming, out token))
            {
                break;
            }
            // A set landed since the look (or another wait started): look again.
        }
        // The wait is armed and its own: nothing else touches the cancellation state now. A previous wait that completed
        // but was never read may still hold a registration: drop it (waiting for its callback, if one is running, which
        // finds its version gone and does nothing), then register this wait's.
        if (arming)
        {
            try
            {
                DropRegistration(cancel);
                if (cancellationToken.CanBeCanceled)
                {
                    cancel ??= _cancel = new CancelState();
                    cancel.Token = cancellationToken;
                    cancel.Version = token;
                    cancel.Registration = CancellationRegistrations.Register(cancellationToken, s_cancel, this);
                }
            }
            finally
            {
                _core.EndArming();
            }
        }
        return new SpindleTask(this, token);
    }

    /// <summary>Releases the pending wait, or sets the signal if nobody waits. Setting a set signal does nothing.</summary>
    public void Set() => _core.SetSignal();

    /// <summary>
    /// A combinator gives back a set it took: the signal is set now if no wait is armed (nothing runs, so this may be
    /// called under a claim); false if one is, and the caller must <see cref="Set"/> it where no claim is held.
    /// </summary>
    internal bool TryKeepSet() => _core.TryKeepSignal();

    /// <summary>Clears the signal if it is set and nobody has consumed it.</summary>
    public void Reset() => _core.TryClearSignal();

    private void Cancel(CancellationToken cancellationToken)
    {
        if (_cancel is not { } cancel)
        {
            return;
        }
#if NET
        // A callback still running for an earlier wait (Unregister does not wait for one in flight) must not cancel
        // this one: only the current wait's token may.
        if (cancellationToken != cancel.Token)
        {
            return;
        }
#endif
        // Only the wait this registration was made for, and only while it is pending: checked again by the core's CAS.
        short version = cancel.Version;
        if (!_core.IsWaitPending || _core.Version != version)
        {
            return; // spares the capture below
        }
        // Captured before the core is claimed (see SourceCore.TrySetException).
        var canceled = ExceptionDispatchInfo.Capture(new OperationCanceledException(cancellationToken));
        if (_core.TryBeginCompletionOfUse(version, out object? waiter))
        {
            _core.EndCompletion(waiter, canceled);
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
    /// A combinator let go of the current wait (the core's use is Abandoned: no set or cancellation completes it, and no
    /// new wait starts until it is released): drops its cancellation, then makes the signal idle again. A set that landed
    /// meanwhile is kept for the next wait.
    /// </summary>
    private void EndAbandonedWait()
    {
        DropRegistration();
        _core.ReleaseAbandoned();
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
            // The wait is over: drop the cancellation registration so nothing stays registered behind it. Only if it is
            // over: a misused read of a pending wait (a second await, which throws) must not drop the registration of the
            // wait its real awaiter is still waiting on, nor a read whose token a later wait made stale drop that wait's.
            if (_core.IsCompleted && _core.Version == token)
            {
                DropRegistration();
            }
        }
    }

    private void DropRegistration() => DropRegistration(_cancel);

    private static void DropRegistration(CancelState? cancel)
    {
        if (cancel is not null)
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

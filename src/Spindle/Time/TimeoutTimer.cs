using System;
using System.Threading;

namespace SpindleLib;

/// <summary>What <see cref="TimeoutTimer.TryCancel"/> found.</summary>
internal enum TimerCancel
{
    /// <summary>Not armed for this use (or being armed right now): nothing to cancel.</summary>
    NotArmed,

    /// <summary>
    /// Already claimed: by its continuation (it fired, so the timeout decides, and the continuation releases its hold), or
    /// by an earlier <see cref="TimeoutTimer.TryCancel"/>. Nothing to do.
    /// </summary>
    TooLate,

    /// <summary>Cancelled: its continuation will never run, so the caller releases the hold that continuation had.</summary>
    Cancelled,

    /// <summary>Claimed, but it had just fired: its continuation runs (or ran), does nothing, and releases its own hold.</summary>
    CancelledAfterFiring,
}

/// <summary>
/// One timer owned by a pooled object (a timeout, a combinator, a periodic timer), armed at most once per use, that
/// either fires (its continuation runs) or is cancelled by its owner, allocation-free either way. A mutable struct
/// kept in a field of its owner.
/// </summary>
/// <remarks>
/// <para><b>One claimant.</b> Firing and cancelling race, and the node must be read (consumed) exactly once, by one of
/// them, and never touched after that: the node goes back to the pool and may be someone else's timer a moment later.
/// So both sides first claim the timer with one atomic step on <see cref="_state"/>: the continuation with an exchange
/// (it may run before arming finished, inline), a canceller with a CAS from Armed (so never before arming finished).
/// Only the claimant touches the node. A canceller that claims then cancels it quietly (<see cref="TimerNode.TryCancelQuietly"/>);
/// if the node fired in between, the canceller reads it, and the continuation, finding the claim taken, leaves it alone.</para>
/// <para><b>Arming order.</b> The node enters the wheel, then its continuation is registered, then the state becomes
/// Armed: so a canceller only ever sees a node that is in the wheel with the owner's continuation on it (which
/// <see cref="TimerNode.TryCancelQuietly"/> requires).</para>
/// </remarks>
internal struct TimeoutTimer
{
    private const int Idle = 0;
    private const int Armed = 1;
    private const int Claimed = 2;

    private TimerNode? _node;
    private short _token;

    // Idle -> Armed (by the owner, CAS, after arming) -> Claimed (by the one claimant: the continuation's exchange or a
    // canceller's CAS from Armed). Invariant: Claimed is entered once per use, and only its claimant reads _node (a
    // one-shot test-and-set claim; M. Herlihy and N. Shavit, "The Art of Multiprocessor Programming", ch. 5).
    private int _state;

    /// <summary>
    /// Arms the timer for <paramref name="deadline"/> (a wheel tick); <paramref name="onFired"/> runs with
    /// <paramref name="state"/> when it fires (possibly on this thread, before this returns) and must call
    /// <see cref="OnFired"/>. The previous use must be settled, or this the first: claimed, and, if a canceller claimed
    /// it after it fired (<see cref="TimerCancel.CancelledAfterFiring"/>), its continuation has run. A continuation still
    /// to come would claim this use with its exchange (owners that are pooled wait for it with a hold of their own;
    /// <see cref="PeriodicTimerSource"/>, which re-arms in place, with a two-party handshake).
    /// </summary>
    public void Arm(TimerWheel wheel, long deadline, Action<object?> onFired, object state)
    {
        TimerNode node = Rent(wheel);
        wheel.Insert(node, deadline);
        Register(node, onFired, state);
    }

    /// <summary>
    /// As <see cref="Arm"/>, for <paramref name="delay"/> (finite, checked) from now: on a Spindle worker, into that
    /// worker's own shard of the wheel (<see cref="TimerWheel.Start"/>), as <c>Spindle.Delay</c> does.
    /// </summary>
    public void ArmAfter(TimerWheel wheel, TimeSpan delay, Action<object?> onFired, object state)
    {
        TimerNode node = Rent(wheel);
        wheel.Start(node, delay);
        Register(node, onFired, state);
    }

    /// <summary>Starts a use: a node of its own, not yet in the wheel.</summary>
    private TimerNode Rent(TimerWheel wheel)
    {
        Volatile.Write(ref _state, Idle);
        TimerNode node = TimerNode.Rent(wheel);
        _node = node;
        _token = node.Version;
        return node;
    }

    /// <summary>The node is in the wheel: registers the continuation, then marks the timer armed (see the remarks' arming order).</summary>
    private void Register(TimerNode node, Action<object?> onFired, object state)
    {
        node.OnCompleted(onFired, state, _token);
        // Fails only if the continuation already claimed the timer (it fired before this line): nothing left to cancel.
        Interlocked.CompareExchange(ref _state, Armed, Idle);
    }

    /// <summary>
    /// Called by the continuation. True if the timer was still unclaimed: the timeout decides, and the node has been
    /// read; <paramref name="stopped"/> is then the wheel's disposal exception if that is what completed it (null if it
    /// fired). False if a canceller claimed it first (and reads the node itself).
    /// </summary>
    public bool OnFired(out Exception? stopped)
    {
#if DEBUG
        TestHookBeforeFiredClaim?.Invoke();
#endif
        stopped = null;
        if (Interlocked.Exchange(ref _state, Claimed) == Claimed)
        {
            return false;
        }
        stopped = Consume();
        return true;
    }

#if DEBUG
    /// <summary>
    /// Tests only (a Debug build): runs on the thread of a timer's continuation, before it claims the timer: the window in
    /// which the node has fired and a canceller may still claim it (<see cref="TimerCancel.CancelledAfterFiring"/>).
    /// </summary>
    internal static Action? TestHookBeforeFiredClaim;
#endif

    /// <summary>Cancels the timer, unless it fired and its continuation claimed it first. Any thread; any number of times.</summary>
    public TimerCancel TryCancel()
    {
        int seen = Interlocked.CompareExchange(ref _state, Claimed, Armed);
        if (seen != Armed)
        {
            return seen == Claimed ? TimerCancel.TooLate : TimerCancel.NotArmed;
        }
        TimerNode node = _node!;
        if (node.TryCancelQuietly())
        {
            _node = null;
            return TimerCancel.Cancelled;
        }
        Consume(); // it fired (or the wheel was disposed) just now; its continuation will find the claim taken
        return TimerCancel.CancelledAfterFiring;
    }

    /// <summary>Reads the node once (recycling it), by the claimant only. Returns the disposal exception, if any.</summary>
    private Exception? Consume()
    {
        TimerNode node = _node!;
        _node = null;
        try
        {
            node.GetResult(_token);
            return null;
        }
        catch (OperationCanceledException ex)
        {
            return ex; // TimerWheel.Dispose cancelled every pending timer
        }
    }
}

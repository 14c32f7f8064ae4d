using System;
using System.Threading;

namespace SpindleLib;

/// <summary>
/// The timer of one <see cref="Signal.WaitAsync(TimeSpan, CancellationToken)"/>: a pooled object that times out the
/// wait it was started for, and only that one, unless the wait ends first.
/// </summary>
/// <remarks>
/// <para><b>One per wait, two holders.</b> The signal holds it until the wait is over (read, let go of by a
/// combinator, or replaced by the next wait: <see cref="Stop"/>), and its timer's continuation holds it until it has
/// run. Whichever drops the last hold clears it and returns it to its pool, so a continuation that runs late (the
/// wait ended by a set as the timer fired) never finds the object reused by a later wait, as it would if the signal
/// re-armed one timer of its own in place. This is the reference count a timed WhenAll keeps for its timer
/// (<see cref="Combinator{TResult}"/>).</para>
/// <para><b>One outcome.</b> The timer's continuation and <see cref="Stop"/> claim the timer through
/// <see cref="TimeoutTimer"/> (exactly one of them reads the node). A continuation that claims it times the wait out
/// through the signal's core, whose CAS (for this wait's version only, and only while it is pending) decides against
/// a set, a cancellation and a combinator letting go of the wait: exactly one of them ends it.</para>
/// </remarks>
internal sealed class SignalTimeout : IPoolNode<SignalTimeout>
{
    private static readonly Action<object?> s_onFired = static o => ((SignalTimeout)o!).OnFired();

    private Signal? _signal;
    private short _wait;
    private TimeoutTimer _timer;

    // 2 from Start: the signal's and the timer continuation's. Invariant: each holder drops its hold exactly once (the
    // continuation when it has run), and only the last drop touches the object afterwards. When the cancel took the node
    // before it could run (Stop, TimerCancel.Cancelled), the continuation never will: Stop then drops both holds at once,
    // as the only holder left, with a plain store (no Release, so no hook either).
    private int _holds;
    private SignalTimeout? _poolNext;

    ref SignalTimeout? IPoolNode<SignalTimeout>.Next => ref _poolNext;

    /// <summary>Arms a timeout of <paramref name="timeout"/> on <paramref name="wheel"/> for wait <paramref name="wait"/> of <paramref name="signal"/>.</summary>
    public static SignalTimeout Start(Signal signal, short wait, TimerWheel wheel, TimeSpan timeout)
    {
        SignalTimeout t = ObjectPool<SignalTimeout>.TryRent() ?? new SignalTimeout();
        t._signal = signal;
        t._wait = wait;
        t._holds = 2;
        // Last: the continuation may run as soon as the node is in the wheel (on another thread, or on this one).
        t._timer.ArmAfter(wheel, timeout, s_onFired, t);
        return t;
    }

    private void OnFired()
    {
        if (_timer.OnFired(out Exception? stopped))
        {
            // Claimed: this continuation read the node. The wait times out unless it has ended already (a set, a
            // cancellation, or a combinator that let go of it): the signal's core decides.
            _signal!.TimeOut(_wait, stopped);
        }
        Release();
    }

    /// <summary>
    /// The wait is over: cancels the timer unless it has fired (then its continuation finds the wait ended, or ended
    /// it), and drops the signal's hold. Called once per start, by the signal.
    /// </summary>
    public void Stop()
    {
        if (_timer.TryCancel() == TimerCancel.Cancelled)
        {
            // The continuation will never run, so the caller holds the object alone: both holds go at once, with no
            // interlocked step (the wait answered in time, the common case; two decrements before).
            _holds = 0;
            Recycle();
            return;
        }
        Release();
    }

    private void Release()
    {
#if DEBUG
        TestHookBeforeRelease?.Invoke(this);
#endif
        if (Interlocked.Decrement(ref _holds) == 0)
        {
            Recycle();
        }
    }

    /// <summary>Clears this object and returns it to its pool: no hold is left.</summary>
    private void Recycle()
    {
        _signal = null;
        _wait = 0;
        _timer = default;
        ObjectPool<SignalTimeout>.Return(this);
    }

#if DEBUG
    /// <summary>
    /// Tests only: runs on a holder's thread as it drops its hold, before the decrement: the timer's continuation and the
    /// wait's end (<see cref="Stop"/>) may drop theirs at once, on two threads (<c>SignalTimeoutReleaseRaceTests</c>). Not
    /// run when <see cref="Stop"/> drops both holds at once (the cancel took the node): nobody else holds it then.
    /// </summary>
    internal static Action<SignalTimeout>? TestHookBeforeRelease;
#endif
}

using System;
using System.Diagnostics;
using System.Runtime.ExceptionServices;
using System.Threading;
using System.Threading.Tasks.Sources;

namespace SpindleLib;

/// <summary>
/// The machinery behind <see cref="SpindlePeriodicTimer"/>: the source of its waits (one at a time, so one reusable
/// core), and the arithmetic of its ticks.
/// </summary>
/// <remarks>
/// <para><b>Ticks are computed, not kept.</b> Tick k (k = 1, 2, ...) falls at wheel tick
/// <c>start + ceil(k * period)</c> in milliseconds. The timer remembers only the index of the next tick it has not
/// delivered. A wait whose tick has already passed returns true at once and skips every other passed tick (so missed
/// ticks coalesce into one); a wait whose tick is still to come arms one node at that absolute deadline. So nothing
/// drifts, and nothing is in the wheel between waits.</para>
/// <para><b>One outcome per wait.</b> Three things may end a pending wait: its node firing (true), its token (canceled)
/// and Dispose (false). Each first claims the wait's <see cref="TimeoutTimer"/>; only the claimant completes the core,
/// so exactly one of them does, and a cancelled or disposed wait leaves nothing in the wheel. A canceller that claims
/// just after the node fired completes the wait only once the node's continuation has run too (see
/// <see cref="ArriveLate()"/>), so no continuation of one wait is still to come when the consumer starts the next. A wait ended by its token
/// does not deliver its tick, so the next wait finds it passed and returns at once, as the BCL's timer remembers it.</para>
/// <para><b>Let go of.</b> A combinator that no longer waits (a WhenAny the wait lost, a timeout) is a fourth claimant
/// (<see cref="IDetachableSource.TryDetach"/>): once it holds the claim, the node leaves the wheel, the waiter is withdrawn and the wait
/// ends without delivering its tick, as a cancelled one does, so the next wait can start at once and finds the tick
/// when it has passed. If the node fired first, the wait stays the combinator's to read, as before.</para>
/// <para><b>Locking.</b> A small lock guards the consumer's state (the pending flag, the next tick, disposal). Nothing
/// that can run a continuation runs under it (it only reads the clock): on a manual clock, arming a timer may run
/// other timers' continuations on this thread, and completing a wait runs the consumer's.</para>
/// </remarks>
[StackTraceHidden]
internal sealed class PeriodicTimerSource : ISpindleSource<bool>, IQuietSource<bool>, IDetachableSource, ILazyCanceledSource
{
    private static readonly Action<object?> s_onTick = static o => ((PeriodicTimerSource)o!).OnTick();
#if NET
    private static readonly Action<object?, CancellationToken> s_onCanceled = static (o, ct) => ((PeriodicTimerSource)o!).OnCanceled(ct);
#else
    private static readonly Action<object?> s_onCanceled = static o => ((PeriodicTimerSource)o!).OnCanceled(((PeriodicTimerSource)o!)._waitToken);
#endif

    private readonly object _lock = new();
    private readonly TimerWheel _wheel;
    private readonly TimeSpan _period;
    private readonly long _startTick;
    private SourceCore<bool> _core;
    private TimeoutTimer _timer;
    private CancellationToken _waitToken;
    private CancellationTokenRegistration _registration;
    private long _nextTick = 1; // the index of the next tick not yet delivered
    private int _lateArrivals; // see ArriveLate
    private bool _lateCanceled;
    private CancellationToken _lateToken;
    private long _armedTick;
    private bool _waiting;
    private volatile bool _disposed;

    public PeriodicTimerSource(TimerWheel wheel, TimeSpan period)
    {
        _wheel = wheel;
        _period = period;
        _startTick = wheel.DeadlineAfter(TimeSpan.Zero); // now, rounded up: no tick can be early
    }

    public TimeSpan Period => _period;

    /// <summary>
    /// The wheel tick of tick <paramref name="k"/>: start + k * period, rounded up to the millisecond. Never due
    /// (<see cref="WheelShard.Never"/>) for an infinite period, and past the range of a long, which no clock reaches (a
    /// <see cref="ManualClock"/> advanced to its end): that product wrapped to a tick in the past, and every wait returned
    /// true at once.
    /// </summary>
    private long DeadlineOf(long k)
    {
        if (_period == Timeout.InfiniteTimeSpan)
        {
            return WheelShard.Never; // a timer that never ticks: its waits end with their token or a Dispose
        }
        long ms = k > long.MaxValue / _period.Ticks ? WheelShard.Never : TimerWheel.TickAtOrAfter(0, k * _period.Ticks);
        return ms == WheelShard.Never || _startTick > WheelShard.Never - ms ? WheelShard.Never : _startTick + ms;
    }

    /// <summary>The first tick after wheel tick <paramref name="now"/>: the least k with start + ceil(k * period) > now.</summary>
    private long FirstTickAfter(long now) => (now - _startTick) * TimeSpan.TicksPerMillisecond / _period.Ticks + 1;

    public SpindleTask<bool> Wait(CancellationToken cancellationToken)
    {
        long deadline;
        short token;
        lock (_lock)
        {
            if (_disposed)
            {
                // As the BCL's PeriodicTimer: a stopped timer answers every wait with false, so a loop whose timer is
                // disposed from another thread between two waits (a hosted service's StopAsync) ends, rather than throws;
                // a token already cancelled still wins, as there.
                return cancellationToken.IsCancellationRequested ? SpindleTask.FromCanceled<bool>(cancellationToken) : new SpindleTask<bool>(false);
            }
            if (_wheel.IsDisposed)
            {
                throw new ObjectDisposedException(nameof(TimerWheel),
                    "The TimerWheel that drives this SpindlePeriodicTimer has been disposed, so it can never tick again. " +
                    "Dispose the timer with its wheel, or create a new SpindlePeriodicTimer on a wheel that is still in use (TimerWheel.Default is never disposed).");
            }
            if (_waiting)
            {
                ThrowHelper.ThrowInvalidOperation(
                    "A wait on this SpindlePeriodicTimer is already pending. Only one consumer may wait at a time: await each WaitForNextTickAsync before calling it again. " +
                    "If the earlier wait was given a combinator of its own (WithCancellation, WithTimeout) and that combined task lost a WhenAny, the combined " +
                    "task still holds the wait until the tick (a WhenAny lets go of a tick wait, not of a combined task): pass the token to " +
                    "WaitForNextTickAsync(cancellationToken) itself, and race that.");
            }
            if (cancellationToken.IsCancellationRequested)
            {
                return SpindleTask.FromCanceled<bool>(cancellationToken);
            }
            long now = _wheel.NowTick();
            if (DeadlineOf(_nextTick) <= now)
            {
                _nextTick = FirstTickAfter(now); // the ticks missed since the last wait count as this one
                return new SpindleTask<bool>(true);
            }
            _waiting = true;
            _armedTick = _nextTick;
            deadline = DeadlineOf(_nextTick);
            _core.Reset();
            token = _core.Version;
        }
        _timer.Arm(_wheel, deadline, s_onTick, this);
        // Dekker with Dispose: it sets _disposed and then tries to claim the timer; arming published Armed (a full fence)
        // before this read. So either Dispose's claim sees the timer armed, or this sees Dispose; both may try, one claims.
        if (_disposed)
        {
            Stop();
        }
        else if (cancellationToken.CanBeCanceled)
        {
            _waitToken = cancellationToken;
            _registration = CancellationRegistrations.Register(cancellationToken, s_onCanceled, this);
        }
        return new SpindleTask<bool>(this, token);
    }

    private void OnTick()
    {
#if DEBUG
        TestHookBeforeTickClaim?.Invoke(this);
#endif
        if (!_timer.OnFired(out Exception? stopped))
        {
            ArriveLate(); // a cancellation or Dispose claimed the wait just after this node fired
            return;
        }
        if (stopped is not null)
        {
            _core.TrySetResult(false); // the wheel was disposed: this timer can never tick again
            return;
        }
        lock (_lock)
        {
            _nextTick = _armedTick + 1; // before the consumer resumes (below, maybe inline) and waits again
        }
        _core.TrySetResult(true);
    }

    private void OnCanceled(CancellationToken cancellationToken)
    {
#if DEBUG
        TestHookOnCanceled?.Invoke(this);
#endif
        switch (_timer.TryCancel())
        {
            case TimerCancel.Cancelled:
                // Lazily: the exception is built only for a reader that throws it, from _waitToken (the token registered,
                // which the read drops only after it has built it) (LazyCancellation).
                _core.TrySetCanceledLazily();
                break;
            case TimerCancel.CancelledAfterFiring:
                ArriveLate(canceled: true, cancellationToken);
                break;
        }
    }

    /// <summary>
    /// A combinator lets go of the pending wait (see the remarks): claims it as a cancellation would, withdraws the waiter
    /// and ends the wait without delivering its tick. When the node fired first (or another claimant won), the waiter stays
    /// registered and reads the wait's outcome when it completes.
    /// </summary>
    DetachOutcome IDetachableSource.TryDetach(DirectWaiter waiter)
    {
        switch (_timer.TryCancel())
        {
            case TimerCancel.Cancelled:
                if (_core.TryWithdrawWaiter(waiter) != DetachOutcome.Detached)
                {
                    // Not registered yet: the combinator met the slot between its publication and its registration
                    // (LetGoOfLosers during AddSource). The claim is taken, so the wait ends as a cancelled one, without
                    // its tick; the registrant then finds it completed and reads that cancellation, which is not reported
                    // (LetGoDuringRegistrationTests). Lazily, as canceled by no token (KeepCanceled).
                    KeepCanceled(default);
                    return DetachOutcome.NotWaiting;
                }
                EndWithdrawnWait();
                return DetachOutcome.Detached;
            case TimerCancel.CancelledAfterFiring:
                ArriveLate(canceled: true, default); // the tick is not delivered; the waiter reads a cancellation, which is not reported
                return DetachOutcome.NotWaiting;
            default:
                return DetachOutcome.NotWaiting;
        }
    }

    /// <summary>A combinator settled at the call lets go of a wait it never registered on: as <see cref="IDetachableSource.TryDetach"/>.</summary>
    bool IDetachableSource.TryAbandon(short token)
    {
        if (!_core.IsPendingWithoutWaiter(token))
        {
            return false;
        }
        switch (_timer.TryCancel())
        {
            case TimerCancel.Cancelled:
                EndWithdrawnWait();
                return true;
            case TimerCancel.CancelledAfterFiring:
                ArriveLate(canceled: true, default);
                return false; // the caller forgets it: read when the node's continuation arrives
            default:
                return false;
        }
    }

    /// <summary>
    /// Ends a wait whose claim a combinator took and whose waiter left: the core is Pending with nobody to run, so the next
    /// wait resets it. As <see cref="ReadQuietly"/> does after a read: the registration is dropped, and the timer is free.
    /// </summary>
    private void EndWithdrawnWait()
    {
        CancellationRegistrations.Drop(ref _registration);
        _waitToken = default;
        lock (_lock)
        {
            _waiting = false;
        }
    }

    /// <summary>The token that canceled the wait (<see cref="ILazyCanceledSource"/>): kept until the wait is read.</summary>
    CancellationToken ILazyCanceledSource.CanceledBy => _waitToken;

    /// <summary>
    /// Ends the wait as canceled by <paramref name="token"/> (default for a combinator's let-go) without building its
    /// exception, as the token's own claim does (<see cref="OnCanceled"/>): the token replaces <see cref="_waitToken"/>
    /// while the core is held, and a reader that throws builds the exception from it (<see cref="LazyCancellation"/>); one
    /// that reads the cancellation as a value builds nothing. For a claimant other than the token's callback (a let-go, or
    /// the second arrival after a late claim), which alone completes the wait: a callback of the wait's token that runs
    /// meanwhile finds the claim taken, and uses no token of this field's.
    /// </summary>
    private void KeepCanceled(CancellationToken token) => _core.TrySetCanceledKeepingToken(ref _waitToken, token);

    /// <summary>Ends a pending wait with false, if nothing else has ended it.</summary>
    private void Stop()
    {
        switch (_timer.TryCancel())
        {
            case TimerCancel.Cancelled:
                _core.TrySetResult(false);
                break;
            case TimerCancel.CancelledAfterFiring:
                ArriveLate(canceled: false, default);
                break;
        }
    }

    /// <summary>
    /// A canceller (the token or Dispose) claimed the wait just after its node fired: the node's continuation has been
    /// dispatched and will still run (and find the claim taken). The wait must not complete before it has: the consumer
    /// may wait again at once, re-arming <see cref="_timer"/>, and the stale continuation's claim (an exchange) would
    /// then take the new wait, consuming its node (or reading none) and never completing it. So the canceller records
    /// the outcome and arrives here, the continuation arrives here, and the second of the two completes the wait (a
    /// two-party barrier, as a reference count of two: the same handshake as <see cref="TimerNode"/>'s releases).
    /// </summary>
    private void ArriveLate(bool canceled, CancellationToken token)
    {
        _lateCanceled = canceled;
        _lateToken = token;
        ArriveLate();
    }

    /// <summary>The node's continuation, or a canceller that has recorded its outcome, arrives (see above).</summary>
    private void ArriveLate()
    {
#if DEBUG
        TestHookBeforeLateArrival?.Invoke(this);
#endif
        // The canceller's outcome fields are written before its increment (a full fence), and read after the second one.
        if (Interlocked.Increment(ref _lateArrivals) != 2)
        {
            return;
        }
        _lateArrivals = 0; // both have arrived: nothing else touches it before the next wait's late claim
        if (_lateCanceled)
        {
            CancellationToken token = _lateToken;
            _lateToken = default;
            KeepCanceled(token);
        }
        else
        {
            _core.TrySetResult(false);
        }
    }

#if DEBUG
    /// <summary>
    /// Tests only (a Debug build): run by the node's continuation before it claims the wait (<c>PeriodicTimerLateArrivalRaceTests</c>
    /// holds it there while a cancellation claims the wait after the node fired).
    /// </summary>
    internal static Action<PeriodicTimerSource>? TestHookBeforeTickClaim;

    /// <summary>Tests only (a Debug build): run by the wait's token callback as it starts (<c>PeriodicTimerRegistrationTests</c> holds it in flight).</summary>
    internal static Action<PeriodicTimerSource>? TestHookOnCanceled;

    /// <summary>Tests only (a Debug build): run by each party of the late handshake just before its increment (<see cref="ArriveLate()"/>).</summary>
    internal static Action<PeriodicTimerSource>? TestHookBeforeLateArrival;
#endif

    public void Dispose()
    {
        lock (_lock)
        {
            if (_disposed)
            {
                return;
            }
            _disposed = true;
        }
        Stop();
    }

    public bool GetResult(short token)
    {
        bool result = ReadQuietly(token, out ExceptionDispatchInfo? error);
        if (error is not null)
        {
            throw LazyCancellation.ToThrow(error);
        }
        return result;
    }

    /// <summary>As <see cref="GetResult"/>, with the failure (a canceled wait) handed back instead of thrown (<see cref="IQuietSource"/>).</summary>
    public bool ReadQuietly(short token, out ExceptionDispatchInfo? error)
    {
        bool result = _core.Consume(token, this, out error);
        // Waits for a cancellation callback in flight, so none can reach the next wait's timer.
        CancellationRegistrations.Drop(ref _registration);
        _waitToken = default;
        lock (_lock)
        {
            _waiting = false;
        }
        return result;
    }

    ExceptionDispatchInfo? IQuietSource.ReadQuietly(short token)
    {
        ReadQuietly(token, out ExceptionDispatchInfo? error);
        return error;
    }

    /// <summary>
    /// The read of a <see cref="SpindleTask"/>'s awaiter: the same read and throw as <see cref="GetResult"/>, written out
    /// rather than a call to it, so that a cancellation it throws is thrown at this frame, whatever the JIT inlines
    /// (<see cref="LazyCancellation.ToThrow"/>).
    /// </summary>
    void IValueTaskSource.GetResult(short token)
    {
        ReadQuietly(token, out ExceptionDispatchInfo? error);
        if (error is not null)
        {
            throw LazyCancellation.ToThrow(error);
        }
    }

    public SpindleTaskStatus GetStatus(short token) => _core.GetStatus(token);

    ValueTaskSourceStatus IValueTaskSource.GetStatus(short token) => (ValueTaskSourceStatus)_core.GetStatus(token);

    ValueTaskSourceStatus IValueTaskSource<bool>.GetStatus(short token) => (ValueTaskSourceStatus)_core.GetStatus(token);

    public void OnCompleted(Action<object?> continuation, object? state, short token) => _core.OnCompleted(continuation, state, token);

    public void OnCompleted(Action<object?> continuation, object? state, short token, ValueTaskSourceOnCompletedFlags flags)
        => _core.OnCompleted(continuation, state, token, flags);
}

using System;
using System.Threading;

namespace SpindleLib;

/// <summary>Which loop time a <see cref="FrameLoop"/> delay is measured in.</summary>
public enum FrameTimeKind
{
    /// <summary><see cref="FrameLoop.Time"/>: runs at <see cref="FrameLoop.TimeScale"/>, and stands still while it is 0.</summary>
    Scaled = 0,

    /// <summary><see cref="FrameLoop.UnscaledTime"/>: the frames' delta times as given, whatever the time scale.</summary>
    Unscaled = 1,
}

public sealed partial class FrameLoop
{
    private static readonly Func<Func<bool>, bool> s_invokePredicate = static predicate => predicate();

    /// <summary>Resumes at the next run of <see cref="Update"/> (see <see cref="Yield(FramePhase, CancellationToken)"/>).</summary>
    /// <param name="cancellationToken">Cancels the wait: it completes at once with <see cref="OperationCanceledException"/>.</param>
    public FrameAwaitable Yield(CancellationToken cancellationToken = default) => Await(Update, FrameAwaitKind.Yield, cancellationToken);

    /// <summary>
    /// Resumes at the next run of <paramref name="phase"/>: later in this frame if the phase has not started in it yet
    /// (or if a host runs it again in this frame, see <see cref="RunPhase"/>), else in the next frame. From another
    /// thread: in the phase of the next frame to begin.
    /// </summary>
    /// <param name="phase">The phase to resume in.</param>
    /// <param name="cancellationToken">Cancels the wait: it completes at once with <see cref="OperationCanceledException"/>.</param>
    /// <exception cref="ArgumentNullException"><paramref name="phase"/> is null.</exception>
    /// <exception cref="ArgumentException"><paramref name="phase"/> belongs to another loop.</exception>
    public FrameAwaitable Yield(FramePhase phase, CancellationToken cancellationToken = default)
    {
        CheckPhase(phase, nameof(phase));
        return Await(phase, FrameAwaitKind.Yield, cancellationToken);
    }

    /// <summary>Resumes in <see cref="Update"/> of the next frame (see <see cref="NextFrame(FramePhase, CancellationToken)"/>).</summary>
    /// <param name="cancellationToken">Cancels the wait: it completes at once with <see cref="OperationCanceledException"/>.</param>
    public FrameAwaitable NextFrame(CancellationToken cancellationToken = default) => Await(Update, FrameAwaitKind.NextFrame, cancellationToken);

    /// <summary>
    /// Resumes in <paramref name="phase"/> of the next frame: awaited during frame N, or between frames N and N + 1, it
    /// resumes at the phase's first run in frame N + 1, even if the phase has not yet run in frame N, and even if a host
    /// runs the phase more than once a frame. From another thread: in the phase of the next frame to begin.
    /// </summary>
    /// <param name="phase">The phase to resume in.</param>
    /// <param name="cancellationToken">Cancels the wait: it completes at once with <see cref="OperationCanceledException"/>.</param>
    /// <exception cref="ArgumentNullException"><paramref name="phase"/> is null.</exception>
    /// <exception cref="ArgumentException"><paramref name="phase"/> belongs to another loop.</exception>
    public FrameAwaitable NextFrame(FramePhase phase, CancellationToken cancellationToken = default)
    {
        CheckPhase(phase, nameof(phase));
        return Await(phase, FrameAwaitKind.NextFrame, cancellationToken);
    }

    /// <summary>
    /// Resumes on the loop thread: at once if already on it, else (a hand-off from another thread) in
    /// <see cref="Update"/> of the next frame to begin.
    /// </summary>
    /// <param name="cancellationToken">Cancels the hand-off: it completes at once, on the cancelling thread, with <see cref="OperationCanceledException"/>.</param>
    public FrameAwaitable SwitchTo(CancellationToken cancellationToken = default) => SwitchTo(Update, cancellationToken);

    /// <summary>
    /// Resumes on the loop thread: at once if already on it (in whatever phase is running), else (a hand-off from another
    /// thread, never lost) in <paramref name="phase"/> of the next frame to begin. To leave the loop thread again, await
    /// <see cref="Spindle.SwitchToWorker"/>.
    /// </summary>
    /// <param name="phase">The phase a hand-off resumes in.</param>
    /// <param name="cancellationToken">Cancels the hand-off: it completes at once, on the cancelling thread, with <see cref="OperationCanceledException"/>.</param>
    /// <exception cref="ArgumentNullException"><paramref name="phase"/> is null.</exception>
    /// <exception cref="ArgumentException"><paramref name="phase"/> belongs to another loop.</exception>
    public FrameAwaitable SwitchTo(FramePhase phase, CancellationToken cancellationToken = default)
    {
        CheckPhase(phase, nameof(phase));
        if (cancellationToken.IsCancellationRequested)
        {
            return new FrameAwaitable(TimerNode.CanceledAtOnce(cancellationToken));
        }
        if (!cancellationToken.CanBeCanceled)
        {
            return new FrameAwaitable(phase, FrameAwaitKind.SwitchTo);
        }
        return IsLoopThread ? default : new FrameAwaitable(StartWaiter(phase, FrameAwaitKind.SwitchTo, cancellationToken));
    }

    /// <summary>Resumes in <see cref="Update"/> of frame <see cref="FrameCount"/> + <paramref name="frameCount"/> (see <see cref="DelayFrame(int, FramePhase, CancellationToken)"/>).</summary>
    /// <param name="frameCount">How many frames to wait: 0 is <see cref="Yield(CancellationToken)"/>, 1 is <see cref="NextFrame(CancellationToken)"/>.</param>
    /// <param name="cancellationToken">Cancels the wait: it completes at once with <see cref="OperationCanceledException"/>.</param>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="frameCount"/> is negative.</exception>
    public SpindleTask DelayFrame(int frameCount, CancellationToken cancellationToken = default) => DelayFrame(frameCount, Update, cancellationToken);

    /// <summary>
    /// Resumes in <paramref name="phase"/> of frame <see cref="FrameCount"/> + <paramref name="frameCount"/>, counted from
    /// the frame the call is made in (or the last frame begun, between frames or from another thread). 0 is
    /// <see cref="Yield(FramePhase, CancellationToken)"/> and 1 is <see cref="NextFrame(FramePhase, CancellationToken)"/>.
    /// Longer waits are never polled: one of fewer than 64 frames started in loop code (inside a frame or phase) sits in
    /// the bucket of the frame it falls due in, any other in a timer wheel that counts frames. Waits due in the same
    /// frame resume in the order they were started, with the loop's delays due then.
    /// </summary>
    /// <param name="frameCount">How many frames to wait.</param>
    /// <param name="phase">The phase to resume in.</param>
    /// <param name="cancellationToken">Cancels the wait: it completes at once with <see cref="OperationCanceledException"/>.</param>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="frameCount"/> is negative.</exception>
    /// <exception cref="ArgumentNullException"><paramref name="phase"/> is null.</exception>
    /// <exception cref="ArgumentException"><paramref name="phase"/> belongs to another loop.</exception>
    public SpindleTask DelayFrame(int frameCount, FramePhase phase, CancellationToken cancellationToken = default)
    {
        if (frameCount < 0)
        {
            throw new ArgumentOutOfRangeException(nameof(frameCount), frameCount, "A frame count cannot be negative: pass 0 to yield, 1 for the next frame.");
        }
        CheckPhase(phase, nameof(phase));
        if (cancellationToken.IsCancellationRequested)
        {
            return TimerNode.CanceledAtOnce(cancellationToken);
        }
        return frameCount switch
        {
            0 => StartWaiter(phase, FrameAwaitKind.Yield, cancellationToken),
            1 => StartWaiter(phase, FrameAwaitKind.NextFrame, cancellationToken),
            // Inside a step, a wait shorter than the ring goes in the bucket of its frame (FrameLoop.FrameRing.cs).
            _ when frameCount < FrameRingSize && IsInsideStep => StartFrameDelay(phase, frameCount, cancellationToken),
            // The frame clock reads one millisecond per frame, so the wheel's ticks are frames.
            _ => StartTimer(phase, Wheel(_frameClock, ref _frameWheel), TimeSpan.FromTicks(frameCount * TimeSpan.TicksPerMillisecond), cancellationToken),
        };
    }

    /// <summary>Resumes in <see cref="Update"/> once scaled loop time has moved on by <paramref name="delay"/> (see <see cref="Delay(TimeSpan, FrameTimeKind, FramePhase, CancellationToken)"/>).</summary>
    /// <param name="delay">The delay in loop time (<see cref="Time"/>).</param>
    /// <param name="cancellationToken">Cancels the wait: it completes at once with <see cref="OperationCanceledException"/>.</param>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="delay"/> is negative (other than <see cref="Timeout.InfiniteTimeSpan"/>) or longer than <see cref="TimerWheel.MaxDelay"/>.</exception>
    public SpindleTask Delay(TimeSpan delay, CancellationToken cancellationToken = default) => Delay(delay, FrameTimeKind.Scaled, Update, cancellationToken);

    /// <summary>Resumes in <see cref="Update"/> once loop time of the given kind has moved on by <paramref name="delay"/> (see <see cref="Delay(TimeSpan, FrameTimeKind, FramePhase, CancellationToken)"/>).</summary>
    /// <param name="delay">The delay in loop time.</param>
    /// <param name="time">Scaled (<see cref="Time"/>) or unscaled (<see cref="UnscaledTime"/>) loop time.</param>
    /// <param name="cancellationToken">Cancels the wait: it completes at once with <see cref="OperationCanceledException"/>.</param>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="delay"/> is negative (other than <see cref="Timeout.InfiniteTimeSpan"/>) or longer than <see cref="TimerWheel.MaxDelay"/>, or <paramref name="time"/> is not a defined value.</exception>
    public SpindleTask Delay(TimeSpan delay, FrameTimeKind time, CancellationToken cancellationToken = default) => Delay(delay, time, Update, cancellationToken);

    /// <summary>
    /// Resumes in <paramref name="phase"/> of the first frame that begins with loop time at or past the deadline: the
    /// loop time at the call (the current frame's start) plus <paramref name="delay"/>, to the tick (not rounded to the
    /// wheel's millisecond: with 1/60 s frames, a delay of <see cref="FixedDeltaTime"/> resumes in the next frame).
    /// Loop time moves only with frames, so with 10 ms frames a 35 ms delay started during frame N resumes in frame N + 4.
    /// The delay is a timer in a wheel on the loop's clock: nothing polls it, and the frame it falls due in queues it.
    /// Delays due in the same frame resume in the order they were started. <see cref="TimeSpan.Zero"/> is
    /// <see cref="Yield(FramePhase, CancellationToken)"/>; <see cref="Timeout.InfiniteTimeSpan"/> waits until cancelled.
    /// A combinator that lets go of the delay (a WhenAny it lost, a WhenAll's token or timeout, a WithTimeout) ends it,
    /// and its timer leaves the wheel at the next frame's pass, as a cancelled one does.
    /// </summary>
    /// <param name="delay">The delay in loop time.</param>
    /// <param name="time">Scaled (<see cref="Time"/>) or unscaled (<see cref="UnscaledTime"/>) loop time.</param>
    /// <param name="phase">The phase to resume in.</param>
    /// <param name="cancellationToken">Cancels the wait: it completes at once with <see cref="OperationCanceledException"/>, and its timer leaves the wheel.</param>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="delay"/> is negative (other than <see cref="Timeout.InfiniteTimeSpan"/>) or longer than <see cref="TimerWheel.MaxDelay"/>, or <paramref name="time"/> is not a defined value.</exception>
    /// <exception cref="ArgumentNullException"><paramref name="phase"/> is null.</exception>
    /// <exception cref="ArgumentException"><paramref name="phase"/> belongs to another loop.</exception>
    public SpindleTask Delay(TimeSpan delay, FrameTimeKind time, FramePhase phase, CancellationToken cancellationToken = default)
    {
        _ = TimerWheel.IsFiniteDelay(delay);
        if (time != FrameTimeKind.Scaled && time != FrameTimeKind.Unscaled)
        {
            throw new ArgumentOutOfRangeException(nameof(time), time, "Pass FrameTimeKind.Scaled or FrameTimeKind.Unscaled.");
        }
        CheckPhase(phase, nameof(phase));
        if (cancellationToken.IsCancellationRequested)
        {
            return TimerNode.CanceledAtOnce(cancellationToken);
        }
        if (delay == TimeSpan.Zero)
        {
            return StartWaiter(phase, FrameAwaitKind.Yield, cancellationToken);
        }
        return time == FrameTimeKind.Scaled
            ? StartLoopTimeDelay(phase, _scaledClock, ref _scaledWheel, delay, cancellationToken)
            : StartLoopTimeDelay(phase, _unscaledClock, ref _unscaledWheel, delay, cancellationToken);
    }

    /// <summary>
    /// Starts a delay in loop time that resumes in the first frame beginning at or past its exact deadline, the clock's
    /// time at the call plus <paramref name="delay"/>, to the tick. The wheel counts whole milliseconds and rounds a
    /// deadline up, so a step that is not a whole number of milliseconds (1/60 s is 16.6666 ms) made a delay of one step
    /// resume a frame late, always. The timer is set for the deadline rounded down instead (it may fall due in a frame
    /// that begins less than a millisecond before the deadline), and the loop holds it from there until a frame begins at
    /// or past the deadline (<see cref="AddExpired"/>). A deadline within the clock's current millisecond needs no timer.
    /// </summary>
    private SpindleTask StartLoopTimeDelay(FramePhase phase, LoopClock clock, ref TimerWheel? field, TimeSpan delay, CancellationToken cancellationToken)
    {
        TimerWheel wheel = Wheel(clock, ref field);
        if (delay == Timeout.InfiniteTimeSpan)
        {
            return StartTimer(phase, wheel, delay, cancellationToken);
        }
        long now = clock.GetTimestamp();
        // No overflow: loop time stays below TimeSpan.MaxValue by more than TimerWheel.MaxDelay (s_maxLoopTicks).
        long due = now + delay.Ticks;
        long dueMs = due - due % TimeSpan.TicksPerMillisecond;
        if (dueMs > now)
        {
            return StartTimer(phase, wheel, TimeSpan.FromTicks(dueMs - now), cancellationToken, clock, due);
        }
        // Due before the clock's next millisecond: straight to the loop's hold, which each frame checks.
        PhaseWaiter waiter = RentTimedWaiter(phase, cancellationToken, clock, due, out short token);
        waiter.HoldForQueue();
        HoldUntilDue(waiter);
        waiter.RegisterCancellation();
        return new SpindleTask(waiter, token);
    }

    /// <summary>Resumes in <see cref="Update"/> once <paramref name="predicate"/> returns true (see <see cref="WaitUntil{TState}(TState, Func{TState, bool}, FramePhase, CancellationToken)"/>).</summary>
    /// <param name="predicate">The condition, evaluated on the loop thread.</param>
    /// <param name="cancellationToken">Cancels the wait: it completes at once with <see cref="OperationCanceledException"/>.</param>
    /// <exception cref="ArgumentNullException"><paramref name="predicate"/> is null.</exception>
    public SpindleTask WaitUntil(Func<bool> predicate, CancellationToken cancellationToken = default) => WaitUntil(predicate, Update, cancellationToken);

    /// <summary>Resumes in <paramref name="phase"/> once <paramref name="predicate"/> returns true (see <see cref="WaitUntil{TState}(TState, Func{TState, bool}, FramePhase, CancellationToken)"/>).</summary>
    /// <param name="predicate">The condition, evaluated on the loop thread.</param>
    /// <param name="phase">The phase that evaluates the predicate, and resumes the wait.</param>
    /// <param name="cancellationToken">Cancels the wait: it completes at once with <see cref="OperationCanceledException"/>.</param>
    /// <exception cref="ArgumentNullException"><paramref name="predicate"/> or <paramref name="phase"/> is null.</exception>
    /// <exception cref="ArgumentException"><paramref name="phase"/> belongs to another loop.</exception>
    public SpindleTask WaitUntil(Func<bool> predicate, FramePhase phase, CancellationToken cancellationToken = default)
    {
        CheckPredicate(predicate);
        return WaitFor(predicate, s_invokePredicate, phase, until: true, cancellationToken);
    }

    /// <summary>Resumes in <see cref="Update"/> once <paramref name="predicate"/>(<paramref name="state"/>) returns true (see <see cref="WaitUntil{TState}(TState, Func{TState, bool}, FramePhase, CancellationToken)"/>).</summary>
    /// <typeparam name="TState">The predicate's argument type.</typeparam>
    /// <param name="state">The predicate's argument: pass what it needs here, and make it static, so that no closure is allocated.</param>
    /// <param name="predicate">The condition, evaluated on the loop thread.</param>
    /// <param name="cancellationToken">Cancels the wait: it completes at once with <see cref="OperationCanceledException"/>.</param>
    /// <exception cref="ArgumentNullException"><paramref name="predicate"/> is null.</exception>
    public SpindleTask WaitUntil<TState>(TState state, Func<TState, bool> predicate, CancellationToken cancellationToken = default)
        => WaitUntil(state, predicate, Update, cancellationToken);

    /// <summary>
    /// Resumes in <paramref name="phase"/> once <paramref name="predicate"/>(<paramref name="state"/>) returns true. On
    /// the loop thread the predicate is checked at once (the wait completes without suspending if it holds); then, and
    /// from another thread, once per run of the phase, starting with its next run, until it holds. A predicate that
    /// throws faults the wait with its exception. The waiting task is re-queued at the back of the phase each frame. A
    /// combinator that lets go of the wait (a <see cref="SpindleTask.WhenAny(ReadOnlySpan{SpindleTask})"/> it lost, a
    /// WhenAll's token or timeout, <see cref="SpindleTask.WithTimeout(TimeSpan, TimerWheel, CancellationToken)"/>) ends it:
    /// the phase does not evaluate the predicate again, except that a run of the phase that had already reached the wait
    /// when another thread let go of it may still evaluate it once, and what it returns or throws is then dropped.
    /// </summary>
    /// <typeparam name="TState">The predicate's argument type.</typeparam>
    /// <param name="state">The predicate's argument: pass what it needs here, and make it static, so that no closure is allocated.</param>
    /// <param name="predicate">The condition, evaluated on the loop thread.</param>
    /// <param name="phase">The phase that evaluates the predicate, and resumes the wait.</param>
    /// <param name="cancellationToken">Cancels the wait: it completes at once with <see cref="OperationCanceledException"/>.</param>
    /// <exception cref="ArgumentNullException"><paramref name="predicate"/> or <paramref name="phase"/> is null.</exception>
    /// <exception cref="ArgumentException"><paramref name="phase"/> belongs to another loop.</exception>
    public SpindleTask WaitUntil<TState>(TState state, Func<TState, bool> predicate, FramePhase phase, CancellationToken cancellationToken = default)
    {
        CheckPredicate(predicate);
        return WaitFor(state, predicate, phase, until: true, cancellationToken);
    }

    /// <summary>Resumes in <see cref="Update"/> once <paramref name="predicate"/> returns false (see <see cref="WaitUntil{TState}(TState, Func{TState, bool}, FramePhase, CancellationToken)"/>).</summary>
    /// <param name="predicate">The condition, evaluated on the loop thread.</param>
    /// <param name="cancellationToken">Cancels the wait: it completes at once with <see cref="OperationCanceledException"/>.</param>
    /// <exception cref="ArgumentNullException"><paramref name="predicate"/> is null.</exception>
    public SpindleTask WaitWhile(Func<bool> predicate, CancellationToken cancellationToken = default) => WaitWhile(predicate, Update, cancellationToken);

    /// <summary>Resumes in <paramref name="phase"/> once <paramref name="predicate"/> returns false (see <see cref="WaitUntil{TState}(TState, Func{TState, bool}, FramePhase, CancellationToken)"/>).</summary>
    /// <param name="predicate">The condition, evaluated on the loop thread.</param>
    /// <param name="phase">The phase that evaluates the predicate, and resumes the wait.</param>
    /// <param name="cancellationToken">Cancels the wait: it completes at once with <see cref="OperationCanceledException"/>.</param>
    /// <exception cref="ArgumentNullException"><paramref name="predicate"/> or <paramref name="phase"/> is null.</exception>
    /// <exception cref="ArgumentException"><paramref name="phase"/> belongs to another loop.</exception>
    public SpindleTask WaitWhile(Func<bool> predicate, FramePhase phase, CancellationToken cancellationToken = default)
    {
        CheckPredicate(predicate);
        return WaitFor(predicate, s_invokePredicate, phase, until: false, cancellationToken);
    }

    /// <summary>Resumes in <see cref="Update"/> once <paramref name="predicate"/>(<paramref name="state"/>) returns false (see <see cref="WaitUntil{TState}(TState, Func{TState, bool}, FramePhase, CancellationToken)"/>).</summary>
    /// <typeparam name="TState">The predicate's argument type.</typeparam>
    /// <param name="state">The predicate's argument, so that no closure is needed.</param>
    /// <param name="predicate">The condition, evaluated on the loop thread.</param>
    /// <param name="cancellationToken">Cancels the wait: it completes at once with <see cref="OperationCanceledException"/>.</param>
    /// <exception cref="ArgumentNullException"><paramref name="predicate"/> is null.</exception>
    public SpindleTask WaitWhile<TState>(TState state, Func<TState, bool> predicate, CancellationToken cancellationToken = default)
        => WaitWhile(state, predicate, Update, cancellationToken);

    /// <summary>Resumes in <paramref name="phase"/> once <paramref name="predicate"/>(<paramref name="state"/>) returns false (see <see cref="WaitUntil{TState}(TState, Func{TState, bool}, FramePhase, CancellationToken)"/>).</summary>
    /// <typeparam name="TState">The predicate's argument type.</typeparam>
    /// <param name="state">The predicate's argument, so that no closure is needed.</param>
    /// <param name="predicate">The condition, evaluated on the loop thread.</param>
    /// <param name="phase">The phase that evaluates the predicate, and resumes the wait.</param>
    /// <param name="cancellationToken">Cancels the wait: it completes at once with <see cref="OperationCanceledException"/>.</param>
    /// <exception cref="ArgumentNullException"><paramref name="predicate"/> or <paramref name="phase"/> is null.</exception>
    /// <exception cref="ArgumentException"><paramref name="phase"/> belongs to another loop.</exception>
    public SpindleTask WaitWhile<TState>(TState state, Func<TState, bool> predicate, FramePhase phase, CancellationToken cancellationToken = default)
    {
        CheckPredicate(predicate);
        return WaitFor(state, predicate, phase, until: false, cancellationToken);
    }

    private static void CheckPredicate(Delegate predicate)
    {
        if (predicate is null)
        {
            ThrowHelper.ThrowArgumentNull(nameof(predicate));
        }
    }

    private FrameAwaitable Await(FramePhase phase, FrameAwaitKind kind, CancellationToken cancellationToken)
    {
        if (!cancellationToken.CanBeCanceled)
        {
            return new FrameAwaitable(phase, kind); // starts when awaited; no object at all for a Spindle async method
        }
        if (cancellationToken.IsCancellationRequested)
        {
            return new FrameAwaitable(TimerNode.CanceledAtOnce(cancellationToken));
        }
        return new FrameAwaitable(StartWaiter(phase, kind, cancellationToken));
    }

    /// <summary>Starts a wait for a phase's run (Yield, NextFrame or a hand-off) with a pooled waiter.</summary>
    internal SpindleTask StartWaiter(FramePhase phase, FrameAwaitKind kind, CancellationToken cancellationToken)
    {
        PhaseWaiter waiter = PhaseWaiter.Rent(phase, cancellationToken);
        short token = waiter.Version;
        if (!IsLoopThread)
        {
            waiter.CompleteOnceAwaited();
        }
        waiter.HoldForQueue();
        Schedule(waiter, phase, kind);
        waiter.RegisterCancellation();
        return new SpindleTask(waiter, token);
    }

    /// <summary>
    /// Rents the waiter of a timed wait (a delay, a frame delay), numbered in start order, with its exact deadline if it
    /// has one (<see cref="FrameWaiter.DueTicks"/>); one started off the loop thread completes only once awaited.
    /// </summary>
    private static PhaseWaiter RentTimedWaiter(FramePhase phase, CancellationToken cancellationToken, LoopClock? dueClock, long dueTicks,
        out short token)
    {
        PhaseWaiter waiter = PhaseWaiter.Rent(phase, cancellationToken);
        waiter.Sequence = phase.Loop.NextSequence();
        waiter.DueTicks = dueTicks;
        waiter.DueClock = dueClock;
        token = waiter.Version;
        if (!phase.Loop.IsLoopThread)
        {
            waiter.CompleteOnceAwaited();
        }
        return waiter;
    }

    private static SpindleTask StartTimer(FramePhase phase, TimerWheel wheel, TimeSpan delay, CancellationToken cancellationToken,
        LoopClock? dueClock = null, long dueTicks = 0)
    {
        PhaseWaiter waiter = RentTimedWaiter(phase, cancellationToken, dueClock, dueTicks, out short token);
        // The token goes to the wheel's timer, so that a cancellation also takes the timer out of the wheel; the waiter
        // listens to it itself only once the timer has expired (see FrameWaiter).
        // Inside a step of the loop, this thread owns the loop's wheels (their passes run only there) and links the timer
        // into its slot directly; any other thread pushes it to the wheel's inbox.
        SpindleTask timer = wheel.Delay(delay, cancellationToken, asOwner: phase.Loop.IsInsideStep);
#if DEBUG
        TestHookAfterTimerStarted?.Invoke(timer);
#endif
        waiter.WaitForTimer(timer);
        return new SpindleTask(waiter, token);
    }

#if DEBUG
    /// <summary>Tests only: runs in StartTimer once the delay's timer is in its wheel, before the waiter listens to it.</summary>
    internal static Action<SpindleTask>? TestHookAfterTimerStarted;
#endif

    private SpindleTask WaitFor<TState>(TState state, Func<TState, bool> predicate, FramePhase phase, bool until, CancellationToken cancellationToken)
    {
        CheckPhase(phase, nameof(phase));
        if (cancellationToken.IsCancellationRequested)
        {
            return TimerNode.CanceledAtOnce(cancellationToken);
        }
        if (IsLoopThread)
        {
            try
            {
                if (predicate(state) == until)
                {
                    return default;
                }
            }
            catch (Exception ex)
            {
                return SpindleTask.FromException(ex);
            }
        }
        PredicateWaiter<TState> waiter = PredicateWaiter<TState>.Rent(phase, state, predicate, until, cancellationToken);
        short token = waiter.Version;
        if (!IsLoopThread)
        {
            waiter.CompleteOnceAwaited();
        }
        waiter.HoldForQueue();
        Schedule(waiter, phase, FrameAwaitKind.Yield);
        waiter.RegisterCancellation();
        return new SpindleTask(waiter, token);
    }
}

using System;
using System.Diagnostics;
using System.Runtime.ExceptionServices;
using System.Threading;
using System.Threading.Tasks.Sources;

namespace SpindleLib;

/// <summary>
/// The pooled source behind a frame-loop await that needs one: an await with a cancelable token, a
/// <see cref="FrameLoop.DelayFrame(int, CancellationToken)"/>, a <see cref="FrameLoop.Delay(TimeSpan, CancellationToken)"/>,
/// a <see cref="FrameLoop.WaitUntil(Func{bool}, CancellationToken)"/>, or a frame await converted to a
/// <see cref="SpindleTask"/>. It is a work item, so a phase's queue holds it directly; the phase reaching it completes it.
/// </summary>
/// <remarks>
/// <para><b>One outcome.</b> The phase completes the waiter with <see cref="SourceCore{TResult}.TrySetVoidResultDeferred"/>,
/// a cancellation with TrySetCanceled, a predicate that throws with TrySetException; the core's single CAS picks one.
/// A cancellation completes the await at once, on the thread that cancels, and runs the awaiting code there.</para>
/// <para><b>Who holds it.</b> The consumer (whoever reads the result, or a combinator that lets go of it) and, while the
/// waiter sits in a queue (a phase's, the inbox, the loop's frame ring, or the frame's list of expired timers) or waits on its timer, that queue
/// or timer (the timer's hold becomes the queue's when the timer expires). <see cref="_holds"/> counts them; the last to
/// let go recycles it. A waiter cancelled or let go of while queued therefore stays valid until its phase reaches it and
/// drops it, and a queue never holds a waiter that has been recycled into another use.</para>
/// <para><b>Let go of by a combinator</b> (<see cref="IDetachableSource"/>: a WhenAny decided by another input, a WhenAll
/// decided by its token or timeout, a WithTimeout that timed out). The core's CAS to Abandoned decides against the phase
/// completing the wait; the use is then ended (consumed, its token stale) and the combinator lets go of it as its
/// consumer: a predicate is not polled again (the phase meets a completed waiter and drops it), a timer is stopped and
/// leaves its wheel at once, and a fault the phase produced meanwhile (a predicate that threw) is reported, once, by the
/// core. The cancellation registration is dropped by whoever made it last: a timed wait's waiter registers it on the loop
/// thread when its timer expires (<see cref="_timerState"/> decides who drops it). A run of the phase that had already
/// found the waiter pending when another thread let go of it is not waited for: it may still poll the predicate once, and
/// that poll's outcome (a result, or an exception) is dropped. Waiting for it would make any thread that decides a race
/// wait for user code on the loop thread (a predicate blocked on a lock the decider holds would never return).</para>
/// <para><b>Timed waits.</b> A delay is a timer on one of the loop's wheels (the cancelable token goes to the wheel, so
/// a cancellation also takes the timer out). The timer's completion runs <see cref="s_onTimer"/>: on expiry, on the loop
/// thread at the start of a frame, the waiter is queued for its phase and, until the phase reaches it, listens to the
/// token itself; on cancellation, the waiter completes as cancelled at once. The timer node is read (and so recycled)
/// when the phase reaches the waiter, not when it expires: many timers expiring in one frame would otherwise flood
/// their pool before the awaiting code could rent them again.</para>
/// <para><b>Short frame delays.</b> A <see cref="FrameLoop.DelayFrame(int, CancellationToken)"/> of fewer frames than the
/// loop's frame ring covers, started inside a step of the loop, has no timer: the waiter itself sits in the bucket of its
/// frame, holding the queue's hold and listening to its token from the start, and the frame that begins takes it to its
/// phase with the expired timers (see <c>FrameLoop.FrameRing.cs</c>).</para>
/// </remarks>
[StackTraceHidden]
internal abstract class FrameWaiter : WorkItem, ISpindleSource, IDetachableSource, IQuietSource, ILazyCanceledSource
{
#if NET
    private static readonly Action<object?, CancellationToken> s_onCanceled = static (o, ct) => ((FrameWaiter)o!).OnCanceled();
#else
    private static readonly Action<object?> s_onCanceled = static o => ((FrameWaiter)o!).OnCanceled();
#endif

    /// <summary>The continuation a waiter registers on its timer: the timer expired, or was cancelled.</summary>
    internal static readonly Action<object?> s_onTimer = static o => ((FrameWaiter)o!).OnTimerCompleted();

    private SourceCore<VoidResult> _core;
    private int _holds;
    private CancellationToken _cancellationToken;
    private CancellationTokenRegistration _registration;
    private ISpindleSource? _timer;
    private short _timerToken;
    private bool _completeOnceAwaited;

    // Timed waits only. Invariant: 0 for a wait with no timer; 1 while the timer has not expired (or expired and its
    // callback has not yet registered the token); 2 once the expired timer's callback registered the token; 3 once a
    // combinator let go of the wait. The callback's exchange to 2 and the letting go's exchange to 3 are a pair: whichever
    // comes second drops the registration (the callback registers it on the loop thread while the combinator lets go on
    // any thread, so neither may drop it alone).
    private int _timerState;
    private const int TimerPending = 1;
    private const int TimerExpiredRegistered = 2;
    private const int TimerLetGo = 3;

    /// <summary>The phase the waiter resumes in.</summary>
    internal FramePhase? Phase;

    /// <summary>The order timed waits were started in: timers expiring in the same frame are queued in this order.</summary>
    internal long Sequence;

    /// <summary>
    /// A delay in loop time only: its exact deadline, in ticks of <see cref="DueClock"/> (the loop time at the call plus
    /// the delay). Its wheel's millisecond grid fires it at the deadline rounded down; the loop holds it until a frame
    /// begins at or past this (see <c>FrameLoop.AddExpired</c>). Null clock for every other wait.
    /// </summary>
    internal long DueTicks;

    /// <summary>The loop clock <see cref="DueTicks"/> is read on (scaled or unscaled loop time), or null.</summary>
    internal LoopClock? DueClock;

    // True while this use waits in its loop's frame ring (a short DelayFrame started inside a step; see RingLoop). A flag
    // rather than the loop itself: the ring's loop is always the phase's (8 bytes a waiter, section 51).
    private bool _inRing;

    /// <summary>
    /// The loop whose frame ring holds this waiter (a short <see cref="FrameLoop.DelayFrame(int, FramePhase, CancellationToken)"/>
    /// started inside a step), or null: a cancellation or a combinator letting go tells it, so that the loop can sweep the
    /// finished waits out of its ring (<c>FrameLoop.NoteFrameRingDone</c>) rather than hold them until their frame. The
    /// phase's loop, read while a hold keeps this use (the phase is cleared only when the waiter is recycled).
    /// </summary>
    internal FrameLoop? RingLoop => _inRing ? Phase!.Loop : null;

    /// <summary>Puts this use in <see cref="RingLoop"/>, its phase's loop's frame ring (the thread inside that loop's step).</summary>
    internal void EnterRing() => _inRing = true;


    /// <summary>True once the use has completed (cancelled while the loop held it): the loop lets go of it at once.</summary>
    internal bool IsDone => _core.IsCompleted;

    public short Version => _core.Version;

    /// <summary>Starts a use: the consumer's hold, the phase, and the token (registered later, by <see cref="RegisterCancellation"/>).</summary>
    protected void Start(FramePhase phase, CancellationToken cancellationToken)
    {
        Debug.Assert(_holds == 0 && Phase is null, "a pooled waiter is idle");
        Phase = phase;
        _cancellationToken = cancellationToken;
        _holds = 1;
    }

    /// <summary>Registers the use's token, if it can be cancelled. A token already cancelled completes the waiter now.</summary>
    internal void RegisterCancellation()
    {
        CancellationToken token = _cancellationToken;
        if (!token.CanBeCanceled)
        {
            return;
        }
        _registration = CancellationRegistrations.Register(token, s_onCanceled, this);
    }

    /// <summary>The token fired: completes the use as cancelled, and tells a frame ring holding the waiter (see <see cref="RingLoop"/>).</summary>
    private void OnCanceled()
    {
        // Read before completing: the completion runs the awaiting code, and the waiter may be recycled once the ring lets go.
        FrameLoop? ring = RingLoop;
        if (_core.TrySetCanceledLazily())
        {
            ring?.NoteFrameRingDone();
        }
    }

    /// <summary>
    /// Makes the waiter complete only once its continuation is registered: a wait started on another thread then always
    /// resumes on the loop thread. Without this, a frame could complete it between the call and the await, and the
    /// await, finding it complete, would go on on the thread that made it.
    /// </summary>
    internal void CompleteOnceAwaited() => _completeOnceAwaited = true;

    /// <summary>A queue takes the waiter: it is not recycled until the queue lets go (see <see cref="Execute"/>).</summary>
    internal void HoldForQueue() => Interlocked.Increment(ref _holds);

    /// <summary>A queue that holds the waiter after its use completed (cancelled, or let go of) drops it without running it.</summary>
    internal void LetGoOfCompleted()
    {
        Debug.Assert(IsDone, "only a completed use leaves its queue unrun");
        Release();
    }

    private void Release()
    {
        if (Interlocked.Decrement(ref _holds) == 0)
        {
            Recycle();
        }
    }

    private void Recycle()
    {
        Phase = null;
        Sequence = 0;
        DueTicks = 0;
        DueClock = null;
        _inRing = false;
        _cancellationToken = default;
        _registration = default;
        _timer = null;
        _timerToken = 0;
        _completeOnceAwaited = false;
        _timerState = 0;
        _core.ClearForPool();
        ClearAndReturn();
    }

    /// <summary>Clears what the subclass keeps for a use and returns the waiter to its pool.</summary>
    protected abstract void ClearAndReturn();

    /// <summary>True when the waiter may complete now; a predicate wait evaluates its predicate (which may throw).</summary>
    protected virtual bool IsReady() => true;

    /// <summary>Makes this waiter a timed wait on <paramref name="timer"/> (a pending delay on one of the loop's wheels).</summary>
    internal void WaitForTimer(SpindleTask timer)
    {
        _timer = timer._source;
        _timerToken = timer._token;
        _timerState = TimerPending;
        // The timer's hold (the waiter is not shared yet): it becomes the queue's when the timer expires.
        _holds++;
        // Runs s_onTimer at once if the delay has already completed (its token was cancelled meanwhile).
        timer._source!.OnCompleted(s_onTimer, this, timer._token);
    }

    private void OnTimerCompleted()
    {
        ISpindleSource timer = _timer!;
        short token = _timerToken;
        if (timer.GetStatus(token) == SpindleTaskStatus.Succeeded)
        {
            // Expired: this runs on the loop thread, inside the frame's timer pass (or on the thread starting the wait,
            // inside WaitForTimer, when a pass fired the timer before the waiter listened: AddExpired tells them apart).
            // Queue for the phase (the loop sorts the frame's expired timers first) and watch the token until the phase
            // comes. The timer node stays unread until then (see remarks).
            // The timer's hold becomes the queue's.
            FramePhase phase = Phase!;
            try
            {
                RegisterCancellation();
            }
            catch (Exception ex)
            {
                // A token cancelled meanwhile ran the awaiting code inline, and it threw; it must not break the pass.
                UnobservedExceptions.Report(ex);
            }
            if (Interlocked.Exchange(ref _timerState, TimerExpiredRegistered) == TimerLetGo)
            {
                // A combinator let go of the wait meanwhile and left this registration to be dropped here.
                CancellationRegistrations.Drop(ref _registration);
            }
            phase.Loop.AddExpired(this);
            return;
        }
        // Cancelled (on the cancelling thread): the node's registration, not ours, saw it. Read the node, which drops
        // that registration and recycles it, then complete. The node's cancellation is read without a throw: the
        // awaiting code throws it once, at its await (a throw here doubled the cost of cancelling many loop delays at
        // once, a scene unload). Misuse, and any failure other than the cancellation, still throw, as the read did.
        _timer = null;
        QuietRead.ReadCanceled(timer, token);
        try
        {
            _core.TrySetCanceledLazily();
        }
        finally
        {
            Release(); // the timer's hold
        }
    }

    /// <summary>The waiter's phase has reached it (loop thread).</summary>
    public sealed override void Execute()
    {
        if (_timer is { } timer)
        {
            // The expired timer's node: read it now, which recycles it (see remarks).
            _timer = null;
            timer.GetResult(_timerToken);
        }
        if (_core.IsCompleted)
        {
            Release(); // cancelled while queued: the queue lets go
            return;
        }
        if (_completeOnceAwaited && !_core.IsAwaitedOrCompleted)
        {
            Phase!.AddBack(this); // started on another thread and not awaited yet: look again at the phase's next run
            return;
        }
        bool ready;
#if DEBUG
        TestHookBeforePoll?.Invoke(this);
#endif
        try
        {
            ready = IsReady();
        }
        catch (Exception ex)
        {
            try
            {
                _core.TrySetException(ex);
            }
            finally
            {
                Release();
            }
            return;
        }
        if (!ready)
        {
            Phase!.AddBack(this); // polled again at the phase's next run; the queue keeps its hold
            return;
        }
        bool won = _core.TrySetVoidResultDeferred(out object? waiter, out object? state);
        // Let go before resuming, so that the awaiting code's next wait can rent this same waiter (hot in cache).
        Release();
        if (won && waiter is not null)
        {
            Continuations.Invoke(waiter, state);
        }
    }

    /// <summary>
    /// A combinator that no longer needs this wait leaves it (see remarks): it will never run, a predicate is not polled
    /// again, and a timer leaves its wheel now. A wait that has completed, or is completing, is left to the waiter, which
    /// reads it (a read consumes the waiter).
    /// </summary>
    DetachOutcome IDetachableSource.TryDetach(DirectWaiter waiter)
    {
        DetachOutcome outcome = _core.TryAbandonWaiter(waiter, out short abandoned);
        if (outcome != DetachOutcome.Detached)
        {
            return outcome == DetachOutcome.Completed ? DetachOutcome.NotWaiting : outcome;
        }
        LetGoOfAbandoned(abandoned);
        return DetachOutcome.Detached;
    }

    bool IDetachableSource.TryAbandon(short token)
    {
        if (!_core.TryAbandon(token))
        {
            return false;
        }
        LetGoOfAbandoned(token);
        return true;
    }

    /// <summary>
    /// Ends abandoned use <paramref name="token"/> (the token the abandoning CAS decided on, never the version read later)
    /// and lets go of the waiter as its consumer: stops its timer, drops its token's registration (or leaves that to the
    /// expired timer's callback, see <see cref="_timerState"/>), and releases the consumer's hold. A queue that still holds
    /// the waiter finds it completed and drops it.
    /// </summary>
    private void LetGoOfAbandoned(short token)
    {
#if DEBUG
        TestHookAfterAbandoned?.Invoke(this);
#endif
        FrameLoop? ring = RingLoop; // read while the consumer's hold keeps this use
        bool dropRegistration = true;
        bool timerStopped = false;
        if (Volatile.Read(ref _timerState) != 0)
        {
            // Stopped before it expired, the timer never calls back (its hold is let go of here), and nothing else
            // registers the token. Otherwise (expired, or cancelled through its token) its callback runs or ran on another
            // thread: the pair of exchanges decides which side drops the registration the callback makes.
            timerStopped = _timer is TimerNode node && node.TryStopUnread(_timerToken);
            dropRegistration = timerStopped || Interlocked.Exchange(ref _timerState, TimerLetGo) == TimerExpiredRegistered;
        }
        if (!_core.ReleaseAbandoned(token))
        {
            // The phase completed it first (a predicate held, or threw: the core reported that fault), or its token
            // cancelled it: its completer may still be between its claim and its publication, a few stores.
            _core.WaitUntilPublished(token);
            if (!_core.TryConsumeCompleted(token, out _))
            {
                return; // a misused read of the caller's copy consumed it first, and let go as the consumer
            }
        }
        if (dropRegistration)
        {
            CancellationRegistrations.Drop(ref _registration);
        }
        if (timerStopped)
        {
            Release(); // the timer's hold, never the last: the consumer's is let go of next
        }
        Release();
        ring?.NoteFrameRingDone(); // a hint only: the ring checks each waiter it sweeps
    }

#if DEBUG
    /// <summary>Tests only (a Debug build): runs when a combinator has abandoned the use, before the waiter lets go of it.</summary>
    internal static Action<FrameWaiter>? TestHookAfterAbandoned;

    /// <summary>
    /// Tests only (a Debug build): runs on the loop thread when the phase has found the wait still pending, just before it
    /// evaluates the wait's predicate (or, for a waiter with none, completes it): where another thread's letting go races it.
    /// </summary>
    internal static Action<FrameWaiter>? TestHookBeforePoll;
#endif

    /// <summary>The token that canceled this use (<see cref="ILazyCanceledSource"/>): it stays until the waiter is recycled.</summary>
    CancellationToken ILazyCanceledSource.CanceledBy => _cancellationToken;

    public SpindleTaskStatus GetStatus(short token) => _core.GetStatus(token);

    ValueTaskSourceStatus IValueTaskSource.GetStatus(short token) => (ValueTaskSourceStatus)_core.GetStatus(token);

    public void GetResult(short token)
    {
        if (ReadQuietly(token) is { } error)
        {
            throw LazyCancellation.ToThrow(error);
        }
    }

    /// <summary>As <see cref="GetResult"/>, returning the failure instead of throwing it (<see cref="IQuietSource"/>).</summary>
    public ExceptionDispatchInfo? ReadQuietly(short token)
    {
        if (_core.GetStatus(token) == SpindleTaskStatus.Pending && Phase!.Loop.IsInsideStep)
        {
            // A blocking read of a wait on this loop, from inside a step of it: only this thread can run the frame the
            // wait needs, so it would block for ever. The wait is left as it was, still pending.
            ThrowHelper.ThrowInvalidOperation(
                "A frame-loop wait was read with GetAwaiter().GetResult() (or Wait) while it was pending, on the thread running a frame of its loop: " +
                "that thread would block for ever, since only it can run the frame the wait needs. Await it instead.");
        }
        _core.Consume(token, this, out ExceptionDispatchInfo? error);
        // The wait is over: nothing stays registered behind it (Drop waits for a callback in flight on another thread).
        CancellationRegistrations.Drop(ref _registration);
        Release();
        return error;
    }

    public void OnCompleted(Action<object?> continuation, object? state, short token) => _core.OnCompleted(continuation, state, token);

    void IValueTaskSource.OnCompleted(Action<object?> continuation, object? state, short token, ValueTaskSourceOnCompletedFlags flags)
        => _core.OnCompleted(continuation, state, token, flags);
}

/// <summary>A waiter that completes when its phase reaches it: yields, frame counts and delays.</summary>
internal sealed class PhaseWaiter : FrameWaiter, IPoolNode<PhaseWaiter>
{
    /// <summary>
    /// The next wait in the same bucket of <see cref="FrameWaiter.RingLoop"/>'s frame ring (only a phase waiter waits
    /// there), read and written by the thread inside the loop's step only; and, while the waiter is idle, its pool's link.
    /// The two never meet: the ring reads and clears the link before it lets go of its hold (so a waiter is recycled with
    /// it null), and the pool clears it when it hands the waiter out. One field for both saves 8 bytes a waiter.
    /// </summary>
    internal PhaseWaiter? NextInRing;

    ref PhaseWaiter? IPoolNode<PhaseWaiter>.Next => ref NextInRing;

    public static PhaseWaiter Rent(FramePhase phase, CancellationToken cancellationToken)
    {
        PhaseWaiter waiter = ObjectPool<PhaseWaiter>.TryRent() ?? new PhaseWaiter();
        waiter.Start(phase, cancellationToken);
        return waiter;
    }

    protected override void ClearAndReturn()
    {
        Debug.Assert(NextInRing is null, "the ring cleared the link before letting go of the waiter");
        ObjectPool<PhaseWaiter>.Return(this);
    }
}

/// <summary>A waiter that polls a predicate once per run of its phase: WaitUntil and WaitWhile, with no closure.</summary>
internal sealed class PredicateWaiter<TState> : FrameWaiter, IPoolNode<PredicateWaiter<TState>>
{
    private PredicateWaiter<TState>? _next;
    private Func<TState, bool>? _predicate;
    private TState _state = default!;
    private bool _until;

    ref PredicateWaiter<TState>? IPoolNode<PredicateWaiter<TState>>.Next => ref _next;

    /// <param name="phase">The phase that polls.</param>
    /// <param name="state">The predicate's argument.</param>
    /// <param name="predicate">The condition.</param>
    /// <param name="until">True to complete when the predicate holds (WaitUntil), false when it stops holding (WaitWhile).</param>
    /// <param name="cancellationToken">The wait's token.</param>
    public static PredicateWaiter<TState> Rent(FramePhase phase, TState state, Func<TState, bool> predicate, bool until, CancellationToken cancellationToken)
    {
        PredicateWaiter<TState> waiter = ObjectPool<PredicateWaiter<TState>>.TryRent() ?? new PredicateWaiter<TState>();
        waiter._state = state;
        waiter._predicate = predicate;
        waiter._until = until;
        waiter.Start(phase, cancellationToken);
        return waiter;
    }

    protected override bool IsReady() => _predicate!(_state) == _until;

    protected override void ClearAndReturn()
    {
        _predicate = null;
        _state = default!;
        ObjectPool<PredicateWaiter<TState>>.Return(this);
    }
}

using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib;

/// <summary>
/// The <see cref="TimeProvider"/> of a <see cref="TimerWheel"/> (<see cref="TimerWheel.AsTimeProvider"/>): its clock is
/// the wheel's clock (<see cref="TimerWheel.TimeProvider"/>), and its timers are the wheel's callback timers
/// (<see cref="SpindleTimer"/>), each behind a small <see cref="ITimer"/> object that gives them
/// <c>TimeProvider.System</c>'s contract (see <see cref="WheelTimer"/>).
/// </summary>
internal sealed class WheelTimeProvider : TimeProvider
{
    private readonly TimerWheel _wheel;
    private readonly TimeProvider _clock;

    internal WheelTimeProvider(TimerWheel wheel)
    {
        _wheel = wheel;
        _clock = wheel.TimeProvider;
    }

    /// <summary>The wheel whose timers this provider creates.</summary>
    internal TimerWheel Wheel => _wheel;

    // The time is the wheel's clock's, so that a wheel on a ManualClock or a FakeTimeProvider gives that clock's time and
    // its timers fire when that clock says so.
    public override DateTimeOffset GetUtcNow() => _clock.GetUtcNow();

    public override long GetTimestamp() => _clock.GetTimestamp();

    public override long TimestampFrequency => _clock.TimestampFrequency;

    public override TimeZoneInfo LocalTimeZone => _clock.LocalTimeZone;

#if DEBUG
    /// <summary>
    /// Tests only (a Debug build): run by a timer's <see cref="IDisposable.Dispose"/> between its read of the running count
    /// and the CAS that sets the disposed bit, on the calling thread (<c>WheelTimeProviderRaceTests</c> starts a
    /// callback there).
    /// </summary>
    internal static Action<ITimer>? TestHookBeforeDisposeCas;

    /// <summary>
    /// Tests only (a Debug build): run by a timer's firing between its read of the running count and the CAS that
    /// starts the callback, on the firing thread (<c>WheelTimeProviderRaceTests</c> disposes the timer there).
    /// </summary>
    internal static Action<ITimer>? TestHookBeforeRunClaim;

    /// <summary>
    /// Tests only (a Debug build): run by a timer's <see cref="IAsyncDisposable.DisposeAsync"/> after its first look at
    /// the running count and before it publishes its waiter (<c>WheelTimeProviderRaceTests</c> ends the callback there).
    /// </summary>
    internal static Action<ITimer>? TestHookBeforeWaiterPublished;
#endif

    public override ITimer CreateTimer(TimerCallback callback, object? state, TimeSpan dueTime, TimeSpan period)
    {
        if (callback is null)
        {
            ThrowHelper.ThrowArgumentNull(nameof(callback));
        }
        // As TimeProvider.System's timers (TimerQueueTimer with flowExecutionContext: true): the creator's context, or
        // none when flow is suppressed (as the BCL's own consumers, CancellationTokenSource and Task.Delay, create theirs).
        var timer = new WheelTimer(callback!, state, ExecutionContext.Capture());
        timer.Start(_wheel, dueTime, period);
        return timer;
    }

    public override string ToString() => "TimeProvider of a TimerWheel on " + _clock;

    /// <summary>
    /// One timer of <see cref="WheelTimeProvider"/>: a <see cref="SpindleTimer"/> whose callback is this object, which
    /// runs the user's callback in the creator's <see cref="ExecutionContext"/>, returns false from
    /// <see cref="Change"/> once disposed, and counts its running callbacks so that <see cref="DisposeAsync"/> can wait
    /// for them.
    /// </summary>
    /// <remarks>
    /// Invariant of <see cref="_running"/>: the number of callbacks of this timer running now, plus
    /// <see cref="DisposedBit"/> once <see cref="Dispose"/> has run. A callback starts only by a CAS that raises the count
    /// while the bit is clear, so once Dispose has set the bit no callback starts (a firing the wheel had already taken is
    /// dropped here, as <c>TimerQueueTimer</c> drops a firing it finds cancelled), and the count falls to zero exactly
    /// once after it. <see cref="DisposeAsync"/> publishes its waiter, then reads the count; a callback's end lowers the
    /// count, then reads the waiter: both by full fences, so one of the two sees the other and completes the waiter
    /// (a store-load pair, as in Dekker's algorithm).
    /// </remarks>
    private sealed class WheelTimer : ITimer
    {
        private const int DisposedBit = 1 << 30;

        private static readonly Action<object?> s_fire = static s => ((WheelTimer)s!).Fire();
        private static readonly ContextCallback s_invoke = static s => ((WheelTimer)s!).Invoke();

        private readonly TimerCallback _callback;
        private readonly object? _state;
        private readonly ExecutionContext? _context;
        // The wheel timer's handle (SpindleTimer), as two fields packed with _running: 64 B in all, not 72.
        private CallbackTimerNode? _node;
        private int _running;
        private short _version;
        private TaskCompletionSource<bool>? _disposeWaiter;

        internal WheelTimer(TimerCallback callback, object? state, ExecutionContext? context)
        {
            _callback = callback;
            _state = state;
            _context = context;
        }

        /// <summary>Creates the wheel's timer. A due time of zero may fire it before the handle is stored (inside this call on a <see cref="ManualClock"/>, or in an Advance under way on another thread; on a worker for the system clock): the callback needs only the fields set in the constructor.</summary>
        internal void Start(TimerWheel wheel, TimeSpan dueTime, TimeSpan period)
        {
            SpindleTimer timer = wheel.CreateTimer(s_fire, this, dueTime, period);
            _node = timer.Node;
            _version = timer.Version;
        }

        private SpindleTimer Timer => new(_node!, _version);

        public bool Change(TimeSpan dueTime, TimeSpan period)
        {
            if ((Volatile.Read(ref _running) & DisposedBit) != 0)
            {
                TimerWheel.CheckTimerSpans(dueTime, period); // the arguments first, as for a live timer (and as TimeProvider.System's)
                return false;
            }
            return Timer.TryChange(dueTime, period); // false if a Dispose, or the wheel's, lands first
        }

        public void Dispose()
        {
            int running = Volatile.Read(ref _running);
            while ((running & DisposedBit) == 0)
            {
#if DEBUG
                TestHookBeforeDisposeCas?.Invoke(this);
#endif
                int seen = Interlocked.CompareExchange(ref _running, running | DisposedBit, running);
                if (seen == running)
                {
                    Timer.Dispose(); // the node goes back to the pool, and the wheel lets go of this object
                    return;
                }
                running = seen;
            }
        }

        public ValueTask DisposeAsync()
        {
            Dispose();
            if ((Volatile.Read(ref _running) & ~DisposedBit) == 0)
            {
                return default;
            }
            var waiter = new TaskCompletionSource<bool>(TaskCreationOptions.RunContinuationsAsynchronously);
#if DEBUG
            TestHookBeforeWaiterPublished?.Invoke(this);
#endif
            waiter = Interlocked.CompareExchange(ref _disposeWaiter, waiter, null) ?? waiter;
            if ((Volatile.Read(ref _running) & ~DisposedBit) == 0)
            {
                waiter.TrySetResult(true); // the last callback ended before it could see the waiter
            }
            return new ValueTask(waiter.Task);
        }

        /// <summary>The wheel's callback: runs the user's, unless this timer has been disposed.</summary>
        private void Fire()
        {
            int running = Volatile.Read(ref _running);
            while (true)
            {
                if ((running & DisposedBit) != 0)
                {
                    return;
                }
#if DEBUG
                TestHookBeforeRunClaim?.Invoke(this);
#endif
                int seen = Interlocked.CompareExchange(ref _running, running + 1, running);
                if (seen == running)
                {
                    break;
                }
                running = seen;
            }
            try
            {
                ExecutionContext? context = _context;
                if (context is null)
                {
                    Invoke(); // captured with flow suppressed: as is, in the context of the thread that fires it
                }
                else if (ContextFlow.CanRunInline(context))
                {
                    try
                    {
                        Invoke();
                    }
                    finally
                    {
                        ContextFlow.RestoreDefaultIfChanged();
                    }
                }
                else
                {
#if NET
                    ContextFlow.Run(context, s_invoke, this);
#else
                    ContextFlow.Run(context.CreateCopy(), s_invoke, this); // Mono's Run takes a captured context once
#endif
                }
            }
            finally
            {
                if (Interlocked.Decrement(ref _running) == DisposedBit)
                {
                    Volatile.Read(ref _disposeWaiter)?.TrySetResult(true);
                }
            }
        }

        private void Invoke() => _callback(_state);
    }
}

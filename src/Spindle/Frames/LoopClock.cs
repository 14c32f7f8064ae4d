using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib;

/// <summary>
/// A clock that a <see cref="FrameLoop"/> moves once per frame: loop time (scaled or unscaled), or the frame count. A
/// <see cref="TimerWheel"/> on it keeps the loop's delays; the wheel's one timer fires only when the loop checks it at
/// the start of a frame, on the loop thread, so expired delays are always handled there and nowhere else.
/// </summary>
/// <remarks>
/// Unlike <see cref="ManualClock"/>, a timer armed with a due time of zero does not fire on the thread that arms it:
/// that is the wheel asking for a pass (a new early timer, or a cancellation to clean up), and it may come from any
/// thread. The request is remembered and served at the next frame, since nothing on this clock can fall due before then.
/// The wheel arms the timer at the timestamp of its next deadline (<see cref="IAbsoluteTimer"/>), exactly: the loop's
/// contract is the first frame that begins at or past a deadline, where a wheel's is within a millisecond of it.
/// </remarks>
internal sealed class LoopClock : TimeProvider
{
    private static readonly DateTimeOffset s_epoch = new(2000, 1, 1, 0, 0, 0, TimeSpan.Zero);

    private long _ticks;
    private LoopTimer? _timer;

    /// <summary>The clock's time, in <see cref="TimeSpan"/> ticks. Any thread.</summary>
    public override long GetTimestamp() => Volatile.Read(ref _ticks);

    /// <summary>Timestamps are <see cref="TimeSpan"/> ticks.</summary>
    public override long TimestampFrequency => TimeSpan.TicksPerSecond;

    /// <inheritdoc/>
    public override DateTimeOffset GetUtcNow() => s_epoch.AddTicks(GetTimestamp());

    /// <inheritdoc/>
    public override TimeZoneInfo LocalTimeZone => TimeZoneInfo.Utc;

    /// <summary>Creates the clock's one timer: the driver of the wheel on this clock.</summary>
    public override ITimer CreateTimer(TimerCallback callback, object? state, TimeSpan dueTime, TimeSpan period)
    {
        if (callback is null)
        {
            ThrowHelper.ThrowArgumentNull(nameof(callback));
        }
        var timer = new LoopTimer(this, callback, state);
        if (Interlocked.CompareExchange(ref _timer, timer, null) is not null)
        {
            throw new NotSupportedException("A frame loop's clock drives exactly one timer wheel.");
        }
        timer.Change(dueTime, period);
        return timer;
    }

    /// <summary>Moves the clock to <paramref name="ticks"/>. Loop thread only.</summary>
    public void Set(long ticks) => Volatile.Write(ref _ticks, ticks);

#if DEBUG
    /// <summary>Tests only: runs on the loop thread once a frame has decided to run a clock's pass, before the pass runs.</summary>
    internal static Action<LoopClock>? TestHookPassDecided;
#endif

    /// <summary>Runs the wheel's pass if its timer is due or a pass was asked for. Loop thread only.</summary>
    public void FireIfDue() => _timer?.FireIfDue(Volatile.Read(ref _ticks));

    // An IAbsoluteTimer, so that the wheel's driver arms it at the deadline's timestamp. Armed with a relative due time,
    // it went through the driver's guess at timers that truncate to whole milliseconds: a kick from another thread (a
    // cancellation, an early delay) that landed as a frame began its pass was taken as used by that pass, the pass it
    // asked for, in a later frame before the next deadline, looked like the timer firing early, and from then on every due
    // time was rounded up to the millisecond: with loop time at a fraction of one, delays resumed a frame late.
    private sealed class LoopTimer : ITimer, IAbsoluteTimer
    {
        private readonly LoopClock _clock;
        private readonly object? _state;
        private TimerCallback? _callback;
        private long _dueAt = long.MaxValue; // written by the loop thread only (the wheel arms from its pass)
        private int _requested;              // a pass asked for from any thread

        public LoopTimer(LoopClock clock, TimerCallback callback, object? state)
        {
            _clock = clock;
            _callback = callback;
            _state = state;
        }

        public bool Change(TimeSpan dueTime, TimeSpan period)
        {
            if (dueTime == TimeSpan.Zero)
            {
                Volatile.Write(ref _requested, 1);
            }
            else
            {
                _dueAt = dueTime == Timeout.InfiniteTimeSpan ? long.MaxValue : _clock.GetTimestamp() + dueTime.Ticks;
            }
            return true;
        }

        /// <summary>
        /// Arms the timer for the frame that begins at or past <paramref name="dueTimestamp"/>. A due time the clock has
        /// reached is served at the next frame, as a request is: the clock moves only with frames. Loop thread only (the
        /// wheel arms from its pass).
        /// </summary>
        public void ChangeAt(long dueTimestamp) => _dueAt = dueTimestamp;

        public void FireIfDue(long now)
        {
            if (Volatile.Read(ref _requested) == 0 && now < _dueAt)
            {
                return;
            }
            // Cleared before the pass: a request made during the pass is served at the next frame, not lost.
            Interlocked.Exchange(ref _requested, 0);
            _dueAt = long.MaxValue; // the pass arms the next deadline
#if DEBUG
            TestHookPassDecided?.Invoke(_clock);
#endif
            Volatile.Read(ref _callback)?.Invoke(_state);
        }

        public void Dispose() => Volatile.Write(ref _callback, null);

        public ValueTask DisposeAsync()
        {
            Dispose();
            return default;
        }
    }
}

using System;
using System.Collections.Generic;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib;

/// <summary>
/// A <see cref="TimeProvider"/> whose time moves only when <see cref="Advance"/> is called: for deterministic tests
/// of code that uses timers, with no sleeps. A <see cref="TimerWheel"/> created on it fires its timers, and runs their
/// continuations, on the thread that advances the clock.
/// </summary>
/// <remarks>
/// <para>Timers created with <see cref="CreateTimer"/> fire in deadline order (ties in the order they were armed), each
/// with the clock set to its own deadline, so a callback that arms another timer sees the time it expects. A timer
/// armed with a due time of zero fires at once, on the thread that arms it, unless an <see cref="Advance"/> is under way
/// on another thread: that Advance fires it, on its thread, before it returns.</para>
/// <para>Thread-safety: every member may be called from any thread. Callbacks run outside the clock's lock, so they
/// may read the clock and arm timers.</para>
/// <para>Code under test that runs on another thread (a worker, a thread of its own): a timer it has started on a
/// <see cref="TimerWheel"/> of this clock before <see cref="Advance"/> is called fires inside that Advance, on the
/// advancing thread, if the Advance reaches its deadline; so does a timer due at once that another thread arms while an
/// Advance runs (a wheel's wake-up). A test that has seen the timer counted (<see cref="TimerWheel.PendingCount"/>) can
/// therefore advance and know it has fired; code that was suspended at its await of it has run, up to its next await,
/// before Advance returns. Code that had not reached that await yet (it started the timer a moment before) goes on on
/// its own thread: call the code under test on the test's thread (an async method is suspended when its call returns),
/// or wait for a sign it gives once suspended.</para>
/// </remarks>
public sealed class ManualClock : TimeProvider
{
    private readonly object _lock = new();
    private readonly List<ManualTimer> _scheduled = new();
    private readonly DateTimeOffset _start;
    private long _elapsedTicks;
    private long _sequence;
    // Invariant: the number of Advance calls under way, changed under _lock; the last step of an Advance (finding nothing
    // due) and its decrement are one lock hold. A timer due at once, armed while it is above zero by a thread that is not
    // advancing this clock, is scheduled for now instead of fired on the arming thread, so an Advance under way fires it
    // (its loop looks again under the lock before it returns).
    private int _advancing;
    // The wheels on this clock (weakly: a wheel dropped undisposed must still be collected), copied on write under _lock
    // so that Advance reads them without allocating. Advance settles them before it moves time (TimerWheel.SettleForAdvance).
    private WeakReference<TimerWheel>[] _wheels = Array.Empty<WeakReference<TimerWheel>>();
    // The clock this thread is advancing (null: none), so that a timer its own callbacks arm keeps firing inline.
    [ThreadStatic]
    private static ManualClock? t_advancing;

    /// <summary>Creates a clock that starts at 2000-01-01 00:00 UTC.</summary>
    public ManualClock()
        : this(new DateTimeOffset(2000, 1, 1, 0, 0, 0, TimeSpan.Zero))
    {
    }

    /// <summary>Creates a clock that starts at <paramref name="startTime"/>.</summary>
    public ManualClock(DateTimeOffset startTime) => _start = startTime;

    /// <summary>How far the clock has been advanced since it was created.</summary>
    public TimeSpan Elapsed => TimeSpan.FromTicks(Volatile.Read(ref _elapsedTicks));

    /// <summary>The start time plus <see cref="Elapsed"/>; <see cref="DateTimeOffset.MaxValue"/> once the clock has been advanced past it.</summary>
    /// <remarks>
    /// <see cref="Advance"/> takes any forward step (<see cref="TimeSpan.MaxValue"/> included, to fire every timer), so the
    /// date saturates, as the timestamp does, instead of throwing here, far from the step that went past it.
    /// </remarks>
    public override DateTimeOffset GetUtcNow()
    {
        // Both the start's clock time and its UTC time must stay in range (they differ by its offset).
        long room = DateTime.MaxValue.Ticks - Math.Max(_start.Ticks, _start.UtcTicks);
        long elapsed = Volatile.Read(ref _elapsedTicks);
        return elapsed > room ? DateTimeOffset.MaxValue : _start + TimeSpan.FromTicks(elapsed);
    }

    /// <summary>The clock's timestamp, in <see cref="TimeSpan"/> ticks since it was created.</summary>
    public override long GetTimestamp() => Volatile.Read(ref _elapsedTicks);

    /// <summary>Timestamps are <see cref="TimeSpan"/> ticks: 10,000,000 per second.</summary>
    public override long TimestampFrequency => TimeSpan.TicksPerSecond;

    /// <summary>UTC, so that tests do not depend on the machine's time zone.</summary>
    public override TimeZoneInfo LocalTimeZone => TimeZoneInfo.Utc;

    /// <summary>
    /// Moves time forward by <paramref name="delta"/>, firing every timer that falls due on the way, in order, each at
    /// its own deadline, on this thread. Returns when time has reached its target and no timer is due.
    /// </summary>
    /// <remarks>
    /// Before it moves time, it lets every <see cref="TimerWheel"/> on this clock take in the timers other threads have
    /// started (it runs or waits for the wheel's pass), so a delay started on a worker before this call fires inside it,
    /// here, like one started on this thread. A timer started on another thread while the Advance runs fires inside it if
    /// its deadline is reached, here too; whether its start lands before the Advance's end is up to the two threads. Code
    /// that a timer resumes and that advances this clock itself (inside a wheel's pass) does not wait for that pass: the
    /// timers its Advance reaches on that wheel fire when the pass goes on.
    /// </remarks>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="delta"/> is negative: a clock does not go back.</exception>
    public void Advance(TimeSpan delta)
    {
        if (delta < TimeSpan.Zero)
        {
            throw new ArgumentOutOfRangeException(nameof(delta), delta, "A ManualClock only moves forward; pass a delta of zero or more.");
        }
        long target;
        WeakReference<TimerWheel>[] wheels;
        lock (_lock)
        {
            target = SaturatingAdd(_elapsedTicks, delta.Ticks); // Advance(TimeSpan.MaxValue) must not wrap to the past
            _advancing++;
            wheels = _wheels;
        }
        ManualClock? outer = t_advancing;
        t_advancing = this;
        bool ended = false;
        try
        {
            foreach (WeakReference<TimerWheel> reference in wheels)
            {
                if (reference.TryGetTarget(out TimerWheel? wheel))
                {
                    wheel.SettleForAdvance();
                }
            }
            while (true)
            {
                ManualTimer? due = null;
                lock (_lock)
                {
                    // Due: what this Advance reaches, and what the clock has already reached (an Advance of another thread
                    // took it further: a timer deferred to the Advances under way must not wait for a later one).
                    long limit = Math.Max(target, _elapsedTicks);
                    foreach (ManualTimer t in _scheduled)
                    {
                        if (t.DueAt <= limit && (due is null || t.DueAt < due.DueAt || t.DueAt == due.DueAt && t.Sequence < due.Sequence))
                        {
                            due = t;
                        }
                    }
                    if (due is null)
                    {
                        if (target > _elapsedTicks)
                        {
                            Volatile.Write(ref _elapsedTicks, target);
                        }
                        _advancing--;
                        ended = true;
                        return;
                    }
                    if (due.DueAt > _elapsedTicks)
                    {
                        Volatile.Write(ref _elapsedTicks, due.DueAt);
                    }
                    TakeForFiring(due);
                }
                due.Fire();
            }
        }
        finally
        {
            t_advancing = outer;
            if (!ended)
            {
                // A callback threw: a timer deferred to this Advance meanwhile stays scheduled, due, for the next one.
                lock (_lock)
                {
                    _advancing--;
                }
            }
        }
    }

    /// <summary>Registers a wheel built on this clock, for <see cref="Advance"/> to settle (see <see cref="TimerWheel.SettleForAdvance"/>).</summary>
    internal void Attach(TimerWheel wheel)
    {
        lock (_lock)
        {
            WeakReference<TimerWheel>[] old = _wheels;
            var wheels = new List<WeakReference<TimerWheel>>(old.Length + 1);
            foreach (WeakReference<TimerWheel> reference in old)
            {
                if (reference.TryGetTarget(out _))
                {
                    wheels.Add(reference); // a collected wheel's entry goes here, so a clock that sees many wheels stays small
                }
            }
            wheels.Add(new WeakReference<TimerWheel>(wheel));
            _wheels = wheels.ToArray();
        }
    }

    /// <summary>
    /// True when a timer due now, armed on this thread, must wait for the Advance under way on another thread instead of
    /// firing here (see <see cref="_advancing"/>). Under the lock.
    /// </summary>
    private bool DefersToAdvance => _advancing > 0 && !ReferenceEquals(t_advancing, this);

    /// <summary>Creates a timer that fires when this clock is advanced past its due time.</summary>
    /// <exception cref="ArgumentNullException"><paramref name="callback"/> is null.</exception>
    /// <exception cref="ArgumentOutOfRangeException">A due time or period is negative (other than <see cref="Timeout.InfiniteTimeSpan"/>).</exception>
    public override ITimer CreateTimer(TimerCallback callback, object? state, TimeSpan dueTime, TimeSpan period)
    {
        if (callback is null)
        {
            ThrowHelper.ThrowArgumentNull(nameof(callback));
        }
        ManualTimer timer = new(this, callback, state);
        timer.Change(dueTime, period);
        return timer;
    }

    /// <summary>Unschedules a timer about to fire and reschedules it if periodic. Under the lock.</summary>
    private void TakeForFiring(ManualTimer timer)
    {
        _scheduled.Remove(timer);
        if (timer.Period > 0)
        {
            timer.DueAt = SaturatingAdd(timer.DueAt, timer.Period);
            timer.Sequence = ++_sequence;
            _scheduled.Add(timer);
        }
    }

    /// <summary>Two non-negative tick counts added, capped at <see cref="long.MaxValue"/> instead of wrapping negative.</summary>
    private static long SaturatingAdd(long a, long b) => b > long.MaxValue - a ? long.MaxValue : a + b;

    private static void ValidateTimeout(TimeSpan value, string name)
    {
        if (value < TimeSpan.Zero && value != Timeout.InfiniteTimeSpan)
        {
            throw new ArgumentOutOfRangeException(name, value, "A timer's due time and period must be zero or more, or Timeout.InfiniteTimeSpan.");
        }
    }

    private sealed class ManualTimer : ITimer, IAbsoluteTimer
    {
        private readonly ManualClock _clock;
        private TimerCallback? _callback;
        private readonly object? _state;

        public long DueAt;
        public long Period;
        public long Sequence;

        public ManualTimer(ManualClock clock, TimerCallback callback, object? state)
        {
            _clock = clock;
            _callback = callback;
            _state = state;
        }

        public bool Change(TimeSpan dueTime, TimeSpan period)
        {
            ValidateTimeout(dueTime, nameof(dueTime));
            ValidateTimeout(period, nameof(period));
            bool fireNow;
            lock (_clock._lock)
            {
                if (_callback is null)
                {
                    return false;
                }
                _clock._scheduled.Remove(this);
                Period = period == Timeout.InfiniteTimeSpan ? 0 : period.Ticks;
                if (dueTime == Timeout.InfiniteTimeSpan)
                {
                    return true;
                }
                DueAt = SaturatingAdd(_clock._elapsedTicks, dueTime.Ticks);
                Sequence = ++_clock._sequence;
                fireNow = dueTime == TimeSpan.Zero && !_clock.DefersToAdvance; // deferred: scheduled for now, below
                if (fireNow)
                {
                    if (Period > 0)
                    {
                        DueAt = SaturatingAdd(DueAt, Period);
                        _clock._scheduled.Add(this);
                    }
                }
                else
                {
                    _clock._scheduled.Add(this);
                }
            }
            if (fireNow)
            {
                Fire();
            }
            return true;
        }

        /// <summary>
        /// Arms the timer, not periodic, at an absolute time of its clock (a <see cref="TimerWheel"/>'s plan): unlike a
        /// relative due time, it cannot be moved by an <see cref="Advance"/> on another thread between the caller's read of
        /// the clock and this call.
        /// </summary>
        public void ChangeAt(long dueTimestamp)
        {
            lock (_clock._lock)
            {
                if (_callback is null)
                {
                    return;
                }
                _clock._scheduled.Remove(this);
                Period = 0;
                Sequence = ++_clock._sequence;
                if (dueTimestamp > _clock._elapsedTicks || _clock.DefersToAdvance)
                {
                    DueAt = Math.Max(dueTimestamp, _clock._elapsedTicks);
                    _clock._scheduled.Add(this);
                    return;
                }
            }
            Fire(); // already due: at once, on this thread, as a due time of zero
        }

        public void Fire() => Volatile.Read(ref _callback)?.Invoke(_state);

        public void Dispose()
        {
            lock (_clock._lock)
            {
                _callback = null;
                _clock._scheduled.Remove(this);
            }
        }

        public ValueTask DisposeAsync()
        {
            Dispose();
            return default;
        }
    }
}

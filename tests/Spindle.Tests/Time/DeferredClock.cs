using System;
using System.Collections.Generic;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Time;

/// <summary>
/// A manual clock whose timers never fire inside <see cref="ITimer.Change"/>: a due time of zero only marks the timer
/// due, and it fires on the next <see cref="RunDue"/>, as a real provider's timer fires later on another thread. It
/// exposes the interleavings that <see cref="ManualClock"/> hides by firing a zero due time synchronously.
/// </summary>
internal sealed class DeferredClock : TimeProvider
{
    private readonly object _lock = new();
    private readonly List<DeferredTimer> _timers = new();
    private long _now;

    public override long GetTimestamp() => Volatile.Read(ref _now);

    public override long TimestampFrequency => TimeSpan.TicksPerSecond;

    public override DateTimeOffset GetUtcNow() => new DateTimeOffset(2000, 1, 1, 0, 0, 0, TimeSpan.Zero) + TimeSpan.FromTicks(GetTimestamp());

    /// <summary>Moves time forward, then fires every timer now due (each once per due time).</summary>
    public void Advance(TimeSpan delta)
    {
        Interlocked.Add(ref _now, delta.Ticks);
        RunDue();
    }

    /// <summary>
    /// Called at the start of every <see cref="ITimer.Change"/> of this clock's timers, with the due time, on the calling
    /// thread, before the change takes effect: a test holds a change there to run another thread's steps first.
    /// </summary>
    public Action<TimeSpan>? BeforeChange { get; set; }

    /// <summary>Fires the timers due now, until none is.</summary>
    public void RunDue()
    {
        while (TakeDue() is { } fire)
        {
            fire();
        }
    }

    /// <summary>Moves time forward and fires nothing (the provider's thread is late).</summary>
    public void MoveWithoutFiring(TimeSpan delta) => Interlocked.Add(ref _now, delta.Ticks);

    /// <summary>
    /// Takes one timer due now, as a provider's thread does when it dispatches a fire, and returns that fire for the test to
    /// run later; null when none is due. Once taken, the timer is no longer due: a <see cref="ITimer.Change"/> made before
    /// the fire runs arms it again, and does not withdraw the fire already dispatched (as with <see cref="System.Threading.Timer"/>).
    /// </summary>
    public Action? TakeDue()
    {
        DeferredTimer? due = null;
        lock (_lock)
        {
            foreach (DeferredTimer t in _timers)
            {
                if (t.DueAt >= 0 && t.DueAt <= _now)
                {
                    due = t;
                    t.DueAt = -1;
                    break;
                }
            }
        }
        return due is null ? null : () => due.Callback(due.State);
    }

    public override ITimer CreateTimer(TimerCallback callback, object? state, TimeSpan dueTime, TimeSpan period)
    {
        var timer = new DeferredTimer(this, callback, state);
        lock (_lock)
        {
            _timers.Add(timer);
        }
        timer.Change(dueTime, period);
        return timer;
    }

    private sealed class DeferredTimer : ITimer
    {
        private readonly DeferredClock _clock;
        public readonly TimerCallback Callback;
        public readonly object? State;
        public long DueAt = -1;
        private bool _disposed;

        public DeferredTimer(DeferredClock clock, TimerCallback callback, object? state)
        {
            _clock = clock;
            Callback = callback;
            State = state;
        }

        public bool Change(TimeSpan dueTime, TimeSpan period)
        {
            _clock.BeforeChange?.Invoke(dueTime);
            lock (_clock._lock)
            {
                if (_disposed)
                {
                    return false;
                }
                DueAt = dueTime == Timeout.InfiniteTimeSpan ? -1 : _clock._now + dueTime.Ticks;
                return true;
            }
        }

        public void Dispose()
        {
            lock (_clock._lock)
            {
                _disposed = true;
                DueAt = -1;
                _clock._timers.Remove(this);
            }
        }

        public ValueTask DisposeAsync()
        {
            Dispose();
            return default;
        }
    }
}

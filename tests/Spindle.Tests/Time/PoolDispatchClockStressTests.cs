using System;
using System.Collections.Generic;
using System.Reflection;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Time;

/// <summary>
/// A wheel on a provider whose timers fire exactly when due, never early, but on thread-pool threads, as
/// <see cref="System.Threading.Timer"/>'s do: a fire is dispatched when its due time is reached and runs a moment later, so
/// fires race each other, the wheel's passes and kicks' changes. The orders that made a kick's fire look like a timer
/// that truncates (<c>KickTakenForTruncationTests</c>) come up here on their own; the probe must settle every one, so the
/// wheel never decides for good that the provider truncates, no timer fires before its deadline, and none is lost.
/// Written by the review of stop 31's changes; counts exact outcomes.
/// </summary>
public class PoolDispatchClockStressTests
{
    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public void ProviderThatFiresOnPoolThreads_OnTimeOrLate_IsNeverTakenForOneThatTruncates_AndNoTimerIsLostOrEarly(bool truncates)
    {
        const int Rounds = 500;
        var clock = new PoolDispatchClock(truncates);
        using var wheel = new TimerWheel(clock);
        var random = new Random(31);
        int early = 0;
        int completed = 0;
        int started = 0;
        var pending = new List<SpindleTask>();
        for (int round = 0; round < Rounds; round++)
        {
            // A few delays from this thread and from a pool thread (kicks when earlier than the plan), one cancelled.
            int count = random.Next(1, 4);
            using var cts = new CancellationTokenSource();
            for (int i = 0; i < count; i++)
            {
                int ms = random.Next(1, 6);
                long deadline = clock.GetTimestamp() + TimeSpan.FromMilliseconds(ms).Ticks;
                SpindleTask delay = wheel.Delay(ms, i == 0 ? cts.Token : default);
                started++;
                pending.Add(Watch(delay, clock, deadline, () => Interlocked.Increment(ref early), () => Interlocked.Increment(ref completed)));
            }
            Task producer = Task.Run(() =>
            {
                int ms = random.Next(1, 3);
                long deadline = clock.GetTimestamp() + TimeSpan.FromMilliseconds(ms).Ticks;
                lock (pending)
                {
                    started++;
                    pending.Add(Watch(wheel.Delay(ms), clock, deadline, () => Interlocked.Increment(ref early), () => Interlocked.Increment(ref completed)));
                }
            });
            if (round % 3 == 0)
            {
                cts.Cancel(); // the first cancellation since a pass kicks
            }
            clock.Advance(TimeSpan.FromTicks(random.Next(1_000, 15_000))); // 0.1 to 1.5 ms: fires are dispatched, not run
            Assert.True(producer.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "the producer never returned");
        }
        // Past every deadline; then until the dispatched fires (and the fires they cause) have all run.
        for (int i = 0; i < 20; i++)
        {
            clock.Advance(TimeSpan.FromMilliseconds(1));
            clock.WaitQuiet();
        }
        lock (pending)
        {
            foreach (SpindleTask t in pending)
            {
                Assert.True(t.IsCompleted, "a delay was never fired, with the clock past its deadline and the provider quiet");
            }
        }
        Assert.Equal(0, Volatile.Read(ref early));
        Assert.Equal(started, Volatile.Read(ref completed));
        Assert.Equal(0, wheel.PendingCount);
        Assert.Equal(truncates, DriverField<bool>(wheel, "_firesEarly"));
        if (truncates)
        {
            Assert.True(wheel.PassCount < 20 * Rounds, wheel.PassCount + " passes: the wheel's timer spun");
        }
        Assert.Equal(0, DriverField<int>(wheel, "_probing")); // no probe left out: the passes are no longer rounded up
    }

    /// <summary>
    /// The wheel disposed while fires of its timer and of its probe are dispatched and not yet run, on a provider that
    /// truncates (so fires look early and probes go out): once they have run, none of the provider's timers is left, and
    /// every delay has completed.
    /// </summary>
    [Fact]
    public void DisposedWhileFiresAndProbesAreInFlight_LeavesNoTimerOfTheProvider()
    {
        const int Rounds = 300;
        var random = new Random(32);
        int leftOver = 0;
        for (int round = 0; round < Rounds; round++)
        {
            var clock = new PoolDispatchClock(truncates: true);
            var wheel = new TimerWheel(clock);
            clock.Advance(TimeSpan.FromTicks(random.Next(1, 10_000)));
            var delays = new List<SpindleTask>();
            for (int i = 0; i < 3; i++)
            {
                delays.Add(wheel.Delay(random.Next(1, 3)));
            }
            clock.Advance(TimeSpan.FromTicks(random.Next(5_000, 25_000)));
            Thread.SpinWait(random.Next(0, 3000));
            wheel.Dispose();
            clock.WaitQuiet();
            clock.Advance(TimeSpan.FromMilliseconds(5)); // a probe revived after the dispose would be dispatched here
            clock.WaitQuiet();
            foreach (SpindleTask d in delays)
            {
                Assert.True(d.IsCompleted, "a delay was left pending by the dispose");
            }
            leftOver += clock.LiveTimers;
        }
        Assert.Equal(0, leftOver);
    }

    private static SpindleTask Watch(SpindleTask delay, PoolDispatchClock clock, long deadline, Action onEarly, Action onDone)
    {
        return Run(delay);

        async SpindleTask Run(SpindleTask d)
        {
            try
            {
                await d;
                if (clock.GetTimestamp() < deadline)
                {
                    onEarly();
                }
            }
            catch (OperationCanceledException)
            {
            }
            onDone();
        }
    }

    private static T DriverField<T>(TimerWheel wheel, string name)
    {
        object driver = typeof(TimerWheel).GetField("_driver", BindingFlags.NonPublic | BindingFlags.Instance)!.GetValue(wheel)!;
        return (T)driver.GetType().GetField(name, BindingFlags.NonPublic | BindingFlags.Instance)!.GetValue(driver)!;
    }

    /// <summary>A manual clock whose due timers are dispatched to the thread pool (never early), as a real timer's are.</summary>
    private sealed class PoolDispatchClock(bool truncates) : TimeProvider
    {
        private readonly bool _truncates = truncates;
        private readonly object _lock = new();
        private readonly List<PoolTimer> _timers = new();
        private long _now;
        private int _inFlight;

        public override long GetTimestamp() => Volatile.Read(ref _now);

        /// <summary>The timers created and not yet disposed.</summary>
        public int LiveTimers
        {
            get
            {
                lock (_lock)
                {
                    return _timers.Count;
                }
            }
        }

        public override long TimestampFrequency => TimeSpan.TicksPerSecond;

        public void Advance(TimeSpan delta)
        {
            Interlocked.Add(ref _now, delta.Ticks);
            DispatchDue();
        }

        /// <summary>Waits until no fire is dispatched and not yet run.</summary>
        public void WaitQuiet()
            => Assert.True(SpinWait.SpinUntil(() => Volatile.Read(ref _inFlight) == 0, TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "the dispatched fires never ran");

        private void DispatchDue()
        {
            var due = new List<PoolTimer>();
            lock (_lock)
            {
                foreach (PoolTimer t in _timers)
                {
                    if (t.DueAt >= 0 && t.DueAt <= _now)
                    {
                        t.DueAt = -1;
                        due.Add(t);
                    }
                }
                // Atomic, though under the lock: the fires decrement it outside the lock, on pool threads. A plain += here
                // lost a decrement now and then (a fire finishing between its read and its write), and WaitQuiet then waited
                // for a fire that had already run (seen in CI, "the dispatched fires never ran", with no fire running).
                Interlocked.Add(ref _inFlight, due.Count);
            }
            foreach (PoolTimer t in due)
            {
                ThreadPool.UnsafeQueueUserWorkItem(static s =>
                {
                    var timer = (PoolTimer)s!;
                    try
                    {
                        Thread.SpinWait(Random.Shared.Next(0, 2000)); // a fire runs a moment after its dispatch
                        timer.Callback(timer.State);
                    }
                    finally
                    {
                        Interlocked.Decrement(ref timer.Clock._inFlight);
                    }
                }, t);
            }
        }

        public override ITimer CreateTimer(TimerCallback callback, object? state, TimeSpan dueTime, TimeSpan period)
        {
            var timer = new PoolTimer(this, callback, state);
            lock (_lock)
            {
                _timers.Add(timer);
            }
            timer.Change(dueTime, period);
            return timer;
        }

        private sealed class PoolTimer(PoolDispatchClock clock, TimerCallback callback, object? state) : ITimer
        {
            public readonly PoolDispatchClock Clock = clock;
            public readonly TimerCallback Callback = callback;
            public readonly object? State = state;
            public long DueAt = -1;
            private bool _disposed;

            public bool Change(TimeSpan dueTime, TimeSpan period)
            {
                lock (Clock._lock)
                {
                    if (_disposed)
                    {
                        return false;
                    }
                    if (Clock._truncates && dueTime != Timeout.InfiniteTimeSpan)
                    {
                        dueTime = TimeSpan.FromMilliseconds((long)dueTime.TotalMilliseconds);
                    }
                    DueAt = dueTime == Timeout.InfiniteTimeSpan ? -1 : Clock._now + dueTime.Ticks;
                }
                if (dueTime == TimeSpan.Zero)
                {
                    Clock.DispatchDue();
                }
                return true;
            }

            public void Dispose()
            {
                lock (Clock._lock)
                {
                    _disposed = true;
                    DueAt = -1;
                    Clock._timers.Remove(this);
                }
            }

            public ValueTask DisposeAsync()
            {
                Dispose();
                return default;
            }
        }
    }
}

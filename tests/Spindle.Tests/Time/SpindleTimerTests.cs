using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Time;

/// <summary>
/// <see cref="SpindleTimer"/> on a <see cref="ManualClock"/>: when it fires (never early), pushing back, pulling forward,
/// re-arming, stopping, periodic ticks and their coalescing, disposal, bad input and misused handles.
/// </summary>
public class SpindleTimerTests
{
    private static TimeSpan Ms(long ms) => TimeSpan.FromMilliseconds(ms);

    private static readonly TimeSpan Infinite = Timeout.InfiniteTimeSpan;

    /// <summary>Records each firing with the clock's time then, in milliseconds (also used by SpindleTimerMutationTests).</summary>
    internal sealed class Log
    {
        private readonly TimeProvider _clock;
        public readonly List<long> Fired = new();

        public Log(TimeProvider clock) => _clock = clock;

        public static readonly Action<object?> Callback = static s =>
        {
            var log = (Log)s!;
            lock (log.Fired)
            {
                log.Fired.Add(log._clock.GetTimestamp() * 1000 / log._clock.TimestampFrequency);
            }
        };
    }

    private static (ManualClock Clock, TimerWheel Wheel, Log Log) Setup()
    {
        var clock = new ManualClock();
        var wheel = new TimerWheel(clock);
        return (clock, wheel, new Log(clock));
    }

    [Fact]
    public void OneShot_FiresOnceAtItsTick_NeverEarly()
    {
        var (clock, wheel, log) = Setup();
        using (wheel)
        {
            SpindleTimer timer = wheel.CreateTimer(Log.Callback, log, Ms(10));
            Assert.Equal(1, wheel.PendingCount);
            clock.Advance(Ms(9));
            Assert.Empty(log.Fired);
            clock.Advance(Ms(1));
            Assert.Equal(new long[] { 10 }, log.Fired);
            clock.Advance(Ms(100));
            Assert.Equal(new long[] { 10 }, log.Fired);
            Assert.Equal(0, wheel.PendingCount);
            timer.Dispose();
        }
    }

    [Fact]
    public void OneShot_FractionalDueTime_RoundsUp()
    {
        var (clock, wheel, log) = Setup();
        using (wheel)
        {
            clock.Advance(TimeSpan.FromTicks(3_000)); // 0.3 ms
            using SpindleTimer timer = wheel.CreateTimer(Log.Callback, log, TimeSpan.FromTicks(15_000)); // due at 1.8 ms
            clock.Advance(TimeSpan.FromTicks(14_000)); // 1.7 ms
            Assert.Empty(log.Fired);
            clock.Advance(TimeSpan.FromTicks(3_000)); // 2.0 ms: the tick it was rounded up to
            Assert.Single(log.Fired);
        }
    }

    [Fact]
    public void Change_PushedBackManyTimes_FiresOnceAtTheLastDueTime()
    {
        var (clock, wheel, log) = Setup();
        using (wheel)
        {
            using SpindleTimer timer = wheel.CreateTimer(Log.Callback, log, Ms(10));
            for (int i = 1; i <= 20; i++)
            {
                clock.Advance(Ms(3));
                Assert.True(timer.Change(Ms(10), Infinite)); // always 10 ms after the last message: never reached
            }
            Assert.Empty(log.Fired);
            Assert.Equal(1, wheel.PendingCount);
            clock.Advance(Ms(9));
            Assert.Empty(log.Fired);
            clock.Advance(Ms(1));
            Assert.Equal(new long[] { 70 }, log.Fired);
            clock.Advance(Ms(1000));
            Assert.Single(log.Fired);
            Assert.Equal(0, wheel.PendingCount);
        }
    }

    [Fact]
    public void Change_PushedBackFarAcrossLevels_FiresAtTheNewTime()
    {
        var (clock, wheel, log) = Setup();
        using (wheel)
        {
            using SpindleTimer timer = wheel.CreateTimer(Log.Callback, log, Ms(5));
            timer.Change(TimeSpan.FromSeconds(100), Infinite); // lazy: stays in its 5 ms slot until the wheel gets there
            clock.Advance(Ms(5));
            Assert.Empty(log.Fired);
            Assert.Equal(1, wheel.PendingCount);
            clock.Advance(TimeSpan.FromSeconds(100) - Ms(6));
            Assert.Empty(log.Fired);
            clock.Advance(Ms(1));
            Assert.Equal(new long[] { 100_000 }, log.Fired);
        }
    }

    [Fact]
    public void Change_PulledForward_FiresAtTheEarlierTime()
    {
        var (clock, wheel, log) = Setup();
        using (wheel)
        {
            using SpindleTimer timer = wheel.CreateTimer(Log.Callback, log, TimeSpan.FromSeconds(10));
            clock.Advance(Ms(2));
            timer.Change(Ms(3), Infinite);
            clock.Advance(Ms(2));
            Assert.Empty(log.Fired);
            clock.Advance(Ms(1));
            Assert.Equal(new long[] { 5 }, log.Fired);
            clock.Advance(TimeSpan.FromSeconds(20));
            Assert.Single(log.Fired);
            Assert.Equal(0, wheel.PendingCount);
        }
    }

    [Fact]
    public void Change_PushedBackThenForward_FiresAtTheLastTimeGiven()
    {
        var (clock, wheel, log) = Setup();
        using (wheel)
        {
            using SpindleTimer timer = wheel.CreateTimer(Log.Callback, log, Ms(10));
            timer.Change(Ms(50), Infinite);
            timer.Change(Ms(7), Infinite);
            timer.Change(Ms(30), Infinite);
            clock.Advance(Ms(29));
            Assert.Empty(log.Fired);
            clock.Advance(Ms(1));
            Assert.Equal(new long[] { 30 }, log.Fired);
        }
    }

    [Fact]
    public void Change_AfterAOneShotFired_ArmsItAgain()
    {
        var (clock, wheel, log) = Setup();
        using (wheel)
        {
            using SpindleTimer timer = wheel.CreateTimer(Log.Callback, log, Ms(1));
            clock.Advance(Ms(1));
            Assert.Equal(new long[] { 1 }, log.Fired);
            timer.Change(Ms(4), Infinite);
            Assert.Equal(1, wheel.PendingCount);
            clock.Advance(Ms(4));
            Assert.Equal(new long[] { 1, 5 }, log.Fired);
        }
    }

    [Fact]
    public void Change_Infinite_StopsWithoutDisposing_AndAChangeStartsItAgain()
    {
        var (clock, wheel, log) = Setup();
        using (wheel)
        {
            using SpindleTimer timer = wheel.CreateTimer(Log.Callback, log, Ms(10), Ms(10));
            timer.Change(Infinite, Infinite);
            Assert.Equal(0, wheel.PendingCount); // left the wheel at once, not at its old tick
            clock.Advance(Ms(100));
            Assert.Empty(log.Fired);
            timer.Change(Ms(1), Infinite);
            clock.Advance(Ms(1));
            Assert.Equal(new long[] { 101 }, log.Fired);
        }
    }

    [Fact]
    public void Create_InfiniteDueTime_StartsStopped()
    {
        var (clock, wheel, log) = Setup();
        using (wheel)
        {
            using SpindleTimer timer = wheel.CreateTimer(Log.Callback, log, Infinite, Ms(5));
            Assert.Equal(0, wheel.PendingCount);
            clock.Advance(Ms(50));
            Assert.Empty(log.Fired);
            timer.Change(Ms(5), Ms(5));
            clock.Advance(Ms(10));
            Assert.Equal(new long[] { 55, 60 }, log.Fired);
        }
    }

    [Fact]
    public void Change_Zero_FiresAtOnce()
    {
        var (clock, wheel, log) = Setup();
        using (wheel)
        {
            using SpindleTimer timer = wheel.CreateTimer(Log.Callback, log, Ms(100));
            clock.Advance(Ms(3));
            timer.Change(TimeSpan.Zero, Infinite); // a manual clock's wheel runs the pass, and so the callback, in the call
            Assert.Equal(new long[] { 3 }, log.Fired);
            Assert.Equal(0, wheel.PendingCount);
        }
    }

    [Fact]
    public void Periodic_FiresEveryPeriod_FromItsDueTime()
    {
        var (clock, wheel, log) = Setup();
        using (wheel)
        {
            using SpindleTimer timer = wheel.CreateTimer(Log.Callback, log, Ms(5), Ms(3));
            for (int i = 0; i < 15; i++)
            {
                clock.Advance(Ms(1));
            }
            Assert.Equal(new long[] { 5, 8, 11, 14 }, log.Fired);
            Assert.Equal(1, wheel.PendingCount);
        }
    }

    /// <summary>
    /// A late pass (a clock that jumps without firing on the way, as a real one does when the timer thread is held up):
    /// the ticks it covers fire once, and the next tick keeps the phase. A <see cref="ManualClock"/> stops at each due
    /// time on its way instead, so nothing is missed there (the next test).
    /// </summary>
    [Fact]
    public void Periodic_MissedTicks_CoalesceIntoOne_AndThePhaseHolds()
    {
        var clock = new DeferredClock();
        var log = new Log(clock);
        using var wheel = new TimerWheel(clock);
        using SpindleTimer timer = wheel.CreateTimer(Log.Callback, log, Ms(10), Ms(10));
        clock.RunDue();
        clock.Advance(Ms(55)); // ticks 10, 20, 30, 40, 50 are all due in one pass
        Assert.Equal(new long[] { 55 }, log.Fired);
        clock.Advance(Ms(4));
        Assert.Single(log.Fired);
        clock.Advance(Ms(1)); // the next tick is 60: whole periods from 10
        Assert.Equal(new long[] { 55, 60 }, log.Fired);
    }

    [Fact]
    public void Periodic_ManualClockJump_StopsAtEveryTick()
    {
        var (clock, wheel, log) = Setup();
        using (wheel)
        {
            using SpindleTimer timer = wheel.CreateTimer(Log.Callback, log, Ms(10), Ms(10));
            clock.Advance(Ms(55));
            Assert.Equal(new long[] { 10, 20, 30, 40, 50 }, log.Fired);
        }
    }

    [Fact]
    public void Periodic_ChangePeriod_TakesTheNewPeriod()
    {
        var (clock, wheel, log) = Setup();
        using (wheel)
        {
            using SpindleTimer timer = wheel.CreateTimer(Log.Callback, log, Ms(2), Ms(2));
            clock.Advance(Ms(4));
            timer.Change(Ms(5), Ms(5));
            clock.Advance(Ms(15));
            Assert.Equal(new long[] { 2, 4, 9, 14, 19 }, log.Fired);
            timer.Change(Ms(1), TimeSpan.Zero); // period zero: one-shot
            clock.Advance(Ms(20));
            Assert.Equal(new long[] { 2, 4, 9, 14, 19, 20 }, log.Fired);
        }
    }

    [Fact]
    public void Periodic_ChangeFromItsOwnCallback_Applies()
    {
        var (clock, wheel, _) = Setup();
        using (wheel)
        {
            var fired = new List<long>();
            var box = new SpindleTimer[1];
            box[0] = wheel.CreateTimer(_ =>
            {
                fired.Add((long)clock.Elapsed.TotalMilliseconds);
                if (fired.Count == 2)
                {
                    box[0].Change(Ms(10), Ms(10));
                }
                if (fired.Count == 4)
                {
                    box[0].Dispose();
                }
            }, null, Ms(1), Ms(1));
            clock.Advance(Ms(50));
            Assert.Equal(new long[] { 1, 2, 12, 22 }, fired);
            Assert.Equal(0, wheel.PendingCount);
        }
    }

    [Fact]
    public void Dispose_StopsIt_LeavesNothingRegistered_AndIsIdempotent()
    {
        var (clock, wheel, log) = Setup();
        using (wheel)
        {
            SpindleTimer timer = wheel.CreateTimer(Log.Callback, log, Ms(10), Ms(10));
            Assert.Equal(1, wheel.PendingCount);
            timer.Dispose();
            Assert.Equal(0, wheel.PendingCount);
            timer.Dispose();
            SpindleTimer copy = timer;
            copy.Dispose();
            clock.Advance(Ms(100));
            Assert.Empty(log.Fired);
        }
    }

    [Fact]
    public void Dispose_APushedBackTimer_LeavesNothingRegistered()
    {
        var (clock, wheel, log) = Setup();
        using (wheel)
        {
            SpindleTimer timer = wheel.CreateTimer(Log.Callback, log, Ms(10));
            timer.Change(TimeSpan.FromSeconds(60), Infinite);
            timer.Dispose();
            Assert.Equal(0, wheel.PendingCount);
            clock.Advance(TimeSpan.FromSeconds(61));
            Assert.Empty(log.Fired);
        }
    }

    [Fact]
    public void Change_AfterDispose_ThrowsObjectDisposed_NamingTheFix()
    {
        var (_, wheel, log) = Setup();
        using (wheel)
        {
            SpindleTimer timer = wheel.CreateTimer(Log.Callback, log, Ms(10));
            timer.Dispose();
            var ex = Assert.Throws<ObjectDisposedException>(() => timer.Change(Ms(1), Infinite));
            Assert.Contains("CreateTimer", ex.Message, StringComparison.Ordinal);
        }
    }

    [Fact]
    public void StaleHandle_NeverActsOnTheTimerThatReusesItsNode()
    {
        var (clock, wheel, _) = Setup();
        using (wheel)
        {
            var firstLog = new Log(clock);
            var secondLog = new Log(clock);
            SpindleTimer stale = wheel.CreateTimer(Log.Callback, firstLog, Ms(10));
            stale.Dispose();
            // The pool gives the node back to the next timer on this thread (or another node: the check holds either way).
            SpindleTimer fresh = wheel.CreateTimer(Log.Callback, secondLog, Ms(10));
            Assert.NotEqual(stale, fresh);
            Assert.Throws<ObjectDisposedException>(() => stale.Change(Ms(1), Infinite));
            stale.Dispose(); // does nothing to fresh
            clock.Advance(Ms(10));
            Assert.Empty(firstLog.Fired);
            Assert.Equal(new long[] { 10 }, secondLog.Fired);
            fresh.Dispose();
        }
    }

    [Fact]
    public void Default_ChangeAndDispose_ThrowInvalidOperation_NamingTheFix()
    {
        SpindleTimer timer = default;
        var change = Assert.Throws<InvalidOperationException>(() => timer.Change(Ms(1), Infinite));
        Assert.Contains("CreateTimer", change.Message, StringComparison.Ordinal);
        Assert.Throws<InvalidOperationException>(() => timer.Dispose());
        Assert.Equal(default, timer);
    }

    [Fact]
    public void BadArguments_ThrowAtOnce_NamingTheFix()
    {
        var (_, wheel, log) = Setup();
        using (wheel)
        {
            Assert.Throws<ArgumentNullException>("callback", () => wheel.CreateTimer(null!, null, Ms(1)));
            var negative = Assert.Throws<ArgumentOutOfRangeException>("dueTime", () => wheel.CreateTimer(Log.Callback, log, Ms(-2)));
            Assert.Contains("TimerWheel.MaxDelay", negative.Message, StringComparison.Ordinal);
            Assert.Throws<ArgumentOutOfRangeException>("dueTime", () => wheel.CreateTimer(Log.Callback, log, TimerWheel.MaxDelay + Ms(1)));
            Assert.Throws<ArgumentOutOfRangeException>("period", () => wheel.CreateTimer(Log.Callback, log, Ms(1), Ms(-2)));
            Assert.Throws<ArgumentOutOfRangeException>("period", () => wheel.CreateTimer(Log.Callback, log, Ms(1), TimerWheel.MaxDelay + Ms(1)));
            Assert.Equal(0, wheel.PendingCount); // nothing was created by a refused call
            using SpindleTimer timer = wheel.CreateTimer(Log.Callback, log, Ms(5));
            Assert.Throws<ArgumentOutOfRangeException>("dueTime", () => timer.Change(Ms(-5), Infinite));
            Assert.Throws<ArgumentOutOfRangeException>("period", () => timer.Change(Ms(5), Ms(-5)));
            Assert.Equal(1, wheel.PendingCount); // a refused Change leaves the timer as it was
        }
    }

    [Fact]
    public void WheelDispose_StopsItsTimers_LaterChangeThrowsNamingTheWheel_DisposeIsQuiet()
    {
        var (clock, wheel, log) = Setup();
        SpindleTimer armed = wheel.CreateTimer(Log.Callback, log, Ms(10), Ms(10));
        SpindleTimer pushed = wheel.CreateTimer(Log.Callback, log, Ms(10));
        pushed.Change(Ms(500), Infinite);
        SpindleTimer stopped = wheel.CreateTimer(Log.Callback, log, Infinite);
        wheel.Dispose();
        Assert.Equal(0, wheel.PendingCount);
        clock.Advance(Ms(1000));
        Assert.Empty(log.Fired);
        var ex = Assert.Throws<ObjectDisposedException>(() => stopped.Change(Ms(1), Infinite));
        Assert.Contains("TimerWheel has been disposed", ex.Message, StringComparison.Ordinal);
        Assert.Throws<ObjectDisposedException>(() => armed.Change(Ms(1), Infinite));
        Assert.Throws<ObjectDisposedException>(() => wheel.CreateTimer(Log.Callback, log, Ms(1)));
        armed.Dispose();
        pushed.Dispose();
        stopped.Dispose();
    }

    [Fact]
    public void Equality_IsTheSameUseOfTheSameTimer()
    {
        var (_, wheel, log) = Setup();
        using (wheel)
        {
            SpindleTimer a = wheel.CreateTimer(Log.Callback, log, Ms(10));
            SpindleTimer b = wheel.CreateTimer(Log.Callback, log, Ms(10));
            SpindleTimer copy = a;
            Assert.True(a == copy);
            Assert.True(a != b);
            Assert.Equal(a.GetHashCode(), copy.GetHashCode());
            Assert.False(a.Equals((object)b));
            a.Dispose();
            b.Dispose();
        }
    }

    [Fact]
    public void ManualClock_ACallbackNeverOverlapsItself_EvenWhenItAdvancesTheClock()
    {
        var (clock, wheel, _) = Setup();
        using (wheel)
        {
            int running = 0;
            int overlaps = 0;
            int fired = 0;
            using SpindleTimer timer = wheel.CreateTimer(_ =>
            {
                if (Interlocked.Increment(ref running) != 1)
                {
                    overlaps++;
                }
                if (++fired < 5)
                {
                    clock.Advance(Ms(1)); // a nested advance: its pass runs after this callback returns, not inside it
                }
                Interlocked.Decrement(ref running);
            }, null, Ms(1), Ms(1));
            clock.Advance(Ms(1));
            Assert.Equal(0, overlaps);
            Assert.Equal(5, fired);
        }
    }

    [Fact]
    public async Task SystemClock_CallbackRunsOnAWorker_NotOnTheTimerThread()
    {
        using var wheel = new TimerWheel(TimeProvider.System);
        var ran = new TaskCompletionSource<bool>(TaskCreationOptions.RunContinuationsAsynchronously);
        using SpindleTimer timer = wheel.CreateTimer(s => ((TaskCompletionSource<bool>)s!).TrySetResult(Scheduler.Default.IsWorkerThread), ran, Ms(5));
        Assert.True(await TestUtil.WithTimeout(ran.Task, 10));
    }

    /// <summary>The lazy push-back on the real clock: the wheel reaches the old tick, finds the later one and waits for it.</summary>
    [Fact]
    public async Task SystemClock_PushedBack_FiresNoEarlierThanTheLastDueTime()
    {
        using var wheel = new TimerWheel(TimeProvider.System);
        for (int attempt = 0; ; attempt++)
        {
            var fired = new ConcurrentQueue<long>();
            var watch = System.Diagnostics.Stopwatch.StartNew();
            using SpindleTimer timer = wheel.CreateTimer(s => fired.Enqueue(watch.ElapsedMilliseconds), null, Ms(50));
            await Task.Delay(10);
            long changedAt = watch.ElapsedMilliseconds;
            timer.Change(Ms(100), Infinite);
            if (changedAt >= 45 && attempt < 5)
            {
                continue; // a loaded machine held this thread up until the first due time came near: not the case under test
            }
            await TestUtil.WithTimeout(Task.Run(async () =>
            {
                while (fired.IsEmpty)
                {
                    await Task.Delay(5);
                }
            }), 10);
            Assert.True(fired.TryPeek(out long firedAt) && firedAt >= changedAt + 100, $"fired at {firedAt} ms, pushed back at {changedAt} ms to 100 ms later");
            await Task.Delay(150);
            Assert.Single(fired);
            return;
        }
    }
}

/// <summary>A timer's due tick, worked out with one division, is the tick a delay's three divisions give, on clocks of several frequencies.</summary>
public class SpindleTimerDeadlineTests
{
    private sealed class SteppedClock(long frequency) : TimeProvider
    {
        public long Now;

        public override long GetTimestamp() => Now;

        public override long TimestampFrequency => frequency;
    }

    [Theory]
    [InlineData(10_000_000L)]
    [InlineData(1_000_000_000L)]
    [InlineData(3_000_000L)] // not a multiple of 10 MHz: the delay's own arithmetic
    public void DeadlineAfter_OneDivision_MatchesThreeDivisions(long frequency)
    {
        var clock = new SteppedClock(frequency);
        using var wheel = new TimerWheel(clock);
        var random = new Random(54);
        for (int i = 0; i < 200_000; i++)
        {
            clock.Now = i < 1000 ? i : (long)(random.NextDouble() * frequency * 86_400 * 30);
            TimeSpan delay = (i % 4) switch
            {
                0 => TimeSpan.FromTicks(random.Next(0, 30_000)),
                1 => TimeSpan.FromMilliseconds(random.Next(0, 100_000)),
                2 => TimerWheel.MaxDelay,
                _ => TimeSpan.FromTicks((long)(random.NextDouble() * TimerWheel.MaxDelay.Ticks)),
            };
            Assert.Equal(wheel.DeadlineAfter(delay, out _), wheel.DeadlineAfter(delay));
        }
    }
}

using System;
using System.Collections.Generic;
using System.Threading;

namespace SpindleLib.Tests.Time;

/// <summary>
/// <see cref="SpindleTimer.Change(TimeSpan)"/>, which moves a timer and keeps its period (user22's proposal, section 50):
/// one test per behaviour, on a <see cref="ManualClock"/>.
/// </summary>
public class SpindleTimerKeepPeriodTests
{
    private static TimeSpan Ms(long ms) => TimeSpan.FromMilliseconds(ms);

    private static (ManualClock Clock, TimerWheel Wheel, List<long> Fired, Action<object?> Callback) Setup()
    {
        var clock = new ManualClock();
        var fired = new List<long>();
        return (clock, new TimerWheel(clock), fired, _ => fired.Add(clock.GetTimestamp() / TimeSpan.TicksPerMillisecond));
    }

    [Fact]
    public void PeriodicTimer_Moved_FiresAtTheNewDueTime_ThenEveryPeriodItHad()
    {
        var (clock, wheel, fired, callback) = Setup();
        using (wheel)
        {
            using SpindleTimer timer = wheel.CreateTimer(callback, null, Ms(10), Ms(7));
            clock.Advance(Ms(5));
            Assert.True(timer.Change(Ms(20))); // due at 25, then 32, 39
            clock.Advance(Ms(35));
            Assert.Equal(new long[] { 25, 32, 39 }, fired);
        }
    }

    [Fact]
    public void OneShotTimer_Moved_StaysOneShot()
    {
        var (clock, wheel, fired, callback) = Setup();
        using (wheel)
        {
            using SpindleTimer timer = wheel.CreateTimer(callback, null, Ms(10));
            timer.Change(Ms(30)); // pushed back
            clock.Advance(Ms(100));
            Assert.Equal(new long[] { 30 }, fired);
            timer.Change(Ms(5)); // re-armed after firing
            clock.Advance(Ms(100));
            Assert.Equal(new long[] { 30, 105 }, fired);
        }
    }

    [Fact]
    public void Stopped_ThenRearmed_KeepsThePeriod()
    {
        var (clock, wheel, fired, callback) = Setup();
        using (wheel)
        {
            using SpindleTimer timer = wheel.CreateTimer(callback, null, Ms(10), Ms(4));
            timer.Change(Timeout.InfiniteTimeSpan);
            clock.Advance(Ms(50));
            Assert.Empty(fired);
            timer.Change(Ms(1)); // due at 51, then every 4 ms
            clock.Advance(Ms(9));
            Assert.Equal(new long[] { 51, 55, 59 }, fired);
        }
    }

    [Fact]
    public void AfterAChangeOfPeriod_KeepsTheNewPeriod()
    {
        var (clock, wheel, fired, callback) = Setup();
        using (wheel)
        {
            using SpindleTimer timer = wheel.CreateTimer(callback, null, Ms(10), Ms(4));
            timer.Change(Ms(10), Ms(6));
            timer.Change(Ms(2)); // due at 2, then every 6 ms
            clock.Advance(Ms(14));
            Assert.Equal(new long[] { 2, 8, 14 }, fired);
        }
    }

    [Fact]
    public void BadDueTime_ThrowsAndChangesNothing()
    {
        var (clock, wheel, fired, callback) = Setup();
        using (wheel)
        {
            using SpindleTimer timer = wheel.CreateTimer(callback, null, Ms(10), Ms(4));
            var ex = Assert.Throws<ArgumentOutOfRangeException>(() => timer.Change(Ms(-2)));
            Assert.Equal("dueTime", ex.ParamName);
            Assert.Throws<ArgumentOutOfRangeException>(() => timer.Change(TimerWheel.MaxDelay + Ms(1)));
            clock.Advance(Ms(14));
            Assert.Equal(new long[] { 10, 14 }, fired);
        }
    }

    [Fact]
    public void DisposedTimerOrWheel_AndDefault_Throw()
    {
        var (_, wheel, _, callback) = Setup();
        SpindleTimer timer = wheel.CreateTimer(callback, null, Ms(10), Ms(4));
        SpindleTimer other = wheel.CreateTimer(callback, null, Ms(10), Ms(4));
        timer.Dispose();
        Assert.Contains("has been disposed", Assert.Throws<ObjectDisposedException>(() => timer.Change(Ms(1))).Message, StringComparison.Ordinal);
        wheel.Dispose();
        Assert.Contains("TimerWheel", Assert.Throws<ObjectDisposedException>(() => other.Change(Ms(1))).Message, StringComparison.Ordinal);
        other.Dispose();
        Assert.Throws<InvalidOperationException>(() => default(SpindleTimer).Change(Ms(1)));
    }
}

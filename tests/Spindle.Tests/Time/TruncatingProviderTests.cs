using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Time;

/// <summary>
/// A wheel on a <see cref="TimeProvider"/> whose timer truncates due times to whole milliseconds, as
/// <see cref="System.Threading.Timer"/> does (and so the timer of every provider that does not override
/// <see cref="TimeProvider.CreateTimer"/>). Found by a review of the time layer (2026-11-28): such a timer fires up to a
/// millisecond before the tick it was armed for; the pass found nothing due and armed it for the fraction left, which
/// the timer took as zero, so it fired again at once, and again, until the clock reached the tick: a busy loop of up to
/// a millisecond per deadline on a real clock, and for ever on one that moves only when advanced.
/// </summary>
public class TruncatingProviderTests
{
    private static TimeSpan Ms(double ms) => TimeSpan.FromMilliseconds(ms);

    [Fact]
    public void ProviderTimer_ThatTruncatesDueTimes_DoesNotSpin_AndFiresWithinATickOfTheDeadline()
    {
        var clock = new TruncatingClock();
        using var wheel = new TimerWheel(clock);
        clock.Inner.Advance(Ms(0.5)); // the wheel's time is half-way through a tick from now on
        SpindleTask delay = wheel.Delay(10); // due at tick 11 (10.5 ms rounded up)

        AssertReturns(() => clock.Inner.Advance(Ms(10))); // the truncated timer fires at 10.5 ms, before the tick
        Assert.False(delay.IsCompleted, "fired early");
        long passes = wheel.PassCount;
        AssertReturns(() => clock.Inner.Advance(Ms(1)));
        Assert.Equal(SpindleTaskStatus.Succeeded, delay.Status); // within a tick of its deadline
        delay.GetAwaiter().GetResult();
        Assert.True(wheel.PassCount - passes <= 2, $"{wheel.PassCount - passes} passes for one deadline");

        SpindleTask next = wheel.Delay(3); // due at tick 15 (11.5 + 3, rounded up)
        AssertReturns(() => clock.Inner.Advance(Ms(3)));
        Assert.False(next.IsCompleted, "fired early");
        AssertReturns(() => clock.Inner.Advance(Ms(1)));
        Assert.Equal(SpindleTaskStatus.Succeeded, next.Status);
        next.GetAwaiter().GetResult();
        Assert.Equal(0, wheel.PendingCount);
    }

    private static void AssertReturns(Action advance) => TestUtil.AssertReturns(advance, "the advance never returned: the wheel's timer spins");

    /// <summary>A <see cref="ManualClock"/> whose timers take whole milliseconds only, truncating, as <see cref="System.Threading.Timer"/>'s do.</summary>
    private sealed class TruncatingClock : TimeProvider
    {
        public readonly ManualClock Inner = new();

        public override long GetTimestamp() => Inner.GetTimestamp();

        public override long TimestampFrequency => Inner.TimestampFrequency;

        public override DateTimeOffset GetUtcNow() => Inner.GetUtcNow();

        public override ITimer CreateTimer(TimerCallback callback, object? state, TimeSpan dueTime, TimeSpan period)
            => new TruncatingTimer(Inner.CreateTimer(callback, state, Truncate(dueTime), Truncate(period)));

        private static TimeSpan Truncate(TimeSpan t)
            => t == Timeout.InfiniteTimeSpan ? t : TimeSpan.FromMilliseconds((long)t.TotalMilliseconds);

        private sealed class TruncatingTimer(ITimer inner) : ITimer
        {
            public bool Change(TimeSpan dueTime, TimeSpan period) => inner.Change(Truncate(dueTime), Truncate(period));

            public void Dispose() => inner.Dispose();

            public ValueTask DisposeAsync() => inner.DisposeAsync();
        }
    }
}

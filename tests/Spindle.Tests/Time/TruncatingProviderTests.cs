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
        var clock = new TruncatingClock<ManualClock>(new ManualClock());
        var wheel = new TimerWheel(clock);
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
        wheel.Dispose();
        Assert.Equal(0, clock.LiveTimers); // the wheel's timer and its probe
    }

    /// <summary>
    /// The same provider, whose timers fire later rather than inside <see cref="ITimer.Change"/>, one at a time, always the
    /// first due in the order they were created (<see cref="DeferredClock"/>). The wheel's own timer, which was created
    /// first, is found first whenever it is due. A fire that looks early is confirmed by a second timer of the provider (a
    /// probe, since a review found a kick's fire taken for truncation, <c>KickTakenForTruncationTests</c>): had the wheel's
    /// timer been armed for the fraction left while the probe was out, it would have fired again and again, and the probe
    /// never.
    /// </summary>
    [Fact]
    public void ProviderTimer_ThatTruncatesAndFiresLater_FirstCreatedFirst_DoesNotSpin_AndFiresWithinATickOfTheDeadline()
    {
        var clock = new TruncatingClock<DeferredClock>(new DeferredClock());
        var wheel = new TimerWheel(clock);
        clock.Inner.Advance(Ms(0.5));
        SpindleTask delay = wheel.Delay(10); // due at tick 11 (10.5 ms rounded up)
        AssertReturns(clock.Inner.RunDue); // its kick: the pass arms the timer for 10.5 ms, which it takes as 10

        AssertReturns(() => clock.Inner.Advance(Ms(10))); // the timer fires at 10.5 ms, before the tick
        Assert.False(delay.IsCompleted, "fired early");
        long passes = wheel.PassCount;
        AssertReturns(() => clock.Inner.Advance(Ms(1)));
        Assert.Equal(SpindleTaskStatus.Succeeded, delay.Status); // within a tick of its deadline
        delay.GetAwaiter().GetResult();
        Assert.True(wheel.PassCount - passes <= 2, $"{wheel.PassCount - passes} passes for one deadline");

        SpindleTask next = wheel.Delay(3); // due at tick 15 (11.5 + 3, rounded up)
        AssertReturns(clock.Inner.RunDue);
        AssertReturns(() => clock.Inner.Advance(Ms(3)));
        Assert.False(next.IsCompleted, "fired early");
        AssertReturns(() => clock.Inner.Advance(Ms(1)));
        Assert.Equal(SpindleTaskStatus.Succeeded, next.Status);
        next.GetAwaiter().GetResult();
        Assert.Equal(0, wheel.PendingCount);
        wheel.Dispose();
        Assert.Equal(0, clock.LiveTimers); // the wheel's timer and its probe
    }

    private static void AssertReturns(Action advance) => TestUtil.AssertReturns(advance, "the advance never returned: the wheel's timer spins");

    /// <summary>A clock (<typeparamref name="TInner"/>) whose timers take whole milliseconds only, truncating, as <see cref="System.Threading.Timer"/>'s do.</summary>
    private sealed class TruncatingClock<TInner>(TInner inner) : TimeProvider
        where TInner : TimeProvider
    {
        public readonly TInner Inner = inner;
        private int _live;

        /// <summary>The timers created and not yet disposed.</summary>
        public int LiveTimers => Volatile.Read(ref _live);

        public override long GetTimestamp() => Inner.GetTimestamp();

        public override long TimestampFrequency => Inner.TimestampFrequency;

        public override DateTimeOffset GetUtcNow() => Inner.GetUtcNow();

        public override ITimer CreateTimer(TimerCallback callback, object? state, TimeSpan dueTime, TimeSpan period)
        {
            Interlocked.Increment(ref _live);
            return new TruncatingTimer(this, Inner.CreateTimer(callback, state, Truncate(dueTime), Truncate(period)));
        }

        private static TimeSpan Truncate(TimeSpan t)
            => t == Timeout.InfiniteTimeSpan ? t : TimeSpan.FromMilliseconds((long)t.TotalMilliseconds);

        private sealed class TruncatingTimer(TruncatingClock<TInner> clock, ITimer inner) : ITimer
        {
            private int _disposed;

            public bool Change(TimeSpan dueTime, TimeSpan period) => inner.Change(Truncate(dueTime), Truncate(period));

            public void Dispose()
            {
                if (Interlocked.Exchange(ref _disposed, 1) == 0)
                {
                    Interlocked.Decrement(ref clock._live);
                }
                inner.Dispose();
            }

            public ValueTask DisposeAsync() => inner.DisposeAsync();
        }
    }
}

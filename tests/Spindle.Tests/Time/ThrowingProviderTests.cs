using System;
using System.Collections.Concurrent;
using System.Threading;
using System.Threading.Tasks;
using static SpindleLib.Tests.UnobservedReports;

namespace SpindleLib.Tests.Time;

/// <summary>
/// A wheel on a <see cref="TimeProvider"/> whose timer throws (found by a review of the time layer, 2026-11-28). A pass
/// that threw (the provider's timer failing as the pass armed it) left the wheel's drive held for good: every later
/// request returned at once, so no delay on that wheel ever fired again, even once the provider worked. A timer that
/// threw when kicked left the new delay in the insert inbox with no pass coming, and the wheel's plan lowered to it, so
/// later delays did not kick either. And a timer that threw as it was disposed skipped the disposing pass, leaving every
/// pending delay pending for ever.
/// </summary>
[Collection(SequentialCollection.Name)]
public class ThrowingProviderTests
{
    private static TimeSpan Ms(double ms) => TimeSpan.FromMilliseconds(ms);

    [Fact]
    public void ProviderTimer_ThatThrowsOnceAsAPassArmsIt_IsReported_AndTheWheelKeepsFiring()
    {
        var clock = new FlakyClock();
        using var wheel = new TimerWheel(clock);
        ConcurrentQueue<Exception> reported = Observe(Own.InstancesOrOnTestThreads(FlakyClock.ArmFailure), () =>
        {
            clock.FailArms = 1;
            SpindleTask first = wheel.Delay(10); // its pass (run inline by the kick) fails to arm the timer
            Assert.Equal(0, clock.FailArms);
            SpindleTask second = wheel.Delay(20);

            clock.Inner.Advance(Ms(9));
            Assert.False(first.IsCompleted, "fired early");
            clock.Inner.Advance(Ms(1));
            Assert.Equal(SpindleTaskStatus.Succeeded, first.Status);
            Assert.False(second.IsCompleted, "fired early");
            clock.Inner.Advance(Ms(10));
            Assert.Equal(SpindleTaskStatus.Succeeded, second.Status);
            first.GetAwaiter().GetResult();
            second.GetAwaiter().GetResult();
            Assert.Equal(0, wheel.PendingCount);
        });
        Assert.Equal(new[] { FlakyClock.ArmFailure }, reported.ToArray());
    }

    [Fact]
    public void ProviderTimer_ThatThrowsOnceWhenKicked_IsReported_AndTheDelayStillFiresOnTime()
    {
        var clock = new FlakyClock();
        using var wheel = new TimerWheel(clock);
        ConcurrentQueue<Exception> reported = Observe(Own.InstancesOrOnTestThreads(FlakyClock.KickFailure), () =>
        {
            clock.FailKicks = 1;
            SpindleTask first = wheel.Delay(10); // its kick throws: the pass runs on this thread instead
            Assert.Equal(0, clock.FailKicks);
            SpindleTask second = wheel.Delay(20);

            clock.Inner.Advance(Ms(10));
            Assert.Equal(SpindleTaskStatus.Succeeded, first.Status);
            Assert.False(second.IsCompleted, "fired early");
            clock.Inner.Advance(Ms(10));
            Assert.Equal(SpindleTaskStatus.Succeeded, second.Status);
            first.GetAwaiter().GetResult();
            second.GetAwaiter().GetResult();
            Assert.Equal(0, wheel.PendingCount);
        });
        Assert.Equal(new[] { FlakyClock.KickFailure }, reported.ToArray());
    }

    /// <summary>
    /// The provider's clock throws as its timer fires the wheel's pass: nothing escapes into the provider's timer thread
    /// (for a real timer, an unhandled exception there ends the process; here it came out of <c>Advance</c>), the failure
    /// is reported, and the overdue delay fires at the wheel's next pass.
    /// </summary>
    [Fact]
    public void ProviderClock_ThatThrowsWhenTheTimerFires_IsReported_AndTheNextPassCatchesUp()
    {
        var clock = new FlakyClock();
        using var wheel = new TimerWheel(clock);
        ConcurrentQueue<Exception> reported = Observe(Own.InstancesOrOnTestThreads(FlakyClock.ReadFailure), () =>
        {
            SpindleTask first = wheel.Delay(10);
            clock.FailReads = 2; // the timer's callback reads the clock, and so does the pass it runs
            clock.Inner.Advance(Ms(10));
            Assert.Equal(0, clock.FailReads);
            Assert.False(first.IsCompleted);

            SpindleTask second = wheel.Delay(5); // the next timer wakes the wheel: its pass fires the overdue one
            Assert.Equal(SpindleTaskStatus.Succeeded, first.Status);
            first.GetAwaiter().GetResult();
            clock.Inner.Advance(Ms(5));
            Assert.Equal(SpindleTaskStatus.Succeeded, second.Status);
            second.GetAwaiter().GetResult();
            Assert.Equal(0, wheel.PendingCount);
        });
        Assert.Equal(new[] { FlakyClock.ReadFailure }, reported.ToArray());
    }

    [Fact]
    public void ProviderTimer_ThatThrowsAsItIsDisposed_TheWheelStillCancelsEveryPendingDelay()
    {
        var clock = new FlakyClock();
        var wheel = new TimerWheel(clock);
        SpindleTask pending = wheel.Delay(10);
        clock.FailDispose = true;

        InvalidOperationException thrown = Assert.Throws<InvalidOperationException>(wheel.Dispose);

        Assert.Same(FlakyClock.DisposeFailure, thrown);
        Assert.Equal(SpindleTaskStatus.Canceled, pending.Status);
        Assert.ThrowsAny<OperationCanceledException>(() => pending.GetAwaiter().GetResult());
        Assert.Equal(0, wheel.PendingCount);
        Assert.Throws<ObjectDisposedException>(() => wheel.Delay(10));
    }

    /// <summary>
    /// A <see cref="ManualClock"/> whose timers throw on demand (when kicked, a due time of zero; armed; disposed), and
    /// whose clock does (running <see cref="BeforeFailedRead"/> first, if set: a step that lands just before the failure).
    /// </summary>
    internal sealed class FlakyClock : TimeProvider
    {
        public static readonly InvalidOperationException ArmFailure = new("the provider's timer failed to arm");
        public static readonly InvalidOperationException KickFailure = new("the provider's timer failed to fire at once");
        public static readonly InvalidOperationException DisposeFailure = new("the provider's timer failed to dispose");
        public static readonly InvalidOperationException ReadFailure = new("the provider's clock failed");

        public readonly ManualClock Inner = new();
        public int FailArms;
        public int FailKicks;
        public bool FailDispose;
        public int FailReads;
        public Action? BeforeFailedRead;

        public override long GetTimestamp()
        {
            if (FailReads > 0)
            {
                FailReads--;
                BeforeFailedRead?.Invoke();
                throw ReadFailure;
            }
            return Inner.GetTimestamp();
        }

        public override long TimestampFrequency => Inner.TimestampFrequency;

        public override DateTimeOffset GetUtcNow() => Inner.GetUtcNow();

        public override ITimer CreateTimer(TimerCallback callback, object? state, TimeSpan dueTime, TimeSpan period)
            => new FlakyTimer(this, Inner.CreateTimer(callback, state, dueTime, period));

        private sealed class FlakyTimer(FlakyClock clock, ITimer inner) : ITimer
        {
            public bool Change(TimeSpan dueTime, TimeSpan period)
            {
                if (dueTime == TimeSpan.Zero && clock.FailKicks > 0)
                {
                    clock.FailKicks--;
                    throw KickFailure;
                }
                if (dueTime > TimeSpan.Zero && clock.FailArms > 0)
                {
                    clock.FailArms--;
                    throw ArmFailure;
                }
                return inner.Change(dueTime, period);
            }

            public void Dispose()
            {
                if (clock.FailDispose)
                {
                    throw DisposeFailure;
                }
                inner.Dispose();
            }

            public ValueTask DisposeAsync()
            {
                Dispose();
                return default;
            }
        }
    }
}

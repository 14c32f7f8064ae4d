using System;
using System.Collections.Concurrent;
using System.Threading;
using System.Threading.Tasks;
using static SpindleLib.Tests.UnobservedReports;

namespace SpindleLib.Tests.Time;

/// <summary>
/// A wheel on a <see cref="TimeProvider"/> whose timestamp steps back (a provider that derives it from a wall clock an
/// NTP step sets back, or any clock that is not monotonic). Found by a review of the time layer (2026-11-28): a delay
/// started after the step, due before the time the wheel had already reached, was linked into a slot behind the wheel's
/// time. The wheel took that slot for one a whole rotation of its level ahead, and its cascade moved the timer up a level
/// instead of down: a 2 ms delay after a 5 ms step back fired 64 ms late, and after a 1 s step it had not fired 795 days
/// later, when the pass cascaded it into its own slot for ever (the thread advancing the clock never returned). In a Debug
/// build the pass failed the wheel's "only the top level wraps" assertion, and the delay never fired.
/// Each test also checks that no pass failed (a failure goes to <see cref="Spindle.UnobservedException"/>), so they run
/// alone.
/// </summary>
[Collection(SequentialCollection.Name)]
public class BackwardClockTests
{
    private static TimeSpan Ms(double ms) => TimeSpan.FromMilliseconds(ms);

    [Theory]
    [InlineData(5L)]                        // level 0
    [InlineData(1_000L)]                    // level 1
    [InlineData(20L * 60 * 1000)]           // 20 minutes: level 3
    [InlineData(30L * 24 * 3600 * 1000)]    // 30 days: level 5, the top
    public void DelayStartedAfterTheClockStepsBack_FiresWhenTheClockReachesItsDeadline(long stepMs)
    {
        ConcurrentQueue<Exception> reported = Observe(Own.ReportedOnTestThreads(), () => // the passes run inline, on this thread
        {
            var clock = new SteppingClock();
            using var wheel = new TimerWheel(clock);
            TimeSpan first = Ms(stepMs + 1000);
            SpindleTask reach = wheel.Delay(first); // a pass at this time: the wheel's time reaches it
            Advance(clock, first);
            Assert.Equal(SpindleTaskStatus.Succeeded, reach.Status);
            SpindleTask before = wheel.Delay(10); // due when the clock reads 10 ms past the wheel's time
            SpindleTask sameTime = wheel.Delay(10); // due at the same millisecond: fires after it
            var order = new ConcurrentQueue<int>();
            before.GetAwaiter().OnCompleted(() => order.Enqueue(1));
            sameTime.GetAwaiter().OnCompleted(() => order.Enqueue(2));

            clock.StepBack(Ms(stepMs));
            SpindleTask after = wheel.Delay(2); // due when the clock reads 2 ms past its new reading
            Advance(clock, Ms(1));
            Assert.False(after.IsCompleted, "fired early: the clock has moved 1 ms of a 2 ms delay");
            Advance(clock, Ms(1));
            Assert.True(after.IsCompleted,
                $"a 2 ms delay started after a {stepMs} ms step back had not fired when the clock reached its deadline (pending: {wheel.PendingCount})");
            after.GetAwaiter().GetResult();

            Advance(clock, Ms(stepMs + 7)); // the clock reads 9 ms past where the wheel was
            Assert.False(before.IsCompleted, "the delay started before the step fired before the clock reached its deadline");
            Advance(clock, Ms(1));
            Assert.Equal(SpindleTaskStatus.Succeeded, before.Status);
            Assert.Equal(SpindleTaskStatus.Succeeded, sameTime.Status);
            Assert.Equal(new[] { 1, 2 }, order.ToArray()); // linked again in their order: still fired in the order started
            Assert.Equal(0, wheel.PendingCount);
        });
        Assert.Empty(reported); // a pass that failed (in a Debug build, the wheel's assertions) reports here
    }

    [Fact]
    public void PeriodicTimer_AfterTheClockStepsBack_TicksWhenTheClockReachesItsNextTick()
    {
        ConcurrentQueue<Exception> reported = Observe(Own.ReportedOnTestThreads(), () =>
        {
            var clock = new SteppingClock();
            using var wheel = new TimerWheel(clock);
            using var timer = new SpindlePeriodicTimer(Ms(10), wheel);
            SpindleTask reach = wheel.Delay(1000);
            Advance(clock, Ms(1000)); // the wheel is at 1000 ms
            Assert.Equal(SpindleTaskStatus.Succeeded, reach.Status);

            clock.StepBack(Ms(100));
            Assert.True(timer.WaitForNextTickAsync().GetAwaiter().GetResult()); // ticks were missed: at once
            SpindleTask<bool> next = timer.WaitForNextTickAsync(); // the tick at 910 ms, by the clock reading 900 ms
            Advance(clock, Ms(9));
            Assert.False(next.IsCompleted, "ticked early");
            Advance(clock, Ms(1));
            Assert.True(next.IsCompleted, $"the tick due at 910 ms had not come with the clock at 910 ms (pending: {wheel.PendingCount})");
            Assert.True(next.GetAwaiter().GetResult());
            Assert.Equal(0, wheel.PendingCount);
        });
        Assert.Empty(reported); // a pass that failed (in a Debug build, the wheel's assertions) reports here
    }

    [Fact]
    public void ClockThatStepsBackFurtherThanTheWheelCanFollow_NeverFiresEarly_NorLosesATimer()
    {
        ConcurrentQueue<Exception> reported = Observe(Own.ReportedOnTestThreads(), () =>
        {
            var clock = new SteppingClock();
            using var wheel = new TimerWheel(clock);
            TimeSpan hop = TimeSpan.FromDays(40);
            for (int i = 0; i < 21; i++) // 840 days, past the wheel's span (about 795 days)
            {
                SpindleTask reach = wheel.Delay(hop);
                Advance(clock, hop);
                Assert.Equal(SpindleTaskStatus.Succeeded, reach.Status);
            }
            SpindleTask before = wheel.Delay(10);

            clock.StepBack(TimeSpan.FromDays(830));
            SpindleTask after = wheel.Delay(2);
            Advance(clock, Ms(1));
            Assert.False(after.IsCompleted, "fired early: the clock has moved 1 ms of a 2 ms delay");
            Advance(clock, TimeSpan.FromDays(830) + Ms(8)); // 9 ms past where the wheel was
            Assert.True(after.IsCompleted, $"the delay had not fired with the clock past the wheel's furthest time (pending: {wheel.PendingCount})");
            after.GetAwaiter().GetResult();
            Assert.False(before.IsCompleted, "the delay started before the step fired before the clock reached its deadline");
            Advance(clock, Ms(1));
            Assert.Equal(SpindleTaskStatus.Succeeded, before.Status);
            Assert.Equal(0, wheel.PendingCount);
        });
        Assert.Empty(reported); // a pass that failed (in a Debug build, the wheel's assertions) reports here
    }

    /// <summary>
    /// A provider's timer that fires before the time it was armed for told the wheel that its timer truncates due times
    /// to whole milliseconds, and from then on it rounded every relative due time up to the next millisecond. A step back
    /// while the timer was armed made it fire "early" by the clock too (found by the review of the defects left alone,
    /// after section 24): the wheel took the step for truncation, for good. A delay started at a fraction of a
    /// millisecond then fired up to a millisecond after its deadline, and on a clock advanced in coarse steps (a
    /// fixed-step simulation, a test) a whole step late: here 16.6 ms past its deadline.
    /// </summary>
    [Fact]
    public void AStepBackWhileTheProvidersTimerIsArmed_IsNotTakenForATimerThatFiresEarly()
    {
        ConcurrentQueue<Exception> reported = Observe(Own.ReportedOnTestThreads(), () =>
        {
            var clock = new SteppingClock();
            using var wheel = new TimerWheel(clock);
            SpindleTask reach = wheel.Delay(50);
            Advance(clock, Ms(50)); // the wheel is at 50 ms
            Assert.Equal(SpindleTaskStatus.Succeeded, reach.Status);

            SpindleTask first = wheel.Delay(10); // the provider's timer is armed for 10 ms, to the deadline at 60 ms
            clock.StepBack(Ms(3));
            Advance(clock, Ms(10)); // it fires with the clock at 57 ms: before its deadline, because the clock stepped back
            Assert.False(first.IsCompleted, "fired early");
            Advance(clock, Ms(3));
            Assert.Equal(SpindleTaskStatus.Succeeded, first.Status);
            first.GetAwaiter().GetResult();

            Advance(clock, Ms(0.5));
            SpindleTask late = wheel.Delay(16); // started at 60.5 ms: due at 77 ms (76.5 rounded up)
            Advance(clock, Ms(16.6)); // one coarse step: the clock reads 77.1 ms
            Assert.True(late.IsCompleted,
                "a 16 ms delay due at 77 ms had not fired with the clock at 77.1 ms: the step back was taken for a timer that truncates, and the rest of the millisecond put its pass in the next step, 16.6 ms later");
            late.GetAwaiter().GetResult();
            Assert.Equal(0, wheel.PendingCount);
        });
        Assert.Empty(reported);
    }

    /// <summary>
    /// A step back smaller than the fraction of a millisecond a timer that truncates would drop makes a fire that looks
    /// like truncation: it used to switch the rounding on for good (left alone when the larger steps were fixed, as "a
    /// pass less than a millisecond late", though on a clock advanced in coarse steps it is a whole step). A fire that looks
    /// early is now confirmed by a probe (a second timer of the provider, armed for the fraction left), which this
    /// provider fires on time: the passes planned while the probe is out are rounded up, and none after.
    /// </summary>
    [Fact]
    public void AStepBackSmallerThanTheFractionTruncationDrops_IsNotTakenForATimerThatFiresEarly()
    {
        ConcurrentQueue<Exception> reported = Observe(Own.ReportedOnTestThreads(), () =>
        {
            var clock = new SteppingClock();
            using var wheel = new TimerWheel(clock);
            Advance(clock, Ms(50.5));
            SpindleTask first = wheel.Delay(10); // due at 61 ms: the provider's timer is armed for 10.5 ms
            clock.StepBack(Ms(0.3));
            Advance(clock, Ms(10.5)); // it fires with the clock at 60.7 ms, within the 0.5 ms truncation would drop
            Assert.False(first.IsCompleted, "fired early");
            Advance(clock, Ms(1)); // 61.7 ms
            Assert.Equal(SpindleTaskStatus.Succeeded, first.Status);
            first.GetAwaiter().GetResult();

            SpindleTask late = wheel.Delay(16); // started at 61.7 ms: due at 78 ms (77.7 rounded up)
            Advance(clock, Ms(16.6)); // one coarse step: the clock reads 78.3 ms
            Assert.True(late.IsCompleted,
                "a 16 ms delay due at 78 ms had not fired with the clock at 78.3 ms: a step back of 0.3 ms was taken for a timer that truncates, and the rest of the millisecond put its pass in the next step, 16.6 ms later");
            late.GetAwaiter().GetResult();
            Assert.Equal(0, wheel.PendingCount);
        });
        Assert.Empty(reported);
    }

    private static void Advance(SteppingClock clock, TimeSpan by) => TestUtil.AssertReturns(() => clock.Inner.Advance(by), "the advance never returned");

    /// <summary>
    /// A <see cref="ManualClock"/> whose reading can be stepped back. Its timers take relative due times only (the wheel
    /// cannot arm them at an absolute timestamp), counted on the inner clock, which only moves forward: so a timer armed for
    /// d fires once the reading has moved on by d, whatever step came before.
    /// </summary>
    private sealed class SteppingClock : TimeProvider
    {
        public readonly ManualClock Inner = new();
        private long _offset;

        public void StepBack(TimeSpan by) => Interlocked.Add(ref _offset, -by.Ticks);

        public override long GetTimestamp() => Inner.GetTimestamp() + Volatile.Read(ref _offset);

        public override long TimestampFrequency => Inner.TimestampFrequency;

        public override DateTimeOffset GetUtcNow() => Inner.GetUtcNow() + TimeSpan.FromTicks(Volatile.Read(ref _offset));

        public override ITimer CreateTimer(TimerCallback callback, object? state, TimeSpan dueTime, TimeSpan period)
            => new RelativeTimer(Inner.CreateTimer(callback, state, dueTime, period));

        private sealed class RelativeTimer(ITimer inner) : ITimer
        {
            public bool Change(TimeSpan dueTime, TimeSpan period) => inner.Change(dueTime, period);

            public void Dispose() => inner.Dispose();

            public ValueTask DisposeAsync() => inner.DisposeAsync();
        }
    }
}

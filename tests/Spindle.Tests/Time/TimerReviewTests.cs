using System;
using System.Diagnostics;
using System.Threading;
using Microsoft.Extensions.Time.Testing;

namespace SpindleLib.Tests.Time;

/// <summary>
/// Defects found by a review of the timer subsystem, each with the test that failed before its fix.
/// </summary>
public class TimerReviewTests
{
    /// <summary>
    /// A <see cref="ManualClock"/> advanced on one thread while another starts delays on wheels on that clock: once both
    /// calls have returned, every delay whose deadline the clock has reached has completed. A wheel's pass armed the
    /// provider's timer with a due time relative to the clock as it read it; an Advance that landed between that read and
    /// the Change (it found the wheel's timer unscheduled, so it fired nothing) made the Change count from the new time,
    /// and the delay waited for a later Advance, one whole advance late.
    /// </summary>
    [Fact]
    public void ManualClock_AdvancedWhileAnotherThreadStartsDelays_FiresEveryDelayItReaches()
        => AdvancedWhileAnotherThreadStartsDelays_FiresEveryDelayItReaches(static () =>
        {
            var clock = new ManualClock();
            return (clock, clock.Advance);
        });

    /// <summary>
    /// As <see cref="ManualClock_AdvancedWhileAnotherThreadStartsDelays_FiresEveryDelayItReaches"/>, on Microsoft's
    /// <see cref="FakeTimeProvider"/>, whose timers take only a relative due time: a pass that saw the clock move while it
    /// armed the provider's timer arms it again.
    /// </summary>
    [Fact]
    public void FakeTimeProvider_AdvancedWhileAnotherThreadStartsDelays_FiresEveryDelayItReaches()
        => AdvancedWhileAnotherThreadStartsDelays_FiresEveryDelayItReaches(static () =>
        {
            var clock = new FakeTimeProvider();
            return (clock, clock.Advance);
        });

    /// <summary>
    /// A clock that moves on every read (<see cref="FakeTimeProvider.AutoAdvanceAmount"/>) still arms the wheel's timer
    /// a bounded number of times: the re-arming above stops (for a far deadline, a re-arm for every 5 ms the reads move
    /// the clock would never end), and the delay fires, never early.
    /// </summary>
    [Fact]
    public void FakeTimeProvider_ThatMovesOnEveryRead_StillArmsAndFires()
    {
        var time = new FakeTimeProvider { AutoAdvanceAmount = TimeSpan.FromMilliseconds(5) };
        using var wheel = new TimerWheel(time);
        long start = time.GetTimestamp();
        SpindleTask delay = wheel.Delay(TimeSpan.FromDays(30));
        Assert.False(delay.IsCompleted);
        time.Advance(TimeSpan.FromDays(30));
        Assert.True(delay.IsCompleted);
        Assert.True(time.GetElapsedTime(start) >= TimeSpan.FromDays(30), "fired early");
        delay.GetAwaiter().GetResult();
        Assert.Equal(0, wheel.PendingCount);
    }

    /// <summary>
    /// One thread starts a 10 ms delay on each of 32 wheels of one clock while another advances the clock by 20 ms, landing
    /// anywhere in the starter's loop; once both have returned, every delay whose deadline the clock has reached must
    /// have completed.
    /// </summary>
    private static void AdvancedWhileAnotherThreadStartsDelays_FiresEveryDelayItReaches(Func<(TimeProvider Clock, Action<TimeSpan> Advance)> newClock)
    {
        const int wheelsPerRound = 32;
        int rounds = TestUtil.Stress(1000);
        var late = 0;
        var checkedDelays = 0;
        var wheels = new TimerWheel[wheelsPerRound];
        var delays = new SpindleTask[wheelsPerRound];
        int go = 0; // the round the starter may start (both sides spin: a blocked thread wakes too late to race)
        int started = 0; // the rounds the starter has begun
        int done = 0; // the rounds the starter has finished
        long loopTicks = 0; // how long the starter's last loop took (Stopwatch ticks)

        void Starter()
        {
            for (int r = 1; r <= rounds; r++)
            {
                SpinWait spin = default;
                while (Volatile.Read(ref go) != r)
                {
                    spin.SpinOnce(sleep1Threshold: -1);
                }
                long begin = Stopwatch.GetTimestamp();
                Volatile.Write(ref started, r);
                for (int i = 0; i < wheelsPerRound; i++)
                {
                    delays[i] = wheels[i].Delay(TimeSpan.FromMilliseconds(10));
                    Thread.SpinWait(50); // a gap, so the advancing thread is not starved of the clock's lock
                }
                Volatile.Write(ref loopTicks, Stopwatch.GetTimestamp() - begin);
                Volatile.Write(ref done, r);
            }
        }

        var starter = new Thread(Starter) { IsBackground = true, Name = "delay starter" };
        starter.Start();
        for (int round = 1; round <= rounds; round++)
        {
            (TimeProvider clock, Action<TimeSpan> advance) = newClock();
            for (int i = 0; i < wheelsPerRound; i++)
            {
                wheels[i] = new TimerWheel(clock);
            }
            Volatile.Write(ref go, round);
            SpinWait spin = default;
            while (Volatile.Read(ref started) != round)
            {
                spin.SpinOnce(sleep1Threshold: -1);
            }
            // Land the advance anywhere in the starter's loop: after a fraction of the last loop's length.
            long until = Stopwatch.GetTimestamp() + Volatile.Read(ref loopTicks) * (round % 16) / 16;
            while (Stopwatch.GetTimestamp() < until)
            {
                Thread.SpinWait(10);
            }
            advance(TimeSpan.FromMilliseconds(20));
            spin = default;
            while (Volatile.Read(ref done) != round)
            {
                spin.SpinOnce(sleep1Threshold: -1);
            }
            // Both calls have returned: no pass is running on any thread.

            long now = wheels[0].NowTick(); // every wheel counts from the clock's start
            for (int i = 0; i < wheelsPerRound; i++)
            {
                var node = (TimerNode)delays[i]._source!;
                if (node.Deadline <= now)
                {
                    checkedDelays++;
                    if (!delays[i].IsCompleted)
                    {
                        late++;
                    }
                }
                wheels[i].Dispose(); // ends the delays still pending (started after the advance)
                try
                {
                    delays[i].GetAwaiter().GetResult();
                }
                catch (OperationCanceledException)
                {
                }
            }
        }
        Assert.True(starter.Join(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)));
        Assert.True(checkedDelays > 0, "no delay started before the advance: the race was never run");
        Assert.True(late == 0, $"{late} of {checkedDelays} delays due by the clock's time had not fired once Advance and Delay had returned");
    }
}

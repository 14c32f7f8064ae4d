using System;
using System.Diagnostics;
using System.Threading;

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
    {
        const int wheelsPerRound = 32;
        int rounds = TestUtil.Stress(1000);
        var late = 0;
        var checkedDelays = 0;
        ManualClock clock;
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
            clock = new ManualClock();
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
            clock.Advance(TimeSpan.FromMilliseconds(20));
            spin = default;
            while (Volatile.Read(ref done) != round)
            {
                spin.SpinOnce(sleep1Threshold: -1);
            }
            // Both calls have returned: no pass is running on any thread.

            long now = clock.GetTimestamp() / TimeSpan.TicksPerMillisecond;
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

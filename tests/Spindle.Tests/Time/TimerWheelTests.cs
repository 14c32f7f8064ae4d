using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Time;

/// <summary>The wheel's timing contract, on a manual clock: nothing early, everything due within one tick, exact level boundaries.</summary>
public class TimerWheelTests
{
    private static readonly TimeSpan OneTick = TimeSpan.FromTicks(1);

    private static TimeSpan Ms(double ms) => TimeSpan.FromTicks((long)Math.Round(ms * TimeSpan.TicksPerMillisecond));

    [Theory]
    [InlineData(1)]
    [InlineData(2)]
    [InlineData(17)]
    [InlineData(1000)]
    public void DelayCompletesExactlyAtItsDeadlineAndNotBefore(int ms)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        SpindleTask delay = wheel.Delay(ms);
        clock.Advance(Ms(ms) - OneTick);
        Assert.False(delay.IsCompleted, "fired early");
        clock.Advance(OneTick);
        Assert.True(delay.IsCompleted, "not fired at its deadline");
        delay.GetAwaiter().GetResult();
        Assert.Equal(0, wheel.PendingCount);
    }

    [Theory]
    [InlineData(0.3, 5.0)]
    [InlineData(0.0001, 1.0)]
    [InlineData(0.9999, 0.0002)]
    [InlineData(12.5, 63.7)]
    public void ADeadlineBetweenTicksIsRoundedUpAndFiresWithinOneTick(double startMs, double delayMs)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        clock.Advance(Ms(startMs));
        SpindleTask delay = wheel.Delay(Ms(delayMs));
        TimeSpan due = Ms(startMs + delayMs);
        clock.Advance(due - clock.Elapsed - OneTick);
        Assert.False(delay.IsCompleted, "fired before its delay had passed");
        clock.Advance(Ms(1));
        Assert.True(delay.IsCompleted, "not fired within one tick of its deadline");
        delay.GetAwaiter().GetResult();
    }

    /// <summary>Each level boundary (64^k ms) and its neighbours, from several start offsets: the fire time is exact.</summary>
    [Theory]
    [InlineData(0, 63)]
    [InlineData(0, 64)]
    [InlineData(0, 65)]
    [InlineData(1, 63)]
    [InlineData(1, 64)]
    [InlineData(63, 1)]
    [InlineData(63, 64)]
    [InlineData(0, 4095)]
    [InlineData(0, 4096)]
    [InlineData(0, 4097)]
    [InlineData(4000, 96)]
    [InlineData(4000, 4096)]
    [InlineData(0, 262_143)]
    [InlineData(0, 262_144)]
    [InlineData(0, 262_145)]
    [InlineData(262_100, 44)]
    [InlineData(0, 16_777_215)]
    [InlineData(0, 16_777_216)]
    [InlineData(0, 16_777_217)]
    [InlineData(5, 1_073_741_823)]
    [InlineData(0, 1_073_741_824)]
    [InlineData(7, 4_294_967_294)]
    public void EachCascadeBoundaryIsExact(long startMs, long delayMs)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        clock.Advance(TimeSpan.FromMilliseconds(startMs));
        SpindleTask delay = wheel.Delay(TimeSpan.FromMilliseconds(delayMs));
        clock.Advance(TimeSpan.FromMilliseconds(delayMs) - OneTick);
        Assert.False(delay.IsCompleted, "fired early");
        Assert.Equal(1, wheel.PendingCount);
        clock.Advance(OneTick);
        Assert.True(delay.IsCompleted, "not fired at its deadline");
        delay.GetAwaiter().GetResult();
        Assert.Equal(0, wheel.PendingCount);
    }

    /// <summary>Past 2^36 ms the top level wraps around; deadlines that straddle the wrap still fire exactly.</summary>
    [Theory]
    [InlineData(10, 100)]
    [InlineData(1, 1)]
    [InlineData(5000, 70_000)]
    [InlineData(3, 4_294_967_294)]
    public void DeadlinesAcrossTheTopLevelWrapFireExactly(long msBeforeWrap, long delayMs)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        clock.Advance(TimeSpan.FromMilliseconds(TimerWheel.WheelSpan - msBeforeWrap));
        SpindleTask keepWheelBusy = wheel.Delay(TimeSpan.FromMilliseconds(1));
        clock.Advance(TimeSpan.FromMilliseconds(1));
        keepWheelBusy.GetAwaiter().GetResult();
        SpindleTask delay = wheel.Delay(TimeSpan.FromMilliseconds(delayMs));
        clock.Advance(TimeSpan.FromMilliseconds(delayMs) - OneTick);
        Assert.False(delay.IsCompleted, "fired early");
        clock.Advance(OneTick);
        Assert.True(delay.IsCompleted, "not fired at its deadline");
        delay.GetAwaiter().GetResult();
    }

    [Fact]
    public void TimersFireInDeadlineOrderWhenTimeJumps()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var fired = new List<int>();
        int[] delays = { 5000, 3, 64, 4096, 1, 65, 63, 262_144, 2 };
        foreach (int d in delays)
        {
            SpindleTask.Awaiter awaiter = wheel.Delay(d).GetAwaiter();
            awaiter.OnCompleted(() =>
            {
                awaiter.GetResult();
                fired.Add(d);
            });
        }
        clock.Advance(TimeSpan.FromSeconds(300));
        int[] expected = (int[])delays.Clone();
        Array.Sort(expected);
        Assert.Equal(expected, fired);
    }

    [Fact]
    public void AContinuationRunsOnTheAdvancingThreadAndMayArmTheNextDelay()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var times = new List<TimeSpan>();
        int advancer = Environment.CurrentManagedThreadId;
        bool sameThread = true;

        async SpindleTask Loop()
        {
            for (int i = 0; i < 5; i++)
            {
                await wheel.Delay(10);
                sameThread &= Environment.CurrentManagedThreadId == advancer;
                times.Add(clock.Elapsed);
            }
        }

        SpindleTask loop = Loop();
        clock.Advance(TimeSpan.FromMilliseconds(1000));
        Assert.True(loop.IsCompleted);
        loop.GetAwaiter().GetResult();
        Assert.True(sameThread);
        Assert.Equal(new[] { 10, 20, 30, 40, 50 }, times.ConvertAll(t => (int)t.TotalMilliseconds));
    }

    [Fact]
    public void NothingTicksWhileIdle()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        SpindleTask delay = wheel.Delay(TimeSpan.FromHours(1));
        // The wheel arms its provider's timer for the next occupied slot, not for every millisecond: a cascade or two.
        int passes = CountPasses(clock, wheel, TimeSpan.FromHours(1));
        Assert.True(delay.IsCompleted);
        delay.GetAwaiter().GetResult();
        Assert.InRange(passes, 1, 6);
    }

    private static int CountPasses(ManualClock clock, TimerWheel wheel, TimeSpan span)
    {
        long before = wheel.PassCount;
        clock.Advance(span);
        return (int)(wheel.PassCount - before);
    }

    [Fact]
    public void ALargeNumberOfTimersAtManyLevelsAllFireAtTheirDeadlines()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var rng = new Random(7);
        const int n = 20_000;
        var fireTimes = new long[n];
        var expected = new long[n];
        for (int i = 0; i < n; i++)
        {
            int delay = rng.Next(1, 1 << rng.Next(1, 24));
            expected[i] = delay;
            int index = i;
            SpindleTask.Awaiter awaiter = wheel.Delay(delay).GetAwaiter();
            awaiter.OnCompleted(() =>
            {
                awaiter.GetResult();
                fireTimes[index] = (long)clock.Elapsed.TotalMilliseconds;
            });
        }
        Assert.Equal(n, wheel.PendingCount);
        clock.Advance(TimeSpan.FromMilliseconds(1 << 24));
        for (int i = 0; i < n; i++)
        {
            Assert.True(expected[i] == fireTimes[i], $"timer {i} of {expected[i]} ms fired at {fireTimes[i]} ms; {wheel.PendingCount} pending");
        }
        Assert.Equal(0, wheel.PendingCount);
    }

    /// <summary>
    /// A million random timers, armed at random moments while time moves in random steps, a tenth of them cancelled:
    /// each one that fires does so exactly at its rounded-up deadline, in the order of a sorted model, and each
    /// cancelled one never fires.
    /// </summary>
    [Fact]
    public void AMillionRandomTimersMatchASortedModel()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var rng = new Random(2026);
        const int n = 1_000_000;
        const int perStep = 10_000;
        var deadline = new long[n];
        var firedAt = new long[n];
        var cancelled = new bool[n];
        var order = new List<int>(n);
        var sources = new List<CancellationTokenSource>();
        int canceledCount = 0;
        for (int start = 0; start < n; start += perStep)
        {
            var cts = new CancellationTokenSource();
            sources.Add(cts);
            long nowTicks = clock.Elapsed.Ticks;
            for (int i = start; i < start + perStep; i++)
            {
                long delayTicks = rng.Next(1, 1 << rng.Next(1, 27)) * 10L + rng.Next(0, 10);
                // Rounded up to whole milliseconds, as the wheel promises.
                deadline[i] = (nowTicks + delayTicks + TimeSpan.TicksPerMillisecond - 1) / TimeSpan.TicksPerMillisecond;
                firedAt[i] = -1;
                bool cancel = rng.Next(10) == 0;
                cancelled[i] = cancel;
                int index = i;
                SpindleTask.Awaiter awaiter = wheel.Delay(TimeSpan.FromTicks(delayTicks), cancel ? cts.Token : default).GetAwaiter();
                awaiter.OnCompleted(() =>
                {
                    try
                    {
                        awaiter.GetResult();
                        firedAt[index] = clock.Elapsed.Ticks;
                        order.Add(index);
                    }
                    catch (OperationCanceledException)
                    {
                        Interlocked.Increment(ref canceledCount);
                    }
                });
            }
            if (rng.Next(2) == 0)
            {
                cts.Cancel();
            }
            clock.Advance(TimeSpan.FromTicks(rng.Next(0, 50_000_000)));
        }
        foreach (CancellationTokenSource cts in sources)
        {
            cts.Cancel();
        }
        clock.Advance(TimeSpan.FromMilliseconds(1 << 27));

        var model = new List<int>(n);
        for (int i = 0; i < n; i++)
        {
            if (firedAt[i] >= 0)
            {
                Assert.Equal(deadline[i] * TimeSpan.TicksPerMillisecond, firedAt[i]);
                model.Add(i);
            }
            else
            {
                Assert.True(cancelled[i], $"timer {i} never fired and was not cancelled");
            }
        }
        Assert.Equal(n, model.Count + canceledCount);
        model.Sort((a, b) => deadline[a].CompareTo(deadline[b]));
        for (int k = 0; k < order.Count; k++)
        {
            Assert.Equal(deadline[model[k]], deadline[order[k]]);
        }
        Assert.Equal(0, wheel.PendingCount);
    }

    [Fact]
    public void TheDefaultWheelWaitsAtLeastTheDelayInRealTime()
    {
        async Task Run()
        {
            var watch = Stopwatch.StartNew();
            await Spindle.Delay(TimeSpan.FromMilliseconds(15));
            Assert.True(watch.Elapsed >= TimeSpan.FromMilliseconds(15), $"completed after {watch.Elapsed.TotalMilliseconds} ms");
            for (int i = 0; i < 20; i++)
            {
                await Spindle.Delay(1);
            }
        }
        TestUtil.WithTimeout(Run()).GetAwaiter().GetResult();
    }
}

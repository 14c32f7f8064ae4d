using System;
using System.Collections.Generic;
using System.Threading;
using Microsoft.Extensions.Time.Testing;

namespace SpindleLib.Tests.Time;

/// <summary>
/// A wheel driven by Microsoft's own fake clock (<see cref="FakeTimeProvider"/>, from
/// Microsoft.Extensions.TimeProvider.Testing), not by Spindle's <see cref="ManualClock"/>: a <see cref="TimerWheel"/>
/// accepts any <see cref="TimeProvider"/>, and the timing contract (never early, due within a tick, deadline order,
/// cancellation leaves nothing behind) must hold on the one users test with too.
/// </summary>
public class FakeTimeProviderTests
{
    private static readonly TimeSpan OneTick = TimeSpan.FromTicks(1);

    [Theory]
    [InlineData(1)]
    [InlineData(17)]
    [InlineData(64)]
    [InlineData(1000)]
    [InlineData(70_000)] // past the first two levels: cascades twice on the way down
    public void Delay_FiresExactlyAtItsDeadline_AndNotBefore(int ms)
    {
        var time = new FakeTimeProvider();
        using var wheel = new TimerWheel(time);
        SpindleTask delay = wheel.Delay(ms);
        Assert.Equal(1, wheel.PendingCount);
        time.Advance(TimeSpan.FromMilliseconds(ms) - OneTick);
        Assert.False(delay.IsCompleted, "fired early");
        time.Advance(OneTick);
        Assert.True(delay.IsCompleted, "not fired at its deadline");
        delay.GetAwaiter().GetResult();
        Assert.Equal(0, wheel.PendingCount);
    }

    [Fact]
    public void Delay_StartedBetweenTicks_IsRoundedUpToTheNextMillisecond()
    {
        var time = new FakeTimeProvider();
        using var wheel = new TimerWheel(time);
        time.Advance(TimeSpan.FromMilliseconds(0.4));
        SpindleTask delay = wheel.Delay(TimeSpan.FromMilliseconds(2.3)); // due at 2.7 ms: fires at the 3 ms tick
        time.Advance(TimeSpan.FromMilliseconds(2.6) - OneTick);
        Assert.False(delay.IsCompleted, "fired before 3 ms");
        time.Advance(OneTick);
        Assert.True(delay.IsCompleted, "not fired at 3 ms");
        delay.GetAwaiter().GetResult();
    }

    /// <summary>
    /// FakeTimeProvider.Advance moves the time in one step and then runs what is due, so one pass of the wheel covers
    /// the whole jump, with some delays linked (inserts that drove a pass at once) and some still in its inbox: all fire
    /// in deadline order. Before the fix the ones still in the inbox fired after the linked ones, newest first.
    /// </summary>
    [Fact]
    public void ManyDelays_OneLongJump_RunInDeadlineOrder()
    {
        var time = new FakeTimeProvider();
        using var wheel = new TimerWheel(time);
        int[] delaysMs = [500, 3, 64, 65, 4096, 1, 63, 4095, 200, 7];
        var fired = new List<int>();
        foreach (int ms in delaysMs)
        {
            Record(wheel.Delay(ms), ms, fired);
        }
        Assert.Equal(delaysMs.Length, wheel.PendingCount);
        time.Advance(TimeSpan.FromSeconds(10));
        int[] expected = (int[])delaysMs.Clone();
        Array.Sort(expected);
        Assert.Equal(expected, fired);
        Assert.Equal(0, wheel.PendingCount);

        static async void Record(SpindleTask delay, int ms, List<int> fired)
        {
            await delay;
            fired.Add(ms); // the wheel's pass runs on the advancing thread, so the list needs no lock
        }
    }

    [Fact]
    public void Delay_CancelledBeforeItsDeadline_CompletesCanceled_AndLeavesTheWheel()
    {
        var time = new FakeTimeProvider();
        using var wheel = new TimerWheel(time);
        using var cts = new CancellationTokenSource();
        SpindleTask delay = wheel.Delay(TimeSpan.FromMilliseconds(50), cts.Token);
        time.Advance(TimeSpan.FromMilliseconds(20));
        cts.Cancel();
        Assert.Equal(SpindleTaskStatus.Canceled, delay.Status);
        Assert.ThrowsAny<OperationCanceledException>(() => delay.GetAwaiter().GetResult());
        time.Advance(TimeSpan.FromMilliseconds(1)); // the wheel's next pass takes the cancelled node out
        Assert.Equal(0, wheel.PendingCount);
        time.Advance(TimeSpan.FromMilliseconds(100)); // and its old deadline passes with nothing to fire
        Assert.Equal(0, wheel.PendingCount);
    }

    [Fact]
    public void WithTimeout_InputPending_TimesOutAtTheDeadline_AndAnInputThatWinsKeepsItsValue()
    {
        var time = new FakeTimeProvider();
        using var wheel = new TimerWheel(time);

        var slow = new Promise<int>();
        SpindleTask<int> timedOut = slow.Task.WithTimeout(TimeSpan.FromMilliseconds(30), wheel);
        time.Advance(TimeSpan.FromMilliseconds(30) - OneTick);
        Assert.False(timedOut.IsCompleted, "timed out early");
        time.Advance(OneTick);
        Assert.Throws<TimeoutException>(() => timedOut.GetAwaiter().GetResult());
        slow.SetResult(1); // the late result is read and dropped

        var fast = new Promise<int>();
        SpindleTask<int> won = fast.Task.WithTimeout(TimeSpan.FromMilliseconds(30), wheel);
        time.Advance(TimeSpan.FromMilliseconds(10));
        fast.SetResult(42);
        Assert.Equal(42, won.GetAwaiter().GetResult());
        time.Advance(TimeSpan.FromMilliseconds(100)); // the timeout that lost fires nothing
        Assert.Equal(0, wheel.PendingCount);
    }

    [Fact]
    public void PeriodicTimer_TicksAtEachMultipleOfItsPeriod()
    {
        var time = new FakeTimeProvider();
        using var wheel = new TimerWheel(time);
        using var timer = new SpindlePeriodicTimer(TimeSpan.FromMilliseconds(25), wheel);
        for (int k = 1; k <= 4; k++)
        {
            SpindleTask<bool> tick = timer.WaitForNextTickAsync();
            time.Advance(TimeSpan.FromMilliseconds(25) - OneTick);
            Assert.False(tick.IsCompleted, $"tick {k} came early");
            time.Advance(OneTick);
            Assert.True(tick.IsCompleted, $"tick {k} did not come at {k * 25} ms");
            Assert.True(tick.GetAwaiter().GetResult());
        }
        SpindleTask<bool> pending = timer.WaitForNextTickAsync();
        timer.Dispose();
        Assert.False(pending.GetAwaiter().GetResult(), "a wait pending at Dispose reports false");
    }
}

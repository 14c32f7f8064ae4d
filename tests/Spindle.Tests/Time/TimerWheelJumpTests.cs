using System;
using System.Threading;
using System.Threading.Tasks;
using Microsoft.Extensions.Time.Testing;

namespace SpindleLib.Tests.Time;

/// <summary>
/// A pass that covers a jump longer than the wheel's span (2^36 ms, about 795 days) with, in one insert snapshot, a
/// timer from before the jump and one started after it with the longest delay. A first version of the reordered pass
/// linked both relative to the early one's deadline, so the far one landed in the wrong rotation of the top level and
/// its cascade put it back into the slot being drained, for ever (found by a review; both tests hung).
/// </summary>
public class TimerWheelJumpTests
{
    private static void AssertReturns(Action pass) => TestUtil.AssertReturns(pass, "the pass never returned");

    [Fact]
    public void Shard_AnOldAndAFarTimerInOneSnapshot_AfterAJumpLongerThanTheSpan_BothLandRight()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var shard = new WheelShard(wheel, dispatch: false);
        long now = 800L * 24 * 3600 * 1000; // 800 days, in wheel ticks (ms)
        TimerNode early = TimerNode.Rent(wheel);
        early.Deadline = 20; // started near 0 ms, still in the inbox
        shard.Push(early);
        TimerNode far = TimerNode.Rent(wheel);
        far.Deadline = now + uint.MaxValue - 1; // started at 800 days with the longest delay
        shard.Push(far);

        AssertReturns(() => shard.DrainInboxes(now));
        Assert.True(early.IsCompleted, "the early timer did not fire");
        Assert.False(far.IsCompleted, "the far timer, 49 days away, fired");
        shard.PublishCount(); // as a drive does after its pass
        Assert.Equal(1, shard.PendingCount);
        AssertReturns(() => shard.DrainInboxes(now + uint.MaxValue - 2));
        Assert.False(far.IsCompleted, "the far timer fired a millisecond early");
        AssertReturns(() => shard.DrainInboxes(now + uint.MaxValue - 1));
        Assert.True(far.IsCompleted, "the far timer did not fire at its deadline");
    }

    [Fact]
    public void FakeTimeProvider_AJumpOf800Days_WithADelayStartedByAnEarlierTimer_FiresEachAtItsDeadline()
    {
        var time = new FakeTimeProvider();
        using var wheel = new TimerWheel(time);
        SpindleTask first = wheel.Delay(10); // an idle wheel: a pass at once, the wheel's timer set for 10 ms
        SpindleTask second = wheel.Delay(20); // not earlier than 10 ms: waits in the inbox, no pass
        SpindleTask far = default;
        using ITimer user = time.CreateTimer(_ => far = wheel.Delay(TimerWheel.MaxDelay), null,
            TimeSpan.FromMilliseconds(5), Timeout.InfiniteTimeSpan); // runs before the wheel's pass, at 800 days

        AssertReturns(() => time.Advance(TimeSpan.FromDays(800)));
        Assert.True(first.IsCompleted && second.IsCompleted, "the delays due before the jump did not fire");
        Assert.False(far.IsCompleted, "the longest delay fired at once");
        first.GetAwaiter().GetResult();
        second.GetAwaiter().GetResult();
        AssertReturns(() => time.Advance(TimerWheel.MaxDelay));
        Assert.True(far.IsCompleted, "the longest delay did not fire after its delay");
        far.GetAwaiter().GetResult();
    }

    /// <summary>
    /// A <see cref="ManualClock"/> advanced to the end of its range (<c>Advance(TimeSpan.MaxValue)</c>, documented as the
    /// way to fire every timer) can go no further, so a timer started then can never fall due, and must never fire (found
    /// by a review of the time layer, 2026-11-28): its deadline wrapped past the end of a long to a tick in the past, so
    /// a delay, a timeout and every wait on a periodic timer completed at once. They now wait, and the wheel's Dispose
    /// (or the input, or the periodic timer's Dispose) ends them as it ends any pending timer.
    /// </summary>
    [Fact]
    public void ManualClock_AdvancedToItsEnd_TimersStartedThenNeverFire()
    {
        var clock = new ManualClock();
        var wheel = new TimerWheel(clock);
        using var periodic = new SpindlePeriodicTimer(TimeSpan.FromMilliseconds(10), wheel);
        SpindleTask before = wheel.Delay(TimeSpan.FromDays(40));
        AssertReturns(() => clock.Advance(TimeSpan.MaxValue));
        Assert.Equal(SpindleTaskStatus.Succeeded, before.Status);
        before.GetAwaiter().GetResult();
        Assert.True(periodic.WaitForNextTickAsync().GetAwaiter().GetResult(), "the ticks missed on the way count as one");

        SpindleTask delay = wheel.Delay(10);
        var input = new Promise();
        SpindleTask timed = input.Task.WithTimeout(TimeSpan.FromMilliseconds(10), wheel);
        SpindleTask<bool> tick = periodic.WaitForNextTickAsync();
        using var lateStart = new SpindlePeriodicTimer(TimeSpan.FromMilliseconds(10), wheel);
        SpindleTask<bool> lateTick = lateStart.WaitForNextTickAsync();
        AssertReturns(() => clock.Advance(TimeSpan.MaxValue));
        Assert.False(delay.IsCompleted, "a delay fired though its deadline is past the end of the clock");
        Assert.False(timed.IsCompleted, "a timeout fired though its deadline is past the end of the clock");
        Assert.False(tick.IsCompleted, "a periodic tick past the end of the clock was delivered");
        Assert.False(lateTick.IsCompleted, "a periodic tick past the end of the clock was delivered");

        input.SetResult();
        timed.GetAwaiter().GetResult();
        periodic.Dispose();
        Assert.False(tick.GetAwaiter().GetResult());
        wheel.Dispose();
        Assert.ThrowsAny<OperationCanceledException>(() => delay.GetAwaiter().GetResult());
        Assert.False(lateTick.GetAwaiter().GetResult());
        Assert.Equal(0, wheel.PendingCount);
    }
}

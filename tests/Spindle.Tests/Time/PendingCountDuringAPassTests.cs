using System;
using System.Collections.Generic;

namespace SpindleLib.Tests.Time;

/// <summary>
/// TimerWheel.PendingCount (and so spindle.timer.count, which reads it on TimerWheel.Default) is documented as the timers
/// in the wheel as of its last pass plus those added since. A pass takes the timers added since the last one out of the
/// insert inbox and links them only after it has fired what is due; code that ran in that pass (a continuation the
/// wheel runs inline: a ManualClock's, a frame loop's) found them counted nowhere. A count that leaves out pending
/// timers is the one error a "nothing left in the wheel" check cannot afford.
/// </summary>
public sealed class PendingCountDuringAPassTests
{
    /// <summary>
    /// On a <see cref="ManualClock"/>, and on a frame loop's clock. The first no longer reaches the count the pass keeps:
    /// an Advance takes the inbox in before it moves time (<c>TimerWheel.SettleForAdvance</c>), so the pass that fires the
    /// first delay finds the inbox empty. A frame runs its pass with whatever the inbox holds, so only the second failed
    /// when the pass did not count the inbox it had taken (a mutation of <c>WheelShard.DrainInboxes</c>, decisions
    /// section 53's M04: 1 seen inside the pass).
    /// </summary>
    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public void TimersAddedSinceTheLastPass_AreCounted_ByCodeRunningInTheNextPass(bool framesClock)
    {
        TimerWheel wheel;
        Action<int> moveTo;
        if (framesClock)
        {
            var loopClock = new LoopClock();
            wheel = new TimerWheel(loopClock);
            moveTo = ms =>
            {
                loopClock.Set(TimeSpan.FromMilliseconds(ms).Ticks);
                loopClock.FireIfDue(); // a frame
            };
        }
        else
        {
            var manualClock = new ManualClock();
            wheel = new TimerWheel(manualClock);
            moveTo = ms => manualClock.Advance(TimeSpan.FromMilliseconds(ms) - manualClock.Elapsed);
        }
        using var disposing = wheel;
        var seen = new List<long>();
        SpindleTask first = wheel.Delay(TimeSpan.FromMilliseconds(1));
        moveTo(0); // a frame runs the pass the delay's kick asked for (a manual clock ran it inside the kick)
        // Later than the pass the wheel plans for the first: no kick, they wait in the insert inbox until that pass.
        SpindleTask second = wheel.Delay(TimeSpan.FromMilliseconds(100));
        SpindleTask third = wheel.Delay(TimeSpan.FromMilliseconds(200));
        Assert.Equal(3, wheel.PendingCount);
        first.GetAwaiter().UnsafeOnCompleted(() => seen.Add(wheel.PendingCount)); // runs inline in the pass
        moveTo(1);
        Assert.True(first.IsCompleted);
        Assert.Single(seen);
        Assert.True(seen[0] >= 2, $"PendingCount was {seen[0]} inside the pass, with the two later delays pending");
        Assert.Equal(2, wheel.PendingCount);
        moveTo(200);
        Assert.True(second.IsCompleted && third.IsCompleted);
        Assert.Equal(0, wheel.PendingCount);
        first.GetAwaiter().GetResult();
        second.GetAwaiter().GetResult();
        third.GetAwaiter().GetResult();
    }
}

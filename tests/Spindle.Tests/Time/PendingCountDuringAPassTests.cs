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
    [Fact]
    public void TimersAddedSinceTheLastPass_AreCounted_ByCodeRunningInTheNextPass()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var seen = new List<long>();
        SpindleTask first = wheel.Delay(TimeSpan.FromMilliseconds(1));
        // Later than the pass the wheel plans for the first: no kick, they wait in the insert inbox until that pass.
        SpindleTask second = wheel.Delay(TimeSpan.FromMilliseconds(100));
        SpindleTask third = wheel.Delay(TimeSpan.FromMilliseconds(200));
        Assert.Equal(3, wheel.PendingCount);
        first.GetAwaiter().UnsafeOnCompleted(() => seen.Add(wheel.PendingCount)); // runs inline in the pass
        clock.Advance(TimeSpan.FromMilliseconds(1));
        Assert.True(first.IsCompleted);
        Assert.Single(seen);
        Assert.True(seen[0] >= 2, $"PendingCount was {seen[0]} inside the pass, with the two later delays pending");
        Assert.Equal(2, wheel.PendingCount);
        clock.Advance(TimeSpan.FromMilliseconds(200));
        Assert.True(second.IsCompleted && third.IsCompleted);
        Assert.Equal(0, wheel.PendingCount);
        first.GetAwaiter().GetResult();
        second.GetAwaiter().GetResult();
        third.GetAwaiter().GetResult();
    }
}

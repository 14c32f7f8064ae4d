using System;
using System.Threading;

using SpindleLib.Tests.Sources;

namespace SpindleLib.Tests.Time;

/// <summary>
/// A periodic timer disposed as its consumer starts a wait: the wait returns false, whether the timer was disposed first
/// (at once, as the BCL's PeriodicTimer) or the wait was pending at Dispose. Dispose marks the timer disposed and then tries to claim the
/// wait's timer; a wait arms its timer and then looks at the mark again (a Dekker pair: one of the two sees the other).
/// Without the wait's second look, a Dispose that came after the wait's first look and before its timer was armed found
/// nothing to claim, and the wait stayed pending until a tick that a disposed timer never delivers (mutation testing,
/// mut54: P5; no test failed with it). Run alone: its two threads must run at once.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class PeriodicTimerDisposeWaitRaceTests
{
    [Fact]
    public void ADisposeAsAWaitStarts_EndsTheWaitWithFalse()
    {
        var clock = new ManualClock(); // never advanced: no tick ends a wait
        using var wheel = new TimerWheel(clock);
        var race = new RaceRounds("PeriodicTimerDisposeWaitRaceTests", TestUtil.Stress(Spinning.Helps ? 20_000 : 1_000)) { TimeCap = TimeSpan.FromSeconds(5) };
        race.Run(round =>
        {
            var timer = new SpindlePeriodicTimer(TimeSpan.FromMilliseconds(10), wheel);
            SpindleTask<bool> wait = default;
            (Exception? mine, Exception? theirs) = race.Racer.RunBothAtOnce(round, () => wait = timer.WaitForNextTickAsync(), timer.Dispose);
            Assert.Null(theirs);
            Assert.Null(mine);
            if (!wait.IsCompleted)
            {
                race.Fail($"the wait started as the timer was disposed is still pending ({wheel.PendingCount} timers in the wheel)");
                return;
            }
            Assert.False(wait.GetAwaiter().GetResult());
            SpindleTask<bool> later = timer.WaitForNextTickAsync(); // and every wait after: false at once
            Assert.True(later.IsCompleted);
            Assert.False(later.GetAwaiter().GetResult());
        });
        race.AssertNone($"a wait started as its timer was disposed ({race.Ran} rounds)");
        Assert.Equal(0, wheel.PendingCount);
    }
}

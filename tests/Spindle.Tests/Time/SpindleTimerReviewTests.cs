using System;
using System.Collections.Generic;
using System.Threading;

namespace SpindleLib.Tests.Time;

/// <summary>
/// An adversarial review of <see cref="SpindleTimer"/> (review54): each test here failed before the commit that added it.
/// </summary>
public class SpindleTimerReviewTests
{
    private static TimeSpan Ms(long ms) => TimeSpan.FromMilliseconds(ms);

    private static readonly Action<object?> Record = static s =>
    {
        var (order, name) = ((List<string>, string))s!;
        order.Add(name);
    };

    /// <summary>
    /// Callback timers changed since the last pass (here: created while the provider's thread was late), on a wheel that
    /// held nothing else, fire in deadline order, and after a delay due before them, as a <see cref="ManualClock"/>'s
    /// callbacks are documented to ("one at a time, in deadline order"). The change inbox is a stack, and the pass used
    /// to move an empty shard's time to now before settling it, so every one was already due and fired at once, newest
    /// first, before the delays of the same pass joined: B (5 ms), A (3 ms), then the delay (1 ms).
    /// </summary>
    [Fact]
    public void ChangedTimers_OnAnEmptyWheel_FireInDeadlineOrder_WithTheDelaysOfTheSamePass()
    {
        var clock = new DeferredClock();
        using var wheel = new TimerWheel(clock);
        var order = new List<string>();
        wheel.Delay(1).ContinueWithForTest(() => order.Add("delay 1"));
        using SpindleTimer a = wheel.CreateTimer(Record, (order, "timer 3"), Ms(3));
        using SpindleTimer b = wheel.CreateTimer(Record, (order, "timer 5"), Ms(5));
        using SpindleTimer c = wheel.CreateTimer(Record, (order, "timer 4"), Ms(4));
        clock.MoveWithoutFiring(Ms(10)); // the provider's thread is late: one pass covers all four
        clock.RunDue();
        Assert.Equal(new[] { "delay 1", "timer 3", "timer 4", "timer 5" }, order);
    }

    /// <summary>
    /// Timers changed to the same tick fire in the order they were changed (as delays due at the same millisecond fire in
    /// the order they were started), whether or not the wheel held other timers: the stack's newest used to fire first.
    /// </summary>
    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public void ChangedTimers_DueAtOneTick_FireInTheOrderTheyWereChanged(bool wheelHoldsAnother)
    {
        var clock = new DeferredClock();
        using var wheel = new TimerWheel(clock);
        var order = new List<string>();
        using SpindleTimer far = wheel.CreateTimer(Record, (order, "far"), wheelHoldsAnother ? Ms(1000) : Timeout.InfiniteTimeSpan);
        clock.RunDue();
        using SpindleTimer first = wheel.CreateTimer(Record, (order, "first"), Ms(2));
        using SpindleTimer second = wheel.CreateTimer(Record, (order, "second"), Ms(2));
        using SpindleTimer third = wheel.CreateTimer(Record, (order, "third"), Ms(2));
        clock.MoveWithoutFiring(Ms(10));
        clock.RunDue();
        Assert.Equal(new[] { "first", "second", "third" }, order);
    }
}

using System;
using System.Collections.Generic;
using Microsoft.Extensions.Time.Testing;

namespace SpindleLib.Tests.Time;

/// <summary>
/// A pass that finds new timers already due in the insert inbox (a late pass, or a clock that jumped) fires them in
/// deadline order, and those due at the same millisecond in the order they were started. The inbox is a stack, so they
/// come out newest first; a burst of delays of one length started off the workers is then in exact reverse order, and
/// sorting it cost the timer thread about 0.05–0.1 µs a timer before the first of them fired (a review of tail latency:
/// 20,000 delays of 10 ms started at once from one thread). Such a set, and one already in order, is now put in order
/// without a sort; any other set is still sorted. The order of the fires is the contract; the sort count is the cost.
/// </summary>
public sealed class DueSetOrderTests
{
    private const int Burst = 1000;

    /// <summary>
    /// A wheel on Microsoft's fake clock, whose Advance moves the time in one step and then runs what is due (a
    /// ManualClock stops at each deadline on the way): the first delay kicks a pass and is linked; the burst is due later
    /// than that pass's plan, so it waits in the insert inbox, and one long advance finds all of it due in one pass.
    /// </summary>
    private static (FakeTimeProvider Clock, TimerWheel Wheel, List<int> Fired) WheelWithAnAnchor()
    {
        var clock = new FakeTimeProvider();
        var wheel = new TimerWheel(clock);
        var fired = new List<int>();
        Record(wheel.Delay(TimeSpan.FromMilliseconds(1)), -1, fired);
        return (clock, wheel, fired);
    }

    private static async void Record(SpindleTask delay, int id, List<int> fired)
    {
        await delay;
        fired.Add(id); // the pass runs on the advancing thread: no lock needed
    }

    [Fact]
    public void ABurstStartedInDeadlineOrder_AllDueInOnePass_FiresInStartOrder()
    {
        (FakeTimeProvider clock, TimerWheel wheel, List<int> fired) = WheelWithAnAnchor();
        using (wheel)
        {
            for (int i = 0; i < Burst; i++)
            {
                // Ten lengths, 50 to 59 ms, none shorter than one started before it (as a clock moving on during a burst
                // makes them): gathered newest first, in reverse order, with runs due at the same millisecond.
                Record(wheel.Delay(TimeSpan.FromMilliseconds(50 + i / 100)), i, fired);
            }
            Assert.Equal(Burst + 1, wheel.PendingCount);
            clock.Advance(TimeSpan.FromSeconds(10));
            Assert.Equal(Burst + 1, fired.Count);
            for (int i = 0; i < Burst; i++)
            {
                Assert.True(fired[i + 1] == i, $"the delay started {fired[i + 1]}th fired {i}th: deadline order, then start order");
            }
#if DEBUG
            Assert.True(wheel.DueJoinedForTests == Burst, $"{wheel.DueJoinedForTests} of the {Burst} delays found due by one pass");
            Assert.True(wheel.DueSortsForTests == 0, $"{wheel.DueSortsForTests} sorts of a due set gathered in exact reverse order");
#endif
        }
    }

    [Fact]
    public void DelaysStartedLongestFirst_AllDueInOnePass_FireInDeadlineOrder()
    {
        (FakeTimeProvider clock, TimerWheel wheel, List<int> fired) = WheelWithAnAnchor();
        using (wheel)
        {
            for (int i = 0; i < Burst; i++)
            {
                Record(wheel.Delay(TimeSpan.FromMilliseconds(2 + Burst - i)), Burst - i, fired); // each due before the last
            }
            clock.Advance(TimeSpan.FromSeconds(10));
            Assert.Equal(Burst + 1, fired.Count);
            for (int i = 1; i <= Burst; i++)
            {
                Assert.True(fired[i] == i, $"the delay of {2 + fired[i]} ms fired {i}th: deadline order");
            }
#if DEBUG
            Assert.True(wheel.DueJoinedForTests == Burst, $"{wheel.DueJoinedForTests} of the {Burst} delays found due by one pass");
            Assert.True(wheel.DueSortsForTests == 0, $"{wheel.DueSortsForTests} sorts of a due set gathered in order already");
#endif
        }
    }

    /// <summary>
    /// Sets that are in neither order, by one pair or by much, are sorted: the look that spares the sort must not take a
    /// nearly ordered set for an ordered one.
    /// </summary>
    [Theory]
    [InlineData(0)] // the first two started swapped
    [InlineData(Burst / 2)] // one pair in the middle
    [InlineData(Burst - 2)] // the last two started swapped
    [InlineData(-1)] // lengths at random
    public void DelaysOutOfOrder_AllDueInOnePass_FireInDeadlineOrder_ThenStartOrder(int swapAt)
    {
        (FakeTimeProvider clock, TimerWheel wheel, List<int> fired) = WheelWithAnAnchor();
        using (wheel)
        {
            var random = new Random(47);
            var lengths = new int[Burst];
            for (int i = 0; i < Burst; i++)
            {
                lengths[i] = swapAt < 0 ? 2 + random.Next(300) : 2 + i;
            }
            if (swapAt >= 0)
            {
                (lengths[swapAt], lengths[swapAt + 1]) = (lengths[swapAt + 1], lengths[swapAt]);
            }
            for (int i = 0; i < Burst; i++)
            {
                Record(wheel.Delay(TimeSpan.FromMilliseconds(lengths[i])), i, fired);
            }
            clock.Advance(TimeSpan.FromSeconds(10));
            Assert.Equal(Burst + 1, fired.Count);
            Assert.Equal(-1, fired[0]);
            for (int k = 2; k <= Burst; k++)
            {
                int before = fired[k - 1], after = fired[k];
                Assert.True(lengths[before] < lengths[after] || lengths[before] == lengths[after] && before < after,
                    $"delay #{before} ({lengths[before]} ms) fired before delay #{after} ({lengths[after]} ms)");
            }
#if DEBUG
            Assert.True(wheel.DueJoinedForTests == Burst, $"{wheel.DueJoinedForTests} of the {Burst} delays found due by one pass");
            Assert.Equal(1, wheel.DueSortsForTests);
#endif
        }
    }
}

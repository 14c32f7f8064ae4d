using System;
using System.Threading;

namespace SpindleLib.Tests.Time;

/// <summary>
/// Stress for the cross-thread Advance of <see cref="ManualClock"/> (its count of Advances under way, the wheel's drive
/// owner and the driver's count of kicks: <c>TimerWheel.SettleForAdvance</c>): threads that create timers on a wheel of
/// the clock, some due at once, while two other threads advance it. Nothing is lost, nothing fires twice, nothing fires
/// before its deadline, and no Advance is left counted (review55, on user23's branch).
/// </summary>
public class ManualClockCrossThreadStressTests
{
    private sealed class Fired
    {
        public readonly int[] Count;
        public readonly long[] EarliestTicks;
        public readonly long[] LatestTicks;
        public readonly long[] FiredAtTicks;
        public readonly ManualClock Clock;

        public Fired(ManualClock clock, int n)
        {
            Clock = clock;
            Count = new int[n];
            EarliestTicks = new long[n];
            LatestTicks = new long[n];
            FiredAtTicks = new long[n];
        }
    }

    private sealed class Slot
    {
        public Fired Owner = null!;
        public int Index;
    }

    private static readonly Action<object?> s_record = static s =>
    {
        var slot = (Slot)s!;
        slot.Owner.FiredAtTicks[slot.Index] = slot.Owner.Clock.Elapsed.Ticks;
        Interlocked.Increment(ref slot.Owner.Count[slot.Index]);
    };

    [Fact]
    public void TimersCreatedOnManyThreads_WhileTwoThreadsAdvance_FireOnceEach_NeverEarly()
    {
        int rounds = TestUtil.Stress(20);
        const int Producers = 3;
        const int PerProducer = 300;
        for (int round = 0; round < rounds; round++)
        {
            var clock = new ManualClock();
            using var wheel = new TimerWheel(clock);
            var fired = new Fired(clock, Producers * PerProducer);
            var timers = new SpindleTimer[Producers * PerProducer];
            int producersLeft = Producers;
            var threads = new Thread[Producers + 2];
            for (int p = 0; p < Producers; p++)
            {
                int first = p * PerProducer;
                threads[p] = new Thread(() =>
                {
                    var random = new Random(first + 1);
                    for (int i = first; i < first + PerProducer; i++)
                    {
                        int dueMs = random.Next(4) == 0 ? 0 : random.Next(1, 20);
                        fired.EarliestTicks[i] = clock.Elapsed.Ticks + TimeSpan.FromMilliseconds(dueMs).Ticks;
                        timers[i] = wheel.CreateTimer(s_record, new Slot { Owner = fired, Index = i }, TimeSpan.FromMilliseconds(dueMs));
                        // The wheel rounds a deadline up to its next millisecond tick: due by then at the latest.
                        fired.LatestTicks[i] = clock.Elapsed.Ticks + TimeSpan.FromMilliseconds(dueMs + 1).Ticks;
                        if ((i & 15) == 0)
                        {
                            Thread.Yield();
                        }
                    }
                    Interlocked.Decrement(ref producersLeft);
                });
            }
            for (int a = 0; a < 2; a++)
            {
                int seed = a;
                threads[Producers + a] = new Thread(() =>
                {
                    var random = new Random(seed + 100);
                    while (Volatile.Read(ref producersLeft) != 0)
                    {
                        clock.Advance(TimeSpan.FromTicks(random.Next(1, 3 * (int)TimeSpan.TicksPerMillisecond)));
                    }
                });
            }
            foreach (Thread thread in threads)
            {
                thread.Start();
            }
            foreach (Thread thread in threads)
            {
                Assert.True(thread.Join(TimeSpan.FromSeconds(TestUtil.StressTimeout(60))), "a producer or an advancer hung");
            }
            // No Advance is under way and no thread runs a pass: a timer whose deadline the clock has passed has fired (a
            // timer deferred to the Advances under way, as a wake-up due at once is, was fired by one of them).
            long reached = clock.Elapsed.Ticks;
            for (int i = 0; i < fired.Count.Length; i++)
            {
                Assert.True(fired.LatestTicks[i] > reached || Volatile.Read(ref fired.Count[i]) == 1,
                    $"round {round}: timer {i}, due by {fired.LatestTicks[i]} ticks, had not fired when the Advances ended at {reached}");
            }
            // Every producer has returned from CreateTimer: one more Advance past every deadline fires the rest, here.
            clock.Advance(TimeSpan.FromMilliseconds(50));
            Assert.Equal(0, wheel.PendingCount);
            for (int i = 0; i < fired.Count.Length; i++)
            {
                Assert.True(fired.Count[i] == 1, $"round {round}: timer {i} fired {fired.Count[i]} times");
                Assert.True(fired.FiredAtTicks[i] >= fired.EarliestTicks[i],
                    $"round {round}: timer {i} fired at {fired.FiredAtTicks[i]} ticks, before its deadline {fired.EarliestTicks[i]}");
            }
            foreach (SpindleTimer timer in timers)
            {
                timer.Dispose();
            }
            AssertNoAdvanceLeftCounted(clock);
        }
    }

    /// <summary>
    /// A callback that throws out of <see cref="ManualClock.Advance"/> leaves no Advance counted: a timer due at once,
    /// armed afterwards on another thread, fires there, inside its Change, as on a clock nobody is advancing.
    /// </summary>
    [Fact]
    public void CallbackThrowingOutOfAdvance_LeavesNoAdvanceCounted()
    {
        var clock = new ManualClock();
        using ITimer thrower = clock.CreateTimer(_ => throw new InvalidOperationException("from the callback"), null, TimeSpan.FromMilliseconds(5), Timeout.InfiniteTimeSpan);
        Assert.Throws<InvalidOperationException>(() => clock.Advance(TimeSpan.FromMilliseconds(10)));
        AssertNoAdvanceLeftCounted(clock);

        // The same from inside a nested Advance (a callback that advances, and a timer it reaches that throws).
        using ITimer inner = clock.CreateTimer(_ => throw new InvalidOperationException("nested"), null, TimeSpan.FromMilliseconds(7), Timeout.InfiniteTimeSpan);
        using ITimer outer = clock.CreateTimer(_ => clock.Advance(TimeSpan.FromMilliseconds(5)), null, TimeSpan.FromMilliseconds(3), Timeout.InfiniteTimeSpan);
        Assert.Throws<InvalidOperationException>(() => clock.Advance(TimeSpan.FromMilliseconds(4)));
        AssertNoAdvanceLeftCounted(clock);
    }

    /// <summary>No Advance is counted: a timer due at once, armed on another thread, fires inside that thread's call.</summary>
    private static void AssertNoAdvanceLeftCounted(ManualClock clock)
    {
        int firedOn = 0;
        int returnedOn = 0;
        var other = new Thread(() =>
        {
            using ITimer probe = clock.CreateTimer(_ => firedOn = Environment.CurrentManagedThreadId, null, TimeSpan.Zero, Timeout.InfiniteTimeSpan);
            returnedOn = Volatile.Read(ref firedOn) == Environment.CurrentManagedThreadId ? 1 : -1;
        });
        other.Start();
        Assert.True(other.Join(TimeSpan.FromSeconds(30)));
        Assert.True(returnedOn == 1, "a timer due at once, armed with no Advance under way, was deferred: an Advance was left counted");
    }
}

using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Time;

/// <summary>
/// What a timer of <see cref="TimerWheel.AsTimeProvider"/> allocates in steady state: its Change (push back, pull
/// forward, stop, re-arm) nothing; its create and Dispose (or DisposeAsync) one object, the <see cref="ITimer"/> itself (the wheel's node
/// comes from its pool and goes back to it). Sequential, as the other allocation tests.
/// </summary>
[Collection(SequentialCollection.Name)]
public class WheelTimeProviderAllocationTests
{
    private const int Iterations = 1_000;

    private static int s_fired;
    private static readonly TimerCallback s_callback = static _ => s_fired++;

    [Fact]
    public void Change_SteadyStateAllocatesNothing()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var timers = new ITimer[16];
        for (int t = 0; t < timers.Length; t++)
        {
            timers[t] = wheel.AsTimeProvider().CreateTimer(s_callback, null, TimeSpan.FromMilliseconds(10), Timeout.InfiniteTimeSpan);
        }
        TestUtil.AssertSteadyStateAllocatesNothing(i =>
        {
            int firedBefore = s_fired;
            foreach (ITimer timer in timers)
            {
                timer.Change(TimeSpan.FromMilliseconds(20), TimeSpan.FromMilliseconds(3)); // pushed back: lazy
                timer.Change(TimeSpan.FromMilliseconds(2), Timeout.InfiniteTimeSpan); // pulled forward: through the inbox
            }
            clock.Advance(TimeSpan.FromMilliseconds(2)); // each fires once
            timers[0].Change(Timeout.InfiniteTimeSpan, Timeout.InfiniteTimeSpan);
            timers[0].Change(TimeSpan.FromMilliseconds(1), Timeout.InfiniteTimeSpan); // re-armed after a stop
            clock.Advance(TimeSpan.FromMilliseconds(1));
            if (s_fired - firedBefore != timers.Length + 1)
            {
                throw new InvalidOperationException($"fired {s_fired - firedBefore}");
            }
        }, Iterations);
        foreach (ITimer timer in timers)
        {
            timer.Dispose();
        }
        clock.Advance(TimeSpan.FromMilliseconds(1));
        Assert.Equal(0, wheel.PendingCount);
    }

    /// <summary>
    /// The timer object alone, whether it ends by Dispose or by DisposeAsync: with no callback running, DisposeAsync
    /// completes at once without a waiter (a DisposeAsync that always made its waiter, the sixth mutation pass's M17,
    /// allocated a TaskCompletionSource and its Task for every timer, and no other test saw it).
    /// </summary>
    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public void CreateFireDispose_SteadyState_AllocatesTheTimerObjectAlone(bool disposeAsync)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        TimeProvider provider = wheel.AsTimeProvider();
        const int PerRound = 16;
        // One array for every round: an array made in each round and subtracted by a single measurement made the figure
        // depend on the JIT (.NET 10 may put a small array that does not escape on the stack once the method is
        // optimized), and on the measurement: the test saw 56.6 B a timer under load (review55).
        var timers = new ITimer[PerRound];
        void Round()
        {
            for (int t = 0; t < PerRound; t++)
            {
                timers[t] = provider.CreateTimer(s_callback, null, TimeSpan.FromMilliseconds(1), TimeSpan.Zero);
            }
            timers[0].Change(TimeSpan.FromMilliseconds(5), Timeout.InfiniteTimeSpan);
            clock.Advance(TimeSpan.FromMilliseconds(1));
            foreach (ITimer timer in timers)
            {
                if (disposeAsync)
                {
                    ValueTask disposing = timer.DisposeAsync();
                    if (!disposing.IsCompleted)
                    {
                        throw new InvalidOperationException("DisposeAsync waited with no callback running");
                    }
                }
                else
                {
                    timer.Dispose();
                }
            }
            clock.Advance(TimeSpan.FromMilliseconds(1));
        }
        for (int i = 0; i < 2 * Iterations; i++)
        {
            Round();
        }
        long fewest = long.MaxValue;
        for (int run = 0; run < 10; run++)
        {
            long before = GC.GetAllocatedBytesForCurrentThread();
            for (int i = 0; i < Iterations; i++)
            {
                Round();
            }
            fewest = Math.Min(fewest, GC.GetAllocatedBytesForCurrentThread() - before);
        }
        double perTimer = fewest / ((double)Iterations * PerRound);
        // One object per timer: 64 B on 64-bit (header and method table 16 B; the callback, state, context, waiter and
        // node references 40 B; the running count and the node's version 6 B, padded).
        if (IntPtr.Size == 8)
        {
            Assert.Equal(64.0, perTimer);
        }
        else
        {
            Assert.InRange(perTimer, 1.0, 64.0);
        }
        Assert.Equal(0, wheel.PendingCount);
    }
}

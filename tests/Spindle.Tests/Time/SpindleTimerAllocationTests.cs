using System;
using System.Threading;

namespace SpindleLib.Tests.Time;

/// <summary>
/// A callback timer's create, Change (push back, pull forward, stop, re-arm), firing and Dispose allocate nothing in
/// steady state (on a manual clock, whose passes run inline, so every allocation lands on this thread). Sequential, as
/// the other allocation tests.
/// </summary>
[Collection(SequentialCollection.Name)]
public class SpindleTimerAllocationTests
{
    private const int Iterations = 1_000;

    private static int s_fired;
    private static readonly Action<object?> s_callback = static _ => s_fired++;

    [Fact]
    public void CreateChangeFireDispose_SteadyStateAllocatesNothing()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var timers = new SpindleTimer[16];
        TestUtil.AssertSteadyStateAllocatesNothing(i =>
        {
            int firedBefore = s_fired;
            for (int t = 0; t < timers.Length; t++)
            {
                timers[t] = wheel.CreateTimer(s_callback, null, TimeSpan.FromMilliseconds(10), TimeSpan.FromMilliseconds(t % 2 == 0 ? 0 : 3));
            }
            foreach (SpindleTimer timer in timers)
            {
                timer.Change(TimeSpan.FromMilliseconds(20), TimeSpan.FromMilliseconds(3)); // pushed back: lazy
                timer.Change(TimeSpan.FromMilliseconds(2), TimeSpan.FromMilliseconds(3)); // pulled forward: through the inbox
            }
            clock.Advance(TimeSpan.FromMilliseconds(2));
            timers[0].Change(Timeout.InfiniteTimeSpan, Timeout.InfiniteTimeSpan);
            timers[0].Change(TimeSpan.FromMilliseconds(1), Timeout.InfiniteTimeSpan); // re-armed after a stop
            clock.Advance(TimeSpan.FromMilliseconds(1));
            foreach (SpindleTimer timer in timers)
            {
                timer.Dispose();
            }
            if (s_fired - firedBefore != timers.Length + 1 || wheel.PendingCount != 0)
            {
                throw new InvalidOperationException($"fired {s_fired - firedBefore}, pending {wheel.PendingCount}");
            }
        }, Iterations);
    }
}

#if DEBUG
using System;
using System.Threading;

namespace SpindleLib.Tests.Frames;

/// <summary>
/// A frame loop's clock keeps a request for a pass (its timer changed to a due time of zero: the wheel's kick, from any
/// thread) apart from its due time, and clears the request before it runs the pass it serves: a request made while that
/// pass runs is for a timer the pass may not see, and must bring the next frame's pass. Cleared after the pass (a
/// mutation of <c>LoopClock.FireIfDue</c>, decisions section 53's M28), it was lost: the delay waited in the wheel's
/// inbox until some later deadline, for ever on a wheel with none.
/// </summary>
public sealed class LoopClockPassRequestTests
{
    /// <summary>
    /// Another thread starts a delay in the moment the loop's pass has found its inboxes empty and is returning
    /// (<c>TimerWheel.TestHookPassPlanned</c>): the pass does not see it, and its kick asks the clock for the next
    /// frame's pass, which fires it at its deadline.
    /// </summary>
    [Fact]
    public void ADelayStartedOnAnotherThreadAsTheLoopsPassEnds_FiresAtItsDeadlineInALaterFrame()
    {
        var clock = new LoopClock();
        var wheel = new TimerWheel(clock);
        SpindleTask far = wheel.Delay(TimeSpan.FromMilliseconds(50)); // a kick: the first frame runs a pass
        SpindleTask near = default;
        int hooked = 0;
        TimerWheel.TestHookPassPlanned = w =>
        {
            if (w != wheel || Interlocked.Exchange(ref hooked, 1) != 0)
            {
                return;
            }
            var starter = new Thread(() => near = wheel.Delay(TimeSpan.FromMilliseconds(1))) { IsBackground = true };
            starter.Start();
            Assert.True(starter.Join(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)));
        };
        try
        {
            clock.FireIfDue(); // the frame at loop time 0: the pass links the 50 ms delay, and the hook starts the 1 ms one
        }
        finally
        {
            TimerWheel.TestHookPassPlanned = null;
        }
        Assert.Equal(1, hooked);
        Assert.Equal(2, wheel.PendingCount);
        Assert.False(near.IsCompleted);
        clock.Set(TimeSpan.FromMilliseconds(2).Ticks);
        clock.FireIfDue(); // the frame at 2 ms: before the 50 ms deadline, so only the request runs a pass
        Assert.True(near.IsCompleted, "a 1 ms delay started as the loop's pass ended had not fired in the frame at 2 ms");
        Assert.Equal(1, wheel.PendingCount);
        near.GetAwaiter().GetResult();
        clock.Set(TimeSpan.FromMilliseconds(50).Ticks);
        clock.FireIfDue();
        Assert.True(far.IsCompleted);
        far.GetAwaiter().GetResult();
        Assert.Equal(0, wheel.PendingCount);
    }
}
#endif

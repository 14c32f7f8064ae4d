using System;
using System.Diagnostics;
using System.Threading;

namespace SpindleLib.Tests.Time;

#if DEBUG
/// <summary>
/// The system clock's timer thread waits up to a tick before a pass that releases cancelled timers
/// (<c>ThreadTimerDriver.KickToRelease</c>), so that a burst of cancellations shares one pass. That wait must never hold
/// back a timer that is due sooner. Found by the review of stop 37: the wait was bounded by the thread's own plan only,
/// and a timer inserted while the release kick's wake-up was still pending (the event set, the thread not yet past its
/// Reset) kicked nothing (the event was already set) and was not in the plan, so an overdue timer waited a whole tick.
/// </summary>
public class ReleaseLagTests
{
    [Fact]
    public void ATimerInsertedWhileTheReleaseKickIsPending_EndsTheLag_WhenItIsDue()
    {
        using var wheel = new TimerWheel(TimeProvider.System); // a thread-driven wheel of its own
        using var cts = new CancellationTokenSource();
        SpindleTask far = wheel.Delay(TimeSpan.FromMinutes(10), cts.Token); // the thread's plan: minutes away
        TestUtil.SpinUntil(() => wheel.PassCount > 0 && wheel.Describe() == "main: count=1 linked=1", wheel.Describe);

        int armed = 0;
        SpindleTask soon = default;
        bool? lagWaited = null;
        ThreadTimerDriver.TestHookWoken = w =>
        {
            if (w != wheel || Interlocked.Exchange(ref armed, 0) == 0)
            {
                return;
            }
            // On the timer thread, woken by the release kick and not yet past its Reset: this delay's kick finds the event
            // set and sets nothing. The thread then stays here until the delay is overdue, as a thread that inserts a
            // deadline it computed before it was preempted delivers an overdue timer.
            soon = wheel.Delay(TimeSpan.FromMilliseconds(1));
            var held = Stopwatch.StartNew();
            while (held.ElapsedTicks < Stopwatch.Frequency / 250) // 4 ms: past the delay's deadline
            {
            }
        };
        ThreadTimerDriver.TestHookLagDecided = (w, waits) =>
        {
            if (w == wheel && lagWaited is null)
            {
                lagWaited = waits;
            }
        };
        try
        {
            Volatile.Write(ref armed, 1);
            cts.Cancel(); // the first cancellation since the last pass: a release kick
            TestUtil.SpinUntil(() => lagWaited is not null && soon.IsCompleted, () => "lag " + lagWaited + ", " + wheel.Describe());
        }
        finally
        {
            ThreadTimerDriver.TestHookWoken = null;
            ThreadTimerDriver.TestHookLagDecided = null;
        }
        Assert.Equal(SpindleTaskStatus.Canceled, far.Status);
        Assert.Equal(SpindleTaskStatus.Succeeded, soon.Status);
        Assert.False(lagWaited, "the release lag waited a tick with a timer already due");
        TestUtil.SpinUntil(() => wheel.PendingCount == 0, wheel.Describe);
    }

    /// <summary>
    /// The same lag, for a callback timer that a Change moves earlier while the release kick of another timer's stop is
    /// pending: the Change lowers the wheel's wake time (<c>TimerWheel.QueueChange</c>, as a delay's insert does), which
    /// bounds the lag, so the timer due at once is not held a tick. A QueueChange that never lowered the wake time (it
    /// only kicked for a first push, as a cancellation does; mutation testing, M33, every earlier test passed) left the
    /// lag bounded by the thread's plan, minutes away, and the due timer waited it out.
    /// </summary>
    [Fact]
    public void ACallbackTimerMovedEarlierWhileTheReleaseKickIsPending_EndsTheLag_WhenItIsDue()
    {
        using var wheel = new TimerWheel(TimeProvider.System); // a thread-driven wheel of its own
        using var fired = new ManualResetEventSlim();
        using SpindleTimer moved = wheel.CreateTimer(static s => ((ManualResetEventSlim)s!).Set(), fired, TimeSpan.FromMinutes(10));
        using SpindleTimer stopped = wheel.CreateTimer(static _ => { }, null, TimeSpan.FromMinutes(9));
        TestUtil.SpinUntil(() => wheel.PassCount > 0 && wheel.Describe() == "main: count=2 linked=2", wheel.Describe); // the change inbox drained

        int armed = 0;
        int hookRan = 0;
        bool? lagWaited = null;
        ThreadTimerDriver.TestHookWoken = w =>
        {
            if (w != wheel || Interlocked.Exchange(ref armed, 0) == 0)
            {
                return;
            }
            // On the timer thread, at the top of its loop, before its Reset. The stop is the first change since the last
            // pass (the inbox was empty): a release kick, which only this thread takes back, in the lag it decides next.
            // The Change is pushed behind it; its kick finds the event set and sets nothing. The thread then stays here
            // until the timer is overdue.
            stopped.Change(Timeout.InfiniteTimeSpan, Timeout.InfiniteTimeSpan);
            moved.Change(TimeSpan.FromMilliseconds(1), Timeout.InfiniteTimeSpan);
            var held = Stopwatch.StartNew();
            while (held.ElapsedTicks < Stopwatch.Frequency / 250) // 4 ms: past the timer's new due time
            {
            }
            Volatile.Write(ref hookRan, 1);
        };
        ThreadTimerDriver.TestHookLagDecided = (w, waits) =>
        {
            if (w == wheel && Volatile.Read(ref hookRan) == 1 && lagWaited is null)
            {
                lagWaited = waits; // the lag right after the hook, on the same thread (an earlier one is not this test's)
            }
        };
        try
        {
            Volatile.Write(ref armed, 1);
            wheel.Driver.Kick(); // wakes the thread, as any kick does, with nothing pushed
            TestUtil.SpinUntil(() => lagWaited is not null && fired.IsSet, () => "hook " + hookRan + ", lag " + lagWaited + ", " + wheel.Describe());
        }
        finally
        {
            ThreadTimerDriver.TestHookWoken = null;
            ThreadTimerDriver.TestHookLagDecided = null;
        }
        Assert.False(lagWaited, "the release lag waited a tick with a callback timer already due");
        TestUtil.SpinUntil(() => wheel.PendingCount == 0, wheel.Describe);
    }
}
#endif

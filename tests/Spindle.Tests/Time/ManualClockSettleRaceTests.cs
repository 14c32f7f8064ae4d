#if DEBUG
using System;
using System.Threading;

namespace SpindleLib.Tests.Time;

/// <summary>
/// The two moments of another thread's timer start that <c>TimerWheel.SettleForAdvance</c> covers, each held open by a
/// Debug hook so that the Advance lands in it every time (the stress rounds of <see cref="ManualClockCrossThreadTests"/>
/// land there by chance, and none of decisions section 53's mutants M18 and M20 of the settle failed them): the node
/// pushed and its kick not begun, and the kick begun and its pass not.
/// </summary>
public sealed class ManualClockSettleRaceTests
{
    /// <summary>
    /// A delay started on another thread and counted, whose start has not yet read the wheel's plan or kicked: the Advance
    /// runs the pass that links it, so it fires inside the Advance. A settle that asked for no pass (M18) moved the clock
    /// past the deadline with nothing armed, returned with the delay still counted, and the start's kick then fired it on
    /// its own thread.
    /// </summary>
    [Fact]
    public void ADelayCountedBeforeItsStartKicks_FiresInsideTheAdvance()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var pushed = new ManualResetEventSlim();
        using var advanced = new ManualResetEventSlim();
        SpindleTask delay = default;
        TimerWheel.TestHookAfterPush = w =>
        {
            if (w == wheel)
            {
                pushed.Set();
                advanced.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds));
            }
        };
        long countedBefore, countedAfter;
        var starter = new Thread(() => delay = wheel.Delay(TimeSpan.FromMilliseconds(100))) { IsBackground = true };
        try
        {
            starter.Start();
            Assert.True(pushed.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)));
            countedBefore = wheel.PendingCount;
            clock.Advance(TimeSpan.FromMilliseconds(100));
            countedAfter = wheel.PendingCount;
        }
        finally
        {
            advanced.Set();
            TimerWheel.TestHookAfterPush = null;
        }
        Assert.True(starter.Join(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)));
        Assert.Equal(1, countedBefore);
        Assert.True(countedAfter == 0, "a delay counted before the Advance past its deadline was still pending when it returned");
        Assert.True(delay.IsCompleted);
        delay.GetAwaiter().GetResult();
    }

    /// <summary>
    /// A delay started on another thread whose kick has fired the clock's timer (on a manual clock, inside the kick) and
    /// not yet begun the pass it asks for: the Advance waits for that kick, so the kick's pass runs before the clock moves
    /// and finds nothing due, and the delay fires inside the Advance, on the advancing thread. A settle that did not wait
    /// for a kick in flight (M20) moved the clock at once, and the kick's pass, reading the moved clock, fired the delay on
    /// the starting thread. A timer of the clock due with the delay and armed before it holds the Advance, once it has
    /// moved the clock, until that thread's start has returned, so the kick's pass comes first whenever the clock moved
    /// under it.
    /// </summary>
    [Fact]
    public void AnAdvanceBeginningAsAnotherThreadsKickFires_WaitsForThatKick_AndFiresTheDelayItself()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var kickFired = new ManualResetEventSlim();
        using var settleWaits = new ManualResetEventSlim();
        using var started = new ManualResetEventSlim();
        using ITimer holder = clock.CreateTimer(_ => started.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), null,
            TimeSpan.FromMilliseconds(100), Timeout.InfiniteTimeSpan);
        int starterId = -1;
        bool firedInItsStart = false;
        SpindleTask delay = default;
        TimerWheel.TestHookSettleWaits = w =>
        {
            if (w == wheel)
            {
                settleWaits.Set();
            }
        };
        ProviderTimerDriver.TestHookFired = w =>
        {
            if (w != wheel || Environment.CurrentManagedThreadId != Volatile.Read(ref starterId))
            {
                return;
            }
            kickFired.Set();
            // Until the Advance waits for this kick, or has moved the clock without waiting.
            TestUtil.SpinUntil(() => settleWaits.IsSet || clock.Elapsed > TimeSpan.Zero);
        };
        var starter = new Thread(() =>
        {
            Volatile.Write(ref starterId, Environment.CurrentManagedThreadId);
            SpindleTask d = wheel.Delay(TimeSpan.FromMilliseconds(100));
            firedInItsStart = d.IsCompleted;
            delay = d;
            started.Set();
        }) { IsBackground = true };
        try
        {
            starter.Start();
            Assert.True(kickFired.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)));
            clock.Advance(TimeSpan.FromMilliseconds(100));
        }
        finally
        {
            ProviderTimerDriver.TestHookFired = null;
            TimerWheel.TestHookSettleWaits = null;
        }
        Assert.True(starter.Join(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)));
        Assert.False(firedInItsStart, "the delay fired on the starting thread, in its kick's pass after the Advance had moved the clock");
        Assert.True(settleWaits.IsSet);
        Assert.True(delay.IsCompleted);
        Assert.Equal(0, wheel.PendingCount);
        delay.GetAwaiter().GetResult();
    }
}
#endif

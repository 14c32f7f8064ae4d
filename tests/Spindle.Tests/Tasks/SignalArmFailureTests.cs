using System;
using System.Runtime.CompilerServices;
using System.Threading;
using FlakyClock = SpindleLib.Tests.Time.ThrowingProviderTests.FlakyClock;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// A timed or cancelable <see cref="Signal.WaitAsync(TimeSpan, TimerWheel, CancellationToken)"/> that throws after it
/// armed its wait (the wheel's clock, a <see cref="TimeProvider"/>, failed as the timeout was started) leaves the signal
/// as it was: idle, with nothing registered on the token, and a set that landed meanwhile kept for the next wait. Found
/// by a review of the signal (2026-11-29): the armed wait stayed pending with nobody holding its task, so every later
/// WaitAsync threw "a wait on this Signal is already pending" and the next Set went to that wait, lost.
/// </summary>
public class SignalArmFailureTests
{
    private static TimeSpan Ms(double ms) => TimeSpan.FromMilliseconds(ms);

    [Fact]
    public void TimedWait_WhoseTimerCannotStart_Throws_AndLeavesTheSignalIdle()
    {
        var clock = new FlakyClock();
        using var wheel = new TimerWheel(clock);
        var signal = new Signal();
        clock.FailReads = 1;

        InvalidOperationException thrown = Assert.Throws<InvalidOperationException>(() => signal.WaitAsync(Ms(10), wheel));

        Assert.Same(FlakyClock.ReadFailure, thrown);
        Assert.False(signal.HasWaiter, "the failed WaitAsync left its wait armed, with nobody holding its task");
        signal.Set();
        Assert.True(signal.IsSet, "the set went to the failed WaitAsync's wait, and is lost");
        SpindleTask<bool> next = signal.WaitAsync(Ms(10), wheel);
        Assert.True(next.IsCompleted);
        Assert.True(next.GetAwaiter().GetResult());
        Assert.Equal(0, wheel.PendingCount);
    }

    [Fact]
    public void TimedWait_WhoseTimerCannotStart_KeepsASetThatLandedMeanwhile()
    {
        var clock = new FlakyClock();
        using var wheel = new TimerWheel(clock);
        var signal = new Signal();
        clock.FailReads = 1;
        clock.BeforeFailedRead = signal.Set; // lands on the armed wait, just before the failure

        Assert.Throws<InvalidOperationException>(() => signal.WaitAsync(Ms(10), wheel));

        Assert.True(signal.IsSet, "the set that landed on the failed WaitAsync's wait is lost");
        Assert.False(signal.HasWaiter);
        Assert.True(signal.WaitAsync(Ms(10), wheel).GetAwaiter().GetResult());
        Assert.False(signal.IsSet);
        Assert.Equal(0, wheel.PendingCount);
    }

    [Fact]
    public void TimedWait_CanceledAndThenFailing_MakesUpNoSet_AndTheSignalStaysUsable()
    {
        var clock = new FlakyClock();
        using var wheel = new TimerWheel(clock);
        var signal = new Signal();
        using var cts = new CancellationTokenSource();
        clock.FailReads = 1;
        clock.BeforeFailedRead = cts.Cancel; // the registration made just before ends the armed wait as canceled

        Assert.Throws<InvalidOperationException>(() => signal.WaitAsync(Ms(10), wheel, cts.Token));

        Assert.False(signal.IsSet, "a set nobody made");
        Assert.False(signal.HasWaiter);
        SpindleTask<bool> next = signal.WaitAsync(Ms(10), wheel);
        Assert.False(next.IsCompleted);
        signal.Set();
        Assert.True(next.GetAwaiter().GetResult());
        Assert.Equal(0, wheel.PendingCount);
    }

    [Fact]
    public void TimedWaitWithAToken_WhoseTimerCannotStart_LeavesNothingRegistered_SoALongLivedTokenDoesNotKeepTheSignal()
    {
        using var lives = new CancellationTokenSource(); // e.g. an application's shutdown token
        var clock = new FlakyClock();
        using var wheel = new TimerWheel(clock);
        WeakReference signal = FailAndDrop(clock, wheel, lives.Token);
        GC.Collect();
        GC.WaitForPendingFinalizers();
        GC.Collect();
        Assert.False(signal.IsAlive, "the failed wait's registration on the token still holds the signal");
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    private static WeakReference FailAndDrop(FlakyClock clock, TimerWheel wheel, CancellationToken token)
    {
        var signal = new Signal();
        clock.FailReads = 1;
        Assert.Throws<InvalidOperationException>(() => signal.WaitAsync(Ms(10), wheel, token));
        return new WeakReference(signal);
    }
}

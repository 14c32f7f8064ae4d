using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// <see cref="Signal.WaitAsync(TimeSpan, CancellationToken)"/>: true when a set ends the wait, false when its timeout
/// does (and then a later set is kept for the next wait); exactly one of a set, the timeout, the token and a combinator
/// letting go of the wait ends it; the timer never outlives the wait, and steady state allocates nothing.
/// </summary>
public class SignalTimeoutTests
{
    private static readonly TimeSpan Ms5 = TimeSpan.FromMilliseconds(5);

    private static (ManualClock Clock, TimerWheel Wheel) NewWheel()
    {
        var clock = new ManualClock();
        return (clock, new TimerWheel(clock));
    }

    [Fact]
    public void SetBeforeTheTimeout_ResultIsTrue_AndTheTimerLeavesTheWheelWhenTheWaitIsRead()
    {
        (ManualClock clock, TimerWheel wheel) = NewWheel();
        using TimerWheel disposesWheel = wheel;
        var signal = new Signal();

        SpindleTask<bool> wait = signal.WaitAsync(Ms5, wheel);
        Assert.False(wait.IsCompleted);
        Assert.True(signal.HasWaiter);
        Assert.Equal(1, wheel.PendingCount);

        signal.Set();
        Assert.True(wait.GetAwaiter().GetResult());
        Assert.Equal(0, wheel.PendingCount);
        Assert.False(signal.IsSet);

        clock.Advance(TimeSpan.FromSeconds(1)); // the stopped timer does nothing to the signal or its next wait
        SpindleTask<bool> next = signal.WaitAsync(Ms5, wheel);
        Assert.False(next.IsCompleted);
        signal.Set();
        Assert.True(next.GetAwaiter().GetResult());
    }

    [Fact]
    public void TimeoutPasses_ResultIsFalse_TheSignalIsIdle_AndALaterSetIsKeptForTheNextWait()
    {
        (ManualClock clock, TimerWheel wheel) = NewWheel();
        using TimerWheel disposesWheel = wheel;
        var signal = new Signal();

        SpindleTask<bool> wait = signal.WaitAsync(Ms5, wheel);
        clock.Advance(TimeSpan.FromMilliseconds(4));
        Assert.False(wait.IsCompleted);
        clock.Advance(TimeSpan.FromMilliseconds(1));

        Assert.True(wait.IsCompleted);
        Assert.Equal(SpindleTaskStatus.Succeeded, wait.Status);
        Assert.False(wait.GetAwaiter().GetResult());
        Assert.False(signal.HasWaiter);
        Assert.False(signal.IsSet);
        Assert.Equal(0, wheel.PendingCount);

        signal.Set();
        Assert.True(signal.IsSet);
        SpindleTask<bool> next = signal.WaitAsync(Ms5, wheel);
        Assert.True(next.IsCompleted);
        Assert.True(next.GetAwaiter().GetResult());
        Assert.Equal(0, wheel.PendingCount); // a set that was there needs no timer
    }

    [Fact]
    public void Timeout_IsRoundedUpToTheTick_NeverEarly()
    {
        (ManualClock clock, TimerWheel wheel) = NewWheel();
        using TimerWheel disposesWheel = wheel;
        var signal = new Signal();
        clock.Advance(TimeSpan.FromTicks(3_000)); // 0.3 ms into a tick

        SpindleTask<bool> wait = signal.WaitAsync(TimeSpan.FromMilliseconds(1.5), wheel);
        clock.Advance(TimeSpan.FromMilliseconds(1.5));
        Assert.False(wait.IsCompleted);
        clock.Advance(TimeSpan.FromMilliseconds(1));
        Assert.False(wait.GetAwaiter().GetResult());
    }

    [Fact]
    public void ZeroTimeout_TakesASetThatIsThere_OrReturnsFalseAtOnce_AndArmsNothing()
    {
        (_, TimerWheel wheel) = NewWheel();
        using TimerWheel disposesWheel = wheel;
        var signal = new Signal();

        SpindleTask<bool> none = signal.WaitAsync(TimeSpan.Zero, wheel);
        Assert.True(none.IsCompleted);
        Assert.False(none.GetAwaiter().GetResult());
        Assert.False(signal.HasWaiter);
        Assert.Equal(0, wheel.PendingCount);

        signal.Set();
        SpindleTask<bool> taken = signal.WaitAsync(TimeSpan.Zero, wheel);
        Assert.True(taken.IsCompleted);
        Assert.True(taken.GetAwaiter().GetResult());
        Assert.False(signal.IsSet);
    }

    [Fact]
    public void InfiniteTimeout_WaitsForTheSetWithNoTimer()
    {
        (ManualClock clock, TimerWheel wheel) = NewWheel();
        using TimerWheel disposesWheel = wheel;
        var signal = new Signal();

        SpindleTask<bool> wait = signal.WaitAsync(Timeout.InfiniteTimeSpan, wheel);
        Assert.Equal(0, wheel.PendingCount);
        clock.Advance(TimeSpan.FromDays(100));
        Assert.False(wait.IsCompleted);
        signal.Set();
        Assert.True(wait.GetAwaiter().GetResult());
    }

    [Fact]
    public void DefaultWheelOverload_TimesOutInRealTime()
    {
        var signal = new Signal();
        SpindleTask<bool> wait = signal.WaitAsync(TimeSpan.FromMilliseconds(20));
        Assert.False(TestUtil.WithTimeout(wait).GetAwaiter().GetResult());
        Assert.False(signal.HasWaiter);
    }

    [Theory]
    [InlineData(-2.0)]
    [InlineData(-0.5)]
    public void NegativeTimeout_IsRejectedBeforeAnythingChanges(double milliseconds)
    {
        var signal = new Signal(initiallySet: true);
        var e = Assert.Throws<ArgumentOutOfRangeException>(() => signal.WaitAsync(TimeSpan.FromMilliseconds(milliseconds)));
        Assert.Equal("timeout", e.ParamName);
        Assert.Contains("Timeout.InfiniteTimeSpan", e.Message, StringComparison.Ordinal);
        Assert.True(signal.IsSet, "a rejected wait must not take the set");
        Assert.False(signal.HasWaiter);
    }

    [Fact]
    public void BadArguments_AreRejectedBeforeAnythingChanges()
    {
        var signal = new Signal(initiallySet: true);
        Assert.Throws<ArgumentOutOfRangeException>("timeout", () => signal.WaitAsync(TimerWheel.MaxDelay + TimeSpan.FromMilliseconds(1)));
        Assert.Throws<ArgumentNullException>("timers", () => signal.WaitAsync(Ms5, null!));
        (_, TimerWheel disposed) = NewWheel();
        disposed.Dispose();
        Assert.Throws<ObjectDisposedException>(() => signal.WaitAsync(Ms5, disposed));
        Assert.Throws<ObjectDisposedException>(() => signal.WaitAsync(Timeout.InfiniteTimeSpan, disposed));
        Assert.True(signal.IsSet);
        Assert.False(signal.HasWaiter);
        Assert.True(signal.WaitAsync().IsCompleted);
    }

    [Fact]
    public void SecondWait_WhileATimedWaitIsPending_Throws_AndTheFirstIsUntouched()
    {
        (ManualClock clock, TimerWheel wheel) = NewWheel();
        using TimerWheel disposesWheel = wheel;
        var signal = new Signal();
        SpindleTask<bool> first = signal.WaitAsync(Ms5, wheel);

        Assert.Throws<InvalidOperationException>(() => signal.WaitAsync(Ms5, wheel));
        Assert.Throws<InvalidOperationException>(() => signal.WaitAsync());
        Assert.Equal(1, wheel.PendingCount);

        clock.Advance(Ms5);
        Assert.False(first.GetAwaiter().GetResult());
    }

    [Fact]
    public void Cancellation_EndsTheWaitAsCanceled_AndLeavesNothingRegistered()
    {
        (ManualClock clock, TimerWheel wheel) = NewWheel();
        using TimerWheel disposesWheel = wheel;
        var signal = new Signal();
        using var cts = new CancellationTokenSource();

        SpindleTask<bool> wait = signal.WaitAsync(Ms5, wheel, cts.Token);
        cts.Cancel();
        Assert.Equal(SpindleTaskStatus.Canceled, wait.Status);
        var e = Assert.ThrowsAny<OperationCanceledException>(() => wait.GetAwaiter().GetResult());
        Assert.Equal(cts.Token, e.CancellationToken);
        Assert.Equal(0, wheel.PendingCount);

        clock.Advance(Ms5); // the timer was stopped: nothing fires into the next wait
        SpindleTask<bool> next = signal.WaitAsync(Ms5, wheel);
        clock.Advance(TimeSpan.FromMilliseconds(4));
        Assert.False(next.IsCompleted);
        signal.Set();
        Assert.True(next.GetAwaiter().GetResult());
    }

    [Fact]
    public void CanceledToken_WinsOverASetSignal_AndLeavesItSet()
    {
        var signal = new Signal(initiallySet: true);
        SpindleTask<bool> wait = signal.WaitAsync(Ms5, new CancellationToken(canceled: true));
        Assert.Equal(SpindleTaskStatus.Canceled, wait.Status);
        Assert.True(signal.IsSet);
    }

    [Fact]
    public void WheelDisposedWhileWaiting_TheWaitCompletesAsCanceled()
    {
        (_, TimerWheel wheel) = NewWheel();
        var signal = new Signal();
        SpindleTask<bool> wait = signal.WaitAsync(TimeSpan.FromSeconds(30), wheel);

        wheel.Dispose();

        TestUtil.SpinUntil(() => wait.IsCompleted);
        Assert.Equal(SpindleTaskStatus.Canceled, wait.Status);
        Assert.False(signal.HasWaiter);
        signal.Set();
        Assert.True(signal.IsSet);
    }

    [Fact]
    public void AWaitNeverRead_HasItsTimerStoppedByTheNextWait()
    {
        (ManualClock clock, TimerWheel wheel) = NewWheel();
        using TimerWheel disposesWheel = wheel;
        var signal = new Signal();
        SpindleTask<bool> unread = signal.WaitAsync(TimeSpan.FromSeconds(30), wheel);
        signal.Set();
        Assert.True(unread.IsCompleted);
        Assert.Equal(1, wheel.PendingCount); // completed, but nobody has read it yet

        SpindleTask<bool> next = signal.WaitAsync(Ms5, wheel);
        Assert.Equal(1, wheel.PendingCount); // the first wait's timer stopped, the second's armed
        clock.Advance(Ms5);
        Assert.False(next.GetAwaiter().GetResult());
        Assert.Equal(0, wheel.PendingCount);
    }

    [Fact]
    public void SteadyState_TimedWaitsAllocateNothing_WhetherSetOrTimedOut()
    {
        (ManualClock clock, TimerWheel wheel) = NewWheel();
        using TimerWheel disposesWheel = wheel;
        var signal = new Signal();
        void Cycle()
        {
            SpindleTask<bool> set = signal.WaitAsync(Ms5, wheel);
            signal.Set();
            Assert.True(set.GetAwaiter().GetResult());
            SpindleTask<bool> timedOut = signal.WaitAsync(Ms5, wheel);
            clock.Advance(Ms5);
            Assert.False(timedOut.GetAwaiter().GetResult());
        }
        for (int i = 0; i < 100; i++)
        {
            Cycle();
        }

        long before = GC.GetAllocatedBytesForCurrentThread();
        for (int i = 0; i < 1000; i++)
        {
            Cycle();
        }
        Assert.Equal(0, GC.GetAllocatedBytesForCurrentThread() - before);
    }

    [Fact]
    public async Task AsyncLoop_AwaitsTimedWaits_CountingSetsAndTimeouts()
    {
        (ManualClock clock, TimerWheel wheel) = NewWheel();
        using TimerWheel disposesWheel = wheel;
        var signal = new Signal();
        int sets = 0, timeouts = 0;
        async SpindleTask Loop(int waits)
        {
            for (int i = 0; i < waits; i++)
            {
                if (await signal.WaitAsync(Ms5, wheel))
                {
                    sets++;
                }
                else
                {
                    timeouts++;
                }
            }
        }
        SpindleTask loop = Loop(6);
        for (int i = 0; i < 3; i++)
        {
            signal.Set();
            clock.Advance(Ms5);
        }
        await TestUtil.WithTimeout(loop);
        Assert.Equal(3, sets);
        Assert.Equal(3, timeouts);
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task SetRacingTheTimeout_ExactlyOneEndsTheWait_AndALosingSetIsKept(bool dispatch)
    {
        (ManualClock clock, TimerWheel wheel) = NewWheel();
        using TimerWheel disposesWheel = wheel;
        var signal = new Signal(false, dispatch);
        SpindleTask<bool> wait = default;
        int delivered = 0, kept = 0;
        int rounds = await TestUtil.WithTimeout(Race.Run(TestUtil.Stress(20_000),
            before: _ => wait = signal.WaitAsync(TimeSpan.FromMilliseconds(1), wheel),
            after: round =>
            {
                if (wait.GetAwaiter().GetResult())
                {
                    delivered++;
                    Assert.False(signal.IsSet, $"round {round}: the set ended the wait and the signal is still set");
                }
                else
                {
                    kept++;
                    Assert.True(signal.IsSet, $"round {round}: the timeout won and the set was lost");
                    Assert.True(signal.WaitAsync().IsCompleted);
                }
                Assert.Equal(0, wheel.PendingCount);
            },
            _ => clock.Advance(TimeSpan.FromMilliseconds(1)),
            _ => signal.Set()), 120);
        Assert.Equal(rounds, delivered + kept);
    }

    [Fact]
    public async Task SetCancellationAndTimeoutRacing_ExactlyOneEndsEachWait_AndNoSetIsLostOrMadeUp()
    {
        (ManualClock clock, TimerWheel wheel) = NewWheel();
        using TimerWheel disposesWheel = wheel;
        var signal = new Signal();
        CancellationTokenSource? cts = null;
        SpindleTask<bool> wait = default;
        int[] outcomes = new int[3];
        int rounds = await TestUtil.WithTimeout(Race.Run(TestUtil.Stress(10_000),
            before: _ =>
            {
                cts = new CancellationTokenSource();
                wait = signal.WaitAsync(TimeSpan.FromMilliseconds(1), wheel, cts.Token);
            },
            after: round =>
            {
                bool tookSet;
                try
                {
                    tookSet = wait.GetAwaiter().GetResult();
                    outcomes[tookSet ? 0 : 1]++;
                }
                catch (OperationCanceledException)
                {
                    tookSet = false;
                    outcomes[2]++;
                }
                // One set per round: taken by the wait, or kept by the signal for the next one.
                if (!tookSet)
                {
                    Assert.True(signal.IsSet, $"round {round}: the wait did not take the set, and the signal lost it");
                    Assert.True(signal.WaitAsync().IsCompleted);
                }
                Assert.False(signal.IsSet, $"round {round}: a set was made up");
                Assert.Equal(0, wheel.PendingCount);
                cts!.Dispose();
            },
            _ => clock.Advance(TimeSpan.FromMilliseconds(1)),
            _ => signal.Set(),
            _ => cts!.Cancel()), 120);
        Assert.Equal(rounds, outcomes[0] + outcomes[1] + outcomes[2]);
    }

    [Fact]
    public void WhenAny_TheOtherInputWins_TheTimedWaitIsLetGoOf_ItsTimerStopped_AndALaterSetKept()
    {
        (ManualClock clock, TimerWheel wheel) = NewWheel();
        using TimerWheel disposesWheel = wheel;
        var signal = new Signal();
        var other = new Promise();
        SpindleTask<int> any = SpindleTask.WhenAny(signal.WaitAsync(Ms5, wheel), other.Task);

        other.SetResult();
        Assert.Equal(1, any.GetAwaiter().GetResult());
        Assert.False(signal.HasWaiter);
        Assert.Equal(0, wheel.PendingCount);
        clock.Advance(Ms5);
        signal.Set();
        Assert.True(signal.IsSet);
        Assert.True(signal.WaitAsync(Ms5, wheel).GetAwaiter().GetResult());
    }

    [Fact]
    public void WhenAny_TheTimeoutWins_TheResultSaysSo_AndNoSetIsMadeUp()
    {
        (ManualClock clock, TimerWheel wheel) = NewWheel();
        using TimerWheel disposesWheel = wheel;
        var signal = new Signal();
        var other = new Promise<bool>();
        SpindleTask<(int Index, bool Result)> any = SpindleTask.WhenAny([signal.WaitAsync(Ms5, wheel), other.Task]);

        clock.Advance(Ms5);
        Assert.Equal((0, false), any.GetAwaiter().GetResult());
        Assert.False(signal.IsSet);
        other.SetResult(true);
        Assert.False(signal.IsSet);
    }

    [Fact]
    public void TimedWhenAll_AnInputThatTimedOutTookNoSet_SoNoneIsGivenBack()
    {
        (ManualClock clock, TimerWheel wheel) = NewWheel();
        using TimerWheel disposesWheel = wheel;
        var signal = new Signal();
        var other = new Promise();
        SpindleTask all = SpindleTask.WhenAll(
            [signal.WaitAsync(TimeSpan.FromMilliseconds(1), wheel), other.Task],
            new WhenAllOptions { Timeout = Ms5, Timers = wheel });

        clock.Advance(TimeSpan.FromMilliseconds(1)); // the wait times out, and the WhenAll reads it
        clock.Advance(TimeSpan.FromMilliseconds(4)); // then the WhenAll times out: it gives back the sets its inputs took

        Assert.Throws<TimeoutException>(() => all.GetAwaiter().GetResult());
        Assert.False(signal.IsSet, "the wait timed out: it took no set, and none may be given back");
    }

    [Fact]
    public void TimedWhenAll_AnInputThatTookASet_HasItGivenBack()
    {
        (ManualClock clock, TimerWheel wheel) = NewWheel();
        using TimerWheel disposesWheel = wheel;
        var signal = new Signal();
        var other = new Promise();
        SpindleTask all = SpindleTask.WhenAll(
            [signal.WaitAsync(TimeSpan.FromSeconds(1), wheel), other.Task],
            new WhenAllOptions { Timeout = Ms5, Timers = wheel });

        signal.Set();
        clock.Advance(Ms5);

        Assert.Throws<TimeoutException>(() => all.GetAwaiter().GetResult());
        Assert.True(signal.IsSet, "the wait took a set that never reached the caller: the signal keeps it");
        Assert.Equal(0, wheel.PendingCount);
    }

    [Fact]
    public async Task WhenAny_TimeoutRacingTheOtherInput_NeverMakesUpASet()
    {
        (ManualClock clock, TimerWheel wheel) = NewWheel();
        using TimerWheel disposesWheel = wheel;
        var signal = new Signal();
        var other = new Promise();
        SpindleTask<int> any = default;
        int[] winners = new int[2];
        int rounds = await TestUtil.WithTimeout(Race.Run(TestUtil.Stress(20_000),
            before: _ =>
            {
                other.Reset();
                any = SpindleTask.WhenAny(signal.WaitAsync(TimeSpan.FromMilliseconds(1), wheel), other.Task);
            },
            after: round =>
            {
                winners[any.GetAwaiter().GetResult()]++;
                // Nobody set the signal: whichever won, and however the losing wait was read, it is not set now.
                Assert.False(signal.IsSet, $"round {round}: a set was made up");
                Assert.False(signal.HasWaiter, $"round {round}: the wait is still pending");
                Assert.Equal(0, wheel.PendingCount);
            },
            _ => clock.Advance(TimeSpan.FromMilliseconds(1)),
            _ => other.SetResult()), 120);
        Assert.Equal(rounds, winners[0] + winners[1]);
    }
}

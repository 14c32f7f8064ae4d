using System;
using System.Diagnostics;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// <see cref="Signal.WaitAsync(TimeSpan, TimerWheel, CancellationToken)"/> under races the first suite does not run: a
/// timed wait inside a WhenAny with a set, its own timeout, a token and the other input all racing; and a loop of timed
/// waits on a real clock, where the timer's continuation runs on the wheel's thread and may still be running when the
/// next wait starts. Each set is delivered (a wait's true) or kept by the signal, never lost or made up; a wait never
/// times out before its timeout; nothing stays in the wheel. And a wait that was never read is ended by the next wait
/// of any kind, also one that takes a set at once or whose zero timeout passes (its timer stopped, its registration
/// dropped), under the arming mark, so a wait racing that one is rejected or arms, and keeps its own timer.
/// </summary>
public class SignalTimeoutRaceTests
{
    /// <summary>The set is kept by the signal (given back by a read on a worker for a dispatching signal: waited for).</summary>
    private static void AssertKept(Signal signal, string message)
        => Assert.True(SpinWait.SpinUntil(() => signal.IsSet, TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), message);

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task WhenAny_SetTimeoutTokenAndOtherInputRacing_EachSetIsDeliveredOrKept_AndTheWheelEmpties(bool dispatch)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var signal = new Signal(false, dispatch);
        var other = new Promise<bool>();
        CancellationTokenSource? cts = null;
        SpindleTask<(int Index, bool Result)> any = default;
        int delivered = 0, kept = 0;
        int rounds = await TestUtil.WithTimeout(Race.Run(TestUtil.Stress(10_000),
            before: _ =>
            {
                other.Reset();
                cts = new CancellationTokenSource();
                any = SpindleTask.WhenAny([signal.WaitAsync(TimeSpan.FromMilliseconds(1), wheel, cts.Token), other.Task]);
            },
            after: round =>
            {
                (int index, bool result) = (-1, false);
                Exception? e = Record.Exception(() => (index, result) = any.GetAwaiter().GetResult());
                Assert.True(e is null or OperationCanceledException, $"round {round}: {e}");
                if (index == 0 && result)
                {
                    delivered++;
                    Assert.False(signal.IsSet, $"round {round}: the wait took the set and the signal is still set");
                }
                else
                {
                    AssertKept(signal, $"round {round}: ({index}, {result}) won and the set was lost");
                    kept++;
                    Assert.True(signal.WaitAsync().IsCompleted, $"round {round}: the kept set did not complete the next wait");
                }
                Assert.False(signal.IsSet, $"round {round}: a set was made up");
                Assert.False(signal.HasWaiter, $"round {round}: the wait is still pending");
                Assert.True(wheel.PendingCount == 0, $"round {round}: {wheel.PendingCount} timers left in the wheel");
                cts!.Dispose();
            },
            _ => clock.Advance(TimeSpan.FromMilliseconds(1)),
            _ => signal.Set(),
            _ => cts!.Cancel(),
            _ => other.SetResult(false)), 120);
        Assert.Equal(rounds, delivered + kept);
    }

    [Fact]
    public async Task RealClock_SetRacingTheTimer_ALateTimerNeverEndsALaterWait_AndEachSetIsDeliveredOrKept()
    {
        using var wheel = new TimerWheel(TimeProvider.System);
        var signal = new Signal();
        var timeout = TimeSpan.FromMilliseconds(1);
        SpindleTask<bool> wait = default;
        long armedAt = 0;
        int delivered = 0, timedOut = 0;
        int rounds = await TestUtil.WithTimeout(Race.Run(TestUtil.Stress(3_000),
            before: _ =>
            {
                armedAt = Stopwatch.GetTimestamp();
                wait = signal.WaitAsync(timeout, wheel); // the previous wait's timer may still be firing on the wheel's thread
            },
            after: round =>
            {
                if (wait.GetAwaiter().GetResult())
                {
                    delivered++;
                    Assert.False(signal.IsSet, $"round {round}: the set ended the wait and the signal is still set");
                }
                else
                {
                    timedOut++;
                    TimeSpan waited = Stopwatch.GetElapsedTime(armedAt);
                    Assert.True(waited >= timeout, $"round {round}: the wait timed out after {waited.TotalMilliseconds} ms");
                    Assert.True(signal.IsSet, $"round {round}: the timeout won and the set was lost");
                    Assert.True(signal.WaitAsync().IsCompleted);
                }
            },
            round =>
            {
                // Sets at spread-out moments around the 1 ms deadline, so both outcomes occur.
                long until = Stopwatch.GetTimestamp() + (round % 7) * Stopwatch.Frequency / 4000;
                while (Stopwatch.GetTimestamp() < until)
                {
                    Thread.SpinWait(20);
                }
                signal.Set();
            }), 120);
        Assert.Equal(rounds, delivered + timedOut);
        TestUtil.SpinUntil(() => wheel.PendingCount == 0);
    }

    [Fact]
    public void AWaitNeverRead_ThenASetTakenAtOnce_StopsItsTimer()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var signal = new Signal();
        SpindleTask<bool> unread = signal.WaitAsync(TimeSpan.FromSeconds(30), wheel);
        signal.Set();
        Assert.True(unread.IsCompleted);
        signal.Set();

        Assert.True(signal.WaitAsync(TimeSpan.FromMilliseconds(5), wheel).GetAwaiter().GetResult()); // the next wait

        Assert.True(wheel.PendingCount == 0, "the wait before was over, and its timer is still in the wheel");
    }

    [Fact]
    public void AWaitNeverRead_ThenAWaitWhoseZeroTimeoutPasses_StopsItsTimer()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var signal = new Signal();
        SpindleTask<bool> unread = signal.WaitAsync(TimeSpan.FromSeconds(30), wheel);
        signal.Set();
        Assert.True(unread.IsCompleted);

        Assert.False(signal.WaitAsync(TimeSpan.Zero, wheel).GetAwaiter().GetResult()); // the next wait

        Assert.True(wheel.PendingCount == 0, "the wait before was over, and its timer is still in the wheel");
        Assert.False(signal.IsSet);
        Assert.False(signal.HasWaiter);
        SpindleTask<bool> after = signal.WaitAsync(TimeSpan.FromMilliseconds(5), wheel); // the mark was cleared
        clock.Advance(TimeSpan.FromMilliseconds(5));
        Assert.False(after.GetAwaiter().GetResult());
    }

    [Fact]
    public void AWaitNeverRead_ThenASetTakenAtOnce_DropsItsRegistration_SoALongLivedTokenDoesNotKeepTheSignal()
    {
        using var lives = new CancellationTokenSource(); // e.g. an application's shutdown token
        WeakReference signal = UseAndDrop(lives.Token);
        GC.Collect();
        GC.WaitForPendingFinalizers();
        GC.Collect();
        Assert.False(signal.IsAlive, "the unread wait's registration on the token still holds the signal");
    }

    [System.Runtime.CompilerServices.MethodImpl(System.Runtime.CompilerServices.MethodImplOptions.NoInlining)]
    private static WeakReference UseAndDrop(CancellationToken token)
    {
        var signal = new Signal();
        SpindleTask unread = signal.WaitAsync(token);
        signal.Set();
        Assert.True(unread.IsCompleted);
        signal.Set();
        Assert.True(signal.WaitAsync(token).IsCompleted); // the next wait takes the set at once
        return new WeakReference(signal);
    }

    [Fact]
    public async Task TwoWaitsRacing_OneTakesTheSetAndEndsAnUnreadWait_TheOtherIsRejectedOrArmed_AndKeepsItsTimer()
    {
        // The wait that takes the set ends the unread wait's state under the arming mark: the wait racing it either sees
        // the mark or the armed wait (and throws, as a second concurrent wait does), or arms after it, and its own timer
        // is never the one stopped.
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var signal = new Signal();
        var waits = new SpindleTask<bool>[2];
        var rejected = new bool[2];
        void Wait(int i)
        {
            try
            {
                waits[i] = signal.WaitAsync(TimeSpan.FromMilliseconds(5), wheel);
            }
            catch (InvalidOperationException)
            {
                rejected[i] = true;
            }
        }
        int rounds = await TestUtil.WithTimeout(Race.Run(TestUtil.Stress(10_000),
            before: _ =>
            {
                Array.Clear(rejected);
                Array.Clear(waits);
                SpindleTask<bool> unread = signal.WaitAsync(TimeSpan.FromSeconds(30), wheel);
                signal.Set();
                Assert.True(unread.IsCompleted);
                signal.Set();
            },
            after: round =>
            {
                int took = 0, armed = 0;
                for (int i = 0; i < 2; i++)
                {
                    if (!rejected[i])
                    {
                        if (waits[i].IsCompleted)
                        {
                            took++;
                            Assert.True(waits[i].GetAwaiter().GetResult(), $"round {round}: a wait that completed at once did not take the set");
                        }
                        else
                        {
                            armed++;
                        }
                    }
                }
                Assert.True(took == 1, $"round {round}: {took} waits took the one set");
                Assert.True(wheel.PendingCount == armed, $"round {round}: {wheel.PendingCount} timers for {armed} armed waits");
                clock.Advance(TimeSpan.FromMilliseconds(5));
                for (int i = 0; i < 2; i++)
                {
                    if (!rejected[i] && !waits[i].IsCompleted)
                    {
                        Assert.Fail($"round {round}: the armed wait did not time out: its timer was stopped");
                    }
                    if (!rejected[i] && waits[i].GetAwaiter().GetResult() is false)
                    {
                        armed--;
                    }
                }
                Assert.Equal(0, armed);
                Assert.True(wheel.PendingCount == 0, $"round {round}: {wheel.PendingCount} timers left in the wheel");
            },
            _ => Wait(0),
            _ => Wait(1)), 120);
        Assert.True(rounds > 0);
    }
}

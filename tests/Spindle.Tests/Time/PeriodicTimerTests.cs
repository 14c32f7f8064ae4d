using System;
using System.Collections.Generic;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Time;

/// <summary>SpindlePeriodicTimer on a manual clock: exact ticks, no drift, coalescing, dispose, cancel, one waiter.</summary>
public class PeriodicTimerTests
{
    private static readonly TimeSpan OneTick = TimeSpan.FromTicks(1);

    private static TimeSpan Ms(double ms) => TimeSpan.FromTicks((long)Math.Round(ms * TimeSpan.TicksPerMillisecond));

    private static void AdvanceTo(ManualClock clock, TimeSpan when) => clock.Advance(when - clock.Elapsed);

    /// <summary>Waits for one tick, checking it fires exactly at <paramref name="due"/> and not a tick of the clock before.</summary>
    private static void AssertNextTickAt(ManualClock clock, SpindlePeriodicTimer timer, TimeSpan due)
    {
        SpindleTask<bool> wait = timer.WaitForNextTickAsync();
        Assert.False(wait.IsCompleted, "the tick due at " + due + " was delivered at " + clock.Elapsed);
        AdvanceTo(clock, due - OneTick);
        Assert.False(wait.IsCompleted, "ticked early: before " + due);
        clock.Advance(OneTick);
        Assert.True(wait.IsCompleted, "did not tick at " + due);
        Assert.True(wait.GetAwaiter().GetResult());
    }

    [Theory]
    [InlineData(1)]
    [InlineData(10)]
    [InlineData(64)]
    [InlineData(1000)]
    public void WaitForNextTick_TicksAtExactMultiplesOfThePeriod(int periodMs)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var timer = new SpindlePeriodicTimer(TimeSpan.FromMilliseconds(periodMs), wheel);
        for (int k = 1; k <= 5; k++)
        {
            AssertNextTickAt(clock, timer, TimeSpan.FromMilliseconds(k * periodMs));
            Assert.Equal(0, wheel.PendingCount); // nothing in the wheel between waits
        }
    }

    [Fact]
    public void WaitForNextTick_StartsCountingWhenTheTimerIsCreated()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        clock.Advance(TimeSpan.FromMilliseconds(7));
        using var timer = new SpindlePeriodicTimer(TimeSpan.FromMilliseconds(10), wheel);
        AssertNextTickAt(clock, timer, TimeSpan.FromMilliseconds(17));
        AssertNextTickAt(clock, timer, TimeSpan.FromMilliseconds(27));
    }

    [Fact]
    public void WaitForNextTick_ConsumerTime_DoesNotDelayTheNextTick()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var timer = new SpindlePeriodicTimer(TimeSpan.FromMilliseconds(10), wheel);
        for (int k = 1; k <= 6; k++)
        {
            AssertNextTickAt(clock, timer, TimeSpan.FromMilliseconds(10 * k));
            clock.Advance(TimeSpan.FromMilliseconds(7)); // the consumer's work between ticks: no drift
        }
    }

    [Fact]
    public void WaitForNextTick_APeriodBetweenMilliseconds_TicksAtEachMultipleRoundedUp()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var timer = new SpindlePeriodicTimer(Ms(2.5), wheel);
        foreach (double due in new[] { 3.0, 5.0, 8.0, 10.0, 13.0 }) // ceil(k * 2.5)
        {
            AssertNextTickAt(clock, timer, Ms(due));
        }
    }

    [Fact]
    public void WaitForNextTick_TicksMissedWhileNobodyWaits_CoalesceIntoOne()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var timer = new SpindlePeriodicTimer(TimeSpan.FromMilliseconds(10), wheel);
        clock.Advance(TimeSpan.FromMilliseconds(35)); // ticks at 10, 20 and 30 pass with nobody waiting
        SpindleTask<bool> missed = timer.WaitForNextTickAsync();
        Assert.Equal(SpindleTaskStatus.Succeeded, missed.Status);
        Assert.True(missed.GetAwaiter().GetResult());
        Assert.Equal(0, wheel.PendingCount);
        AssertNextTickAt(clock, timer, TimeSpan.FromMilliseconds(40)); // the three count as one
        AssertNextTickAt(clock, timer, TimeSpan.FromMilliseconds(50));
    }

    [Fact]
    public void WaitForNextTick_ATickExactlyAtTheCall_IsAlreadyDue()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var timer = new SpindlePeriodicTimer(TimeSpan.FromMilliseconds(10), wheel);
        clock.Advance(TimeSpan.FromMilliseconds(10));
        Assert.True(timer.WaitForNextTickAsync().GetAwaiter().GetResult());
        AssertNextTickAt(clock, timer, TimeSpan.FromMilliseconds(20));
    }

    [Fact]
    public void WaitForNextTick_ATickDeliveredLate_IsFollowedByTheNextMultiple()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var timer = new SpindlePeriodicTimer(TimeSpan.FromMilliseconds(10), wheel);
        SpindleTask<bool> wait = timer.WaitForNextTickAsync();
        clock.Advance(TimeSpan.FromMilliseconds(25)); // one jump over two ticks: the wait is delivered once
        Assert.True(wait.GetAwaiter().GetResult());
        Assert.True(timer.WaitForNextTickAsync().GetAwaiter().GetResult()); // the tick at 20 was missed: at once
        AssertNextTickAt(clock, timer, TimeSpan.FromMilliseconds(30));
    }

    [Fact]
    public async Task WaitForNextTick_AnAsyncLoop_RunsOncePerTickOnTheAdvancingThread()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var timer = new SpindlePeriodicTimer(TimeSpan.FromMilliseconds(5), wheel);
        var seen = new List<TimeSpan>();
        Task loop = TestUtil.AwaitAsync(Loop(timer, clock, seen));
        for (int i = 0; i < 4; i++)
        {
            clock.Advance(TimeSpan.FromMilliseconds(5));
        }
        Assert.Equal(new[] { 5.0, 10.0, 15.0, 20.0 }, seen.ConvertAll(t => t.TotalMilliseconds));
        Assert.False(loop.IsCompleted);
        timer.Dispose();
        await TestUtil.WithTimeout(loop);
        Assert.Equal(4, seen.Count);
        Assert.Equal(0, wheel.PendingCount);

        static async SpindleTask Loop(SpindlePeriodicTimer timer, ManualClock clock, List<TimeSpan> seen)
        {
            while (await timer.WaitForNextTickAsync())
            {
                seen.Add(clock.Elapsed);
            }
        }
    }

    [Fact]
    public void Dispose_CompletesAPendingWaitWithFalseAndLeavesNothingInTheWheel()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var timer = new SpindlePeriodicTimer(TimeSpan.FromMilliseconds(10), wheel);
        SpindleTask<bool> wait = timer.WaitForNextTickAsync();
        Assert.Equal(1, wheel.PendingCount);
        timer.Dispose();
        Assert.Equal(SpindleTaskStatus.Succeeded, wait.Status);
        Assert.False(wait.GetAwaiter().GetResult());
        Assert.Equal(0, wheel.PendingCount);
        clock.Advance(TimeSpan.FromMilliseconds(100));
        timer.Dispose(); // twice is harmless
    }

    [Fact]
    public void WaitForNextTick_AfterDispose_ReturnsFalseAtOnce_AsPeriodicTimer()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var timer = new SpindlePeriodicTimer(TimeSpan.FromMilliseconds(10), wheel);
        clock.Advance(TimeSpan.FromMilliseconds(15)); // a remembered tick does not outlive Dispose
        timer.Dispose();
        SpindleTask<bool> wait = timer.WaitForNextTickAsync();
        Assert.True(wait.IsCompleted);
        Assert.False(wait.GetAwaiter().GetResult());
        using var cts = new CancellationTokenSource();
        cts.Cancel();
        SpindleTask<bool> canceled = timer.WaitForNextTickAsync(cts.Token); // a cancelled token wins, as the BCL's
        Assert.True(canceled.IsCompleted);
        Assert.ThrowsAny<OperationCanceledException>(() => canceled.GetAwaiter().GetResult());
        Assert.Equal(0, wheel.PendingCount);

        // The BCL's PeriodicTimer, for the same calls.
        var bcl = new PeriodicTimer(TimeSpan.FromMilliseconds(10));
        bcl.Dispose();
        Assert.False(bcl.WaitForNextTickAsync().AsTask().GetAwaiter().GetResult());
        Assert.ThrowsAny<OperationCanceledException>(() => bcl.WaitForNextTickAsync(cts.Token).AsTask().GetAwaiter().GetResult());
    }

    [Fact]
    public async Task ALoopWhoseTimerIsDisposedBetweenWaits_Ends()
    {
        // A hosted service's loop: its timer is disposed from another thread (StopAsync) while the body runs.
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var timer = new SpindlePeriodicTimer(TimeSpan.FromMilliseconds(10), wheel);
        var inBody = new Promise();
        var disposed = new Promise();
        int bodies = 0;
        async SpindleTask Loop()
        {
            while (await timer.WaitForNextTickAsync())
            {
                bodies++;
                inBody.TrySetResult();
                await disposed.Task;
            }
        }
        SpindleTask loop = Loop();
        clock.Advance(TimeSpan.FromMilliseconds(10));
        await inBody.Task;
        timer.Dispose();
        disposed.SetResult();
        await loop; // ends, rather than faults with ObjectDisposedException
        Assert.Equal(1, bodies);
        Assert.Equal(0, wheel.PendingCount);
    }

    [Fact]
    public void WaitForNextTick_Canceled_CompletesAsCanceledAndTheTickIsNotLost()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var timer = new SpindlePeriodicTimer(TimeSpan.FromMilliseconds(10), wheel);
        using var cts = new CancellationTokenSource();
        SpindleTask<bool> wait = timer.WaitForNextTickAsync(cts.Token);
        clock.Advance(TimeSpan.FromMilliseconds(4));
        Assert.Equal(1, wheel.PendingCount);
        cts.Cancel();
        Assert.Equal(SpindleTaskStatus.Canceled, wait.Status);
        Assert.Equal(0, wheel.PendingCount);
        OperationCanceledException oce = Assert.ThrowsAny<OperationCanceledException>(() => wait.GetAwaiter().GetResult());
        Assert.Equal(cts.Token, oce.CancellationToken);
        clock.Advance(TimeSpan.FromMilliseconds(8)); // the tick at 10 passes with nobody waiting
        Assert.True(timer.WaitForNextTickAsync().GetAwaiter().GetResult());
        AssertNextTickAt(clock, timer, TimeSpan.FromMilliseconds(20));
    }

    [Fact]
    public void WaitForNextTick_CanceledThenWaitedAgainBeforeTheTick_StillTicksOnTime()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var timer = new SpindlePeriodicTimer(TimeSpan.FromMilliseconds(10), wheel);
        using var cts = new CancellationTokenSource();
        SpindleTask<bool> wait = timer.WaitForNextTickAsync(cts.Token);
        cts.Cancel();
        Assert.ThrowsAny<OperationCanceledException>(() => wait.GetAwaiter().GetResult());
        AssertNextTickAt(clock, timer, TimeSpan.FromMilliseconds(10));
    }

    [Fact]
    public void WaitForNextTick_TokenAlreadyCanceled_CancelsAtOnceAndRegistersNothing()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var timer = new SpindlePeriodicTimer(TimeSpan.FromMilliseconds(10), wheel);
        using var cts = new CancellationTokenSource();
        cts.Cancel();
        SpindleTask<bool> wait = timer.WaitForNextTickAsync(cts.Token);
        Assert.Equal(SpindleTaskStatus.Canceled, wait.Status);
        Assert.Equal(0, wheel.PendingCount);
        Assert.ThrowsAny<OperationCanceledException>(() => wait.GetAwaiter().GetResult());
        AssertNextTickAt(clock, timer, TimeSpan.FromMilliseconds(10)); // and the timer is free for the next wait
    }

    [Fact]
    public void WaitForNextTick_TickedWaitWithAToken_LeavesTheTokenUnregistered()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var timer = new SpindlePeriodicTimer(TimeSpan.FromMilliseconds(10), wheel);
        using var cts = new CancellationTokenSource();
        SpindleTask<bool> wait = timer.WaitForNextTickAsync(cts.Token);
        clock.Advance(TimeSpan.FromMilliseconds(10));
        Assert.True(wait.GetAwaiter().GetResult());
        cts.Cancel(); // the wait is over: nothing is registered, so nothing happens to the next one
        AssertNextTickAt(clock, timer, TimeSpan.FromMilliseconds(20));
    }

    [Fact]
    public void WaitForNextTick_ASecondConcurrentWait_ThrowsAndLeavesTheFirstIntact()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var timer = new SpindlePeriodicTimer(TimeSpan.FromMilliseconds(10), wheel);
        SpindleTask<bool> first = timer.WaitForNextTickAsync();
        InvalidOperationException e = Assert.Throws<InvalidOperationException>(() => timer.WaitForNextTickAsync());
        Assert.Contains("one consumer", e.Message, StringComparison.Ordinal);
        clock.Advance(TimeSpan.FromMilliseconds(10));
        // Completed but not yet read: still the first consumer's wait.
        Assert.Throws<InvalidOperationException>(() => timer.WaitForNextTickAsync());
        Assert.True(first.GetAwaiter().GetResult());
        AssertNextTickAt(clock, timer, TimeSpan.FromMilliseconds(20));
    }

    [Fact]
    public void WaitForNextTick_ResultReadTwice_IsTheAwaitOnceError()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var timer = new SpindlePeriodicTimer(TimeSpan.FromMilliseconds(10), wheel);
        SpindleTask<bool> wait = timer.WaitForNextTickAsync();
        clock.Advance(TimeSpan.FromMilliseconds(10));
        Assert.True(wait.GetAwaiter().GetResult());
        Assert.Throws<InvalidOperationException>(() => wait.GetAwaiter().GetResult());
    }

    [Theory]
    [InlineData(0L)]
    [InlineData(-1L)]
    [InlineData(1L)] // one TimeSpan tick
    [InlineData(9_999L)] // just under 1 ms
    [InlineData(long.MinValue)]
    public void Constructor_APeriodUnder1Ms_Throws(long ticks)
    {
        using var wheel = new TimerWheel(new ManualClock());
        ArgumentOutOfRangeException e = Assert.Throws<ArgumentOutOfRangeException>(() => new SpindlePeriodicTimer(TimeSpan.FromTicks(ticks), wheel));
        Assert.Equal("period", e.ParamName);
        Assert.Contains("1 ms", e.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void Constructor_OverMaxDelay_Throws_AndTheBoundsAreAccepted()
    {
        using var wheel = new TimerWheel(new ManualClock());
        Assert.Throws<ArgumentOutOfRangeException>(() => new SpindlePeriodicTimer(TimerWheel.MaxDelay + TimeSpan.FromTicks(1), wheel));
        Assert.Throws<ArgumentOutOfRangeException>(() => new SpindlePeriodicTimer(TimeSpan.MaxValue, wheel));
        using var shortest = new SpindlePeriodicTimer(TimeSpan.FromMilliseconds(1), wheel);
        using var longest = new SpindlePeriodicTimer(TimerWheel.MaxDelay, wheel);
        Assert.Equal(TimeSpan.FromMilliseconds(1), shortest.Period);
        Assert.Equal(TimerWheel.MaxDelay, longest.Period);
    }

    /// <summary>
    /// <see cref="Timeout.InfiniteTimeSpan"/> is a period, as the BCL's <c>PeriodicTimer</c> accepts it (found by a review
    /// of the time layer, 2026-11-28: the constructor threw, where the contract excepts from its bad input the infinite
    /// span wherever the BCL takes it): a timer that never ticks, whose waits end with their token, the timer's Dispose or
    /// the wheel's, and leave nothing in the wheel.
    /// </summary>
    [Fact]
    public void Constructor_InfinitePeriod_NeverTicks_AndItsWaitsEndByTokenOrDispose()
    {
        var clock = new ManualClock();
        var wheel = new TimerWheel(clock);
        using var timer = new SpindlePeriodicTimer(Timeout.InfiniteTimeSpan, wheel);
        Assert.Equal(Timeout.InfiniteTimeSpan, timer.Period);
        using (var cts = new CancellationTokenSource())
        {
            SpindleTask<bool> wait = timer.WaitForNextTickAsync(cts.Token);
            clock.Advance(TimerWheel.MaxDelay);
            Assert.False(wait.IsCompleted, "an infinite period ticked");
            cts.Cancel();
            Assert.ThrowsAny<OperationCanceledException>(() => wait.GetAwaiter().GetResult());
        }
        SpindleTask<bool> second = timer.WaitForNextTickAsync();
        Assert.False(second.IsCompleted, "the cancelled wait's tick was delivered, but there was none");
        timer.Dispose();
        Assert.False(second.GetAwaiter().GetResult());

        using var other = new SpindlePeriodicTimer(Timeout.InfiniteTimeSpan, wheel);
        SpindleTask<bool> third = other.WaitForNextTickAsync();
        wheel.Dispose();
        Assert.False(third.GetAwaiter().GetResult());
        Assert.Equal(0, wheel.PendingCount);
    }

    [Fact]
    public void Constructor_OnADisposedWheel_ThrowsObjectDisposed()
    {
        var wheel = new TimerWheel(new ManualClock());
        wheel.Dispose();
        Assert.Throws<ObjectDisposedException>(() => new SpindlePeriodicTimer(TimeSpan.FromSeconds(1), wheel));
    }

    [Fact]
    public void WaitForNextTick_WheelDisposedWhileWaiting_ReturnsFalseThenThrows()
    {
        var clock = new ManualClock();
        var wheel = new TimerWheel(clock);
        using var timer = new SpindlePeriodicTimer(TimeSpan.FromMilliseconds(10), wheel);
        SpindleTask<bool> wait = timer.WaitForNextTickAsync();
        wheel.Dispose();
        Assert.False(wait.GetAwaiter().GetResult());
        ObjectDisposedException e = Assert.Throws<ObjectDisposedException>(() => timer.WaitForNextTickAsync());
        Assert.Contains("TimerWheel", e.Message, StringComparison.Ordinal);
        Assert.Contains("create a new SpindlePeriodicTimer on a wheel that is still in use", e.Message, StringComparison.Ordinal); // names the fix
    }

    [Fact]
    public void Constructor_WithoutAWheel_UsesTheDefaultWheel()
    {
        using var timer = new SpindlePeriodicTimer(TimeSpan.FromHours(1));
        Assert.Equal(TimeSpan.FromHours(1), timer.Period);
        SpindleTask<bool> wait = timer.WaitForNextTickAsync();
        Assert.False(wait.IsCompleted);
        timer.Dispose();
        Assert.False(wait.GetAwaiter().GetResult());
    }
}

/// <summary>Barrier-forced races on a periodic timer's pending wait: exactly one outcome, nothing left in the wheel.</summary>
[Collection(SequentialCollection.Name)]
public class PeriodicTimerRaceTests
{
    /// <summary>The tick races the wait's token: true or canceled, once; a canceled wait's tick is delivered next.</summary>
    [Fact]
    public async Task WaitForNextTick_TickVersusCancel_HasExactlyOneOutcome()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var timer = new SpindlePeriodicTimer(TimeSpan.FromMilliseconds(1), wheel);
        int rounds = TestUtil.Stress(2_000);
        CancellationTokenSource? cts = null;
        SpindleTask<bool> wait = default;
        int continuations = 0;
        int ticked = 0;
        int canceled = 0;
        int ran = await Race.Run(
            rounds,
            before: _ =>
            {
                cts = new CancellationTokenSource();
                wait = timer.WaitForNextTickAsync(cts.Token);
                continuations = 0;
                wait.GetAwaiter().UnsafeOnCompleted(() => Interlocked.Increment(ref continuations));
            },
            after: round =>
            {
                TestUtil.SpinUntil(() => Volatile.Read(ref continuations) > 0);
                Assert.Equal(1, continuations);
                try
                {
                    Assert.True(wait.GetAwaiter().GetResult());
                    ticked++;
                }
                catch (OperationCanceledException)
                {
                    canceled++;
                    // The tick the canceled wait was after has passed: it is remembered, and delivered at once.
                    Assert.True(timer.WaitForNextTickAsync().GetAwaiter().GetResult(), "round " + round);
                }
                Assert.Equal(0, wheel.PendingCount);
                cts!.Dispose();
            },
            round =>
            {
                RaceJitter.Delay(round, 0);
                clock.Advance(TimeSpan.FromMilliseconds(1));
            },
            round =>
            {
                RaceJitter.Delay(round, 1);
                cts!.Cancel();
            });
        Assert.Equal(ran, ticked + canceled);
    }

    /// <summary>The tick races Dispose: true or false, once; nothing left in the wheel.</summary>
    [Fact]
    public async Task WaitForNextTick_TickVersusDispose_HasExactlyOneOutcome()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        int rounds = TestUtil.Stress(2_000);
        SpindlePeriodicTimer? timer = null;
        SpindleTask<bool> wait = default;
        int continuations = 0;
        int ticked = 0;
        int stopped = 0;
        int ran = await Race.Run(
            rounds,
            before: _ =>
            {
                timer = new SpindlePeriodicTimer(TimeSpan.FromMilliseconds(1), wheel);
                wait = timer.WaitForNextTickAsync();
                continuations = 0;
                wait.GetAwaiter().UnsafeOnCompleted(() => Interlocked.Increment(ref continuations));
            },
            after: _ =>
            {
                TestUtil.SpinUntil(() => Volatile.Read(ref continuations) > 0);
                Assert.Equal(1, continuations);
                if (wait.GetAwaiter().GetResult())
                {
                    ticked++;
                }
                else
                {
                    stopped++;
                }
                Assert.Equal(0, wheel.PendingCount);
                Assert.False(timer!.WaitForNextTickAsync().GetAwaiter().GetResult()); // a stopped timer answers false
            },
            round =>
            {
                RaceJitter.Delay(round, 0);
                clock.Advance(TimeSpan.FromMilliseconds(1));
            },
            round =>
            {
                RaceJitter.Delay(round, 1);
                timer!.Dispose();
            });
        Assert.Equal(ran, ticked + stopped);
    }
}

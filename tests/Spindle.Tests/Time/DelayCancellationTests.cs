using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Time;

/// <summary>Cancellation, bad input and disposal of delays: one outcome, a clear exception, nothing left behind.</summary>
public class DelayCancellationTests
{

    [Theory]
    [InlineData(-2)]
    [InlineData(-1000)]
    [InlineData(int.MinValue)]
    public void ANegativeMillisecondDelayThrows(int ms)
    {
        using var wheel = new TimerWheel(new ManualClock());
        ArgumentOutOfRangeException e = Assert.Throws<ArgumentOutOfRangeException>(() => wheel.Delay(ms));
        Assert.Contains("Timeout.Infinite", e.Message);
        Assert.Throws<ArgumentOutOfRangeException>(() => Spindle.Delay(ms));
    }

    [Fact]
    public void ANegativeOrTooLongTimeSpanThrows()
    {
        using var wheel = new TimerWheel(new ManualClock());
        Assert.Throws<ArgumentOutOfRangeException>(() => wheel.Delay(TimeSpan.FromTicks(-1)));
        Assert.Throws<ArgumentOutOfRangeException>(() => wheel.Delay(TimeSpan.FromMilliseconds(-2)));
        Assert.Throws<ArgumentOutOfRangeException>(() => wheel.Delay(TimerWheel.MaxDelay + TimeSpan.FromTicks(1)));
        Assert.Throws<ArgumentOutOfRangeException>(() => wheel.Delay(TimeSpan.MaxValue));
        Assert.Throws<ArgumentOutOfRangeException>(() => wheel.Delay(TimeSpan.MinValue));
        Assert.Throws<ArgumentOutOfRangeException>(() => Spindle.Delay(TimeSpan.FromDays(60)));
        // The BCL's own bound: Task.Delay rejects the same values.
        Assert.Throws<ArgumentOutOfRangeException>(() => { _ = Task.Delay(TimerWheel.MaxDelay + TimeSpan.FromMilliseconds(1)); });
        Assert.Equal(0, wheel.PendingCount);
    }

    [Fact]
    public void ANaNDelayIsRejectedBeforeItReachesSpindle()
    {
        // A NaN cannot become a TimeSpan: the conversion throws, as it does for Task.Delay callers.
        Assert.ThrowsAny<ArgumentException>(() => Spindle.Delay(TimeSpan.FromMilliseconds(double.NaN)));
    }

    [Fact]
    public void ZeroCompletesAtOnce()
    {
        using var wheel = new TimerWheel(new ManualClock());
        SpindleTask delay = wheel.Delay(TimeSpan.Zero);
        Assert.Equal(SpindleTaskStatus.Succeeded, delay.Status);
        Assert.Equal(SpindleTaskStatus.Succeeded, Spindle.Delay(0).Status);
    }

    [Fact]
    public void AnInfiniteDelayWaitsForItsTokenAndIsNeverInTheWheel()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var cts = new CancellationTokenSource();
        SpindleTask forever = wheel.Delay(Timeout.InfiniteTimeSpan, cts.Token);
        SpindleTask foreverMs = wheel.Delay(Timeout.Infinite, cts.Token);
        clock.Advance(TimeSpan.FromDays(100));
        Assert.False(forever.IsCompleted);
        Assert.False(foreverMs.IsCompleted);
        Assert.Equal(0, wheel.PendingCount);
        cts.Cancel();
        Assert.ThrowsAny<OperationCanceledException>(() => forever.GetAwaiter().GetResult());
        Assert.ThrowsAny<OperationCanceledException>(() => foreverMs.GetAwaiter().GetResult());
    }

    [Fact]
    public void AwaitingADelayTwiceIsTheAwaitOnceError()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        SpindleTask delay = wheel.Delay(5);
        clock.Advance(TimeSpan.FromMilliseconds(5));
        delay.GetAwaiter().GetResult();
        Assert.Throws<InvalidOperationException>(() => delay.GetAwaiter().GetResult());
    }

    [Fact]
    public void DisposingAWheelCancelsItsPendingDelaysAndRejectsNewOnes()
    {
        var clock = new ManualClock();
        var wheel = new TimerWheel(clock);
        SpindleTask linked = wheel.Delay(10);
        SpindleTask far = wheel.Delay(TimeSpan.FromDays(3));
        wheel.Dispose();
        Assert.ThrowsAny<OperationCanceledException>(() => linked.GetAwaiter().GetResult());
        Assert.ThrowsAny<OperationCanceledException>(() => far.GetAwaiter().GetResult());
        Assert.Equal(0, wheel.PendingCount);
        ObjectDisposedException e = Assert.Throws<ObjectDisposedException>(() => wheel.Delay(1));
        Assert.Contains("TimerWheel.Default", e.Message);
        wheel.Dispose(); // twice is harmless
    }

    [Fact]
    public void TheDefaultWheelCannotBeDisposed()
    {
        InvalidOperationException e = Assert.Throws<InvalidOperationException>(() => TimerWheel.Default.Dispose());
        Assert.Contains("cannot be disposed", e.Message);
        Assert.Contains("Dispose only a wheel you created", e.Message, StringComparison.Ordinal); // it named no way out before
        TimerWheel.Default.Delay(0).GetAwaiter().GetResult(); // still working
    }

    [Fact]
    public void ANullTimeProviderIsRejected()
    {
        Assert.Throws<ArgumentNullException>(() => new TimerWheel(null!));
    }

    /// <summary>Cancellation races the clock reaching the deadline: exactly one outcome, one continuation, nothing left.</summary>
    [Fact]
    public async Task CancelVersusFireHasExactlyOneOutcome()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        int rounds = TestUtil.Stress(2_000);
        CancellationTokenSource? cts = null;
        SpindleTask delay = default;
        int continuations = 0;
        int fired = 0;
        int canceled = 0;
        int ran = await Race.Run(
            rounds,
            before: _ =>
            {
                cts = new CancellationTokenSource();
                delay = wheel.Delay(1, cts.Token);
                continuations = 0;
                SpindleTask.Awaiter awaiter = delay.GetAwaiter();
                awaiter.OnCompleted(() => Interlocked.Increment(ref continuations));
            },
            after: round =>
            {
                TestUtil.SpinUntil(() => Volatile.Read(ref continuations) > 0);
                Assert.Equal(1, continuations);
                SpindleTaskStatus status = delay.Status;
                Assert.True(status is SpindleTaskStatus.Succeeded or SpindleTaskStatus.Canceled, "round " + round + ": " + status);
                if (status == SpindleTaskStatus.Succeeded)
                {
                    fired++;
                    delay.GetAwaiter().GetResult();
                }
                else
                {
                    canceled++;
                    Assert.ThrowsAny<OperationCanceledException>(() => delay.GetAwaiter().GetResult());
                }
                cts!.Dispose();
                Assert.Equal(0, wheel.PendingCount);
            },
            _ => clock.Advance(TimeSpan.FromMilliseconds(1)),
            _ => cts!.Cancel());
        Assert.Equal(ran, fired + canceled);
    }

    /// <summary>Many threads add and cancel delays while one advances the clock: every delay ends exactly once.</summary>
    [Fact]
    public async Task ConcurrentAddCancelAndAdvanceLoseNothing()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        const int producers = 3;
        int perProducer = TestUtil.Stress(20_000);
        int ended = 0;
        int duplicates = 0;
        var seen = new int[producers * perProducer];
        var stop = new CancellationTokenSource();
        Task advancer = TestUtil.RunOnThread(() =>
        {
            while (!stop.IsCancellationRequested)
            {
                clock.Advance(TimeSpan.FromMilliseconds(1));
            }
        });
        var workers = new Task[producers];
        for (int p = 0; p < producers; p++)
        {
            int me = p;
            workers[p] = TestUtil.RunOnThread(() =>
            {
                var rng = new Random(me);
                for (int i = 0; i < perProducer; i++)
                {
                    int id = me * perProducer + i;
                    var cts = new CancellationTokenSource();
                    SpindleTask.Awaiter awaiter = wheel.Delay(rng.Next(1, 100), cts.Token).GetAwaiter();
                    awaiter.OnCompleted(() =>
                    {
                        try
                        {
                            awaiter.GetResult();
                        }
                        catch (OperationCanceledException)
                        {
                        }
                        if (Interlocked.Increment(ref seen[id]) != 1)
                        {
                            Interlocked.Increment(ref duplicates);
                        }
                        Interlocked.Increment(ref ended);
                    });
                    if (rng.Next(3) == 0)
                    {
                        cts.Cancel();
                    }
                }
            });
        }
        await TestUtil.WithTimeout(Task.WhenAll(workers), TestUtil.StressTimeout(60));
        TestUtil.SpinUntil(() => Volatile.Read(ref ended) == producers * perProducer, TestUtil.StressTimeout(60));
        stop.Cancel();
        await TestUtil.WithTimeout(advancer);
        Assert.Equal(0, duplicates);
        Assert.Equal(0, wheel.PendingCount);
    }
}

/// <summary>Cancellation leaves nothing behind: the pool and the pending count return to where they started. Sequential,
/// because the shared pool is shared with every other test that uses timers.</summary>
[Collection(SequentialCollection.Name)]
public class DelayPoolTests
{
    /// <summary>Timer nodes in this thread's pool stack and the shared one (a return may move a chunk between them).</summary>
    private static int PooledNodes() => ObjectPool<TimerNode>.LocalCount + ObjectPool<TimerNode>.Count;

    [Fact]
    public void ACancelledDelayCompletesAsCanceledAndLeavesNothingBehind()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        // Warm the pool on this thread, so that the measured use rents and returns one that already exists.
        SpindleTask warm = wheel.Delay(1);
        clock.Advance(TimeSpan.FromMilliseconds(1));
        warm.GetAwaiter().GetResult();
        int pooled = PooledNodes();

        using var cts = new CancellationTokenSource();
        SpindleTask delay = wheel.Delay(TimeSpan.FromSeconds(30), cts.Token);
        Assert.Equal(1, wheel.PendingCount);
        Assert.Equal(pooled - 1, PooledNodes());
        cts.Cancel();
        Assert.True(delay.IsCompleted);
        Assert.Equal(SpindleTaskStatus.Canceled, delay.Status);
        OperationCanceledException oce = Assert.ThrowsAny<OperationCanceledException>(() => delay.GetAwaiter().GetResult());
        Assert.Equal(cts.Token, oce.CancellationToken);
        Assert.Equal(0, wheel.PendingCount);
        Assert.Equal(pooled, PooledNodes());
        // And the time passing later fires nothing.
        clock.Advance(TimeSpan.FromSeconds(60));
        Assert.Equal(0, wheel.PendingCount);
    }

    /// <summary>
    /// Canceled at once, in no wheel and registered with nothing; its node (a pooled one, canceled lazily: see
    /// <c>LazyCancellationTests</c>) goes back to the pool when the cancellation is read.
    /// </summary>
    [Fact]
    public void AnAlreadyCancelledTokenCompletesAtOnceAndRegistersNothing()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var cts = new CancellationTokenSource();
        cts.Cancel();
        int pooled = PooledNodes();
        SpindleTask delay = wheel.Delay(TimeSpan.FromSeconds(1), cts.Token);
        Assert.Equal(SpindleTaskStatus.Canceled, delay.Status);
        Assert.Equal(0, wheel.PendingCount);
        var e = Assert.Throws<TaskCanceledException>(() => delay.GetAwaiter().GetResult());
        Assert.Equal(cts.Token, e.CancellationToken);
        Assert.Equal(0, wheel.PendingCount);
        Assert.Equal(Math.Max(pooled, 1), PooledNodes()); // the node it took, or made, is back
    }
}

using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Tasks;

public class SignalTests
{
    [Fact]
    public void WaitAsync_AfterSet_CompletesImmediatelyAndConsumesTheSignal()
    {
        var signal = new Signal();
        signal.Set();
        Assert.True(signal.IsSet);

        SpindleTask wait = signal.WaitAsync();

        Assert.True(wait.IsCompleted);
        Assert.Equal(SpindleTaskStatus.Succeeded, wait.Status);
        wait.GetAwaiter().GetResult();
        Assert.False(signal.IsSet);
        Assert.False(signal.WaitAsync().IsCompleted);
    }

    [Fact]
    public void Constructor_InitiallySet_FirstWaitCompletesImmediately()
    {
        var signal = new Signal(initiallySet: true);

        Assert.True(signal.IsSet);
        Assert.True(signal.WaitAsync().IsCompleted);
        Assert.False(signal.IsSet);
    }

    [Fact]
    public void Set_TwiceWithNoWaiter_ReleasesOnlyOneWait()
    {
        var signal = new Signal();

        signal.Set();
        signal.Set();

        Assert.True(signal.WaitAsync().IsCompleted);
        SpindleTask second = signal.WaitAsync();
        Assert.Equal(SpindleTaskStatus.Pending, second.Status);
        Assert.True(signal.HasWaiter);
        signal.Set();
        Assert.Equal(SpindleTaskStatus.Succeeded, second.Status);
        Assert.False(signal.IsSet);
        Assert.False(signal.HasWaiter);
    }

    [Fact]
    public void Reset_WhenSet_ClearsTheSignal()
    {
        var signal = new Signal(initiallySet: true);

        signal.Reset();

        Assert.False(signal.IsSet);
        Assert.Equal(SpindleTaskStatus.Pending, signal.WaitAsync().Status);
    }

    [Fact]
    public async Task Set_WithPendingWaiter_ResumesIt()
    {
        var signal = new Signal();
        Task awaiting = TestUtil.AwaitAsync(signal.WaitAsync());
        Assert.False(awaiting.IsCompleted);

        await TestUtil.WithTimeout(TestUtil.RunOnThread(signal.Set));

        await TestUtil.WithTimeout(awaiting);
        Assert.False(signal.IsSet);
    }

    [Fact]
    public void WaitAsync_SecondWhileOneIsPending_ThrowsAndTheFirstStillWorks()
    {
        var signal = new Signal();
        SpindleTask first = signal.WaitAsync();
        int runs = 0;
        first.GetAwaiter().UnsafeOnCompleted(() => runs++);

        Assert.Throws<InvalidOperationException>(() => signal.WaitAsync());
        using var cts = new CancellationTokenSource();
        Assert.Throws<InvalidOperationException>(() => signal.WaitAsync(cts.Token));

        Assert.Equal(SpindleTaskStatus.Pending, first.Status);
        signal.Set();
        Assert.Equal(1, runs);
        first.GetAwaiter().GetResult();
    }

    [Fact]
    public async Task WaitAsync_AlreadyCanceledToken_CompletesCanceledAtOnceAndRegistersNothing()
    {
        var signal = new Signal();
        using var cts = new CancellationTokenSource();
        cts.Cancel();

        SpindleTask wait = signal.WaitAsync(cts.Token);

        Assert.Equal(SpindleTaskStatus.Canceled, wait.Status);
        var oce = await Assert.ThrowsAnyAsync<OperationCanceledException>(() => TestUtil.WithTimeout(wait));
        Assert.Equal(cts.Token, oce.CancellationToken);
        Assert.False(signal.HasWaiter);
        signal.Set();
        Assert.True(signal.IsSet); // the set is kept for the next wait
        Assert.True(signal.WaitAsync().IsCompleted);
    }

    [Fact]
    public async Task WaitAsync_CanceledWhilePending_ThrowsOperationCanceledAndTheSignalStaysUsable()
    {
        var signal = new Signal();
        using var cts = new CancellationTokenSource();
        Task awaiting = TestUtil.AwaitAsync(signal.WaitAsync(cts.Token));

        await cts.CancelAsync();

        var oce = await Assert.ThrowsAnyAsync<OperationCanceledException>(() => TestUtil.WithTimeout(awaiting));
        Assert.Equal(cts.Token, oce.CancellationToken);
        Assert.False(signal.HasWaiter);
        Assert.False(signal.IsSet);
        SpindleTask next = signal.WaitAsync();
        Assert.Equal(SpindleTaskStatus.Pending, next.Status);
        signal.Set();
        next.GetAwaiter().GetResult();
    }

    [Fact]
    public async Task WaitAsync_TokenCanceledAfterTheWaitWasSetAndRead_DoesNotAffectTheNextWait()
    {
        var signal = new Signal();
        using var cts = new CancellationTokenSource();
        SpindleTask first = signal.WaitAsync(cts.Token);
        signal.Set();
        await TestUtil.WithTimeout(first); // reading the wait drops its cancellation registration

        SpindleTask second = signal.WaitAsync();
        await cts.CancelAsync();

        Assert.Equal(SpindleTaskStatus.Pending, second.Status);
        signal.Set();
        second.GetAwaiter().GetResult();
    }

    [Fact]
    public void WaitAsync_TokenOfAnEarlierCompletedWaitCanceledLater_DoesNotCancelTheNextWait()
    {
        var signal = new Signal();
        using var cts = new CancellationTokenSource();
        SpindleTask first = signal.WaitAsync(cts.Token);
        signal.Set();
        Assert.Equal(SpindleTaskStatus.Succeeded, first.Status); // completed, not read yet

        SpindleTask second = signal.WaitAsync(); // a wait with no token at all
        cts.Cancel();

        Assert.Equal(SpindleTaskStatus.Pending, second.Status);
    }

    [Fact]
    public async Task SetAndCancel_RacingOnAPendingWait_ExactlyOneOutcomeAndNoSetIsLost()
    {
        // Under Race's time budget: a fixed 3,000 rounds of two raw barriers outran a fixed 60 s on one loaded core.
        int succeeded = 0;
        int canceled = 0;
        var signal = new Signal();
        CancellationTokenSource? cts = null;
        SpindleTask wait = default;
        int runs = 0;

        int ran = await TestUtil.WithTimeout(Race.Run(
            TestUtil.Stress(3_000),
            before: _ =>
            {
                cts = new CancellationTokenSource();
                wait = signal.WaitAsync(cts.Token);
                runs = 0;
                wait.GetAwaiter().UnsafeOnCompleted(() => Interlocked.Increment(ref runs));
            },
            after: round =>
            {
                // Both calls have returned, and each completes the wait inline if it wins: the outcome is final.
                Assert.True(Volatile.Read(ref runs) == 1, $"round {round}: the continuation ran {Volatile.Read(ref runs)} times");
                SpindleTaskStatus status = wait.Status;
                if (status == SpindleTaskStatus.Succeeded)
                {
                    succeeded++;
                    wait.GetAwaiter().GetResult();
                    Assert.False(signal.IsSet); // the set went to the wait
                }
                else
                {
                    Assert.Equal(SpindleTaskStatus.Canceled, status);
                    canceled++;
                    Assert.ThrowsAny<OperationCanceledException>(() => wait.GetAwaiter().GetResult());
                    Assert.True(signal.IsSet); // the set came after the cancellation and was kept
                    signal.Reset();
                }
                Assert.False(signal.HasWaiter);
                cts!.Dispose();
            },
            _ => cts!.Cancel(),
            _ => signal.Set()), TestUtil.StressTimeout(120));

        Assert.Equal(ran, succeeded + canceled);
    }

    [Fact]
    public async Task WaitAsync_PingPongBetweenTwoThreads_EverySetReleasesExactlyOneWait()
    {
        int cycles = TestUtil.Stress(20_000);
        var toConsumer = new Signal();
        var toProducer = new Signal();
        int consumed = 0;

        // Each thread sets the other's signal and then waits on its own: every Set races the other side's WaitAsync
        // (set first: the wait completes at once; wait first: the Set completes the pending wait).
        Task consumer = TestUtil.RunOnThread(() =>
        {
            for (int i = 0; i < cycles; i++)
            {
                toConsumer.WaitAsync().GetAwaiter().GetResult();
                Volatile.Write(ref consumed, i + 1);
                toProducer.Set();
            }
        }, "signal consumer");
        Task producer = TestUtil.RunOnThread(() =>
        {
            for (int i = 0; i < cycles; i++)
            {
                toConsumer.Set();
                toProducer.WaitAsync().GetAwaiter().GetResult();
                if (Volatile.Read(ref consumed) != i + 1)
                {
                    throw new InvalidOperationException($"cycle {i}: the producer was released without a matching consumer step");
                }
            }
        }, "signal producer");

        // Bounded by a stall, not by the whole run: 20,000 blocking hand-offs outran a fixed 60 s on one loaded core
        // (taskset -c 1), while a lost set stops the count for good.
        await TestUtil.WithStallTimeout(
            Task.WhenAll(consumer, producer),
            () => Volatile.Read(ref consumed),
            () => $"{Volatile.Read(ref consumed)} of {cycles} cycles done (to the consumer: set {toConsumer.IsSet}, waiter {toConsumer.HasWaiter}; to the producer: set {toProducer.IsSet}, waiter {toProducer.HasWaiter})");
        Assert.Equal(cycles, consumed);
        Assert.False(toConsumer.IsSet);
        Assert.False(toProducer.IsSet);
        Assert.False(toConsumer.HasWaiter);
        Assert.False(toProducer.HasWaiter);
    }
    [Fact]
    public async Task SetAndCancel_RacingOnAnArmedWaitWithNoWaiterYet_ExactlyOneOutcomeAndNoSetIsLost()
    {
        // The wait is armed (WaitAsync returned) but nothing has registered on it: the set and the cancellation race for
        // the armed use itself, and the continuation registered afterwards must see the one outcome.
        int rounds = TestUtil.Stress(3_000);
        int succeeded = 0;
        int canceled = 0;

        await TestUtil.WithTimeout(Task.Run(() =>
        {
            using var barrier = new Barrier(2);
            var signal = new Signal();
            Task setter = TestUtil.RunOnThread(() =>
            {
                for (int i = 0; i < rounds; i++)
                {
                    barrier.SignalAndWait();
                    signal.Set();
                    barrier.SignalAndWait();
                }
            }, "signal setter");

            for (int i = 0; i < rounds; i++)
            {
                using var cts = new CancellationTokenSource();
                SpindleTask wait = signal.WaitAsync(cts.Token);
                Assert.True(signal.HasWaiter);
                barrier.SignalAndWait();
                cts.Cancel();
                barrier.SignalAndWait();

                int runs = 0;
                wait.GetAwaiter().UnsafeOnCompleted(() => Interlocked.Increment(ref runs));
                Assert.Equal(1, Volatile.Read(ref runs)); // completed before the registration: it runs at once
                SpindleTaskStatus status = wait.Status;
                if (status == SpindleTaskStatus.Succeeded)
                {
                    succeeded++;
                    wait.GetAwaiter().GetResult();
                    Assert.False(signal.IsSet);
                }
                else
                {
                    Assert.Equal(SpindleTaskStatus.Canceled, status);
                    canceled++;
                    Assert.ThrowsAny<OperationCanceledException>(() => wait.GetAwaiter().GetResult());
                    Assert.True(signal.IsSet);
                    signal.Reset();
                }
                Assert.False(signal.HasWaiter);
            }
            setter.GetAwaiter().GetResult();
        }), TestUtil.StressTimeout(60));

        Assert.Equal(rounds, succeeded + canceled);
    }

    [Fact]
    public async Task WaitAsync_RacingASetOnAnIdleSignal_TheSetIsTakenOnceWhicheverComesFirst()
    {
        // WaitAsync looks at the idle signal and then arms it with a CAS; a set landing in between makes the CAS fail, and
        // the wait must then take the set instead (complete at once), never arm over it and lose it. The rounds run under
        // Race's time budget, and each round's wait is waited for with a bound: a lost set fails its round by name, and a
        // slow machine runs fewer rounds. (It ran a fixed 5,000 rounds of two raw barriers inside 60 s, and timed out in a
        // full run beside two CPU hogs, where no round could tell a lost set from a slow one.)
        var signal = new Signal();
        SpindleTask wait = default;
        int ran = await TestUtil.WithTimeout(Race.Run(
            TestUtil.Stress(5_000),
            before: _ => { },
            after: round =>
            {
                // The one set released this wait, before or after it was armed; a lost set leaves it pending for good.
                TestUtil.SpinUntil(() => wait.IsCompleted, () => $"round {round}: the wait was never released (set: {signal.IsSet}, waiter: {signal.HasWaiter}), the set was lost");
                wait.GetAwaiter().GetResult();
                Assert.False(signal.IsSet);
                Assert.False(signal.HasWaiter);
            },
            _ => wait = signal.WaitAsync(),
            _ => signal.Set()), TestUtil.StressTimeout(120));
        Assert.True(ran > 0);
    }

    [Fact]
    public async Task WaitAsync_TwoAtOnce_OneThrows_AndTheOtherKeepsItsCancellation()
    {
        // A second wait is the caller's error, but it must not harm the first: the loser of the two is rejected before
        // it has touched anything (the first wait's token, version and registration among them).
        int rounds = TestUtil.Stress(2_000);
        await TestUtil.WithTimeout(Task.Run(() =>
        {
            using var barrier = new Barrier(2);
            var signal = new Signal();
            SpindleTask second = default;
            Exception? secondError = null;
            Task other = TestUtil.RunOnThread(() =>
            {
                for (int i = 0; i < rounds; i++)
                {
                    barrier.SignalAndWait();
                    try
                    {
                        second = signal.WaitAsync();
                        secondError = null;
                    }
                    catch (InvalidOperationException ex)
                    {
                        secondError = ex;
                    }
                    barrier.SignalAndWait();
                    barrier.SignalAndWait(); // the round is checked
                }
            }, "second waiter");

            for (int i = 0; i < rounds; i++)
            {
                using var cts = new CancellationTokenSource();
                SpindleTask first = default;
                Exception? firstError = null;
                barrier.SignalAndWait();
                try
                {
                    first = signal.WaitAsync(cts.Token);
                }
                catch (InvalidOperationException ex)
                {
                    firstError = ex;
                }
                barrier.SignalAndWait();

                Assert.True((firstError is null) != (secondError is null), "exactly one of two waits at once is rejected");
                if (firstError is null)
                {
                    cts.Cancel(); // the first wait's own registration must still be there
                    Assert.Equal(SpindleTaskStatus.Canceled, first.Status);
                    Assert.ThrowsAny<OperationCanceledException>(() => first.GetAwaiter().GetResult());
                }
                else
                {
                    signal.Set();
                    second.GetAwaiter().GetResult();
                }
                Assert.False(signal.HasWaiter);
                Assert.False(signal.IsSet);
                barrier.SignalAndWait();
            }
            other.GetAwaiter().GetResult();
        }), TestUtil.StressTimeout(60));
    }
}

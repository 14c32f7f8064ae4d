using System;
using System.Collections.Concurrent;
using System.Runtime.CompilerServices;
using System.Threading;
using System.Threading.Tasks;
using static SpindleLib.Tests.Combinators.CombinatorTestSupport;
using static SpindleLib.Tests.UnobservedReports;

namespace SpindleLib.Tests.Combinators;

/// <summary>
/// <c>WithCancellation(token)</c>, and <c>WithTimeout(timeout, timers, token)</c>: a token ends the wait on a task (as
/// <c>Task.WaitAsync(CancellationToken)</c>), letting go of the task as a WhenAny lets go of a loser; the task wins if it
/// finishes first; exactly one outcome. Sequential: several tests check Spindle.UnobservedException, which is
/// process-wide, for exactly what they caused.
/// </summary>
[Collection(SequentialCollection.Name)]
public class WithCancellationTests
{
    [Fact]
    public void TokenCancelledFirst_CompletesAsCanceledForThatToken_AndThePromiseCanBeResetAtOnce()
    {
        var input = new Promise<int>();
        using var cts = new CancellationTokenSource();
        ConcurrentQueue<Exception> reported = Observe(Own.Any(Own.ReportedOnTestThreads(), Own.CanceledBy(() => cts.Token)), () =>
        {
            SpindleTask<int> bounded = input.Task.WithCancellation(cts.Token);
            Assert.False(bounded.IsCompleted);
            cts.Cancel();
            Assert.Equal(SpindleTaskStatus.Canceled, bounded.Status);
            OperationCanceledException e = Assert.ThrowsAny<OperationCanceledException>(() => bounded.GetAwaiter().GetResult());
            Assert.Equal(cts.Token, e.CancellationToken);
            input.Reset(); // let go of: the promise is free again
            SpindleTask<int> again = input.Task.WithCancellation(CancellationToken.None);
            input.SetResult(3);
            Assert.Equal(3, again.GetAwaiter().GetResult());
        });
        Assert.Empty(reported);
    }

    [Fact]
    public void InputFinishesFirst_CompletesWithItsResult_AndALaterCancellationChangesNothing()
    {
        var input = new Promise<int>();
        using var cts = new CancellationTokenSource();
        SpindleTask<int> bounded = input.Task.WithCancellation(cts.Token);
        input.SetResult(42);
        Assert.Equal(42, bounded.GetAwaiter().GetResult());
        cts.Cancel(); // its registration was dropped when the input won
        Assert.Throws<InvalidOperationException>(() => bounded.GetAwaiter().GetResult()); // read once, as every pooled task
    }

    [Fact]
    public void Untyped_InputFailsFirst_RethrowsItsException_AndTokenFirst_IsCanceled()
    {
        var failing = new Promise();
        using var cts = new CancellationTokenSource();
        SpindleTask a = Await(failing).WithCancellation(cts.Token);
        failing.SetException(new FormatException("first"));
        Assert.Throws<FormatException>(() => a.GetAwaiter().GetResult());

        var pending = new Promise();
        SpindleTask b = pending.Task.WithCancellation(cts.Token);
        cts.Cancel();
        Assert.ThrowsAny<OperationCanceledException>(() => b.GetAwaiter().GetResult());
        pending.Reset();
    }

    [Fact]
    public void TokenAlreadyCancelled_OnAPendingInput_IsCanceledAtOnce_AndLetsGoOfIt()
    {
        var input = new Promise();
        SpindleTask bounded = input.Task.WithCancellation(new CancellationToken(true));
        Assert.Equal(SpindleTaskStatus.Canceled, bounded.Status);
        Assert.ThrowsAny<OperationCanceledException>(() => bounded.GetAwaiter().GetResult());
        input.Reset(); // nothing still waits on it
    }

    [Fact]
    public void AnInputAlreadyCompleted_WinsOverACancelledToken_AndNeedsNoCombinator()
    {
        SpindleTask<int> done = SpindleTask.FromResult(5).WithCancellation(new CancellationToken(true));
        Assert.Equal(5, done.GetAwaiter().GetResult());
        var input = new Promise();
        input.SetResult();
        SpindleTask same = input.Task.WithCancellation(new CancellationToken(true));
        Assert.Same(input, same._source); // the task as it is: completed wins, as Task.WaitAsync
        same.GetAwaiter().GetResult();
    }

    [Fact]
    public void ATokenThatCannotBeCancelled_ReturnsTheTaskAsItIs()
    {
        var input = new Promise<int>();
        SpindleTask<int> same = input.Task.WithCancellation(CancellationToken.None);
        Assert.Same(input, same._source);
        input.SetResult(1);
        Assert.Equal(1, same.GetAwaiter().GetResult());
    }

    [Fact]
    public void ALateFaultAfterTheTokenWon_IsReportedOnce_AndALateSuccessIsNot()
    {
        var faulting = new Promise();
        var succeeding = new Promise<int>();
        var late = new FormatException("late");
        using var cts = new CancellationTokenSource();
        ConcurrentQueue<Exception> reported = Observe(Own.Any(Own.InstancesOrOnTestThreads(late), Own.CanceledBy(() => cts.Token)), () =>
        {
            SpindleTask a = Await(faulting).WithCancellation(cts.Token); // an async method: left to finish, forgotten
            SpindleTask<int> b = Await(succeeding).WithCancellation(cts.Token);
            cts.Cancel();
            Assert.ThrowsAny<OperationCanceledException>(() => a.GetAwaiter().GetResult());
            Assert.ThrowsAny<OperationCanceledException>(() => b.GetAwaiter().GetResult());
            faulting.SetException(late);
            succeeding.SetResult(1);
        });
        Assert.Equal(new Exception[] { late }, reported.ToArray());
    }

    [Fact]
    public async Task OnASignalWait_ACancelledWaitEnds_SoTheSignalCanBeWaitedOnAgain_AndALaterSetIsKept()
    {
        var signal = new Signal();
        for (int round = 0; round < 20; round++)
        {
            using var cts = new CancellationTokenSource();
            SpindleTask bounded = signal.WaitAsync().WithCancellation(cts.Token);
            cts.Cancel();
            await Assert.ThrowsAnyAsync<OperationCanceledException>(() => TestUtil.AwaitAsync(bounded));
            Assert.False(signal.HasWaiter);
        }
        signal.Set(); // nobody waits: kept for the next wait
        using var last = new CancellationTokenSource();
        SpindleTask next = signal.WaitAsync().WithCancellation(last.Token);
        Assert.True(next.IsCompleted);
        await TestUtil.AwaitAsync(next);
    }

    [Fact]
    public void AnAlreadyAwaitedInput_IsTheAwaitOnceError()
    {
        var input = new Promise();
        SpindleTask task = Await(input);
        input.SetResult();
        task.GetAwaiter().GetResult();
        using var cts = new CancellationTokenSource();
        Assert.Throws<InvalidOperationException>(() => task.WithCancellation(cts.Token));
    }

    [Fact]
    public void WithTimeoutAndAToken_TheTokenFirst_IsCanceled_AndLeavesNoTimer()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var cts = new CancellationTokenSource();
        var input = new Promise<int>();
        SpindleTask<int> bounded = input.Task.WithTimeout(TimeSpan.FromMilliseconds(10), wheel, cts.Token);
        Assert.Equal(1, wheel.PendingCount);
        clock.Advance(TimeSpan.FromMilliseconds(5));
        cts.Cancel();
        OperationCanceledException e = Assert.ThrowsAny<OperationCanceledException>(() => bounded.GetAwaiter().GetResult());
        Assert.Equal(cts.Token, e.CancellationToken);
        Assert.Equal(0, wheel.PendingCount);
        input.Reset();
    }

    [Fact]
    public void WithTimeoutAndAToken_TheTimeoutFirst_TimesOut_AndALaterCancellationChangesNothing()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var cts = new CancellationTokenSource();
        var input = new Promise();
        SpindleTask bounded = input.Task.WithTimeout(TimeSpan.FromMilliseconds(3), wheel, cts.Token);
        clock.Advance(TimeSpan.FromMilliseconds(3));
        Assert.Throws<TimeoutException>(() => bounded.GetAwaiter().GetResult());
        cts.Cancel();
        input.Reset();
    }

    [Fact]
    public void WithTimeoutAndATokenAlreadyCancelled_IsCanceledAtOnce_AndLeavesNoTimer()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var input = new Promise();
        SpindleTask bounded = input.Task.WithTimeout(TimeSpan.FromMilliseconds(10), wheel, new CancellationToken(true));
        Assert.Equal(SpindleTaskStatus.Canceled, bounded.Status);
        Assert.Equal(0, wheel.PendingCount);
        Assert.ThrowsAny<OperationCanceledException>(() => bounded.GetAwaiter().GetResult());
        input.Reset();
        clock.Advance(TimeSpan.FromMilliseconds(20)); // nothing left to fire
    }

    /// <summary>
    /// Task.WaitAsync(TimeSpan.Zero, token) with the token already cancelled is canceled, not timed out: the token is
    /// checked before the timeout. The zero timeout failed the wait with a TimeoutException first.
    /// </summary>
    [Fact]
    public void WithAZeroTimeoutAndATokenAlreadyCancelled_IsCanceledForThatToken_AsTaskWaitAsync()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var cts = new CancellationTokenSource();
        cts.Cancel();
        var input = new Promise<int>();
        SpindleTask<int> typed = input.Task.WithTimeout(TimeSpan.Zero, wheel, cts.Token);
        Assert.Equal(SpindleTaskStatus.Canceled, typed.Status);
        Assert.Equal(cts.Token, Assert.ThrowsAny<OperationCanceledException>(() => typed.GetAwaiter().GetResult()).CancellationToken);
        input.Reset();
        SpindleTask untyped = ((SpindleTask)input.Task).WithTimeout(TimeSpan.Zero, wheel, cts.Token);
        Assert.Equal(SpindleTaskStatus.Canceled, untyped.Status);
        Assert.Equal(cts.Token, Assert.ThrowsAny<OperationCanceledException>(() => untyped.GetAwaiter().GetResult()).CancellationToken);
        Assert.Equal(0, wheel.PendingCount);
        input.Reset();
        SpindleTask all = SpindleTask.WhenAll(new[] { (SpindleTask)input.Task }, new WhenAllOptions { Timeout = TimeSpan.Zero, Timers = wheel }, cts.Token);
        Assert.Equal(SpindleTaskStatus.Canceled, all.Status);
        Assert.ThrowsAny<OperationCanceledException>(() => all.GetAwaiter().GetResult());
        input.Reset();
    }

    [Fact]
    public void WithAnInfiniteTimeoutAndAToken_TheTokenStillBoundsTheWait()
    {
        using var cts = new CancellationTokenSource();
        var input = new Promise();
        SpindleTask bounded = input.Task.WithTimeout(Timeout.InfiniteTimeSpan, null, cts.Token);
        Assert.NotSame(input, bounded._source);
        cts.Cancel();
        Assert.ThrowsAny<OperationCanceledException>(() => bounded.GetAwaiter().GetResult());
    }

    [Fact]
    public void OnADelay_TheTokenFirst_TakesTheDelayOutOfItsWheel()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var cts = new CancellationTokenSource();
        SpindleTask bounded = wheel.Delay(TimeSpan.FromSeconds(10)).WithCancellation(cts.Token);
        Assert.Equal(1, wheel.PendingCount);
        cts.Cancel();
        Assert.ThrowsAny<OperationCanceledException>(() => bounded.GetAwaiter().GetResult());
        Assert.Equal(0, wheel.PendingCount);
    }

    private struct BlockedJob : IJob
    {
        public ManualResetEventSlim Gate;
        public StrongBox<int> Ran;

        public void Execute()
        {
            Gate.Wait();
            Interlocked.Increment(ref Ran.Value);
        }
    }

    [Fact]
    public void OnAJob_TheTokenFirst_EndsTheWait_AndTheJobStillRunsOnce()
    {
        using var gate = new ManualResetEventSlim();
        using var cts = new CancellationTokenSource();
        var ran = new StrongBox<int>();
        ConcurrentQueue<Exception> reported = Observe(Own.Any(Own.ReportedOnTestThreads(), Own.CanceledBy(() => cts.Token)), () =>
        {
            JobHandle handle = new BlockedJob { Gate = gate, Ran = ran }.Schedule(default);
            JobHandle.ScheduleBatchedJobs();
            SpindleTask bounded = handle.AsSpindleTask().WithCancellation(cts.Token);
            cts.Cancel();
            Assert.ThrowsAny<OperationCanceledException>(() => bounded.GetAwaiter().GetResult());
            gate.Set();
            handle.Complete();
        });
        Assert.Equal(1, ran.Value);
        Assert.Empty(reported);
    }

    /// <summary>The token's cancellation races the input's completion on two threads: exactly one outcome, one continuation.</summary>
    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task CancelVersusComplete_ExactlyOneOutcome(bool typed)
    {
        var input = new Promise<int>();
        input.SetResult(0);
        CancellationTokenSource cts = new();
        SpindleTask bounded = default;
        var continuation = new ContinuationCounter();
        int succeeded = 0, canceled = 0;
        int rounds = await TestUtil.WithTimeout(Race.Run(TestUtil.Stress(5_000),
            before: _ =>
            {
                input.Reset();
                cts.Dispose();
                cts = new CancellationTokenSource();
                bounded = typed ? input.Task.WithCancellation(cts.Token) : Await(input).WithCancellation(cts.Token);
                continuation.Reset();
                bounded.GetAwaiter().UnsafeOnCompleted(continuation.Action);
            },
            after: round =>
            {
                TestUtil.SpinUntil(() => continuation.Count > 0);
                Assert.Equal(1, continuation.Count);
                try
                {
                    bounded.GetAwaiter().GetResult();
                    succeeded++;
                }
                catch (OperationCanceledException)
                {
                    canceled++;
                }
            },
            _ => input.TrySetResult(1),
            _ => cts.Cancel()), 120);
        Assert.Equal(rounds, succeeded + canceled);
        cts.Dispose();
    }
}

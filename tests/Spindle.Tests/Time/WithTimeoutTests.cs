using System;
using System.Collections.Concurrent;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using static SpindleLib.Tests.Combinators.CombinatorTestSupport;
using static SpindleLib.Tests.UnobservedReports;

namespace SpindleLib.Tests.Time;

/// <summary>WithTimeout on a manual clock: the timeout fires exactly at its deadline, the input wins before it, one outcome.</summary>
public class WithTimeoutTests
{
    private static readonly TimeSpan OneTick = TimeSpan.FromTicks(1);

    private static async SpindleTask<int> AwaitValue(Promise<int> promise) => await promise.Task;

    [Theory]
    [InlineData(1)]
    [InlineData(17)]
    [InlineData(64)]
    [InlineData(1000)]
    public void WithTimeout_InputPending_FailsWithTimeoutExactlyAtTheDeadlineAndNotBefore(int ms)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var input = new Promise<int>();
        SpindleTask<int> timed = input.Task.WithTimeout(TimeSpan.FromMilliseconds(ms), wheel);
        Assert.Equal(1, wheel.PendingCount);
        clock.Advance(TimeSpan.FromMilliseconds(ms) - OneTick);
        Assert.False(timed.IsCompleted, "timed out early");
        clock.Advance(OneTick);
        Assert.Equal(SpindleTaskStatus.Faulted, timed.Status);
        TimeoutException e = Assert.Throws<TimeoutException>(() => timed.GetAwaiter().GetResult());
        Assert.Contains("timeout", e.Message, StringComparison.Ordinal);
        Assert.Equal(0, wheel.PendingCount);
    }

    [Fact]
    public void WithTimeout_UntypedInputPending_FailsWithTimeoutAtTheDeadline()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var input = new Promise();
        SpindleTask timed = input.Task.WithTimeout(TimeSpan.FromMilliseconds(5), wheel);
        clock.Advance(TimeSpan.FromMilliseconds(5) - OneTick);
        Assert.False(timed.IsCompleted);
        clock.Advance(OneTick);
        Assert.Throws<TimeoutException>(() => timed.GetAwaiter().GetResult());
        input.SetResult(); // the late success is read and dropped
        Assert.Equal(0, wheel.PendingCount);
    }

    [Fact]
    public void WithTimeout_ADeadlineBetweenTicks_IsRoundedUpSoItNeverFiresEarly()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        clock.Advance(TimeSpan.FromMilliseconds(0.4));
        var input = new Promise();
        SpindleTask timed = input.Task.WithTimeout(TimeSpan.FromMilliseconds(2.3), wheel); // due at 2.7 ms: fires at 3 ms
        clock.Advance(TimeSpan.FromMilliseconds(2.3) - OneTick);
        Assert.False(timed.IsCompleted, "timed out before the timeout had passed");
        clock.Advance(TimeSpan.FromMilliseconds(3) - clock.Elapsed - OneTick);
        Assert.False(timed.IsCompleted);
        clock.Advance(OneTick);
        Assert.Throws<TimeoutException>(() => timed.GetAwaiter().GetResult());
    }

    [Fact]
    public void WithTimeout_InputFinishesFirst_CompletesWithItsResultAndCancelsTheTimerAtOnce()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var input = new Promise<int>();
        SpindleTask<int> timed = input.Task.WithTimeout(TimeSpan.FromSeconds(10), wheel);
        clock.Advance(TimeSpan.FromSeconds(9));
        Assert.False(timed.IsCompleted);
        Assert.Equal(1, wheel.PendingCount);
        input.SetResult(42);
        Assert.Equal(0, wheel.PendingCount); // cancelled at once, not left to expire
        Assert.Equal(42, timed.GetAwaiter().GetResult());
        clock.Advance(TimeSpan.FromSeconds(5));
        Assert.Equal(0, wheel.PendingCount);
    }

    [Fact]
    public void WithTimeout_InputFailsFirst_RethrowsItsException()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var input = new Promise<int>();
        SpindleTask<int> timed = AwaitValue(input).WithTimeout(TimeSpan.FromSeconds(1), wheel);
        var failure = new FormatException("input failed");
        input.SetException(failure);
        Assert.Equal(SpindleTaskStatus.Faulted, timed.Status);
        Assert.Same(failure, Assert.Throws<FormatException>(() => timed.GetAwaiter().GetResult()));
        Assert.Equal(0, wheel.PendingCount);
    }

    [Fact]
    public void WithTimeout_InputCanceledFirst_CompletesAsCanceled()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var cts = new CancellationTokenSource();
        SpindleTask timed = wheel.Delay(TimeSpan.FromSeconds(5), cts.Token).WithTimeout(TimeSpan.FromSeconds(1), wheel);
        Assert.Equal(2, wheel.PendingCount);
        cts.Cancel();
        Assert.Equal(SpindleTaskStatus.Canceled, timed.Status);
        OperationCanceledException oce = Assert.ThrowsAny<OperationCanceledException>(() => timed.GetAwaiter().GetResult());
        Assert.Equal(cts.Token, oce.CancellationToken);
        Assert.Equal(0, wheel.PendingCount);
    }

    [Fact]
    public void WithTimeout_ADelayShorterThanTheTimeout_Wins()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        SpindleTask timed = wheel.Delay(TimeSpan.FromMilliseconds(10)).WithTimeout(TimeSpan.FromMilliseconds(11), wheel);
        clock.Advance(TimeSpan.FromMilliseconds(10));
        Assert.Equal(SpindleTaskStatus.Succeeded, timed.Status);
        timed.GetAwaiter().GetResult();
        Assert.Equal(0, wheel.PendingCount);
    }

    [Fact]
    public void WithTimeout_ConsumesTheInput_WhetherItWinsOrLoses()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var first = new Promise<int>();
        SpindleTask<int> winner = AwaitValue(first);
        SpindleTask<int> timedWin = winner.WithTimeout(TimeSpan.FromSeconds(1), wheel);
        first.SetResult(1);
        Assert.Equal(1, timedWin.GetAwaiter().GetResult());
        Assert.Throws<InvalidOperationException>(() => winner.GetAwaiter().GetResult());

        var second = new Promise<int>();
        SpindleTask<int> loser = AwaitValue(second);
        SpindleTask<int> timedLose = loser.WithTimeout(TimeSpan.FromSeconds(1), wheel);
        clock.Advance(TimeSpan.FromSeconds(1));
        Assert.Throws<TimeoutException>(() => timedLose.GetAwaiter().GetResult());
        second.SetResult(2);
        Assert.Throws<InvalidOperationException>(() => loser.GetAwaiter().GetResult()); // read by the timeout when it finished
    }

    [Fact]
    public void WithTimeout_ResultAwaitedTwice_IsTheAwaitOnceError()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var input = new Promise<int>();
        SpindleTask<int> won = input.Task.WithTimeout(TimeSpan.FromSeconds(1), wheel);
        input.SetResult(7);
        Assert.Equal(7, won.GetAwaiter().GetResult());
        InvalidOperationException e = Assert.Throws<InvalidOperationException>(() => won.GetAwaiter().GetResult());
        Assert.Contains("Preserve()", e.Message, StringComparison.Ordinal);

        input.Reset();
        SpindleTask<int> lost = input.Task.WithTimeout(TimeSpan.FromSeconds(1), wheel);
        clock.Advance(TimeSpan.FromSeconds(1));
        Assert.Throws<TimeoutException>(() => lost.GetAwaiter().GetResult());
        Assert.Throws<InvalidOperationException>(() => lost.GetAwaiter().GetResult());
        input.SetResult(0);
    }

    [Fact]
    public async Task WithTimeout_AwaitedFromAnAsyncMethod_ResumesWithTheOutcome()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var input = new Promise<int>();
        Task<int> awaiting = TestUtil.AwaitAsync(input.Task.WithTimeout(TimeSpan.FromMilliseconds(50), wheel));
        input.SetResult(3);
        Assert.Equal(3, await TestUtil.WithTimeout(awaiting));

        input.Reset();
        Task<int> timingOut = TestUtil.AwaitAsync(input.Task.WithTimeout(TimeSpan.FromMilliseconds(50), wheel));
        clock.Advance(TimeSpan.FromMilliseconds(50));
        await Assert.ThrowsAsync<TimeoutException>(() => TestUtil.WithTimeout(timingOut));
        input.SetResult(0);
    }

    [Fact]
    public void WithTimeout_Infinite_ReturnsTheInputAsItIsWithNoTimer()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var input = new Promise<int>();
        SpindleTask<int> task = input.Task;
        SpindleTask<int> same = task.WithTimeout(Timeout.InfiniteTimeSpan, wheel);
        Assert.Same(task._source, same._source);
        Assert.Equal(task._token, same._token);
        Assert.Equal(0, wheel.PendingCount);
        SpindleTask untyped = new Promise().Task;
        Assert.Same(untyped._source, untyped.WithTimeout(Timeout.InfiniteTimeSpan, wheel)._source);
        input.SetResult(1);
        Assert.Equal(1, same.GetAwaiter().GetResult());
    }

    [Fact]
    public void WithTimeout_InputAlreadyCompleted_ReturnsItAtOnceWithNoTimer()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        Assert.Equal(5, SpindleTask.FromResult(5).WithTimeout(TimeSpan.FromSeconds(1), wheel).GetAwaiter().GetResult());
        SpindleTask.CompletedTask.WithTimeout(TimeSpan.FromSeconds(1), wheel).GetAwaiter().GetResult();
        var done = new Promise<int>();
        done.SetResult(9);
        SpindleTask<int> timed = done.Task.WithTimeout(TimeSpan.Zero, wheel);
        Assert.Same(done, timed._source);
        Assert.Equal(9, timed.GetAwaiter().GetResult());
        var failed = new Promise();
        failed.SetException(new FormatException());
        Assert.Throws<FormatException>(() => failed.Task.WithTimeout(TimeSpan.FromSeconds(1), wheel).GetAwaiter().GetResult());
        Assert.Equal(0, wheel.PendingCount);
    }

    [Fact]
    public void WithTimeout_ZeroOnAPendingInput_TimesOutAtOnceAndStillConsumesTheInput()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var input = new Promise<int>();
        SpindleTask<int> pending = AwaitValue(input);
        SpindleTask<int> timed = pending.WithTimeout(TimeSpan.Zero, wheel);
        Assert.Equal(SpindleTaskStatus.Faulted, timed.Status);
        Assert.Throws<TimeoutException>(() => timed.GetAwaiter().GetResult());
        Assert.Equal(0, wheel.PendingCount);
        input.SetResult(1);
        Assert.Throws<InvalidOperationException>(() => pending.GetAwaiter().GetResult()); // forgotten, so read when it finished
    }

    [Fact]
    public void WithTimeout_BadTimeouts_ThrowNamingTheParameterAndTheFix()
    {
        using var wheel = new TimerWheel(new ManualClock());
        var input = new Promise<int>();
        foreach (TimeSpan bad in new[] { TimeSpan.FromTicks(-1), TimeSpan.FromMilliseconds(-2), TimeSpan.MinValue, TimerWheel.MaxDelay + TimeSpan.FromTicks(1), TimeSpan.MaxValue })
        {
            ArgumentOutOfRangeException e = Assert.Throws<ArgumentOutOfRangeException>(() => input.Task.WithTimeout(bad, wheel));
            Assert.Equal("timeout", e.ParamName);
            Assert.Contains("Timeout.InfiniteTimeSpan", e.Message, StringComparison.Ordinal);
            Assert.Throws<ArgumentOutOfRangeException>(() => new Promise().Task.WithTimeout(bad, wheel));
        }
        Assert.Equal(0, wheel.PendingCount);
        // The input was not consumed by the rejected calls.
        input.SetResult(3);
        Assert.Equal(3, input.Task.WithTimeout(TimerWheel.MaxDelay, wheel).GetAwaiter().GetResult());
    }

    [Fact]
    public void WithTimeout_OnADisposedWheel_ThrowsObjectDisposed()
    {
        var wheel = new TimerWheel(new ManualClock());
        wheel.Dispose();
        var input = new Promise();
        ObjectDisposedException e = Assert.Throws<ObjectDisposedException>(() => input.Task.WithTimeout(TimeSpan.FromSeconds(1), wheel));
        Assert.Contains("TimerWheel", e.Message, StringComparison.Ordinal);
        Assert.Throws<ObjectDisposedException>(() => new Promise<int>().Task.WithTimeout(TimeSpan.FromSeconds(1), wheel));
    }

    [Fact]
    public void WithTimeout_AnAlreadyAwaitedInput_IsTheAwaitOnceError()
    {
        using var wheel = new TimerWheel(new ManualClock());
        var input = new Promise<int>();
        SpindleTask<int> task = AwaitValue(input);
        input.SetResult(1);
        task.GetAwaiter().GetResult();
        Assert.Throws<InvalidOperationException>(() => task.WithTimeout(TimeSpan.FromSeconds(1), wheel));
        Assert.Equal(0, wheel.PendingCount);
    }

    [Fact]
    public void WithTimeout_AnInputAwaitedElsewhere_ThrowsAndLeavesNoTimerBehind()
    {
        using var wheel = new TimerWheel(new ManualClock());
        var input = new Promise();
        SpindleTask task = input.Task;
        task.GetAwaiter().UnsafeOnCompleted(() => { });
        Assert.Throws<InvalidOperationException>(() => task.WithTimeout(TimeSpan.FromSeconds(1), wheel));
        Assert.Equal(0, wheel.PendingCount);
        input.SetResult();
    }

    [Fact]
    public void WithTimeout_WheelDisposedWhilePending_CompletesAsCanceled()
    {
        var wheel = new TimerWheel(new ManualClock());
        var input = new Promise<int>();
        SpindleTask<int> timed = input.Task.WithTimeout(TimeSpan.FromSeconds(1), wheel);
        wheel.Dispose();
        Assert.Equal(SpindleTaskStatus.Canceled, timed.Status);
        Assert.ThrowsAny<OperationCanceledException>(() => timed.GetAwaiter().GetResult());
        input.SetResult(1);
        Assert.Equal(0, wheel.PendingCount);
    }

    [Fact]
    public void WithTimeout_OnTheDefaultWheel_TheInputWinsAndNothingStaysPending()
    {
        var input = new Promise<int>();
        SpindleTask<int> timed = input.Task.WithTimeout(TimeSpan.FromMinutes(5));
        Assert.False(timed.IsCompleted);
        input.SetResult(11);
        Assert.Equal(11, timed.GetAwaiter().GetResult());
    }

    [Fact]
    public void WithTimeout_ContinuationRunsOnTheAdvancingThread()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var input = new Promise();
        SpindleTask timed = input.Task.WithTimeout(TimeSpan.FromMilliseconds(3), wheel);
        int ranOn = -1;
        timed.GetAwaiter().UnsafeOnCompleted(() => ranOn = Environment.CurrentManagedThreadId);
        clock.Advance(TimeSpan.FromMilliseconds(3));
        Assert.Equal(Environment.CurrentManagedThreadId, ranOn);
        Assert.Throws<TimeoutException>(() => timed.GetAwaiter().GetResult());
        input.SetResult();
    }
}

/// <summary>
/// What reaches <see cref="Spindle.UnobservedException"/> (process-wide) and the long races: sequential.
/// </summary>
[Collection(SequentialCollection.Name)]
public class WithTimeoutSequentialTests
{
    private static async SpindleTask AwaitVoid(Promise promise) => await promise.Task;

    [Fact]
    public void WithTimeout_LateInputFault_IsReportedExactlyOnce()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var input = new Promise<int>();
        var late = new FormatException("late");
        ConcurrentQueue<Exception> reported = Observe(Own.InstancesOrOnTestThreads(late), () =>
        {
            SpindleTask<int> timed = input.Task.WithTimeout(TimeSpan.FromMilliseconds(10), wheel);
            clock.Advance(TimeSpan.FromMilliseconds(10));
            Assert.Throws<TimeoutException>(() => timed.GetAwaiter().GetResult());
            input.SetException(late);
        });
        Assert.Equal(new Exception[] { late }, reported.ToArray());
    }

    [Fact]
    public async Task WithTimeout_OnASignalWait_TheTimedOutWaitEnds_SoTheSignalCanBeWaitedOnAgainInALoop()
    {
        // The everyday pattern: wait for a signal with a timeout, again and again. A wait that timed out used to stay
        // pending (the next WaitAsync threw "a wait is already pending"); it is let go of, as a WhenAny's loser is.
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var signal = new Signal();
        ConcurrentQueue<Exception> reported = await ObserveAsync(Own.ReportedOnTestThreads(), async _ =>
        {
            for (int round = 0; round < 20; round++)
            {
                SpindleTask timed = signal.WaitAsync().WithTimeout(TimeSpan.FromMilliseconds(5), wheel);
                clock.Advance(TimeSpan.FromMilliseconds(5));
                await Assert.ThrowsAsync<TimeoutException>(() => TestUtil.AwaitAsync(timed));
                Assert.False(signal.HasWaiter);
            }
            signal.Set(); // kept for the next wait: nobody waits now
            SpindleTask next = signal.WaitAsync().WithTimeout(TimeSpan.FromMilliseconds(5), wheel);
            await TestUtil.AwaitAsync(next);
            Assert.Equal(0, wheel.PendingCount);
        });
        Assert.Empty(reported);
    }

    [Fact]
    public void WithTimeout_OnAPromise_ThePromiseCanBeResetAsSoonAsItTimedOut()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var input = new Promise<int>();
        ConcurrentQueue<Exception> reported = Observe(Own.ReportedOnTestThreads(), () =>
        {
            SpindleTask<int> timed = input.Task.WithTimeout(TimeSpan.FromMilliseconds(3), wheel);
            clock.Advance(TimeSpan.FromMilliseconds(3));
            Assert.Throws<TimeoutException>(() => timed.GetAwaiter().GetResult());
            input.Reset(); // let go of: before, "an await on it is still pending" until its producer completed it
            SpindleTask<int> again = input.Task.WithTimeout(TimeSpan.FromMilliseconds(3), wheel);
            input.SetResult(7);
            Assert.Equal(7, again.GetAwaiter().GetResult());
        });
        Assert.Empty(reported);
    }

    [Fact]
    public void WithTimeout_LateInputCancellationOrSuccess_IsNotReported()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        // The late cancellation is claimed by type: it carries no token of this test's (see Own.Cancellations).
        ConcurrentQueue<Exception> reported = Observe(Own.Any(Own.ReportedOnTestThreads(), Own.Cancellations()), () =>
        {
            var canceled = new Promise();
            SpindleTask a = AwaitVoid(canceled).WithTimeout(TimeSpan.FromMilliseconds(1), wheel);
            var succeeded = new Promise<int>();
            SpindleTask<int> b = succeeded.Task.WithTimeout(TimeSpan.FromMilliseconds(1), wheel);
            clock.Advance(TimeSpan.FromMilliseconds(1));
            Assert.Throws<TimeoutException>(() => a.GetAwaiter().GetResult());
            Assert.Throws<TimeoutException>(() => b.GetAwaiter().GetResult());
            canceled.SetCanceled();
            succeeded.SetResult(1);
        });
        Assert.Empty(reported);
    }

    [Fact]
    public void WithTimeout_InputFaultBeforeTheTimeout_IsRethrownAndNotReported()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var fault = new FormatException();
        ConcurrentQueue<Exception> reported = Observe(Own.InstancesOrOnTestThreads(fault), () =>
        {
            var input = new Promise();
            SpindleTask timed = AwaitVoid(input).WithTimeout(TimeSpan.FromMilliseconds(5), wheel);
            input.SetException(fault);
            Assert.Throws<FormatException>(() => timed.GetAwaiter().GetResult());
            clock.Advance(TimeSpan.FromMilliseconds(10));
        });
        Assert.Empty(reported);
    }

    /// <summary>
    /// The clock reaching the deadline races the input finishing (half the rounds with a fault): exactly one outcome,
    /// one continuation, every input fault either rethrown or reported (never both, never neither), no timer left.
    /// </summary>
    [Fact]
    public async Task WithTimeout_TimeoutVersusCompletion_HasExactlyOneOutcome()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        int rounds = TestUtil.Stress(3_000);
        var input = new Promise<int>();
        input.SetResult(0);
        SpindleTask<int> timed = default;
        int continuations = 0;
        int succeeded = 0;
        int timedOut = 0;
        int faultsRethrown = 0;
        int faultRounds = 0;
        var made = new ConcurrentQueue<Exception>(); // each round's fault, added before it is set
        var watch = UnobservedReports.Start(Own.Any(Own.InstancesIn(made), Own.ReportedOnTestThreads()));
        ConcurrentQueue<Exception> reported = watch.Reports;
        int ran;
        using (watch)
        {
            ran = await Race.Run(
                rounds,
                before: _ =>
                {
                    input.Reset();
                    timed = input.Task.WithTimeout(TimeSpan.FromMilliseconds(1), wheel);
                    continuations = 0;
                    timed.GetAwaiter().UnsafeOnCompleted(() => Interlocked.Increment(ref continuations));
                },
                after: round =>
                {
                    TestUtil.SpinUntil(() => Volatile.Read(ref continuations) > 0);
                    Assert.Equal(1, continuations);
                    try
                    {
                        Assert.Equal(round, timed.GetAwaiter().GetResult());
                        succeeded++;
                    }
                    catch (TimeoutException)
                    {
                        timedOut++;
                    }
                    catch (FormatException)
                    {
                        faultsRethrown++;
                    }
                    Assert.Equal(0, wheel.PendingCount);
                },
                round =>
                {
                    RaceJitter.Delay(round, 0);
                    clock.Advance(TimeSpan.FromMilliseconds(1));
                },
                round =>
                {
                    RaceJitter.Delay(round, 1);
                    if (round / 2 % 2 == 0)
                    {
                        input.SetResult(round);
                    }
                    else
                    {
                        Interlocked.Increment(ref faultRounds);
                        var fault = new FormatException("round " + round);
                        made.Enqueue(fault);
                        input.SetException(fault);
                    }
                });
        }
        Assert.Equal(ran, succeeded + timedOut + faultsRethrown);
        Assert.Equal(faultRounds, faultsRethrown + reported.Count);
        Assert.All(reported, e => Assert.IsType<FormatException>(e));
        // Every other pair of rounds: each racer is delayed in both kinds.
        Assert.Equal(Enumerable.Range(0, ran).Count(r => r / 2 % 2 == 1), faultRounds);
    }
}

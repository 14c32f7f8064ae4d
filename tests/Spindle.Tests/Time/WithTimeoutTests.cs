using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using static SpindleLib.Tests.Combinators.CombinatorTestSupport;
using static SpindleLib.Tests.UnobservedReports;

namespace SpindleLib.Tests.Time;

/// <summary>
/// WithTimeout, and the rules TryWithTimeout shares with it (each theory runs both forms: <see cref="TimeoutForm"/>), on a
/// manual clock: the timeout fires exactly at its deadline, the input wins before it, one outcome.
/// </summary>
public class WithTimeoutTests
{
    private static readonly TimeSpan OneTick = TimeSpan.FromTicks(1);

    private static readonly TimeSpan OneSecond = TimeSpan.FromSeconds(1);

    [Theory]
    [InlineData(TimeoutForm.Throwing, 1)]
    [InlineData(TimeoutForm.Throwing, 17)]
    [InlineData(TimeoutForm.Throwing, 64)]
    [InlineData(TimeoutForm.Throwing, 1000)]
    [InlineData(TimeoutForm.Quiet, 1)]
    [InlineData(TimeoutForm.Quiet, 17)]
    [InlineData(TimeoutForm.Quiet, 64)]
    [InlineData(TimeoutForm.Quiet, 1000)]
    public void WithTimeout_InputPending_TimesOutExactlyAtTheDeadlineAndNotBefore(TimeoutForm form, int ms)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var input = new Promise<int>();
        TimedWait timed = TimedWait.Start(form, input.Task, TimeSpan.FromMilliseconds(ms), wheel);
        Assert.Equal(1, wheel.PendingCount);
        clock.Advance(TimeSpan.FromMilliseconds(ms) - OneTick);
        Assert.False(timed.IsCompleted, "timed out early");
        clock.Advance(OneTick);
        Assert.Equal(timed.TimedOutStatus, timed.Status);
        Assert.Null(timed.Read()); // the throwing form's TimeoutException names the timeout (TimedWait.Read)
        Assert.Equal(0, wheel.PendingCount);
    }

    [Theory]
    [InlineData(TimeoutForm.Throwing)]
    [InlineData(TimeoutForm.Quiet)]
    public void WithTimeout_UntypedInputPending_TimesOutAtTheDeadline(TimeoutForm form)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var input = new Promise();
        TimedWait timed = TimedWait.Start(form, input.Task, TimeSpan.FromMilliseconds(5), wheel);
        clock.Advance(TimeSpan.FromMilliseconds(5) - OneTick);
        Assert.False(timed.IsCompleted);
        clock.Advance(OneTick);
        Assert.Null(timed.Read());
        input.SetResult(); // the late success is read and dropped
        Assert.Equal(0, wheel.PendingCount);
    }

    [Theory]
    [InlineData(TimeoutForm.Throwing)]
    [InlineData(TimeoutForm.Quiet)]
    public void WithTimeout_ADeadlineBetweenTicks_IsRoundedUpSoItNeverFiresEarly(TimeoutForm form)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        clock.Advance(TimeSpan.FromMilliseconds(0.4));
        var input = new Promise();
        TimedWait timed = TimedWait.Start(form, input.Task, TimeSpan.FromMilliseconds(2.3), wheel); // due at 2.7 ms: fires at 3 ms
        clock.Advance(TimeSpan.FromMilliseconds(2.3) - OneTick);
        Assert.False(timed.IsCompleted, "timed out before the timeout had passed");
        clock.Advance(TimeSpan.FromMilliseconds(3) - clock.Elapsed - OneTick);
        Assert.False(timed.IsCompleted);
        clock.Advance(OneTick);
        Assert.Null(timed.Read());
    }

    [Theory]
    [InlineData(TimeoutForm.Throwing)]
    [InlineData(TimeoutForm.Quiet)]
    public void WithTimeout_InputFinishesFirst_CompletesWithItsResultAndCancelsTheTimerAtOnce(TimeoutForm form)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var input = new Promise<int>();
        TimedWait timed = TimedWait.Start(form, input.Task, TimeSpan.FromSeconds(10), wheel);
        clock.Advance(TimeSpan.FromSeconds(9));
        Assert.False(timed.IsCompleted);
        Assert.Equal(1, wheel.PendingCount);
        input.SetResult(42);
        Assert.Equal(0, wheel.PendingCount); // cancelled at once, not left to expire
        Assert.Equal(42, timed.Read());
        clock.Advance(TimeSpan.FromSeconds(5));
        Assert.Equal(0, wheel.PendingCount);
    }

    [Theory]
    [InlineData(TimeoutForm.Throwing)]
    [InlineData(TimeoutForm.Quiet)]
    public void WithTimeout_InputFailsFirst_RethrowsItsException(TimeoutForm form)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var input = new Promise<int>();
        TimedWait timed = TimedWait.Start(form, Await(input), OneSecond, wheel);
        var failure = new FormatException("input failed");
        input.SetException(failure);
        Assert.Equal(SpindleTaskStatus.Faulted, timed.Status);
        Assert.Same(failure, Assert.Throws<FormatException>(() => timed.Read()));
        Assert.Equal(0, wheel.PendingCount);
    }

    [Theory]
    [InlineData(TimeoutForm.Throwing)]
    [InlineData(TimeoutForm.Quiet)]
    public void WithTimeout_InputCanceledFirst_CompletesAsCanceled(TimeoutForm form)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var cts = new CancellationTokenSource();
        TimedWait timed = TimedWait.Start(form, wheel.Delay(TimeSpan.FromSeconds(5), cts.Token), OneSecond, wheel);
        Assert.Equal(2, wheel.PendingCount);
        cts.Cancel();
        Assert.Equal(SpindleTaskStatus.Canceled, timed.Status);
        OperationCanceledException oce = Assert.ThrowsAny<OperationCanceledException>(() => timed.Read());
        Assert.Equal(cts.Token, oce.CancellationToken);
        Assert.Equal(0, wheel.PendingCount);
    }

    [Theory]
    [InlineData(TimeoutForm.Throwing)]
    [InlineData(TimeoutForm.Quiet)]
    public void WithTimeout_ADelayShorterThanTheTimeout_Wins(TimeoutForm form)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        TimedWait timed = TimedWait.Start(form, wheel.Delay(TimeSpan.FromMilliseconds(10)), TimeSpan.FromMilliseconds(11), wheel);
        clock.Advance(TimeSpan.FromMilliseconds(10));
        Assert.Equal(SpindleTaskStatus.Succeeded, timed.Status);
        Assert.Equal(0, timed.Read());
        Assert.Equal(0, wheel.PendingCount);
    }

    [Theory]
    [InlineData(TimeoutForm.Throwing)]
    [InlineData(TimeoutForm.Quiet)]
    public void WithTimeout_ConsumesTheInput_WhetherItWinsOrLoses(TimeoutForm form)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var first = new Promise<int>();
        SpindleTask<int> winner = Await(first);
        TimedWait timedWin = TimedWait.Start(form, winner, OneSecond, wheel);
        first.SetResult(1);
        Assert.Equal(1, timedWin.Read());
        Assert.Throws<InvalidOperationException>(() => winner.GetAwaiter().GetResult());

        var second = new Promise<int>();
        SpindleTask<int> loser = Await(second);
        TimedWait timedLose = TimedWait.Start(form, loser, OneSecond, wheel);
        clock.Advance(OneSecond);
        Assert.Null(timedLose.Read());
        second.SetResult(2);
        Assert.Throws<InvalidOperationException>(() => loser.GetAwaiter().GetResult()); // read by the timeout when it finished
    }

    [Theory]
    [InlineData(TimeoutForm.Throwing)]
    [InlineData(TimeoutForm.Quiet)]
    public void WithTimeout_ResultAwaitedTwice_IsTheAwaitOnceError(TimeoutForm form)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var input = new Promise<int>();
        TimedWait won = TimedWait.Start(form, input.Task, OneSecond, wheel);
        input.SetResult(7);
        Assert.Equal(7, won.Read());
        InvalidOperationException e = Assert.Throws<InvalidOperationException>(() => won.Read());
        Assert.Contains("Preserve()", e.Message, StringComparison.Ordinal);

        input.Reset();
        TimedWait lost = TimedWait.Start(form, input.Task, OneSecond, wheel);
        clock.Advance(OneSecond);
        Assert.Null(lost.Read());
        Assert.Throws<InvalidOperationException>(() => lost.Read());
        input.SetResult(0);
    }

    [Theory]
    [InlineData(TimeoutForm.Throwing)]
    [InlineData(TimeoutForm.Quiet)]
    public async Task WithTimeout_AwaitedFromAnAsyncMethod_ResumesWithTheOutcome(TimeoutForm form)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var input = new Promise<int>();
        Task<int?> awaiting = TimedWait.Start(form, input.Task, TimeSpan.FromMilliseconds(50), wheel).ReadAsync();
        input.SetResult(3);
        Assert.Equal(3, await TestUtil.WithTimeout(awaiting));

        input.Reset();
        Task<int?> timingOut = TimedWait.Start(form, input.Task, TimeSpan.FromMilliseconds(50), wheel).ReadAsync();
        clock.Advance(TimeSpan.FromMilliseconds(50));
        Assert.Null(await TestUtil.WithTimeout(timingOut));
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

    [Theory]
    [InlineData(TimeoutForm.Throwing)]
    [InlineData(TimeoutForm.Quiet)]
    public void WithTimeout_ZeroOnAPendingInput_TimesOutAtOnceAndStillConsumesTheInput(TimeoutForm form)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var input = new Promise<int>();
        SpindleTask<int> pending = Await(input);
        TimedWait timed = TimedWait.Start(form, pending, TimeSpan.Zero, wheel);
        Assert.Equal(timed.TimedOutStatus, timed.Status);
        Assert.Null(timed.Read());
        Assert.Equal(0, wheel.PendingCount);
        input.SetResult(1);
        Assert.Throws<InvalidOperationException>(() => pending.GetAwaiter().GetResult()); // forgotten, so read when it finished
    }

    [Theory]
    [InlineData(TimeoutForm.Throwing)]
    [InlineData(TimeoutForm.Quiet)]
    public void WithTimeout_BadTimeouts_ThrowNamingTheParameterAndTheFix(TimeoutForm form)
    {
        using var wheel = new TimerWheel(new ManualClock());
        var input = new Promise<int>();
        foreach (TimeSpan bad in new[] { TimeSpan.FromTicks(-1), TimeSpan.FromMilliseconds(-2), TimeSpan.MinValue, TimerWheel.MaxDelay + TimeSpan.FromTicks(1), TimeSpan.MaxValue })
        {
            ArgumentOutOfRangeException e = Assert.Throws<ArgumentOutOfRangeException>(() => TimedWait.Start(form, input.Task, bad, wheel));
            Assert.Equal("timeout", e.ParamName);
            Assert.Contains("Timeout.InfiniteTimeSpan", e.Message, StringComparison.Ordinal);
            Assert.Throws<ArgumentOutOfRangeException>(() => TimedWait.Start(form, new Promise().Task, bad, wheel));
        }
        Assert.Equal(0, wheel.PendingCount);
        // The input was not consumed by the rejected calls.
        input.SetResult(3);
        Assert.Equal(3, TimedWait.Start(form, input.Task, TimerWheel.MaxDelay, wheel).Read());
    }

    [Theory]
    [InlineData(TimeoutForm.Throwing)]
    [InlineData(TimeoutForm.Quiet)]
    public void WithTimeout_OnADisposedWheel_ThrowsObjectDisposed(TimeoutForm form)
    {
        var wheel = new TimerWheel(new ManualClock());
        wheel.Dispose();
        var input = new Promise();
        ObjectDisposedException e = Assert.Throws<ObjectDisposedException>(() => TimedWait.Start(form, input.Task, OneSecond, wheel));
        Assert.Contains("TimerWheel", e.Message, StringComparison.Ordinal);
        Assert.Throws<ObjectDisposedException>(() => TimedWait.Start(form, new Promise<int>().Task, OneSecond, wheel));
    }

    [Theory]
    [InlineData(TimeoutForm.Throwing)]
    [InlineData(TimeoutForm.Quiet)]
    public void WithTimeout_AnAlreadyAwaitedInput_IsTheAwaitOnceError(TimeoutForm form)
    {
        using var wheel = new TimerWheel(new ManualClock());
        var input = new Promise<int>();
        SpindleTask<int> task = Await(input);
        input.SetResult(1);
        task.GetAwaiter().GetResult();
        Assert.Throws<InvalidOperationException>(() => TimedWait.Start(form, task, OneSecond, wheel));
        Assert.Equal(0, wheel.PendingCount);
    }

    [Theory]
    [InlineData(TimeoutForm.Throwing)]
    [InlineData(TimeoutForm.Quiet)]
    public void WithTimeout_AnInputAwaitedElsewhere_ThrowsAndLeavesNoTimerBehind(TimeoutForm form)
    {
        using var wheel = new TimerWheel(new ManualClock());
        var input = new Promise();
        SpindleTask task = input.Task;
        task.GetAwaiter().UnsafeOnCompleted(() => { });
        Assert.Throws<InvalidOperationException>(() => TimedWait.Start(form, task, OneSecond, wheel));
        Assert.Equal(0, wheel.PendingCount);
        input.SetResult();
    }

    [Theory]
    [InlineData(TimeoutForm.Throwing)]
    [InlineData(TimeoutForm.Quiet)]
    public void WithTimeout_WheelDisposedWhilePending_CompletesAsCanceled(TimeoutForm form)
    {
        var wheel = new TimerWheel(new ManualClock());
        var input = new Promise<int>();
        TimedWait timed = TimedWait.Start(form, input.Task, OneSecond, wheel);
        wheel.Dispose();
        Assert.Equal(SpindleTaskStatus.Canceled, timed.Status);
        Assert.ThrowsAny<OperationCanceledException>(() => timed.Read());
        input.SetResult(1);
        Assert.Equal(0, wheel.PendingCount);
    }

    [Theory]
    [InlineData(TimeoutForm.Throwing)]
    [InlineData(TimeoutForm.Quiet)]
    public void WithTimeout_OnTheDefaultWheel_TheInputWinsAndNothingStaysPending(TimeoutForm form)
    {
        var input = new Promise<int>();
        TimedWait timed = TimedWait.Start(form, input.Task, TimeSpan.FromMinutes(5), null);
        Assert.False(timed.IsCompleted);
        input.SetResult(11);
        Assert.Equal(11, timed.Read());
    }

    [Theory]
    [InlineData(TimeoutForm.Throwing)]
    [InlineData(TimeoutForm.Quiet)]
    public void WithTimeout_ContinuationRunsOnTheAdvancingThread(TimeoutForm form)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var input = new Promise();
        TimedWait timed = TimedWait.Start(form, input.Task, TimeSpan.FromMilliseconds(3), wheel);
        int ranOn = -1;
        timed.OnCompleted(() => ranOn = Environment.CurrentManagedThreadId);
        clock.Advance(TimeSpan.FromMilliseconds(3));
        Assert.Equal(Environment.CurrentManagedThreadId, ranOn);
        Assert.Null(timed.Read());
        input.SetResult();
    }
}

/// <summary>
/// What reaches <see cref="Spindle.UnobservedException"/> (process-wide) and the long races: sequential.
/// </summary>
[Collection(SequentialCollection.Name)]
public class WithTimeoutSequentialTests
{
    [Theory]
    [InlineData(TimeoutForm.Throwing)]
    [InlineData(TimeoutForm.Quiet)]
    public void WithTimeout_LateInputFault_IsReportedExactlyOnce(TimeoutForm form)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var input = new Promise<int>();
        var late = new FormatException("late");
        ConcurrentQueue<Exception> reported = Observe(Own.InstancesOrOnTestThreads(late), () =>
        {
            TimedWait timed = TimedWait.Start(form, input.Task, TimeSpan.FromMilliseconds(10), wheel);
            clock.Advance(TimeSpan.FromMilliseconds(10));
            Assert.Null(timed.Read());
            input.SetException(late);
        });
        Assert.Equal(new Exception[] { late }, reported.ToArray());
    }

    [Theory]
    [InlineData(TimeoutForm.Throwing)]
    [InlineData(TimeoutForm.Quiet)]
    public async Task WithTimeout_OnASignalWait_TheTimedOutWaitEnds_SoTheSignalCanBeWaitedOnAgainInALoop(TimeoutForm form)
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
                TimedWait timed = TimedWait.Start(form, signal.WaitAsync(), TimeSpan.FromMilliseconds(5), wheel);
                clock.Advance(TimeSpan.FromMilliseconds(5));
                Assert.Null(await timed.ReadAsync());
                Assert.False(signal.HasWaiter);
            }
            signal.Set(); // kept for the next wait: nobody waits now
            TimedWait next = TimedWait.Start(form, signal.WaitAsync(), TimeSpan.FromMilliseconds(5), wheel);
            Assert.Equal(0, await next.ReadAsync());
            Assert.Equal(0, wheel.PendingCount);
        });
        Assert.Empty(reported);
    }

    [Theory]
    [InlineData(TimeoutForm.Throwing)]
    [InlineData(TimeoutForm.Quiet)]
    public void WithTimeout_OnAPromise_ThePromiseCanBeResetAsSoonAsItTimedOut(TimeoutForm form)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var input = new Promise<int>();
        ConcurrentQueue<Exception> reported = Observe(Own.ReportedOnTestThreads(), () =>
        {
            TimedWait timed = TimedWait.Start(form, input.Task, TimeSpan.FromMilliseconds(3), wheel);
            clock.Advance(TimeSpan.FromMilliseconds(3));
            Assert.Null(timed.Read());
            input.Reset(); // let go of: before, "an await on it is still pending" until its producer completed it
            TimedWait again = TimedWait.Start(form, input.Task, TimeSpan.FromMilliseconds(3), wheel);
            input.SetResult(7);
            Assert.Equal(7, again.Read());
        });
        Assert.Empty(reported);
    }

    [Theory]
    [InlineData(TimeoutForm.Throwing)]
    [InlineData(TimeoutForm.Quiet)]
    public void WithTimeout_LateInputCancellationOrSuccess_IsNotReported(TimeoutForm form)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        // The late cancellation is claimed by type: it carries no token of this test's (see Own.Cancellations).
        ConcurrentQueue<Exception> reported = Observe(Own.Any(Own.ReportedOnTestThreads(), Own.Cancellations()), () =>
        {
            var canceled = new Promise();
            TimedWait a = TimedWait.Start(form, Await(canceled), TimeSpan.FromMilliseconds(1), wheel);
            var succeeded = new Promise<int>();
            TimedWait b = TimedWait.Start(form, succeeded.Task, TimeSpan.FromMilliseconds(1), wheel);
            clock.Advance(TimeSpan.FromMilliseconds(1));
            Assert.Null(a.Read());
            Assert.Null(b.Read());
            canceled.SetCanceled();
            succeeded.SetResult(1);
        });
        Assert.Empty(reported);
    }

    [Theory]
    [InlineData(TimeoutForm.Throwing)]
    [InlineData(TimeoutForm.Quiet)]
    public void WithTimeout_InputFaultBeforeTheTimeout_IsRethrownAndNotReported(TimeoutForm form)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var fault = new FormatException();
        ConcurrentQueue<Exception> reported = Observe(Own.InstancesOrOnTestThreads(fault), () =>
        {
            var input = new Promise();
            TimedWait timed = TimedWait.Start(form, Await(input), TimeSpan.FromMilliseconds(5), wheel);
            input.SetException(fault);
            Assert.Throws<FormatException>(() => timed.Read());
            clock.Advance(TimeSpan.FromMilliseconds(10));
        });
        Assert.Empty(reported);
    }

    /// <summary>
    /// The clock reaching the deadline races the input finishing (half the rounds with a fault), and, with
    /// <paramref name="tokenRaces"/>, the token's cancellation from a third thread: exactly one outcome, one continuation,
    /// every input fault either rethrown or reported (never both, never neither), no timer left.
    /// </summary>
    [Theory]
    [InlineData(TimeoutForm.Throwing, false)]
    [InlineData(TimeoutForm.Quiet, false)]
    [InlineData(TimeoutForm.Throwing, true)]
    [InlineData(TimeoutForm.Quiet, true)]
    public async Task WithTimeout_TimeoutVersusCompletion_HasExactlyOneOutcome(TimeoutForm form, bool tokenRaces)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        int rounds = TestUtil.Stress(3_000);
        var input = new Promise<int>();
        input.SetResult(0);
        var cts = new CancellationTokenSource();
        TimedWait timed = default;
        int continuations = 0;
        int succeeded = 0;
        int timedOut = 0;
        int canceled = 0;
        int faultsRethrown = 0;
        var made = new ConcurrentQueue<Exception>(); // each round's fault, added before it is set
        var watch = UnobservedReports.Start(Own.Any(Own.InstancesIn(made), Own.ReportedOnTestThreads()));
        ConcurrentQueue<Exception> reported = watch.Reports;
        var racers = new List<Action<int>>
        {
            RaceJitter.AdvancesTheClock(clock, TimeSpan.FromMilliseconds(1)),
            RaceJitter.FinishesTheInput(round => input.SetResult(round), fault => input.SetException(fault), made),
        };
        if (tokenRaces)
        {
            racers.Add(_ => cts.Cancel());
        }
        int ran;
        using (watch)
        {
            ran = await Race.Run(
                rounds,
                before: _ =>
                {
                    input.Reset();
                    if (tokenRaces)
                    {
                        cts.Dispose();
                        cts = new CancellationTokenSource();
                    }
                    timed = TimedWait.Start(form, input.Task, TimeSpan.FromMilliseconds(1), wheel, tokenRaces ? cts.Token : default);
                    continuations = 0;
                    timed.OnCompleted(() => Interlocked.Increment(ref continuations));
                },
                after: round =>
                {
                    TestUtil.SpinUntil(() => Volatile.Read(ref continuations) > 0);
                    Assert.Equal(1, continuations);
                    try
                    {
                        if (timed.Read() is { } result)
                        {
                            Assert.Equal(round, result);
                            succeeded++;
                        }
                        else
                        {
                            timedOut++;
                        }
                    }
                    catch (FormatException)
                    {
                        faultsRethrown++;
                    }
                    catch (OperationCanceledException e) when (tokenRaces)
                    {
                        Assert.Equal(cts.Token, e.CancellationToken);
                        canceled++;
                    }
                    Assert.Equal(0, wheel.PendingCount);
                },
                racers.ToArray());
        }
        cts.Dispose();
        Assert.Equal(ran, succeeded + timedOut + canceled + faultsRethrown);
        Assert.Equal(made.Count, faultsRethrown + reported.Count);
        Assert.All(reported, e => Assert.IsType<FormatException>(e));
        // Every other pair of rounds: each racer is delayed in both kinds.
        Assert.Equal(Enumerable.Range(0, ran).Count(r => r / 2 % 2 == 1), made.Count);
    }
}

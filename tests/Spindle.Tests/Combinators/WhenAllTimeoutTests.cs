using System;
using System.Collections.Concurrent;
using System.Threading;
using System.Threading.Tasks;
using SpindleLib.Tests.Time;
using static SpindleLib.Tests.Combinators.CombinatorTestSupport;
using static SpindleLib.Tests.UnobservedReports;

namespace SpindleLib.Tests.Combinators;

/// <summary>
/// WhenAllOptions.Timeout on a manual clock: the combined task fails with TimeoutException exactly at the deadline,
/// the inputs are still observed as after a cancellation, and inputs that finish first cancel the timer at once.
/// Sequential: several tests watch Spindle.UnobservedException, which is process-wide.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class WhenAllTimeoutTests
{
    private static readonly TimeSpan OneTick = TimeSpan.FromTicks(1);

    private static WhenAllOptions TimeoutOn(TimerWheel wheel, double ms) => new() { Timeout = TimeSpan.FromMilliseconds(ms), Timers = wheel };

    [Fact]
    public void WhenAllOptions_Default_HasNoTimeout()
    {
        Assert.Null(default(WhenAllOptions).Timeout);
        Assert.Null(default(WhenAllOptions).Timers);
        Assert.Null(new WhenAllOptions { Timeout = Timeout.InfiniteTimeSpan }.FiniteTimeout);
        Assert.Equal(TimeSpan.Zero, new WhenAllOptions { Timeout = TimeSpan.Zero }.FiniteTimeout);
    }

    [Fact]
    public void WhenAllOptions_BadTimeout_ThrowsWhereItIsSet()
    {
        ArgumentOutOfRangeException e = Assert.Throws<ArgumentOutOfRangeException>(() => new WhenAllOptions { Timeout = TimeSpan.FromMilliseconds(-5) });
        Assert.Equal("Timeout", e.ParamName);
        Assert.Contains("Timeout.InfiniteTimeSpan", e.Message, StringComparison.Ordinal);
        Assert.Throws<ArgumentOutOfRangeException>(() => new WhenAllOptions { Timeout = TimerWheel.MaxDelay + TimeSpan.FromTicks(1) });
        WhenAllOptions fine = new() { Timeout = TimeSpan.FromSeconds(1) };
        Assert.Throws<ArgumentOutOfRangeException>(() => fine with { Timeout = TimeSpan.MinValue });
    }

    [Fact]
    public void WhenAll_TimeoutOnADisposedWheel_ThrowsBeforeConsumingAnything()
    {
        var wheel = new TimerWheel(new ManualClock());
        wheel.Dispose();
        var a = new Promise();
        Assert.Throws<ObjectDisposedException>(() => SpindleTask.WhenAll([a.Task], TimeoutOn(wheel, 10)));
        // No timer is needed when every input has finished, so a disposed wheel does not matter then.
        SpindleTask.WhenAll([SpindleTask.CompletedTask], TimeoutOn(wheel, 10)).GetAwaiter().GetResult();
        a.SetResult();
        a.Task.GetAwaiter().GetResult();
    }

    [Theory]
    [InlineData(1)]
    [InlineData(10)]
    [InlineData(4096)]
    public void WhenAll_InputsPending_FailsWithTimeoutExactlyAtTheDeadline(int ms)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        Promise[] promises = Promises(3);
        SpindleTask all = SpindleTask.WhenAll(TasksOf(promises), TimeoutOn(wheel, ms));
        promises[0].SetResult();
        clock.Advance(TimeSpan.FromMilliseconds(ms) - OneTick);
        Assert.False(all.IsCompleted, "timed out early");
        clock.Advance(OneTick);
        Assert.Equal(SpindleTaskStatus.Faulted, all.Status);
        Assert.Throws<TimeoutException>(() => all.GetAwaiter().GetResult());
        Assert.Equal(0, wheel.PendingCount);
        promises[1].SetResult();
        promises[2].SetResult();
    }

    [Fact]
    public void WhenAll_TimedOut_EveryLateInputFailureIsReportedOnce()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        Promise[] promises = Promises(3);
        var first = new FormatException("first");
        var second = new InvalidCastException("second");
        ConcurrentQueue<Exception> reported = Observe(Own.Any(Own.InstancesOrOnTestThreads(first, second), Own.Cancellations()), () =>
        {
            SpindleTask all = SpindleTask.WhenAll([Await(promises[0]), Await(promises[1]), Await(promises[2])], TimeoutOn(wheel, 5));
            clock.Advance(TimeSpan.FromMilliseconds(5));
            Assert.Throws<TimeoutException>(() => all.GetAwaiter().GetResult());
            promises[2].SetException(second);
            promises[0].SetException(first);
            promises[1].SetCanceled(); // a cancellation is not a failure
        });
        Assert.Equal(2, reported.Count);
        Assert.Contains(first, reported);
        Assert.Contains(second, reported);
    }

    [Fact]
    public void WhenAll_InputsFinishFirst_SucceedsAndCancelsTheTimerAtOnce()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        Promise[] promises = Promises(2);
        SpindleTask all = SpindleTask.WhenAll(TasksOf(promises), TimeoutOn(wheel, 1000));
        Assert.Equal(1, wheel.PendingCount);
        promises[1].SetResult();
        clock.Advance(TimeSpan.FromMilliseconds(999));
        Assert.False(all.IsCompleted);
        promises[0].SetResult();
        Assert.Equal(0, wheel.PendingCount);
        Assert.Equal(SpindleTaskStatus.Succeeded, all.Status);
        all.GetAwaiter().GetResult();
        clock.Advance(TimeSpan.FromSeconds(5));
    }

    [Fact]
    public void WhenAll_InputsFailFirst_RethrowTheirFailureNotATimeout()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        Promise[] promises = Promises(2);
        var a = new FormatException("a");
        var b = new InvalidCastException("b");
        SpindleTask all = SpindleTask.WhenAll(TasksOf(promises), TimeoutOn(wheel, 100) with { AggregateExceptions = true });
        promises[1].SetException(b);
        promises[0].SetException(a);
        AggregateException e = Assert.Throws<AggregateException>(() => all.GetAwaiter().GetResult());
        Assert.Equal(new Exception[] { a, b }, e.InnerExceptions);
        Assert.Equal(0, wheel.PendingCount);
    }

    [Fact]
    public void WhenAll_TypedWithTimeout_ArrayDestinationAndTupleForms()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var p1 = new Promise<int>();
        var p2 = new Promise<int>();
        SpindleTask<int[]> values = SpindleTask.WhenAll([p1.Task, p2.Task], TimeoutOn(wheel, 10));
        p1.SetResult(1);
        p2.SetResult(2);
        Assert.Equal(new[] { 1, 2 }, values.GetAwaiter().GetResult());

        p1.Reset();
        p2.Reset();
        var buffer = new int[2];
        SpindleTask into = SpindleTask.WhenAll([p1.Task, p2.Task], buffer.AsMemory(), TimeoutOn(wheel, 10));
        clock.Advance(TimeSpan.FromMilliseconds(10));
        Assert.Throws<TimeoutException>(() => into.GetAwaiter().GetResult());
        p1.SetResult(3);
        p2.SetResult(4);
        Assert.Equal(new[] { 0, 0 }, buffer); // a timed-out wait never writes the buffer

        var s = new Promise<string>();
        p1.Reset();
        SpindleTask<(int, string)> tuple = SpindleTask.WhenAll(p1.Task, s.Task, TimeoutOn(wheel, 10));
        clock.Advance(TimeSpan.FromMilliseconds(9));
        p1.SetResult(5);
        s.SetResult("five");
        Assert.Equal((5, "five"), tuple.GetAwaiter().GetResult());

        Task<int> bcl = new TaskCompletionSource<int>().Task;
        SpindleTask<int[]> overBcl = SpindleTask.WhenAll([bcl], TimeoutOn(wheel, 10));
        clock.Advance(TimeSpan.FromMilliseconds(10));
        Assert.Throws<TimeoutException>(() => overBcl.GetAwaiter().GetResult());
        Assert.Equal(0, wheel.PendingCount);
    }

    [Fact]
    public void WhenAll_ZeroTimeout_FailsAtOnceUnlessEveryInputHasFinished()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var p = new Promise();
        SpindleTask input = Await(p);
        SpindleTask all = SpindleTask.WhenAll([input], new WhenAllOptions { Timeout = TimeSpan.Zero, Timers = wheel });
        Assert.Equal(SpindleTaskStatus.Faulted, all.Status);
        Assert.Throws<TimeoutException>(() => all.GetAwaiter().GetResult());
        Assert.Equal(0, wheel.PendingCount);
        p.SetResult();
        Assert.True(WasConsumed(input));
        SpindleTask.WhenAll([SpindleTask.CompletedTask], new WhenAllOptions { Timeout = TimeSpan.Zero, Timers = wheel }).GetAwaiter().GetResult();
    }

    [Fact]
    public void WhenAll_NoOrInfiniteTimeout_ArmsNoTimer()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        Promise[] promises = Promises(2);
        SpindleTask none = SpindleTask.WhenAll([promises[0].Task], new WhenAllOptions { Timers = wheel });
        SpindleTask infinite = SpindleTask.WhenAll([promises[1].Task], new WhenAllOptions { Timeout = Timeout.InfiniteTimeSpan, Timers = wheel });
        Assert.Equal(0, wheel.PendingCount);
        clock.Advance(TimeSpan.FromDays(10));
        Assert.False(none.IsCompleted);
        Assert.False(infinite.IsCompleted);
        promises[0].SetResult();
        promises[1].SetResult();
        none.GetAwaiter().GetResult();
        infinite.GetAwaiter().GetResult();
    }

    [Fact]
    public void WhenAll_TokenFiresBeforeTheTimeout_CancelsAndLeavesNoTimer()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var cts = new CancellationTokenSource();
        Promise[] promises = Promises(2);
        SpindleTask all = SpindleTask.WhenAll(TasksOf(promises), TimeoutOn(wheel, 50), cts.Token);
        Assert.Equal(1, wheel.PendingCount);
        cts.Cancel();
        Assert.Equal(0, wheel.PendingCount);
        Assert.ThrowsAny<OperationCanceledException>(() => all.GetAwaiter().GetResult());
        clock.Advance(TimeSpan.FromMilliseconds(100));
        promises[0].SetResult();
        promises[1].SetResult();
    }

    [Fact]
    public void WhenAll_TimeoutBeforeTheToken_TimesOut_AndTheTokenChangesNothing()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var cts = new CancellationTokenSource();
        var p = new Promise();
        SpindleTask all = SpindleTask.WhenAll([p.Task], TimeoutOn(wheel, 5), cts.Token);
        clock.Advance(TimeSpan.FromMilliseconds(5));
        cts.Cancel();
        Assert.Throws<TimeoutException>(() => all.GetAwaiter().GetResult());
        p.SetResult();
    }

    [Fact]
    public void WhenAll_TokenAlreadyCanceled_CancelsAtOnceAndLeavesNoTimer()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var cts = new CancellationTokenSource();
        cts.Cancel();
        var p = new Promise();
        SpindleTask all = SpindleTask.WhenAll([p.Task], TimeoutOn(wheel, 5), cts.Token);
        Assert.Equal(SpindleTaskStatus.Canceled, all.Status);
        Assert.Equal(0, wheel.PendingCount);
        Assert.ThrowsAny<OperationCanceledException>(() => all.GetAwaiter().GetResult());
        p.SetResult();
    }

    [Fact]
    public void WhenAny_WithTimeout_TimesOutAndStillObservesTheLosers()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        Promise[] promises = Promises(2);
        var late = new FormatException("late");
        var loser = new InvalidCastException("loser");
        ConcurrentQueue<Exception> reported = Observe(Own.InstancesOrOnTestThreads(late, loser), () =>
        {
            SpindleTask<int> any = SpindleTask.WhenAny([Await(promises[0]), Await(promises[1])]).WithTimeout(TimeSpan.FromMilliseconds(20), wheel);
            clock.Advance(TimeSpan.FromMilliseconds(20));
            Assert.Throws<TimeoutException>(() => any.GetAwaiter().GetResult());
            promises[1].SetException(late); // the would-be winner: its failure is reported by the timeout
            promises[0].SetException(loser); // a loser of the WhenAny: reported by the combinator
        });
        Assert.Equal(2, reported.Count);
        Assert.Contains(late, reported);
        Assert.Equal(0, wheel.PendingCount);

        promises[0].Reset();
        promises[1].Reset();
        SpindleTask<int> won = SpindleTask.WhenAny([promises[0].Task, promises[1].Task]).WithTimeout(TimeSpan.FromMilliseconds(20), wheel);
        promises[1].SetResult();
        Assert.Equal(1, won.GetAwaiter().GetResult());
        Assert.Equal(0, wheel.PendingCount);
        promises[0].SetResult();
    }

    /// <summary>The last input races the timer: success or timeout, once; a late input fault is reported, never lost.</summary>
    [Fact]
    public async Task WhenAll_LastInputVersusTimeout_HasExactlyOneOutcome()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        int rounds = TestUtil.Stress(3_000);
        Promise[] promises = Promises(2);
        foreach (Promise p in promises)
        {
            p.SetResult();
        }
        SpindleTask all = default;
        int continuations = 0;
        int succeeded = 0;
        int timedOut = 0;
        int faultsRethrown = 0;
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
                    promises[0].Reset();
                    promises[1].Reset();
                    all = SpindleTask.WhenAll([promises[0].Task, promises[1].Task], TimeoutOn(wheel, 1));
                    promises[0].SetResult();
                    continuations = 0;
                    all.GetAwaiter().UnsafeOnCompleted(() => Interlocked.Increment(ref continuations));
                },
                after: _ =>
                {
                    TestUtil.SpinUntil(() => Volatile.Read(ref continuations) > 0);
                    Assert.Equal(1, continuations);
                    try
                    {
                        all.GetAwaiter().GetResult();
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
                RaceJitter.AdvancesTheClock(clock, TimeSpan.FromMilliseconds(1)),
                RaceJitter.FinishesTheInput(_ => promises[1].SetResult(), fault => promises[1].SetException(fault), made));
        }
        Assert.Equal(ran, succeeded + timedOut + faultsRethrown);
        Assert.Equal(made.Count, faultsRethrown + reported.Count);
    }
}

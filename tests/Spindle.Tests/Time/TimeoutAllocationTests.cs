using System;
using System.Threading;

namespace SpindleLib.Tests.Time;

/// <summary>
/// Timeouts and periodic ticks allocate nothing in steady state (on a manual clock, whose continuations run inline, so
/// every allocation lands on this thread). Sequential, as the other allocation tests.
/// </summary>
[Collection(SequentialCollection.Name)]
public class TimeoutAllocationTests
{
    private const int Iterations = 1_000;

    [Fact]
    public void WithTimeout_TypedInputWins_SteadyStateAllocatesNothing()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var input = new Promise<int>();
        input.SetResult(0);
        TestUtil.AssertSteadyStateAllocatesNothing(i =>
        {
            input.Reset();
            SpindleTask<int> timed = input.Task.WithTimeout(TimeSpan.FromSeconds(1), wheel);
            input.SetResult(i);
            if (timed.GetAwaiter().GetResult() != i || wheel.PendingCount != 0)
            {
                throw new InvalidOperationException("wrong result, or a timer left behind");
            }
        }, Iterations);
    }

    [Fact]
    public void WithTimeout_UntypedInputWins_SteadyStateAllocatesNothing()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var input = new Promise();
        input.SetResult();
        TestUtil.AssertSteadyStateAllocatesNothing(i =>
        {
            input.Reset();
            SpindleTask timed = input.Task.WithTimeout(TimeSpan.FromMilliseconds(10 + i), wheel);
            clock.Advance(TimeSpan.FromMilliseconds(5)); // time passes, but not enough
            input.SetResult();
            timed.GetAwaiter().GetResult();
        }, Iterations);
        Assert.Equal(0, wheel.PendingCount);
    }

    /// <summary>
    /// TryWithTimeout allocates nothing in steady state whichever wins: the input, or the timeout (which builds no
    /// exception, where WithTimeout's builds a TimeoutException), typed or not.
    /// </summary>
    [Theory]
    [InlineData(true, false)]
    [InlineData(true, true)]
    [InlineData(false, false)]
    [InlineData(false, true)]
    public void TryWithTimeout_InputWinsOrTimesOut_SteadyStateAllocatesNothing(bool typed, bool timesOut)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var input = new Promise<int>();
        var untyped = new Promise();
        TimeSpan timeout = TimeSpan.FromMilliseconds(3);
        TestUtil.AssertSteadyStateAllocatesNothing(i =>
        {
            input.Reset();
            untyped.Reset();
            bool completed;
            if (typed)
            {
                SpindleTask<(bool, int)> timed = input.Task.TryWithTimeout(timeout, wheel);
                Finish(i);
                (completed, int result) = timed.GetAwaiter().GetResult();
                completed &= result == i;
            }
            else
            {
                SpindleTask<bool> timed = untyped.Task.TryWithTimeout(timeout, wheel);
                Finish(i);
                completed = timed.GetAwaiter().GetResult();
            }
            if (completed == timesOut || wheel.PendingCount != 0)
            {
                throw new InvalidOperationException("wrong outcome, or a timer left behind");
            }
        }, Iterations);

        void Finish(int i)
        {
            if (timesOut)
            {
                clock.Advance(timeout);
            }
            else if (typed)
            {
                input.SetResult(i);
            }
            else
            {
                untyped.SetResult();
            }
        }
    }

    /// <summary>A token bounding the wait (WithCancellation, and WithTimeout with a token) that the input beats: 0 B.</summary>
    [Fact]
    public void WithCancellation_InputWins_SteadyStateAllocatesNothing()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var cts = new CancellationTokenSource();
        var input = new Promise<int>();
        input.SetResult(0);
        TestUtil.AssertSteadyStateAllocatesNothing(i =>
        {
            input.Reset();
            SpindleTask<int> bounded = (i & 1) == 0
                ? input.Task.WithCancellation(cts.Token)
                : input.Task.WithTimeout(TimeSpan.FromSeconds(1), wheel, cts.Token);
            input.SetResult(i);
            if (bounded.GetAwaiter().GetResult() != i || wheel.PendingCount != 0)
            {
                throw new InvalidOperationException("wrong result, or a timer left behind");
            }
        }, Iterations);
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public void PeriodicTimer_TickCycle_SteadyStateAllocatesNothing(bool cancelableToken)
    {
        // With a cancelable token each wait registers on it and drops the registration when it is read (the source
        // reuses its nodes).
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var timer = new SpindlePeriodicTimer(TimeSpan.FromMilliseconds(2), wheel);
        using var cts = new CancellationTokenSource();
        CancellationToken token = cancelableToken ? cts.Token : default;
        TestUtil.AssertSteadyStateAllocatesNothing(i =>
        {
            SpindleTask<bool> wait = timer.WaitForNextTickAsync(token);
            clock.Advance(TimeSpan.FromMilliseconds(2));
            if (!wait.GetAwaiter().GetResult())
            {
                throw new InvalidOperationException("the tick returned false");
            }
        }, Iterations);
        Assert.Equal(0, wheel.PendingCount);
    }

    [Fact]
    public void WhenAll_WithTimeoutInputsWin_SteadyStateAllocatesNothing()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var promises = new[] { new Promise(), new Promise(), new Promise() };
        var tasks = new SpindleTask[promises.Length];
        foreach (Promise p in promises)
        {
            p.SetResult();
        }
        var options = new WhenAllOptions { Timeout = TimeSpan.FromSeconds(1), Timers = wheel };
        TestUtil.AssertSteadyStateAllocatesNothing(i =>
        {
            for (int k = 0; k < promises.Length; k++)
            {
                promises[k].Reset();
                tasks[k] = promises[k].Task;
            }
            SpindleTask all = SpindleTask.WhenAll(tasks, options);
            foreach (Promise p in promises)
            {
                p.SetResult();
            }
            all.GetAwaiter().GetResult();
        }, Iterations);
        Assert.Equal(0, wheel.PendingCount);
    }

    /// <summary>Timer nodes in this thread's pool stack and the shared one (a return may move a chunk between them).</summary>
    private static int PooledNodes() => ObjectPool<TimerNode>.LocalCount + ObjectPool<TimerNode>.Count;

    /// <summary>Combinators that serve a timed wait of <paramref name="form"/> on a typed task, in this thread's pool stack and the shared one.</summary>
    private static int PooledCombinators(TimeoutForm form) => form == TimeoutForm.Throwing
        ? ObjectPool<Combinator<int>>.LocalCount + ObjectPool<Combinator<int>>.Count
        : ObjectPool<Combinator<(bool, int)>>.LocalCount + ObjectPool<Combinator<(bool, int)>>.Count;

    [Theory]
    [InlineData(TimeoutForm.Throwing)]
    [InlineData(TimeoutForm.Quiet)]
    public void WithTimeout_InputWins_ReturnsTheTimerNodeAndTheCombinatorToTheirPools(TimeoutForm form)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var input = new Promise<int>();
        // Warm both pools on this thread, so that the measured use rents and returns objects that already exist.
        TimedWait warm = TimedWait.Start(form, input.Task, TimeSpan.FromSeconds(1), wheel);
        input.SetResult(0);
        warm.Read();
        int nodes = PooledNodes();
        int sources = PooledCombinators(form);

        input.Reset();
        TimedWait timed = TimedWait.Start(form, input.Task, TimeSpan.FromSeconds(1), wheel);
        Assert.Equal(nodes - 1, PooledNodes());
        input.SetResult(1);
        Assert.Equal(nodes, PooledNodes()); // back as soon as the input won: nothing waits for the deadline
        Assert.Equal(1, timed.Read());
        Assert.Equal(sources, PooledCombinators(form));
        Assert.Equal(0, wheel.PendingCount);
    }

    [Fact]
    public void TryWithTimeout_TimedOut_ReturnsTheTimerNodeAndTheCombinatorToTheirPools()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var input = new Promise<int>();
        TimedWait warm = TimedWait.Start(TimeoutForm.Quiet, input.Task, TimeSpan.FromSeconds(1), wheel);
        clock.Advance(TimeSpan.FromSeconds(1));
        Assert.Null(warm.Read());
        int nodes = PooledNodes();
        int sources = PooledCombinators(TimeoutForm.Quiet);

        input.Reset();
        TimedWait timed = TimedWait.Start(TimeoutForm.Quiet, input.Task, TimeSpan.FromSeconds(1), wheel);
        clock.Advance(TimeSpan.FromSeconds(1));
        Assert.Equal(nodes, PooledNodes());
        Assert.Null(timed.Read());
        Assert.Equal(sources, PooledCombinators(TimeoutForm.Quiet)); // the promise was let go of: nothing holds the combinator
        input.Reset();
    }
}

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

    [Fact]
    public void WithTimeout_InputWins_ReturnsTheTimerNodeAndTheCombinatorToTheirPools()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var input = new Promise<int>();
        // Warm both pools on this thread, so that the measured use rents and returns objects that already exist.
        SpindleTask<int> warm = input.Task.WithTimeout(TimeSpan.FromSeconds(1), wheel);
        input.SetResult(0);
        warm.GetAwaiter().GetResult();
        int nodes = PooledNodes();
        int sources = ObjectPool<Combinator<int>>.LocalCount + ObjectPool<Combinator<int>>.Count;

        input.Reset();
        SpindleTask<int> timed = input.Task.WithTimeout(TimeSpan.FromSeconds(1), wheel);
        Assert.Equal(nodes - 1, PooledNodes());
        input.SetResult(1);
        Assert.Equal(nodes, PooledNodes()); // back as soon as the input won: nothing waits for the deadline
        Assert.Equal(1, timed.GetAwaiter().GetResult());
        Assert.Equal(sources, ObjectPool<Combinator<int>>.LocalCount + ObjectPool<Combinator<int>>.Count);
        Assert.Equal(0, wheel.PendingCount);
    }
}

using System;
using System.Collections.Generic;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Time;

/// <summary>
/// Disposing a wheel on the system clock ends every delay: none is left with its continuation never run. The disposing
/// pass drains the insert inbox, and fires a node whose deadline has already passed into the shard's batch of
/// continuations; that batch was never flushed, so the delay's awaiter never resumed. Found by a review.
/// </summary>
public class TimerWheelDisposeTests
{
    /// <summary>
    /// The interleaving, made deterministic through the internal entry point: a thread worked out its deadline, was
    /// preempted past it while a pass moved the wheel's time on, and pushed its node only as Dispose ran its pass. Public
    /// paths with that shape: TimerWheel.Delay, timeouts (DeadlineAfter, then TimeoutTimer.Arm), periodic timers.
    /// </summary>
    [Fact]
    public async Task Dispose_ANodePushedWithAPassedDeadline_ItsContinuationRuns()
    {
        var wheel = new TimerWheel(TimeProvider.System);
        await wheel.Delay(TimeSpan.FromMilliseconds(20)).AsTask(); // a pass has moved the wheel's time to about 20 ms
        TimerNode node = TimerNode.Rent(wheel);
        var task = new SpindleTask(node, node.Version);
        var resumed = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        node.OnCompleted(_ => resumed.TrySetResult(), null, task._token);
        wheel.Dispose();
        wheel.Insert(node, deadline: 5); // lands after Dispose: Insert sees the wheel disposed and runs the disposing pass

        await TestUtil.WithTimeout(resumed.Task, 10);
        Assert.NotEqual(SpindleTaskStatus.Pending, task.Status);
    }

    /// <summary>The public API only: threads keep starting 1 ms delays on system-clock wheels that are disposed under them.</summary>
    [Fact]
    public async Task Dispose_WhileManyThreadsStartShortDelays_EveryDelayEnds()
    {
        TimeSpan budget = TimeSpan.FromSeconds(TestUtil.IsStress ? 60 : 3);
        int lost = 0;
        int wheels = 0;
        var clock = System.Diagnostics.Stopwatch.StartNew();
        while (clock.Elapsed < budget && lost == 0)
        {
            wheels++;
            var wheel = new TimerWheel(TimeProvider.System);
            var tasks = new List<Task>();
            using var stop = new CancellationTokenSource();
            var threads = new Thread[6];
            for (int t = 0; t < threads.Length; t++)
            {
                threads[t] = new Thread(() =>
                {
                    while (!stop.IsCancellationRequested)
                    {
                        Task delay;
                        try
                        {
                            delay = wheel.Delay(TimeSpan.FromMilliseconds(1)).AsTask();
                        }
                        catch (ObjectDisposedException)
                        {
                            return;
                        }
                        lock (tasks)
                        {
                            tasks.Add(delay);
                        }
                        Thread.SpinWait(200); // a little work, so a thread can be preempted anywhere
                    }
                })
                { IsBackground = true, Name = "delay starter" };
                threads[t].Start();
            }
            Thread.Sleep(20);
            wheel.Dispose();
            stop.Cancel();
            foreach (Thread thread in threads)
            {
                Assert.True(thread.Join(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)));
            }
            Task[] all;
            lock (tasks)
            {
                all = tasks.ToArray();
            }
            await Task.WhenAny(Task.WhenAll(all).ContinueWith(static _ => { }, TaskScheduler.Default), Task.Delay(30000));
            foreach (Task delay in all)
            {
                if (!delay.IsCompleted)
                {
                    lost++;
                }
            }
        }
        Assert.True(lost == 0, $"{lost} delays never ended, over {wheels} disposed wheels");
    }

    /// <summary>
    /// Dispose completes every pending delay as canceled, infinite ones too (found by a review of the time layer,
    /// 2026-11-28): an infinite delay was in no wheel at all, so it stayed pending after its wheel was disposed, until its
    /// token (if it had one) was cancelled. It is still never counted as pending, and its token still ends it.
    /// </summary>
    [Fact]
    public void Dispose_InfiniteDelays_CompleteAsCanceled_AndTheirTokensStillWork()
    {
        var clock = new ManualClock();
        var wheel = new TimerWheel(clock);
        using var cts = new CancellationTokenSource();
        using var other = new CancellationTokenSource();
        SpindleTask withToken = wheel.Delay(Timeout.InfiniteTimeSpan, cts.Token);
        SpindleTask withTokenMs = wheel.Delay(Timeout.Infinite, cts.Token);
        SpindleTask withoutToken = wheel.Delay(Timeout.InfiniteTimeSpan);
        SpindleTask cancelledFirst = wheel.Delay(Timeout.InfiniteTimeSpan, other.Token);
        SpindleTask finite = wheel.Delay(10);
        clock.Advance(TimeSpan.FromDays(100));
        Assert.Equal(SpindleTaskStatus.Succeeded, finite.Status);
        finite.GetAwaiter().GetResult();
        Assert.Equal(0, wheel.PendingCount);
        other.Cancel();
        Assert.ThrowsAny<OperationCanceledException>(() => cancelledFirst.GetAwaiter().GetResult());

        wheel.Dispose();

        foreach (SpindleTask delay in new[] { withToken, withTokenMs, withoutToken })
        {
            Assert.Equal(SpindleTaskStatus.Canceled, delay.Status);
            OperationCanceledException e = Assert.ThrowsAny<OperationCanceledException>(() => delay.GetAwaiter().GetResult());
            Assert.Contains("disposed", e.Message);
        }
        cts.Cancel(); // their registrations were dropped as they were read: nothing happens
        Assert.Equal(0, wheel.PendingCount);
    }
}

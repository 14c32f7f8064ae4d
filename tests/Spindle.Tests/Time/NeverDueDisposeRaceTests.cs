using System;
using System.Collections.Generic;
using System.Threading;
using Xunit;

namespace SpindleLib.Tests.Time;

/// <summary>
/// A wheel's Dispose races threads that start infinite delays (with a token each: kept, cancelled at once, or cancelled
/// and read at once, so the node goes on to the next delay) and periodic waits that never tick, taken back quietly by the
/// timer's Dispose. Every delay a start returned must end (Dispose cancels the ones the wheel holds weakly; one that raced
/// the close is cancelled at the call), as canceled by its wheel's Dispose unless its token was cancelled, and be read
/// exactly once; a node's later use is never completed by a stale entry (its read would fail or show the wrong outcome).
/// </summary>
[Collection(SequentialCollection.Name)] // a long race; and its stale task copies pin pooled nodes that other tests' GC checks rent
public sealed class NeverDueDisposeRaceTests
{
    [Fact]
    public void Dispose_RacingInfiniteDelaysStartedCancelledAndRead_EndsEveryOneOnce()
    {
        TimeSpan budget = TimeSpan.FromSeconds(TestUtil.IsStress ? 60 : 2);
        var elapsed = System.Diagnostics.Stopwatch.StartNew();
        int rounds = 0;
        while (elapsed.Elapsed < budget)
        {
            rounds++;
            var wheel = new TimerWheel(new ManualClock());
            var kept = new List<(SpindleTask Delay, CancellationTokenSource Source)>[2];
            var threads = new Thread[kept.Length];
            Exception? failed = null;
            for (int t = 0; t < threads.Length; t++)
            {
                var mine = kept[t] = new();
                int seed = t;
                threads[t] = new Thread(() =>
                {
                    try
                    {
                        StartUntilDisposed(wheel, mine, seed);
                    }
                    catch (Exception e)
                    {
                        Interlocked.CompareExchange(ref failed, e, null); // checked after the join
                    }
                })
                { IsBackground = true, Name = "infinite delay starter" };
                threads[t].Start();
            }
            Thread.Sleep(2);
            wheel.Dispose();
            foreach (Thread thread in threads)
            {
                Assert.True(thread.Join(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)));
            }
            Assert.Null(failed);
            foreach (var mine in kept)
            {
                foreach ((SpindleTask delay, CancellationTokenSource cts) in mine)
                {
                    Assert.True(delay.IsCompleted, $"an infinite delay was left pending by its wheel's Dispose (round {rounds})");
                    OperationCanceledException e = Assert.ThrowsAny<OperationCanceledException>(() => delay.GetAwaiter().GetResult());
                    if (!cts.IsCancellationRequested)
                    {
                        Assert.Contains("disposed", e.Message, StringComparison.Ordinal);
                    }
                    cts.Dispose();
                }
            }
            Assert.Equal(0, wheel.NeverDuePendingCount);
        }
    }

    /// <summary>Starts never-due timers on <paramref name="wheel"/> until it is disposed.</summary>
    private static void StartUntilDisposed(TimerWheel wheel, List<(SpindleTask Delay, CancellationTokenSource Source)> kept, int seed)
    {
        for (int i = 0; ; i++)
        {
            var cts = new CancellationTokenSource();
            SpindleTask delay;
            try
            {
                delay = wheel.Delay(Timeout.InfiniteTimeSpan, cts.Token);
            }
            catch (ObjectDisposedException)
            {
                return;
            }
            switch ((i + seed) % 4)
            {
                case 0:
                    kept.Add((delay, cts)); // left for Dispose to end
                    break;
                case 1:
                    cts.Cancel(); // races Dispose's claim
                    kept.Add((delay, cts));
                    break;
                case 2:
                    cts.Cancel(); // races Dispose's claim, then read at once: the node goes on to the next delay
                    Assert.ThrowsAny<OperationCanceledException>(() => delay.GetAwaiter().GetResult());
                    cts.Dispose();
                    break;
                default:
                    kept.Add((delay, cts));
                    SpindlePeriodicTimer periodic;
                    SpindleTask<bool> wait;
                    try
                    {
                        periodic = new SpindlePeriodicTimer(Timeout.InfiniteTimeSpan, wheel);
                        wait = periodic.WaitForNextTickAsync();
                    }
                    catch (ObjectDisposedException)
                    {
                        return;
                    }
                    periodic.Dispose(); // takes its wait's timer back quietly, racing Dispose's claim: the node goes on
                    Assert.False(wait.GetAwaiter().GetResult()); // ended by either Dispose: false, never a tick
                    break;
            }
        }
    }
}

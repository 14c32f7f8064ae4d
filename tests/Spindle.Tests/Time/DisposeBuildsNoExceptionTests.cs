using System;
using System.Threading;

namespace SpindleLib.Tests.Time;

/// <summary>
/// A wheel's <c>Dispose</c> ends its pending timers as canceled without building an exception for each (a twenty-first
/// user's review, an MMO zone of millions of timers shut down with its wheel): the exception is made only for a reader
/// that throws it, as for a token's cancellation, so awaits with <c>SuppressCancellationThrow()</c> build none. Before,
/// it built an <see cref="OperationCanceledException"/> and its dispatch info per timer (184 B; 368 MB for 2M timers).
/// A manual clock's wheel runs the disposing pass and the continuations on this thread, so every allocation lands here.
/// Sequential, as the other allocation tests.
/// </summary>
[Collection(SequentialCollection.Name)]
public class DisposeBuildsNoExceptionTests
{
    private const int Timers = 4_000;

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public void Dispose_PendingDelaysReadWithSuppressedThrow_BuildNoExceptionEach(bool infinite)
    {
        var clock = new ManualClock();
        var wheel = new TimerWheel(clock);
        var delays = new SpindleTask[Timers];
        for (int i = 0; i < Timers; i++)
        {
            delays[i] = infinite ? wheel.Delay(Timeout.InfiniteTimeSpan) : wheel.Delay(TimeSpan.FromMinutes(10 + (i % 50)));
        }
        GC.KeepAlive(delays); // the never-due list holds infinite delays weakly: keep them awaited

        long before = GC.GetAllocatedBytesForCurrentThread();
        wheel.Dispose();
        long bytes = GC.GetAllocatedBytesForCurrentThread() - before;

        int canceled = 0;
        foreach (SpindleTask delay in delays)
        {
            canceled += delay.SuppressCancellationThrow().GetAwaiter().GetResult() ? 1 : 0;
        }
        Assert.Equal(Timers, canceled);
        Assert.Equal(0, wheel.PendingCount);
        Assert.True(bytes < Timers * 40L,
            $"Dispose of a wheel with {Timers} pending {(infinite ? "infinite" : "finite")} delays allocated {bytes:N0} B ({bytes / Timers} B a timer): an exception built for each");
    }

    /// <summary>A read that throws still gets the disposal's own exception, naming it, for a finite delay and an infinite one.</summary>
    [Fact]
    public void Dispose_PendingDelays_AReadThatThrowsSaysTheWheelWasDisposed()
    {
        var wheel = new TimerWheel(new ManualClock());
        using var cts = new CancellationTokenSource();
        SpindleTask finite = wheel.Delay(TimeSpan.FromMinutes(1), cts.Token);
        SpindleTask infinite = wheel.Delay(Timeout.InfiniteTimeSpan, cts.Token);
        wheel.Dispose();
        foreach (SpindleTask delay in new[] { finite, infinite })
        {
            Assert.Equal(SpindleTaskStatus.Canceled, delay.Status);
            OperationCanceledException e = Assert.ThrowsAny<OperationCanceledException>(() => delay.GetAwaiter().GetResult());
            Assert.Contains("TimerWheel was disposed", e.Message);
            Assert.False(e.CancellationToken.IsCancellationRequested);
        }
        cts.Cancel();
    }
}

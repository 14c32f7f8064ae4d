using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Frames;

/// <summary>
/// Found by a review: the thread that last ran a frame stays "the loop thread" until another thread's Enter overwrites
/// _loopThread; an await it makes at that moment passed Schedule's check and writes the phase's queue while the new
/// loop thread runs the phase.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class FrameLoopTakeoverTests
{
    private static readonly Action<object?> s_none = static _ => { };

    [Theory]
    [InlineData(1 << 14)]
    [InlineData(1 << 18)]
    public async Task AwaitOnOldLoopThread_WhileAnotherThreadTakesOver_EveryContinuationRunsExactlyOnce(int capacity)
    {
        string? failure = null;
        // What is reported on this test's threads, or on whichever thread is running this test's loop now: only this
        // test runs its frames.
        FrameLoop? current = null;
        var watch = UnobservedReports.Start(UnobservedReports.Own.Any(
            UnobservedReports.Own.ReportedOnTestThreads(), _ => Volatile.Read(ref current)?.IsLoopThread == true));
        try
        {
            await TestUtil.WithTimeout(TestUtil.RunOnThread(() =>
            {
                for (int round = 0; round < 5 && failure is null; round++)
                {
                    var loop = new FrameLoop();
                    Volatile.Write(ref current, loop);
                    loop.RunFrame(); // this thread is the loop thread
                    int ran = 0;
                    Action count = () => Interlocked.Increment(ref ran);
                    // Fill Update's queue to exactly its capacity, so the next await grows it (a slower add).
                    while (loop.Update.QueuedCount < capacity)
                    {
                        loop.Yield().GetAwaiter().UnsafeOnCompleted(count);
                    }
                    using var go = new ManualResetEventSlim(false, spinCount: 0);
                    var other = new Thread(() => { go.Wait(); loop.RunFrame(); }) { IsBackground = true };
                    other.Start();
                    Thread.Sleep(20); // the other thread is blocked in go.Wait
                    go.Set();
                    loop.Yield().GetAwaiter().UnsafeOnCompleted(count); // this thread still reads itself as the loop thread
                    other.Join();
                    for (int f = 0; f < 3; f++)
                    {
                        loop.RunFrame();
                    }
                    int expected = capacity + 1;
                    if (Volatile.Read(ref ran) != expected || !watch.Reports.IsEmpty || loop.QueuedCount != 0)
                    {
                        failure = $"round {round}: ran {ran} continuations, expected {expected}; {watch.Reports.Count} unobserved exceptions; {loop.QueuedCount} still queued";
                    }
                }
            }), 120);
        }
        finally
        {
            watch.Dispose();
        }
        if (failure is not null)
        {
            Exception? first = watch.Reports.TryPeek(out Exception? e) ? e : null;
            Assert.Fail(failure + "; first: " + first?.GetType().Name + " " + first?.StackTrace?.Split('\n')[0]);
        }
    }
}

[Collection(SequentialCollection.Name)]
public sealed class FrameLoopRunHandOverTests
{
    /// <summary>The same with Run: the host warms up with RunFrame, hands the loop to Run's thread, and goes on awaiting.</summary>
    [Fact]
    public async Task AwaitRightAfterRun_OnTheThreadThatRanFrames_EveryContinuationRunsExactlyOnce()
    {
        const int Capacity = 1 << 18;
        string? failure = null;
        // What is reported on this test's threads, or on whichever thread is running this test's loop now (Run's).
        FrameLoop? current = null;
        var watch = UnobservedReports.Start(UnobservedReports.Own.Any(
            UnobservedReports.Own.ReportedOnTestThreads(), _ => Volatile.Read(ref current)?.IsLoopThread == true));
        try
        {
            await TestUtil.WithTimeout(TestUtil.RunOnThread(() =>
            {
                for (int round = 0; round < 5 && failure is null; round++)
                {
                    var loop = new FrameLoop();
                    Volatile.Write(ref current, loop);
                    loop.RunFrame();
                    int ran = 0;
                    Action count = () => Interlocked.Increment(ref ran);
                    while (loop.Update.QueuedCount < Capacity)
                    {
                        loop.Yield().GetAwaiter().UnsafeOnCompleted(count);
                    }
                    using var cts = new CancellationTokenSource();
                    Task running = loop.Run(1000, cts.Token);
                    loop.Yield().GetAwaiter().UnsafeOnCompleted(count);
                    var sw = System.Diagnostics.Stopwatch.StartNew();
                    while (Volatile.Read(ref ran) < Capacity + 1 && sw.ElapsedMilliseconds < 20000)
                    {
                        Thread.Sleep(5);
                    }
                    Thread.Sleep(50);
                    cts.Cancel();
                    running.GetAwaiter().GetResult();
                    if (Volatile.Read(ref ran) != Capacity + 1 || !watch.Reports.IsEmpty)
                    {
                        failure = $"round {round}: ran {ran} continuations, expected {Capacity + 1}; {watch.Reports.Count} unobserved exceptions";
                    }
                }
            }), 120);
        }
        finally
        {
            watch.Dispose();
        }
        if (failure is not null)
        {
            Assert.Fail(failure);
        }
    }
}

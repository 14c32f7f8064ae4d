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
        int exceptions = 0;
        Exception? first = null;
        Action<Exception> onUnobserved = e => { Interlocked.CompareExchange(ref first, e, null); Interlocked.Increment(ref exceptions); };
        Spindle.UnobservedException += onUnobserved;
        try
        {
            await TestUtil.WithTimeout(TestUtil.RunOnThread(() =>
            {
                for (int round = 0; round < 5 && failure is null; round++)
                {
                    var loop = new FrameLoop();
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
                    if (Volatile.Read(ref ran) != expected || Volatile.Read(ref exceptions) != 0 || loop.QueuedCount != 0)
                    {
                        failure = $"round {round}: ran {ran} continuations, expected {expected}; {exceptions} unobserved exceptions; {loop.QueuedCount} still queued";
                    }
                }
            }), 120);
        }
        finally
        {
            Spindle.UnobservedException -= onUnobserved;
        }
        if (failure is not null)
        {
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
        int exceptions = 0;
        Action<Exception> onUnobserved = _ => Interlocked.Increment(ref exceptions);
        Spindle.UnobservedException += onUnobserved;
        try
        {
            await TestUtil.WithTimeout(TestUtil.RunOnThread(() =>
            {
                for (int round = 0; round < 5 && failure is null; round++)
                {
                    var loop = new FrameLoop();
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
                    if (Volatile.Read(ref ran) != Capacity + 1 || Volatile.Read(ref exceptions) != 0)
                    {
                        failure = $"round {round}: ran {ran} continuations, expected {Capacity + 1}; {exceptions} unobserved exceptions";
                    }
                }
            }), 120);
        }
        finally
        {
            Spindle.UnobservedException -= onUnobserved;
        }
        if (failure is not null)
        {
            Assert.Fail(failure);
        }
    }
}

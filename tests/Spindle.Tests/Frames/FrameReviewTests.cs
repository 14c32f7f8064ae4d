using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Frames;

/// <summary>Defects found by a review of the frame loop, each with the test that showed it.</summary>
public sealed class FrameReviewTests
{
    /// <summary>
    /// Run started while another thread is in the middle of a frame cannot take the loop: its thread's first frame is
    /// refused and the task faults. That refusal must leave the loop as it was: the thread running the frame is still
    /// the loop thread, for the rest of its frame and after it.
    /// </summary>
    [Fact]
    public void Run_RefusedBecauseAFrameIsRunning_LeavesThatThreadTheLoopThread()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        Task? run = null;
        bool? loopThreadAfterRun = null;
        string? switchedAt = null;
        async SpindleTask StartRunFromInsideAFrame()
        {
            await loop.Yield();
            using var cts = new CancellationTokenSource();
            run = loop.Run(60, cts.Token);
            // This frame is still running, so Run's thread cannot begin one: wait until Run has given up.
            ((IAsyncResult)run).AsyncWaitHandle.WaitOne(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds));
            loopThreadAfterRun = loop.IsLoopThread;
            await loop.SwitchTo(); // on the loop thread: continues at once, in this phase
            switchedAt = loop.Where();
        }

        StartRunFromInsideAFrame().Forget();
        loop.RunFrame(); // frame 2
        Assert.NotNull(run);
        Assert.True(run!.IsFaulted);
        Assert.IsType<InvalidOperationException>(run.Exception!.InnerException);
        Assert.True(loopThreadAfterRun);
        Assert.Equal("2/Update", switchedAt);
        Assert.True(loop.IsLoopThread);
    }
}

using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Frames;

/// <summary>
/// <see cref="FrameLoop.IsLoopThread"/> as its documentation says (a user's friction, decisions section 35): no thread
/// is the loop thread before the first frame, not even the one about to run it; an await made then is handed off and
/// resumes on the thread that runs the first frame; from then on that thread is the loop thread, between frames too.
/// </summary>
public sealed class LoopThreadBeforeFirstFrameTests
{
    private static async SpindleTask<bool> ResumesOnLoop(FrameLoop loop)
    {
        await loop.NextFrame();
        return loop.IsLoopThread;
    }

    [Fact]
    public async Task FalseEverywhereBeforeTheFirstFrame_ThenTrueOnTheThreadThatRanIt()
    {
        await TestUtil.WithTimeout(TestUtil.RunOnThread(() =>
        {
            var loop = new FrameLoop();
            Assert.False(loop.IsLoopThread);
            SpindleTask<bool> early = ResumesOnLoop(loop);
            Assert.False(early.IsCompleted);
            loop.RunFrame();
            Assert.True(loop.IsLoopThread); // between frames, on the thread that ran the last one
            Assert.True(early.IsCompleted);
            Assert.True(early.GetAwaiter().GetResult());
            bool elsewhere = true;
            var other = new Thread(() => elsewhere = loop.IsLoopThread);
            other.Start();
            other.Join();
            Assert.False(elsewhere);
        }));
    }

    [Fact]
    public async Task Run_ItsThreadIsTheLoopThreadFromItsFirstFrame_AndNotAfterItStops()
    {
        var loop = new FrameLoop();
        Assert.False(loop.IsLoopThread);
        using var stop = new CancellationTokenSource();
        var onLoop = new TaskCompletionSource<bool>(TaskCreationOptions.RunContinuationsAsynchronously);
        loop.SynchronizationContext.Post(_ => onLoop.TrySetResult(loop.IsLoopThread), null);
        Task run = loop.Run(200, stop.Token);
        Assert.True(await TestUtil.WithTimeout(onLoop.Task));
        Assert.False(loop.IsLoopThread);
        stop.Cancel();
        await TestUtil.WithTimeout(run);
        Assert.False(loop.IsLoopThread);
    }
}

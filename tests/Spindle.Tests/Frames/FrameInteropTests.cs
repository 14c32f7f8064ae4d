using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Frames;

/// <summary>Loop code awaiting the rest of Spindle: job handles, WhenAll and WhenAny, promises, and BCL tasks.</summary>
public sealed class FrameInteropTests
{
    private struct SumJob : IJob
    {
        public int[] Values;
        public long[] Result;

        public readonly void Execute()
        {
            long sum = 0;
            foreach (int v in Values)
            {
                sum += v;
            }
            Result[0] = sum;
        }
    }

    [Fact]
    public async Task JobHandle_AwaitedFromLoopCode_ThenSwitchToBringsItBack()
    {
        var loop = new FrameLoop();
        var result = new long[1];
        string? where = null;
        async SpindleTask Frame()
        {
            await loop.SwitchTo();
            JobHandle handle = new SumJob { Values = new[] { 1, 2, 3, 4 }, Result = result }.Schedule();
            await handle; // resumes where the job finished
            await loop.SwitchTo(); // back on the loop thread, in the next frame if it was not there already
            Assert.True(loop.IsLoopThread);
            where = loop.CurrentPhase?.Name;
        }

        IDisposable stopper = FrameUtil.RunOnThread(loop, out Task running);
        using (stopper)
        {
            await TestUtil.WithTimeout(Frame());
        }
        await TestUtil.WithTimeout(running);
        Assert.Equal(10, result[0]);
        Assert.Equal("Update", where);
    }

    [Fact]
    public void JobHandle_PolledWithWaitUntil_ResumesOnTheLoopThread()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        var result = new long[1];
        bool done = false;
        int thread = 0;
        async SpindleTask Frame()
        {
            JobHandle handle = new SumJob { Values = new[] { 5, 6 }, Result = result }.Schedule();
            JobHandle.ScheduleBatchedJobs();
            await loop.WaitUntil(handle, static h => h.IsCompleted);
            handle.Complete();
            thread = Environment.CurrentManagedThreadId;
            done = true;
        }

        Frame().Forget();
        // The job runs on a worker: bounded by time, not by 100,000 frames, which an idle loop runs through in well under
        // a second while a loaded machine can keep both workers off the processor for longer.
        loop.RunUntil(() => done, TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds));
        Assert.Equal(11, result[0]);
        Assert.Equal(Environment.CurrentManagedThreadId, thread);
    }

    [Fact]
    public void WhenAll_OfLoopAwaits_ResumesOnTheLoopWhenTheLastCompletes()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        string? where = null;
        async SpindleTask Frame()
        {
            await SpindleTask.WhenAll(
                loop.DelayFrame(3),
                loop.Delay(TimeSpan.FromMilliseconds(15)),
                loop.NextFrame(),                 // converted: the wait starts here
                loop.WaitUntil(loop, static l => l.FrameCount >= 2));
            where = loop.Where();
        }

        Frame().Forget();
        loop.RunFrames(4);
        Assert.Equal("4/Update", where);
    }

    [Fact]
    public void WhenAny_OfLoopAwaits_ReportsTheFirst_AndCanCancelTheRest()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        int winner = -1;
        string? where = null;
        async SpindleTask Frame()
        {
            using var cts = new CancellationTokenSource();
            winner = await SpindleTask.WhenAny(loop.DelayFrame(5, cts.Token), loop.DelayFrame(2, cts.Token), loop.Delay(TimeSpan.FromSeconds(10), cts.Token));
            where = loop.Where();
            cts.Cancel(); // the losers complete as cancelled at once, and leave their wheels at the next frame
        }

        SpindleTask task = Frame();
        loop.RunFrames(3);
        Assert.True(task.IsCompleted);
        task.GetAwaiter().GetResult();
        Assert.Equal(1, winner);
        Assert.Equal("3/Update", where);
        loop.RunFrame();
        Assert.Equal(0, loop.PendingTimers);
        Assert.Equal(0, loop.QueuedCount);
    }

    [Fact]
    public void WhenAny_WaitOrTimeout_InLoopTime()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        bool signalled = false;
        int winner = -1;
        async SpindleTask Frame()
        {
            winner = await SpindleTask.WhenAny(
                loop.WaitUntil(() => signalled),
                loop.Delay(TimeSpan.FromMilliseconds(100), FrameTimeKind.Unscaled));
        }

        SpindleTask task = Frame();
        loop.RunFrames(9);
        Assert.False(task.IsCompleted);
        loop.RunFrame(); // loop time 110 ms: the timeout wins
        Assert.True(task.IsCompleted);
        Assert.Equal(1, winner);
        signalled = true;
        loop.RunFrame();
        Assert.Equal(0, loop.QueuedCount);
    }

    [Fact]
    public void PromiseCompletedByLoopCode_ResumesItsAwaiterInline_OnTheLoopThread()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        var promise = new Promise<int>();
        string? where = null;
        async SpindleTask Awaiter()
        {
            int value = await promise.Task;
            where = loop.Where() + ":" + value;
        }

        async SpindleTask Completer()
        {
            await loop.DelayFrame(2, loop.LateUpdate);
            promise.SetResult(7);
        }

        Awaiter().Forget();
        Completer().Forget();
        loop.RunFrames(2);
        Assert.Equal("3/LateUpdate:7", where);
    }

    [Fact]
    public async Task ValueTaskAndTask_CanAwaitLoopWaits()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        ValueTask v = loop.DelayFrame(2).AsValueTask();
        Task t = loop.NextFrame().AsSpindleTask().AsTask();
        loop.RunFrames(2);
        await TestUtil.WithTimeout(t);
        Assert.True(v.IsCompleted);
        await v;
    }
}

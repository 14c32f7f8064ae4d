using System;
using System.Threading;

namespace SpindleLib.Tests.Frames;

/// <summary>Delays in loop time, scaled and unscaled, resume in exactly the frame loop time reaches their deadline.</summary>
public sealed class FrameDelayTests
{
    /// <summary>Runs 10 ms frames until <paramref name="task"/> completes and returns the frame it completed in.</summary>
    private static long FrameOf(FrameLoop loop, SpindleTask task, int maxFrames = 1000)
    {
        long? frame = null;
        async SpindleTask Watch()
        {
            await task;
            frame = loop.FrameCount;
        }

        Watch().Forget();
        loop.RunUntil(() => frame is not null, maxFrames);
        return frame!.Value;
    }

    [Theory]
    [InlineData(1, 1)]
    [InlineData(9, 1)]
    [InlineData(10, 1)]
    [InlineData(11, 2)]
    [InlineData(35, 4)]
    [InlineData(1000, 100)]
    [InlineData(1001, 101)]
    public void Delay_StartedBeforeTheFirstFrame_ResumesInTheFrameLoopTimeReachesIt(int ms, long expectedFrame)
    {
        // 10 ms frames: frame N begins at loop time N * 10 ms.
        var loop = new FrameLoop { FixedDeltaTime = FrameUtil.Step };
        Assert.Equal(expectedFrame, FrameOf(loop, loop.Delay(TimeSpan.FromMilliseconds(ms))));
    }

    [Fact]
    public void Delay_StartedDuringAFrame_CountsFromThatFramesTime()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        loop.RunFrames(2); // frame 3: loop time 30 ms
        long resumed = 0;
        string? phase = null;
        async SpindleTask Run()
        {
            await loop.Yield(loop.Update);
            Assert.Equal(4, loop.FrameCount); // loop time 40 ms
            await loop.Delay(TimeSpan.FromMilliseconds(35)); // deadline 75 ms: frame 8 (80 ms)
            resumed = loop.FrameCount;
            phase = loop.CurrentPhase?.Name;
        }

        SpindleTask task = Run();
        loop.RunFrames(4);
        Assert.False(task.IsCompleted);
        loop.RunFrame();
        Assert.True(task.IsCompleted);
        Assert.Equal(8, resumed);
        Assert.Equal("Update", phase);
    }

    [Fact]
    public void Delay_InAPhase_ResumesInThatPhase()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        string? where = null;
        async SpindleTask Run()
        {
            await loop.Delay(TimeSpan.FromMilliseconds(20), FrameTimeKind.Unscaled, loop.LateUpdate);
            where = loop.Where();
        }

        Run().Forget();
        loop.RunFrames(3);
        Assert.Equal("3/LateUpdate", where); // 10 ms + 20 ms = 30 ms: frame 3
    }

    [Fact]
    public void Scaled_RunsAtTheTimeScale_Unscaled_DoesNot()
    {
        var loop = new FrameLoop { FixedDeltaTime = FrameUtil.Step, TimeScale = 0.5 };
        SpindleTask scaled = loop.Delay(TimeSpan.FromMilliseconds(35));
        SpindleTask unscaled = loop.Delay(TimeSpan.FromMilliseconds(35), FrameTimeKind.Unscaled);
        long scaledFrame = 0, unscaledFrame = 0;
        async SpindleTask Watch(SpindleTask t, bool isScaled)
        {
            await t;
            if (isScaled)
            {
                scaledFrame = loop.FrameCount;
            }
            else
            {
                unscaledFrame = loop.FrameCount;
            }
        }

        Watch(scaled, true).Forget();
        Watch(unscaled, false).Forget();
        loop.RunFrames(10);
        Assert.Equal(4, unscaledFrame); // 40 ms unscaled
        Assert.Equal(7, scaledFrame);   // 5 ms of scaled time per frame: 35 ms at frame 7
        Assert.Equal(TimeSpan.FromMilliseconds(50), loop.Time);
        Assert.Equal(TimeSpan.FromMilliseconds(100), loop.UnscaledTime);
        Assert.Equal(TimeSpan.FromMilliseconds(5), loop.DeltaTime);
    }

    [Fact]
    public void TimeScaleZero_PausesScaledDelays_UntilTimeRunsAgain()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop(); // 10 ms
        loop.TimeScale = 0;
        SpindleTask scaled = loop.Delay(TimeSpan.FromMilliseconds(20));
        SpindleTask unscaled = loop.Delay(TimeSpan.FromMilliseconds(20), FrameTimeKind.Unscaled);
        loop.RunFrames(100);
        Assert.True(unscaled.IsCompleted);
        Assert.False(scaled.IsCompleted);
        Assert.Equal(TimeSpan.FromMilliseconds(10), loop.Time);
        loop.TimeScale = 1;
        loop.RunFrame();
        Assert.False(scaled.IsCompleted);
        loop.RunFrame(); // scaled time 30 ms
        Assert.True(scaled.IsCompleted);
        scaled.GetAwaiter().GetResult();
        unscaled.GetAwaiter().GetResult();
    }

    /// <summary>
    /// The deadline is the loop time at the call plus the delay, to the tick, whatever fraction of a millisecond loop
    /// time had reached when the loop's first timed wait created its wheel: a wheel anchored there once resumed a delay
    /// in a frame short of its deadline (found by FrameLoopModelTests), and until stop 46 every deadline was rounded up to
    /// the millisecond, so this delay waited for a frame at 16 ms.
    /// </summary>
    [Theory]
    [InlineData(FrameTimeKind.Scaled)]
    [InlineData(FrameTimeKind.Unscaled)]
    public void Delay_FirstTimedWaitAtAFractionalLoopTime_ResumesAtItsExactDeadline(FrameTimeKind kind)
    {
        FrameLoop loop = FrameUtil.NewBoundLoop(); // 10 ms
        loop.RunFrame(TimeSpan.FromMilliseconds(0.9)); // 10.9 ms: no timed wait yet, so no wheel yet
        SpindleTask delay = loop.Delay(TimeSpan.FromMilliseconds(5), kind); // due at 15.9 ms
        loop.RunFrame(TimeSpan.FromMilliseconds(4.9)); // 15.8 ms
        Assert.False(delay.IsCompleted, "resumed in a frame that began at 15.8 ms, before its 15.9 ms deadline");
        loop.RunFrame(TimeSpan.FromMilliseconds(0.1)); // 15.9 ms
        Assert.True(delay.IsCompleted, "not resumed in the frame that began at its 15.9 ms deadline");
        delay.GetAwaiter().GetResult();
    }

    [Fact]
    public void Delay_Zero_IsAYield()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        SpindleTask zero = loop.Delay(TimeSpan.Zero, FrameTimeKind.Scaled, loop.LateUpdate);
        Assert.False(zero.IsCompleted); // it resumes on the loop thread, not on the caller's
        Assert.Equal(2, FrameOf(loop, zero));
    }

    [Fact]
    public void Delay_Infinite_WaitsUntilCancelled()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        using var cts = new CancellationTokenSource();
        SpindleTask forever = loop.Delay(Timeout.InfiniteTimeSpan, cts.Token);
        loop.RunFrames(50);
        Assert.False(forever.IsCompleted);
        cts.Cancel();
        Assert.Equal(SpindleTaskStatus.Canceled, forever.Status);
        Assert.ThrowsAny<OperationCanceledException>(() => forever.GetAwaiter().GetResult());
    }

    [Fact]
    public void ManyDelays_AreNotPolled_AndResumeInTheirFrames()
    {
        // 20,000 delays spread over 2,000 frames: each resumes in its own frame, and the loop polls none of them
        // (the wheel holds them; a frame with nothing due does not pass over them).
        FrameLoop loop = FrameUtil.NewBoundLoop();
        const int Count = 20_000;
        var resumedAt = new long[Count];
        async SpindleTask Wait(int i)
        {
            await loop.Delay(TimeSpan.FromMilliseconds(10 * (i % 2000) + 5));
            resumedAt[i] = loop.FrameCount;
        }

        for (int i = 0; i < Count; i++)
        {
            Wait(i).Forget();
        }
        Assert.Equal(Count, loop.PendingTimers);
        loop.RunFrames(2002);
        for (int i = 0; i < Count; i++)
        {
            // Started at 10 ms; the deadline 10 ms * k + 15 ms falls in frame k + 2.
            Assert.Equal(i % 2000 + 2, resumedAt[i]);
        }
        Assert.Equal(0, loop.PendingTimers);
        Assert.Equal(0, loop.QueuedCount);
    }
}

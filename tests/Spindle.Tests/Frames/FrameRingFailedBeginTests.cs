#if DEBUG
using System;

namespace SpindleLib.Tests.Frames;

/// <summary>
/// A frame whose begin fails after its count is published (review53: a loop whose step threw midway, here through the
/// Debug hook that runs there), so that neither the wheels' passes nor the frame ring's bucket ran for it: a frame delay
/// due in that frame resumes in the next frame that begins, as the frame wheel's pass, which fires everything due by
/// then, always gave. The ring left that frame's bucket untaken until the ring came round again, 64 frames late.
/// Sequential: the hook is static.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class FrameRingFailedBeginTests
{
    [Theory]
    [InlineData(true)]  // started inside a frame: the frame ring
    [InlineData(false)] // started between frames: the frame wheel
    public void ADelayDueInAFrameWhoseBeginFailed_ResumesInTheNextFrame(bool insideAFrame)
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        long due = 0;
        long resumedAt = 0;

        async SpindleTask Wait()
        {
            due = loop.FrameCount + 2;
            await loop.DelayFrame(2);
            resumedAt = loop.FrameCount;
        }

        StartOnLoop(loop, insideAFrame, () => Wait().Forget());
        loop.RunUntil(() => due != 0 && loop.FrameCount == due - 1);
        RunAFrameWhoseBeginFails(loop);
        loop.RunUntil(() => resumedAt != 0, maxFrames: FrameLoop.FrameRingSize + 2);
        Assert.Equal(due + 1, resumedAt);
        Assert.Equal(0, loop.PendingTimers);
    }

    /// <summary>
    /// The waits the failed frame left and the next frame's own resume together in the order they were started, as the
    /// wheel's would: a 3-frame wait started before a 2-frame one resumes first, though the latter was due a frame earlier.
    /// </summary>
    [Theory, InlineData(true), InlineData(false)]
    public void WaitsLeftByAFailedBegin_AndTheNextFramesOwn_ResumeInStartOrder(bool insideAFrame)
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        long failing = 0;
        var order = new System.Collections.Generic.List<string>();

        async SpindleTask Wait(string name, int frames)
        {
            await loop.DelayFrame(frames);
            order.Add(name + "@" + loop.FrameCount);
        }

        StartOnLoop(loop, insideAFrame, () =>
        {
            failing = loop.FrameCount + 2;
            Wait("three", 3).Forget();
            Wait("two", 2).Forget();
        });
        loop.RunUntil(() => failing != 0 && loop.FrameCount == failing - 1);
        RunAFrameWhoseBeginFails(loop);
        loop.RunUntil(() => order.Count == 2, maxFrames: FrameLoop.FrameRingSize + 2);
        Assert.Equal(new[] { "three@" + (failing + 1), "two@" + (failing + 1) }, order);
    }

    /// <summary>Runs <paramref name="start"/> inside a frame of <paramref name="loop"/> (the next), or now, between frames.</summary>
    private static void StartOnLoop(FrameLoop loop, bool insideAFrame, Action start)
    {
        async SpindleTask InsideTheNextFrame()
        {
            await loop.Yield();
            start();
        }

        if (insideAFrame)
        {
            InsideTheNextFrame().Forget();
        }
        else
        {
            start();
        }
    }

    /// <summary>Runs the next frame of <paramref name="loop"/>, whose begin throws once its count is published.</summary>
    private static void RunAFrameWhoseBeginFails(FrameLoop loop)
    {
        long failing = loop.FrameCount + 1;
        FrameLoop.TestHookFramePublished = l =>
        {
            if (l == loop && l.FrameCount == failing)
            {
                throw new InvalidOperationException("a failure as the frame begins");
            }
        };
        try
        {
            Assert.Throws<InvalidOperationException>(() => loop.RunFrame());
        }
        finally
        {
            FrameLoop.TestHookFramePublished = null;
        }
    }
}
#endif

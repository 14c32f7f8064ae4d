using System;
using System.Collections.Generic;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Frames;

/// <summary>
/// A frame's expiry of its delays: a delay started inside a step of the loop is linked straight into its wheel by the loop
/// thread (which runs the wheels' passes), one started anywhere else goes through the wheel's inbox; the frame merges the
/// runs its wheels fire (each in deadline order, then start order) into start order.
/// </summary>
public sealed class FrameDelayExpiryTests
{
    [Fact]
    public void DelayStartedInAPhase_EarlierThanEveryPendingOne_ResumesInItsFrame()
    {
        // The wheel's clock timer is armed for the 500 ms delay; a 5 ms delay linked from the loop thread must arm it earlier.
        var loop = new FrameLoop { FixedDeltaTime = TimeSpan.FromMilliseconds(1) };
        loop.RunFrame(); // frame 1: 1 ms
        long resumedAt = 0;
        async SpindleTask Far() => await loop.Delay(TimeSpan.FromMilliseconds(500));
        async SpindleTask Near()
        {
            await loop.Yield(); // runs in frame 3's Update (loop time 3 ms), inside the step
            await loop.Delay(TimeSpan.FromMilliseconds(5)); // due at 8 ms: frame 8
            resumedAt = loop.FrameCount;
        }

        Far().Forget();
        loop.RunFrame(); // frame 2: the far delay joins the wheel, which plans its next pass for 501 ms
        Near().Forget();
        loop.RunFrame(); // frame 3: Near's yield runs and starts its delay
        loop.RunFrames(4); // frames 4-7
        Assert.Equal(0, resumedAt);
        loop.RunFrame();
        Assert.Equal(8, resumedAt);
    }

    [Fact]
    public void DelaysStartedInAPhase_AreCountedAtOnce_AndCancelledOnesLeaveAtTheNextFrame()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        using var cts = new CancellationTokenSource();
        long countInside = -1;
        int cancelled = 0;
        async SpindleTask Wait(CancellationToken token)
        {
            try
            {
                await loop.Delay(TimeSpan.FromSeconds(1), token);
            }
            catch (OperationCanceledException)
            {
                cancelled++;
            }
        }

        async SpindleTask Start()
        {
            await loop.Yield();
            for (int i = 0; i < 100; i++)
            {
                Wait(i % 2 == 0 ? cts.Token : default).Forget();
            }
            countInside = loop.PendingTimers;
        }

        Start().Forget();
        loop.RunFrame();
        Assert.Equal(100, countInside);
        cts.Cancel();
        Assert.Equal(50, cancelled);
        loop.RunFrame();
        Assert.Equal(50, loop.PendingTimers);
        loop.RunFrames(200);
        Assert.Equal(0, loop.PendingTimers);
    }

    [Fact]
    public void DelaysStartedInAPhase_OfEveryKind_InAnyDeadlineOrder_ResumeInStartOrder()
    {
        // Many runs: the three wheels fire one after another, each by deadline; the frame that covers every deadline
        // resumes the waits in the order they were started.
        FrameLoop loop = FrameUtil.NewBoundLoop();
        var random = new Random(36);
        var order = new List<int>();
        const int Count = 3_000;
        async SpindleTask Wait(int id, SpindleTask delay)
        {
            await delay;
            order.Add(id);
        }

        async SpindleTask Start()
        {
            await loop.Yield();
            for (int i = 0; i < Count; i++)
            {
                int ms = random.Next(1, 200);
                SpindleTask delay = (i % 3) switch
                {
                    0 => loop.Delay(TimeSpan.FromMilliseconds(ms)),
                    1 => loop.Delay(TimeSpan.FromMilliseconds(ms), FrameTimeKind.Unscaled),
                    _ => loop.DelayFrame(2),
                };
                Wait(i, delay).Forget();
            }
        }

        Start().Forget();
        loop.RunFrame(); // frame 2 (20 ms): the waits start
        loop.RunFrame(TimeSpan.Zero); // frame 3, still at 20 ms: nothing is due
        Assert.Empty(order);
        loop.RunFrame(TimeSpan.FromMilliseconds(300)); // frame 4: everything is due
        Assert.Equal(Enumerable.Range(0, Count), order);
    }

    [Fact]
    public async Task DelaysStartedInAPhaseAndOnAnotherThread_DueInOneFrame_ResumeInStartOrder()
    {
        // The loop thread's delays are in their slot at once; the other thread's join it at the next pass. Started
        // alternately, each side waiting for the other, they resume in the order they were started.
        FrameLoop loop = FrameUtil.NewBoundLoop();
        var order = new List<string>();
        using var loopTurn = new SemaphoreSlim(0);
        using var otherTurn = new SemaphoreSlim(0);
        const int Pairs = 50;
        async SpindleTask Wait(string name, SpindleTask delay)
        {
            await delay;
            order.Add(name);
        }

        Task other = Task.Run(() =>
        {
            for (int i = 0; i < Pairs; i++)
            {
                otherTurn.Wait();
                Wait("other" + i, loop.Delay(TimeSpan.FromMilliseconds(20))).Forget();
                loopTurn.Release();
            }
        });
        async SpindleTask Start()
        {
            await loop.Yield();
            for (int i = 0; i < Pairs; i++)
            {
                Wait("loop" + i, loop.Delay(TimeSpan.FromMilliseconds(20))).Forget();
                otherTurn.Release();
                loopTurn.Wait(); // blocks the loop thread inside the step, while the other thread starts its delay
            }
        }

        Start().Forget();
        loop.RunFrame(); // every delay starts at the same loop time: all due at once
        await other;
        loop.RunFrames(3);
        Assert.Equal(Enumerable.Range(0, Pairs).SelectMany(i => new[] { "loop" + i, "other" + i }), order);
    }
}

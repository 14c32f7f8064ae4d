using System;
using System.Collections.Generic;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Frames;

/// <summary>Continuations run in the order they were queued within a phase (UniTask breaks this, its issue 615), and phases run in order.</summary>
public sealed class FrameOrderTests
{
    [Fact]
    public void Yield_ThousandTasks_ResumeInTheOrderTheyAwaited()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        var order = new List<int>();
        async SpindleTask Wait(int id)
        {
            await loop.Yield();
            order.Add(id);
        }

        for (int i = 0; i < 1000; i++)
        {
            Wait(i).Forget();
        }
        Assert.Empty(order);
        loop.RunFrame();
        Assert.Equal(Enumerable.Range(0, 1000), order);
    }

    [Fact]
    public void MixedAwaits_QueuedToOnePhase_ResumeInCallOrder()
    {
        // Every kind of await that targets Update of frame 2, made between frames 1 and 2, with and without tokens.
        FrameLoop loop = FrameUtil.NewBoundLoop();
        using var cts = new CancellationTokenSource();
        var order = new List<int>();
        async SpindleTask Wait(int id)
        {
            switch (id % 7)
            {
                case 0: await loop.Yield(); break;
                case 1: await loop.NextFrame(); break;
                case 2: await loop.Yield(cts.Token); break;
                case 3: await loop.NextFrame(cts.Token); break;
                case 4: await loop.DelayFrame(0, cts.Token); break;
                case 5: await loop.DelayFrame(1); break;
                default: await loop.NextFrame().AsSpindleTask(); break;
            }
            order.Add(id);
        }

        for (int i = 0; i < 700; i++)
        {
            Wait(i).Forget();
        }
        loop.RunFrame();
        Assert.Equal(Enumerable.Range(0, 700), order);
    }

    [Fact]
    public void LoopingTasks_KeepTheirOrderEveryFrame()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        var order = new List<int>();
        async SpindleTask Loop(int id)
        {
            for (int f = 0; f < 20; f++)
            {
                await loop.NextFrame();
                order.Add(id);
            }
        }

        for (int i = 0; i < 100; i++)
        {
            Loop(i).Forget();
        }
        for (int f = 0; f < 20; f++)
        {
            order.Clear();
            loop.RunFrame();
            Assert.Equal(Enumerable.Range(0, 100), order);
        }
    }

    [Fact]
    public async Task HandOffs_FromAnotherThread_ResumeInTheOrderTheyWerePosted()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        var order = new List<int>();
        async SpindleTask Wait(int id)
        {
            await loop.Yield();
            order.Add(id);
        }

        await TestUtil.WithTimeout(TestUtil.RunOnThread(() =>
        {
            Assert.False(loop.IsLoopThread);
            for (int i = 0; i < 500; i++)
            {
                Wait(i).Forget();
            }
        }));
        loop.RunFrame();
        Assert.Equal(Enumerable.Range(0, 500), order);
    }

    [Fact]
    public void TimedWaitsDueInOneFrame_ResumeInTheOrderTheyWereStarted()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop(); // frame 1 ran: loop time 10 ms
        var order = new List<string>();
        async SpindleTask Wait(string name, SpindleTask delay)
        {
            await delay;
            order.Add(name);
        }

        // Three wheels (scaled, unscaled, frames), fired one after another at a frame's start; within a frame the
        // waits resume in the order they were started, not by wheel or by deadline.
        Wait("120ms", loop.Delay(TimeSpan.FromMilliseconds(120))).Forget();  // due at 130 ms: frame 3
        Wait("30ms", loop.Delay(TimeSpan.FromMilliseconds(30))).Forget();    // due at 40 ms: frame 2
        Wait("frames=2", loop.DelayFrame(2)).Forget();                       // frame 3
        Wait("10ms unscaled", loop.Delay(TimeSpan.FromMilliseconds(10), FrameTimeKind.Unscaled)).Forget(); // frame 2
        Wait("150ms", loop.Delay(TimeSpan.FromMilliseconds(150))).Forget();  // due at 160 ms: frame 3
        Wait("1ms", loop.Delay(TimeSpan.FromMilliseconds(1))).Forget();      // frame 2
        loop.RunFrame(TimeSpan.FromMilliseconds(100)); // frame 2: 110 ms
        Assert.Equal(new[] { "30ms", "10ms unscaled", "1ms" }, order);
        order.Clear();
        loop.RunFrame(TimeSpan.FromMilliseconds(100)); // frame 3: 210 ms
        Assert.Equal(new[] { "120ms", "frames=2", "150ms" }, order);
    }

    [Fact]
    public void Phases_RunInOrder_WithAddedPhasesInTheirPlace()
    {
        var loop = new FrameLoop();
        FramePhase first = loop.AddPhaseBefore(loop.EarlyUpdate, "First");
        FramePhase afterUpdate = loop.AddPhaseAfter(loop.Update, "AfterUpdate");
        FramePhase last = loop.AddPhase("Last");
        Assert.Equal(new[] { "First", "EarlyUpdate", "FixedUpdate", "Update", "AfterUpdate", "LateUpdate", "Last" }, loop.Phases.Select(p => p.Name));
        Assert.Equal(Enumerable.Range(0, 7), loop.Phases.Select(p => p.Index));
        Assert.Same(loop, last.Loop);
        Assert.Equal("AfterUpdate", afterUpdate.ToString());
        loop.RunFrame();

        var seen = new List<string>();
        async SpindleTask Visit()
        {
            // Each Yield goes to a later phase, so one frame visits them all.
            foreach (FramePhase p in loop.Phases)
            {
                await loop.Yield(p);
                seen.Add(loop.Where());
            }
        }

        Visit().Forget();
        loop.RunFrame();
        Assert.Equal(new[] { "2/First", "2/EarlyUpdate", "2/FixedUpdate", "2/Update", "2/AfterUpdate", "2/LateUpdate", "2/Last" }, seen);
        Assert.Null(loop.CurrentPhase);
        Assert.Same(first, loop.Phases[0]);
    }
}

using System;
using System.Threading;

namespace SpindleLib.Tests.Frames;

/// <summary>
/// The frame ring (review53) when the loop changes threads: two threads take turns running frames (a takeover each
/// frame), loop code starts ring waits in each, some in another phase, and a third thread cancels a share of them.
/// Each wait ends once, in the frame and phase it asked for or cancelled, and the ring keeps none at the end.
/// </summary>
public sealed class FrameRingTakeoverTests
{
    [Fact]
    public void RingWaits_WhileTwoThreadsTakeTurnsRunningFrames_ResumeInTheirFrameAndPhase()
    {
        int frames = TestUtil.Stress(300);
        const int PerFrame = 16;
        var loop = new FrameLoop { FixedDeltaTime = FrameUtil.Step };
        int total = frames * PerFrame;
        var outcome = new int[total];
        var wrong = new string?[total];
        var sources = new CancellationTokenSource?[total];
        int started = 0;
        var random = new Random(5301);

        async SpindleTask Wait(int i, int n, FramePhase phase, CancellationToken token)
        {
            long due = loop.FrameCount + n;
            try
            {
                await loop.DelayFrame(n, phase, token);
                if (loop.FrameCount != due || loop.CurrentPhase != phase)
                {
                    wrong[i] = "resumed in " + loop.Where() + ", due " + due + "/" + phase.Name;
                }
                Interlocked.Add(ref outcome[i], 1);
            }
            catch (OperationCanceledException)
            {
                Interlocked.Add(ref outcome[i], 2);
            }
        }

        async SpindleTask Starter()
        {
            // PerFrame waits a frame, each 2 to 63 frames long, alternately in Update and LateUpdate, a third cancelable.
            for (int i = 0; i < total; i++)
            {
                if (i % PerFrame == 0)
                {
                    await loop.NextFrame();
                }
                CancellationToken token = default;
                if (i % 3 == 0)
                {
                    var cts = new CancellationTokenSource();
                    Volatile.Write(ref sources[i], cts);
                    token = cts.Token;
                }
                Wait(i, 2 + random.Next(FrameLoop.FrameRingSize - 2), i % 2 == 0 ? loop.Update : loop.LateUpdate, token).Forget();
                Volatile.Write(ref started, i + 1);
            }
        }

        var turn = new int[1]; // whose turn to run a frame: 0 or 1; 2 when done
        int framesToRun = frames + FrameLoop.FrameRingSize + 2;
        void Runner(int me)
        {
            for (int f = me; f < framesToRun; f += 2)
            {
                SpinWait spin = default;
                while (Volatile.Read(ref turn[0]) != me)
                {
                    spin.SpinOnce();
                }
                if (f == 0)
                {
                    Starter().Forget();
                }
                loop.RunFrame();
                Volatile.Write(ref turn[0], 1 - me);
            }
        }

        var canceller = new Thread(() =>
        {
            var r = new Random(53);
            int next = 0;
            long until = Environment.TickCount64 + 30_000;
            while (next < total && Environment.TickCount64 < until)
            {
                int upTo = Volatile.Read(ref started);
                for (; next < upTo; next++)
                {
                    if (r.Next(2) == 0)
                    {
                        Volatile.Read(ref sources[next])?.Cancel();
                    }
                }
                Thread.Yield();
            }
        });
        var a = new Thread(() => Runner(0));
        var b = new Thread(() => Runner(1));
        canceller.Start();
        a.Start();
        b.Start();
        Assert.True(a.Join(60_000) && b.Join(60_000), "the runners did not finish");
        Assert.True(canceller.Join(60_000));
        for (int i = 0; i < total; i++)
        {
            Assert.True(wrong[i] is null, "wait " + i + ": " + wrong[i]);
            Assert.True(outcome[i] is 1 or 2, "wait " + i + " ended " + outcome[i] + " (1 resumed, 2 cancelled)");
        }
        Assert.Equal(0, loop.PendingTimers);
    }
}

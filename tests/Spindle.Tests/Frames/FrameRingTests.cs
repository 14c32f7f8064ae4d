using System;
using System.Collections.Generic;
using System.Linq;
using System.Threading;

namespace SpindleLib.Tests.Frames;

/// <summary>
/// The loop's frame ring (perf53): a <see cref="FrameLoop.DelayFrame(int, CancellationToken)"/> of 2 to 63 frames
/// started inside a step of the loop waits in the bucket of its frame instead of the frame wheel. These pin what the
/// wheel gave: the exact frame, start order with the wheel's waits due in the same frame, cancellation at once, a
/// combinator letting go, the waiters back in their pool after a frame, and, under threads cancelling and letting go
/// while frames run, every wait ending exactly once.
/// </summary>
public sealed class FrameRingTests
{
    [Fact]
    public void DelayFrame_StartedInsideAFrame_ResumesInExactlyTheFrameAsked_InTheRingAndPastIt()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        int[] counts = [2, 3, 17, FrameLoop.FrameRingSize - 1, FrameLoop.FrameRingSize, 100];
        var resumedAt = new long[counts.Length];
        var resumedIn = new string?[counts.Length];
        long startedAt = 0;

        async SpindleTask Wait(int i)
        {
            await loop.DelayFrame(counts[i], loop.LateUpdate);
            resumedAt[i] = loop.FrameCount;
            resumedIn[i] = loop.CurrentPhase?.Name;
        }

        async SpindleTask Start()
        {
            await loop.Yield();
            startedAt = loop.FrameCount;
            for (int i = 0; i < counts.Length; i++)
            {
                Wait(i).Forget();
            }
        }

        Start().Forget();
        loop.RunFrame();
        Assert.Equal(counts.Length, loop.PendingTimers);
        loop.RunFrames(101);
        for (int i = 0; i < counts.Length; i++)
        {
            Assert.Equal(startedAt + counts[i], resumedAt[i]);
            Assert.Equal("LateUpdate", resumedIn[i]);
        }
        Assert.Equal(0, loop.PendingTimers);
        Assert.Equal(0, loop.FrameRingHeld);
    }

    [Fact]
    public void RingWaits_AndWheelWaitsDueInTheSameFrame_ResumeInTheOrderTheyStarted()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        var order = new List<string>();

        async SpindleTask Wait(string name, SpindleTask wait)
        {
            await wait;
            order.Add(name);
        }

        async SpindleTask Start()
        {
            await loop.Yield();
            Wait("ring 1", loop.DelayFrame(3)).Forget();
            // Started on another thread: counted from the frame it saw begin (this one), through the frame wheel.
            SpindleTask other = default;
            var thread = new Thread(() => other = loop.DelayFrame(3));
            thread.Start();
            thread.Join();
            Wait("wheel, other thread", other).Forget();
            Wait("loop time", loop.Delay(FrameUtil.Step * 3)).Forget();
            Wait("ring 2", loop.DelayFrame(3)).Forget();
            Wait("ring 3", loop.DelayFrame(3)).Forget();
        }

        Start().Forget();
        loop.RunFrames(3);
        Assert.Empty(order);
        loop.RunFrame();
        Assert.Equal(["ring 1", "wheel, other thread", "loop time", "ring 2", "ring 3"], order);
    }

    [Fact]
    public void RingWaits_CancelledBetweenFrames_EndInsideCancel_AndLeaveTheRingAtTheNextFrame()
    {
        const int Waits = 1_000;
        FrameLoop loop = FrameUtil.NewBoundLoop();
        using var cts = new CancellationTokenSource();
        int cancelled = 0;
        int resumed = 0;

        async SpindleTask Wait(int frames)
        {
            try
            {
                await loop.DelayFrame(frames, cts.Token);
                resumed++;
            }
            catch (OperationCanceledException)
            {
                cancelled++;
            }
        }

        async SpindleTask Start()
        {
            await loop.Yield();
            for (int i = 0; i < Waits; i++)
            {
                Wait(2 + i % 60).Forget();
            }
        }

        Start().Forget();
        loop.RunFrame();
        Assert.Equal(Waits, loop.FrameRingHeld);
        cts.Cancel();
        Assert.Equal(Waits, cancelled);
        Assert.Equal(0, loop.PendingTimers);
        loop.RunFrame(); // the sweep: every waiter goes back to its pool now, not at its frame
        Assert.Equal(0, loop.FrameRingHeld);
        Assert.Equal(0, loop.QueuedCount);
        loop.RunFrames(70);
        Assert.Equal(0, resumed);
    }

    [Fact]
    public void ARingWait_LetGoOfByWhenAny_LeavesTheRingAtTheNextFrame_AndNeverResumes()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        var work = new Promise();
        SpindleTask<int> any = default;
        object? waiter = null;

        async SpindleTask Start()
        {
            await loop.Yield();
            SpindleTask frames = loop.DelayFrame(40);
            waiter = frames._source;
            any = SpindleTask.WhenAny(work.Task, frames);
        }

        Start().Forget();
        loop.RunFrame();
        Assert.Equal(1, loop.FrameRingHeld);
        work.SetResult();
        Assert.Equal(0, any.GetAwaiter().GetResult());
        Assert.Equal(0, loop.PendingTimers);
        loop.RunFrame();
        Assert.Equal(0, loop.FrameRingHeld);
        Assert.Null(((FrameWaiter)waiter!).Phase); // recycled: cleared for its pool
        loop.RunFrames(45);
        Assert.Equal(0, loop.QueuedCount);
    }

    /// <summary>
    /// The loop thread starts ring waits inside frames while another thread cancels their tokens and completes the
    /// promises they race in a WhenAny, so cancellations, lettings go, sweeps and due frames meet: every wait ends exactly
    /// once (resumed in its frame, cancelled, or lost its race), none resumes early or late, and the ring keeps none.
    /// </summary>
    [Fact]
    public void RingWaits_CancelledAndLetGoOfFromAnotherThread_WhileFramesRun_EndExactlyOnce_InTheirFrame()
    {
        int frames = TestUtil.Stress(400);
        const int PerFrame = 48;
        FrameLoop loop = FrameUtil.NewBoundLoop();
        int total = frames * PerFrame;
        var outcome = new int[total];           // 1 resumed, 2 cancelled, 4 lost its WhenAny; any other value is an error
        var wrongFrame = new long[total];
        var sources = new CancellationTokenSource?[total];
        var promises = new Promise?[total];
        int started = 0;
        int ended = 0;
        var random = new Random(53);

        async SpindleTask Plain(int i, int n, CancellationToken token)
        {
            long due = loop.FrameCount + n;
            try
            {
                await loop.DelayFrame(n, token);
                if (loop.FrameCount != due)
                {
                    wrongFrame[i] = loop.FrameCount - due;
                }
                Interlocked.Add(ref outcome[i], 1);
            }
            catch (OperationCanceledException)
            {
                Interlocked.Add(ref outcome[i], 2);
            }
            Interlocked.Increment(ref ended);
        }

        async SpindleTask Raced(int i, int n, Promise promise)
        {
            long due = loop.FrameCount + n;
            int winner = await SpindleTask.WhenAny(promise.Task, loop.DelayFrame(n));
            if (winner == 1 && loop.FrameCount != due)
            {
                wrongFrame[i] = loop.FrameCount - due;
            }
            Interlocked.Add(ref outcome[i], winner == 1 ? 1 : 4);
            Interlocked.Increment(ref ended);
        }

        async SpindleTask Starter()
        {
            for (int f = 0; f < frames; f++)
            {
                await loop.NextFrame();
                for (int k = 0; k < PerFrame; k++)
                {
                    int i = f * PerFrame + k;
                    int n = 2 + random.Next(FrameLoop.FrameRingSize - 2);
                    switch (i % 3)
                    {
                        case 0:
                            Plain(i, n, default).Forget();
                            break;
                        case 1:
                            var cts = new CancellationTokenSource();
                            Volatile.Write(ref sources[i], cts);
                            Plain(i, n, cts.Token).Forget();
                            break;
                        default:
                            var promise = new Promise();
                            Volatile.Write(ref promises[i], promise);
                            Raced(i, n, promise).Forget();
                            break;
                    }
                    Volatile.Write(ref started, i + 1);
                }
            }
        }

        var other = new Thread(() =>
        {
            var r = new Random(5353);
            int next = 0;
            while (next < total)
            {
                int upTo = Volatile.Read(ref started);
                for (; next < upTo; next++)
                {
                    if (r.Next(3) != 0)
                    {
                        continue; // a third of the cancelable waits are cancelled, a third of the races decided
                    }
                    Volatile.Read(ref sources[next])?.Cancel();
                    Volatile.Read(ref promises[next])?.SetResult();
                }
                Thread.Yield();
            }
        });
        Starter().Forget();
        other.Start();
        loop.RunUntil(() => Volatile.Read(ref ended) == total, TimeSpan.FromSeconds(TestUtil.StressTimeout(60)));
        other.Join();
        var failures = new List<string>();
        for (int i = 0; i < total; i++)
        {
            int o = outcome[i];
            if (o != 1 && o != 2 && o != 4)
            {
                failures.Add($"wait {i}: outcome {o} (1 resumed, 2 cancelled, 4 lost its race; a sum is an end twice, 0 none)");
            }
            if (wrongFrame[i] != 0)
            {
                failures.Add($"wait {i}: resumed {wrongFrame[i]} frames from its frame");
            }
        }
        loop.RunFrames(2);
        Assert.True(failures.Count == 0, string.Join("\n", failures.GetRange(0, Math.Min(20, failures.Count))));
        Assert.Equal(0, loop.PendingTimers);
        Assert.Equal(0, loop.FrameRingHeld);
        Assert.Equal(0, loop.QueuedCount);
        foreach (CancellationTokenSource? cts in sources)
        {
            cts?.Dispose();
        }
    }

    /// <summary>
    /// A ring wait's link to the next wait in its bucket is also its waiter's pool link (stop 54), and the ring's loop is
    /// its phase's: chains of waits that alternate ring and wheel waits, frame after frame, rent back the waiters the
    /// ring has just let go of (in the same frame) while other buckets hold others, some cancelled, and each wait still
    /// resumes once, in exactly its frame, and the ring ends empty.
    /// </summary>
    [Fact]
    public void RingWaiters_RentedAgainAsTheRingLetsGo_AlternatingWithWheelWaits_ResumeOnceInTheirFrame()
    {
        const int Chains = 200;
        const int Steps = 30;
        FrameLoop loop = FrameUtil.NewBoundLoop();
        using var cts = new CancellationTokenSource();
        var resumed = new int[Chains];
        var cancelled = new int[Chains];
        long wrongFrames = 0;

        async SpindleTask Chain(int i)
        {
            await loop.Yield();
            for (int s = 0; s < Steps; s++)
            {
                int frames = (i + s) % 5 == 0 ? FrameLoop.FrameRingSize + 1 : 2 + (i * 7 + s) % 9; // a wheel wait, or the ring
                CancellationToken token = i % 4 == 0 ? cts.Token : default;
                long due = loop.FrameCount + frames;
                try
                {
                    await loop.DelayFrame(frames, token);
                }
                catch (OperationCanceledException)
                {
                    cancelled[i]++;
                    continue;
                }
                if (loop.FrameCount != due)
                {
                    wrongFrames++;
                }
                resumed[i]++;
            }
        }

        for (int i = 0; i < Chains; i++)
        {
            Chain(i).Forget();
        }
        loop.RunFrames(60);
        cts.Cancel(); // the chains waiting on it go on at once, from inside Cancel, renting waiters the sweep will free
        loop.RunFrames(Steps * (FrameLoop.FrameRingSize + 2));
        Assert.Equal(0, wrongFrames);
        for (int i = 0; i < Chains; i++)
        {
            Assert.Equal(Steps, resumed[i] + cancelled[i]);
            if (i % 4 != 0)
            {
                Assert.Equal(Steps, resumed[i]); // never given the token: every wait resumed
            }
        }
        Assert.True(cancelled.Sum() > Chains / 4, "the cancelled chains' waits ended as cancelled");
        Assert.Equal(0, loop.FrameRingHeld);
        Assert.Equal(0, loop.PendingTimers);
    }
}

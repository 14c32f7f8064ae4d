using System;
using System.Threading;

namespace SpindleLib.Tests.Frames;

/// <summary>
/// Stop 46's review of the loop's hold for exact deadlines (user11, <c>docs/decisions.md</c> section 43): delays held
/// for their deadline (a timer fallen due on the millisecond before it, or a deadline inside the current millisecond),
/// cancelled from another thread while the loop thread begins frames and releases them, and delays started on that
/// other thread: each ends once, either cancelled or resumed, never before its deadline, and the loop keeps none after.
/// </summary>
public sealed class FrameHeldDelayStressTests
{
    [Fact]
    public void HeldDelays_CancelledFromAnotherThread_WhileFramesReleaseThem_EndOnce_NeverEarly_AndLeaveNothing()
    {
        const int Rounds = 150;
        const int PerRound = 64;
        const long Step = 16_666; // 1.6666 ms: no frame begins on a whole millisecond, so many timers are held
        var loop = new FrameLoop();
        loop.RunFrame(TimeSpan.Zero);
        int total = Rounds * PerRound * 2;
        var outcomes = new int[total];      // 1 resumed, 2 cancelled; any other sum is a lost or doubled end
        var early = new long[total];        // loop time at the resume minus the deadline, if negative
        var sources = new CancellationTokenSource[total];
        int ended = 0;

        async SpindleTask Wait(int i, TimeSpan delay, long startTicks, FrameTimeKind kind, CancellationToken token)
        {
            try
            {
                await loop.Delay(delay, kind, token);
                long now = kind == FrameTimeKind.Scaled ? loop.Time.Ticks : loop.UnscaledTime.Ticks;
                if (now < startTicks + delay.Ticks)
                {
                    early[i] = now - (startTicks + delay.Ticks);
                }
                Interlocked.Add(ref outcomes[i], 1);
            }
            catch (OperationCanceledException)
            {
                Interlocked.Add(ref outcomes[i], 2);
            }
            Interlocked.Increment(ref ended);
        }

        var random = new Random(46);
        using var roundStarted = new SemaphoreSlim(0);
        using var otherDone = new SemaphoreSlim(0);
        var other = new Thread(() =>
        {
            var r = new Random(4646);
            for (int round = 0; round < Rounds; round++)
            {
                roundStarted.Wait();
                // Delays started off the loop thread (the loop time they count from is the one this thread sees).
                for (int k = 0; k < PerRound; k++)
                {
                    int i = Rounds * PerRound + round * PerRound + k;
                    sources[i] = new CancellationTokenSource();
                    FrameTimeKind kind = (k & 1) == 0 ? FrameTimeKind.Scaled : FrameTimeKind.Unscaled;
                    long start = kind == FrameTimeKind.Scaled ? loop.Time.Ticks : loop.UnscaledTime.Ticks;
                    Wait(i, TimeSpan.FromTicks(1 + r.Next(40_000)), start, kind, sources[i].Token).Forget();
                }
                // Cancels half of this round's delays of both kinds while the loop thread runs frames.
                for (int k = 0; k < PerRound; k += 2)
                {
                    sources[round * PerRound + k].Cancel();
                    sources[Rounds * PerRound + round * PerRound + k + 1].Cancel();
                    if ((k & 7) == 0)
                    {
                        Thread.Yield();
                    }
                }
                otherDone.Release();
            }
        });
        other.IsBackground = true;
        other.Start();
        for (int round = 0; round < Rounds; round++)
        {
            for (int k = 0; k < PerRound; k++)
            {
                int i = round * PerRound + k;
                sources[i] = new CancellationTokenSource();
                // 1 tick to 4 ms: some inside the current millisecond (held at once), some whose timer falls due on the
                // millisecond before the deadline (held from that frame), some not held at all.
                var delay = TimeSpan.FromTicks(1 + random.Next(40_000));
                FrameTimeKind kind = (k & 1) == 0 ? FrameTimeKind.Scaled : FrameTimeKind.Unscaled;
                long start = kind == FrameTimeKind.Scaled ? loop.Time.Ticks : loop.UnscaledTime.Ticks;
                Wait(i, delay, start, kind, sources[i].Token).Forget();
            }
            roundStarted.Release();
            while (!otherDone.Wait(0))
            {
                loop.RunFrame(TimeSpan.FromTicks(Step));
            }
            loop.RunFrame(TimeSpan.FromTicks(Step));
        }
        Assert.True(other.Join(TimeSpan.FromSeconds(60)));
        loop.RunUntil(() => Volatile.Read(ref ended) == total, maxFrames: 100);
        loop.RunFrame(TimeSpan.FromTicks(Step)); // lets go of the last cancelled ones still held
        for (int i = 0; i < total; i++)
        {
            Assert.True(outcomes[i] is 1 or 2, $"delay {i} ended {(outcomes[i] == 0 ? "never" : "more than once")} (outcome sum {outcomes[i]})");
            Assert.True(early[i] == 0, $"delay {i} resumed {-early[i]} ticks before its deadline");
            sources[i].Dispose();
        }
        Assert.Equal(total, ended);
        Assert.Equal(0, loop.PendingTimers);
    }

    /// <summary>
    /// A scaled delay held for its exact deadline when the time scale drops to 0 stays held (counted in PendingTimers) for
    /// as many frames as loop time stands still, resumes in the first frame whose scaled time reaches the deadline once
    /// the scale is back, and an unscaled one held beside it resumes on its own deadline meanwhile.
    /// </summary>
    [Fact]
    public void AHeldScaledDelay_WaitsThroughTimeScaleZero_AndAnUnscaledOneDoesNot()
    {
        var loop = new FrameLoop();
        loop.RunFrame(TimeSpan.Zero);
        SpindleTask scaled = loop.Delay(TimeSpan.FromTicks(16_700));                          // due at 1.67 ms scaled
        SpindleTask unscaled = loop.Delay(TimeSpan.FromTicks(16_700), FrameTimeKind.Unscaled); // due at 1.67 ms unscaled
        loop.RunFrame(TimeSpan.FromTicks(16_666)); // both timers fall due at 1 ms, short of the deadline: both held
        Assert.Equal(2, loop.PendingTimers);
        loop.TimeScale = 0;
        for (int i = 0; i < 5; i++)
        {
            loop.RunFrame(TimeSpan.FromTicks(16_666));
            Assert.False(scaled.IsCompleted, $"frame {i}: the scaled delay resumed while loop time stood still");
        }
        Assert.True(unscaled.IsCompleted);
        unscaled.GetAwaiter().GetResult();
        Assert.Equal(1, loop.PendingTimers);
        loop.TimeScale = 1;
        loop.RunFrame(TimeSpan.FromTicks(16_666)); // the scale applies from the next frame (the README's rule)
        while (!scaled.IsCompleted && loop.Time.Ticks < 16_700)
        {
            loop.RunFrame(TimeSpan.FromTicks(16_666));
        }
        if (!scaled.IsCompleted)
        {
            loop.RunFrame(TimeSpan.FromTicks(16_666)); // the frame at or past the deadline has begun: this one's phase runs it
        }
        Assert.True(scaled.IsCompleted, $"the scaled delay did not resume by loop time {loop.Time.Ticks} ticks");
        Assert.True(loop.Time.Ticks >= 16_700);
        scaled.GetAwaiter().GetResult();
        Assert.Equal(0, loop.PendingTimers);
    }
}

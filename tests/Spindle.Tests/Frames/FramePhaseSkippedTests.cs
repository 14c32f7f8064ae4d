using System;
using System.Collections.Generic;
using System.Threading;

namespace SpindleLib.Tests.Frames;

/// <summary>
/// A game host that steps physics at a fixed rate beside a variable render frame (50 Hz beside 60 Hz, a hitch's
/// several steps, none while paused) runs <see cref="FrameLoop.FixedUpdate"/> zero, one or several times a frame
/// (a seventeenth user's review, an action game on the frame loop). The model tests run every phase at least once a
/// frame; these pin what a frame that skips a phase does: every await on it resumes at its first run at or after the
/// frame its rule names, once, first queued first run, and a cancelled one never resumes there.
/// </summary>
public sealed class FramePhaseSkippedTests
{
    /// <summary>FixedUpdate's runs in frames 1 to 8: frames 2, 3, 5 and 7 have no physics step.</summary>
    private static readonly int[] s_fixedRuns = { 1, 0, 0, 2, 0, 1, 0, 3 };

    private static readonly TimeSpan s_frame = TimeSpan.FromMilliseconds(16);

    [Theory]
    [InlineData(false)]
    [InlineData(true)] // a cancelable token: a pooled waiter, not the awaiting method's box, is queued
    public void AwaitsOnAPhaseTheHostSkips_ResumeAtItsNextRun_OnceAndInOrder(bool withToken)
    {
        var loop = new FrameLoop();
        using var cts = new CancellationTokenSource();
        using var other = new CancellationTokenSource();
        CancellationToken token = withToken ? cts.Token : default;
        int run = -1;
        bool ready = false;
        var log = new List<string>();
        void Note(string name) => log.Add(name + "@" + loop.FrameCount + "/" + (loop.CurrentPhase?.Name ?? "none") + "/" + run);

        async SpindleTask Wait(string name, Func<SpindleTask> wait)
        {
            await wait();
            Note(name);
        }

        async SpindleTask Canceled()
        {
            bool canceled = await loop.NextFrame(loop.FixedUpdate, other.Token).SuppressCancellationThrow();
            Note(canceled ? "canceled" : "not canceled");
        }

        async SpindleTask Script()
        {
            await loop.Yield(loop.Update, token); // frame 1's Update: FixedUpdate has run once, frame 2 runs it not at all
            Assert.Equal(1, loop.FrameCount);
            Wait("yield", () => loop.Yield(loop.FixedUpdate, token)).Forget();
            Wait("next", () => loop.NextFrame(loop.FixedUpdate, token)).Forget();
            Wait("delayframe", () => loop.DelayFrame(2, loop.FixedUpdate, token)).Forget();
            // Started at 16 ms of loop time: due at 36 ms, which frame 3 (48 ms) reaches, but frame 3 skips FixedUpdate.
            Wait("delay", () => loop.Delay(TimeSpan.FromMilliseconds(20), FrameTimeKind.Scaled, loop.FixedUpdate, token)).Forget();
            Wait("waituntil", () => loop.WaitUntil(() => ready, loop.FixedUpdate, token)).Forget();
            Canceled().Forget();
            await loop.NextFrame(loop.Update, token);
            ready = true;          // frame 2: the predicate holds from now on, and no run of FixedUpdate has seen it yet
            other.Cancel();        // ends its wait here, inside Cancel(), in frame 2's Update
            await loop.NextFrame(loop.FixedUpdate, token);
            Note("script");        // frame 4's first run, behind the waits queued before it
            Wait("yield again", () => loop.Yield(loop.FixedUpdate, token)).Forget();        // frame 4's second run
            Wait("next again", () => loop.NextFrame(loop.FixedUpdate, token)).Forget();     // frame 5 skips it: frame 6
            Wait("delayframe again", () => loop.DelayFrame(3, loop.FixedUpdate, token)).Forget(); // frame 7 skips it: 8
        }

        SpindleTask script = Script();
        for (int f = 0; f < s_fixedRuns.Length; f++)
        {
            loop.BeginFrame(s_frame);
            loop.RunPhase(loop.EarlyUpdate);
            for (run = 0; run < s_fixedRuns[f]; run++)
            {
                loop.RunPhase(loop.FixedUpdate);
            }
            run = -1;
            loop.RunPhase(loop.Update);
            loop.RunPhase(loop.LateUpdate);
        }

        Assert.True(script.IsCompleted);
        script.GetAwaiter().GetResult();
        Assert.Equal(
            new[]
            {
                "canceled@2/Update/-1",
                // Frame 4's first run, in queue order: the waits queued in frame 1, the script's NextFrame of frame 2,
                // then the two timed waits, which joined the phase when they fell due in frame 3 (in start order).
                "yield@4/FixedUpdate/0",
                "next@4/FixedUpdate/0",
                "waituntil@4/FixedUpdate/0",
                "script@4/FixedUpdate/0",
                "delayframe@4/FixedUpdate/0",
                "delay@4/FixedUpdate/0",
                "yield again@4/FixedUpdate/1",
                "next again@6/FixedUpdate/0",
                "delayframe again@8/FixedUpdate/0",
            },
            log.ToArray());
        Assert.Equal(0, loop.QueuedCount);
        Assert.Equal(0, loop.PendingTimers);
    }
}

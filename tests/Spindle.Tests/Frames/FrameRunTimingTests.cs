using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Frames;

/// <summary>
/// <see cref="FrameLoop.Run"/>'s fixed timestep, over short real-time windows: every frame advances loop time by exactly
/// 1 / fps (times the time scale for scaled time), frames start roughly at that rate (generous bounds: the machine is
/// shared; no speed is claimed), cancellation ends it promptly even in the middle of a long wait, and continuations that
/// throw do not stop it.
/// </summary>
public sealed class FrameRunTimingTests
{
    private readonly record struct Seen(long Frame, long Delta, long UnscaledDelta, long Time, long UnscaledTime, bool OnLoopThread);

    /// <summary>Records every frame's time properties, from Update, until <paramref name="stop"/> is set.</summary>
    private static async SpindleTask Record(FrameLoop loop, List<Seen> seen, StrongBox stop)
    {
        await loop.SwitchTo();
        while (!Volatile.Read(ref stop.Value))
        {
            seen.Add(new Seen(loop.FrameCount, loop.DeltaTime.Ticks, loop.UnscaledDeltaTime.Ticks, loop.Time.Ticks, loop.UnscaledTime.Ticks, loop.IsLoopThread));
            await loop.NextFrame();
        }
    }

    private sealed class StrongBox
    {
        public bool Value;
    }

    [Fact]
    public async Task Run_EachFrameAdvancesLoopTimeByTheStep_AtRoughlyTheRate_AndTimeScaleAppliesFromTheNextFrame()
    {
        const double Fps = 100;
        const long Step = TimeSpan.TicksPerSecond / 100; // 10 ms
        var loop = new FrameLoop();
        var seen = new List<Seen>();
        var stop = new StrongBox();
        using var cts = new CancellationTokenSource();
        Record(loop, seen, stop).Forget();
        // A thread that only sleeps one step at a time, beside the loop: how many wake-ups of one step the machine
        // allowed in the same window. The loop is held to that, not to the clock: on a loaded machine each wake-up
        // comes late, and the loop ran 14 frames in 0.848 s at 100 fps (a quarter of the rate was asked of it).
        int sleeperSteps = 0;
        var sleeperStop = new StrongBox();
        Task sleeper = TestUtil.RunOnThread(() =>
        {
            while (!Volatile.Read(ref sleeperStop.Value))
            {
                Thread.Sleep(TimeSpan.FromTicks(Step));
                Volatile.Write(ref sleeperSteps, sleeperSteps + 1);
            }
        }, "one-step sleeper");
        var clock = Stopwatch.StartNew();
        Task run = loop.Run(Fps, cts.Token);
        int sleeperAtStart = Volatile.Read(ref sleeperSteps);
        await Task.Delay(400);
        long frameBeforeChange = loop.FrameCount;
        loop.TimeScale = 0.5; // from another thread, while it runs
        long frameAtChange = loop.FrameCount;
        await Task.Delay(400);
        int sleeperAtEnd = Volatile.Read(ref sleeperSteps);
        cts.Cancel();
        await TestUtil.WithTimeout(run);
        double elapsed = clock.Elapsed.TotalSeconds;
        Volatile.Write(ref sleeperStop.Value, true);
        await TestUtil.WithTimeout(sleeper);
        Assert.Equal(TaskStatus.RanToCompletion, run.Status);
        long frames = loop.FrameCount;
        int slept = sleeperAtEnd - sleeperAtStart;

        // Roughly the rate: never ahead of the schedule (it is absolute, the first frame at once), and not hopelessly
        // behind what the machine allowed (a quarter of the sleeper's wake-ups: a loop that waited four steps a frame
        // fails it, a loaded machine does not).
        Assert.True(frames <= elapsed * Fps + 2, $"{frames} frames in {elapsed:F3} s at {Fps} fps: ahead of the schedule");
        Assert.True(frames >= slept / 4, $"{frames} frames in {elapsed:F3} s at {Fps} fps, while a thread sleeping one step at a time woke {slept} times");

        // Every frame: exactly one step of unscaled time; the scale in force when it began.
        Assert.NotEmpty(seen);
        bool halved = false;
        for (int i = 0; i < seen.Count; i++)
        {
            Seen s = seen[i];
            Assert.True(s.OnLoopThread);
            Assert.Equal(i == 0 ? s.Frame : seen[i - 1].Frame + 1, s.Frame);
            Assert.Equal(Step, s.UnscaledDelta);
            Assert.Equal(s.Frame * Step, s.UnscaledTime);
            if (s.Delta == Step / 2)
            {
                halved = true;
                Assert.True(s.Frame > frameBeforeChange, $"frame {s.Frame} ran at half speed, the scale changed after frame {frameBeforeChange} began");
            }
            else
            {
                Assert.False(halved, $"frame {s.Frame} ran at full speed after a frame at half speed");
                Assert.Equal(Step, s.Delta);
                Assert.True(s.Frame <= frameAtChange, $"frame {s.Frame} ran at full speed, the scale changed before frame {frameAtChange + 1} began");
            }
            Assert.Equal(i == 0 ? s.Time : seen[i - 1].Time + s.Delta, s.Time);
        }
        Assert.True(halved);
        Assert.Equal(loop.UnscaledTime.Ticks, frames * Step);
        Volatile.Write(ref stop.Value, true);
    }

    [Fact]
    public async Task Run_CancelledDuringALongWait_StopsPromptly()
    {
        var loop = new FrameLoop();
        using var cts = new CancellationTokenSource();
        using var firstFrame = new SemaphoreSlim(0);
        loop.Yield().GetAwaiter().UnsafeOnCompleted(() => firstFrame.Release()); // a hand-off: runs in frame 1
        // A frame every 100 s: a cancellation that did not end the wait would be seen only then, so the suite's default
        // bound tells "promptly" from "at the next frame" on a loaded machine too (it was 3 s against a 10 s frame).
        Task run = loop.Run(0.01, cts.Token);
        Assert.True(await firstFrame.WaitAsync(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)));
        var clock = Stopwatch.StartNew();
        cts.Cancel();
        await TestUtil.WithTimeout(run);
        Assert.True(clock.Elapsed < TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds), $"Run took {clock.Elapsed.TotalMilliseconds} ms to stop");
        Assert.Equal(1, loop.FrameCount);
        Assert.Equal(TimeSpan.FromSeconds(100), loop.UnscaledDeltaTime);
        Assert.Equal(TimeSpan.FromSeconds(100), loop.Time);
    }

    [Fact]
    public async Task Run_ContinuationsThatThrow_DoNotStopIt()
    {
        var loop = new FrameLoop();
        using var cts = new CancellationTokenSource();
        var watch = UnobservedReports.Start(UnobservedReports.Own.Message("frame-run-timing boom")); // this test's marker
        using (watch)
        {
            Task run = loop.Run(200, cts.Token);
            for (int i = 0; i < 5; i++)
            {
                loop.Yield().GetAwaiter().UnsafeOnCompleted(static () => throw new InvalidOperationException("frame-run-timing boom"));
            }
            async SpindleTask ThrowAfterADelay()
            {
                await loop.Delay(TimeSpan.FromMilliseconds(20), FrameTimeKind.Unscaled);
                throw new InvalidOperationException("from a delay");
            }

            SpindleTask faulted = ThrowAfterADelay();
            var ex = await Assert.ThrowsAsync<InvalidOperationException>(() => TestUtil.WithTimeout(faulted));
            Assert.Equal("from a delay", ex.Message);
            long after = loop.FrameCount;
            var clock = Stopwatch.StartNew();
            while (loop.FrameCount < after + 5 && clock.Elapsed < TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds))
            {
                await Task.Delay(5);
            }
            Assert.True(loop.FrameCount >= after + 5, "the loop stopped after continuations threw");
            Assert.False(run.IsCompleted);
            Assert.Equal(5, watch.Reports.Count);
            cts.Cancel();
            await TestUtil.WithTimeout(run);
            Assert.Equal(TaskStatus.RanToCompletion, run.Status);
        }
    }

    /// <summary>
    /// "A loop that falls more than a few frames behind drops the backlog instead of running frames back to back": after a
    /// frame that stalls for 40 frames' worth of time, the loop does not replay the 40 frames at once, and each of those
    /// frames still advances loop time by exactly one step (loop time does not jump to catch up either).
    /// </summary>
    [Fact]
    public async Task Run_AfterAStall_DropsTheBacklog_AndStillStepsExactly()
    {
        const double Fps = 100;
        const long Step = TimeSpan.TicksPerSecond / 100;
        var loop = new FrameLoop();
        using var cts = new CancellationTokenSource();
        var starts = new List<(long Frame, long Timestamp, long UnscaledTime)>();
        var stop = new StrongBox();
        long stallEnded = 0;
        async SpindleTask Watch()
        {
            await loop.SwitchTo();
            int n = 0;
            while (!Volatile.Read(ref stop.Value))
            {
                starts.Add((loop.FrameCount, Stopwatch.GetTimestamp(), loop.UnscaledTime.Ticks));
                if (++n == 10)
                {
                    Thread.Sleep(400); // 40 frames' worth
                    Volatile.Write(ref stallEnded, Stopwatch.GetTimestamp());
                }
                await loop.NextFrame();
            }
        }

        Watch().Forget();
        Task run = loop.Run(Fps, cts.Token);
        var clock = Stopwatch.StartNew();
        while (Volatile.Read(ref stallEnded) == 0 && clock.Elapsed < TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds))
        {
            await Task.Delay(10);
        }
        await Task.Delay(300);
        cts.Cancel();
        await TestUtil.WithTimeout(run);
        Volatile.Write(ref stop.Value, true);
        long end = Volatile.Read(ref stallEnded);
        Assert.NotEqual(0, end);
        long window = Stopwatch.Frequency * 50 / 1000; // the 50 ms after the stall: 5 frames on schedule
        int burst = starts.FindAll(s => s.Timestamp >= end && s.Timestamp < end + window).Count;
        Assert.True(burst <= 12, $"{burst} frames in the 50 ms after a 400 ms stall: the backlog was replayed");
        foreach (var s in starts)
        {
            Assert.Equal(s.Frame * Step, s.UnscaledTime);
        }
    }

    /// <summary>
    /// A delay started on another thread while Run runs resumes on the loop thread, in the first frame whose unscaled time
    /// reaches the deadline counted from the loop time at the call (somewhere between the frame counts read around it).
    /// A delay started off the loop thread completes only once it is awaited, so a test thread preempted between the call
    /// and its await (65 ms, 13 frames, in a suite run beside two CPU hogs: "resumed in frame 21, a frame late for its
    /// deadline 373333") resumes in the frame after its await, wherever the deadline was: such a round proves only that it
    /// resumed by then, and the test goes on until five rounds awaited before their deadline's frame.
    /// </summary>
    [Fact]
    public async Task Run_DelayFromAnotherThread_ResumesOnTheLoopThread_InItsFrame()
    {
        const long Step = TimeSpan.TicksPerSecond / 200; // 5 ms
        const long Ms = TimeSpan.TicksPerMillisecond;
        var loop = new FrameLoop();
        using var cts = new CancellationTokenSource();
        Task run = loop.Run(200, cts.Token);
        try
        {
            int inTime = 0;
            for (int i = 0; i < 100 && inTime < 5; i++)
            {
                long delay = (17 + 6 * (i % 5)) * Ms + 3_333;
                long before = loop.FrameCount;
                SpindleTask wait = loop.Delay(TimeSpan.FromTicks(delay), FrameTimeKind.Unscaled);
                long after = loop.FrameCount;
                long resumedIn = 0;
                bool onLoop = false;
                async SpindleTask Watch()
                {
                    await wait;
                    resumedIn = loop.FrameCount;
                    onLoop = loop.IsLoopThread;
                }

                SpindleTask watching = Watch();
                long awaitedBy = loop.FrameCount; // the await has registered: it was made in this frame or before
                await TestUtil.WithTimeout(watching);
                Assert.True(onLoop);
                long earliest = before * Step + delay;
                long latest = after * Step + delay;
                Assert.True(resumedIn * Step >= earliest, $"resumed in frame {resumedIn} ({resumedIn * Step} ticks), before its deadline {earliest}");
                if (awaitedBy * Step < earliest)
                {
                    // Awaited before any frame that could reach the deadline began: it resumes in the deadline's frame.
                    Assert.True((resumedIn - 1) * Step < latest, $"resumed in frame {resumedIn} ({resumedIn * Step} ticks), a frame late for its deadline {latest} (awaited by frame {awaitedBy})");
                    inTime++;
                }
                else
                {
                    Assert.True(resumedIn <= Math.Max(awaitedBy + 1, (latest + Step - 1) / Step),
                        $"resumed in frame {resumedIn}, awaited by frame {awaitedBy} with its deadline {latest} ticks");
                }
            }
            Assert.True(inTime == 5, $"only {inTime} of 100 rounds awaited their delay before its deadline's frame");
        }
        finally
        {
            cts.Cancel();
            await TestUtil.WithTimeout(run);
        }
    }

    /// <summary>
    /// Run's step is 1 / fps; FixedDeltaTime is RunFrame()'s step, and Run leaves it alone: after Run stops, RunFrame()
    /// advances by FixedDeltaTime again, and loop time carries on from where Run left it.
    /// </summary>
    [Fact]
    public async Task Run_StepIsOneOverFps_FixedDeltaTimeIsRunFramesStep_AndTimeCarriesOn()
    {
        var loop = new FrameLoop { FixedDeltaTime = TimeSpan.FromMilliseconds(7) };
        loop.RunFrame(); // 7 ms
        using var cts = new CancellationTokenSource();
        using var frames = new SemaphoreSlim(0);
        TimeSpan fixedSeenInRun = default, deltaSeenInRun = default;
        async SpindleTask InRun()
        {
            await loop.SwitchTo(); // a hand-off: Run's first frame
            deltaSeenInRun = loop.DeltaTime;
            fixedSeenInRun = loop.FixedDeltaTime;
            frames.Release();
        }

        Task run = loop.Run(50, cts.Token); // 20 ms
        // From a worker, never this thread: this thread ran the 7 ms frame, so until Run's frames run elsewhere it is
        // still the loop thread, and a SwitchTo from it would complete at once, in no frame of Run's (seen on a loaded
        // machine: a delta of 7 ms).
        await TestUtil.WithTimeout(Spindle.Run(InRun));
        cts.Cancel();
        await TestUtil.WithTimeout(run);
        Assert.Equal(TimeSpan.FromMilliseconds(20), deltaSeenInRun);
        Assert.Equal(TimeSpan.FromMilliseconds(7), fixedSeenInRun); // Run does not change it
        long runFrames = loop.FrameCount - 1;
        Assert.True(runFrames >= 1);
        Assert.Equal(TimeSpan.FromMilliseconds(7 + 20 * runFrames), loop.UnscaledTime);
        loop.RunFrame();
        Assert.Equal(TimeSpan.FromMilliseconds(7), loop.DeltaTime);
        Assert.Equal(TimeSpan.FromMilliseconds(14 + 20 * runFrames), loop.Time);
    }

    /// <summary>
    /// A frame rate whose timestep is longer than the whole TimeSpan range (1 / 1e-300 s) cannot advance loop time by
    /// "exactly 1 / fps": it is bad input, and gets an immediate ArgumentOutOfRangeException like 0, NaN and infinity.
    /// Accepted, the first frame moves loop time to TimeSpan.MaxValue (and the next one wraps it negative). The other end
    /// (found by a review of the time layer, 2026-11-28): a frame rate above 10,000,000 has a timestep shorter than a
    /// TimeSpan tick (100 ns), which loop time cannot take either. Accepted, every frame moved loop time by one tick: at
    /// 50,000,000 frames a second, five times the 20 ns timestep asked for.
    /// </summary>
    [Theory]
    [InlineData(1e-300)]
    [InlineData(double.Epsilon)]
    [InlineData(1e-12)] // a step of about 31,700 years: more than TimeSpan.MaxValue
    [InlineData(1.5e7)]
    [InlineData(5e7)]
    [InlineData(double.MaxValue)]
    public async Task Run_FpsWhoseStepDoesNotFitInATimeSpan_IsRefusedAtOnce(double fps)
    {
        var loop = new FrameLoop();
        using var cts = new CancellationTokenSource();
        Task? run = null;
        try
        {
            Assert.Throws<ArgumentOutOfRangeException>(() => { run = loop.Run(fps, cts.Token); });
        }
        finally
        {
            cts.Cancel();
            if (run is not null)
            {
                await TestUtil.WithTimeout(run);
            }
        }
        Assert.Equal(0, loop.FrameCount);
        Assert.Equal(TimeSpan.Zero, loop.UnscaledTime);
    }

    [Fact]
    public async Task Run_AtTenMillionFps_StepsLoopTimeByOneTick()
    {
        var loop = new FrameLoop();
        using var cts = new CancellationTokenSource();
        Task run = loop.Run(1e7, cts.Token); // a 100 ns timestep: the shortest there is
        TestUtil.SpinUntil(() => loop.FrameCount >= 3);
        cts.Cancel();
        await TestUtil.WithTimeout(run);
        Assert.Equal(TimeSpan.FromTicks(loop.FrameCount), loop.UnscaledTime);
    }
}

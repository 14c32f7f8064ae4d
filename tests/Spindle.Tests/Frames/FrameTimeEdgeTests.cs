using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Frames;

/// <summary>
/// The edges of loop time: inputs the loop accepts (a finite time scale, a delta time, a fixed timestep) whose product or
/// sum no longer fits in a <see cref="TimeSpan"/>, and bad inputs, which must throw at once and change nothing.
/// Loop time is documented as the sum of the frames' delta times (<see cref="FrameLoop.Time"/>,
/// <see cref="FrameLoop.UnscaledTime"/>), and it only moves forward ("loop time only moves forward", says the delta
/// check): a frame either keeps that, or is refused with an exception before it changes anything.
/// </summary>
public sealed class FrameTimeEdgeTests
{
    /// <summary>Runs a frame and checks that it either kept the time properties consistent, or threw and changed nothing.</summary>
    private static void FrameKeepsTimeOrRefuses(FrameLoop loop, TimeSpan delta)
    {
        long frame = loop.FrameCount;
        TimeSpan time = loop.Time, unscaled = loop.UnscaledTime;
        Exception? error = Record.Exception(() => loop.RunFrame(delta));
        if (error is not null)
        {
            Assert.True(error is ArgumentOutOfRangeException or OverflowException, "an unclear exception: " + error);
            Assert.Equal(frame, loop.FrameCount);
            Assert.Equal(time, loop.Time);
            Assert.Equal(unscaled, loop.UnscaledTime);
            return;
        }
        Assert.Equal(frame + 1, loop.FrameCount);
        Assert.True(loop.DeltaTime >= TimeSpan.Zero, $"DeltaTime {loop.DeltaTime.Ticks} ticks is negative");
        Assert.True(loop.UnscaledTime >= unscaled, $"UnscaledTime went back from {unscaled.Ticks} to {loop.UnscaledTime.Ticks} ticks");
        Assert.True(loop.Time >= time, $"Time went back from {time.Ticks} to {loop.Time.Ticks} ticks (DeltaTime {loop.DeltaTime.Ticks}, scale {loop.TimeScale})");
        Assert.Equal(unscaled + delta, loop.UnscaledTime);
        Assert.Equal(time + loop.DeltaTime, loop.Time);
    }

    [Theory]
    [InlineData(1e15, 1000.0)]            // a finite scale times a one-second frame: 1e22 ticks
    [InlineData(1e9, 3_600_000.0)]        // a billion times an hour
    [InlineData(double.MaxValue, 16.0)]   // the largest finite scale the setter accepts
    public void HugeTimeScale_TimeNeverGoesBack_OrTheFrameIsRefused(double scale, double deltaMs)
    {
        FrameLoop loop = FrameUtil.NewBoundLoop(); // Time 10 ms
        loop.TimeScale = scale; // accepted: "zero or a finite positive number"
        FrameKeepsTimeOrRefuses(loop, TimeSpan.FromMilliseconds(deltaMs));
        FrameKeepsTimeOrRefuses(loop, TimeSpan.FromMilliseconds(deltaMs));
    }

    [Fact]
    public void HugeDeltaTimes_UnscaledTimeNeverGoesBack_OrTheFrameIsRefused()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        loop.TimeScale = 0; // only unscaled time moves
        FrameKeepsTimeOrRefuses(loop, TimeSpan.MaxValue - TimeSpan.FromSeconds(1)); // accepted: not negative
        FrameKeepsTimeOrRefuses(loop, TimeSpan.FromSeconds(2));
    }

    [Fact]
    public void HugeFixedDeltaTime_TimeNeverGoesBack_OrTheFrameIsRefused()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        loop.FixedDeltaTime = TimeSpan.MaxValue; // accepted: "The value is negative" is the only documented refusal
        for (int i = 0; i < 2; i++)
        {
            long frame = loop.FrameCount;
            TimeSpan time = loop.Time;
            Exception? error = Record.Exception(() => loop.RunFrame());
            if (error is not null)
            {
                Assert.True(error is ArgumentOutOfRangeException or OverflowException, "an unclear exception: " + error);
                Assert.Equal(frame, loop.FrameCount);
                Assert.Equal(time, loop.Time);
                continue;
            }
            Assert.True(loop.Time >= time, $"Time went back from {time.Ticks} to {loop.Time.Ticks} ticks");
        }
    }

    /// <summary>
    /// A refused frame changes nothing, and that includes the loop thread: a thread whose frame was refused has run no
    /// frame and must not take the loop over (an await of <see cref="FrameLoop.SwitchTo(CancellationToken)"/> there would
    /// resume at once, on a thread that runs no frames, while the real loop thread runs them).
    /// </summary>
    [Fact]
    public async Task RefusedFrame_OnAnotherThread_DoesNotMakeItTheLoopThread()
    {
        string? failure = null;
        await TestUtil.WithTimeout(TestUtil.RunOnThread(() =>
        {
            FrameLoop loop = FrameUtil.NewBoundLoop(); // this thread is the loop thread
            var other = new Thread(() =>
            {
                Exception? frame = Record.Exception(() => loop.RunFrame(TimeSpan.MaxValue));
                Exception? begin = Record.Exception(() => loop.BeginFrame(TimeSpan.MaxValue));
                if (frame is not ArgumentOutOfRangeException || begin is not ArgumentOutOfRangeException)
                {
                    failure = $"the frames were not refused: {frame?.GetType().Name ?? "none"}, {begin?.GetType().Name ?? "none"}";
                }
                else if (loop.IsLoopThread || loop.SwitchTo().GetAwaiter().IsCompleted)
                {
                    failure = "a thread whose frames were refused became the loop thread";
                }
            }) { IsBackground = true };
            other.Start();
            other.Join();
            if (failure is null && !loop.IsLoopThread)
            {
                failure = "the thread that ran the loop's frames is no longer its loop thread";
            }
            loop.RunFrame(); // and it goes on running them
        }));
        Assert.Null(failure);
    }

    /// <summary>
    /// A scaled delay waits on the scaled clock: a frame that wraps scaled time must not strand it (or fire it early).
    /// After a wrap, every later frame begins with scaled time far below its deadline, so it never resumes.
    /// </summary>
    [Fact]
    public void HugeTimeScale_APendingScaledDelay_StillResumesOnceTimePassesItsDeadline()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        long resumedIn = 0;
        async SpindleTask Wait()
        {
            await loop.Delay(TimeSpan.FromSeconds(1));
            resumedIn = loop.FrameCount;
        }

        Wait().Forget();
        loop.TimeScale = 1e15;
        Exception? error = Record.Exception(() => loop.RunFrame(TimeSpan.FromSeconds(1)));
        loop.TimeScale = 1;
        for (int i = 0; i < 200 && resumedIn == 0; i++)
        {
            loop.RunFrame(TimeSpan.FromMilliseconds(10)); // at most 2 s of scaled time, whatever happened above
        }
        Assert.True(resumedIn != 0, $"the 1 s scaled delay never resumed (the huge frame {(error is null ? "ran" : "threw " + error.GetType().Name)}; Time is now {loop.Time.Ticks} ticks)");
    }

    /// <summary>
    /// "Never early", at the top of the range: loop time is taken as far towards <see cref="TimeSpan.MaxValue"/> as the
    /// loop accepts (a frame it refuses must throw ArgumentOutOfRangeException); a one-day delay started there must not
    /// resume while loop time is short of its deadline (the deadline overflowed, and it resumed at once).
    /// </summary>
    [Theory]
    [InlineData(FrameTimeKind.Unscaled)]
    [InlineData(FrameTimeKind.Scaled)]
    public void Delay_NearTheEndOfTheTimeSpanRange_DoesNotResumeEarly(FrameTimeKind kind)
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        TimeSpan Now() => kind == FrameTimeKind.Scaled ? loop.Time : loop.UnscaledTime;
        for (long step = long.MaxValue - loop.UnscaledTime.Ticks; step >= TimeSpan.TicksPerMinute;)
        {
            try
            {
                loop.RunFrame(TimeSpan.FromTicks(step));
                step = long.MaxValue - loop.UnscaledTime.Ticks;
            }
            catch (ArgumentOutOfRangeException)
            {
                step /= 2;
            }
        }
        TimeSpan start = Now();
        SpindleTask delay;
        try
        {
            delay = loop.Delay(TimeSpan.FromDays(1), kind);
        }
        catch (ArgumentOutOfRangeException)
        {
            return; // refusing the delay outright is a clear answer too
        }
        for (int i = 0; i < 20; i++)
        {
            try
            {
                loop.RunFrame(i < 2 ? TimeSpan.Zero : TimeSpan.FromMilliseconds(1));
            }
            catch (ArgumentOutOfRangeException)
            {
                break; // the loop will go no further
            }
            Assert.True(Now() >= start, "loop time went back");
            Assert.False(delay.IsCompleted, $"a 1-day delay started at {start.Ticks} ticks resumed in frame {loop.FrameCount} at loop time {Now().Ticks} ticks, {(Now() - start).TotalMilliseconds} ms later");
        }
    }

    [Fact]
    public void BadInput_ThrowsAtOnce_AndChangesNothing()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop(); // frame 1, 10 ms
        loop.TimeScale = 0.5;
        loop.RunFrame(); // frame 2: Time 15 ms, UnscaledTime 20 ms
        bool yielded = false;
        async SpindleTask Waiting()
        {
            await loop.Yield();
            yielded = true;
        }

        Waiting().Forget();
        SpindleTask delay = loop.Delay(TimeSpan.FromMilliseconds(5), FrameTimeKind.Unscaled); // due at 25 ms

        void Unchanged()
        {
            Assert.Equal(2, loop.FrameCount);
            Assert.Equal(TimeSpan.FromMilliseconds(15), loop.Time);
            Assert.Equal(TimeSpan.FromMilliseconds(20), loop.UnscaledTime);
            Assert.Equal(TimeSpan.FromMilliseconds(5), loop.DeltaTime);
            Assert.Equal(TimeSpan.FromMilliseconds(10), loop.UnscaledDeltaTime);
            Assert.Equal(0.5, loop.TimeScale);
            Assert.Equal(FrameUtil.Step, loop.FixedDeltaTime);
            Assert.False(yielded);
            Assert.False(delay.IsCompleted);
            Assert.Null(loop.CurrentPhase);
        }

        foreach (double bad in new[] { -1.0, -double.Epsilon, double.NaN, double.PositiveInfinity, double.NegativeInfinity })
        {
            Assert.Throws<ArgumentOutOfRangeException>(() => loop.TimeScale = bad);
            Unchanged();
        }
        foreach (double bad in new[] { 0.0, -0.0, -60.0, double.NaN, double.PositiveInfinity, double.NegativeInfinity })
        {
            Assert.Throws<ArgumentOutOfRangeException>(() => { _ = loop.Run(bad, CancellationToken.None); });
            Unchanged();
        }
        foreach (TimeSpan bad in new[] { TimeSpan.FromTicks(-1), TimeSpan.MinValue, TimeSpan.FromDays(-1) })
        {
            Assert.Throws<ArgumentOutOfRangeException>(() => loop.RunFrame(bad));
            Unchanged();
            Assert.Throws<ArgumentOutOfRangeException>(() => loop.BeginFrame(bad));
            Unchanged();
            Assert.Throws<ArgumentOutOfRangeException>(() => loop.FixedDeltaTime = bad);
            Unchanged();
        }
        Assert.True(loop.IsLoopThread); // a refused Run did not take the loop

        loop.RunFrame(); // frame 3 at scale 0.5: 20 ms scaled, 30 ms unscaled
        Assert.True(yielded);
        Assert.True(delay.IsCompleted);
        delay.GetAwaiter().GetResult();
        Assert.Equal(TimeSpan.FromMilliseconds(20), loop.Time);
        Assert.Equal(TimeSpan.FromMilliseconds(30), loop.UnscaledTime);
    }

    [Fact]
    public void TimeScale_ChangedDuringAFrame_AppliesFromTheNextFrame()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop(); // 10 ms
        var seen = new System.Collections.Generic.List<(long Frame, TimeSpan Delta, TimeSpan Time)>();
        async SpindleTask Body()
        {
            await loop.Yield(loop.EarlyUpdate); // frame 2
            loop.TimeScale = 3;
            seen.Add((loop.FrameCount, loop.DeltaTime, loop.Time));
            await loop.Yield(loop.LateUpdate); // still frame 2
            seen.Add((loop.FrameCount, loop.DeltaTime, loop.Time));
            await loop.NextFrame(loop.EarlyUpdate); // frame 3
            loop.TimeScale = 0;
            seen.Add((loop.FrameCount, loop.DeltaTime, loop.Time));
            await loop.NextFrame(); // frame 4
            seen.Add((loop.FrameCount, loop.DeltaTime, loop.Time));
        }

        SpindleTask task = Body();
        loop.RunFrames(4);
        task.GetAwaiter().GetResult();
        Assert.Equal(
            new[]
            {
                (2L, TimeSpan.FromMilliseconds(10), TimeSpan.FromMilliseconds(20)),
                (2L, TimeSpan.FromMilliseconds(10), TimeSpan.FromMilliseconds(20)),
                (3L, TimeSpan.FromMilliseconds(30), TimeSpan.FromMilliseconds(50)),
                (4L, TimeSpan.Zero, TimeSpan.FromMilliseconds(50)),
            },
            seen.ToArray());
        Assert.Equal(TimeSpan.FromMilliseconds(50), loop.UnscaledTime);
    }

    /// <summary>
    /// Sub-millisecond frames: loop time keeps every tick (no rounding to milliseconds), and a delay started at a
    /// fraction of a millisecond resumes exactly when loop time reaches its deadline, to the tick (a deadline inside the
    /// clock's current millisecond needs no timer; one further on is held from its millisecond to its tick).
    /// </summary>
    [Fact]
    public void TinyFrames_KeepEveryTick_AndDelaysResumeAtTheirExactDeadline()
    {
        var loop = new FrameLoop();
        loop.RunFrame(TimeSpan.FromTicks(3)); // frame 1: 3 ticks
        Assert.Equal(3, loop.Time.Ticks);
        SpindleTask scaled = loop.Delay(TimeSpan.FromTicks(1), FrameTimeKind.Scaled);     // due at 4 ticks
        SpindleTask unscaled = loop.Delay(TimeSpan.FromTicks(10_007), FrameTimeKind.Unscaled); // due at 10,010 ticks
        long frames = 0;
        while (!scaled.IsCompleted && frames < 100_000)
        {
            loop.RunFrame(TimeSpan.FromTicks(7));
            frames++;
        }
        Assert.Equal(1, frames); // 10 ticks
        Assert.Equal(10, loop.Time.Ticks);
        Assert.False(unscaled.IsCompleted);
        while (!unscaled.IsCompleted && frames < 100_000)
        {
            loop.RunFrame(TimeSpan.FromTicks(7));
            frames++;
        }
        // Its timer, set for 1 ms (10,000 ticks), falls due in the frame at 10,006 ticks (k = 1,429), short of the deadline:
        // the loop holds it to the next frame, at 10,013 ticks (3 + 7k >= 10,010 first at k = 1,430).
        Assert.Equal(1_430, frames);
        Assert.Equal(10_013, loop.UnscaledTime.Ticks);
        scaled.GetAwaiter().GetResult();
        unscaled.GetAwaiter().GetResult();
    }
}

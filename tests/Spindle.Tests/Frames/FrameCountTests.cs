using System;
using System.Threading;

namespace SpindleLib.Tests.Frames;

/// <summary>
/// Exactly which frame and phase each await resumes in. Every test starts its await in a known place: in phase
/// <c>from</c> of frame 2 (the loop has run frame 1), or between frames.
/// </summary>
public sealed class FrameCountTests
{
    private static readonly string[] s_phases = { "EarlyUpdate", "FixedUpdate", "Update", "LateUpdate" };

    public static TheoryData<string, string> PhasePairs()
    {
        var data = new TheoryData<string, string>();
        foreach (string from in s_phases)
        {
            foreach (string to in s_phases)
            {
                data.Add(from, to);
            }
        }
        return data;
    }

    /// <summary>
    /// Awaits <paramref name="wait"/> directly (a Spindle async method's box goes in the phase's queue) in phase
    /// <paramref name="from"/> of frame 2, and returns where it resumed; then the same through a SpindleTask (a pooled waiter).
    /// </summary>
    private static string ResumedAt(string from, Func<FrameLoop, FrameAwaitable> wait, int frames = 10)
    {
        string where = ResumedAt(from, l => AwaitDirectly(wait(l)), frames);
        Assert.Equal(where, ResumedAt(from, l => wait(l).AsSpindleTask(), frames));
        return where;
    }

    /// <summary>Awaits the frame awaitable itself in a Spindle async method, whose box goes in the phase's queue.</summary>
    private static async SpindleTask AwaitDirectly(FrameAwaitable awaitable) => await awaitable;

    /// <summary>Runs <paramref name="wait"/> in phase <paramref name="from"/> of frame 2 and returns where it resumed.</summary>
    private static string ResumedAt(string from, Func<FrameLoop, SpindleTask> wait, int frames = 10)
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        string? where = null;
        async SpindleTask Run()
        {
            await loop.Yield(loop.Phase(from));
            Assert.Equal("2/" + from, loop.Where());
            await wait(loop);
            where = loop.Where();
        }

        SpindleTask task = Run();
        loop.RunFrames(frames);
        Assert.True(task.IsCompleted, "the await did not resume within " + frames + " frames");
        task.GetAwaiter().GetResult();
        return where!;
    }

    [Theory]
    [MemberData(nameof(PhasePairs))]
    public void Yield_ResumesAtTheNextRunOfThePhase_LaterInThisFrameOrInTheNext(string from, string to)
    {
        // A later phase runs later in the same frame; the same or an earlier one only in the next frame.
        int expectedFrame = Array.IndexOf(s_phases, to) > Array.IndexOf(s_phases, from) ? 2 : 3;
        Assert.Equal(expectedFrame + "/" + to, ResumedAt(from, loop => loop.Yield(loop.Phase(to))));
    }

    [Theory]
    [MemberData(nameof(PhasePairs))]
    public void NextFrame_ResumesInThePhaseOfTheNextFrame_EvenIfItIsStillToRunInThisOne(string from, string to)
        => Assert.Equal("3/" + to, ResumedAt(from, loop => loop.NextFrame(loop.Phase(to))));

    [Theory]
    [MemberData(nameof(PhasePairs))]
    public void NextFrame_WithAToken_ResumesInTheSameFrameAsWithout(string from, string to)
    {
        using var cts = new CancellationTokenSource();
        Assert.Equal("3/" + to, ResumedAt(from, loop => loop.NextFrame(loop.Phase(to), cts.Token)));
        int yieldFrame = Array.IndexOf(s_phases, to) > Array.IndexOf(s_phases, from) ? 2 : 3;
        Assert.Equal(yieldFrame + "/" + to, ResumedAt(from, loop => loop.Yield(loop.Phase(to), cts.Token)));
    }

    [Fact]
    public void Yield_WithoutAPhase_IsUpdate()
    {
        Assert.Equal("2/Update", ResumedAt("EarlyUpdate", loop => loop.Yield()));
        Assert.Equal("3/Update", ResumedAt("Update", loop => loop.Yield()));
        Assert.Equal("3/Update", ResumedAt("LateUpdate", loop => loop.NextFrame()));
    }

    [Theory]
    [InlineData(1)]
    [InlineData(2)]
    [InlineData(3)]
    [InlineData(10)]
    [InlineData(63)]
    [InlineData(64)]
    [InlineData(65)]
    [InlineData(200)]
    [InlineData(4097)]
    public void DelayFrame_ResumesExactlyNFramesLater(int n)
    {
        // Frame counts that cross the frame wheel's level boundaries (64, 4096) included.
        Assert.Equal((2 + n) + "/Update", ResumedAt("Update", loop => loop.DelayFrame(n), frames: n + 3));
        Assert.Equal((2 + n) + "/Update", ResumedAt("EarlyUpdate", loop => loop.DelayFrame(n), frames: n + 3));
        Assert.Equal((2 + n) + "/EarlyUpdate", ResumedAt("LateUpdate", loop => loop.DelayFrame(n, loop.EarlyUpdate), frames: n + 3));
        using var cts = new CancellationTokenSource();
        Assert.Equal((2 + n) + "/LateUpdate", ResumedAt("Update", loop => loop.DelayFrame(n, loop.LateUpdate, cts.Token), frames: n + 3));
    }

    [Fact]
    public void DelayFrame_Zero_IsAYield()
    {
        Assert.Equal("3/Update", ResumedAt("Update", loop => loop.DelayFrame(0)));
        Assert.Equal("2/LateUpdate", ResumedAt("Update", loop => loop.DelayFrame(0, loop.LateUpdate)));
    }

    [Fact]
    public void AwaitsMadeBetweenFrames_CountFromTheLastFrameBegun()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop(); // between frames 1 and 2
        string? yielded = null, next = null, two = null, early = null;
        async SpindleTask Record(SpindleTask wait, Action<string> set)
        {
            await wait;
            set(loop.Where());
        }

        Record(loop.Yield(), w => yielded = w).Forget();
        Record(loop.NextFrame(), w => next = w).Forget();
        Record(loop.DelayFrame(2), w => two = w).Forget();
        Record(loop.NextFrame(loop.EarlyUpdate), w => early = w).Forget();
        loop.RunFrames(3);
        Assert.Equal("2/Update", yielded);
        Assert.Equal("2/Update", next);
        Assert.Equal("3/Update", two);
        Assert.Equal("2/EarlyUpdate", early);
    }

    [Fact]
    public void AwaitsMadeBeforeTheFirstFrame_ResumeInFrameOne()
    {
        var loop = new FrameLoop();
        Assert.Equal(0, loop.FrameCount);
        string? next = null, two = null;
        async SpindleTask Record(SpindleTask wait, Action<string> set)
        {
            await wait;
            set(loop.Where());
        }

        Record(loop.NextFrame(), w => next = w).Forget();
        Record(loop.DelayFrame(2), w => two = w).Forget();
        loop.RunFrames(2);
        Assert.Equal("1/Update", next);
        Assert.Equal("2/Update", two);
    }

    /// <summary>
    /// A host that steps physics several times a frame runs <see cref="FrameLoop.FixedUpdate"/> several times (RunPhase).
    /// NextFrame still means the phase's first run in the next frame: not a second run of this one. (Found by a review:
    /// it resumed at the second run of the same frame, from both places below.)
    /// </summary>
    [Theory]
    [InlineData(true, false)]  // awaited inside FixedUpdate's first run of the frame
    [InlineData(false, false)] // awaited in EarlyUpdate, before FixedUpdate's first run
    [InlineData(true, true)]   // the same with a cancelable token (a pooled waiter, not the box, is queued)
    [InlineData(false, true)]
    public void NextFrame_InAPhaseRunTwicePerFrame_ResumesInItsFirstRunOfTheNextFrame(bool fromSamePhase, bool withToken)
    {
        var loop = new FrameLoop();
        using var cts = new CancellationTokenSource();
        CancellationToken token = withToken ? cts.Token : default;
        long startedIn = -1;
        long resumedIn = -1;
        int resumedAtRun = -1;
        int run = -1;
        var yieldedAtRun = new System.Collections.Generic.List<(long Frame, int Run)>();
        async SpindleTask NextFrameBody()
        {
            await loop.Yield(fromSamePhase ? loop.FixedUpdate : loop.EarlyUpdate, token);
            startedIn = loop.FrameCount;
            await loop.NextFrame(loop.FixedUpdate, token);
            resumedIn = loop.FrameCount;
            resumedAtRun = run;
        }
        async SpindleTask YieldBody()
        {
            // A Yield still resumes at the phase's next run, the second one in the same frame included.
            for (int i = 0; i < 3; i++)
            {
                await loop.Yield(loop.FixedUpdate, token);
                yieldedAtRun.Add((loop.FrameCount, run));
            }
        }
        NextFrameBody().Forget();
        YieldBody().Forget();
        for (int f = 0; f < 3; f++)
        {
            loop.BeginFrame(TimeSpan.FromMilliseconds(16));
            foreach (FramePhase phase in loop.Phases)
            {
                if (phase == loop.FixedUpdate)
                {
                    for (run = 0; run < 2; run++)
                    {
                        loop.RunPhase(phase);
                    }
                    run = -1;
                }
                else
                {
                    loop.RunPhase(phase);
                }
            }
        }
        Assert.Equal(startedIn + 1, resumedIn);
        Assert.Equal(0, resumedAtRun);
        Assert.Equal(new (long, int)[] { (1, 0), (1, 1), (2, 0) }, yieldedAtRun.ToArray());
    }

    [Fact]
    public void MixedYieldAndNextFrame_InAPhaseRunTwicePerFrame_EachResumesAtItsRunAndInOrder()
    {
        // Tasks alternate Yield and NextFrame into one phase that the host runs twice a frame: a Yield resumes at the
        // phase's next run (the second of the frame), a NextFrame at the first run of the next frame, and within a run
        // continuations resume in the order they were queued.
        var loop = new FrameLoop();
        int run = -1;
        int queued = 0;
        var log = new System.Collections.Generic.List<(int Task, long Frame, int Run, int QueuedAs)>();
        async SpindleTask Body(int id)
        {
            await loop.Yield(loop.FixedUpdate); // everyone starts at the first run of frame 1
            for (int i = 0; i < 3; i++)
            {
                int ticket = queued++;
                if ((id + i) % 2 == 0)
                {
                    await loop.Yield(loop.FixedUpdate);
                }
                else
                {
                    await loop.NextFrame(loop.FixedUpdate);
                }
                log.Add((id, loop.FrameCount, run, ticket));
            }
        }
        for (int id = 0; id < 6; id++)
        {
            Body(id).Forget();
        }
        for (int f = 0; f < 5; f++)
        {
            loop.BeginFrame(TimeSpan.FromMilliseconds(16));
            foreach (FramePhase phase in loop.Phases)
            {
                if (phase == loop.FixedUpdate)
                {
                    for (run = 0; run < 2; run++)
                    {
                        loop.RunPhase(phase);
                    }
                    run = -1;
                }
                else
                {
                    loop.RunPhase(phase);
                }
            }
        }
        // Each task's three resumes, worked out by hand: a Yield in run 0 goes to run 1 of the same frame; a Yield in run
        // 1, and any NextFrame, go to run 0 of the next frame.
        for (int id = 0; id < 6; id++)
        {
            (long Frame, int Run) at = (1, 0);
            var expected = new System.Collections.Generic.List<(long, int)>();
            for (int i = 0; i < 3; i++)
            {
                at = (id + i) % 2 == 0 && at.Run == 0 ? (at.Frame, 1) : (at.Frame + 1, 0);
                expected.Add(at);
            }
            Assert.Equal(expected, log.FindAll(e => e.Task == id).ConvertAll(e => (e.Frame, e.Run)));
        }
        // Within each run, continuations resume in the order they were queued (NextFrames held back at a run keep their
        // place ahead of what that run queues).
        foreach (var group in System.Linq.Enumerable.GroupBy(log, e => (e.Frame, e.Run)))
        {
            var order = System.Linq.Enumerable.ToList(System.Linq.Enumerable.Select(group, e => e.QueuedAs));
            Assert.Equal(System.Linq.Enumerable.OrderBy(order, x => x), order);
        }
    }

    [Fact]
    public void NextFrameInALoop_ResumesOncePerFrame()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        var frames = new System.Collections.Generic.List<long>();
        async SpindleTask Loop()
        {
            for (int i = 0; i < 5; i++)
            {
                await loop.NextFrame(loop.EarlyUpdate);
                frames.Add(loop.FrameCount);
                await loop.Yield(loop.LateUpdate); // later in the same frame
                frames.Add(loop.FrameCount);
            }
        }

        SpindleTask task = Loop();
        loop.RunFrames(6);
        Assert.True(task.IsCompleted);
        Assert.Equal(new long[] { 2, 2, 3, 3, 4, 4, 5, 5, 6, 6 }, frames);
    }

    [Fact]
    public void FrameCountAndTime_AdvanceWithEachFrame()
    {
        var loop = new FrameLoop();
        Assert.Equal(0, loop.FrameCount);
        Assert.Equal(TimeSpan.Zero, loop.Time);
        Assert.Equal(TimeSpan.FromTicks(TimeSpan.TicksPerSecond / 60), loop.FixedDeltaTime);
        loop.RunFrame(TimeSpan.FromMilliseconds(10));
        loop.TimeScale = 0.5;
        loop.RunFrame(TimeSpan.FromMilliseconds(20));
        Assert.Equal(2, loop.FrameCount);
        Assert.Equal(TimeSpan.FromMilliseconds(10), loop.DeltaTime); // the scale applies from the frame after it is set
        Assert.Equal(TimeSpan.FromMilliseconds(20), loop.UnscaledDeltaTime);
        Assert.Equal(TimeSpan.FromMilliseconds(30), loop.UnscaledTime);
        Assert.Equal(TimeSpan.FromMilliseconds(20), loop.Time);
        loop.BeginFrame(TimeSpan.FromMilliseconds(40));
        Assert.Equal(3, loop.FrameCount);
        Assert.Equal(TimeSpan.FromMilliseconds(20), loop.DeltaTime);
        Assert.Equal(TimeSpan.FromMilliseconds(40), loop.Time);
        foreach (FramePhase phase in loop.Phases)
        {
            loop.RunPhase(phase);
        }
        Assert.Equal(3, loop.FrameCount);
    }

    [Fact]
    public void HostRunningPhasesItself_SeesTheSameFrames()
    {
        var loop = new FrameLoop();
        string? seen = null;
        async SpindleTask Run()
        {
            await loop.Yield(loop.LateUpdate);
            string a = loop.Where();
            await loop.NextFrame(loop.FixedUpdate);
            seen = a + " " + loop.Where();
        }

        Run().Forget();
        for (int f = 0; f < 3; f++)
        {
            loop.BeginFrame(FrameUtil.Step);
            foreach (FramePhase phase in loop.Phases)
            {
                loop.RunPhase(phase);
            }
        }
        Assert.Equal("1/LateUpdate 2/FixedUpdate", seen);
    }
}

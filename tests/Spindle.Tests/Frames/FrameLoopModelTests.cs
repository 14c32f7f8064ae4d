using System;
using System.Collections.Generic;
using CsCheck;

namespace SpindleLib.Tests.Frames;

/// <summary>
/// Random scripts of frame awaits (CsCheck, which shrinks a failure to a smallest case): several tasks, each awaiting
/// Yield, NextFrame, DelayFrame or a Delay in scaled or unscaled loop time into any of the four default phases, one
/// after another, started between frames; the host runs frames of random delta times (zero and fractional
/// milliseconds included) at random time scales (zero included), with BeginFrame and RunPhase, some phases more than
/// once a frame (several physics steps). Every resume is checked against a model of the documented contract: Yield(q)
/// resumes at q's next run (later in the same frame if q is still to run or runs again, else its first run in the next
/// frame); NextFrame(q) at q's first run in the next frame; DelayFrame(k, q) in q of frame FrameCount + k, counted from the frame the
/// call is made in (0 and 1 being Yield and NextFrame); Delay(d, q) in q of the first frame that begins with loop time
/// at or past the time at the call plus d, to the tick (zero being Yield). Within a phase run, tasks
/// resume first queued first run: a Yield or NextFrame is queued when it is awaited, a longer DelayFrame or a Delay when
/// its frame begins (after everything queued before that, in the order the delays were started).
/// </summary>
public class FrameLoopModelTests
{
    private enum Kind
    {
        Yield,
        NextFrame,
        DelayFrame,
        Delay,
        DelayUnscaled,
        WaitUntilFrame,
        SwitchTo,
    }

    /// <summary>One await: for DelayFrame, Value is the frame count; for the Delays, TimeSpan ticks.</summary>
    private readonly record struct Step(Kind Kind, int Phase, long Value)
    {
        public override string ToString() => Kind switch
        {
            Kind.DelayFrame => $"DelayFrame({Value}, #{Phase})",
            Kind.WaitUntilFrame => $"WaitUntil(FrameCount >= now + {Value}, #{Phase})",
            Kind.Delay or Kind.DelayUnscaled => $"{Kind}({TimeSpan.FromTicks(Value).TotalMilliseconds} ms, #{Phase})",
            _ => $"{Kind}(#{Phase})",
        };
    }

    /// <summary>
    /// The host's frames: each one's delta time, the time scale set before it, its runs of each phase, and the task
    /// whose await it cancels before it begins (-1: none); after them, 10 ms at scale 1, one run each, no cancellation.
    /// </summary>
    private readonly record struct Host(long[] DeltaTicks, double[] Scales, int[][] Runs, int[] Cancels)
    {
        public override string ToString()
            => $"deltas [{string.Join(" ", Array.ConvertAll(DeltaTicks, static t => TimeSpan.FromTicks(t).TotalMilliseconds))}] ms, scales [{string.Join(" ", Scales)}], runs [{string.Join(" ", Array.ConvertAll(Runs, static r => string.Join("", r)))}], cancels [{string.Join(" ", Cancels)}]";
    }

    private static readonly int[] OneRunEach = [1, 1, 1, 1];

    private const long TicksPerMs = TimeSpan.TicksPerMillisecond;

    private static readonly Gen<long> DelayTicks = Gen.Frequency(
        (1, Gen.Const(0L)),
        (3, Gen.Long[1, 60 * TicksPerMs]),
        (2, Gen.Long[1, 300].Select(static ms => ms * TicksPerMs)));

    private static readonly Gen<Step> Steps = Gen.Frequency(
        (3, Gen.Int[0, 3].Select(static p => new Step(Kind.Yield, p, 0))),
        (3, Gen.Int[0, 3].Select(static p => new Step(Kind.NextFrame, p, 1))),
        (3, Gen.Select(Gen.Int[0, 3], Gen.Int[0, 70], static (p, k) => new Step(Kind.DelayFrame, p, k))),
        (2, Gen.Select(Gen.Int[0, 3], DelayTicks, static (p, t) => new Step(Kind.Delay, p, t))),
        (2, Gen.Select(Gen.Int[0, 3], DelayTicks, static (p, t) => new Step(Kind.DelayUnscaled, p, t))),
        (2, Gen.Select(Gen.Int[0, 3], Gen.Int[0, 5], static (p, k) => new Step(Kind.WaitUntilFrame, p, k))),
        (1, Gen.Int[0, 3].Select(static p => new Step(Kind.SwitchTo, p, 0))));

    private static readonly Gen<Host> Hosts = Gen.Select(
        Gen.Frequency(
            (1, Gen.Const(0L)),
            (3, Gen.Long[0, 40 * TicksPerMs]),
            (3, Gen.Int[1, 33].Select(static ms => ms * TicksPerMs))).Array[0, 60],
        Gen.Frequency((5, Gen.Const(1.0)), (1, Gen.Const(0.0)), (1, Gen.Const(0.5)), (1, Gen.Const(2.0)), (1, Gen.Const(0.3))).Array[0, 60],
        Gen.Frequency((6, Gen.Const(1)), (2, Gen.Const(2)), (1, Gen.Const(3))).Array[4].Array[0, 60],
        Gen.Frequency((4, Gen.Const(-1)), (1, Gen.Int[0, 5])).Array[0, 60],
        static (deltas, scales, runs, cancels) => new Host(deltas, scales, runs, cancels));

    /// <summary>The last <c>OffThread</c> scripts start on another thread, between frames, before host frame <c>At</c>.</summary>
    private static readonly Gen<(Host Host, Step[][] Scripts, int OffThread, int At)> Cases
        = Gen.Select(Hosts, Steps.Array[1, 8].Array[1, 6], Gen.Int[0, 2], Gen.Int[0, 8]);

    [Fact]
    public void RandomScripts_ResumeWhereTheModelSays()
        => Cases.Sample((Host host, Step[][] scripts, int offThread, int at) => { Run(host, scripts, Math.Min(offThread, scripts.Length), at); },
            iter: TestUtil.Stress(300), threads: 1,
            print: static c => $"{c.Item1}, the last {c.Item3} starting off the loop thread before frame {c.Item4}: " + string.Join(" | ", Array.ConvertAll(c.Item2, static script => string.Join(", ", script))));

    private static void Run(Host host, Step[][] scripts, int offThread, int offThreadAt)
    {
        FrameLoop loop = FrameUtil.NewBoundLoop(); // frame 1 has run: the scripts start between frames 1 and 2
        var timeAt = new Dictionary<long, (TimeSpan Scaled, TimeSpan Unscaled)> { [1] = (loop.Time, loop.UnscaledTime) };
        var failures = new List<string>();
        var resumes = new List<(long Frame, int Phase, long Major, long Minor, int Actor)>(); // each resume and its queue position
        var awaitsBefore = new Dictionary<long, long>(); // frame -> awaits made before it began
        long awaits = 0;
        int running = scripts.Length;
        int run = -1; // the host's current run of the current phase (0 for its first), -1 between frames
        int[] runs = OneRunEach; // this frame's runs of each phase
        var tokens = new System.Threading.CancellationTokenSource?[scripts.Length];
        var pending = new bool[scripts.Length]; // the task is suspended in an await
        var cancelExpected = new bool[scripts.Length]; // the host cancelled that await

        async SpindleTask Actor(int actor, Step[] script)
        {
            foreach (Step step in script)
            {
                System.Threading.CancellationToken token = (tokens[actor] ??= new System.Threading.CancellationTokenSource()).Token;
                long frame = loop.FrameCount;
                int phase = loop.IsLoopThread ? loop.CurrentPhase?.Index ?? -1 : -2; // -1: between frames; -2: another thread
                int runNow = run;
                int[] runsNow = runs;
                bool timed = (step.Kind is Kind.Delay or Kind.DelayUnscaled) && step.Value > 0;
                TimeSpan start = step.Kind == Kind.DelayUnscaled ? loop.UnscaledTime : loop.Time;
                long deadline = start.Ticks + step.Value;
                (long Frame, int Phase, int Run) expected = Predict(step, frame, phase, runNow, runsNow);
                long order = awaits++;
                FramePhase target = loop.Phases[step.Phase];
                long untilFrame = frame + step.Value;
                bool canceled = false;
                pending[actor] = true;
                try
                {
                    switch (step.Kind)
                    {
                        case Kind.Yield:
                            await loop.Yield(target, token);
                            break;
                        case Kind.NextFrame:
                            await loop.NextFrame(target, token);
                            break;
                        case Kind.DelayFrame:
                            await loop.DelayFrame((int)step.Value, target, token);
                            break;
                        case Kind.WaitUntilFrame:
                            await loop.WaitUntil(() => loop.FrameCount >= untilFrame, target, token);
                            break;
                        case Kind.SwitchTo:
                            await loop.SwitchTo(target, token);
                            break;
                        default:
                            await loop.Delay(TimeSpan.FromTicks(step.Value), step.Kind == Kind.Delay ? FrameTimeKind.Scaled : FrameTimeKind.Unscaled, target, token);
                            break;
                    }
                }
                catch (OperationCanceledException)
                {
                    canceled = true;
                }
                pending[actor] = false;
                (long Frame, int Phase, int Run) actual = (loop.FrameCount, loop.CurrentPhase?.Index ?? -1, run);
                if (canceled || cancelExpected[actor])
                {
                    // Cancelled by the host between frames: the await ends at once, there, and nothing else resumes it.
                    if (!canceled || !cancelExpected[actor] || actual.Phase != -1 || actual.Run != -1)
                    {
                        failures.Add($"task {actor}: {step} awaited in frame {frame} phase {phase} run {runNow} ended {(canceled ? "canceled" : "normally")} in frame {actual.Frame} phase {actual.Phase}, the host {(cancelExpected[actor] ? "cancelled it" : "did not cancel it")}");
                    }
                    cancelExpected[actor] = false;
                    continue;
                }
                if (step.Kind == Kind.WaitUntilFrame && (step.Value > 0 || phase == -2))
                {
                    // Checked at each run of the phase from its next run on (from another thread, never at once): true at
                    // its first run in the frame aimed at, or in the next frame to begin.
                    expected = (Math.Max(untilFrame, frame + (phase == -2 ? 1 : 0)), step.Phase, 0);
                }
                if (timed)
                {
                    // The first frame to begin at or past the deadline: this one's time has reached it, the one before's not
                    // (or the one before is the frame of the call).
                    long now = (step.Kind == Kind.DelayUnscaled ? loop.UnscaledTime : loop.Time).Ticks;
                    long before = actual.Frame - 1 <= frame ? long.MinValue
                        : (step.Kind == Kind.DelayUnscaled ? timeAt[actual.Frame - 1].Unscaled : timeAt[actual.Frame - 1].Scaled).Ticks;
                    expected = now >= deadline && before < deadline && actual.Frame > frame ? (actual.Frame, step.Phase, 0) : (-1, step.Phase, 0);
                }
                // Queue position: a direct entry at its await; a frame delay when its frame begins, by start order.
                bool timer = timed || step.Kind == Kind.DelayFrame && step.Value >= 2;
                // A predicate is checked as its phase runs, and a SwitchTo on the loop thread does not wait: no queue place.
                if (step.Kind != Kind.WaitUntilFrame && !(step.Kind == Kind.SwitchTo && phase != -2))
                {
                    resumes.Add(timer
                        ? (actual.Frame, actual.Phase * 10 + actual.Run, 2 * awaitsBefore[actual.Frame] + 1, order, actor)
                        : phase == -2
                            // Handed off from another thread: joins its phase as the frame begins, before the delays due.
                            ? (actual.Frame, actual.Phase * 10 + actual.Run, 2 * awaitsBefore[actual.Frame] + 1, order - (1L << 40), actor)
                            : (actual.Frame, actual.Phase * 10 + actual.Run, 2 * order + 2, 0, actor));
                }
                if (actual != expected)
                {
                    failures.Add(timed
                        ? $"task {actor}: {step} awaited in frame {frame} phase {phase} run {runNow} (deadline {TimeSpan.FromTicks(deadline).TotalMilliseconds} ms) resumed in frame {actual.Frame} phase {actual.Phase} run {actual.Run}, at {loop.Time.TotalMilliseconds} ms scaled, {loop.UnscaledTime.TotalMilliseconds} ms unscaled"
                        : $"task {actor}: {step} awaited in frame {frame} phase {phase} run {runNow} resumed in frame {actual.Frame} phase {actual.Phase} run {actual.Run}, expected frame {expected.Frame} phase {expected.Phase} run {expected.Run}");
                }
            }
            running--;
        }

        for (int a = 0; a < scripts.Length - offThread; a++)
        {
            Actor(a, scripts[a]).Forget();
        }
        for (int f = 0; running > 0 && f < 2_000; f++)
        {
            loop.TimeScale = f < host.Scales.Length ? host.Scales[f] : 1.0;
            runs = f < host.Runs.Length ? host.Runs[f] : OneRunEach;
            if (f < host.Cancels.Length && host.Cancels[f] >= 0 && host.Cancels[f] < scripts.Length && tokens[host.Cancels[f]] is { } cts)
            {
                int victim = host.Cancels[f];
                cancelExpected[victim] = pending[victim];
                tokens[victim] = null; // its next await takes a new token
                cts.Cancel(); // on this thread, between frames: a pending await ends here and now
                if (cancelExpected[victim])
                {
                    Assert.False(pending[victim], $"task {victim}: its cancelled await did not end at once");
                }
            }
            if (f == offThreadAt && offThread > 0)
            {
                // Started on another thread, between frames: their first awaits are hand-offs to the next frame.
                var starter = new System.Threading.Thread(() =>
                {
                    for (int a = scripts.Length - offThread; a < scripts.Length; a++)
                    {
                        Actor(a, scripts[a]).Forget();
                    }
                });
                starter.Start();
                starter.Join();
            }
            awaitsBefore[loop.FrameCount + 1] = awaits; // after the cancellation: a cancelled task may await again
            loop.BeginFrame(TimeSpan.FromTicks(f < host.DeltaTicks.Length ? host.DeltaTicks[f] : 10 * TicksPerMs));
            timeAt[loop.FrameCount] = (loop.Time, loop.UnscaledTime);
            for (int p = 0; p < 4; p++)
            {
                for (run = 0; run < runs[p]; run++)
                {
                    loop.RunPhase(loop.Phases[p]);
                }
            }
            run = -1;
        }
        Assert.True(failures.Count == 0, string.Join("\n", failures));
        Assert.Equal(0, running);

        // Within one run of one phase, first queued first run.
        for (int i = 1; i < resumes.Count; i++)
        {
            var prev = resumes[i - 1];
            var cur = resumes[i];
            if (prev.Frame == cur.Frame && prev.Phase == cur.Phase && (prev.Major, prev.Minor).CompareTo((cur.Major, cur.Minor)) > 0)
            {
                Assert.Fail($"in frame {cur.Frame} phase {cur.Phase / 10} run {cur.Phase % 10}: task {cur.Actor} (queued at {cur.Major}/{cur.Minor}) resumed after task {prev.Actor} (queued at {prev.Major}/{prev.Minor})");
            }
        }
    }

    /// <summary>
    /// Where an await made in run <paramref name="run"/> of <paramref name="phase"/> of frame <paramref name="frame"/>
    /// (phase -1: between frames) resumes, for a frame whose phases run <paramref name="runs"/> times each.
    /// </summary>
    private static (long Frame, int Phase, int Run) Predict(Step step, long frame, int phase, int run, int[] runs)
    {
        if (phase == -2)
        {
            // From another thread: everything is handed off to the phase of the next frame to begin; a frame delay counts
            // from the last frame begun (a WaitUntil is worked out in the task).
            return step.Kind == Kind.DelayFrame && step.Value >= 2 ? (frame + step.Value, step.Phase, 0) : (frame + 1, step.Phase, 0);
        }
        if (step.Kind is Kind.WaitUntilFrame or Kind.SwitchTo)
        {
            // Already true at the call, or already on the loop thread: it continues at once, where it is.
            return (frame, phase, run);
        }
        int frames = step.Kind switch
        {
            Kind.NextFrame => 1,
            Kind.DelayFrame => (int)step.Value,
            _ => 0, // Yield, and a zero Delay (a timed one is checked when it resumes)
        };
        if (frames == 0)
        {
            // The phase's next run: later in this frame if it is still to run, or runs again; between frames, every
            // phase of the last frame has run.
            if (phase >= 0 && step.Phase > phase)
            {
                return (frame, step.Phase, 0);
            }
            if (phase >= 0 && step.Phase == phase && run + 1 < runs[phase])
            {
                return (frame, phase, run + 1);
            }
            return (frame + 1, step.Phase, 0);
        }
        return (frame + frames, step.Phase, 0);
    }
}

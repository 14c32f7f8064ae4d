using System;
using System.Collections.Generic;
using System.Threading;
using CsCheck;

namespace SpindleLib.Tests.Frames;

/// <summary>
/// The frame loop's time keeping against a model (CsCheck, which shrinks a failure to a smallest case). A host runs
/// frames of random delta times (zero, sub-millisecond, fractional and whole milliseconds, gaps of hours and, rarely,
/// of more than the wheels' 795-day span) with BeginFrame and RunPhase, some phases more than once. Between frames and
/// inside phases, the program sets <see cref="FrameLoop.TimeScale"/> (0, fractions, 1, large), starts scaled and
/// unscaled delays of random lengths (sub-millisecond to <see cref="TimerWheel.MaxDelay"/>, zero and infinite too) and
/// frame delays into random phases, and cancels random ones. Checked, from the public docs:
/// <list type="bullet">
/// <item>UnscaledDeltaTime is the frame's delta; DeltaTime is it times the scale in force when the frame began (a change
/// applies from the next frame), to the tick; UnscaledTime and Time are exactly the sums; FrameCount counts frames; and
/// none of them changes during a frame.</item>
/// <item>A delay resumes, on the loop thread, in its phase's first run of the first frame that begins with loop time
/// of its kind at or past its deadline (the loop time at the call plus the delay, to the tick); never
/// before; not at all if no such frame ran; zero is a Yield; a frame delay in frame FrameCount + n.</item>
/// <item>Timed waits resuming in the same run of the same phase resume in the order they were started.</item>
/// <item>A cancellation ends the wait at once, as cancelled; nothing is left on the wheels afterwards.</item>
/// </list>
/// </summary>
public sealed class FrameTimeModelTests
{
    private const long Ms = TimeSpan.TicksPerMillisecond;
    private const long Hour = TimeSpan.TicksPerHour;
    private const long Day = TimeSpan.TicksPerDay;

    private enum OpKind
    {
        Delay,
        DelayUnscaled,
        DelayFrame,
        Cancel,
        SetScale,
    }

    /// <summary>
    /// One operation, made before host frame <see cref="Frame"/> begins (<see cref="Where"/> -1) or in the first run of
    /// phase <see cref="Where"/> during it. Value: a delay's ticks (-1: infinite), a frame count, a scale, or which
    /// started wait to cancel (modulo their number). Phase: where the wait resumes.
    /// </summary>
    private readonly record struct Op(int Frame, int Where, OpKind Kind, long Value, double Scale, int Phase)
    {
        public override string ToString() => $"f{Frame}@{(Where < 0 ? "between" : "#" + Where)}:" + Kind switch
        {
            OpKind.Delay or OpKind.DelayUnscaled => $"{Kind}({(Value < 0 ? "inf" : TimeSpan.FromTicks(Value).TotalMilliseconds + " ms")}, #{Phase})",
            OpKind.DelayFrame => $"DelayFrame({Value}, #{Phase})",
            OpKind.Cancel => $"Cancel({Value})",
            _ => $"TimeScale={Scale}",
        };
    }

    private readonly record struct HostFrame(long Delta, int[] Runs)
    {
        public override string ToString() => $"{TimeSpan.FromTicks(Delta).TotalMilliseconds}ms/{string.Concat(Runs)}";
    }

    private static readonly Gen<long> Deltas = Gen.Frequency(
        (2, Gen.Const(0L)),
        (3, Gen.Long[1, Ms - 1]),                   // sub-millisecond
        (5, Gen.Long[1, 50 * Ms]),                  // fractional milliseconds
        (5, Gen.Int[1, 40].Select(static ms => ms * Ms)),
        (1, Gen.Long[Hour, 30 * Hour]),             // a gap of hours
        (1, Gen.Const(800 * Day + 3 * Ms + 17)));   // more than a wheel's whole span

    private static readonly Gen<double> Scales = Gen.Frequency(
        (4, Gen.Const(1.0)),
        (2, Gen.Const(0.0)),
        (1, Gen.Const(0.5)),
        (1, Gen.Const(0.3)),
        (1, Gen.Const(0.001)),
        (1, Gen.Const(2.0)),
        (1, Gen.Const(7.25)),
        (1, Gen.Const(1000.0)),
        (2, Gen.Double[0, 10]));

    private static readonly Gen<long> DelayLengths = Gen.Frequency(
        (1, Gen.Const(0L)),
        (1, Gen.Const(-1L)),                        // infinite
        (3, Gen.Long[1, Ms - 1]),
        (5, Gen.Long[1, 200 * Ms]),
        (3, Gen.Int[1, 500].Select(static ms => ms * Ms)),
        (2, Gen.Long[Hour, 40 * Hour]),
        (1, Gen.Long[10 * Day, 49 * Day]),
        (1, Gen.Const(TimerWheel.MaxDelay.Ticks)));

    private static readonly Gen<HostFrame> Frames = Gen.Select(
        Deltas,
        Gen.Frequency((6, Gen.Const(1)), (2, Gen.Const(2)), (1, Gen.Const(3))).Array[4],
        static (d, r) => new HostFrame(d, r));

    private static Gen<Op> Ops(int frames) => Gen.Select(Gen.Int[0, Math.Max(0, frames - 1)], Gen.Int[-1, 3], Gen.Int[0, 3]).SelectMany(
        t => Gen.Frequency(
            (4, DelayLengths.Select(v => new Op(t.Item1, t.Item2, OpKind.Delay, v, 0, t.Item3))),
            (4, DelayLengths.Select(v => new Op(t.Item1, t.Item2, OpKind.DelayUnscaled, v, 0, t.Item3))),
            (2, Gen.Int[0, 40].Select(v => new Op(t.Item1, t.Item2, OpKind.DelayFrame, v, 0, t.Item3))),
            (2, Gen.Int[0, 1000].Select(v => new Op(t.Item1, t.Item2, OpKind.Cancel, v, 0, t.Item3))),
            (3, Scales.Select(s => new Op(t.Item1, t.Item2, OpKind.SetScale, 0, s, t.Item3)))));

    private static readonly Gen<(HostFrame[] Frames, Op[] Ops)> Cases =
        Frames.Array[1, 60].SelectMany(f => Ops(f.Length).Array[0, 50].Select(o => (f, o)));

    [Fact]
    public void RandomPrograms_KeepTimeAndResumeDelaysWhereTheModelSays()
        => Cases.Sample(c => Check(c.Frames, c.Ops),
            iter: TestUtil.Stress(10000), threads: 1,
            print: static c => "frames [" + string.Join(" ", c.Frames) + "] ops [" + string.Join(", ", c.Ops) + "]");

    /// <summary>A wait started by the program, and what became of it.</summary>
    private sealed class Wait
    {
        public required Op Op;
        public required int Id;
        public required long StartFrame;   // FrameCount at the call
        public required int StartWhere;    // phase index, -1 between frames
        public required long Start;        // loop time of its kind at the call (ticks)
        public required CancellationTokenSource Cts;
        public bool CancelRequested;
        public bool Canceled;
        public bool Resumed;
        public (long Frame, int Phase, int Run) At;
        public bool OnLoopThread;
        public long ResumeOrder;
        public string? Error;

        public bool Timed => Op.Kind switch
        {
            OpKind.DelayFrame => Op.Value >= 2,
            _ => Op.Value > 0,
        };

        public bool InWheel => Timed; // an infinite delay is no timer: only its token ends it

        public long Deadline => Op.Kind == OpKind.DelayFrame ? 0 : Start + Op.Value;

        public override string ToString() => $"wait {Id} {Op} started in frame {StartFrame} at {(StartWhere < 0 ? "between frames" : "#" + StartWhere)}, loop time {Start} ticks" +
            (Op.Kind is OpKind.Delay or OpKind.DelayUnscaled && Op.Value > 0 ? $", deadline {Deadline} ticks" : "");
    }

    private static void Check(HostFrame[] frames, Op[] ops)
    {
        var loop = new FrameLoop { FixedDeltaTime = TimeSpan.Zero };
        loop.RunFrame(TimeSpan.Zero); // frame 1 at loop time 0; this thread is now the loop thread
        long firstFrame = loop.FrameCount + 1; // host frame 0
        var failures = new List<string>();
        var waits = new List<Wait>();
        // Per frame (FrameCount): the scale in force, its delta, and the times it began with.
        var scaleOf = new Dictionary<long, double>();
        var timeAt = new Dictionary<long, (long Scaled, long Unscaled, long Delta, long UnscaledDelta)> { [1] = (0, 0, 0, 0) };
        double scale = 1.0; // the model's TimeScale
        int run = -1;
        long resumes = 0;
        bool stop = false;

        async SpindleTask Watch(Wait w, SpindleTask task)
        {
            try
            {
                await task;
                w.Resumed = true;
                w.At = (loop.FrameCount, loop.CurrentPhase?.Index ?? -1, run);
                w.OnLoopThread = loop.IsLoopThread;
                w.ResumeOrder = resumes++;
                long now = w.Op.Kind == OpKind.Delay ? loop.Time.Ticks : loop.UnscaledTime.Ticks;
                if (w.Op.Kind is OpKind.Delay or OpKind.DelayUnscaled && w.Op.Value > 0 && now < w.Deadline)
                {
                    w.Error = $"resumed early: loop time {now} < deadline {w.Deadline}";
                }
            }
            catch (OperationCanceledException)
            {
                w.Canceled = true;
            }
        }

        void Apply(Op op, int where)
        {
            switch (op.Kind)
            {
                case OpKind.SetScale:
                    loop.TimeScale = op.Scale;
                    scale = op.Scale;
                    return;
                case OpKind.Cancel:
                    if (waits.Count == 0)
                    {
                        return;
                    }
                    Wait victim = waits[(int)(op.Value % waits.Count)];
                    bool wasPending = !victim.Resumed && !victim.Canceled;
                    victim.CancelRequested |= wasPending;
                    victim.Cts.Cancel();
                    if (wasPending && !victim.Canceled)
                    {
                        failures.Add($"{victim}: cancelled {op}, but its await did not end at once");
                    }
                    return;
            }
            var w = new Wait
            {
                Op = op,
                Id = waits.Count,
                StartFrame = loop.FrameCount,
                StartWhere = where,
                Start = op.Kind == OpKind.Delay ? loop.Time.Ticks : loop.UnscaledTime.Ticks,
                Cts = new CancellationTokenSource(),
            };
            waits.Add(w);
            FramePhase phase = loop.Phases[op.Phase];
            SpindleTask task = op.Kind switch
            {
                OpKind.DelayFrame => loop.DelayFrame((int)op.Value, phase, w.Cts.Token),
                _ => loop.Delay(op.Value < 0 ? Timeout.InfiniteTimeSpan : TimeSpan.FromTicks(op.Value),
                    op.Kind == OpKind.Delay ? FrameTimeKind.Scaled : FrameTimeKind.Unscaled, phase, w.Cts.Token),
            };
            Watch(w, task).Forget();
        }

        void ApplyAll(long frame, int where)
        {
            int hostFrame = (int)(frame - firstFrame);
            foreach (Op op in ops)
            {
                if (op.Frame == hostFrame && op.Where == where)
                {
                    Apply(op, where);
                }
            }
        }

        // One driver per phase: at the phase's first run of every frame, check the time properties and make that
        // phase's operations.
        async SpindleTask Driver(int p)
        {
            while (true)
            {
                await loop.NextFrame(loop.Phases[p]);
                if (stop)
                {
                    return;
                }
                long frame = loop.FrameCount;
                var t = timeAt[frame];
                if (loop.Time.Ticks != t.Scaled || loop.UnscaledTime.Ticks != t.Unscaled || loop.DeltaTime.Ticks != t.Delta || loop.UnscaledDeltaTime.Ticks != t.UnscaledDelta)
                {
                    failures.Add($"frame {frame} phase {p}: the time properties changed during the frame: {loop.Time.Ticks}/{loop.UnscaledTime.Ticks}/{loop.DeltaTime.Ticks}/{loop.UnscaledDeltaTime.Ticks}, began with {t}");
                }
                if (run != 0)
                {
                    failures.Add($"frame {frame}: NextFrame(#{p}) resumed in run {run}");
                }
                ApplyAll(frame, p);
            }
        }

        for (int p = 0; p < 4; p++)
        {
            Driver(p).Forget();
        }

        for (int f = 0; f < frames.Length; f++)
        {
            long frame = loop.FrameCount + 1;
            ApplyAll(frame, -1);
            long delta = frames[f].Delta;
            // Keep the sums far from overflow (that is tested on its own): huge gaps at large scales become zero.
            if (loop.Time.Ticks + delta * scale > (double)(1L << 61) || loop.UnscaledTime.Ticks + (double)delta > (double)(1L << 61))
            {
                delta = 0;
            }
            long scaledBefore = loop.Time.Ticks, unscaledBefore = loop.UnscaledTime.Ticks;
            scaleOf[frame] = scale;
            loop.BeginFrame(TimeSpan.FromTicks(delta));
            Assert.Equal(frame, loop.FrameCount);
            long d = loop.DeltaTime.Ticks;
            timeAt[frame] = (loop.Time.Ticks, loop.UnscaledTime.Ticks, d, loop.UnscaledDeltaTime.Ticks);
            double exact = delta * scale;
            if (loop.UnscaledDeltaTime.Ticks != delta || loop.UnscaledTime.Ticks != unscaledBefore + delta)
            {
                failures.Add($"frame {frame}: unscaled delta {loop.UnscaledDeltaTime.Ticks} time {loop.UnscaledTime.Ticks}, expected {delta} and {unscaledBefore + delta}");
            }
            if (Math.Abs(d - exact) > Math.Max(1.0, exact * 1e-12) || loop.Time.Ticks != scaledBefore + d)
            {
                failures.Add($"frame {frame}: delta {delta} at scale {scale}: DeltaTime {d} (expected {exact}), Time {loop.Time.Ticks} (expected {scaledBefore} + {d})");
            }
            int[] runs = frames[f].Runs;
            for (int p = 0; p < 4; p++)
            {
                for (run = 0; run < runs[p]; run++)
                {
                    loop.RunPhase(loop.Phases[p]);
                }
            }
            run = -1;
            if (failures.Count > 0)
            {
                break;
            }
        }
        long lastFrame = loop.FrameCount;
        stop = true;

        foreach (Wait w in waits)
        {
            if (w.Error is not null)
            {
                failures.Add($"{w}: {w.Error}");
            }
            if (w.Canceled && !w.CancelRequested)
            {
                failures.Add($"{w}: ended as cancelled, but was not cancelled");
                continue;
            }
            if (w.CancelRequested)
            {
                if (!w.Canceled)
                {
                    failures.Add($"{w}: cancelled, but ended {(w.Resumed ? "normally" : "not at all")}");
                }
                continue;
            }
            (long Frame, int Phase, int Run)? expected = Expected(w, lastFrame, timeAt, frames, firstFrame);
            if (w.Resumed && !w.OnLoopThread)
            {
                failures.Add($"{w}: resumed off the loop thread");
            }
            if (expected is null)
            {
                if (w.Resumed)
                {
                    failures.Add($"{w}: resumed in frame {w.At.Frame} phase {w.At.Phase} run {w.At.Run} (time {timeAt[w.At.Frame]}), expected not to resume by frame {lastFrame}");
                }
            }
            else if (!w.Resumed || w.At != expected.Value)
            {
                failures.Add($"{w}: {(w.Resumed ? $"resumed in frame {w.At.Frame} phase {w.At.Phase} run {w.At.Run}" : "did not resume")}, expected frame {expected.Value.Frame} phase {expected.Value.Phase} run {expected.Value.Run}" +
                    $" (frame times: {(w.Resumed ? timeAt[w.At.Frame].ToString() : "-")}, expected frame's {timeAt[expected.Value.Frame]}, the one before {(timeAt.TryGetValue(expected.Value.Frame - 1, out var b) ? b.ToString() : "-")})");
            }
        }

        // Timed waits resuming in the same run of a phase: in the order they were started.
        var timed = waits.FindAll(static w => w.Resumed && w.Timed);
        timed.Sort(static (a, b) => a.ResumeOrder.CompareTo(b.ResumeOrder));
        for (int i = 1; i < timed.Count; i++)
        {
            if (timed[i - 1].At == timed[i].At && timed[i - 1].Id > timed[i].Id)
            {
                failures.Add($"in frame {timed[i].At.Frame} phase {timed[i].At.Phase}: {timed[i - 1]} resumed before {timed[i]}, started earlier");
            }
        }

        // Nothing left behind: after one more frame (which serves the cancellations' clean-up), the wheels hold exactly
        // the timed waits still pending.
        loop.RunFrame(TimeSpan.Zero);
        long live = waits.FindAll(static w => w.InWheel && !w.Resumed && !w.Canceled).Count;
        if (loop.PendingTimers != live)
        {
            failures.Add($"{loop.PendingTimers} timers pending on the wheels, {live} timed waits pending");
        }
        foreach (Wait w in waits)
        {
            w.Cts.Cancel();
            w.Cts.Dispose();
        }
        loop.RunFrame(TimeSpan.Zero);
        if (loop.PendingTimers != 0)
        {
            failures.Add($"{loop.PendingTimers} timers pending after every wait was cancelled");
        }
        Assert.True(failures.Count == 0, string.Join("\n", failures));
    }

    /// <summary>Where the model says a wait resumes, or null if not by <paramref name="lastFrame"/>.</summary>
    private static (long Frame, int Phase, int Run)? Expected(Wait w, long lastFrame,
        Dictionary<long, (long Scaled, long Unscaled, long Delta, long UnscaledDelta)> timeAt, HostFrame[] frames, long firstFrame)
    {
        Op op = w.Op;
        if (op.Kind != OpKind.DelayFrame && op.Value < 0)
        {
            return null; // infinite
        }
        bool zero = op.Kind == OpKind.DelayFrame ? op.Value == 0 : op.Value == 0;
        if (zero)
        {
            // A Yield: the phase's next run. The program works in the phases' first runs.
            long f;
            int run = 0;
            if (w.StartWhere >= 0 && op.Phase > w.StartWhere)
            {
                f = w.StartFrame;
            }
            else if (w.StartWhere >= 0 && op.Phase == w.StartWhere && frames[(int)(w.StartFrame - firstFrame)].Runs[op.Phase] > 1)
            {
                f = w.StartFrame;
                run = 1;
            }
            else
            {
                f = w.StartFrame + 1;
            }
            return f <= lastFrame ? (f, op.Phase, run) : null;
        }
        if (op.Kind == OpKind.DelayFrame)
        {
            long f = w.StartFrame + op.Value;
            return f <= lastFrame ? (f, op.Phase, 0) : null;
        }
        for (long f = w.StartFrame + 1; f <= lastFrame; f++)
        {
            long now = op.Kind == OpKind.Delay ? timeAt[f].Scaled : timeAt[f].Unscaled;
            if (now >= w.Deadline)
            {
                return (f, op.Phase, 0);
            }
        }
        return null;
    }
}

using System;
using System.Diagnostics;
using System.Runtime.InteropServices;
using SpindleLib.Bench.Harness;

namespace SpindleLib.Bench.Scenarios;

/// <summary>
/// Decisions 48's lockstep review, as a benchmark: N unit coroutines on a frame loop, each waiting k ticks between
/// resumes, written as <c>await loop.DelayFrame(k)</c> ("DelayFrame") or as a countdown of k <c>await loop.NextFrame()</c>
/// ("Countdown"). Reports the loop thread's CPU time and wall time per tick, and bytes allocated per tick.
/// </summary>
public sealed class FrameDelayScenario : Scenario
{
    private const int WarmTicks = 10;

    public override string Id => "framedelay";

    public override string Title => "N units each waiting k ticks on a frame loop: DelayFrame(k) against a k-NextFrame countdown";

    public override string Seed => "decisions 48 (user20)";

    public override string Baseline => "Countdown";

    public override string Notes =>
        "Each unit loops: wait k ticks, count. DelayFrame: await loop.DelayFrame(k). Countdown: k times await loop.NextFrame(). Units start " +
        "staggered (unit i first waits 1 + i % k ticks) so that about N/k resume each tick. k=mix: unit i's j-th wait is 1 + (i + 3j) % 8 ticks " +
        "(the review's 1–8). cpu_us_per_tick: the loop thread's CPU time (CLOCK_THREAD_CPUTIME_ID on Linux; wall time elsewhere) per tick over " +
        "the measured ticks, after " + WarmTicks + " warm ticks; wall_us_per_tick: Stopwatch; bytes_per_tick: all threads. A fresh loop per round, " +
        "on the thread that runs it. The two systems' rounds alternate; cpu_ratio_in_pair: DelayFrame's CPU time over the Countdown round run " +
        "right after it, median of the pairs (the figure to quote on a loaded machine).";

    public override void Run(BenchContext context)
    {
        foreach (int units in new[] { 20_000, 100_000 })
        {
            int measured = context.Pick(2, units > 50_000 ? 20 : 60, units > 50_000 ? 60 : 200);
            foreach (int k in new[] { 1, 2, 4, 8, 0 })
            {
                Measure(context, $"units={units} k={(k == 0 ? "mix" : k.ToString())}", units, k, measured);
            }
        }
    }

    /// <summary>
    /// Warms both systems up, then alternates their rounds (DelayFrame, Countdown, DelayFrame, ...), so that a loaded
    /// machine's slow spells fall on both, and records each pair's ratio as well as each system's figures.
    /// </summary>
    private static void Measure(BenchContext context, string caseName, int units, int k, int measured)
    {
        context.Progress($"{caseName}: warm-up");
        context.Warmup(() => Round(units, k, measured, delayFrame: true));
        context.Warmup(() => Round(units, k, measured, delayFrame: false));
        int rounds = context.Rounds;
        var cpu = new double[2][] { new double[rounds], new double[rounds] };
        var wall = new double[2][] { new double[rounds], new double[rounds] };
        var bytes = new double[2][] { new double[rounds], new double[rounds] };
        var ratio = new double[rounds];
        for (int r = 0; r < rounds; r++)
        {
            context.Progress($"{caseName}: round {r + 1}/{rounds}");
            for (int s = 0; s < 2; s++)
            {
                BenchContext.Settle();
                (cpu[s][r], wall[s][r], bytes[s][r]) = Round(units, k, measured, delayFrame: s == 0);
            }
            ratio[r] = cpu[0][r] / cpu[1][r];
        }
        for (int s = 0; s < 2; s++)
        {
            string system = s == 0 ? "DelayFrame" : "Countdown";
            context.Add(caseName, system, "cpu_us_per_tick", cpu[s]);
            context.Add(caseName, system, "wall_us_per_tick", wall[s]);
            context.Add(caseName, system, "bytes_per_tick", bytes[s]);
            context.Add(caseName, system, "cpu_ratio_in_pair", s == 0 ? ratio : Array.ConvertAll(ratio, _ => 1.0));
        }
    }

    private sealed class UnitState
    {
        public bool Stop;
        public long Resumes;
        public int Live;
    }

    /// <summary>The i-th unit's j-th wait: k, or the review's mix of 1 to 8 ticks.</summary>
    private static int Wait(int unit, int k, int j) => k != 0 ? k : 1 + (unit + 3 * j) % 8;

    private static async SpindleTask DelayFrameUnit(FrameLoop loop, UnitState run, int unit, int k)
    {
        await loop.DelayFrame(1 + unit % Math.Max(k, 1));
        for (int j = 0; !run.Stop; j++)
        {
            run.Resumes++;
            await loop.DelayFrame(Wait(unit, k, j));
        }
        run.Live--;
    }

    private static async SpindleTask CountdownUnit(FrameLoop loop, UnitState run, int unit, int k)
    {
        for (int i = 1 + unit % Math.Max(k, 1); i > 0; i--)
        {
            await loop.NextFrame();
        }
        for (int j = 0; !run.Stop; j++)
        {
            run.Resumes++;
            for (int i = Wait(unit, k, j); i > 0; i--)
            {
                await loop.NextFrame();
            }
        }
        run.Live--;
    }

    private static (double CpuUs, double WallUs, double Bytes) Round(int units, int k, int measured, bool delayFrame)
    {
        var loop = new FrameLoop();
        loop.RunFrame(); // this thread becomes the loop thread: the units start on it, as in a game
        var run = new UnitState { Live = units };
        loop.BeginFrame(loop.FixedDeltaTime);
        loop.RunPhase(loop.EarlyUpdate);
        loop.RunPhase(loop.FixedUpdate);
        // The units start inside Update, as a game's spawner would (inside a step of the loop).
        SpindleTask spawn = Spawn(loop, run, units, k, delayFrame);
        loop.RunPhase(loop.Update);
        loop.RunPhase(loop.LateUpdate);
        spawn.GetAwaiter().GetResult();
        for (int t = 0; t < WarmTicks; t++)
        {
            loop.RunFrame();
        }
        long a0 = GC.GetTotalAllocatedBytes(true);
        long c0 = ThreadCpuNs();
        long t0 = Stopwatch.GetTimestamp();
        for (int t = 0; t < measured; t++)
        {
            loop.RunFrame();
        }
        long t1 = Stopwatch.GetTimestamp();
        long c1 = ThreadCpuNs();
        long a1 = GC.GetTotalAllocatedBytes(true);
        run.Stop = true;
        for (int t = 0; t < 20 && run.Live > 0; t++)
        {
            loop.RunFrame();
        }
        if (run.Live != 0)
        {
            throw new InvalidOperationException($"{run.Live} units did not end.");
        }
        return ((c1 - c0) / 1000.0 / measured, (t1 - t0) * 1e6 / Stopwatch.Frequency / measured, (double)(a1 - a0) / measured);
    }

    private static async SpindleTask Spawn(FrameLoop loop, UnitState run, int units, int k, bool delayFrame)
    {
        await loop.Yield(loop.Update);
        for (int i = 0; i < units; i++)
        {
            (delayFrame ? DelayFrameUnit(loop, run, i, k) : CountdownUnit(loop, run, i, k)).Forget();
        }
    }

    [StructLayout(LayoutKind.Sequential)]
    private struct Timespec
    {
        public long Seconds;
        public long Nanoseconds;
    }

    [DllImport("libc", EntryPoint = "clock_gettime")]
    private static extern int ClockGetTime(int clock, out Timespec time);

    private const int ClockThreadCpuTime = 3;

    /// <summary>The calling thread's CPU time in nanoseconds (Linux), or the wall clock elsewhere.</summary>
    private static long ThreadCpuNs()
    {
        if (OperatingSystem.IsLinux() && ClockGetTime(ClockThreadCpuTime, out Timespec ts) == 0)
        {
            return ts.Seconds * 1_000_000_000 + ts.Nanoseconds;
        }
        return (long)(Stopwatch.GetTimestamp() * (1e9 / Stopwatch.Frequency));
    }
}

using System;
using System.Collections.Generic;
using System.Diagnostics;

namespace SpindleLib.Bench.Harness;

/// <summary>
/// What a scenario measures with: the run's size, the progress line, and the methods that time a round and count its
/// allocations on every thread (<see cref="GC.GetTotalAllocatedBytes(bool)"/> at the round's boundaries).
/// </summary>
public sealed class BenchContext
{
    private readonly Action<string> _progress;

    public BenchContext(BenchSize size, Action<string> progress)
    {
        Size = size;
        _progress = progress;
    }

    public BenchSize Size { get; }

    public List<BenchResult> Results { get; } = new();

    /// <summary>The scenario being run (set by the runner).</summary>
    public string Scenario { get; set; } = "";

    /// <summary>Measured rounds per figure: the median is over these.</summary>
    public int Rounds => Size switch
    {
        BenchSize.Tiny => 1,
        BenchSize.Quick => 7,
        _ => 15,
    };

    /// <summary>
    /// Warm-up per system before its measured rounds: long enough for tiered compilation to reach optimized code
    /// (call counting starts 100 ms after the last new method is jitted).
    /// </summary>
    public TimeSpan WarmupTime => Size switch
    {
        BenchSize.Tiny => TimeSpan.Zero,
        BenchSize.Quick => TimeSpan.FromMilliseconds(600),
        _ => TimeSpan.FromSeconds(2),
    };

    /// <summary>Chooses a count by size.</summary>
    public int Pick(int tiny, int quick, int full) => Size switch
    {
        BenchSize.Tiny => tiny,
        BenchSize.Quick => quick,
        _ => full,
    };

    public void Progress(string message) => _progress($"{Scenario} › {message}");

    /// <summary>
    /// Times <paramref name="round"/>, which performs <paramref name="operationsPerRound"/> operations, after a
    /// warm-up; records the median and spread of the time and of the bytes allocated (all threads) per operation.
    /// </summary>
    public void MeasureOperations(
        string caseName,
        string system,
        long operationsPerRound,
        Action round,
        string timeMetric = "ns_per_op",
        string bytesMetric = "bytes_per_op")
    {
        RequireOperations(operationsPerRound);
        Progress($"{caseName} › {system}: warm-up");
        Warmup(round);

        int rounds = Rounds;
        var nanos = new double[rounds];
        var bytes = new double[rounds];
        for (int r = 0; r < rounds; r++)
        {
            Progress($"{caseName} › {system}: round {r + 1}/{rounds}");
            MeasureRound(round, operationsPerRound, out nanos[r], out bytes[r]);
        }
        Add(caseName, system, timeMetric, nanos);
        Add(caseName, system, bytesMetric, bytes);
    }

    /// <summary>
    /// As <see cref="MeasureOperations"/>, for several systems of one case measured side by side: each warms up on its
    /// own, then their rounds alternate (round r starts with system r mod the count), so that a slow or a fast spell of
    /// a shared machine falls on every system alike instead of on one system's block of rounds, and the ratios compare
    /// rounds taken at the same time. Figures are recorded in the order of <paramref name="systems"/>. Only for rounds
    /// that run on the calling thread and leave nothing running behind them: a system that leaves threads busy changes
    /// the next system's round (docs/decisions.md, section 5).
    /// </summary>
    public void MeasureOperationsSideBySide(string caseName, long operationsPerRound, params (string System, Action Round)[] systems)
    {
        RequireOperations(operationsPerRound);
        if (systems is null || systems.Length == 0)
        {
            throw new ArgumentException("Pass at least one system to measure.", nameof(systems));
        }
        foreach ((string system, Action round) in systems)
        {
            Progress($"{caseName} › {system}: warm-up");
            Warmup(round);
        }
        int rounds = Rounds;
        var nanos = new double[systems.Length][];
        var bytes = new double[systems.Length][];
        for (int k = 0; k < systems.Length; k++)
        {
            nanos[k] = new double[rounds];
            bytes[k] = new double[rounds];
        }
        for (int r = 0; r < rounds; r++)
        {
            for (int j = 0; j < systems.Length; j++)
            {
                int k = (r + j) % systems.Length;
                Progress($"{caseName} › {systems[k].System}: round {r + 1}/{rounds} (side by side)");
                MeasureRound(systems[k].Round, operationsPerRound, out nanos[k][r], out bytes[k][r]);
            }
        }
        for (int k = 0; k < systems.Length; k++)
        {
            Add(caseName, systems[k].System, "ns_per_op", nanos[k]);
            Add(caseName, systems[k].System, "bytes_per_op", bytes[k]);
        }
    }

    private static void RequireOperations(long operationsPerRound)
    {
        if (operationsPerRound <= 0)
        {
            throw new ArgumentOutOfRangeException(nameof(operationsPerRound), "A round must perform at least one operation.");
        }
    }

    /// <summary>One measured round, after a settle: its time and its allocations (all threads) per operation.</summary>
    private static void MeasureRound(Action round, long operationsPerRound, out double nanosPerOp, out double bytesPerOp)
    {
        Settle();
        long allocatedBefore = GC.GetTotalAllocatedBytes(true);
        long start = Stopwatch.GetTimestamp();
        round();
        long end = Stopwatch.GetTimestamp();
        long allocatedAfter = GC.GetTotalAllocatedBytes(true);
        nanosPerOp = (end - start) * 1e9 / Stopwatch.Frequency / operationsPerRound;
        bytesPerOp = (double)(allocatedAfter - allocatedBefore) / operationsPerRound;
    }

    /// <summary>
    /// Runs <paramref name="round"/> until the code has reached its steady state: at least the warm-up time, then until
    /// the JIT has compiled nothing for <see cref="JitQuietTime"/> and two consecutive rounds allocate the same and take
    /// times within 15% of each other. Tier-0 code runs slower and can allocate where optimized code does not, and it
    /// is steady too, so stable rounds alone do not prove tiering has finished: on a loaded machine the background
    /// Tier-1 compiles can lag the minimum warm-up by seconds. Gives up waiting after five times the warm-up time.
    /// </summary>
    public void Warmup(Action round)
    {
        if (Size == BenchSize.Tiny)
        {
            return;
        }
        var sw = Stopwatch.StartNew();
        TimeSpan limit = WarmupTime * 5;
        double lastTime = double.NaN;
        long lastBytes = -1;
        long lastJitted = System.Runtime.JitInfo.GetCompiledMethodCount();
        TimeSpan jitQuietSince = TimeSpan.Zero;
        int n = 0;
        while (true)
        {
            long a0 = GC.GetTotalAllocatedBytes(true);
            long t0 = Stopwatch.GetTimestamp();
            round();
            long t1 = Stopwatch.GetTimestamp();
            long bytes = GC.GetTotalAllocatedBytes(true) - a0;
            double time = t1 - t0;
            n++;
            long jitted = System.Runtime.JitInfo.GetCompiledMethodCount();
            if (jitted != lastJitted)
            {
                lastJitted = jitted;
                jitQuietSince = sw.Elapsed;
            }
            bool steady = n >= 3 && bytes == lastBytes && Math.Abs(time - lastTime) <= 0.15 * Math.Min(time, lastTime)
                && sw.Elapsed - jitQuietSince >= JitQuietTime;
            if ((steady && sw.Elapsed >= WarmupTime) || sw.Elapsed >= limit)
            {
                return;
            }
            lastTime = time;
            lastBytes = bytes;
        }
    }

    /// <summary>
    /// How long the JIT must have compiled nothing before warm-up may end: three times the runtime's 100 ms
    /// call-counting delay, so a method still waiting to be counted or queued for Tier-1 is not mistaken for settled.
    /// </summary>
    private static readonly TimeSpan JitQuietTime = TimeSpan.FromMilliseconds(300);

    /// <summary>Collects garbage between rounds so one round's garbage is not collected on the next round's clock.</summary>
    public static void Settle()
    {
        GC.Collect();
        GC.WaitForPendingFinalizers();
        GC.Collect();
    }

    public void Add(string caseName, string system, string metric, double[] rounds)
        => Results.Add(new BenchResult(Scenario, caseName, system, metric, Stats.Median(rounds), rounds.Length > 1 ? Stats.Spread(rounds) : null, rounds.Length));

    public void Add(string caseName, string system, string metric, double value)
        => Results.Add(new BenchResult(Scenario, caseName, system, metric, value, null, 1));
}

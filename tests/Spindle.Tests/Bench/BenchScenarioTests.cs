using System;
using System.Collections.Generic;
using System.IO;
using System.Diagnostics;
using System.Linq;
using System.Threading;
using SpindleLib.Bench.Harness;
using SpindleLib.Bench.Scenarios;

namespace SpindleLib.Tests.Bench;

/// <summary>Benchmarks swap the default scheduler, so they never run alongside other tests.</summary>
[CollectionDefinition(Name, DisableParallelization = true)]
public sealed class BenchCollection
{
    public const string Name = "Benchmarks (not parallel)";
}

/// <summary>
/// Runs every benchmark scenario once at a tiny size, so the main command (<c>dotnet run -c Release --project
/// bench/Spindle.Bench</c>) cannot rot: every scenario must still run and report every system and metric that DESIGN.md
/// makes a contract.
/// </summary>
[Collection(BenchCollection.Name)]
public sealed class BenchScenarioTests
{
    /// <summary>The contract: scenario → (cases, systems, metrics) it must report.</summary>
    private static readonly Dictionary<string, (string[] Cases, string[] Systems, string[] Metrics)> s_contract = new()
    {
        ["sequential"] = (new[] { "units=1000" }, new[] { "Task", "Spindle", "SpindleJob", "SpindleOnThreadPool" }, new[] { "ns_per_op", "bytes_per_op" }),
        ["chain"] = (new[] { "chains=4,length=1000" }, new[] { "TaskFactory", "Spindle" }, new[] { "ns_per_job", "bytes_per_job" }),
        ["whenany"] = (new[] { "n=2,completed", "n=3,pending", "n=8,pending" }, new[] { "Task", "Spindle", "SpindleOverTask" }, new[] { "ns_per_op", "bytes_per_op" }),
        ["whenall"] = (new[] { "n=2,completed", "n=4,pending", "n=8,pending" }, new[] { "Task", "Spindle", "SpindleOverTask" }, new[] { "ns_per_op", "bytes_per_op" }),
        ["parallel-for"] = (new[] { "n=65536" }, new[] { "Loop", "ParallelFor", "Spindle" }, new[] { "ns_per_element", "bytes_per_op" }),
        ["counters-signal"] = (new[] { "n=10000" }, new[] { "Task", "Threads", "Spindle" }, new[] { "ops_per_sec", "bytes_per_counter" }),
        ["counters-delay"] = (new[] { "n=10000,delay=1-16ms" }, new[] { "Task", "Threads", "Spindle" }, new[] { "ops_per_sec", "bytes_per_counter" }),
        ["counters-idle"] = (new[] { "rate=1000", "rate=10000", "rate=100000" }, new[] { "Task", "Threads", "Spindle" }, new[] { "cpu_percent", "mb" }),
        ["frame"] = (new[] { "tasks=100", "tasks=500", "tasks=50000" }, new[] { "Task", "Spindle" }, new[] { "startup_bytes", "bytes_per_frame", "ms_per_frame" }),
        ["asyncawait"] = (new[] { "completed", "pending", "nested" }, new[] { "Task", "ValueTask", "Spindle" }, new[] { "ns_per_op", "bytes_per_op" }),
        ["framedelay"] = (new[] { "units=20000 k=1", "units=20000 k=mix", "units=100000 k=8" }, new[] { "DelayFrame", "Countdown" }, new[] { "cpu_us_per_tick", "wall_us_per_tick", "bytes_per_tick", "cpu_ratio_in_pair" }),
        ["timer-change"] = (new[] { "n=2k,k=2" }, new[] { "Task", "Spindle", "SpindleDelay" }, new[] { "ns_per_op", "bytes_per_op", "ns_per_create_dispose", "bytes_per_create_dispose", "ns_per_create_dispose_settled", "bytes_per_timer" }),
        ["codegen"] = (new[] { "methods=50" }, new[] { "Task", "ValueTask", "Spindle" }, new[] { "il_bytes_per_method", "state_machines" }),
    };

    // Before s_added, whose initializer reads it (static initializers run in the order written).
    private static readonly string[] TimerChangeMetrics = { "ns_per_op", "bytes_per_op", "ns_per_create_dispose", "bytes_per_create_dispose", "ns_per_create_dispose_settled", "bytes_per_timer" };

    /// <summary>Figures added to a scenario beside its contract (whose cases and systems it keeps): each case has each system.</summary>
    private static readonly Dictionary<string, (string[] Cases, string[] Systems, string[] Metrics)[]> s_added = new()
    {
        ["timer-change"] =
        [
            // tp55: the wheel's TimeProvider, beside the ITimer calls of the first case and in a case of its own for the
            // server's CancellationTokenSource(timeout, provider) pattern; tp56: both made by many threads at once, and the
            // sources created by one thread and pushed back by all.
            (new[] { "n=2k,k=2", "cts,n=2k,k=2", "threads,n=2k,k=2", "cts-threads,n=2k,k=2", "cts-one-creator,n=2k,k=2" }, new[] { "Task", "SpindleTimeProvider" }, TimerChangeMetrics),
            // tp56: the many-thread case of the callback timers has SpindleTimer beside Timer and the wheel's ITimer.
            (new[] { "threads,n=2k,k=2" }, new[] { "Spindle" }, TimerChangeMetrics),
        ],
    };

    /// <summary>
    /// Figures one system must report alike in several cases (within 10%, what a tiny run's heap readings allow once each is
    /// a median of <see cref="AlikeRuns"/> runs): a pending timer holds the same objects whichever threads created it, so a
    /// system's bytes_per_timer is its one-thread case's in the many-thread cases. tp57: the reading once counted in its
    /// "before" the timers the system measured just before had disposed, which their wheel let go of during the
    /// measurement, so the wheel's ITimer read 64–158 B at this size, where it holds 158 (at n=100k, 97–160 B against 160).
    /// </summary>
    private static readonly Dictionary<string, (string Metric, string System, string[] Cases)[]> s_alikeAcrossCases = new()
    {
        ["timer-change"] =
        [
            ("bytes_per_timer", "Task", ["n=2k,k=2", "threads,n=2k,k=2"]),
            ("bytes_per_timer", "Spindle", ["n=2k,k=2", "threads,n=2k,k=2"]),
            ("bytes_per_timer", "SpindleTimeProvider", ["n=2k,k=2", "threads,n=2k,k=2"]),
            ("bytes_per_timer", "Task", ["cts,n=2k,k=2", "cts-threads,n=2k,k=2", "cts-one-creator,n=2k,k=2"]),
            ("bytes_per_timer", "SpindleTimeProvider", ["cts,n=2k,k=2", "cts-threads,n=2k,k=2", "cts-one-creator,n=2k,k=2"]),
        ],
    };

    public static IEnumerable<object[]> ScenarioIds() => BenchRunner.All.Select(s => new object[] { s.Id });

    [Fact]
    public void Contract_CoversEveryScenario()
        => Assert.Equal(BenchRunner.All.Select(s => s.Id).OrderBy(x => x), s_contract.Keys.OrderBy(x => x));

    [Theory]
    [MemberData(nameof(ScenarioIds))]
    public void Scenario_RunsAtTinySize_ReportsEveryContractFigure(string id)
    {
        InTemporaryDirectory(dir =>
        {
            var options = new BenchOptions { Size = BenchSize.Tiny, ReportDirectory = dir };
            options.Scenarios.Add(id);
            IReadOnlyList<BenchResult> results = BenchRunner.Run(options, "test", print: false);

            var contracts = new List<(string[] Cases, string[] Systems, string[] Metrics)> { s_contract[id] };
            if (s_added.TryGetValue(id, out var added))
            {
                contracts.AddRange(added);
            }
            foreach (var (cases, systems, metrics) in contracts)
            {
                foreach (string c in cases)
                {
                    foreach (string system in systems)
                    {
                        foreach (string metric in metrics)
                        {
                            BenchResult? r = results.SingleOrDefault(x => x.Scenario == id && x.Case == c && x.System == system && x.Metric == metric);
                            Assert.True(r is not null, $"{id}: no result for case '{c}', system '{system}', metric '{metric}'.");
                            Assert.True(double.IsFinite(r!.Value) && r.Value >= 0, $"{id}/{c}/{system}/{metric} = {r.Value}");
                        }
                    }
                }
            }
            // Every target the issues set on this scenario finds its figures (a misspelt case, system or metric would
            // silently check nothing).
            foreach (Target t in Targets.All.Where(t => t.Scenario == id))
            {
                Assert.True(Targets.Check(results, [t]).Count > 0,
                    $"target '{t.Text}' ({t.Issue}, case {t.Case}) found nothing to check in {id}'s results.");
            }
            Assert.True(File.Exists(Path.Combine(dir, "report.md")));
            Assert.Contains($"]({Report.ChartFile})", File.ReadAllText(Path.Combine(dir, "report.md")), StringComparison.Ordinal);
            // The summary chart is well-formed and draws this scenario's headline figures against its baseline.
            var svg = System.Xml.Linq.XDocument.Load(Path.Combine(dir, Report.ChartFile));
            Assert.Contains(svg.Descendants(), e => e.Name.LocalName == "rect" && (string?)e.Attribute("data-scenario") == id);
            string json = File.ReadAllText(Path.Combine(dir, "results.json"));
            Assert.Contains("\"machine\"", json, StringComparison.Ordinal);
            Assert.Contains($"\"scenario\": \"{id}\"", json, StringComparison.Ordinal);
        });
    }

    /// <summary>
    /// Runs of a scenario whose medians <see cref="s_alikeAcrossCases"/> compares. One run's heap reading at the tiny size
    /// (2,000 timers) moves by a few per cent from run to run, and in the test host now and then by more (review57: the
    /// ITimer's cts figure read 234 B against 206 in its other two cases, 1 run of 8 with the fixed bench; the bench run
    /// alone, 10 runs: up to 6% apart), so a check on one run failed now and then with nothing wrong; the misreading it
    /// is there for was in every run (tp57: 4 of 4 at main), so it still shows in the median.
    /// </summary>
    private const int AlikeRuns = 3;

    [Theory]
    [InlineData("timer-change")]
    public void Scenario_AtTinySize_ReportsAlikeFiguresAlikeAcrossCases(string id)
    {
        Assert.True(s_alikeAcrossCases.ContainsKey(id));
        var runs = new List<IReadOnlyList<BenchResult>>();
        for (int run = 0; run < AlikeRuns; run++)
        {
            InTemporaryDirectory(dir =>
            {
                var options = new BenchOptions { Size = BenchSize.Tiny, ReportDirectory = dir };
                options.Scenarios.Add(id);
                runs.Add(BenchRunner.Run(options, "test", print: false));
            });
        }
        foreach (var (metric, system, cases) in s_alikeAcrossCases[id])
        {
            double[][] perCase = cases
                .Select(c => runs.Select(results => results.Single(x => x.Scenario == id && x.Case == c && x.System == system && x.Metric == metric).Value).OrderBy(v => v).ToArray())
                .ToArray();
            double[] medians = perCase.Select(values => values[values.Length / 2]).ToArray();
            Assert.True(medians.Max() <= medians.Min() * 1.10,
                $"{id}/{system}/{metric} differs across cases {string.Join(", ", cases)}: medians {string.Join(", ", medians)} of "
                + string.Join("; ", perCase.Select(values => string.Join(", ", values))) + " (it should not depend on the case's threads).");
        }
    }

    [Fact]
    public void Parse_UnknownScenario_ThrowsNamingTheKnownOnes()
    {
        var e = Assert.Throws<ArgumentException>(() => BenchOptions.Parse(new[] { "nope" }, new[] { "sequential", "asyncawait" }));
        Assert.Contains("sequential", e.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void Parse_JsonWithoutFile_Throws()
        => Assert.Throws<ArgumentException>(() => BenchOptions.Parse(new[] { "--json" }, new[] { "sequential" }));

    [Fact]
    public void Parse_ScenariosAndOptions_AreRead()
    {
        BenchOptions o = BenchOptions.Parse(new[] { "sequential", "--full", "--json", "r.json" }, new[] { "sequential", "asyncawait" });
        Assert.Equal(new[] { "sequential" }, o.Scenarios);
        Assert.Equal(BenchSize.Full, o.Size);
        Assert.Equal("r.json", o.JsonPath);
    }

    [Fact]
    public void WriteWhole_TwoRunsWritingOneReport_LeaveOneCompleteFileAndNoLeftovers()
    {
        // Two bench processes started in one directory write the same report at about the same time; each write must
        // succeed and leave a whole file (one of the two), never a sharing violation, a mix or a stray temporary file.
        InTemporaryDirectory(dir =>
        {
            string path = Path.Combine(dir, "results.json");
            string[] contents = { new string('a', 100_000), new string('b', 150_000), new string('c', 50_000) };
            var errors = new System.Collections.Concurrent.ConcurrentQueue<Exception>();
            var threads = contents.Select(text => new Thread(() =>
            {
                for (int i = 0; i < 200; i++)
                {
                    try
                    {
                        BenchRunner.WriteWhole(path, stream =>
                        {
                            using var writer = new StreamWriter(stream);
                            writer.Write(text);
                        });
                    }
                    catch (Exception e)
                    {
                        errors.Enqueue(e);
                    }
                }
            })).ToList();
            threads.ForEach(t => t.Start());
            threads.ForEach(t => t.Join());

            Assert.Empty(errors);
            Assert.Contains(File.ReadAllText(path), contents);
            Assert.Equal(new[] { path }, Directory.GetFiles(dir));
        });
    }

    [Fact]
    public void WriteWhole_WriteThatThrows_KeepsThePreviousFileAndLeavesNoTemporary()
    {
        InTemporaryDirectory(dir =>
        {
            string path = Path.Combine(dir, "report.md");
            File.WriteAllText(path, "previous");
            var e = Assert.Throws<InvalidOperationException>(() => BenchRunner.WriteWhole(path, stream =>
            {
                stream.WriteByte((byte)'x');
                throw new InvalidOperationException("writer failed");
            }));
            Assert.Equal("writer failed", e.Message);
            Assert.Equal("previous", File.ReadAllText(path));
            Assert.Equal(new[] { path }, Directory.GetFiles(dir));
        });
    }

    [Fact]
    public void CountersGate_HoldsItsThreadsWhileClosed_LetsThemRunWhileOpen_AndEndsThem()
    {
        // counters-signal measures its systems side by side: a system's threads must do nothing outside its own windows.
        var gate = new Counters.Gate();
        long steps = 0;
        Thread[] threads = gate.StartThreads(2, "gate test", () =>
        {
            while (gate.Pass())
            {
                Interlocked.Increment(ref steps);
            }
        });
        try
        {
            Thread.Sleep(50);
            Assert.Equal(0, Interlocked.Read(ref steps)); // created closed

            gate.OpenGate();
            var wait = Stopwatch.StartNew();
            while (Interlocked.Read(ref steps) < 1000 && wait.Elapsed < TimeSpan.FromSeconds(30))
            {
                Thread.Sleep(1);
            }
            Assert.True(Interlocked.Read(ref steps) >= 1000, "the threads did not run while the gate was open");

            gate.CloseGate("gate test"); // returns once both threads wait at the gate
            long closedAt = Interlocked.Read(ref steps);
            Thread.Sleep(50);
            Assert.Equal(closedAt, Interlocked.Read(ref steps));

            gate.OpenGate();
            wait.Restart();
            while (Interlocked.Read(ref steps) == closedAt && wait.Elapsed < TimeSpan.FromSeconds(30))
            {
                Thread.Sleep(1);
            }
            Assert.True(Interlocked.Read(ref steps) > closedAt, "the threads did not run again once the gate reopened");
            gate.CloseGate("gate test");
        }
        finally
        {
            gate.StopAll();
            Counters.JoinAll(threads); // throws if a thread did not end within 30 s
        }
        Assert.All(threads, t => Assert.False(t.IsAlive));
    }

    private static void InTemporaryDirectory(Action<string> test)
    {
        string dir = Path.Combine(Path.GetTempPath(), "spindle-bench-test-" + Guid.NewGuid().ToString("N"));
        Directory.CreateDirectory(dir);
        try
        {
            test(dir);
        }
        finally
        {
            Directory.Delete(dir, recursive: true);
        }
    }
}

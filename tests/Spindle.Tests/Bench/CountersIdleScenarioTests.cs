using System.Collections.Generic;
using System.Linq;
using SpindleLib.Bench.Harness;

namespace SpindleLib.Tests.Bench;

/// <summary>The counters-idle scenario's CPU figure: a median over several windows, with its spread (DESIGN.md).</summary>
[Collection(BenchCollection.Name)]
public sealed class CountersIdleScenarioTests
{
    [Fact]
    public void CpuPercent_IsAMedianOverSeveralWindows_WithItsSpread()
    {
        var options = new BenchOptions { Size = BenchSize.Tiny, ReportDirectory = "" };
        options.Scenarios.Add("counters-idle");
        IReadOnlyList<BenchResult> results = BenchRunner.Run(options, "test", print: false);

        List<BenchResult> cpu = results.Where(r => r.Metric == "cpu_percent").ToList();
        Assert.Equal(9, cpu.Count); // 3 systems × 3 rates
        Assert.All(cpu, r => Assert.True(r.Rounds > 1 && r.Spread is not null,
            $"{r.Case} {r.System}: cpu_percent is one window (rounds {r.Rounds}, spread {r.Spread?.ToString() ?? "none"}), not a median with its spread"));
    }
}

using System;
using System.Collections.Generic;
using System.Linq;
using SpindleLib.Bench.Harness;

namespace SpindleLib.Tests.Bench;

/// <summary>The harness's side-by-side measurement (<see cref="BenchContext.MeasureOperationsSideBySide"/>).</summary>
public sealed class SideBySideTests
{
    [Fact]
    public void Rounds_AlternateBetweenTheSystems_EachRoundStartingWithTheNextSystem_AfterAWarmUpOfEach()
    {
        var context = new BenchContext(BenchSize.Quick, _ => { });
        var calls = new List<string>();
        context.MeasureOperationsSideBySide("case", 10, ("A", () => calls.Add("A")), ("B", () => calls.Add("B")));

        // The warm-up runs each system on its own, A first, until steady: then the measured rounds, which are the last
        // 2 × Rounds calls.
        int rounds = context.Rounds;
        Assert.True(calls.Count > 2 * rounds, $"only {calls.Count} calls: no warm-up ran");
        int firstB = calls.IndexOf("B");
        Assert.True(calls.Take(firstB).All(c => c == "A"), "A's warm-up was interleaved with B's");
        List<string> measured = calls.Skip(calls.Count - 2 * rounds).ToList();
        var expected = new List<string>();
        for (int r = 0; r < rounds; r++)
        {
            expected.AddRange(r % 2 == 0 ? ["A", "B"] : ["B", "A"]);
        }
        Assert.Equal(expected, measured);
    }

    [Fact]
    public void Results_AreRecordedInTheOrderTheSystemsWereGiven_WithTimeAndBytesForEach()
    {
        var context = new BenchContext(BenchSize.Tiny, _ => { }) { Scenario = "s" };
        context.MeasureOperationsSideBySide("case", 1000, ("Task", () => _ = new object[4]), ("Spindle", () => { }));

        Assert.Equal(
            [("Task", "ns_per_op"), ("Task", "bytes_per_op"), ("Spindle", "ns_per_op"), ("Spindle", "bytes_per_op")],
            context.Results.Select(r => (r.System, r.Metric)));
        Assert.All(context.Results, r => Assert.Equal(("s", "case"), (r.Scenario, r.Case)));
        Assert.All(context.Results, r => Assert.Equal(context.Rounds, r.Rounds));
    }

    [Fact]
    public void BadInput_IsRefusedWithAClearError()
    {
        var context = new BenchContext(BenchSize.Tiny, _ => { });
        Assert.Throws<ArgumentOutOfRangeException>(() => context.MeasureOperationsSideBySide("case", 0, ("A", () => { })));
        ArgumentException e = Assert.Throws<ArgumentException>(() => context.MeasureOperationsSideBySide("case", 1));
        Assert.Contains("at least one system", e.Message, StringComparison.Ordinal);
        Assert.Empty(context.Results);
    }
}

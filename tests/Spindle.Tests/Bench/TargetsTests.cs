using System.Collections.Generic;
using System.Linq;
using SpindleLib.Bench.Harness;

namespace SpindleLib.Tests.Bench;

/// <summary>The check of the issues' targets against a run's results (bench/Spindle.Bench/Harness/Targets.cs).</summary>
public sealed class TargetsTests
{
    private static BenchResult R(string scenario, string c, string system, string metric, double value)
        => new(scenario, c, system, metric, value, null, 1);

    [Fact]
    public void RelativeLimit_IsTheFactorTimesTheOtherSystemInTheSameCase()
    {
        var results = new List<BenchResult>
        {
            R("s", "a", "Task", "ns", 100), R("s", "a", "Spindle", "ns", 20),
            R("s", "b", "Task", "ns", 100), R("s", "b", "Spindle", "ns", 21),
        };
        List<TargetCheck> checks = Targets.Check(results, [new Target("issue 9", "s", "*", "Spindle", "ns", Relation.AtMost, 0.2, "Task")]);

        Assert.Equal(["a", "b"], checks.Select(c => c.Case));
        Assert.True(checks[0].Holds); // 20 ≤ 0.2 × 100
        Assert.False(checks[1].Holds);
        Assert.Equal(20, checks[0].Limit, 9);
        Assert.Equal(100, checks[0].AgainstValue);
        Assert.Equal("Spindle ns ≤ 0.2 × Task", checks[0].Target.Text);
    }

    [Fact]
    public void Row_ShowsARatioNearItsLimitWithAThirdDecimal()
    {
        var results = new List<BenchResult>
        {
            R("s", "near", "Task", "ns", 1000), R("s", "near", "Spindle", "ns", 501),
            R("s", "under", "Task", "ns", 1000), R("s", "under", "Spindle", "ns", 499),
            R("s", "far", "Task", "ns", 1000), R("s", "far", "Spindle", "ns", 640),
        };
        List<TargetCheck> checks = Targets.Check(results, [new Target("i", "s", "*", "Spindle", "ns", Relation.AtMost, 0.5, "Task")]);

        Assert.Equal(["501.0 (0.501× Task)", "NO"], Targets.Row(checks[0])[4..]);
        Assert.Equal(["499.0 (0.499× Task)", "yes"], Targets.Row(checks[1])[4..]);
        Assert.Equal(["640.0 (0.64× Task)", "NO"], Targets.Row(checks[2])[4..]);
    }

    [Fact]
    public void AbsoluteAndOffsetLimits_AndEachRelation()
    {
        var results = new List<BenchResult>
        {
            R("s", "a", "Spindle", "bytes", 1), R("s", "a", "Spindle", "ops", 50), R("s", "a", "Threads", "ops", 10),
            R("s", "a", "Spindle", "cpu", 6), R("s", "a", "Threads", "cpu", 2),
        };
        Target below = new("i", "s", "a", "Spindle", "bytes", Relation.Below, 1);
        Target atLeast = new("i", "s", "a", "Spindle", "ops", Relation.AtLeast, 5, "Threads");
        Target withOffset = new("i", "s", "a", "Spindle", "cpu", Relation.AtMost, 2, "Threads", Offset: 2);

        List<TargetCheck> checks = Targets.Check(results, [below, atLeast, withOffset]);

        Assert.False(checks[0].Holds); // 1 is not below 1
        Assert.True(checks[1].Holds); // 50 ≥ 5 × 10
        Assert.True(checks[2].Holds); // 6 ≤ 2 × 2 + 2
        Assert.Equal(6, checks[2].Limit, 9);
        Assert.Equal("Spindle cpu ≤ 2 × Threads + 2", withOffset.Text);
        Assert.Equal("Spindle bytes < 1", below.Text);
    }

    [Fact]
    public void AnyCase_SkipsTheCasesItExcepts()
    {
        var results = new List<BenchResult>
        {
            R("s", "n=5", "Task", "ns", 100), R("s", "n=5", "Spindle", "ns", 90),
            R("s", "n=5,extra=1", "Task", "ns", 100), R("s", "n=5,extra=1", "Spindle", "ns", 10),
        };
        Target t = new("i", "s", "*", "Spindle", "ns", Relation.AtMost, 0.5, "Task", ExceptCasesWith: ",extra=");

        TargetCheck check = Assert.Single(Targets.Check(results, [t]));
        Assert.Equal("n=5", check.Case);
        Assert.False(check.Holds); // the excepted case, which would hold, does not stand in for the main one
    }

    [Fact]
    public void ATargetWhoseFiguresWereNotMeasured_IsLeftOut()
    {
        var results = new List<BenchResult> { R("s", "a", "Spindle", "ns", 5) };

        Assert.Empty(Targets.Check(results, [new Target("i", "s", "a", "Spindle", "ns", Relation.AtMost, 1, "Task")])); // no Task
        Assert.Empty(Targets.Check(results, [new Target("i", "other", "*", "Spindle", "ns", Relation.AtMost, 1)])); // scenario not run
        Assert.Empty(Targets.Check(results, [new Target("i", "s", "b", "Spindle", "ns", Relation.AtMost, 1)])); // no such case
    }

    [Fact]
    public void EveryTarget_NamesAScenarioOfTheProgram()
    {
        var ids = BenchRunner.All.Select(s => s.Id).ToHashSet();
        Assert.All(Targets.All, t => Assert.Contains(t.Scenario, ids));
    }
}

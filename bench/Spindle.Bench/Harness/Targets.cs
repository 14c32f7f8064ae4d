using System;
using System.Collections.Generic;
using System.Globalization;
using System.Linq;

namespace SpindleLib.Bench.Harness;

/// <summary>How a measured value must compare with its limit.</summary>
public enum Relation
{
    /// <summary>value ≤ limit.</summary>
    AtMost,

    /// <summary>value ≥ limit.</summary>
    AtLeast,

    /// <summary>value &lt; limit.</summary>
    Below,
}

/// <summary>
/// A figure an issue asks of Spindle (its "done when" list), checked against every run that measures it. The limit is
/// <see cref="Factor"/> itself, or, with <see cref="Against"/>, <c>Factor × Against's value + Offset</c> in the same case
/// of the same run.
/// </summary>
/// <param name="Issue">Where the target comes from, e.g. <c>issue 2</c>.</param>
/// <param name="Scenario">The scenario id.</param>
/// <param name="Case">The case, or <c>*</c> for every case of the scenario (each checked on its own).</param>
/// <param name="System">The system held to the target.</param>
/// <param name="Metric">The metric compared.</param>
/// <param name="Relation">How the value must compare with the limit.</param>
/// <param name="Factor">The limit, or its multiple of <paramref name="Against"/>'s value.</param>
/// <param name="Against">The system the limit is relative to, or null for an absolute limit.</param>
/// <param name="Offset">Added to a relative limit (in the metric's unit).</param>
/// <param name="ExceptCasesWith">With <c>*</c>: cases whose name contains this are not checked (a scenario's extra, diagnostic cases).</param>
public sealed record Target(
    string Issue, string Scenario, string Case, string System, string Metric, Relation Relation, double Factor, string? Against = null, double Offset = 0,
    string? ExceptCasesWith = null)
{
    private static readonly CultureInfo Inv = CultureInfo.InvariantCulture;

    /// <summary>The target as a reader would say it, e.g. <c>Spindle ns_per_op ≤ 0.2 × Task</c>.</summary>
    public string Text
    {
        get
        {
            string op = Relation switch { Relation.AtMost => "≤", Relation.AtLeast => "≥", _ => "<" };
            string limit = Against is null
                ? Factor.ToString(Inv)
                : (Factor == 1 ? "" : Factor.ToString(Inv) + " × ") + Against + (Offset == 0 ? "" : " + " + Offset.ToString(Inv));
            return $"{System} {Metric} {op} {limit}";
        }
    }
}

/// <summary>One target checked against one case of one run.</summary>
/// <param name="Target">The target.</param>
/// <param name="Case">The case it was checked in.</param>
/// <param name="Value">The system's value.</param>
/// <param name="AgainstValue">The reference system's value, for a relative target.</param>
/// <param name="Limit">The limit worked out for this run.</param>
/// <param name="Holds">True if the value meets the limit.</param>
public sealed record TargetCheck(Target Target, string Case, double Value, double? AgainstValue, double Limit, bool Holds);

/// <summary>The issues' targets, and their check against a run's results.</summary>
public static class Targets
{
    /// <summary>
    /// Every figure the issues' "done when" lists ask for. Each is checked wherever a run measured it, whatever the mode;
    /// the issues quote quick mode, whose cases the exact case names below are.
    /// </summary>
    public static IReadOnlyList<Target> All { get; } =
    [
        new("issue 2", "sequential", "*", "Spindle", "ns_per_op", Relation.AtMost, 0.2, "Task"),
        new("issue 2", "sequential", "*", "Spindle", "bytes_per_op", Relation.Below, 1),
        new("issue 2", "asyncawait", "pending", "Spindle", "ns_per_op", Relation.AtMost, 0.5, "Task"),
        new("issue 2", "asyncawait", "pending", "Spindle", "bytes_per_op", Relation.Below, 1),
        new("issue 2", "asyncawait", "completed", "Spindle", "ns_per_op", Relation.AtMost, 1, "Task"),
        // "0 bytes": the runtime's own threads allocate a few hundred bytes per round, about 0.001 B per operation.
        new("issue 2", "asyncawait", "completed", "Spindle", "bytes_per_op", Relation.Below, 0.5),
        new("issue 3", "chain", "*", "Spindle", "ns_per_job", Relation.AtMost, 0.1, "TaskFactory"),
        new("issue 3", "chain", "*", "Spindle", "bytes_per_job", Relation.Below, 1),
        new("issue 3", "sequential", "*", "SpindleJob", "ns_per_op", Relation.AtMost, 0.25, "Task"),
        new("issue 3", "parallel-for", "*", "Spindle", "ns_per_element", Relation.AtMost, 0.65, "Loop"),
        new("issue 3", "parallel-for", "*", "Spindle", "ns_per_element", Relation.AtMost, 1, "ParallelFor"),
        .. WhenAny("n=3,completed", 0.25, 0.5),
        .. WhenAny("n=4,completed", 0.25, 0.5),
        .. WhenAny("n=3,pending", 0.5, 1),
        .. WhenAny("n=4,pending", 0.5, 1),
        .. WhenAny("n=8,pending", 0.5, 1),
        // "SpindleOverTask allocates less than Task for n ≥ 3".
        .. new[] { "n=3,completed", "n=3,pending", "n=4,completed", "n=4,pending", "n=8,completed", "n=8,pending" }
            .Select(c => new Target("issue 4", "whenany", c, "SpindleOverTask", "bytes_per_op", Relation.Below, 1, "Task")),
        new("issue 5", "counters-signal", "*", "Spindle", "ops_per_sec", Relation.AtLeast, 5, "Task", ExceptCasesWith: Scenarios.CountersSignalScenario.OneSignallerCase),
        new("issue 5", "counters-signal", "*", "Spindle", "ops_per_sec", Relation.AtLeast, 0.8, "Threads", ExceptCasesWith: Scenarios.CountersSignalScenario.OneSignallerCase),
        new("issue 5", "counters-signal", "*", "Spindle", "bytes_per_counter", Relation.AtMost, 0.5, "Task", ExceptCasesWith: Scenarios.CountersSignalScenario.OneSignallerCase),
        new("issue 5", "counters-delay", "*", "Spindle", "ops_per_sec", Relation.AtLeast, 10, "Task"),
        new("issue 5", "counters-delay", "*", "Spindle", "ops_per_sec", Relation.AtLeast, 0.8, "Threads"),
        new("issue 5", "counters-idle", "rate=100000", "Spindle", "cpu_percent", Relation.AtMost, 2, "Threads", Offset: 2),
        new("issue 5", "counters-idle", "rate=100000", "Spindle", "mb", Relation.AtMost, 0.5, "Task"),
        new("issue 6", "frame", "tasks=50000", "Spindle", "ms_per_frame", Relation.AtMost, 0.1, "Task"),
        new("issue 6", "frame", "tasks=50000", "Spindle", "bytes_per_frame", Relation.Below, 1),
        new("issue 6", "frame", "tasks=50000", "Spindle", "startup_bytes", Relation.AtMost, 1, "Task"),
        new("issue 6", "codegen", "*", "Spindle", "il_bytes_per_method", Relation.AtMost, 1.1, "Task"),
    ];

    /// <summary>Issue 4's pair for one WhenAny case: Spindle's time as a share of Task's, and its bytes below a limit.</summary>
    private static Target[] WhenAny(string c, double timeShare, double bytesBelow) =>
    [
        new("issue 4", "whenany", c, "Spindle", "ns_per_op", Relation.AtMost, timeShare, "Task"),
        new("issue 4", "whenany", c, "Spindle", "bytes_per_op", Relation.Below, bytesBelow),
    ];

    /// <summary>
    /// Checks each target against every case of <paramref name="results"/> it applies to. A target whose scenario, case,
    /// system or reference system was not measured is left out (a run of some scenarios checks only theirs).
    /// </summary>
    public static List<TargetCheck> Check(IReadOnlyList<BenchResult> results, IReadOnlyList<Target>? targets = null)
    {
        var checks = new List<TargetCheck>();
        foreach (Target t in targets ?? All)
        {
            IEnumerable<string> cases = t.Case == "*"
                ? results.Where(r => r.Scenario == t.Scenario && (t.ExceptCasesWith is null || !r.Case.Contains(t.ExceptCasesWith, StringComparison.Ordinal)))
                    .Select(r => r.Case).Distinct()
                : [t.Case];
            foreach (string c in cases)
            {
                if (Find(results, t.Scenario, c, t.System, t.Metric) is not double value)
                {
                    continue;
                }
                double? against = null;
                double limit = t.Factor;
                if (t.Against is not null)
                {
                    if (Find(results, t.Scenario, c, t.Against, t.Metric) is not double reference)
                    {
                        continue;
                    }
                    against = reference;
                    limit = t.Factor * reference + t.Offset;
                }
                bool holds = t.Relation switch
                {
                    Relation.AtMost => value <= limit,
                    Relation.AtLeast => value >= limit,
                    _ => value < limit,
                };
                checks.Add(new TargetCheck(t, c, value, against, limit, holds));
            }
        }
        return checks;
    }

    private static double? Find(IReadOnlyList<BenchResult> results, string scenario, string c, string system, string metric)
        => results.FirstOrDefault(r => r.Scenario == scenario && r.Case == c && r.System == system && r.Metric == metric)?.Value;

    /// <summary>The table's columns: issue, scenario, case, target, measured, holds.</summary>
    public static string[] Header { get; } = ["issue", "scenario", "case", "target", "measured", "holds"];

    /// <summary>One table row per check.</summary>
    public static string[] Row(TargetCheck check)
    {
        Target t = check.Target;
        string measured = Report.FormatNumber(check.Value);
        if (check.AgainstValue is double reference)
        {
            double ratio = check.Value / reference;
            // A ratio that two decimals would round onto the factor gets a third, so that "0.50× Task" is never shown
            // against "≤ 0.5 × Task" with NO beside it (0.501×) or yes (0.499×).
            string format = t.Offset == 0 && Math.Abs(ratio - t.Factor) < 0.005 ? "F3" : "F2";
            measured += reference == 0
                ? $" vs {Report.FormatNumber(reference)}"
                : $" ({ratio.ToString(format, CultureInfo.InvariantCulture)}× {t.Against})";
        }
        if (t.Offset != 0)
        {
            measured += $", limit {Report.FormatNumber(check.Limit)}";
        }
        return [t.Issue, t.Scenario, check.Case, t.Text, measured, check.Holds ? "yes" : "NO"];
    }
}

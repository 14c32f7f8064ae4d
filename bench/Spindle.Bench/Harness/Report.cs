using System;
using System.Collections.Generic;
using System.Globalization;
using System.IO;
using System.Linq;
using System.Text;
using System.Text.Json;
using Spectre.Console;

namespace SpindleLib.Bench.Harness;

/// <summary>Turns results into console tables, a Markdown report and the JSON file of DESIGN.md.</summary>
public static class Report
{
    private static readonly CultureInfo Inv = CultureInfo.InvariantCulture;

    /// <summary>The summary chart's file name, beside report.md (see <see cref="Chart"/>).</summary>
    public const string ChartFile = "summary.svg";

    /// <summary>One row per (case, system); a column per metric, and a ratio against the baseline for each.</summary>
    public static List<string[]> Rows(Scenario scenario, IReadOnlyList<BenchResult> results, out string[] header)
    {
        var mine = results.Where(r => r.Scenario == scenario.Id).ToList();
        var metrics = mine.Select(r => r.Metric).Distinct().ToList();
        var h = new List<string> { "case", "system" };
        foreach (string m in metrics)
        {
            h.Add(m);
            h.Add($"vs {scenario.Baseline}");
        }
        header = h.ToArray();

        var rows = new List<string[]>();
        foreach (var group in mine.GroupBy(r => (r.Case, r.System)))
        {
            var row = new List<string> { group.Key.Case, group.Key.System };
            foreach (string m in metrics)
            {
                BenchResult? r = group.FirstOrDefault(x => x.Metric == m);
                BenchResult? b = mine.FirstOrDefault(x => x.Case == group.Key.Case && x.System == scenario.Baseline && x.Metric == m);
                row.Add(r is null ? "" : FormatValue(r));
                row.Add(r is null || b is null ? "" : FormatRatio(r.Value, b.Value));
            }
            rows.Add(row.ToArray());
        }
        return rows;
    }

    public static string FormatValue(BenchResult r)
    {
        // Bytes are shown to two decimals, like BenchmarkDotNet's whole-byte column: the runtime's own threads allocate a
        // few hundred bytes per round whatever is measured, which is ~0.001 B per operation and not the system's doing.
        // The JSON keeps the exact value.
        string v = r.Metric.StartsWith("bytes", StringComparison.Ordinal) && Math.Abs(r.Value) < 1000
            ? r.Value.ToString("F2", Inv)
            : FormatNumber(r.Value);
        return r.Spread is double s && r.Rounds > 1 ? $"{v} ±{s * 100:F0}%" : v;
    }

    public static string FormatNumber(double v)
    {
        double a = Math.Abs(v);
        return a == 0 ? "0"
            : a < 1 ? v.ToString("F3", Inv)
            : a < 10 ? v.ToString("F2", Inv)
            : a < 1000 ? v.ToString("F1", Inv)
            : v.ToString("N0", Inv);
    }

    private static string FormatRatio(double value, double baseline)
    {
        if (baseline == 0)
        {
            return value == 0 ? "1.00×" : "—";
        }
        return (value / baseline).ToString("F2", Inv) + "×";
    }

    public static void PrintTable(Scenario scenario, IReadOnlyList<BenchResult> results)
    {
        var rows = Rows(scenario, results, out string[] header);
        var table = new Table().Title($"[bold]{Markup.Escape(scenario.Id)}[/] — {Markup.Escape(scenario.Title)} (seed {Markup.Escape(scenario.Seed)})");
        table.Border(TableBorder.Rounded);
        for (int i = 0; i < header.Length; i++)
        {
            var col = new TableColumn(Markup.Escape(header[i]));
            if (i >= 2)
            {
                col.RightAligned();
            }
            table.AddColumn(col);
        }
        foreach (string[] row in rows)
        {
            table.AddRow(row.Select(Markup.Escape).ToArray());
        }
        AnsiConsole.Write(table);
        if (!string.IsNullOrEmpty(scenario.Notes))
        {
            AnsiConsole.MarkupLine("[grey]" + Markup.Escape(scenario.Notes) + "[/]");
        }
        AnsiConsole.WriteLine();
    }

    /// <summary>Prints the issues' targets checked against this run (nothing when the run measured none of them).</summary>
    public static void PrintTargets(IReadOnlyList<TargetCheck> checks)
    {
        if (checks.Count == 0)
        {
            return;
        }
        var table = new Table().Title($"[bold]targets[/] — the issues' figures, checked on this run: {checks.Count(c => c.Holds)} of {checks.Count} hold");
        table.Border(TableBorder.Rounded);
        foreach (string h in Targets.Header)
        {
            table.AddColumn(new TableColumn(Markup.Escape(h)));
        }
        foreach (TargetCheck check in checks)
        {
            string[] row = Targets.Row(check).Select(Markup.Escape).ToArray();
            row[^1] = check.Holds ? "[green]yes[/]" : "[red]NO[/]";
            table.AddRow(row);
        }
        AnsiConsole.Write(table);
        AnsiConsole.MarkupLine("[grey]" + Markup.Escape(TargetsNote) + "[/]");
        AnsiConsole.WriteLine();
    }

    private const string TargetsNote =
        "Each row is a figure from an issue's \"done when\" list (bench/Spindle.Bench/Harness/Targets.cs), checked against this run's " +
        "medians; a relative limit uses the other system's median in the same case of the same run. The issues quote quick mode. " +
        "README.md and docs/decisions.md say why the targets that do not hold are out of reach.";

    public static string Markdown(IReadOnlyList<Scenario> scenarios, IReadOnlyList<BenchResult> results, IReadOnlyList<KeyValuePair<string, string>> machine, string commandLine)
    {
        var sb = new StringBuilder();
        sb.AppendLine("# Spindle benchmark report").AppendLine();
        sb.AppendLine("Command: `" + commandLine + "`").AppendLine();
        sb.AppendLine("| machine | |").AppendLine("|---|---|");
        foreach (var kv in machine)
        {
            sb.AppendLine($"| {kv.Key} | {kv.Value} |");
        }
        sb.AppendLine();
        sb.AppendLine("Values are medians over the measured rounds; ± is half the min–max range over those rounds. Allocations are counted on all threads. Ratios compare against the BCL system of the same case, measured in the same process.").AppendLine();
        sb.AppendLine($"![Every scenario's headline figures against the BCL baseline]({ChartFile})").AppendLine();
        foreach (Scenario s in scenarios)
        {
            if (!results.Any(r => r.Scenario == s.Id))
            {
                continue;
            }
            var rows = Rows(s, results, out string[] header);
            sb.AppendLine($"## {s.Id}: {s.Title} (seed {s.Seed})").AppendLine();
            sb.AppendLine("| " + string.Join(" | ", header) + " |");
            sb.AppendLine("|" + string.Join("|", header.Select((_, i) => i < 2 ? "---" : "---:")) + "|");
            foreach (string[] row in rows)
            {
                sb.AppendLine("| " + string.Join(" | ", row) + " |");
            }
            sb.AppendLine();
            if (!string.IsNullOrEmpty(s.Notes))
            {
                sb.AppendLine(s.Notes).AppendLine();
            }
        }
        List<TargetCheck> checks = Targets.Check(results);
        if (checks.Count > 0)
        {
            sb.AppendLine($"## targets: the issues' figures, checked on this run ({checks.Count(c => c.Holds)} of {checks.Count} hold)").AppendLine();
            sb.AppendLine("| " + string.Join(" | ", Targets.Header) + " |");
            sb.AppendLine("|" + string.Join("|", Targets.Header.Select(_ => "---")) + "|");
            foreach (TargetCheck check in checks)
            {
                sb.AppendLine("| " + string.Join(" | ", Targets.Row(check)) + " |");
            }
            sb.AppendLine().AppendLine(TargetsNote).AppendLine();
        }
        return sb.ToString();
    }

    public static void WriteJson(Stream stream, IReadOnlyList<BenchResult> results, IReadOnlyList<KeyValuePair<string, string>> machine)
    {
        using var w = new Utf8JsonWriter(stream, new JsonWriterOptions { Indented = true });
        w.WriteStartObject();
        w.WriteStartObject("machine");
        foreach (var kv in machine)
        {
            w.WriteString(kv.Key, kv.Value);
        }
        w.WriteEndObject();
        w.WriteStartArray("results");
        foreach (BenchResult r in results)
        {
            w.WriteStartObject();
            w.WriteString("scenario", r.Scenario);
            w.WriteString("case", r.Case);
            w.WriteString("system", r.System);
            w.WriteString("metric", r.Metric);
            w.WriteNumber("value", Math.Round(r.Value, 4));
            if (r.Spread is double s)
            {
                w.WriteNumber("spread", Math.Round(s, 4));
            }
            w.WriteNumber("rounds", r.Rounds);
            w.WriteEndObject();
        }
        w.WriteEndArray();
        // Added after "results" (whose shape DESIGN.md fixes): the issues' targets, checked on these results.
        w.WriteStartArray("targets");
        foreach (TargetCheck check in Targets.Check(results))
        {
            w.WriteStartObject();
            w.WriteString("issue", check.Target.Issue);
            w.WriteString("scenario", check.Target.Scenario);
            w.WriteString("case", check.Case);
            w.WriteString("target", check.Target.Text);
            w.WriteNumber("value", Math.Round(check.Value, 4));
            w.WriteNumber("limit", Math.Round(check.Limit, 4));
            w.WriteBoolean("holds", check.Holds);
            w.WriteEndObject();
        }
        w.WriteEndArray();
        w.WriteEndObject();
    }
}

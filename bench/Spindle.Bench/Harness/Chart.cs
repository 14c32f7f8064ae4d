using System;
using System.Collections.Generic;
using System.Globalization;
using System.Linq;
using System.Security;
using System.Text;

namespace SpindleLib.Bench.Harness;

/// <summary>One bar of the summary chart: a system's figure in one case, against the baseline's in the same case.</summary>
/// <param name="Scenario">The scenario id.</param>
/// <param name="Case">The case.</param>
/// <param name="Metric">The metric charted.</param>
/// <param name="System">The system the bar is for.</param>
/// <param name="Value">The system's median.</param>
/// <param name="Baseline">The baseline system's median in the same case.</param>
/// <param name="Advantage">
/// How many times better than the baseline: baseline ÷ value where lower is better, value ÷ baseline where higher is
/// better (1 = the same, 2 = twice as good, 0.5 = half as good); positive infinity for a zero cost against a non-zero one.
/// </param>
public sealed record ChartBar(string Scenario, string Case, string Metric, string System, double Value, double Baseline, double Advantage);

/// <summary>
/// The run's summary as one plain SVG picture (no library: RESEARCH.md's "plain SVG, written by the project"): every
/// scenario's headline metrics, each system as a bar of how many times better or worse than the BCL baseline of the
/// same case it measured, on a log scale centred on "the same". The report links it; the README shows one.
/// </summary>
public static class Chart
{
    private static readonly CultureInfo Inv = CultureInfo.InvariantCulture;

    /// <summary>The bar is clamped at this many times better or worse (the axis's ends).</summary>
    public const double MaxAdvantage = 100;

    private const int Width = 1100;
    private const int LabelWidth = 250;      // the case and baseline names, left of the axis
    private const int AxisLeft = LabelWidth + 10;
    private const int AxisRight = Width - 220; // room on the right for the label of a bar at the axis's end
    private const int BarHeight = 14;
    private const int RowHeight = 18;
    private const int CaseGap = 6;
    private const int ScenarioGap = 16;
    private const int HeaderHeight = 20;

    /// <summary>The metrics a scenario is judged by, charted in this order; other metrics stay in the tables.</summary>
    public static IReadOnlyList<string> HeadlineMetrics(string scenario) => scenario switch
    {
        "chain" => ["ns_per_job"],
        "parallel-for" => ["ns_per_element"],
        "counters-signal" or "counters-delay" => ["ops_per_sec", "bytes_per_counter"],
        "counters-idle" => ["cpu_percent", "mb"],
        "frame" => ["ms_per_frame", "startup_bytes"],
        "codegen" => ["il_bytes_per_method"],
        "framedelay" => ["cpu_us_per_tick"],
        "timer-change" => ["ns_per_op", "bytes_per_timer"],
        _ => ["ns_per_op"],
    };

    /// <summary>True for metrics where more is better (throughput); every other metric is a cost.</summary>
    public static bool HigherIsBetter(string metric) => metric.EndsWith("_per_sec", StringComparison.Ordinal);

    /// <summary>
    /// The bars of <paramref name="results"/>: for each scenario (in <paramref name="scenarios"/>' order), headline metric
    /// and case, one bar per system other than the baseline. A case without the baseline's figure, and figures that are
    /// not finite or are negative, give no bar.
    /// </summary>
    public static List<ChartBar> Bars(IReadOnlyList<Scenario> scenarios, IReadOnlyList<BenchResult> results)
    {
        var bars = new List<ChartBar>();
        foreach (Scenario s in scenarios)
        {
            foreach (string metric in HeadlineMetrics(s.Id))
            {
                var mine = results.Where(r => r.Scenario == s.Id && r.Metric == metric).ToList();
                foreach (string c in mine.Select(r => r.Case).Distinct())
                {
                    BenchResult? baseline = mine.FirstOrDefault(r => r.Case == c && r.System == s.Baseline);
                    if (baseline is null || !IsUsable(baseline.Value))
                    {
                        continue;
                    }
                    foreach (BenchResult r in mine.Where(r => r.Case == c && r.System != s.Baseline && IsUsable(r.Value)))
                    {
                        bars.Add(new ChartBar(s.Id, c, metric, r.System, r.Value, baseline.Value, Advantage(metric, r.Value, baseline.Value)));
                    }
                }
            }
        }
        return bars;
    }

    private static bool IsUsable(double v) => double.IsFinite(v) && v >= 0;

    /// <summary>How many times better than the baseline (see <see cref="ChartBar.Advantage"/>).</summary>
    public static double Advantage(string metric, double value, double baseline)
    {
        (double good, double bad) = HigherIsBetter(metric) ? (value, baseline) : (baseline, value);
        if (bad == 0)
        {
            return good == 0 ? 1 : double.PositiveInfinity;
        }
        return good / bad;
    }

    /// <summary>
    /// Where on the axis an advantage lies: the centre is "the same", each decade better is a fixed distance right, each
    /// decade worse the same distance left, clamped at <see cref="MaxAdvantage"/> either way.
    /// </summary>
    public static double X(double advantage)
    {
        double decades = Math.Log10(MaxAdvantage);
        double log = advantage <= 0 ? -decades : double.IsPositiveInfinity(advantage) ? decades : Math.Clamp(Math.Log10(advantage), -decades, decades);
        double centre = (AxisLeft + AxisRight) / 2.0;
        return centre + log * ((AxisRight - AxisLeft) / 2.0 / decades);
    }

    /// <summary>The whole picture: a title, the axis, and per scenario a heading and its cases' bars.</summary>
    public static string Svg(IReadOnlyList<Scenario> scenarios, IReadOnlyList<BenchResult> results, string title, string subtitle)
    {
        List<ChartBar> bars = Bars(scenarios, results);
        var body = new StringBuilder();
        double y = 64;
        foreach (Scenario s in scenarios)
        {
            var mine = bars.Where(b => b.Scenario == s.Id).ToList();
            if (mine.Count == 0)
            {
                continue;
            }
            y += ScenarioGap;
            body.Append(Text(8, y + 14, $"{s.Id} (seed {s.Seed}): {s.Title}", "scenario"));
            y += HeaderHeight;
            foreach (var group in mine.GroupBy(b => (b.Metric, b.Case)))
            {
                string direction = HigherIsBetter(group.Key.Metric) ? "higher is better" : "lower is better";
                body.Append(Text(16, y + 12, $"{group.Key.Case} · {group.Key.Metric}", "case"));
                body.Append(Text(16, y + 12 + RowHeight - 4, $"{s.Baseline} {Report.FormatNumber(group.First().Baseline)} ({direction})", "baseline"));
                double caseTop = y;
                foreach (ChartBar bar in group)
                {
                    body.Append(Bar(bar, y));
                    y += RowHeight;
                }
                y = Math.Max(y, caseTop + 2 * RowHeight) + CaseGap;
            }
        }
        double height = y + 40;

        var svg = new StringBuilder();
        svg.Append(Inv, $"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{Width}\" height=\"{height:F0}\" viewBox=\"0 0 {Width} {height:F0}\" font-family=\"sans-serif\" font-size=\"11\">\n");
        svg.Append("<style>.title{font-size:15px;font-weight:bold}.scenario{font-weight:bold;font-size:12px}.case{fill:#222}.baseline{fill:#777;font-size:10px}")
            .Append(".spindle{fill:#2b6cb0}.other{fill:#a0aec0}.worse{opacity:.55}.label{fill:#222;font-size:10px}.axis{stroke:#999;stroke-width:1}.grid{stroke:#ddd;stroke-width:1}.tick{fill:#555;font-size:10px}</style>\n");
        svg.Append(Inv, $"<rect width=\"{Width}\" height=\"{height:F0}\" fill=\"white\"/>\n");
        svg.Append(Text(8, 20, title, "title"));
        svg.Append(Text(8, 38, subtitle, "baseline"));
        Axis(svg, 56, height - 24);
        svg.Append(body);
        svg.Append("</svg>\n");
        return svg.ToString();
    }

    private static void Axis(StringBuilder svg, double top, double bottom)
    {
        int decades = (int)Math.Round(Math.Log10(MaxAdvantage));
        for (int d = -decades; d <= decades; d++)
        {
            double x = X(Math.Pow(10, d));
            svg.Append(Inv, $"<line class=\"{(d == 0 ? "axis" : "grid")}\" x1=\"{x:F1}\" y1=\"{top:F0}\" x2=\"{x:F1}\" y2=\"{bottom:F0}\"/>\n");
            string tick = d == 0 ? "same as baseline" : d > 0 ? $"{Math.Pow(10, d):0}× better" : $"{Math.Pow(10, -d):0}× worse";
            svg.Append(Text(x, top + 2, tick, "tick", anchor: "middle"));
            svg.Append(Text(x, bottom + 14, tick, "tick", anchor: "middle"));
        }
    }

    private static string Bar(ChartBar bar, double y)
    {
        double centre = X(1);
        double end = X(bar.Advantage);
        double left = Math.Min(centre, end);
        double width = Math.Max(1, Math.Abs(end - centre));
        bool spindle = bar.System.StartsWith("Spindle", StringComparison.Ordinal);
        string cls = (spindle ? "spindle" : "other") + (bar.Advantage < 1 ? " worse" : "");
        string label = $"{bar.System} {Report.FormatNumber(bar.Value)}: {Describe(bar.Advantage)}";
        var sb = new StringBuilder();
        sb.Append(Inv, $"<rect class=\"bar {cls}\" x=\"{left:F1}\" y=\"{y:F0}\" width=\"{width:F1}\" height=\"{BarHeight}\" ");
        sb.Append(Inv, $"data-scenario=\"{Escape(bar.Scenario)}\" data-case=\"{Escape(bar.Case)}\" data-metric=\"{Escape(bar.Metric)}\" data-system=\"{Escape(bar.System)}\" ");
        sb.Append(Inv, $"data-advantage=\"{(double.IsPositiveInfinity(bar.Advantage) ? "inf" : bar.Advantage.ToString("R", Inv))}\"><title>{Escape(label)}</title></rect>\n");
        // A bar that is better ends on the right, and its label follows it; a worse bar fills only the left half of its
        // row, so its label starts right of the centre line. Either way no label covers a bar or the names on the left.
        sb.Append(Text((bar.Advantage >= 1 ? left + width : centre) + 4, y + 11, label, "label"));
        return sb.ToString();
    }

    /// <summary>An advantage as a reader says it: "3.1× better", "2.0× worse", "the same".</summary>
    public static string Describe(double advantage)
    {
        if (double.IsPositiveInfinity(advantage))
        {
            return "∞× better";
        }
        double times = advantage >= 1 ? advantage : 1 / advantage;
        if (times < 1.005)
        {
            return "the same";
        }
        return times.ToString(times >= 10 ? "F0" : "F2", Inv) + (advantage >= 1 ? "× better" : "× worse");
    }

    private static string Text(double x, double y, string text, string cls, string anchor = "start")
        => string.Create(Inv, $"<text class=\"{cls}\" x=\"{x:F1}\" y=\"{y:F1}\" text-anchor=\"{anchor}\">{Escape(text)}</text>\n");

    private static string Escape(string s) => SecurityElement.Escape(s) ?? "";
}

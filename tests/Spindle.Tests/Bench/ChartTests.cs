using System;
using System.Collections.Generic;
using System.Globalization;
using System.Linq;
using System.Xml.Linq;
using SpindleLib.Bench.Harness;

namespace SpindleLib.Tests.Bench;

/// <summary>The report's summary chart (bench/Spindle.Bench/Harness/Chart.cs): what each bar says, and where it is drawn.</summary>
public sealed class ChartTests
{
    private sealed class FakeScenario(string id, string baseline) : Scenario
    {
        public override string Id => id;

        public override string Title => "a <title> & more";

        public override string Seed => "000";

        public override string Baseline => baseline;

        public override void Run(BenchContext context) => throw new NotSupportedException();
    }

    private static BenchResult R(string scenario, string c, string system, string metric, double value)
        => new(scenario, c, system, metric, value, null, 1);

    [Fact]
    public void Advantage_IsHowManyTimesBetter_WhicheverWayTheMetricPoints()
    {
        Assert.Equal(4, Chart.Advantage("ns_per_op", 25, 100));          // a quarter of the time
        Assert.Equal(0.5, Chart.Advantage("ns_per_op", 200, 100));       // twice the time
        Assert.Equal(3, Chart.Advantage("ops_per_sec", 300, 100));       // three times the throughput
        Assert.Equal(0.25, Chart.Advantage("ops_per_sec", 25, 100));
        Assert.Equal(double.PositiveInfinity, Chart.Advantage("bytes_per_counter", 0, 64));
        Assert.Equal(1, Chart.Advantage("bytes_per_counter", 0, 0));
        Assert.Equal(0, Chart.Advantage("ops_per_sec", 0, 10));
    }

    [Fact]
    public void X_IsALogScaleCentredOnTheSame_ClampedAtItsEnds()
    {
        double centre = Chart.X(1);
        double decade = Chart.X(10) - centre;
        Assert.True(decade > 0);
        Assert.Equal(centre - decade, Chart.X(0.1), 6);
        Assert.Equal(centre + Math.Log10(2) * decade, Chart.X(2), 6);
        double end = Chart.X(Chart.MaxAdvantage);
        Assert.Equal(end, Chart.X(Chart.MaxAdvantage * 50), 6);
        Assert.Equal(end, Chart.X(double.PositiveInfinity), 6);
        Assert.Equal(2 * centre - end, Chart.X(0), 6);
    }

    [Fact]
    public void Bars_OnePerSystemOtherThanTheBaseline_ForTheHeadlineMetricsOnly()
    {
        var scenarios = new Scenario[] { new FakeScenario("sequential", "Task"), new FakeScenario("counters-signal", "Task") };
        var results = new List<BenchResult>
        {
            R("sequential", "units=1000", "Task", "ns_per_op", 100),
            R("sequential", "units=1000", "Spindle", "ns_per_op", 25),
            R("sequential", "units=1000", "SpindleJob", "ns_per_op", 200),
            R("sequential", "units=1000", "Spindle", "bytes_per_op", 0),   // not a headline metric: no bar
            R("sequential", "orphan", "Spindle", "ns_per_op", 10),        // no baseline in that case: no bar
            R("sequential", "units=1000", "Spindle", "ns_per_op_x", double.NaN),
            R("counters-signal", "n=1", "Task", "ops_per_sec", 1_000_000),
            R("counters-signal", "n=1", "Spindle", "ops_per_sec", 3_000_000),
            R("counters-signal", "n=1", "Task", "bytes_per_counter", 260),
            R("counters-signal", "n=1", "Spindle", "bytes_per_counter", 130),
            R("counters-signal", "n=1", "Threads", "bytes_per_counter", double.PositiveInfinity), // not finite: no bar
        };

        List<ChartBar> bars = Chart.Bars(scenarios, results);

        Assert.Equal(
            ["sequential/units=1000/ns_per_op/Spindle", "sequential/units=1000/ns_per_op/SpindleJob",
             "counters-signal/n=1/ops_per_sec/Spindle", "counters-signal/n=1/bytes_per_counter/Spindle"],
            bars.Select(b => $"{b.Scenario}/{b.Case}/{b.Metric}/{b.System}"));
        Assert.Equal([4, 0.5, 3, 2], bars.Select(b => b.Advantage));
        Assert.All(bars, b => Assert.True(b.Baseline > 0));
    }

    [Fact]
    public void Svg_IsWellFormed_EachBarCarriesItsFigures_AndGrowsTheWayItsAdvantagePoints()
    {
        var scenarios = new Scenario[] { new FakeScenario("whenany", "Task") };
        var results = new List<BenchResult>
        {
            R("whenany", "n=3,pending", "Task", "ns_per_op", 150),
            R("whenany", "n=3,pending", "Spindle", "ns_per_op", 75),
            R("whenany", "n=3,pending", "SpindleOverTask", "ns_per_op", 300),
        };

        string svg = Chart.Svg(scenarios, results, "title <&>", "sub");
        XDocument doc = XDocument.Parse(svg); // throws if the text or the names were not escaped

        XNamespace ns = "http://www.w3.org/2000/svg";
        var bars = doc.Descendants(ns + "rect").Where(e => ((string?)e.Attribute("class"))?.StartsWith("bar", StringComparison.Ordinal) == true).ToList();
        Assert.Equal(2, bars.Count);
        double centre = Chart.X(1);
        XElement better = bars.Single(b => (string?)b.Attribute("data-system") == "Spindle");
        XElement worse = bars.Single(b => (string?)b.Attribute("data-system") == "SpindleOverTask");
        Assert.Equal("2", (string?)better.Attribute("data-advantage"));
        Assert.Equal("0.5", (string?)worse.Attribute("data-advantage"));
        // Twice as good: starts at the centre and ends where 2× lies; twice as bad: the mirror image, left of the centre.
        Assert.Equal(centre, Double(better, "x"), 1);
        Assert.Equal(Chart.X(2) - centre, Double(better, "width"), 1);
        Assert.Equal(Chart.X(0.5), Double(worse, "x"), 1);
        Assert.Equal(centre - Chart.X(0.5), Double(worse, "width"), 1);
        Assert.Contains("worse", (string?)worse.Attribute("class"), StringComparison.Ordinal);
        Assert.Contains("Spindle 75.0: 2.00× better", svg, StringComparison.Ordinal);
        Assert.Contains("SpindleOverTask 300.0: 2.00× worse", svg, StringComparison.Ordinal);
        Assert.Contains("Task 150.0 (lower is better)", svg, StringComparison.Ordinal);
    }

    [Fact]
    public void Describe_SaysBetterOrWorseInWholeTimesPastTen()
    {
        Assert.Equal("3.10× better", Chart.Describe(3.1));
        Assert.Equal("2.00× worse", Chart.Describe(0.5));
        Assert.Equal("12× worse", Chart.Describe(1 / 12.0));
        Assert.Equal("the same", Chart.Describe(1.001));
        Assert.Equal("∞× better", Chart.Describe(double.PositiveInfinity));
    }

    private static double Double(XElement e, string attribute) => double.Parse((string)e.Attribute(attribute)!, CultureInfo.InvariantCulture);
}

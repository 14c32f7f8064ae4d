using System;
using SpindleLib.Bench.Scenarios;

namespace SpindleLib.Tests.Bench;

/// <summary>The parallel-for scenario's check of what a system computed.</summary>
public sealed class ParallelForScenarioTests
{
    [Fact]
    public void Check_AnOutputMissingAnyElementButTheLast_Throws()
    {
        // A system that computed only its last batch (a parallel-for that skipped batches) must not pass the check: the
        // scenario says every system writes the same results, checked.
        var expected = new float[4096];
        Array.Fill(expected, 3.0f);
        var output = new float[expected.Length];
        output[^1] = expected[^1];

        InvalidOperationException e = Assert.Throws<InvalidOperationException>(() => ParallelForScenario.Check("Spindle", output, expected));
        Assert.Contains("Spindle", e.Message, StringComparison.Ordinal);
        Assert.Contains("index 0 of 4096", e.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void Check_AnOutputLeftAtNaN_Throws_AndAComputedOnePasses()
    {
        var expected = new float[64];
        Array.Fill(expected, 1.5f);
        var output = (float[])expected.Clone();
        output[17] = float.NaN;
        Assert.Throws<InvalidOperationException>(() => ParallelForScenario.Check("Loop", output, expected));

        output[17] = 1.5f;
        ParallelForScenario.Check("Loop", output, expected);
    }
}

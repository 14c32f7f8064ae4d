using System;
using System.IO;

namespace SpindleLib.Tests.Samples;

/// <summary>
/// The samples run, at a small size, and finish as their READMEs say: the simulation's behaviours all end after the
/// stop, and every message the sessions sample sends is handled once. Run alone: each sets the pools' cap, and both
/// print to the console.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class SampleTests
{
    private static (int ExitCode, string Output) Run(Func<string[], int> main, params string[] args)
    {
        var output = new StringWriter();
        TextWriter console = Console.Out;
        int cap = SpindlePool.MaxRetainedPerType;
        Console.SetOut(output);
        try
        {
            return (main(args), output.ToString());
        }
        finally
        {
            Console.SetOut(console);
            SpindlePool.MaxRetainedPerType = cap;
        }
    }

    [Theory]
    [InlineData(null, "inbox.WaitAsync(idle)")]
    [InlineData("--whenany", "WhenAny(inbox.WaitAsync(), Spindle.Delay(idle))")]
    [InlineData("--timer", "a SpindleTimer that each message pushes back (Change)")]
    public void Sessions_HandlesEveryMessageSentOnce(string? mode, string waitsOn)
    {
        string[] args = ["--sessions", "2000", "--seconds", "1", "--rate", "20000", "--idle-ms", "50", .. (mode is null ? [] : new[] { mode })];
        (int exitCode, string output) = Run(SpindleLib.Samples.Sessions.Program.Main, args);
        Assert.True(exitCode == 0, output);
        Assert.Contains("handled, in", output, StringComparison.Ordinal);
        Assert.Contains(waitsOn, output, StringComparison.Ordinal);
        Assert.Contains("shut down: 0 sessions still running", output, StringComparison.Ordinal);
    }

    [Fact]
    public void Simulation_RunsAndEndsEveryBehaviour()
    {
        (int exitCode, string output) = Run(SpindleLib.Samples.Simulation.Program.Main, "--seconds", "1", "--entities", "1000");
        Assert.True(exitCode == 0, output);
        Assert.Contains("0 behaviours still running one frame after the stop", output, StringComparison.Ordinal);
    }
}

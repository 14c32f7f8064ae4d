using System;
using System.Collections.Generic;
using System.IO;

namespace SpindleLib.Tests.Api;

/// <summary>
/// An invalid SPINDLE_WORKERS fails the call that first needs the workers, with the fix in its message. Some calls only
/// arrange for work to be handed to the workers later, from another thread (a wheel's timer thread, a source that queues
/// its continuations, a continuation past the inline nesting bound); met there first, the failure used to lose that
/// work: the timer thread reported it and the awaiting code never resumed. Each probe runs in a fresh process
/// (<see cref="WorkerStartProbe"/>), since the workers start once per process.
/// </summary>
public sealed class WorkerStartProcessTests
{
    [Theory]
    [InlineData("timers")]
    [InlineData("dispatching-sources")]
    [InlineData("deep-chain")]
    public void InvalidWorkerCount_FailsTheCallThatArmsTheHandOff_AndNothingIsLost(string probe)
    {
        string assembly = typeof(WorkerStartProbe).Assembly.Location;
        Assert.True(File.Exists(assembly), "no test assembly at " + assembly);
        (int exit, string output) = ChildProcess.Run(ChildProcess.DotNetHost(), [assembly, "--probe", probe], TimeSpan.FromMinutes(2),
            new Dictionary<string, string?> { ["SPINDLE_WORKERS"] = "four" });
        Assert.True(exit == 0 && output.Contains("probe done", StringComparison.Ordinal), $"probe {probe} failed (exit {exit}):\n{output}");
        Assert.DoesNotContain("FAIL", output, StringComparison.Ordinal);
    }
}

using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Linq;

namespace SpindleLib.Tests.Api;

/// <summary>Runs a program in a process of its own, for the tests that need one (a native build, a process-wide setting).</summary>
internal static class ChildProcess
{
    /// <summary>The dotnet host running the tests (the SDK sets DOTNET_HOST_PATH), or the one on PATH.</summary>
    public static string DotNetHost() => Environment.GetEnvironmentVariable("DOTNET_HOST_PATH") is { Length: > 0 } host ? host : "dotnet";

    /// <summary>
    /// Runs <paramref name="file"/> to its end, or fails the test after <paramref name="timeout"/> (killing it), and
    /// returns its exit code and its output (standard output and error, interleaved). <paramref name="environment"/>
    /// sets (or, with null, removes) variables of the child's environment.
    /// </summary>
    public static (int ExitCode, string Output) Run(string file, IEnumerable<string> arguments, TimeSpan timeout,
        IReadOnlyDictionary<string, string?>? environment = null)
    {
        var start = new ProcessStartInfo(file)
        {
            RedirectStandardOutput = true,
            RedirectStandardError = true,
            UseShellExecute = false,
        };
        foreach (string argument in arguments)
        {
            start.ArgumentList.Add(argument);
        }
        // The test host inherits the outer `dotnet test`'s MSBuild settings; a nested build must find its own.
        foreach (string name in start.Environment.Keys.Where(k => k.StartsWith("MSBuild", StringComparison.OrdinalIgnoreCase)).ToList())
        {
            start.Environment.Remove(name);
        }
        start.Environment["DOTNET_CLI_TELEMETRY_OPTOUT"] = "1";
        start.Environment["DOTNET_NOLOGO"] = "1";
        foreach ((string name, string? value) in environment ?? new Dictionary<string, string?>())
        {
            start.Environment[name] = value;
        }
        using Process process = Process.Start(start)!;
        var output = new System.Text.StringBuilder();
        process.OutputDataReceived += (_, e) => { lock (output) { output.AppendLine(e.Data); } };
        process.ErrorDataReceived += (_, e) => { lock (output) { output.AppendLine(e.Data); } };
        process.BeginOutputReadLine();
        process.BeginErrorReadLine();
        if (!process.WaitForExit(timeout))
        {
            process.Kill(entireProcessTree: true);
            Assert.Fail($"{Path.GetFileName(file)} did not finish in {timeout.TotalMinutes} minutes:\n{Tail(output.ToString())}");
        }
        process.WaitForExit(); // drains the redirected streams
        lock (output)
        {
            return (process.ExitCode, output.ToString());
        }
    }

    /// <summary>The last 40 lines of <paramref name="log"/>.</summary>
    public static string Tail(string log)
    {
        string[] lines = log.Split('\n');
        return string.Join('\n', lines.Skip(Math.Max(0, lines.Length - 40)));
    }
}

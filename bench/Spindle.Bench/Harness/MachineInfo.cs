using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Linq;
using System.Runtime;
using System.Runtime.InteropServices;

namespace SpindleLib.Bench.Harness;

/// <summary>What the results were measured on.</summary>
public static class MachineInfo
{
    public static IReadOnlyList<KeyValuePair<string, string>> Describe(BenchSize size)
    {
        return new List<KeyValuePair<string, string>>
        {
            new("cpu", CpuModel()),
            new("logical_cores", Environment.ProcessorCount.ToString(System.Globalization.CultureInfo.InvariantCulture)),
            new("memory_gib", (GC.GetGCMemoryInfo().TotalAvailableMemoryBytes / (1024.0 * 1024 * 1024)).ToString("F1", System.Globalization.CultureInfo.InvariantCulture)),
            new("os", RuntimeInformation.OSDescription),
            new("runtime", RuntimeInformation.FrameworkDescription),
            new("gc", (GCSettings.IsServerGC ? "server" : "workstation") + (GCSettings.LatencyMode == GCLatencyMode.Batch ? ", non-concurrent" : ", concurrent")),
            new("mode", size.ToString().ToLowerInvariant()),
            new("commit", Commit()),
            new("date_utc", DateTime.UtcNow.ToString("yyyy-MM-dd HH:mm", System.Globalization.CultureInfo.InvariantCulture)),
        };
    }

    /// <summary>
    /// The commit of the checkout the benchmark program was built from (short hash, with "+changes" when tracked files
    /// differ from it), so a table can be traced to its code; "unknown" without git or outside a clone.
    /// </summary>
    internal static string Commit()
    {
        string? head = Git(AppContext.BaseDirectory, "rev-parse --short HEAD");
        if (head is null)
        {
            return "unknown";
        }
        string? changes = Git(AppContext.BaseDirectory, "status --porcelain --untracked-files=no");
        return changes is { Length: > 0 } ? head + "+changes" : head;
    }

    private static string? Git(string directory, string arguments)
    {
        try
        {
            var start = new ProcessStartInfo("git", $"-C \"{directory}\" {arguments}")
            {
                RedirectStandardOutput = true,
                RedirectStandardError = true,
                UseShellExecute = false,
            };
            using Process? git = Process.Start(start);
            if (git is null)
            {
                return null;
            }
            string output = git.StandardOutput.ReadToEnd();
            git.StandardError.ReadToEnd();
            if (!git.WaitForExit(5000) || git.ExitCode != 0)
            {
                return null;
            }
            return output.Trim();
        }
        catch (Exception e) when (e is System.ComponentModel.Win32Exception or InvalidOperationException or IOException)
        {
            return null; // no git on PATH
        }
    }

    private static string CpuModel()
    {
        try
        {
            if (File.Exists("/proc/cpuinfo"))
            {
                string? line = File.ReadLines("/proc/cpuinfo").FirstOrDefault(l => l.StartsWith("model name", StringComparison.Ordinal));
                if (line is not null)
                {
                    return line[(line.IndexOf(':', StringComparison.Ordinal) + 1)..].Trim();
                }
            }
        }
        catch (IOException)
        {
        }
        return RuntimeInformation.ProcessArchitecture.ToString();
    }
}

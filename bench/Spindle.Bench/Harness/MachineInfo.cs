using System;
using System.Collections.Generic;
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
            new("date_utc", DateTime.UtcNow.ToString("yyyy-MM-dd HH:mm", System.Globalization.CultureInfo.InvariantCulture)),
        };
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

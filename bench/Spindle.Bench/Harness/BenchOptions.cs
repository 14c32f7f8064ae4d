using System;
using System.Collections.Generic;
using System.Linq;

namespace SpindleLib.Bench.Harness;

/// <summary>How big and how repeated a run is.</summary>
public enum BenchSize
{
    /// <summary>One round at a tiny size: what the test suite runs to keep every scenario working.</summary>
    Tiny,
    /// <summary>The default: every scenario in a few minutes, with warm-up and several rounds.</summary>
    Quick,
    /// <summary>The sizes the seeds used, and more rounds.</summary>
    Full,
}

/// <summary>The parsed command line: <c>[SCENARIO...] [--quick|--full] [--json FILE]</c>.</summary>
public sealed class BenchOptions
{
    public List<string> Scenarios { get; } = new();

    public BenchSize Size { get; set; } = BenchSize.Quick;

    public string? JsonPath { get; set; }

    public string ReportDirectory { get; set; } = "artifacts/bench";

    public bool ShowHelp { get; set; }

    public bool ListOnly { get; set; }

    public static BenchOptions Parse(IReadOnlyList<string> args, IReadOnlyCollection<string> knownScenarios)
    {
        var options = new BenchOptions();
        for (int i = 0; i < args.Count; i++)
        {
            string a = args[i];
            switch (a)
            {
                case "--quick":
                    options.Size = BenchSize.Quick;
                    break;
                case "--full":
                    options.Size = BenchSize.Full;
                    break;
                case "--tiny":
                    options.Size = BenchSize.Tiny;
                    break;
                case "--json":
                    if (i + 1 >= args.Count || args[i + 1].StartsWith("--", StringComparison.Ordinal))
                    {
                        throw new ArgumentException("--json needs a file name, for example: --json results.json");
                    }
                    options.JsonPath = args[++i];
                    break;
                case "--report-dir":
                    if (i + 1 >= args.Count)
                    {
                        throw new ArgumentException("--report-dir needs a directory name.");
                    }
                    options.ReportDirectory = args[++i];
                    break;
                case "--list":
                    options.ListOnly = true;
                    break;
                case "-h":
                case "--help":
                case "-?":
                    options.ShowHelp = true;
                    break;
                default:
                    if (a.StartsWith('-'))
                    {
                        throw new ArgumentException($"Unknown option '{a}'. Run with --help to see the options.");
                    }
                    if (!knownScenarios.Contains(a))
                    {
                        throw new ArgumentException($"Unknown scenario '{a}'. Known scenarios: {string.Join(", ", knownScenarios)}.");
                    }
                    if (!options.Scenarios.Contains(a))
                    {
                        options.Scenarios.Add(a);
                    }
                    break;
            }
        }
        return options;
    }

    public static string HelpText(IEnumerable<(string Id, string Title)> scenarios) =>
        "Spindle benchmark suite: every seed experiment, side by side with the systems it measured.\n\n" +
        "Usage: dotnet run -c Release --project bench/Spindle.Bench -- [SCENARIO...] [--quick|--full] [--json FILE]\n\n" +
        "  SCENARIO       one or more scenario ids (default: all)\n" +
        "  --quick        warm-up plus a few rounds at reduced sizes (default)\n" +
        "  --full         the seeds' own sizes, more rounds\n" +
        "  --json FILE    also write the results as JSON to FILE\n" +
        "  --report-dir D where report.md and results.json go (default artifacts/bench)\n" +
        "  --list         list the scenarios and exit\n\n" +
        "Scenarios:\n" + string.Join("\n", scenarios.Select(s => $"  {s.Id,-16} {s.Title}")) + "\n";
}

using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Linq;
using System.Threading;
using Spectre.Console;
using SpindleLib.Bench.Scenarios;

namespace SpindleLib.Bench.Harness;

/// <summary>Runs the chosen scenarios, prints their tables and writes the report.</summary>
public static class BenchRunner
{
    /// <summary>Every scenario, in the order they run and print.</summary>
    public static IReadOnlyList<Scenario> All { get; } = new Scenario[]
    {
        new SequentialScenario(),
        new AsyncAwaitScenario(),
        new ChainScenario(),
        new ParallelForScenario(),
        new WhenAnyScenario(),
        new WhenAllScenario(),
        new CountersSignalScenario(),
        new CountersDelayScenario(),
        new CountersIdleScenario(),
        new FrameScenario(),
        new FrameDelayScenario(),
        new TimerChangeScenario(),
        new CodegenScenario(),
    };

    public static int Execute(string[] args)
    {
        BenchOptions options;
        try
        {
            options = BenchOptions.Parse(args, All.Select(s => s.Id).ToArray());
        }
        catch (ArgumentException e)
        {
            Console.Error.WriteLine(e.Message);
            return 2;
        }
        if (options.ShowHelp || options.ListOnly)
        {
            Console.Write(options.ShowHelp ? BenchOptions.HelpText(All.Select(s => (s.Id, s.Title))) : string.Join("\n", All.Select(s => $"{s.Id,-16} {s.Title}")) + "\n");
            return 0;
        }
        if (Console.IsOutputRedirected)
        {
            // Plain text for logs and pipes: no colour codes, and room for the widest table.
            AnsiConsole.Profile.Width = 200;
            AnsiConsole.Profile.Capabilities.Ansi = false;
            AnsiConsole.Profile.Capabilities.ColorSystem = ColorSystem.NoColors;
        }
#if DEBUG
        AnsiConsole.MarkupLine("[yellow]Warning: this is a Debug build. Run with -c Release for figures worth quoting.[/]");
#endif
        string commandLine = "dotnet run -c Release --project bench/Spindle.Bench" + (args.Length > 0 ? " -- " + string.Join(" ", args) : "");
        Run(options, commandLine, print: true);
        return 0;
    }

    /// <summary>Runs the scenarios the options name (all when none), and writes the report files.</summary>
    public static IReadOnlyList<BenchResult> Run(BenchOptions options, string commandLine, bool print)
    {
        // Every system is measured without a SynchronizationContext, as in a console program; a host's context (a test
        // runner's, a UI's) would post continuations elsewhere and measure that context instead.
        SynchronizationContext? previous = SynchronizationContext.Current;
        SynchronizationContext.SetSynchronizationContext(null);
        try
        {
            return RunCore(options, commandLine, print);
        }
        finally
        {
            SynchronizationContext.SetSynchronizationContext(previous);
        }
    }

    private static IReadOnlyList<BenchResult> RunCore(BenchOptions options, string commandLine, bool print)
    {
        var scenarios = options.Scenarios.Count == 0 ? All.ToList() : All.Where(s => options.Scenarios.Contains(s.Id)).ToList();
        var total = Stopwatch.StartNew();
        int index = 0;
        var context = new BenchContext(options.Size, message =>
        {
            if (print)
            {
                AnsiConsole.MarkupLine($"[grey][[{total.Elapsed:mm\\:ss}]] [[{index}/{scenarios.Count}]][/] {Markup.Escape(message)}");
            }
        });
        var machine = MachineInfo.Describe(options.Size);
        foreach (Scenario scenario in scenarios)
        {
            index++;
            context.Scenario = scenario.Id;
            context.Progress("start");
            scenario.Run(context);
            if (print)
            {
                AnsiConsole.WriteLine();
                Report.PrintTable(scenario, context.Results);
            }
        }

        if (print)
        {
            Report.PrintTargets(Targets.Check(context.Results));
        }

        if (!string.IsNullOrEmpty(options.ReportDirectory))
        {
            Directory.CreateDirectory(options.ReportDirectory);
            string md = Path.Combine(options.ReportDirectory, "report.md");
            string markdown = Report.Markdown(scenarios, context.Results, machine, commandLine);
            WriteWhole(md, stream =>
            {
                using var writer = new StreamWriter(stream);
                writer.Write(markdown);
            });
            string json = Path.Combine(options.ReportDirectory, "results.json");
            WriteWhole(json, stream => Report.WriteJson(stream, context.Results, machine));
            string svg = Chart.Svg(scenarios, context.Results, "Spindle against the BCL: how many times better or worse, per case (one run)", ChartSubtitle(machine, commandLine));
            WriteWhole(Path.Combine(options.ReportDirectory, Report.ChartFile), stream =>
            {
                using var writer = new StreamWriter(stream);
                writer.Write(svg);
            });
            if (print)
            {
                AnsiConsole.MarkupLine($"Report: [bold]{Markup.Escape(md)}[/] and [bold]{Markup.Escape(json)}[/] ({total.Elapsed.TotalSeconds:F0} s in all)");
            }
        }
        if (options.JsonPath is not null)
        {
            string? dir = Path.GetDirectoryName(Path.GetFullPath(options.JsonPath));
            if (dir is not null)
            {
                Directory.CreateDirectory(dir);
            }
            WriteWhole(options.JsonPath, stream => Report.WriteJson(stream, context.Results, machine));
            if (print)
            {
                AnsiConsole.MarkupLine($"JSON: [bold]{Markup.Escape(options.JsonPath)}[/]");
            }
        }
        return context.Results;
    }

    /// <summary>What the chart was measured on and with: the command, the machine, the commit and the date.</summary>
    private static string ChartSubtitle(IReadOnlyList<KeyValuePair<string, string>> machine, string commandLine)
    {
        string Get(string key) => machine.FirstOrDefault(kv => kv.Key == key).Value ?? "?";
        return $"{commandLine} · {Get("cpu")}, {Get("logical_cores")} logical cores · {Get("runtime")} · commit {Get("commit")} · {Get("date_utc")} UTC";
    }

    /// <summary>
    /// Writes <paramref name="path"/> whole or not at all: into a file of this process's own beside it, then renamed over
    /// it. Two bench processes writing the same report (two runs started in one directory) then leave one complete file,
    /// the last one's, where writing in place failed the later run with a sharing violation (once in 240 paired runs).
    /// </summary>
    public static void WriteWhole(string path, Action<Stream> write)
    {
        string full = Path.GetFullPath(path);
        string temporary = $"{full}.{Environment.ProcessId}.{Guid.NewGuid():N}.tmp";
        try
        {
            using (FileStream stream = File.Create(temporary))
            {
                write(stream);
            }
            File.Move(temporary, full, overwrite: true);
        }
        finally
        {
            if (File.Exists(temporary))
            {
                File.Delete(temporary);
            }
        }
    }
}

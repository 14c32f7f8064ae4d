using System;
using System.IO;

namespace SpindleLib.Generate;

/// <summary>
/// Regenerates Spindle's generated sources. Usage: <c>dotnet run --project tools/Spindle.Generate [--check] [REPO_ROOT]</c>.
/// Without a root it walks up from the current directory to the folder holding Spindle.slnx. With <c>--check</c> it
/// writes nothing and exits with 1 if any checked-in file differs from what the template generates.
/// </summary>
internal static class Program
{
    private static int Main(string[] args)
    {
        bool check = Array.IndexOf(args, "--check") >= 0;
        string? root = Array.Find(args, a => !a.StartsWith("--", StringComparison.Ordinal)) ?? FindRoot(Directory.GetCurrentDirectory());
        if (root is null || !File.Exists(Path.Combine(root, "Spindle.slnx")))
        {
            Console.Error.WriteLine("Could not find the repository root (the folder with Spindle.slnx). Run from inside the repository, or pass its path.");
            return 2;
        }

        int status = 0;
        foreach (var (outputPath, generate) in Outputs)
        {
            status = Math.Max(status, Write(root, outputPath, generate(), check));
        }
        return status;
    }

    /// <summary>Every generated file: its path relative to the repository root, and its template.</summary>
    private static readonly (string OutputPath, Func<string> Generate)[] Outputs =
    {
        (TupleCombinatorsTemplate.OutputPath, TupleCombinatorsTemplate.Generate),
        (CodegenSubjectsTemplate.OutputPath, CodegenSubjectsTemplate.Generate),
    };

    private static int Write(string root, string outputPath, string generated, bool check)
    {
        string path = Path.Combine(root, outputPath);
        string? current = File.Exists(path) ? File.ReadAllText(path) : null;
        if (current == generated)
        {
            Console.WriteLine("up to date: " + outputPath);
            return 0;
        }
        if (check)
        {
            Console.Error.WriteLine("stale: " + outputPath + " (run: dotnet run --project tools/Spindle.Generate)");
            return 1;
        }
        File.WriteAllText(path, generated);
        Console.WriteLine("wrote: " + outputPath);
        return 0;
    }

    private static string? FindRoot(string? dir)
    {
        while (dir is not null && !File.Exists(Path.Combine(dir, "Spindle.slnx")))
        {
            dir = Path.GetDirectoryName(dir);
        }
        return dir;
    }
}

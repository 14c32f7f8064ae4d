using System;
using System.IO;

namespace SpindleLib.Generate;

/// <summary>
/// Regenerates Spindle's generated sources. Usage: <c>dotnet run --project tools/Spindle.Generate [--check] [REPO_ROOT]</c>.
/// Without a root it walks up from the current directory to the folder holding Spindle.slnx. With <c>--check</c> it
/// writes nothing and exits with 1 if a checked-in file differs from what the template generates.
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

        string path = Path.Combine(root, TupleCombinatorsTemplate.OutputPath);
        string generated = TupleCombinatorsTemplate.Generate();
        string? current = File.Exists(path) ? File.ReadAllText(path) : null;
        if (current == generated)
        {
            Console.WriteLine("up to date: " + TupleCombinatorsTemplate.OutputPath);
            return 0;
        }
        if (check)
        {
            Console.Error.WriteLine("stale: " + TupleCombinatorsTemplate.OutputPath + " (run: dotnet run --project tools/Spindle.Generate)");
            return 1;
        }
        File.WriteAllText(path, generated);
        Console.WriteLine("wrote: " + TupleCombinatorsTemplate.OutputPath);
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

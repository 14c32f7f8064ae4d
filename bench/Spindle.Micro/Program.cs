using BenchmarkDotNet.Running;

namespace SpindleLib.Micro;

/// <summary>
/// BenchmarkDotNet cross-checks of Spindle.Bench's microbenchmarks:
/// <c>dotnet run -c Release --project bench/Spindle.Micro -- --filter '*'</c> (add <c>--job dry</c> for a smoke run).
/// </summary>
public static class Program
{
    public static void Main(string[] args) => BenchmarkSwitcher.FromAssembly(typeof(Program).Assembly).Run(args);
}

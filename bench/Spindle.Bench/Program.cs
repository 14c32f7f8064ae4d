namespace SpindleLib.Bench;

/// <summary>Entry point: <c>dotnet run -c Release --project bench/Spindle.Bench -- [SCENARIO...] [--quick|--full] [--json FILE]</c>.</summary>
public static class Program
{
    public static int Main(string[] args) => Harness.BenchRunner.Execute(args);
}

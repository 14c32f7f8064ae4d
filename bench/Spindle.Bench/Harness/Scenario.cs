namespace SpindleLib.Bench.Harness;

/// <summary>One benchmark scenario: a seed experiment reproduced with every system it measured.</summary>
public abstract class Scenario
{
    /// <summary>The stable id used on the command line and in the JSON (a contract).</summary>
    public abstract string Id { get; }

    /// <summary>One line for the help and the report.</summary>
    public abstract string Title { get; }

    /// <summary>The seed file(s) it reproduces.</summary>
    public abstract string Seed { get; }

    /// <summary>The BCL system that the ratio column compares against.</summary>
    public abstract string Baseline { get; }

    /// <summary>Notes printed under the table: how the comparison was kept fair, and which anchors were not available.</summary>
    public virtual string Notes => "";

    /// <summary>Runs every case and system, adding results to the context.</summary>
    public abstract void Run(BenchContext context);
}

using System;
using System.Threading.Tasks;
using SpindleLib.Bench.Harness;

namespace SpindleLib.Bench.Scenarios;

/// <summary>
/// Seed 002: WhenAny (and, as a second scenario, WhenAll) over n = 2, 3, 4, 8 inputs, when every input has already
/// completed, and when n fresh sources are created, combined, and then completed (the first one, for WhenAny; all, for
/// WhenAll), following the seed's own benchmark code.
/// </summary>
public abstract class CombinatorScenario : Scenario
{
    private static readonly int[] s_counts = { 2, 3, 4, 8 };

    protected abstract bool IsAny { get; }

    public override string Seed => "002";

    public override string Baseline => "Task";

    public override string Notes =>
        "completed: every input already complete (Task: Task.CompletedTask, as in the seed; Spindle: completed Spindle tasks; SpindleOverTask: " +
        "Task.CompletedTask). pending: n new sources per operation (Task, SpindleOverTask: TaskCompletionSource<int>; Spindle: reused Promise<int>s, " +
        "reset), the combinator, then " + (IsAny ? "the first source completed" : "every source completed") + ", and the combined result read. " +
        (IsAny ? "Losers: Task leaves them to the GC (Task.WhenAny removes its continuations from them); Spindle leaves them pending too (WhenAny detaches from " +
                 "its losing promises, which the next operation resets); SpindleOverTask completes them afterwards, because a BCL task's continuation cannot be " +
                 "removed and the pooled combinator waits for it. " : "") +
        "Input arrays are preallocated for every system. The systems' rounds alternate (side by side), after a warm-up each. Anchors: not available from the package registry this machine reaches.";

    public override void Run(BenchContext context)
    {
        int ops = context.Pick(500, 100_000, 500_000);
        foreach (int n in s_counts)
        {
            RunCompleted(context, n, ops);
            RunPending(context, n, ops);
        }
    }

    private void RunCompleted(BenchContext context, int n, int ops)
    {
        string caseName = $"n={n},completed";
        var tasks = new Task[n];
        Array.Fill(tasks, Task.CompletedTask);
        var spindle = new SpindleTask[n];

        Action task = () =>
        {
            for (int i = 0; i < ops; i++)
            {
                if (IsAny)
                {
                    Task.WhenAny(tasks).GetAwaiter().GetResult();
                }
                else
                {
                    Task.WhenAll(tasks).GetAwaiter().GetResult();
                }
            }
        };
        Action spindleRound = () =>
        {
            for (int i = 0; i < ops; i++)
            {
                if (IsAny)
                {
                    SpindleTask.WhenAny(spindle).GetAwaiter().GetResult();
                }
                else
                {
                    SpindleTask.WhenAll(spindle).GetAwaiter().GetResult();
                }
            }
        };
        Action overTask = () =>
        {
            for (int i = 0; i < ops; i++)
            {
                if (IsAny)
                {
                    SpindleTask.WhenAny(tasks).GetAwaiter().GetResult();
                }
                else
                {
                    SpindleTask.WhenAll(tasks).GetAwaiter().GetResult();
                }
            }
        };
        context.MeasureOperationsSideBySide(caseName, ops, ("Task", task), ("Spindle", spindleRound), ("SpindleOverTask", overTask));
    }

    private void RunPending(BenchContext context, int n, int ops)
    {
        string caseName = $"n={n},pending";
        var sources = new TaskCompletionSource<int>[n];
        var tasks = new Task[n];
        var promises = new Promise<int>[n];
        for (int k = 0; k < n; k++)
        {
            promises[k] = new Promise<int>();
        }
        var spindle = new SpindleTask[n];
        int completed = IsAny ? 1 : n;

        Action task = () =>
        {
            for (int i = 0; i < ops; i++)
            {
                for (int k = 0; k < n; k++)
                {
                    sources[k] = new TaskCompletionSource<int>();
                    tasks[k] = sources[k].Task;
                }
                Task combined = IsAny ? Task.WhenAny(tasks) : Task.WhenAll(tasks);
                for (int k = 0; k < completed; k++)
                {
                    sources[k].SetResult(k);
                }
                combined.GetAwaiter().GetResult();
            }
        };
        Action spindleRound = () =>
        {
            for (int i = 0; i < ops; i++)
            {
                for (int k = 0; k < n; k++)
                {
                    promises[k].Reset();
                    spindle[k] = promises[k].Task;
                }
                if (IsAny)
                {
                    // The losers are left pending, as on the Task side: WhenAny detaches from them when the first one
                    // wins, so the next operation's Reset reuses them.
                    SpindleTask<int> combined = SpindleTask.WhenAny(spindle);
                    promises[0].SetResult(0);
                    combined.GetAwaiter().GetResult();
                }
                else
                {
                    SpindleTask combined = SpindleTask.WhenAll(spindle);
                    for (int k = 0; k < n; k++)
                    {
                        promises[k].SetResult(k);
                    }
                    combined.GetAwaiter().GetResult();
                }
            }
        };
        Action overTask = () =>
        {
            for (int i = 0; i < ops; i++)
            {
                for (int k = 0; k < n; k++)
                {
                    sources[k] = new TaskCompletionSource<int>();
                    tasks[k] = sources[k].Task;
                }
                if (IsAny)
                {
                    SpindleTask<int> combined = SpindleTask.WhenAny(tasks);
                    sources[0].SetResult(0);
                    combined.GetAwaiter().GetResult();
                    for (int k = 1; k < n; k++)
                    {
                        sources[k].SetResult(k); // the losers, so the combinator can be reused
                    }
                }
                else
                {
                    SpindleTask combined = SpindleTask.WhenAll(tasks);
                    for (int k = 0; k < n; k++)
                    {
                        sources[k].SetResult(k);
                    }
                    combined.GetAwaiter().GetResult();
                }
            }
        };
        context.MeasureOperationsSideBySide(caseName, ops, ("Task", task), ("Spindle", spindleRound), ("SpindleOverTask", overTask));
    }
}

/// <summary>Seed 002: WhenAny.</summary>
public sealed class WhenAnyScenario : CombinatorScenario
{
    protected override bool IsAny => true;

    public override string Id => "whenany";

    public override string Title => "WhenAny over n = 2, 3, 4, 8 inputs, completed or pending";
}

/// <summary>Seed 002's cases, for WhenAll.</summary>
public sealed class WhenAllScenario : CombinatorScenario
{
    protected override bool IsAny => false;

    public override string Id => "whenall";

    public override string Title => "WhenAll over n = 2, 3, 4, 8 inputs, completed or pending";
}

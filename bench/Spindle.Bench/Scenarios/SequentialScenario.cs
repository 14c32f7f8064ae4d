using System;
using System.Runtime.CompilerServices;
using System.Threading.Tasks;
using SpindleLib.Bench.Harness;

namespace SpindleLib.Bench.Scenarios;

/// <summary>
/// Seed 001: 1000 units run one after another, each handed to a worker thread, awaited, and incrementing a counter.
/// The seed's Task side is <c>await Task.Run(() => x++)</c> in a loop, started with <c>Task.Run(...).Wait()</c>.
/// </summary>
public sealed class SequentialScenario : Scenario
{
    private const int Units = 1000;

    // One cached delegate shared by every system, so no system pays for a closure the others do not.
    private static int s_counter;
    private static readonly Action s_increment = static () => s_counter++;
    private static readonly Func<Task> s_runTasks = static () => RunTasks(Units);
    private static readonly Func<SpindleTask> s_runSpindle = static () => RunSpindle(Units);

    public override string Id => "sequential";

    public override string Title => "1000 units one after another, each run on a worker and awaited";

    public override string Seed => "001";

    public override string Baseline => "Task";

    public override string Notes =>
        "Task: `await Task.Run(increment)` ×1000 inside `Task.Run(...).Wait()`, as in the seed. Spindle: `await Spindle.Run(increment)` ×1000 inside " +
        "`Spindle.Run(...)` and a blocking wait. SpindleOnThreadPool: the same Spindle code with its work items queued to the .NET ThreadPool " +
        "(the scheduler alternative, see docs/decisions.md). SpindleJob: seed 001's job side, Schedule + ScheduleBatchedJobs + Complete of a struct " +
        "IJob per unit (Complete lets the calling thread run the job, as Unity's does). Every system uses the same cached delegate. " +
        "A round is 20 bursts of 1000 (the seed measured one burst). Task's cost on this pattern depends on the .NET ThreadPool's state " +
        "(whether an idle pool thread steals each hand-off, how far hill climbing has adapted): it moves between runs far more than " +
        "Spindle's, and drops when rounds are made much longer. " +
        "Anchors UniTask and ProtoPromise: not available from the package registry this machine reaches.";

    public override void Run(BenchContext context)
    {
        int repetitions = context.Pick(1, 20, 100);
        long ops = (long)repetitions * Units;
        const string Case = "units=1000";

        context.MeasureOperations(Case, "Task", ops, () =>
        {
            for (int i = 0; i < repetitions; i++)
            {
                s_counter = 0;
                Task.Run(s_runTasks).Wait();
                Check();
            }
        });

        context.MeasureOperations(Case, "Spindle", ops, () =>
        {
            for (int i = 0; i < repetitions; i++)
            {
                s_counter = 0;
                Spindle.Run(s_runSpindle).GetAwaiter().GetResult();
                Check();
            }
        });

        context.MeasureOperations(Case, "SpindleJob", ops, () =>
        {
            var job = new IncrementJob();
            for (int i = 0; i < repetitions; i++)
            {
                s_counter = 0;
                for (int u = 0; u < Units; u++)
                {
                    JobHandle handle = job.Schedule();
                    JobHandle.ScheduleBatchedJobs();
                    handle.Complete();
                }
                Check();
            }
        });

        Scheduler previous = Scheduler.Default;
        Scheduler.Default = ThreadPoolScheduler.Instance;
        try
        {
            context.MeasureOperations(Case, "SpindleOnThreadPool", ops, () =>
            {
                for (int i = 0; i < repetitions; i++)
                {
                    s_counter = 0;
                    Spindle.Run(s_runSpindle).GetAwaiter().GetResult();
                    Check();
                }
            });
        }
        finally
        {
            Scheduler.Default = previous;
        }
    }

    /// <summary>Seed 001's MyJob: increments the counter.</summary>
    private struct IncrementJob : IJob
    {
        public readonly void Execute() => s_counter++;
    }

    private static void Check()
    {
        if (s_counter != Units)
        {
            throw new InvalidOperationException($"sequential: the counter reached {s_counter}, not {Units}: a unit was lost or run twice.");
        }
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    private static async Task RunTasks(int units)
    {
        for (int i = 0; i < units; i++)
        {
            await Task.Run(s_increment);
        }
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    private static async SpindleTask RunSpindle(int units)
    {
        for (int i = 0; i < units; i++)
        {
            await Spindle.Run(s_increment);
        }
    }
}

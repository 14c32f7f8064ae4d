using System;
using System.Threading.Tasks;
using SpindleLib.Bench.Harness;

namespace SpindleLib.Bench.Scenarios;

/// <summary>
/// Seed 000: four chains of 1000 dependent no-op units, run at once. The Task side is the seed's own code: a TaskFactory
/// with AttachedToParent and ExecuteSynchronously, each task starting the next. The job side schedules each chain with
/// Schedule(job, previous), then ScheduleBatchedJobs, then Complete on the four handles.
/// </summary>
public sealed class ChainScenario : Scenario
{
    private const int Chains = 4;
    private const int Length = 1000;

    public override string Id => "chain";

    public override string Title => "4 chains × 1000 dependent no-op units";

    public override string Seed => "000";

    public override string Baseline => "TaskFactory";

    public override string Notes =>
        "TaskFactory: the seed's code, a TaskFactory(AttachedToParent, ExecuteSynchronously) whose tasks each start the next, four chains at once, " +
        "then Wait on the four. Spindle: struct IJob no-ops, Schedule(job, previous) ×1000 per chain, ScheduleBatchedJobs, Complete on the four " +
        "handles (the calling thread helps). ns_per_job covers scheduling and running. ZeroAllocJobScheduler: not available from the package " +
        "registry this machine reaches.";

    private struct NoOpJob : IJob
    {
        public readonly void Execute()
        {
        }
    }

    public override void Run(BenchContext context)
    {
        int repetitions = context.Pick(1, 10, 50);
        long jobs = (long)repetitions * Chains * Length;
        const string Case = "chains=4,length=1000";
        var factory = new TaskFactory(TaskCreationOptions.AttachedToParent, TaskContinuationOptions.ExecuteSynchronously);

        context.MeasureOperations(Case, "TaskFactory", jobs, () =>
        {
            for (int r = 0; r < repetitions; r++)
            {
                Task t1 = RunTasks(factory, Length);
                Task t2 = RunTasks(factory, Length);
                Task t3 = RunTasks(factory, Length);
                Task t4 = RunTasks(factory, Length);
                t1.Wait();
                t2.Wait();
                t3.Wait();
                t4.Wait();
            }
        }, "ns_per_job", "bytes_per_job");

        context.MeasureOperations(Case, "Spindle", jobs, () =>
        {
            for (int r = 0; r < repetitions; r++)
            {
                JobHandle h1 = RunJobs(Length);
                JobHandle h2 = RunJobs(Length);
                JobHandle h3 = RunJobs(Length);
                JobHandle h4 = RunJobs(Length);
                JobHandle.ScheduleBatchedJobs();
                h1.Complete();
                h2.Complete();
                h3.Complete();
                h4.Complete();
            }
        }, "ns_per_job", "bytes_per_job");
    }

    /// <summary>The seed's RunTasks: a countdown action that starts its successor as an attached child.</summary>
    private static Task RunTasks(TaskFactory factory, int runs)
    {
        Action? act = null;
        act = () =>
        {
            runs--;
            if (runs > 0)
            {
                factory.StartNew(act!, TaskCreationOptions.AttachedToParent);
            }
        };
        return factory.StartNew(act);
    }

    private static JobHandle RunJobs(int runs)
    {
        var job = new NoOpJob();
        JobHandle handle = job.Schedule();
        for (int i = 1; i < runs; i++)
        {
            handle = job.Schedule(handle);
        }
        return handle;
    }
}

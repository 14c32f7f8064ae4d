using System;
using System.Diagnostics;

namespace SpindleLib.Tests.Jobs;

/// <summary>
/// Steady-state scheduling and completing allocates nothing on the scheduling thread: job nodes, combine nodes,
/// dependency edges, parallel runners and blocking waiters are pooled. Measured as in Tasks/AllocationTests: warm up,
/// then measure 10,000 cycles until one run allocates nothing (tier-0 code may allocate in the first runs; a real
/// per-operation allocation shows in every run). Run alone.
/// </summary>
[Collection(SequentialCollection.Name)]
public class JobAllocationTests
{
    private const int Iterations = 10_000;

    private static void AssertSteadyStateAllocatesNothing(Action<int> iteration) => TestUtil.AssertSteadyStateAllocatesNothing(iteration, Iterations);

    private struct AddJob : IJob
    {
        public Counter Counter;

        public readonly void Execute() => Counter.Increment();
    }

    private struct NoopForJob : IJobParallelFor
    {
        public Counter Counter;

        public readonly void Execute(int index)
        {
            if (index == 0)
            {
                Counter.Increment();
            }
        }
    }

    private struct NoopBatchJob : IJobParallelForBatch
    {
        public Counter Counter;

        public readonly void Execute(int startIndex, int count)
        {
            if (startIndex == 0)
            {
                Counter.Increment();
            }
        }
    }

    [Fact]
    public void ScheduleAndComplete_OneJob_AllocatesNothing()
    {
        var counter = new Counter();
        var job = new AddJob { Counter = counter };
        AssertSteadyStateAllocatesNothing(_ => job.Schedule().Complete());
        Assert.True(counter.Read() >= 3 * Iterations);
    }

    [Fact]
    public void ScheduleFlushAndComplete_ChainWithCombine_AllocatesNothing()
    {
        var counter = new Counter();
        var job = new AddJob { Counter = counter };
        AssertSteadyStateAllocatesNothing(i =>
        {
            JobHandle a = job.Schedule();
            JobHandle b = job.Schedule(a);
            JobHandle c = job.Schedule(a);
            if ((i & 1) == 0)
            {
                JobHandle.ScheduleBatchedJobs();
            }
            JobHandle d = job.Schedule(JobHandle.CombineDependencies(b, c));
            JobHandle e = job.Schedule(JobHandle.CombineDependencies(a, d, c));
            e.Complete();
        });
    }

    [Fact]
    public void CombineDependencies_Span_AllocatesNothing()
    {
        var job = new AddJob { Counter = new Counter() };
        var handles = new JobHandle[8];
        AssertSteadyStateAllocatesNothing(_ =>
        {
            for (int k = 0; k < handles.Length; k++)
            {
                handles[k] = job.Schedule();
            }
            JobHandle.CombineDependencies(handles).Complete();
        });
    }

    private struct NoopJobFor : IJobFor
    {
        public Counter Counter;
        private int _runs;

        public void Execute(int index)
        {
            if (index == 0)
            {
                Counter.Increment();
            }
            _runs++;
        }
    }

    [Fact]
    public void ScheduleAndComplete_JobFor_InOrderAndParallel_AllocatesNothing()
    {
        var counter = new Counter();
        var job = new NoopJobFor { Counter = counter };
        AssertSteadyStateAllocatesNothing(i =>
        {
            JobHandle a = job.Schedule(64);
            JobHandle b = job.ScheduleParallel(256, 32, a);
            JobHandle c = job.Schedule(16, b);
            if ((i & 1) == 0)
            {
                JobHandle.ScheduleBatchedJobs();
            }
            c.Complete();
        });
        Assert.True(counter.Read() >= 3 * 3 * Iterations);
    }

    [Fact]
    public void Run_EveryKind_AllocatesNothing()
    {
        var counter = new Counter();
        var job = new AddJob { Counter = counter };
        var forJob = new NoopJobFor { Counter = counter };
        var parallel = new NoopForJob { Counter = counter };
        var batch = new NoopBatchJob { Counter = counter };
        AssertSteadyStateAllocatesNothing(_ =>
        {
            job.Run();
            forJob.Run(32);
            parallel.Run(32);
            batch.RunBatch(32, 8);
        });
        Assert.True(counter.Read() >= 3 * 4 * Iterations);
    }

    [Fact]
    public void CompleteAll_SpanAndTwoAndThreeHandleForms_AllocatesNothing()
    {
        var counter = new Counter();
        var job = new AddJob { Counter = counter };
        var handles = new JobHandle[8];
        AssertSteadyStateAllocatesNothing(_ =>
        {
            for (int k = 0; k < handles.Length; k++)
            {
                handles[k] = k == 3 ? default : job.Schedule(k == 0 ? default : handles[k - 1]);
            }
            JobHandle.CompleteAll(handles);
            JobHandle.CompleteAll(job.Schedule(), job.Schedule());
            JobHandle.CompleteAll(job.Schedule(), default, job.Schedule());
        });
        Assert.True(counter.Read() >= 3 * 11 * Iterations);
    }

    [Fact]
    public void ScheduleAndComplete_ParallelFor_AllocatesNothing()
    {
        var counter = new Counter();
        var job = new NoopForJob { Counter = counter };
        AssertSteadyStateAllocatesNothing(_ => job.Schedule(256, 32).Complete());
        Assert.True(counter.Read() >= 3 * Iterations);
    }

    /// <summary>
    /// The scheduling thread outruns the workers (here every worker is held, as when one processor has to share itself
    /// or the workers are descheduled for a while): it finishes each small job alone while the job's runner still waits
    /// in a queue. The runner pins nothing and is not queued again, so nothing is allocated. Before, it held its node
    /// until a worker reached it: a node, a runner and an edge per job, and queue segments.
    /// </summary>
    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public void ScheduleAndComplete_ParallelFor_WhileEveryWorkerIsBusy_AllocatesNothing(bool batch)
    {
        var counter = new Counter();
        var forJob = new NoopForJob { Counter = counter };
        var batchJob = new NoopBatchJob { Counter = counter };
        using (var hold = new HoldWorkers())
        {
            AssertSteadyStateAllocatesNothing(_ => (batch ? batchJob.ScheduleBatch(256, 32) : forJob.Schedule(256, 32)).Complete());
            Assert.True(hold.StillHolding, "a worker was let go before the measurement ended");
        }
        Assert.True(counter.Read() >= 3 * Iterations);
    }

    [Fact]
    public void ScheduleAndComplete_ParallelForBatch_AllocatesNothing()
    {
        var counter = new Counter();
        var job = new NoopBatchJob { Counter = counter };
        AssertSteadyStateAllocatesNothing(_ => job.ScheduleBatch(256, 32).Complete());
        Assert.True(counter.Read() >= 3 * Iterations);
    }
}

using System;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Jobs;

/// <summary>
/// Complete() (or a blocking GetResult) called inside a job on a handle that can only finish after that very job
/// (its own handle, or a job that depends on it, directly or not) could never return: it hung the thread running the
/// job for ever. It throws instead, naming the problem, and the job fails with that exception. So does a blocking read
/// of a task that awaits such a handle (its AsSpindleTask(), an async method awaiting it, a ValueTask over either).
/// </summary>
public class JobCompleteInsideItselfTests
{
    /// <summary>Where a job finds the handle it completes (set after scheduling).</summary>
    private sealed class HandleBox : HandleSetLater
    {
        public Exception? Seen;
        public int Runs;
        public SpindleTask Task; // the task a blocking read was refused on (when ReadATask)
        public bool ReadATask;
    }

    public enum How
    {
        Complete,
        GetResult,
        TaskGetResult,
        ValueTaskGetResult,
        AwaitingMethodGetResult,
    }

    private static void Wait(JobHandle handle, How how, HandleBox box)
    {
        box.ReadATask = how >= How.TaskGetResult;
        switch (how)
        {
            case How.Complete:
                handle.Complete();
                break;
            case How.GetResult:
                handle.GetAwaiter().GetResult();
                break;
            case How.TaskGetResult:
                box.Task = handle.AsSpindleTask();
                box.Task.GetAwaiter().GetResult();
                break;
            case How.ValueTaskGetResult:
                box.Task = handle.AsSpindleTask();
                box.Task.AsValueTask().GetAwaiter().GetResult();
                break;
            default:
                SpindleTask<int> read = ReadAfter(handle);
                box.Task = read;
                read.GetAwaiter().GetResult();
                break;
        }
    }

    private static async SpindleTask<int> ReadAfter(JobHandle handle)
    {
        await handle;
        return 1;
    }

    private struct CompleteTargetJob : IJob
    {
        public HandleBox Box;
        public How How;

        public readonly void Execute()
        {
            Interlocked.Increment(ref Box.Runs);
            try
            {
                Wait(Box.Handle, How, Box);
            }
            catch (Exception ex)
            {
                Box.Seen = ex;
                throw;
            }
        }
    }

    private struct CompleteTargetForJob : IJobParallelFor
    {
        public HandleBox Box;

        public readonly void Execute(int index)
        {
            if (index == 3)
            {
                Interlocked.Increment(ref Box.Runs);
                Box.Handle.Complete();
            }
        }
    }

    private struct NoopJob : IJob
    {
        public readonly void Execute()
        {
        }
    }

    /// <summary>Completes <paramref name="handle"/> on a pool thread: false if it did not return within 10 s (the hang).</summary>
    private static bool CompletesInTime(JobHandle handle, out Exception? thrown)
    {
        Exception? caught = null;
        Task waiter = Task.Run(() => caught = JobTestUtil.CompleteCatching(handle));
        bool done = waiter.Wait(TimeSpan.FromSeconds(10));
        thrown = caught;
        return done;
    }

    private static void AssertRefused(JobHandle handle, HandleBox box)
    {
        Assert.True(CompletesInTime(handle, out Exception? thrown), "Complete() inside the job on a handle that waits for it hung");
        var refused = Assert.IsType<InvalidOperationException>(thrown);
        Assert.Contains("inside", refused.Message);
        Assert.Same(refused, box.Seen ?? refused);
        Assert.Equal(1, box.Runs);
        if (box.ReadATask)
        {
            // The refused read left its task as it was: it completes with the job's failure, which a read outside the
            // job gets (blocking here until the awaiting method has run, within the test's bound).
            Assert.Same(refused, Assert.Throws<InvalidOperationException>(() => box.Task.GetAwaiter().GetResult()));
        }
    }

    [Theory]
    [InlineData(How.Complete)]
    [InlineData(How.GetResult)]
    [InlineData(How.TaskGetResult)]
    [InlineData(How.ValueTaskGetResult)]
    [InlineData(How.AwaitingMethodGetResult)]
    public async Task JobCompletingItsOwnHandle_Throws_AndFailsTheJob(How how)
    {
        await JobTestUtil.Bounded(() =>
        {
            var box = new HandleBox();
            JobHandle self = new CompleteTargetJob { Box = box, How = how }.Schedule();
            box.Handle = self;
            AssertRefused(self, box);
        });
    }

    [Theory]
    [InlineData(How.Complete)]
    [InlineData(How.TaskGetResult)]
    [InlineData(How.AwaitingMethodGetResult)]
    public async Task JobCompletingADependent_Throws_AndTheDependentFailsWithIt(How how)
    {
        await JobTestUtil.Bounded(() =>
        {
            var box = new HandleBox();
            JobHandle job = new CompleteTargetJob { Box = box, How = how }.Schedule();
            JobHandle direct = new NoopJob().Schedule(job);
            JobHandle other = new NoopJob().Schedule();
            JobHandle combined = JobHandle.CombineDependencies(direct, other);
            JobHandle indirect = new NoopJob().Schedule(combined);
            box.Handle = indirect; // waits for the job through a dependent and a combine
            AssertRefused(job, box);
            Assert.Same(box.Seen, JobTestUtil.CompleteCatching(indirect));
            Assert.Null(JobTestUtil.CompleteCatching(other));
        });
    }

    [Fact]
    public async Task ParallelForBatchCompletingItsOwnHandle_Throws_AndFailsTheJob()
    {
        await JobTestUtil.Bounded(() =>
        {
            var box = new HandleBox();
            JobHandle self = new CompleteTargetForJob { Box = box }.Schedule(8, 1);
            box.Handle = self;
            Assert.True(CompletesInTime(self, out Exception? thrown), "Complete() inside a batch on its own parallel-for hung");
            var refused = Assert.IsType<InvalidOperationException>(thrown);
            Assert.Contains("inside", refused.Message);
            Assert.Equal(1, box.Runs);
        });
    }

    /// <summary>Completing a job that does not wait for the running one stays allowed (JobThreadingTests has a tree of them).</summary>
    [Fact]
    public async Task JobCompletingAnIndependentJobOrItsDependency_Completes()
    {
        await JobTestUtil.Bounded(() =>
        {
            var box = new HandleBox();
            JobHandle dependency = new NoopJob().Schedule();
            JobHandle job = new CompleteTargetJob { Box = box }.Schedule(dependency);
            JobHandle sibling = new NoopJob().Schedule(dependency); // shares the dependency, does not wait for the job
            box.Handle = sibling;
            Assert.True(CompletesInTime(job, out Exception? thrown), "hung");
            Assert.Null(thrown);
            box.Handle = dependency;
            box.Runs = 0;
            JobHandle again = new CompleteTargetJob { Box = box }.Schedule(dependency);
            Assert.True(CompletesInTime(again, out thrown), "hung");
            Assert.Null(thrown);
        });
    }
    private struct CountAtJob : IJob
    {
        public int[] Runs;
        public int Slot;

        public readonly void Execute() => Interlocked.Increment(ref Runs[Slot]);
    }

    /// <summary>Counts its run, then completes a handle of the other chain (which never waits for this one) and its own dependency's.</summary>
    private struct CompleteOtherJob : IJob
    {
        public int[] Runs;
        public int Slot;
        public JobHandle Other;
        public JobHandle Dependency;

        public readonly void Execute()
        {
            Interlocked.Increment(ref Runs[Slot]);
            Other.Complete();
            Dependency.Complete(); // finished already (maybe stale): returns at once
        }
    }

    /// <summary>
    /// The check before a wait must never refuse one that can end: chains whose jobs complete an independent chain's
    /// jobs, scheduled from two plain threads and two workers while the pools recycle nodes under them (stale handles,
    /// edges pushed as their dependencies finish), all complete, each job once.
    /// </summary>
    [Fact]
    public async Task Stress_JobsCompletingIndependentJobs_AreNeverRefused_AndEveryJobRunsOnce()
    {
        const int Length = 8;
        int rounds = TestUtil.Stress(1_500);
        var budget = TimeSpan.FromSeconds(TestUtil.StressTimeout(20));

        void Rounds(int seed)
        {
            var rng = new Random(seed);
            var clock = System.Diagnostics.Stopwatch.StartNew();
            for (int r = 0; r < rounds && clock.Elapsed < budget; r++)
            {
                var runs = new int[2 * Length];
                var others = new JobHandle[Length];
                JobHandle previous = default;
                for (int i = 0; i < Length; i++)
                {
                    previous = new CountAtJob { Runs = runs, Slot = Length + i }.Schedule(rng.Next(2) == 0 ? previous : default);
                    others[i] = previous;
                }
                JobHandle last = default;
                for (int i = 0; i < Length; i++)
                {
                    last = new CompleteOtherJob { Runs = runs, Slot = i, Other = others[rng.Next(Length)], Dependency = last }.Schedule(last);
                }
                if (rng.Next(2) == 0)
                {
                    JobHandle.ScheduleBatchedJobs();
                }
                Exception? failure = JobTestUtil.CompleteCatching(last);
                Assert.True(failure is null, $"round {r}: {failure}");
                JobHandle.CombineDependencies(others).Complete();
                Assert.True(runs.All(n => n == 1), $"round {r}: runs {string.Join(",", runs)}");
            }
        }

        int seed = Environment.TickCount;
        await TestUtil.WithTimeout(Task.WhenAll(
            TestUtil.RunOnThread(() => Rounds(seed), "chains 1"),
            TestUtil.RunOnThread(() => Rounds(seed + 1), "chains 2"),
            TestUtil.AwaitAsync(Spindle.Run(() => Rounds(seed + 2))),
            TestUtil.AwaitAsync(Spindle.Run(() => Rounds(seed + 3)))), TestUtil.StressTimeout(60));
    }
}

using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Jobs;

/// <summary>
/// <see cref="IJobFor"/> (Schedule: every index in order on one thread; ScheduleParallel: every index exactly once, in
/// batches; Run: on the calling thread, now) and <c>Run</c> for <see cref="IJob"/> and <see cref="IJobParallelFor"/>:
/// order, threads, copies of the job struct, dependencies both ways, faults, bad input.
/// </summary>
public class JobForTests
{
    /// <summary>
    /// Records, per index, the order it ran in (a per-job-copy field, so it also shows which indices shared a copy) and
    /// its thread; counts every run of every index.
    /// </summary>
    private struct RecordingForJob : IJobFor
    {
        public int[] Hits;
        public int[] Order;
        public int[] Thread;
        public Flag? Dependency;
        public Counter? Early;
        public int ThrowAt;
        public Exception? Error;
        private int _runsOnThisCopy;

        public RecordingForJob(int length)
        {
            Hits = new int[length];
            Order = new int[length];
            Thread = new int[length];
            Dependency = null;
            Early = null;
            ThrowAt = -1;
            Error = null;
            _runsOnThisCopy = 0;
        }

        public void Execute(int index)
        {
            if (Dependency is { IsSet: false })
            {
                Early!.Increment();
            }
            Interlocked.Increment(ref Hits[index]);
            Order[index] = _runsOnThisCopy++;
            Thread[index] = Environment.CurrentManagedThreadId;
            if (index == ThrowAt)
            {
                throw Error!;
            }
        }
    }

    /// <summary>Records the thread it ran on and how often; counts its own copy's runs.</summary>
    private struct ThreadJob : IJob
    {
        public int[] Thread;
        public int Runs;

        public void Execute()
        {
            Runs++;
            Thread[0] = Environment.CurrentManagedThreadId;
            Thread[1] = Runs;
        }
    }

    /// <summary>As <see cref="RecordingForJob"/>, as an <see cref="IJobParallelFor"/>.</summary>
    private struct RecordingParallelJob : IJobParallelFor
    {
        public int[] Hits;
        public int[] Order;
        public int[] Thread;
        private int _runsOnThisCopy;

        public void Execute(int index)
        {
            Interlocked.Increment(ref Hits[index]);
            Order[index] = _runsOnThisCopy++;
            Thread[index] = Environment.CurrentManagedThreadId;
        }
    }

    private static void AssertInOrderOnOneThread(RecordingForJob job, int length)
    {
        for (int i = 0; i < length; i++)
        {
            Assert.Equal(1, job.Hits[i]);
            Assert.Equal(i, job.Order[i]); // one copy, indices in order: its i-th run was index i
            Assert.Equal(job.Thread[0], job.Thread[i]);
        }
    }

    [Theory]
    [InlineData(1)]
    [InlineData(2)]
    [InlineData(1000)]
    [InlineData(100_003)]
    public async Task Schedule_RunsEveryIndexOnce_InOrder_OnOneThread_OnOneCopy(int length)
    {
        await JobTestUtil.Bounded(() =>
        {
            var job = new RecordingForJob(length);
            job.Schedule(length).Complete();
            AssertInOrderOnOneThread(job, length);
        });
    }

    [Fact]
    public async Task Schedule_ManyAtOnce_EachInOrderOnOneThread()
    {
        await JobTestUtil.Bounded(() =>
        {
            var jobs = new RecordingForJob[16];
            var handles = new JobHandle[jobs.Length];
            for (int k = 0; k < jobs.Length; k++)
            {
                jobs[k] = new RecordingForJob(5000);
                handles[k] = jobs[k].Schedule(5000);
            }
            JobHandle.CompleteAll(handles);
            foreach (RecordingForJob job in jobs)
            {
                AssertInOrderOnOneThread(job, 5000);
            }
        });
    }

    [Fact]
    public async Task Schedule_ZeroLength_RunsNothing_AndStillOrdersItsDependencyAndDependent()
    {
        await JobTestUtil.Bounded(() =>
        {
            var ran = new Counter();
            var gate = new Gate();
            var job = new RecordingForJob(0);
            JobHandle dep;
            JobHandle empty;
            JobHandle after;
            try
            {
                dep = new GateJob(gate, ran).Schedule();
                empty = job.Schedule(0, dep);
                after = new CountJob(ran).Schedule(empty);
                JobHandle.ScheduleBatchedJobs();
                Assert.False(empty.IsCompleted);
                Assert.False(after.IsCompleted);
            }
            finally
            {
                gate.Dispose();
            }
            after.Complete();
            Assert.True(empty.IsCompleted);
            Assert.Equal(2, ran.Read());
        });
    }

    [Fact]
    public async Task Schedule_And_ScheduleParallel_WaitForTheirDependency_AndTheirDependentsWaitForThem()
    {
        await JobTestUtil.Bounded(() =>
        {
            var released = new Flag();
            var early = new Counter();
            var ordered = new RecordingForJob(3000) { Dependency = released, Early = early };
            var parallel = new RecordingForJob(3000) { Dependency = released, Early = early };
            var gate = new Gate();
            JobHandle first;
            JobHandle second;
            JobHandle both;
            var afterRan = new Counter();
            try
            {
                JobHandle dep = new GateJob(gate).Schedule();
                first = ordered.Schedule(3000, dep);
                second = parallel.ScheduleParallel(3000, 16, dep);
                both = new CountJob(afterRan).Schedule(JobHandle.CombineDependencies(first, second));
                JobHandle.ScheduleBatchedJobs();
                Assert.False(first.IsCompleted);
                Assert.False(second.IsCompleted);
                Assert.False(both.IsCompleted);
                released.Set();
            }
            finally
            {
                gate.Dispose();
            }
            both.Complete();
            Assert.Equal(0, early.Read());
            Assert.Equal(1, afterRan.Read());
            Assert.True(first.IsCompleted && second.IsCompleted);
            AssertInOrderOnOneThread(ordered, 3000);
            Assert.All(parallel.Hits, h => Assert.Equal(1, h));
        });
    }

    [Theory]
    [InlineData(0, 1)]
    [InlineData(1, 1)]
    [InlineData(10_007, 7)]
    [InlineData(10_007, 64)]
    [InlineData(100, int.MaxValue)]
    [InlineData(200_000, 1000)]
    public async Task ScheduleParallel_RunsEveryIndexExactlyOnce_OneCopyPerBatch(int length, int batch)
    {
        await JobTestUtil.Bounded(() =>
        {
            var job = new RecordingForJob(length);
            job.ScheduleParallel(length, batch).Complete();
            for (int i = 0; i < length; i++)
            {
                Assert.Equal(1, job.Hits[i]);
                // Each batch runs on its own copy, as an IJobParallelFor's does: an index's run count within its copy is
                // its place in its batch.
                Assert.Equal(i % Math.Min(batch, Math.Max(length, 1)), job.Order[i]);
            }
        });
    }

    [Fact]
    public async Task Schedule_AFaultAtOneIndex_StopsTheRest_FailsTheJobAndItsDependents()
    {
        await JobTestUtil.Bounded(() =>
        {
            var error = new InvalidOperationException("index 40");
            var job = new RecordingForJob(100) { ThrowAt = 40, Error = error };
            var ran = new Counter();
            JobHandle failing = job.Schedule(100);
            JobHandle dependent = new CountJob(ran).Schedule(failing);
            Assert.Same(error, JobTestUtil.CompleteCatching(dependent));
            Assert.Same(error, JobTestUtil.CompleteCatching(failing));
            Assert.Equal(0, ran.Read());
            for (int i = 0; i < 100; i++)
            {
                Assert.Equal(i <= 40 ? 1 : 0, job.Hits[i]);
            }
        });
    }

    [Fact]
    public async Task ScheduleParallel_AFault_FailsTheJob_AsAParallelForDoes()
    {
        await JobTestUtil.Bounded(() =>
        {
            var error = new InvalidOperationException("index 3");
            var job = new RecordingForJob(64) { ThrowAt = 3, Error = error };
            Assert.Same(error, JobTestUtil.CompleteCatching(job.ScheduleParallel(64, 4)));
            Assert.Equal(1, job.Hits[3]);
        });
    }

    [Theory]
    [InlineData(0)]
    [InlineData(1)]
    [InlineData(5000)]
    public void Run_IJobFor_RunsEveryIndexInOrder_OnTheCallingThread_OnOneCopy(int length)
    {
        var job = new RecordingForJob(length);
        int self = Environment.CurrentManagedThreadId;
        job.Run(length);
        AssertInOrderOnOneThread(job, length);
        if (length > 0)
        {
            Assert.Equal(self, job.Thread[0]);
        }
    }

    [Fact]
    public void Run_IJobFor_InsideAJob_RunsOnThatJobsThread()
    {
        var inner = new RecordingForJob(10);
        var outerThread = new int[2];
        new OuterJob { Inner = inner, Thread = outerThread }.Schedule().Complete();
        AssertInOrderOnOneThread(inner, 10);
        Assert.Equal(outerThread[0], inner.Thread[0]);
    }

    private struct OuterJob : IJob
    {
        public RecordingForJob Inner;
        public int[] Thread;

        public readonly void Execute()
        {
            Thread[0] = Environment.CurrentManagedThreadId;
            Inner.Run(Inner.Hits.Length);
        }
    }

    [Fact]
    public void Run_IJobFor_AFault_PropagatesToTheCaller_AndTheIndicesAfterItDoNotRun()
    {
        var error = new InvalidOperationException("index 2");
        var job = new RecordingForJob(5) { ThrowAt = 2, Error = error };
        Assert.Same(error, Assert.Throws<InvalidOperationException>(() => job.Run(5)));
        Assert.Equal([1, 1, 1, 0, 0], job.Hits);
    }

    [Fact]
    public void Run_IJob_RunsOnceOnTheCallingThread_OnACopy()
    {
        var job = new ThreadJob { Thread = new int[2] };
        job.Run();
        Assert.Equal(Environment.CurrentManagedThreadId, job.Thread[0]);
        Assert.Equal(1, job.Thread[1]);
        Assert.Equal(0, job.Runs); // the caller's struct is not the one that ran, as for Schedule
        job.Run();
        Assert.Equal(1, job.Thread[1]);
    }

    [Fact]
    public void Run_IJob_AFault_PropagatesToTheCaller()
    {
        var error = new InvalidOperationException("run");
        var ran = new Counter();
        Assert.Same(error, Assert.Throws<InvalidOperationException>(() => new ThrowJob(error, ran).Run()));
        Assert.Equal(1, ran.Read());
    }

    [Theory]
    [InlineData(0)]
    [InlineData(1)]
    [InlineData(4097)]
    public void Run_IJobParallelFor_RunsEveryIndexInOrder_OnTheCallingThread_OnOneCopy(int length)
    {
        var job = new RecordingParallelJob { Hits = new int[length], Order = new int[length], Thread = new int[length] };
        job.Run(length);
        for (int i = 0; i < length; i++)
        {
            Assert.Equal(1, job.Hits[i]);
            Assert.Equal(i, job.Order[i]);
            Assert.Equal(Environment.CurrentManagedThreadId, job.Thread[i]);
        }
    }

    /// <summary>Records each batch it is given: its start, count, thread, and how many batches its own copy saw before.</summary>
    private struct RecordingBatchJob : IJobParallelForBatch
    {
        public System.Collections.Generic.List<(int Start, int Count, int Thread, int SeenByThisCopy)> Batches;
        public int ThrowAtStart;
        private int _seen;

        public void Execute(int startIndex, int count)
        {
            Batches.Add((startIndex, count, Environment.CurrentManagedThreadId, _seen++));
            if (startIndex == ThrowAtStart)
            {
                throw new InvalidOperationException("batch at " + startIndex);
            }
        }
    }

    [Theory]
    [InlineData(0, 64, new int[0])]
    [InlineData(1, 64, new[] { 0, 1 })]
    [InlineData(130, 64, new[] { 0, 64, 64, 64, 128, 2 })]
    [InlineData(128, 64, new[] { 0, 64, 64, 64 })]
    [InlineData(5, 1, new[] { 0, 1, 1, 1, 2, 1, 3, 1, 4, 1 })]
    [InlineData(int.MaxValue, int.MaxValue, new[] { 0, int.MaxValue })]
    public void RunBatch_RunsTheScheduledBatchesInOrder_OnTheCallingThread_EachOnItsOwnCopy(int length, int batchSize, int[] startsAndCounts)
    {
        var job = new RecordingBatchJob { Batches = [], ThrowAtStart = -1 };
        job.RunBatch(length, batchSize);
        Assert.Equal(startsAndCounts.Length / 2, job.Batches.Count);
        for (int b = 0; b < job.Batches.Count; b++)
        {
            Assert.Equal((startsAndCounts[2 * b], startsAndCounts[2 * b + 1]), (job.Batches[b].Start, job.Batches[b].Count));
            Assert.Equal(Environment.CurrentManagedThreadId, job.Batches[b].Thread);
            Assert.Equal(0, job.Batches[b].SeenByThisCopy); // a fresh copy per batch, as ScheduleBatch runs them
        }
    }

    [Fact]
    public void RunBatch_ByDefault_IsOneBatchOfTheWholeRange_AsUnitysRunBatch()
    {
        var job = new RecordingBatchJob { Batches = [], ThrowAtStart = -1 };
        job.RunBatch(10_000);
        Assert.Single(job.Batches);
        Assert.Equal((0, 10_000), (job.Batches[0].Start, job.Batches[0].Count));
    }

    [Fact]
    public void RunBatch_AFault_PropagatesToTheCaller_AndTheBatchesAfterItDoNotRun()
    {
        var job = new RecordingBatchJob { Batches = [], ThrowAtStart = 20 };
        Assert.Equal("batch at 20", Assert.Throws<InvalidOperationException>(() => job.RunBatch(50, 10)).Message);
        Assert.Equal([0, 10, 20], job.Batches.ConvertAll(b => b.Start));
    }

    [Fact]
    public void RunBatch_BadInput_ThrowsAtOnce_NamingTheArgument_AndRunsNothing()
    {
        var job = new RecordingBatchJob { Batches = [], ThrowAtStart = -1 };
        Assert.Equal("arrayLength", Assert.Throws<ArgumentOutOfRangeException>(() => job.RunBatch(-1)).ParamName);
        ArgumentOutOfRangeException batch = Assert.Throws<ArgumentOutOfRangeException>(() => job.RunBatch(10, 0));
        Assert.Equal("batchSize", batch.ParamName);
        Assert.Contains("at least 1", batch.Message, StringComparison.Ordinal);
        Assert.Empty(job.Batches);
    }

    [Fact]
    public async Task BadInput_ThrowsAtOnce_NamingTheArgument_AndSchedulesNothing()
    {
        await JobTestUtil.Bounded(() =>
        {
            var ran = new Counter();
            var gate = new Gate();
            var job = new RecordingForJob(4);
            JobHandle dep;
            try
            {
                dep = new GateJob(gate, ran).Schedule();
                Assert.Equal("arrayLength", Assert.Throws<ArgumentOutOfRangeException>(() => job.Schedule(-1, dep)).ParamName);
                Assert.Equal("arrayLength", Assert.Throws<ArgumentOutOfRangeException>(() => job.ScheduleParallel(-1, 1, dep)).ParamName);
                Assert.Equal("arrayLength", Assert.Throws<ArgumentOutOfRangeException>(() => job.ScheduleParallel(int.MinValue, 0, dep)).ParamName);
                ArgumentOutOfRangeException batch = Assert.Throws<ArgumentOutOfRangeException>(() => job.ScheduleParallel(4, 0, dep));
                Assert.Equal("innerloopBatchCount", batch.ParamName);
                Assert.Contains("at least 1", batch.Message, StringComparison.Ordinal);
                Assert.Equal("innerloopBatchCount", Assert.Throws<ArgumentOutOfRangeException>(() => job.ScheduleParallel(4, -5)).ParamName);
                ArgumentOutOfRangeException length = Assert.Throws<ArgumentOutOfRangeException>(() => job.Run(-1));
                Assert.Equal("arrayLength", length.ParamName);
                Assert.Contains("zero or positive", length.Message, StringComparison.Ordinal);
                var parallel = new RecordingParallelJob { Hits = new int[4], Order = new int[4], Thread = new int[4] };
                Assert.Equal("arrayLength", Assert.Throws<ArgumentOutOfRangeException>(() => parallel.Run(-3)).ParamName);
                Assert.Equal(0, parallel.Hits[0] + parallel.Hits[1] + parallel.Hits[2] + parallel.Hits[3]);
                Assert.False(dep.IsCompleted);
#if DEBUG
                Assert.Equal(0, dep.Node!.WaiterCountForTests(dep.Version)); // nothing was hung on the dependency
#endif
            }
            finally
            {
                gate.Dispose();
            }
            dep.Complete();
            Assert.Equal(1, ran.Read());
            Assert.Equal(0, job.Hits[0] + job.Hits[1] + job.Hits[2] + job.Hits[3]);
        });
    }
}

using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Jobs;

/// <summary>
/// A job that throws: its exception comes out of Complete() and await on its own handle and on the handle of every
/// job that depends on it, directly or not; those dependents never run.
/// </summary>
public class JobFaultTests
{
    private struct ThrowAtIndexJob : IJobParallelFor
    {
        public int ThrowAt;
        public Exception Error;
        public int[] Hits;

        public readonly void Execute(int index)
        {
            if (index == ThrowAt)
            {
                throw Error;
            }
            Interlocked.Increment(ref Hits[index]);
        }
    }

    private struct ThrowInBatchJob : IJobParallelForBatch
    {
        public int ThrowAtStart;
        public Exception Error;

        public readonly void Execute(int startIndex, int count)
        {
            if (startIndex == ThrowAtStart)
            {
                throw Error;
            }
        }
    }

    private static void AssertThrowsSame(Exception expected, JobHandle handle)
    {
        Exception? actual = JobTestUtil.CompleteCatching(handle);
        Assert.Same(expected, actual);
        Assert.True(handle.IsCompleted);
    }

    private static async SpindleTask AwaitInSpindleTask(JobHandle handle) => await handle;

    private static async Task AwaitInTask(JobHandle handle) => await handle;

    [Fact]
    public async Task FailedJob_OwnHandle_DirectAndTransitiveDependents_CombinedHandle_AllThrowTheSameException()
    {
        await JobTestUtil.Bounded(() =>
        {
            var error = new InvalidTimeZoneException("job failed");
            var ran = new Counter();
            var dependentRan = new Counter();
            var sibling = new Counter();
            JobHandle failed = new ThrowJob(error, ran).Schedule();
            JobHandle direct = new CountJob(dependentRan).Schedule(failed);
            JobHandle transitive = new CountJob(dependentRan).Schedule(direct);
            JobHandle ok = new CountJob(sibling).Schedule();
            JobHandle combined = JobHandle.CombineDependencies(ok, transitive);
            JobHandle afterCombined = new CountJob(dependentRan).Schedule(combined);
            JobHandle afterThree = new CountJob(dependentRan).Schedule(JobHandle.CombineDependencies(ok, default, failed));
            JobHandle afterSpan = new CountJob(dependentRan).Schedule(JobHandle.CombineDependencies([ok, failed, direct, default]));

            AssertThrowsSame(error, afterCombined);
            AssertThrowsSame(error, failed);
            AssertThrowsSame(error, direct);
            AssertThrowsSame(error, transitive);
            AssertThrowsSame(error, combined);
            AssertThrowsSame(error, afterThree);
            AssertThrowsSame(error, afterSpan);
            AssertThrowsSame(error, failed); // again: the fault stays

            Assert.Equal(1, ran.Read());
            Assert.Equal(1, sibling.Read());
            Assert.Equal(0, dependentRan.Read());
            ok.Complete();
        });
    }

    [Fact]
    public async Task FailedDependency_AlreadyFailedWhenTheDependentIsScheduled_DependentThrowsAndNeverRuns()
    {
        await JobTestUtil.Bounded(() =>
        {
            var error = new InvalidTimeZoneException("failed earlier");
            JobHandle failed = new ThrowJob(error).Schedule();
            JobTestUtil.WaitByPolling(failed);
            var ran = new Counter();
            JobHandle direct = new CountJob(ran).Schedule(failed);
            JobHandle combined = JobHandle.CombineDependencies(failed, new CountJob(ran).Schedule());
            JobHandle afterCombined = new CountJob(ran).Schedule(combined);
            JobHandle parallel = new IndexCountJob(new int[100]).Schedule(100, 10, failed);
            AssertThrowsSame(error, direct);
            AssertThrowsSame(error, combined);
            AssertThrowsSame(error, afterCombined);
            AssertThrowsSame(error, parallel);
            AssertThrowsSame(error, failed);
            Assert.Equal(1, ran.Read()); // only the independent job inside the combine
        });
    }

    [Fact]
    public async Task FailedDependency_FailsWhileTheDependentWaits_DependentThrowsAndNeverRuns()
    {
        using var gate = new Gate();
        var error = new InvalidTimeZoneException("failed later");
        var ran = new Counter();
        JobHandle blocked = new GateJob(gate).Schedule();
        JobHandle failing = new ThrowJob(error).Schedule(blocked);
        JobHandle direct = new CountJob(ran).Schedule(failing);
        JobHandle transitive = new CountJob(ran).Schedule(direct);
        JobHandle combined = JobHandle.CombineDependencies(transitive, blocked);
        JobHandle.ScheduleBatchedJobs();
        gate.WaitStarted();
        Assert.False(direct.IsCompleted);
        gate.Release.Set();
        await JobTestUtil.Bounded(() =>
        {
            blocked.Complete();
            AssertThrowsSame(error, transitive);
            AssertThrowsSame(error, direct);
            AssertThrowsSame(error, failing);
            AssertThrowsSame(error, combined);
        });
        Assert.Equal(0, ran.Read());
    }

    [Fact]
    public async Task FailedJob_Await_AsSpindleTask_FromAsyncSpindleTaskAndAsyncTask_Throw()
    {
        var error = new InvalidTimeZoneException("awaited");
        var ran = new Counter();
        using var gate = new Gate();
        JobHandle blocked = new GateJob(gate).Schedule();
        JobHandle failing = new ThrowJob(error).Schedule(blocked);
        JobHandle dependent = new CountJob(ran).Schedule(failing);

        // Registered while pending, so each await resumes from the job's completion.
        Task viaTask = AwaitInTask(dependent);
        Task viaSpindleTask = TestUtil.AwaitAsync(AwaitInSpindleTask(failing));
        Task viaAsSpindleTask = TestUtil.AwaitAsync(dependent.AsSpindleTask());
        Task viaAwait = Task.Run(async () => await failing);
        gate.Release.Set();

        Assert.Same(error, await Assert.ThrowsAsync<InvalidTimeZoneException>(() => TestUtil.WithTimeout(viaTask)));
        Assert.Same(error, await Assert.ThrowsAsync<InvalidTimeZoneException>(() => TestUtil.WithTimeout(viaSpindleTask)));
        Assert.Same(error, await Assert.ThrowsAsync<InvalidTimeZoneException>(() => TestUtil.WithTimeout(viaAsSpindleTask)));
        Assert.Same(error, await Assert.ThrowsAsync<InvalidTimeZoneException>(() => TestUtil.WithTimeout(viaAwait)));

        // And once already failed: the await completes synchronously, with the exception.
        Assert.Same(error, await Assert.ThrowsAsync<InvalidTimeZoneException>(async () => await failing));
        Assert.Same(error, await Assert.ThrowsAsync<InvalidTimeZoneException>(() => TestUtil.WithTimeout(failing.AsSpindleTask())));
        Assert.Same(error, await Assert.ThrowsAsync<InvalidTimeZoneException>(() => TestUtil.WithTimeout(AwaitInTask(dependent))));
        Assert.Equal(0, ran.Read());
    }

    [Fact]
    public async Task ParallelFor_OneIndexThrows_CompleteThrowsIt_DependentsNeverRun()
    {
        await JobTestUtil.Bounded(() =>
        {
            for (int round = 0; round < 20; round++)
            {
                var error = new InvalidTimeZoneException("index " + round);
                var ran = new Counter();
                var hits = new int[100_000];
                int throwAt = round * 4_999;
                JobHandle h = new ThrowAtIndexJob { ThrowAt = throwAt, Error = error, Hits = hits }.Schedule(hits.Length, 32);
                JobHandle dependent = new CountJob(ran).Schedule(h);
                JobHandle dependentFor = new IndexCountJob(new int[10]).Schedule(10, 1, h);
                AssertThrowsSame(error, dependent);
                AssertThrowsSame(error, h);
                AssertThrowsSame(error, dependentFor);
                Assert.Equal(0, ran.Read());
                Assert.Equal(0, hits[throwAt]);
                foreach (int hit in hits)
                {
                    Assert.True(hit <= 1);
                }
            }
        });
    }

    /// <summary>
    /// JobHandle's Faults remarks: a job that throws an OperationCanceledException ends canceled, not faulted, and its
    /// waits and its dependents' rethrow that exception (a user's review found the behaviour undocumented).
    /// </summary>
    [Fact]
    public async Task AJobThatThrowsOperationCanceled_EndsCanceled_AndItsWaitsAndDependentsRethrowIt()
    {
        var error = new OperationCanceledException("job gave up");
        var ran = new Counter();
        JobHandle failing = new ThrowJob(error).Schedule();
        JobHandle dependent = new CountJob(ran).Schedule(failing);
        await JobTestUtil.Bounded(() =>
        {
            AssertThrowsSame(error, failing);
            AssertThrowsSame(error, dependent);
        });
        Assert.True(failing.AsSpindleTask().IsCanceled, "a job that threw OperationCanceledException reads canceled");
        Assert.Same(error, await Assert.ThrowsAsync<OperationCanceledException>(() => TestUtil.WithTimeout(AwaitInTask(dependent))));
        Assert.Equal(0, ran.Read());
    }

    [Fact]
    public async Task ParallelForBatch_OneBatchThrows_CompleteThrowsIt()
    {
        await JobTestUtil.Bounded(() =>
        {
            var error = new InvalidTimeZoneException("batch");
            var ran = new Counter();
            JobHandle h = new ThrowInBatchJob { ThrowAtStart = 640, Error = error }.ScheduleBatch(10_000, 64);
            JobHandle dependent = new CountJob(ran).Schedule(h);
            AssertThrowsSame(error, dependent);
            AssertThrowsSame(error, h);
            Assert.Equal(0, ran.Read());
        });
    }

    [Fact]
    public async Task TwoFailedDependencies_CombinedHandleThrowsOneOfThem()
    {
        await JobTestUtil.Bounded(() =>
        {
            var e1 = new InvalidTimeZoneException("one");
            var e2 = new InvalidTimeZoneException("two");
            var ran = new Counter();
            JobHandle a = new ThrowJob(e1).Schedule();
            JobHandle b = new ThrowJob(e2).Schedule();
            JobHandle c = new CountJob(ran).Schedule(JobHandle.CombineDependencies(a, b));
            Exception? thrown = JobTestUtil.CompleteCatching(c);
            Assert.True(ReferenceEquals(thrown, e1) || ReferenceEquals(thrown, e2), "unexpected: " + thrown);
            Assert.Equal(0, ran.Read());
            AssertThrowsSame(e1, a);
            AssertThrowsSame(e2, b);
        });
    }

    [Fact]
    public async Task ManyFailingJobs_LaterJobsStillRun()
    {
        await JobTestUtil.Bounded(() =>
        {
            var error = new InvalidTimeZoneException("many");
            var handles = new JobHandle[500];
            for (int i = 0; i < handles.Length; i++)
            {
                handles[i] = new ThrowJob(error).Schedule();
            }
            JobHandle.ScheduleBatchedJobs();
            foreach (JobHandle h in handles)
            {
                AssertThrowsSame(error, h);
            }
            var counter = new Counter();
            var more = new JobHandle[500];
            for (int i = 0; i < more.Length; i++)
            {
                more[i] = new CountJob(counter).Schedule();
            }
            JobHandle.CombineDependencies(more).Complete();
            Assert.Equal(more.Length, counter.Read());
        });
    }
}

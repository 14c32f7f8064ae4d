using System;
using System.Collections.Concurrent;
using System.Linq;
using System.Runtime.CompilerServices;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Jobs;

/// <summary>
/// Faults and process-wide state: the workers survive failing jobs (checked by making every worker run a job at
/// once), and a failure nobody observes reaches Spindle.UnobservedException when its holder is finalized. Run alone.
/// </summary>
[Collection(SequentialCollection.Name)]
public class JobFaultSequentialTests
{
    /// <summary>Waits at a barrier sized to the worker count, and records its thread.</summary>
    private struct RendezvousJob : IJob
    {
        public Barrier Barrier;
        public ConcurrentDictionary<int, string> Threads;

        public readonly void Execute()
        {
            Threads.TryAdd(Environment.CurrentManagedThreadId, Thread.CurrentThread.Name ?? "?");
            if (!Barrier.SignalAndWait(TimeSpan.FromSeconds(10)))
            {
                throw new TimeoutException("not every worker took a rendezvous job: a worker is gone or stuck");
            }
        }
    }

    [Fact]
    public async Task FailingJobsOnWorkers_EveryWorkerSurvivesAndRunsLaterJobs()
    {
        await JobTestUtil.Bounded(() =>
        {
            WorkerPool pool = WorkerPool.Shared;
            var error = new InvalidTimeZoneException("on a worker");
            var failed = new JobHandle[Math.Max(50, pool.WorkerCount * 20)];
            for (int i = 0; i < failed.Length; i++)
            {
                failed[i] = new ThrowJob(error).Schedule();
            }
            JobHandle.ScheduleBatchedJobs();
            // Poll (IsCompleted does not help), so only the workers run the failing jobs.
            foreach (JobHandle h in failed)
            {
                JobTestUtil.WaitByPolling(h);
            }
            foreach (JobHandle h in failed)
            {
                Assert.Same(error, JobTestUtil.CompleteCatching(h));
            }

            // One job per worker, each waiting until all have started: only possible if every worker is alive.
            for (int round = 0; round < 3; round++)
            {
                using var barrier = new Barrier(pool.WorkerCount);
                var threads = new ConcurrentDictionary<int, string>();
                var handles = new JobHandle[pool.WorkerCount];
                for (int i = 0; i < handles.Length; i++)
                {
                    handles[i] = new RendezvousJob { Barrier = barrier, Threads = threads }.Schedule();
                }
                JobHandle all = JobHandle.CombineDependencies(handles);
                JobHandle.ScheduleBatchedJobs();
                JobTestUtil.WaitByPolling(all);
                all.Complete();
                Assert.Equal(pool.WorkerCount, threads.Count);
                Assert.All(threads.Values, name => Assert.StartsWith("Spindle worker", name, StringComparison.Ordinal));
            }
        });
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    private static void FailAndForget(Exception error)
    {
        JobHandle h = new ThrowJob(error).Schedule();
        JobHandle.ScheduleBatchedJobs();
        JobTestUtil.WaitByPolling(h);
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    private static void FailWithDependentsAndForget(Exception error, Gate gate)
    {
        // The dependents are scheduled before the failure: they share the one fault, and nobody completes any of them.
        JobHandle blocked = new GateJob(gate).Schedule();
        JobHandle h = new ThrowJob(error).Schedule(blocked);
        JobHandle d = new CountJob(new Counter()).Schedule(h);
        JobHandle c = JobHandle.CombineDependencies(d, new CountJob(new Counter()).Schedule());
        JobHandle.ScheduleBatchedJobs();
        gate.Release.Set();
        JobTestUtil.WaitByPolling(c);
        blocked.Complete();
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    private static void FailThenScheduleDependentAndForget(Exception error)
    {
        // The dependent and the combine are scheduled after the failure; nobody completes or awaits anything.
        JobHandle h = new ThrowJob(error).Schedule();
        JobHandle.ScheduleBatchedJobs();
        JobTestUtil.WaitByPolling(h);
        JobHandle d = new CountJob(new Counter()).Schedule(h);
        JobTestUtil.WaitByPolling(d);
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    private static void FailThenCombineAndForget(Exception error)
    {
        JobHandle h = new ThrowJob(error).Schedule();
        JobHandle.ScheduleBatchedJobs();
        JobTestUtil.WaitByPolling(h);
        JobHandle other = new CountJob(new Counter()).Schedule();
        JobHandle c = JobHandle.CombineDependencies(h, other);
        JobTestUtil.WaitByPolling(c);
        other.Complete();
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    private static void FailAndObserve(Exception error, int how)
    {
        JobHandle h = new ThrowJob(error).Schedule();
        JobHandle d = new CountJob(new Counter()).Schedule(h);
        switch (how)
        {
            case 0:
                Assert.Same(error, JobTestUtil.CompleteCatching(h));
                break;
            case 1:
                // Observing a dependent observes the shared fault.
                Assert.Same(error, JobTestUtil.CompleteCatching(d));
                break;
            default:
                Assert.Same(error, Assert.Throws<InvalidTimeZoneException>(() => TestUtil.AwaitAsync(h.AsSpindleTask()).GetAwaiter().GetResult()));
                break;
        }
        JobTestUtil.WaitByPolling(d);
    }

    [Fact]
    public async Task UnobservedFailure_IsReportedOnceWhenCollected()
    {
        await JobTestUtil.Bounded(() =>
        {
            var error = new InvalidTimeZoneException("nobody looked");
            ConcurrentQueue<Exception> reported = UnobservedReports.Observe(UnobservedReports.Own.Instances(error), r =>
            {
                FailAndForget(error);
                Assert.True(JobTestUtil.CollectUntilReported(r, error, 50), "the unobserved job failure was never reported");
            });
            Assert.Single(reported, e => ReferenceEquals(e, error));
        });
    }

    [Fact]
    public async Task UnobservedFailure_SharedWithUnobservedDependents_IsReportedOnce()
    {
        await JobTestUtil.Bounded(() =>
        {
            var error = new InvalidTimeZoneException("nobody looked at the dependents either");
            var gate = new Gate();
            ConcurrentQueue<Exception> reported = UnobservedReports.Observe(UnobservedReports.Own.Instances(error), r =>
            {
                FailWithDependentsAndForget(error, gate);
                Assert.True(JobTestUtil.CollectUntilReported(r, error, 50), "the unobserved job failure was never reported");
            });
            Assert.Single(reported, e => ReferenceEquals(e, error));
        });
    }

    [Fact]
    public async Task UnobservedFailure_DependentScheduledAfterTheFailure_IsStillReported()
    {
        await JobTestUtil.Bounded(() =>
        {
            var error = new InvalidTimeZoneException("a dependent is not an observer");
            ConcurrentQueue<Exception> reported = UnobservedReports.Observe(UnobservedReports.Own.Instances(error), r =>
            {
                FailThenScheduleDependentAndForget(error);
                Assert.True(JobTestUtil.CollectUntilReported(r, error, 50), "the failure was never reported: scheduling a dependent after it marked it observed");
            });
            Assert.Single(reported, e => ReferenceEquals(e, error));
        });
    }

    [Fact]
    public async Task UnobservedFailure_CombinedAfterTheFailure_IsStillReported()
    {
        await JobTestUtil.Bounded(() =>
        {
            var error = new InvalidTimeZoneException("combining is not observing");
            ConcurrentQueue<Exception> reported = UnobservedReports.Observe(UnobservedReports.Own.Instances(error), r =>
            {
                FailThenCombineAndForget(error);
                Assert.True(JobTestUtil.CollectUntilReported(r, error, 50), "the failure was never reported: combining the failed handle marked it observed");
            });
            Assert.Single(reported, e => ReferenceEquals(e, error));
        });
    }

    [Theory]
    [InlineData(0)]
    [InlineData(1)]
    [InlineData(2)]
    public async Task ObservedFailure_IsNotReported(int how)
    {
        await JobTestUtil.Bounded(() =>
        {
            var error = new InvalidTimeZoneException("observed " + how);
            ConcurrentQueue<Exception> reported = UnobservedReports.Observe(UnobservedReports.Own.Instances(error), r =>
            {
                FailAndObserve(error, how);
                Assert.False(JobTestUtil.CollectUntilReported(r, error, 5), "an observed job failure was reported as unobserved");
            });
            Assert.DoesNotContain(reported, e => ReferenceEquals(e, error));
        });
    }
}

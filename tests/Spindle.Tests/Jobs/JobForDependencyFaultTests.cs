using System;
using System.Collections.Concurrent;
using System.Runtime.CompilerServices;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Jobs;

/// <summary>
/// A review of stop 42's <see cref="IJobFor"/>: an in-order or parallel for-job whose dependency fails runs no index,
/// fails with the dependency's exception, and that exception is reported once at most: never when a Complete() or
/// CompleteAll observed it (through the for-job or the dependency, which share it), once when nothing did.
/// </summary>
[Collection(SequentialCollection.Name)]
public class JobForDependencyFaultTests
{
    private struct HitJob : IJobFor
    {
        public int[] Hits;

        public readonly void Execute(int index) => Interlocked.Increment(ref Hits[index]);
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task AForJobWhoseDependencyFails_RunsNoIndex_FailsWithItsException_ObservedOnce(bool parallel)
    {
        await JobTestUtil.Bounded(() =>
        {
            var error = new InvalidOperationException("review42: the dependency failed");
            ConcurrentQueue<Exception> reports = UnobservedReports.Observe(e => ReferenceEquals(e, error), () =>
            {
                var hits = new int[1000];
                using var gate = new Gate();
                JobHandle gated = new GateJob(gate).Schedule();
                JobHandle failing = new ThrowJob(error).Schedule(gated);
                var job = new HitJob { Hits = hits };
                JobHandle forJob = parallel ? job.ScheduleParallel(hits.Length, 16, failing) : job.Schedule(hits.Length, failing);
                JobHandle.ScheduleBatchedJobs();
                gate.WaitStarted();
                gate.Release.Set();
                Exception? thrown = null;
                try
                {
                    JobHandle.CompleteAll(forJob, failing, gated);
                }
                catch (Exception ex)
                {
                    thrown = ex;
                }
                Assert.Same(error, thrown);
                Assert.Same(error, JobTestUtil.CompleteCatching(failing));
                Assert.All(hits, h => Assert.Equal(0, h));
                GC.Collect();
                GC.WaitForPendingFinalizers();
            });
            Assert.Empty(reports); // observed by CompleteAll: never reported
        });
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    private static void ScheduleAndDrop(Exception error, bool parallel, int[] hits)
    {
        JobHandle failing = new ThrowJob(error).Schedule();
        var job = new HitJob { Hits = hits };
        JobHandle forJob = parallel ? job.ScheduleParallel(hits.Length, 16, failing) : job.Schedule(hits.Length, failing);
        JobTestUtil.WaitByPolling(forJob);
        JobTestUtil.WaitByPolling(failing);
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task AForJobWhoseDependencyFails_NobodyObserves_ReportedOnce(bool parallel)
    {
        await JobTestUtil.Bounded(() =>
        {
            var error = new InvalidOperationException("review42: nobody observes this");
            var hits = new int[100];
            using UnobservedReports watch = UnobservedReports.Start(e => ReferenceEquals(e, error));
            ScheduleAndDrop(error, parallel, hits);
            Assert.True(JobTestUtil.CollectUntilReported(watch.Reports, error, 50), "never reported");
            JobTestUtil.CollectUntilReported(watch.Reports, new Exception("none"), 3); // a second report would come meanwhile
            Assert.Single(watch.Reports);
            Assert.All(hits, h => Assert.Equal(0, h));
        });
    }
}

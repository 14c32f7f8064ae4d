using System;
using System.Diagnostics;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Jobs;

/// <summary>
/// A job that becomes ready on a worker must be where a thread waiting for it in Complete() can run it: a thread that is
/// not a worker takes jobs only from the jobs' shared queue, and cannot reach a worker's own run-next slot or deque. A
/// review of the job system found such jobs parked behind whatever their worker ran next. Run alone: these tests hold
/// workers.
/// </summary>
[Collection(SequentialCollection.Name)]
public class JobReachableWhileItsWorkerIsBusyTests
{
    /// <summary>
    /// A finish that makes two jobs ready runs one inline and queues the other. Queued in the finishing worker's own
    /// run-next slot, the other waited there for as long as the inline one ran, and a thread in Complete() on it, with
    /// nothing else to do, made no progress.
    /// </summary>
    [Fact]
    public async Task SecondDependentMadeReadyOnAWorker_CompletesOnAWaitingThread_WhileTheFirstRunsInlineOnThatWorker()
    {
        await JobTestUtil.Bounded(() =>
        {
            using var others = new HoldWorkers(WorkerPool.Shared.WorkerCount - 1);
            var longStarted = new Flag();
            var release = new Flag();
            var longDone = new Flag();
            var ran = new Counter();
            var rootRan = new Counter();
            JobHandle root = new CountJob(rootRan).Schedule();
            // Edges are delivered newest first: the last dependent scheduled is the one the finish runs inline.
            JobHandle quick = new CountJob(ran).Schedule(root);
            JobHandle slow = new HeldJob { Started = longStarted, Release = release, Done = longDone }.Schedule(root);
            try
            {
                JobHandle.ScheduleBatchedJobs(); // the free worker takes the root; this thread does not help
                Assert.True(longStarted.Wait(), "the slow dependent never started");
                Assert.True(root.IsCompleted);
                var clock = Stopwatch.StartNew();
                Task waiter = Task.Run(quick.Complete);
                // The defect blocks until the release below: the default bound (it was 5 s; a Task.Run can start late).
                bool done = waiter.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds));
                long ms = clock.ElapsedMilliseconds;
                string pool = WorkerPool.Shared.Describe();
                release.Set();
                Assert.True(waiter.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "the quick dependent never completed");
                Assert.True(done, $"Complete() on a ready job made no progress for {ms} ms while the worker that made it ready ran another job ({pool})");
                slow.Complete();
                Assert.Equal(1, ran.Read());
                Assert.Equal(1, rootRan.Read());
            }
            finally
            {
                release.Set();
            }
        });
    }

    /// <summary>
    /// A job scheduled and flushed by code running on a worker was queued in that worker's own run-next slot: a main
    /// thread in Complete() on it waited until that worker's item returned, though it could have run the job itself.
    /// </summary>
    [Fact]
    public async Task JobFlushedOnAWorker_CompletesOnAWaitingThread_WhileThatWorkerStaysBusy()
    {
        await JobTestUtil.Bounded(() =>
        {
            using var others = new HoldWorkers(WorkerPool.Shared.WorkerCount - 1);
            var release = new ManualResetEventSlim(false);
            var scheduled = new ManualResetEventSlim(false);
            var ran = new Counter();
            JobHandle job = default;
            SpindleTask busy = Spindle.Run(() =>
            {
                job = new CountJob(ran).Schedule();
                JobHandle.ScheduleBatchedJobs(); // made visible on this worker
                scheduled.Set();
                release.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)); // then this worker stays busy
            });
            try
            {
                Assert.True(scheduled.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "the scheduling item never ran");
                var clock = Stopwatch.StartNew();
                Task waiter = Task.Run(job.Complete);
                // The defect blocks until the release below: the default bound (it was 5 s; a Task.Run can start late).
                bool done = waiter.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds));
                long ms = clock.ElapsedMilliseconds;
                string pool = WorkerPool.Shared.Describe();
                release.Set();
                Assert.True(waiter.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "the job never completed");
                Assert.True(done, $"Complete() on a flushed job made no progress for {ms} ms while the worker that flushed it was busy ({pool})");
                Assert.Equal(1, ran.Read());
            }
            finally
            {
                release.Set();
                TestUtil.WithTimeout(busy).GetAwaiter().GetResult();
            }
        });
    }
}

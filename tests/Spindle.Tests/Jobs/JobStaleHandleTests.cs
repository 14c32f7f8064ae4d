using System;
using System.Diagnostics;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Jobs;

/// <summary>
/// Stale handles: once a job has succeeded its pooled node is reused, and an old handle counts as completed. It must
/// never wait on (or help run) the job that reuses the node. Run alone: these tests hold every worker on purpose.
/// </summary>
[Collection(SequentialCollection.Name)]
public class JobStaleHandleTests
{
    /// <summary>A thread that must not run a given job's work; set while the stale handle is being checked.</summary>
    private static int s_forbiddenThread = -1;

    /// <summary>A job type used only here, so its pool holds only these nodes.</summary>
    private struct StaleProbeJob : IJob
    {
        public Gate Gate;
        public Counter Ran;
        public Counter RanOnForbiddenThread;

        public readonly void Execute()
        {
            if (Environment.CurrentManagedThreadId == Volatile.Read(ref s_forbiddenThread))
            {
                RanOnForbiddenThread.Increment();
            }
            Gate.Started.Set();
            if (!Gate.Release.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)))
            {
                throw new TimeoutException("StaleProbeJob was never released.");
            }
            Ran.Increment();
        }
    }

    private struct StaleProbeForJob : IJobParallelFor
    {
        public Gate Gate;
        public int[] Hits;
        public Counter RanOnForbiddenThread;

        public readonly void Execute(int index)
        {
            if (Environment.CurrentManagedThreadId == Volatile.Read(ref s_forbiddenThread))
            {
                RanOnForbiddenThread.Increment();
            }
            if (index == 0)
            {
                Gate.Started.Set();
                if (!Gate.Release.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)))
                {
                    throw new TimeoutException("StaleProbeForJob was never released.");
                }
            }
            Interlocked.Increment(ref Hits[index]);
        }
    }

    /// <summary>Every way of looking at a stale handle: all must say "done", at once, without running anything.</summary>
    private static void AssertStaleHandleIsDone(JobHandle stale)
    {
        var sw = Stopwatch.StartNew();
        Volatile.Write(ref s_forbiddenThread, Environment.CurrentManagedThreadId);
        try
        {
            Assert.True(stale.IsCompleted);
            stale.Complete();
            Assert.True(stale.GetAwaiter().IsCompleted);
            stale.GetAwaiter().GetResult();
            Assert.True(stale.AsSpindleTask().IsCompleted);
            Assert.True(JobHandle.CombineDependencies(stale, stale).IsCompleted);
            JobHandle.CombineDependencies(stale, default, stale).Complete();
            JobHandle.CombineDependencies([stale, stale, stale]).Complete();
        }
        finally
        {
            Volatile.Write(ref s_forbiddenThread, -1);
        }
        // A wait on the blocked job that reuses the node would last until its gate's 30 s bound: half of that tells the
        // two apart, and a loaded machine does not (it was 2 s).
        Assert.True(sw.Elapsed < TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds / 2), $"the stale handle's checks took {sw.Elapsed}: did they wait on the job that reuses its node?");
    }

    [Fact]
    public async Task StaleJobHandle_NodeReusedByABlockedJob_CountsAsCompletedAndNeverWaits()
    {
        await JobTestUtil.Bounded(() =>
        {
            var forbidden = new Counter();
            var ran = new Counter();
            var done = new Gate();
            done.Release.Set();
            var blocked = new Gate();
            JobHandle old;
            JobHandle reused;
            try
            {
                using (new HoldWorkers())
                {
                    // Only this thread runs jobs now: the node goes back to this thread's pool slot, and the next
                    // job of the same type takes it.
                    old = new StaleProbeJob { Gate = done, Ran = ran, RanOnForbiddenThread = forbidden }.Schedule();
                    old.Complete();
                    Assert.Equal(1, ran.Read());
                    reused = new StaleProbeJob { Gate = blocked, Ran = ran, RanOnForbiddenThread = forbidden }.Schedule();
                    Assert.True(ReferenceEquals(old.Node, reused.Node), "precondition: the next job of the same type reuses the node");
                    Assert.NotEqual(old, reused);

                    // The new job is in the batch, then visible (the checks flush) with no worker free to run it.
                    AssertStaleHandleIsDone(old);
                    Assert.False(reused.IsCompleted);
                }

                // Now a worker runs the new job, and it blocks.
                blocked.WaitStarted();
                AssertStaleHandleIsDone(old);

                // A job that depends on the stale handle runs without waiting for the blocked job.
                var after = new Counter();
                JobHandle dependent = new CountJob(after).Schedule(old);
                JobHandle viaCombine = new CountJob(after).Schedule(JobHandle.CombineDependencies(old, dependent));
                viaCombine.Complete();
                Assert.Equal(2, after.Read());
                Assert.False(reused.IsCompleted);
                Assert.Equal(1, ran.Read());
                Assert.Equal(0, forbidden.Read());
            }
            finally
            {
                blocked.Release.Set();
            }
            reused.Complete();
            Assert.Equal(2, ran.Read());
            Assert.True(old.IsCompleted);
        });
    }

    [Fact]
    public async Task StaleParallelForHandle_NodeReusedByABlockedJob_NeverHelpsWithTheNewJobsBatches()
    {
        await JobTestUtil.Bounded(() =>
        {
            var forbidden = new Counter();
            var free = new Gate();
            free.Release.Set();
            var blocked = new Gate();
            var oldHits = new int[1_000];
            var newHits = new int[1_000];
            JobHandle old;
            JobHandle reused;
            try
            {
                using (new HoldWorkers())
                {
                    old = new StaleProbeForJob { Gate = free, Hits = oldHits, RanOnForbiddenThread = forbidden }.Schedule(oldHits.Length, 10);
                    old.Complete();
                    Assert.All(oldHits, h => Assert.Equal(1, h));
                    // This thread ran every batch while helping; the job's runner items are still queued and each holds
                    // a reference. Run them (they find nothing left to do) so the node is recycled here.
                    while (WorkerPool.Shared.TryRunHelpable())
                    {
                    }
                    reused = new StaleProbeForJob { Gate = blocked, Hits = newHits, RanOnForbiddenThread = forbidden }.Schedule(newHits.Length, 10);
                    Assert.True(ReferenceEquals(old.Node, reused.Node), "precondition: the next job of the same type reuses the node");
                    AssertStaleHandleIsDone(old);
                    Assert.False(reused.IsCompleted);
                }
                blocked.WaitStarted();
                AssertStaleHandleIsDone(old);
                Assert.False(reused.IsCompleted);
                Assert.Equal(0, forbidden.Read());
            }
            finally
            {
                blocked.Release.Set();
            }
            reused.Complete();
            Assert.All(newHits, h => Assert.Equal(1, h));
        });
    }

    [Fact]
    public async Task StaleCombinedHandle_NodeReusedByAPendingCombine_CountsAsCompleted()
    {
        await JobTestUtil.Bounded(() =>
        {
            var blocked = new Gate();
            JobHandle old;
            JobHandle reused;
            JobHandle pending;
            try
            {
                using (new HoldWorkers())
                {
                    var counter = new Counter();
                    old = JobHandle.CombineDependencies(new CountJob(counter).Schedule(), new CountJob(counter).Schedule());
                    old.Complete();
                    Assert.Equal(2, counter.Read());
                    pending = new GateJob(blocked).Schedule();
                    reused = JobHandle.CombineDependencies(pending, new CountJob(counter).Schedule());
                    Assert.True(ReferenceEquals(old.Node, reused.Node), "precondition: the next combine reuses the node");
                    AssertStaleHandleIsDone(old);
                    JobHandle.ScheduleBatchedJobs();
                }
                blocked.WaitStarted();
                AssertStaleHandleIsDone(old);
                Assert.False(reused.IsCompleted);
            }
            finally
            {
                blocked.Release.Set();
            }
            reused.Complete();
            pending.Complete();
        });
    }

    [Fact]
    public async Task ManyStaleHandles_WhileTheirNodesRunBlockedJobs_AllCountAsCompleted()
    {
        await JobTestUtil.Bounded(() =>
        {
            const int Count = 2_000;
            var ran = new Counter();
            var forbidden = new Counter();
            var free = new Gate();
            free.Release.Set();
            var old = new JobHandle[Count];
            for (int i = 0; i < Count; i++)
            {
                old[i] = new StaleProbeJob { Gate = free, Ran = ran, RanOnForbiddenThread = forbidden }.Schedule();
            }
            JobHandle.CombineDependencies(old).Complete();
            Assert.Equal(Count, ran.Read());

            var blocked = new Gate();
            var fresh = new JobHandle[Count];
            try
            {
                for (int i = 0; i < Count; i++)
                {
                    fresh[i] = new StaleProbeJob { Gate = blocked, Ran = ran, RanOnForbiddenThread = forbidden }.Schedule();
                }
                JobHandle.ScheduleBatchedJobs();
                blocked.WaitStarted(); // the workers now sit in blocked jobs, the rest are queued
                int reusedNodes = 0;
                var sw = Stopwatch.StartNew();
                Volatile.Write(ref s_forbiddenThread, Environment.CurrentManagedThreadId);
                try
                {
                    foreach (JobHandle h in old)
                    {
                        Assert.True(h.IsCompleted);
                        h.Complete();
                    }
                    JobHandle.CombineDependencies(old).Complete();
                }
                finally
                {
                    Volatile.Write(ref s_forbiddenThread, -1);
                }
                Assert.True(sw.Elapsed < TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds / 2), $"completing stale handles took {sw.Elapsed}"); // as above (it was 5 s)
                foreach (JobHandle h in fresh)
                {
                    foreach (JobHandle o in old)
                    {
                        if (ReferenceEquals(h.Node, o.Node))
                        {
                            reusedNodes++;
                            break;
                        }
                    }
                }
                Assert.True(reusedNodes > 0, "precondition: some nodes were reused");
                Assert.Equal(0, forbidden.Read());
                Assert.Equal(Count, ran.Read());
            }
            finally
            {
                blocked.Release.Set();
            }
            JobHandle.CombineDependencies(fresh).Complete();
            Assert.Equal(2 * Count, ran.Read());
        });
    }
}

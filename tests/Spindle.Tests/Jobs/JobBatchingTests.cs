using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Jobs;

/// <summary>
/// Batching: a scheduled job waits in a batch the workers do not see until a flush; ScheduleBatchedJobs, Complete,
/// IsCompleted and await all flush, so forgetting to flush never deadlocks. Run alone: any other test's Complete()
/// would flush this test's batch too (the batch is global).
/// </summary>
[Collection(SequentialCollection.Name)]
public class JobBatchingTests
{
    [Fact]
    public async Task ScheduledJob_DoesNotRunUntilFlushed_ThenRunsOnAWorker()
    {
        await JobTestUtil.Bounded(() =>
        {
            var counter = new Counter();
            JobHandle h = new CountJob(counter).Schedule();
            Thread.Sleep(100);
            Assert.Equal(0, counter.Read());
            JobHandle.ScheduleBatchedJobs();
            TestUtil.SpinUntil(() => counter.Read() == 1); // no Complete, no IsCompleted: the workers alone
            h.Complete();
            Assert.Equal(1, counter.Read());
        });
    }

    [Fact]
    public async Task ScheduledParallelFor_DoesNotRunUntilFlushed()
    {
        await JobTestUtil.Bounded(() =>
        {
            var hits = new int[1_000];
            JobHandle h = new IndexCountJob(hits).Schedule(hits.Length, 10);
            Thread.Sleep(100);
            Assert.All(hits, x => Assert.Equal(0, x));
            JobHandle.ScheduleBatchedJobs();
            TestUtil.SpinUntil(() => Array.TrueForAll(hits, x => Volatile.Read(ref x) == 1));
            h.Complete();
        });
    }

    [Fact]
    public async Task WithoutFlush_Complete_IsCompletedPolling_AndAwait_AllFinish()
    {
        await JobTestUtil.Bounded(() =>
        {
            for (int i = 0; i < 200; i++)
            {
                var counter = new Counter();
                JobHandle a = new CountJob(counter).Schedule();
                JobHandle b = new CountJob(counter).Schedule(a);
                switch (i % 3)
                {
                    case 0:
                        b.Complete();
                        break;
                    case 1:
                        TestUtil.SpinUntil(() => b.IsCompleted);
                        break;
                    default:
                        TestUtil.AwaitAsync(b.AsSpindleTask()).GetAwaiter().GetResult();
                        break;
                }
                Assert.Equal(2, counter.Read());
            }
        });
    }

    [Fact]
    public async Task WithoutFlush_AwaitInAsyncMethods_Finishes()
    {
        for (int i = 0; i < 100; i++)
        {
            var counter = new Counter();
            JobHandle a = new CountJob(counter).Schedule();
            JobHandle b = new IndexCountJob(new int[100]).Schedule(100, 7, a);
            await TestUtil.WithTimeout(AwaitBoth(a, b));
            Assert.Equal(1, counter.Read());
        }

        static async Task AwaitBoth(JobHandle a, JobHandle b)
        {
            await b;
            await a;
        }
    }

    [Fact]
    public async Task JobsMadeReadyByADependency_RunWithoutAnotherFlush()
    {
        await JobTestUtil.Bounded(() =>
        {
            // Only the root is flushed; its dependents become ready when it finishes, on the worker.
            var counter = new Counter();
            JobHandle root = new CountJob(counter).Schedule();
            JobHandle.ScheduleBatchedJobs();
            TestUtil.SpinUntil(() => counter.Read() == 1);
            // Scheduled after the root finished (its handle maybe stale already): ready at once, in the batch until the flush.
            JobHandle late = new CountJob(counter).Schedule(root);
            JobHandle.ScheduleBatchedJobs();
            TestUtil.SpinUntil(() => counter.Read() == 2);

            var gate = new Gate();
            JobHandle blocked = new GateJob(gate).Schedule();
            var handles = new JobHandle[20];
            for (int i = 0; i < handles.Length; i++)
            {
                handles[i] = new CountJob(counter).Schedule(blocked);
            }
            JobHandle.ScheduleBatchedJobs();
            gate.WaitStarted();
            gate.Release.Set();
            TestUtil.SpinUntil(() => counter.Read() == 22); // the workers alone
            blocked.Complete();
            late.Complete();
        });
    }
}

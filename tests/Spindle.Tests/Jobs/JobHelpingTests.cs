using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Jobs;

/// <summary>
/// Complete() helps: the calling thread runs jobs while it waits, so a job completes even when every worker is busy,
/// but a thread that is not a worker runs jobs only, never other queued work (Spindle.Run items). Run alone: these
/// tests hold every worker.
/// </summary>
[Collection(SequentialCollection.Name)]
public class JobHelpingTests
{
    private struct RecordThreadJob : IJob
    {
        public int[] Threads;
        public int Slot;

        public readonly void Execute() => Threads[Slot] = Environment.CurrentManagedThreadId;
    }

    [Fact]
    public async Task Complete_EveryWorkerBusy_TheCallingThreadRunsTheJobs()
    {
        await JobTestUtil.Bounded(() =>
        {
            using var hold = new HoldWorkers();
            var threads = new int[4];
            var hits = new int[5_000];
            JobHandle a = new RecordThreadJob { Threads = threads, Slot = 0 }.Schedule();
            JobHandle b = new RecordThreadJob { Threads = threads, Slot = 1 }.Schedule(a);
            JobHandle c = new IndexCountJob(hits).Schedule(hits.Length, 50, b);
            JobHandle d = new RecordThreadJob { Threads = threads, Slot = 2 }.Schedule(JobHandle.CombineDependencies(b, c));
            JobHandle.ScheduleBatchedJobs(); // part of the DAG visible, part still batched, when Complete() starts
            JobHandle e = new RecordThreadJob { Threads = threads, Slot = 3 }.Schedule(d);
            e.Complete();
            int me = Environment.CurrentManagedThreadId;
            Assert.All(threads, t => Assert.Equal(me, t));
            Assert.All(hits, h => Assert.Equal(1, h));
        });
    }

    [Fact]
    public async Task Complete_OnAPlainThread_NeverRunsSpindleRunItems()
    {
        await JobTestUtil.Bounded(() =>
        {
            int runItemThread = 0;
            SpindleTask item;
            int me = Environment.CurrentManagedThreadId;
            using (var hold = new HoldWorkers())
            {
                // Queued behind the holding items: only a worker may run it.
                item = Spindle.Run(() => Volatile.Write(ref runItemThread, Environment.CurrentManagedThreadId));
                var threads = new int[1];
                JobHandle h = new RecordThreadJob { Threads = threads, Slot = 0 }.Schedule();
                h.Complete();
                Assert.Equal(me, threads[0]);
                Assert.Equal(0, Volatile.Read(ref runItemThread));
            }
            TestUtil.WithTimeout(item).GetAwaiter().GetResult();
            Assert.NotEqual(me, runItemThread);
        });
    }
}

using System;
using System.Runtime.CompilerServices;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Jobs;

/// <summary>
/// A finished job's node, edges and waiters go back to their pools: none may keep what the job referenced (an array,
/// a delegate) or an awaiter's continuation alive. Run alone: it collects garbage.
/// </summary>
[Collection(SequentialCollection.Name)]
public class JobPoolHygieneTests
{
    private sealed class Payload
    {
        public int Touched;
    }

    private struct HoldJob : IJob
    {
        public Payload Payload;

        public readonly void Execute() => Interlocked.Increment(ref Payload.Touched);
    }

    private struct HoldForJob : IJobParallelFor
    {
        public Payload Payload;

        public readonly void Execute(int index) => Interlocked.Increment(ref Payload.Touched);
    }

    private struct HoldBatchJob : IJobParallelForBatch
    {
        public Payload Payload;

        public readonly void Execute(int startIndex, int count) => Interlocked.Add(ref Payload.Touched, count);
    }

    private struct HoldJobFor : IJobFor
    {
        public Payload Payload;

        public readonly void Execute(int index) => Interlocked.Increment(ref Payload.Touched);
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    private static WeakReference[] UseAndFinish()
    {
        var refs = new WeakReference[9];

        var p0 = new Payload();
        refs[0] = new WeakReference(p0);
        new HoldJob { Payload = p0 }.Schedule().Complete(); // run by this thread

        var p1 = new Payload();
        refs[1] = new WeakReference(p1);
        JobHandle onWorker = new HoldJob { Payload = p1 }.Schedule();
        JobTestUtil.WaitByPolling(onWorker); // run by a worker (or by nobody else: polling never helps)

        var p2 = new Payload();
        refs[2] = new WeakReference(p2);
        JobHandle first = new HoldJob { Payload = new Payload() }.Schedule();
        JobHandle second = new HoldJob { Payload = p2 }.Schedule(first); // run inline after its dependency
        JobHandle.CombineDependencies(first, second).Complete();

        var p3 = new Payload();
        refs[3] = new WeakReference(p3);
        new HoldForJob { Payload = p3 }.Schedule(1000, 7).Complete();

        var p4 = new Payload();
        refs[4] = new WeakReference(p4);
        new HoldBatchJob { Payload = p4 }.ScheduleBatch(1000, 7).Complete();

        var p5 = new Payload();
        refs[5] = new WeakReference(p5);
        using (var resumed = new ManualResetEventSlim(false))
        {
            var gate = new Flag();
            JobHandle awaited = new HeldJob { Release = gate, Done = new Flag() }.Schedule();
            Action continuation = () =>
            {
                GC.KeepAlive(p5);
                resumed.Set();
            };
            refs[6] = new WeakReference(continuation);
            awaited.GetAwaiter().OnCompleted(continuation); // an edge holds it while the job runs
            gate.Set();
            Assert.True(resumed.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "the continuation never ran");
            awaited.Complete();
        }

        var p7 = new Payload();
        refs[7] = new WeakReference(p7);
        new HoldJobFor { Payload = p7 }.Schedule(1000).Complete();

        var p8 = new Payload();
        refs[8] = new WeakReference(p8);
        new HoldJobFor { Payload = p8 }.ScheduleParallel(1000, 7).Complete();
        return refs;
    }

    [Fact]
    public async Task FinishedJobs_TheirPooledNodesEdgesAndWaiters_KeepNothingTheJobsReferenced()
    {
        WeakReference[] refs = await TestUtil.WithTimeout(Task.Factory.StartNew(
            UseAndFinish, CancellationToken.None, TaskCreationOptions.LongRunning, TaskScheduler.Default));
        string[] what =
        {
            "a job completed by its caller", "a job run by a worker", "a dependent run inline", "a parallel-for",
            "a batch job", "an awaiter's continuation's capture", "an awaiter's continuation", "an IJobFor in order",
            "an IJobFor in parallel",
        };
        // The workers may still be inside the finishes' last steps (returning an edge, dropping a reference).
        for (int attempt = 0; attempt < 50 && Array.Exists(refs, r => r.IsAlive); attempt++)
        {
            GC.Collect();
            GC.WaitForPendingFinalizers();
            GC.Collect();
            if (Array.Exists(refs, r => r.IsAlive))
            {
                Thread.Sleep(20);
            }
        }
        for (int i = 0; i < refs.Length; i++)
        {
            Assert.False(refs[i].IsAlive, $"{what[i]}: still reachable after the job finished");
        }
    }
}

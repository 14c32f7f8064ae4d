using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Jobs;

/// <summary>
/// Schedule's Faults remarks: a parallel-for fails at its first exception and skips the batches not started yet, so it
/// runs some of its indices, not all (a user's review found this undocumented). Every worker is held in a gated job
/// first, so the thread that completes the parallel-for runs its batches alone, in order: the first batch throws at its
/// first index, and every later batch is claimed and skipped. Run alone: the gated jobs hold every worker.
/// </summary>
[Collection(SequentialCollection.Name)]
public class ParallelForFaultSkipTests
{
    private struct ThrowAtZeroJob : IJobParallelFor
    {
        public Exception Error;
        public int[] Hits;

        public readonly void Execute(int index)
        {
            if (index == 0)
            {
                throw Error;
            }
            Interlocked.Increment(ref Hits[index]);
        }
    }

    [Fact]
    public async Task ParallelFor_TheFirstIndexThrows_SkipsTheBatchesNotStartedYet()
    {
        await JobTestUtil.Bounded(() =>
        {
            var gates = new Gate[Spindle.WorkerCount];
            var held = new JobHandle[gates.Length];
            for (int i = 0; i < gates.Length; i++)
            {
                gates[i] = new Gate();
                held[i] = new GateJob(gates[i]).Schedule();
            }
            JobHandle.ScheduleBatchedJobs();
            try
            {
                foreach (Gate gate in gates)
                {
                    gate.WaitStarted(); // on a worker each: this pool thread does not help while it waits here
                }
                var error = new InvalidTimeZoneException("index 0");
                var hits = new int[100_000];
                JobHandle failing = new ThrowAtZeroJob { Error = error, Hits = hits }.Schedule(hits.Length, 1_000);
                Assert.Same(error, JobTestUtil.CompleteCatching(failing)); // this thread runs the batches, the workers held
                int ran = 0;
                foreach (int hit in hits)
                {
                    ran += hit;
                }
                Assert.True(ran == 0, $"{ran} indices ran after the first batch failed: the batches not started yet should be skipped");
            }
            finally
            {
                foreach (Gate gate in gates)
                {
                    gate.Dispose();
                }
                JobHandle.CompleteAll(held);
            }
        });
    }
}

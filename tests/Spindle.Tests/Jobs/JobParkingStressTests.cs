using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Jobs;

/// <summary>
/// Scheduling races with worker parking: the workers are let go idle (parked, spinning, or in between), then several
/// threads schedule a burst of jobs at the same moment. Some bursts rely on the workers alone (flush, then wait
/// without helping), which is where a lost wake-up would show as a hang. Run alone, so the workers see only this.
/// </summary>
[Collection(SequentialCollection.Name)]
public class JobParkingStressTests
{
    private const int Producers = 3;
    private const int MaxJobsPerProducer = 24;

    /// <summary>Counts its run on its slot and signals the round's countdown; records whether its (first) dependency ran first.</summary>
    private struct BurstJob : IJob
    {
        public int[] Hits;
        public int Slot;
        public int DependsOnSlot; // -1: none
        public Counter OutOfOrder;
        public CountdownEvent Done;

        public readonly void Execute()
        {
            if (DependsOnSlot >= 0 && Volatile.Read(ref Hits[DependsOnSlot]) != 1)
            {
                OutOfOrder.Increment();
            }
            Interlocked.Increment(ref Hits[Slot]);
            Done.Signal();
        }
    }

    /// <summary>A parallel-for whose last index to finish signals the countdown once.</summary>
    private struct BurstForJob : IJobParallelFor
    {
        public int[] Hits;
        public int Slot;
        public int Length;
        public int[] IndexHits;
        public Counter Finished;
        public CountdownEvent Done;

        public readonly void Execute(int index)
        {
            Interlocked.Increment(ref IndexHits[index]);
            if (Interlocked.Increment(ref Finished.Value) == Length)
            {
                Interlocked.Increment(ref Hits[Slot]);
                Done.Signal();
            }
        }
    }

    private enum Idle
    {
        Parked,
        Slept,
        Spinning,
        None,
    }

    private enum Mode
    {
        FlushThenWorkersOnly, // ScheduleBatchedJobs, then nobody helps: the workers must wake up for it
        FlushAndComplete,
        NoFlushThenComplete, // Complete must flush by itself
        FromWorker, // scheduled inside Spindle.Run and flushed there; nobody helps
    }

    private sealed class Round
    {
        public int[] Hits = [];
        public int[][] IndexHits = [];
        public CountdownEvent Done = new(1);
        public Counter OutOfOrder = new();
        public Mode[] Modes = new Mode[Producers];
        public int[] Counts = new int[Producers];
        public Random[] Rngs = new Random[Producers];
    }

    private static void Produce(Round r, int producer)
    {
        Random rng = r.Rngs[producer];
        int count = r.Counts[producer];
        int baseSlot = producer * MaxJobsPerProducer;
        var handles = new JobHandle[count];
        for (int j = 0; j < count; j++)
        {
            int slot = baseSlot + j;
            if (rng.Next(8) == 0)
            {
                int length = rng.Next(1, 300);
                r.IndexHits[slot] = new int[length];
                handles[j] = new BurstForJob
                {
                    Hits = r.Hits,
                    Slot = slot,
                    Length = length,
                    IndexHits = r.IndexHits[slot],
                    Finished = new Counter(),
                    Done = r.Done,
                }.Schedule(length, rng.Next(1, 32), j > 0 && rng.Next(2) == 0 ? handles[j - 1] : default);
                continue;
            }
            int dep = j > 0 && rng.Next(2) == 0 ? rng.Next(j) : -1;
            JobHandle dependsOn = dep >= 0 ? handles[dep] : default;
            if (dep >= 0 && rng.Next(4) == 0)
            {
                dependsOn = JobHandle.CombineDependencies(dependsOn, handles[rng.Next(j)]);
            }
            handles[j] = new BurstJob
            {
                Hits = r.Hits,
                Slot = slot,
                DependsOnSlot = dep >= 0 ? baseSlot + dep : -1,
                OutOfOrder = r.OutOfOrder,
                Done = r.Done,
            }.Schedule(dependsOn);
        }

        switch (r.Modes[producer])
        {
            case Mode.FlushThenWorkersOnly:
                JobHandle.ScheduleBatchedJobs();
                break;
            case Mode.FlushAndComplete:
                JobHandle.ScheduleBatchedJobs();
                JobHandle.CombineDependencies(handles).Complete();
                break;
            case Mode.NoFlushThenComplete:
                foreach (JobHandle h in handles)
                {
                    h.Complete();
                }
                break;
        }
    }

    [Fact]
    public async Task BurstsAfterTheWorkersGoIdle_NothingLostNothingHangs()
    {
        int rounds = TestUtil.Stress(1_000);
        int seed = Environment.TickCount;
        var master = new Random(seed);
        var r = new Round();
        int parkedRounds = 0;

        void Before(int round)
        {
            // Let the workers go idle first, in one of several ways.
            switch ((Idle)(round % 4))
            {
                case Idle.Parked:
                    if (JobTestUtil.WaitForParkedWorkers(2_000))
                    {
                        parkedRounds++;
                    }
                    break;
                case Idle.Slept:
                    Thread.Sleep(1);
                    break;
                case Idle.Spinning:
                    Thread.SpinWait(master.Next(1, 2_000));
                    break;
            }
            int total = 0;
            bool allWorkersOnly = master.Next(3) == 0;
            for (int p = 0; p < Producers; p++)
            {
                r.Counts[p] = master.Next(1, MaxJobsPerProducer + 1);
                r.Modes[p] = allWorkersOnly ? Mode.FlushThenWorkersOnly : (Mode)master.Next(4);
                r.Rngs[p] = new Random(master.Next());
                total += r.Counts[p];
            }
            r.Hits = new int[Producers * MaxJobsPerProducer];
            r.IndexHits = new int[Producers * MaxJobsPerProducer][];
            r.Done = new CountdownEvent(total);
            r.OutOfOrder = new Counter();
        }

        void Racer(int producer, int round)
        {
            if (r.Modes[producer] == Mode.FromWorker)
            {
                Spindle.Run(() =>
                {
                    Produce(r, producer);
                    JobHandle.ScheduleBatchedJobs();
                }).GetAwaiter().GetResult();
                return;
            }
            Produce(r, producer);
        }

        void After(int round)
        {
            // Wait without helping and without flushing: every burst was flushed or completed by its producer.
            if (!r.Done.Wait(TimeSpan.FromSeconds(10)))
            {
                throw new TimeoutException(
                    $"round {round} (seed {seed}): {r.Done.CurrentCount} of {r.Done.InitialCount} jobs never ran; modes {string.Join(",", r.Modes)}; " +
                    $"idle workers {WorkerPool.Shared.IdleWorkers}/{WorkerPool.Shared.WorkerCount}: a lost wake-up? " +
                    $"Pool: {WorkerPool.Shared.Describe()}; unflushed batch empty: {JobBatch.IsEmpty}");
            }
            for (int p = 0; p < Producers; p++)
            {
                for (int j = 0; j < MaxJobsPerProducer; j++)
                {
                    int slot = p * MaxJobsPerProducer + j;
                    Assert.True(r.Hits[slot] == (j < r.Counts[p] ? 1 : 0), $"round {round} (seed {seed}): job {slot} ran {r.Hits[slot]} times");
                    if (r.IndexHits[slot] is { } indexHits)
                    {
                        Assert.All(indexHits, h => Assert.Equal(1, h));
                    }
                }
            }
            Assert.Equal(0, r.OutOfOrder.Read());
            // r.Done is left to the GC: the last job may still be returning from Signal.
        }

        var racers = new Action<int>[Producers];
        for (int p = 0; p < Producers; p++)
        {
            int me = p;
            racers[p] = round => Racer(me, round);
        }
        await TestUtil.WithTimeout(Race.Run(rounds, Before, After, racers), TestUtil.StressTimeout(120));
        Assert.True(parkedRounds > 0, "the workers never all parked between bursts");
    }
}

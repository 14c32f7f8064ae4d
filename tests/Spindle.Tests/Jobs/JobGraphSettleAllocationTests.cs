using System;
using System.Linq;
using System.Threading;

namespace SpindleLib.Tests.Jobs;

/// <summary>
/// A frame's job graph, scheduled on a plain thread (a game's main thread) and run by the shared workers, stops
/// allocating within a few hundred frames. Its nodes and edges are rented on the scheduling thread and returned on the
/// workers. Before, each worker kept up to 32 of each node type it never rents, and the scheduling thread, growing each
/// type's population one node per miss, missed until both workers' stacks happened to be nearly full at once, which
/// came ever more rarely: such a graph allocated for about 6,000 frames (docs/decisions.md sections 38 and 39). Counted
/// over a fixed number of frames, no timing: the scheduling thread's bytes, exactly (every rent happens there), and on
/// every thread, the objects the graph's pools made. Not all threads' bytes: the test host allocates 2-3 KB a second
/// on its own threads. The scheduling thread blocks for real in Complete() once before the frames: that first block
/// allocated its waiter until JobFirstBlockAllocationTests' change, and the block's waiter edge is one more than the
/// graph's own edges. A worker preempted while it gave nodes back under a pool's gate made the scheduling thread give up
/// on the gate and allocate one node now and then (200 B in 1 of 1,000 frames, 2 of 6 CI runs with both suites at once
/// on two cores): a job type's rent now waits for the gate (docs/decisions.md section 44). Run alone.
/// </summary>
[Collection(SequentialCollection.Name)]
public class JobGraphSettleAllocationTests
{
    private const int Length = 20_000;
    private const int Cells = 300;
    private const int WarmupFrames = 300;
    private const int MeasuredFrames = 1_000;

    private sealed class World
    {
        public readonly int[] Param = new int[2];
        public readonly int[] A = new int[Length];
        public readonly int[] B = new int[Length];
        public readonly int[] C = new int[Length];
        public readonly int[] Cell = new int[Cells];
        public readonly long[] Sums = new long[3];
    }

    private struct SetupJob : IJob
    {
        public int[] Param;
        public int Frame;

        public readonly void Execute()
        {
            Param[0] = Frame & 7;
            Param[1] = (Frame >> 3) & 3;
        }
    }

    private struct AddJob : IJobParallelFor
    {
        public int[] Values;
        public int[] Param;

        public readonly void Execute(int index) => Values[index] = (Values[index] + Param[0] + index) & 0xFFFFF;
    }

    private struct MixJob : IJobParallelFor
    {
        public int[] Values;
        public int[] Param;

        public readonly void Execute(int index) => Values[index] = (Values[index] * 3 + Param[1]) & 0xFFFFF;
    }

    private struct CellJob : IJobParallelFor
    {
        public int[] Cell;

        public readonly void Execute(int index) => Cell[index] += index & 3;
    }

    private struct DoubleBatchJob : IJobParallelForBatch
    {
        public int[] Values;
        public int[] From;

        public readonly void Execute(int startIndex, int count)
        {
            for (int i = startIndex; i < startIndex + count; i++)
            {
                Values[i] = ((Values[i] * 2) + From[i]) & 0xFFFFF;
            }
        }
    }

    private struct SumJob : IJob
    {
        public int[] Values;
        public long[] Sums;
        public int Slot;

        public readonly void Execute()
        {
            long sum = 0;
            foreach (int v in Values)
            {
                sum += v;
            }
            Sums[Slot] += sum;
        }
    }

    /// <summary>How many objects each pool the graph rents from has made so far, on any thread.</summary>
    private static int[] Made() =>
    [
        CirculatingPool<JobNode<SetupJob>>.Made,
        CirculatingPool<ParallelForNode<AddJob>>.Made,
        CirculatingPool<ParallelForNode<MixJob>>.Made,
        CirculatingPool<ParallelForNode<CellJob>>.Made,
        CirculatingPool<ParallelForBatchNode<DoubleBatchJob>>.Made,
        CirculatingPool<JobNode<SumJob>>.Made,
        CirculatingPool<CombineNode>.Made,
        CirculatingPool<JobNode.Edge>.Made,
    ];

    private static readonly JobHandle[] s_eight = new JobHandle[8];

    // Eleven node types of the test's own (so their pools start empty whatever ran before), combines of 2, 3 and a span
    // of 8, and parallel-fors at batch sizes 1, 64 and 1,024: one ScheduleBatchedJobs and one Complete a frame.
    private static void RunFrame(World w, int frame)
    {
        JobHandle setup = new SetupJob { Param = w.Param, Frame = frame }.Schedule();
        JobHandle add = new AddJob { Values = w.A, Param = w.Param }.Schedule(Length, 64, setup);
        JobHandle mix = new MixJob { Values = w.B, Param = w.Param }.Schedule(Length, 1_024, setup);
        JobHandle cells = new CellJob { Cell = w.Cell }.Schedule(Cells, 1);
        JobHandle both = JobHandle.CombineDependencies(add, mix);
        JobHandle dbl = new DoubleBatchJob { Values = w.C, From = w.A }.ScheduleBatch(Length, 2_048, both);
        JobHandle three = JobHandle.CombineDependencies(dbl, cells, mix);
        JobHandle sumA = new SumJob { Values = w.A, Sums = w.Sums, Slot = 0 }.Schedule(three);
        JobHandle sumB = new SumJob { Values = w.B, Sums = w.Sums, Slot = 1 }.Schedule(sumA);
        JobHandle sumC = new SumJob { Values = w.C, Sums = w.Sums, Slot = 2 }.Schedule(sumB);
        JobHandle[] e = s_eight;
        e[0] = setup;
        e[1] = add;
        e[2] = mix;
        e[3] = cells;
        e[4] = both;
        e[5] = dbl;
        e[6] = three;
        e[7] = sumC;
        JobHandle all = JobHandle.CombineDependencies(e);
        Array.Clear(e);
        JobHandle.ScheduleBatchedJobs();
        all.Complete();
    }

    /// <summary>The same frames, one job after another on this thread: the reference the graph must match.</summary>
    private static World RunAlone(int frames)
    {
        var w = new World();
        for (int f = 0; f < frames; f++)
        {
            new SetupJob { Param = w.Param, Frame = f }.Execute();
            var add = new AddJob { Values = w.A, Param = w.Param };
            var mix = new MixJob { Values = w.B, Param = w.Param };
            for (int i = 0; i < Length; i++)
            {
                add.Execute(i);
                mix.Execute(i);
            }
            var cells = new CellJob { Cell = w.Cell };
            for (int i = 0; i < Cells; i++)
            {
                cells.Execute(i);
            }
            new DoubleBatchJob { Values = w.C, From = w.A }.Execute(0, Length);
            for (int slot = 0; slot < 3; slot++)
            {
                new SumJob { Values = slot == 0 ? w.A : slot == 1 ? w.B : w.C, Sums = w.Sums, Slot = slot }.Execute();
            }
        }
        return w;
    }

    [Fact]
    public void AFramesJobGraph_OnAPlainThread_StopsAllocatingOnEveryThread_WithinAFewHundredFrames()
    {
        var world = new World();
        long mainBytes = -1, allBytes = -1;
        int[] madeBefore = [], madeAfter = [];
        int allocatingFrames = -1;
        Exception? failure = null;
        var main = new Thread(() =>
        {
            try
            {
                JobTestUtil.BlockInComplete();
                for (int f = 0; f < WarmupFrames; f++)
                {
                    RunFrame(world, f);
                }
                madeBefore = Made();
                long allStart = GC.GetTotalAllocatedBytes(precise: true);
                long start = GC.GetAllocatedBytesForCurrentThread();
                long before = start;
                int allocating = 0;
                for (int f = WarmupFrames; f < WarmupFrames + MeasuredFrames; f++)
                {
                    RunFrame(world, f);
                    long after = GC.GetAllocatedBytesForCurrentThread();
                    if (after != before)
                    {
                        allocating++;
                    }
                    before = after;
                }
                allBytes = GC.GetTotalAllocatedBytes(precise: true) - allStart;
                madeAfter = Made();
                mainBytes = before - start;
                allocatingFrames = allocating;
            }
            catch (Exception ex)
            {
                failure = ex;
            }
        })
        {
            Name = "game main thread",
            IsBackground = true,
        };
        main.Start();
        Assert.True(main.Join(TimeSpan.FromMinutes(2)), "the frames did not finish");
        Assert.Null(failure);

        // The graph did its work: the same frames run one job after another give the same arrays.
        World reference = RunAlone(WarmupFrames + MeasuredFrames);
        Assert.Equal(reference.A, world.A);
        Assert.Equal(reference.B, world.B);
        Assert.Equal(reference.C, world.C);
        Assert.Equal(reference.Cell, world.Cell);
        Assert.Equal(reference.Sums, world.Sums);

        // Every rent happens on the scheduling thread (the workers only run and return), so its count is exact. Before,
        // it allocated nodes in frame after frame here.
        Assert.True(
            mainBytes == 0,
            $"{allocatingFrames} of {MeasuredFrames} frames after {WarmupFrames} allocated ({mainBytes} bytes) on the scheduling thread ({allBytes} on all threads); " +
            $"objects the graph's pools made meanwhile, by type: [{string.Join(", ", madeAfter.Zip(madeBefore, (a, b) => a - b))}] " +
            "(all 0: the bytes were not the graph's nodes or edges)");
        // On every thread: none of the graph's pools made an object (a worker never rents one, but this says so).
        Assert.Equal(madeBefore, madeAfter);
    }
}

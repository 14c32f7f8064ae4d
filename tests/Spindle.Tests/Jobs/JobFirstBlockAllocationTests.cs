using System.Threading.Tasks;

namespace SpindleLib.Tests.Jobs;

/// <summary>
/// A thread's first real block in Complete() (parked, not only helping and spinning) allocated about 1.7 KB once: its
/// blocking waiter, that waiter pool's statics and the thread's pool slots for it, and the lazy parts of the waiter's
/// event (ManualResetEventSlim makes its lock at its first wait). A frame program whose job graph had stopped allocating
/// paid it at whatever frame its scheduling thread first really blocked (frame 463 in one run). A thread that waits for a
/// pending job now has its waiter before it can block, and the waiter's wait allocates nothing. Run alone: the blocked
/// thread would help with any queued job, and another test's job may allocate.
/// </summary>
[Collection(SequentialCollection.Name)]
public class JobFirstBlockAllocationTests
{
    private const int Frames = 200;

    private struct FillJob : IJobParallelFor
    {
        public int[] Values;

        public readonly void Execute(int index) => Values[index] = index;
    }

    private struct StepJob : IJob
    {
        public int[] Count;

        public readonly void Execute() => Count[0]++;
    }

    /// <summary>
    /// A small frame: a job, a parallel-for after it (one batch), a combine with another job, and a job after both. The
    /// jobs are tiny, so that the thread waits for them in Complete() but seldom blocks for real: a real block in the
    /// frames would pay, before the change, what the test then measures.
    /// </summary>
    private static void RunFrame(int[] values, int[] count)
    {
        JobHandle first = new StepJob { Count = count }.Schedule();
        JobHandle fill = new FillJob { Values = values }.Schedule(values.Length, values.Length, first);
        JobHandle other = new StepJob { Count = new int[1] }.Schedule();
        JobHandle last = new StepJob { Count = count }.Schedule(JobHandle.CombineDependencies(fill, other));
        JobHandle.ScheduleBatchedJobs();
        last.Complete();
    }

    [Fact]
    public async Task AThreadsFirstRealBlockInComplete_AfterItsFramesSettled_AllocatesNothing()
    {
        long firstBlock = -1, secondBlock = -1;
        int[] count = new int[1];
        await TestUtil.WithTimeout(TestUtil.RunOnThread(() =>
        {
            int[] values = new int[256];
            for (int f = 0; f < Frames; f++)
            {
                RunFrame(values, count);
            }
            firstBlock = JobTestUtil.BlockInComplete();
            secondBlock = JobTestUtil.BlockInComplete();
        }, "fresh scheduling thread"), 60);
        Assert.Equal(2 * Frames, count[0]);
        Assert.True(firstBlock == 0, $"the thread's first real block in Complete() allocated {firstBlock} bytes (the second {secondBlock})");
        Assert.Equal(0, secondBlock);
    }
}

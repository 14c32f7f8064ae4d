using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Jobs;

/// <summary>
/// A thread waiting in Complete() runs jobs, and they are not its own code: they run without its AsyncLocal values and
/// SynchronizationContext, and whatever they set does not stay on the thread when Complete() returns (the rule of
/// docs/decisions.md section 23, which a helped IJob already kept). A review found a parallel-for's batches, which the
/// waiting thread runs directly rather than as a queued item, breaking both halves. Run alone: it holds every worker.
/// </summary>
[Collection(SequentialCollection.Name)]
public class JobHelpingContextTests
{
    private static readonly AsyncLocal<int> s_local = new();

    private sealed class WaiterContext : SynchronizationContext
    {
    }

    private sealed class Seen
    {
        public int Runs;
        public int Local = -1;
        public SynchronizationContext? Sync;
        public int Thread;

        public void Record()
        {
            if (s_local.Value != 99) // 99 is what an earlier batch of the same job on this thread set
            {
                Local = s_local.Value;
            }
            Sync ??= SynchronizationContext.Current;
            Thread = Environment.CurrentManagedThreadId;
            Interlocked.Increment(ref Runs);
            s_local.Value = 99; // left behind: the waiting code must not find it
        }
    }

    private struct RecordingJob : IJob
    {
        public Seen Seen;

        public readonly void Execute() => Seen.Record();
    }

    private struct RecordingForJob : IJobParallelFor
    {
        public Seen Seen;

        public readonly void Execute(int index) => Seen.Record();
    }

    private struct RecordingBatchJob : IJobParallelForBatch
    {
        public Seen Seen;

        public readonly void Execute(int startIndex, int count) => Seen.Record();
    }

    public enum Kind
    {
        Job,
        ParallelFor,
        Batch,
    }

    [Theory]
    [InlineData(Kind.Job)]
    [InlineData(Kind.ParallelFor)]
    [InlineData(Kind.Batch)]
    public async Task JobRunByAThreadWaitingInComplete_RunsWithoutItsContext_AndLeavesItsOwnAsItWas(Kind kind)
    {
        await TestUtil.LeaveSpindleWorkers(); // HoldWorkers must be created off them (a test can start on one)
        using var hold = new HoldWorkers();
        var seen = new Seen();
        var waiterContext = new WaiterContext();
        int waiterThread = 0;
        int after = -1;
        SynchronizationContext? syncAfter = null;
        await TestUtil.WithTimeout(TestUtil.RunOnThread(() =>
        {
            waiterThread = Environment.CurrentManagedThreadId;
            SynchronizationContext.SetSynchronizationContext(waiterContext);
            s_local.Value = 7;
            JobHandle handle = kind switch
            {
                Kind.Job => new RecordingJob { Seen = seen }.Schedule(),
                Kind.ParallelFor => new RecordingForJob { Seen = seen }.Schedule(4, 1),
                _ => new RecordingBatchJob { Seen = seen }.ScheduleBatch(4, 1),
            };
            handle.Complete(); // every worker is held: this thread runs the job
            after = s_local.Value;
            syncAfter = SynchronizationContext.Current;
        }));
        Assert.Equal(waiterThread, seen.Thread);
        Assert.Equal(kind == Kind.Job ? 1 : 4, seen.Runs);
        Assert.True(after == 7, $"after Complete() the waiting code's AsyncLocal value was {after}, set by the {kind} it helped with");
        Assert.Same(waiterContext, syncAfter);
        Assert.True(seen.Local == 0, $"the {kind} saw the waiting code's AsyncLocal value ({seen.Local})");
        Assert.True(seen.Sync is null, $"the {kind} ran under the waiting code's {seen.Sync?.GetType().Name}");
    }
}

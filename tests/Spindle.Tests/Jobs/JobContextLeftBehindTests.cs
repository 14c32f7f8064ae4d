using System;
using System.Runtime.CompilerServices;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Jobs;

/// <summary>
/// A SynchronizationContext a job installs and leaves behind reaches neither the code that awaits the job (its finish
/// runs that code inline, on the thread that ran the job) nor a dependent job run on the same thread: it is taken down
/// before the finish, as a <c>Spindle.Run</c> delegate's is. The job waits at a gate until the awaiter or the dependent
/// is in place, so the order is fixed. (Found by Sources/ContextLeakStressTests.)
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class JobContextLeftBehindTests
{
    private sealed class LeftBehindContext : SynchronizationContext
    {
    }

    private sealed class Seen
    {
        public int Count;
        public SynchronizationContext? Sync;
        public string? Where;

        public void Record(string where)
        {
            Sync = SynchronizationContext.Current;
            Where = where;
            Interlocked.Increment(ref Count);
        }
    }

    private readonly struct InstallingJob(Flag go) : IJob
    {
        public void Execute()
        {
            Assert.True(go.Wait());
            SynchronizationContext.SetSynchronizationContext(new LeftBehindContext());
        }
    }

    private readonly struct InstallingForJob(Flag go) : IJobParallelFor
    {
        public void Execute(int index)
        {
            Assert.True(go.Wait());
            SynchronizationContext.SetSynchronizationContext(new LeftBehindContext());
        }
    }

    private readonly struct RecordingJob(Seen seen) : IJob
    {
        public void Execute() => seen.Record(TestUtil.OnSpindleWorker ? "a worker" : Thread.CurrentThread.Name ?? "a thread");
    }

    private static async SpindleTask Awaits(JobHandle handle, Seen seen)
    {
        await handle;
        seen.Record(TestUtil.OnSpindleWorker ? "a worker" : Thread.CurrentThread.Name ?? "a thread");
    }

    [Theory]
    [InlineData("awaited job")]
    [InlineData("awaited parallel-for")]
    [InlineData("dependent job")]
    public async Task JobThatLeavesAContextInstalled_NeitherItsAwaiterNorADependentFindsIt(string shape)
    {
        var go = new Flag();
        var seen = new Seen();
        JobHandle handle = shape == "awaited parallel-for"
            ? new InstallingForJob(go).Schedule(1, 1)
            : new InstallingJob(go).Schedule();
        JobHandle last = handle;
        SpindleTask awaiting = default;
        if (shape == "dependent job")
        {
            last = new RecordingJob(seen).Schedule(handle);
        }
        else
        {
            awaiting = Awaits(handle, seen); // registers on the handle: the job waits at its gate
        }
        JobHandle.ScheduleBatchedJobs();
        go.Set();
        if (shape == "dependent job")
        {
            await TestUtil.WithTimeout(TestUtil.RunOnThread(last.Complete));
        }
        else
        {
            await TestUtil.WithTimeout(awaiting);
        }
        Assert.Equal(1, seen.Count);
        Assert.True(seen.Sync is null, $"the {(shape == "dependent job" ? "dependent" : "awaiting code")} ran on {seen.Where} under {seen.Sync?.GetType().Name}");
    }

    private static readonly AsyncLocal<int> s_local = new();

    private readonly struct SettingJob(Flag go) : IJob
    {
        public void Execute()
        {
            Assert.True(go.Wait());
            s_local.Value = 99;
        }
    }

    private readonly struct ReadingJob(StrongBox<int> seen) : IJob
    {
        public void Execute() => seen.Value = s_local.Value;
    }

    /// <summary>
    /// Jobs carry no ExecutionContext (as Unity's): an AsyncLocal value one job sets is not seen by a dependent run after
    /// it on the same thread (a finishing job runs the dependent it made ready inline), as it is not by the next item a
    /// worker's loop runs.
    /// </summary>
    [NetBuildFact("netstandard2.1 cannot restore an ExecutionContext: a dependent run inline may see it (JobNode.RunChain)")]
    public async Task JobThatSetsAnAsyncLocal_ADependentRunAfterItDoesNotSeeIt()
    {
        var go = new Flag();
        var seen = new StrongBox<int>(-1);
        JobHandle first = new SettingJob(go).Schedule();
        JobHandle second = new ReadingJob(seen).Schedule(first);
        JobHandle.ScheduleBatchedJobs();
        go.Set();
        await TestUtil.WithTimeout(TestUtil.RunOnThread(second.Complete));
        Assert.Equal(0, seen.Value);
    }
}

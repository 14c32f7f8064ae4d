using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Threading;

/// <summary>
/// Spindle.Run, Yield and SwitchToWorker. Several tests check which thread code runs on; a thread of another test
/// that blocks in GetResult helps run queued work (see the skipped test below), so these run alone.
/// </summary>
[Collection(SequentialCollection.Name)]
public class SpindleRunTests
{
    [Fact]
    public async Task Run_Action_RunsOnASpindleWorker()
    {
        string? threadName = null;

        await TestUtil.WithTimeout(Spindle.Run(() => { threadName = Thread.CurrentThread.Name; }));

        Assert.NotNull(threadName);
        Assert.StartsWith("Spindle worker", threadName, StringComparison.Ordinal);
    }

    [Fact]
    public async Task Run_Func_ReturnsTheResultFromAWorker()
    {
        (int value, string? name) = await TestUtil.WithTimeout(Spindle.Run(() => (42, Thread.CurrentThread.Name)));

        Assert.Equal(42, value);
        Assert.StartsWith("Spindle worker", name, StringComparison.Ordinal);
    }

    [Fact]
    public async Task Run_AsyncFunc_StartsOnAWorkerAndCompletesWhenItsTaskDoes()
    {
        var promise = new Promise();
        bool startedOnWorker = false;

        SpindleTask task = Spindle.Run(async () =>
        {
            startedOnWorker = TestUtil.OnSpindleWorker;
            await promise.Task;
        });
        TestUtil.SpinUntil(() => Volatile.Read(ref startedOnWorker));
        Assert.Equal(SpindleTaskStatus.Pending, task.Status);
        promise.SetResult();

        await TestUtil.WithTimeout(task);
        Assert.True(startedOnWorker);
    }

    [Fact]
    public async Task Run_AsyncFuncOfT_ReturnsTheResult()
    {
        int result = await TestUtil.WithTimeout(Spindle.Run(async () =>
        {
            Assert.True(TestUtil.OnSpindleWorker);
            await Spindle.Yield();
            return 7;
        }));

        Assert.Equal(7, result);
    }

    [Fact]
    public async Task Run_ActionThrows_ExceptionSurfacesAtAwait()
    {
        var error = new InvalidTimeZoneException("in action");

        SpindleTask task = Spindle.Run(new Action(() => throw error));

        Assert.Same(error, await Assert.ThrowsAsync<InvalidTimeZoneException>(() => TestUtil.WithTimeout(task)));
    }

    [Fact]
    public async Task Run_FuncThrows_ExceptionSurfacesAtAwait()
    {
        var error = new InvalidTimeZoneException("in func");

        SpindleTask<int> task = Spindle.Run(new Func<int>(() => throw error));

        Assert.Same(error, await Assert.ThrowsAsync<InvalidTimeZoneException>(() => TestUtil.WithTimeout(task)));
    }

    [Fact]
    public async Task Run_AsyncFuncThrowsSynchronouslyOrAfterAwait_ExceptionSurfacesAtAwait()
    {
        var error = new InvalidTimeZoneException("in async func");

        SpindleTask throwsAtOnce = Spindle.Run(new Func<SpindleTask>(() => throw error));
        SpindleTask<int> throwsLater = Spindle.Run(new Func<SpindleTask<int>>(async () =>
        {
            await Spindle.Yield();
            throw error;
        }));

        Assert.Same(error, await Assert.ThrowsAsync<InvalidTimeZoneException>(() => TestUtil.WithTimeout(throwsAtOnce)));
        Assert.Same(error, await Assert.ThrowsAsync<InvalidTimeZoneException>(() => TestUtil.WithTimeout(throwsLater)));
    }

    [Fact]
    public async Task Run_DelegateThrowsOperationCanceled_TaskIsCanceled()
    {
        using var cts = new CancellationTokenSource();
        cts.Cancel();

        SpindleTask task = Spindle.Run(() => cts.Token.ThrowIfCancellationRequested());

        var oce = await Assert.ThrowsAnyAsync<OperationCanceledException>(() => TestUtil.WithTimeout(task));
        Assert.Equal(cts.Token, oce.CancellationToken);
    }

    [Fact]
    public void Run_NullDelegate_ThrowsArgumentNullImmediately()
    {
        Assert.Equal("action", Assert.Throws<ArgumentNullException>(() => Spindle.Run((Action)null!)).ParamName);
        Assert.Equal("function", Assert.Throws<ArgumentNullException>(() => Spindle.Run((Func<int>)null!)).ParamName);
        Assert.Equal("function", Assert.Throws<ArgumentNullException>(() => Spindle.Run((Func<SpindleTask>)null!)).ParamName);
        Assert.Equal("function", Assert.Throws<ArgumentNullException>(() => Spindle.Run((Func<SpindleTask<int>>)null!)).ParamName);
    }

    private static async SpindleTask<(bool IsCompletedBefore, bool OnWorker, int Before, int After)> YieldOnWorker()
    {
        await Spindle.SwitchToWorker();
        int before = Environment.CurrentManagedThreadId;
        bool completed = Spindle.Yield().GetAwaiter().IsCompleted;
        await Spindle.Yield();
        return (completed, TestUtil.OnSpindleWorker, before, Environment.CurrentManagedThreadId);
    }

    [Fact]
    public async Task Yield_FromAWorker_StillGoesThroughTheQueueAndResumesOnAWorker()
    {
        var (isCompletedBefore, onWorker, _, _) = await TestUtil.WithTimeout(YieldOnWorker());

        Assert.False(isCompletedBefore);
        Assert.True(onWorker);
    }

    private static async SpindleTask<bool> YieldFromHere()
    {
        await Spindle.Yield();
        return TestUtil.OnSpindleWorker;
    }

    [Fact]
    public async Task Yield_FromANonWorkerThread_ResumesOnAWorker()
    {
        Assert.False(Spindle.Yield().GetAwaiter().IsCompleted);

        Assert.True(await TestUtil.WithTimeout(YieldFromHere()));
    }

    [Fact]
    public async Task Yield_AwaitedFromABclAsyncMethod_ResumesOnAWorker()
    {
        async Task<bool> Bcl()
        {
            await Spindle.Yield();
            return TestUtil.OnSpindleWorker;
        }

        Assert.True(await TestUtil.WithTimeout(Bcl()));
    }

    private static async SpindleTask<(bool CompletedAtOnce, int Before, int After)> SwitchTwice()
    {
        await Spindle.SwitchToWorker();
        int before = Environment.CurrentManagedThreadId;
        bool completedAtOnce = Spindle.SwitchToWorker().GetAwaiter().IsCompleted;
        await Spindle.SwitchToWorker();
        return (completedAtOnce, before, Environment.CurrentManagedThreadId);
    }

    [Fact]
    public async Task SwitchToWorker_AlreadyOnAWorker_CompletesSynchronouslyOnTheSameThread()
    {
        var (completedAtOnce, before, after) = await TestUtil.WithTimeout(SwitchTwice());

        Assert.True(completedAtOnce);
        Assert.Equal(before, after);
    }

    private static async SpindleTask<bool> SwitchFromHere()
    {
        await Spindle.SwitchToWorker();
        return TestUtil.OnSpindleWorker;
    }

    [Fact]
    public async Task SwitchToWorker_FromANonWorkerThread_MovesToAWorker()
    {
        Assert.False(Spindle.SwitchToWorker().GetAwaiter().IsCompleted);

        Assert.True(await TestUtil.WithTimeout(SwitchFromHere()));
    }

    [Fact]
    public void WorkerAwaiter_NullContinuation_ThrowsArgumentNull()
    {
        Assert.Throws<ArgumentNullException>(() => Spindle.Yield().GetAwaiter().OnCompleted(null!));
        Assert.Throws<ArgumentNullException>(() => Spindle.Yield().GetAwaiter().UnsafeOnCompleted(null!));
    }

    [Fact]
    public async Task WorkerAwaiter_OnCompleted_RunsTheContinuationOnAWorker()
    {
        var done = new TaskCompletionSource<bool>(TaskCreationOptions.RunContinuationsAsynchronously);

        Spindle.Yield().GetAwaiter().OnCompleted(() => done.SetResult(TestUtil.OnSpindleWorker));

        Assert.True(await TestUtil.WithTimeout(done.Task));
    }

    [Fact]
    public async Task Run_SequentialRunsFromOneThread_ReuseThePooledItem()
    {
        SpindleTask<int> first = Spindle.Run(() => 1);
        ISpindleSource item = first._source!;
        TestUtil.SpinUntil(() => first.IsCompleted);
        Assert.Equal(1, first.GetAwaiter().GetResult());

        SpindleTask<int> second = Spindle.Run(() => 2);

        // Read on this thread, the item went back to this thread's pool slot and was rented again.
        Assert.Same(item, second._source);
        Assert.Equal(2, await TestUtil.WithTimeout(second));
        Assert.Throws<InvalidOperationException>(() => first.GetAwaiter().GetResult());
    }

    [Fact]
    public async Task Run_WhileAnotherThreadBlocksInGetResult_DelegateStillRunsOnAWorker()
    {
        await TestUtil.LeaveSpindleWorkers(); // HoldWorkers must be created off them (a test can start on one)
        var busy = new HoldWorkers();
        // Every worker is now busy.

        string? ranOn = null;
        SpindleTask probe = Spindle.Run(() => { ranOn = Thread.CurrentThread.Name; }); // queued while every worker is busy

        // A user thread now blocks on an unrelated pending task. It may look for work to help with, but once it
        // sleeps it has stopped looking; the probe is not its work and must still be waiting for a worker.
        var never = new Promise();
        var blocked = new Thread(() => never.Task.GetAwaiter().GetResult()) { IsBackground = true, Name = "user thread blocked in GetResult" };
        blocked.Start();
        TestUtil.SpinUntil(() => (blocked.ThreadState & ThreadState.WaitSleepJoin) != 0);
        string? ranWhileWorkersBusy = Volatile.Read(ref ranOn);
        busy.Dispose();
        never.SetResult();
        await TestUtil.WithTimeout(Task.Run(() => blocked.Join()));
        await TestUtil.WithTimeout(probe);

        Assert.True(ranWhileWorkersBusy is null, "the probe ran on '" + ranWhileWorkersBusy + "' while every worker was busy");
        Assert.StartsWith("Spindle worker", ranOn, StringComparison.Ordinal);
    }
}

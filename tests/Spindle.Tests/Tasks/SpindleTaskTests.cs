using System;
using System.Reflection;
using System.Runtime.CompilerServices;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Tasks;

public class SpindleTaskTests
{
    [Fact]
    public async Task Default_SpindleTask_IsCompletedAndAwaitableManyTimes()
    {
        SpindleTask task = default;

        Assert.True(task.IsCompleted);
        Assert.Equal(SpindleTaskStatus.Succeeded, task.Status);
        task.GetAwaiter().GetResult();
        task.GetAwaiter().GetResult();
        await task;
        await task;
        Assert.Equal(SpindleTaskStatus.Succeeded, SpindleTask.CompletedTask.Status);
        Assert.Null(SpindleTask.CompletedTask._source);
    }

    [Fact]
    public async Task Default_SpindleTaskOfT_IsCompletedWithDefaultValue()
    {
        SpindleTask<string?> task = default;

        Assert.True(task.IsCompleted);
        Assert.Null(task.GetAwaiter().GetResult());
        Assert.Null(await task);
    }

    [Fact]
    public async Task FromResult_AnyValue_CompletedWithoutSourceAndAwaitableManyTimes()
    {
        SpindleTask<int> task = SpindleTask.FromResult(17);

        Assert.Null(task._source);
        Assert.Equal(SpindleTaskStatus.Succeeded, task.Status);
        Assert.Equal(17, task.GetAwaiter().GetResult());
        Assert.Equal(17, await task);
        Assert.Equal(17, await task);
        Assert.Equal(17, await task.AsTask());
        Assert.Equal(17, await task.AsValueTask());
        Assert.Null(task.AsSpindleTask()._source);
    }

    [Fact]
    public async Task FromException_AnyException_FaultedAndEveryAwaitThrowsTheSameObject()
    {
        var error = new InvalidTimeZoneException("from exception");
        SpindleTask task = SpindleTask.FromException(error);
        SpindleTask<int> typed = SpindleTask.FromException<int>(error);

        Assert.Equal(SpindleTaskStatus.Faulted, task.Status);
        Assert.Equal(SpindleTaskStatus.Faulted, typed.Status);
        Assert.Same(error, await Assert.ThrowsAsync<InvalidTimeZoneException>(async () => await task));
        Assert.Same(error, await Assert.ThrowsAsync<InvalidTimeZoneException>(async () => await task));
        Assert.Same(error, Assert.Throws<InvalidTimeZoneException>(() => typed.GetAwaiter().GetResult()));
        Assert.Same(error, await Assert.ThrowsAsync<InvalidTimeZoneException>(async () => await typed));
        Assert.Same(error, await Assert.ThrowsAsync<InvalidTimeZoneException>(() => task.AsTask()));
        Assert.Same(error, await Assert.ThrowsAsync<InvalidTimeZoneException>(() => typed.AsTask()));
        Assert.Same(error, await Assert.ThrowsAsync<InvalidTimeZoneException>(async () => await typed.AsValueTask()));
    }

    [Fact]
    public void FromException_NullException_ThrowsArgumentNull()
    {
        Assert.Equal("exception", Assert.Throws<ArgumentNullException>(() => SpindleTask.FromException(null!)).ParamName);
        Assert.Equal("exception", Assert.Throws<ArgumentNullException>(() => SpindleTask.FromException<int>(null!)).ParamName);
    }

    [Fact]
    public async Task FromCanceled_WithToken_CanceledAndAwaitThrowsCarryingTheToken()
    {
        using var cts = new CancellationTokenSource();
        cts.Cancel();
        SpindleTask task = SpindleTask.FromCanceled(cts.Token);
        SpindleTask<int> typed = SpindleTask.FromCanceled<int>(cts.Token);

        Assert.Equal(SpindleTaskStatus.Canceled, task.Status);
        Assert.Equal(SpindleTaskStatus.Canceled, typed.Status);
        Assert.Equal(cts.Token, (await Assert.ThrowsAnyAsync<OperationCanceledException>(async () => await task)).CancellationToken);
        Assert.Equal(cts.Token, (await Assert.ThrowsAnyAsync<OperationCanceledException>(async () => await typed)).CancellationToken);
        Task asTask = task.AsTask();
        Assert.True(asTask.IsCanceled);
        Assert.True(typed.AsTask().IsCanceled);
    }

    [Fact]
    public void Constructor_NullSource_ThrowsArgumentNull()
    {
        Assert.Equal("source", Assert.Throws<ArgumentNullException>(() => new SpindleTask(null!, 0)).ParamName);
        Assert.Equal("source", Assert.Throws<ArgumentNullException>(() => new SpindleTask<int>((ISpindleSource<int>)null!, 0)).ParamName);
    }

    [Fact]
    public async Task AsValueTask_PendingPromise_WrapsTheSameSourceAndCompletesWithIt()
    {
        var promise = new Promise<int>();
        ValueTask<int> valueTask = promise.Task.AsValueTask();
        ValueTask implicitVoid = promise.Task.AsSpindleTask(); // implicit SpindleTask -> ValueTask

        // No wrapper object: the ValueTask holds the promise itself (ValueTask's private _obj field).
        Assert.Same(promise, typeof(ValueTask<int>).GetField("_obj", BindingFlags.NonPublic | BindingFlags.Instance)!.GetValue(valueTask));
        Assert.Same(promise, typeof(ValueTask).GetField("_obj", BindingFlags.NonPublic | BindingFlags.Instance)!.GetValue(implicitVoid));
        Assert.False(valueTask.IsCompleted);
        Assert.False(implicitVoid.IsCompleted);
        Task<int> awaiting = Await(valueTask);
        promise.SetResult(23);

        Assert.Equal(23, await TestUtil.WithTimeout(awaiting));
        Assert.True(implicitVoid.IsCompletedSuccessfully);

        static async Task<int> Await(ValueTask<int> vt) => await vt;
    }

    [Fact]
    public async Task AsTask_AlreadySucceeded_ReturnsCompletedTask()
    {
        var promise = new Promise<int>();
        promise.SetResult(5);
        var voidPromise = new Promise();
        voidPromise.SetResult();

        Task<int> typed = promise.Task.AsTask();
        Task untyped = voidPromise.Task.AsTask();

        Assert.True(typed.IsCompletedSuccessfully);
        Assert.Equal(5, await typed);
        Assert.True(untyped.IsCompletedSuccessfully);
        Assert.Same(Task.CompletedTask, default(SpindleTask).AsTask());
    }

    [Fact]
    public void ImplicitConversion_TypedToVoid_SharesSourceAndToken()
    {
        var promise = new Promise<int>();
        SpindleTask<int> typed = promise.Task;

        SpindleTask untyped = typed;

        Assert.Same(typed._source, untyped._source);
        Assert.Equal(typed._token, untyped._token);
        promise.SetResult(1);
        untyped.GetAwaiter().GetResult();
    }


    [Fact]
    public void AsyncMethod_CompletesSynchronously_TaskIsCompletedWithoutABox()
    {
        SpindleTask task = TestUtil.CompletesSynchronously(1);
        SpindleTask<int> typed = TestUtil.CompletesSynchronouslyWithValue(41);

        Assert.Null(task._source);
        Assert.Null(typed._source);
        Assert.True(task.IsCompleted);
        Assert.Equal(42, typed.GetAwaiter().GetResult());
    }

    private static async SpindleTask<int> ThrowsBeforeFirstAwait(Exception error, Promise<int> neverAwaited)
    {
        if (error is not null)
        {
            throw error;
        }
        return await neverAwaited.Task;
    }

    private static async SpindleTask ThrowsBeforeFirstAwaitVoid(Exception error, Promise neverAwaited)
    {
        if (error is not null)
        {
            throw error;
        }
        await neverAwaited.Task;
    }

    [Fact]
    public async Task AsyncMethod_ThrowsBeforeFirstAwait_TaskFaultedWithTheOriginalException()
    {
        var error = new InvalidTimeZoneException("sync fault");

        SpindleTask<int> typed = ThrowsBeforeFirstAwait(error, new Promise<int>());
        SpindleTask untyped = ThrowsBeforeFirstAwaitVoid(error, new Promise());

        Assert.Equal(SpindleTaskStatus.Faulted, typed.Status);
        Assert.Equal(SpindleTaskStatus.Faulted, untyped.Status);
        Assert.Same(error, await Assert.ThrowsAsync<InvalidTimeZoneException>(() => TestUtil.WithTimeout(typed)));
        Assert.Same(error, await Assert.ThrowsAsync<InvalidTimeZoneException>(() => TestUtil.WithTimeout(untyped)));
    }

    [Fact]
    public async Task AsyncMethod_ThrowsOperationCanceledBeforeFirstAwait_TaskCanceled()
    {
        using var cts = new CancellationTokenSource();
        cts.Cancel();

        SpindleTask<int> task = ThrowsBeforeFirstAwait(new OperationCanceledException(cts.Token), new Promise<int>());

        Assert.Equal(SpindleTaskStatus.Canceled, task.Status);
        var thrown = await Assert.ThrowsAnyAsync<OperationCanceledException>(() => TestUtil.WithTimeout(task));
        Assert.Equal(cts.Token, thrown.CancellationToken);
    }

    private static async SpindleTask<int> AwaitsBclTasks(Task<int> fromOtherThread)
    {
        int total = await Task.Run(() => 1);
        total += await new ValueTask<int>(2);
        total += await fromOtherThread;
        total += await new ValueTask<int>(fromOtherThread);
        await Task.Delay(1);
        await Task.Yield();
        total += await Task.Run(() => 3).ConfigureAwait(false);
        await new ValueTask(Task.CompletedTask);
        return total;
    }

    [Fact]
    public async Task AsyncMethod_AwaitsTaskAndValueTask_ResumesWithTheirResults()
    {
        var tcs = new TaskCompletionSource<int>(TaskCreationOptions.RunContinuationsAsynchronously);

        SpindleTask<int> task = AwaitsBclTasks(tcs.Task);
        _ = Task.Run(() => tcs.SetResult(10));

        Assert.Equal(1 + 2 + 10 + 10 + 3, await TestUtil.WithTimeout(task));
    }

    private static async SpindleTask AwaitsFaultedTask(Task faulted) => await faulted;

    [Fact]
    public async Task AsyncMethod_AwaitsFaultedTask_PropagatesTheOriginalException()
    {
        var error = new InvalidTimeZoneException("bcl fault");
        var tcs = new TaskCompletionSource();

        SpindleTask task = AwaitsFaultedTask(tcs.Task);
        tcs.SetException(error);

        Assert.Same(error, await Assert.ThrowsAsync<InvalidTimeZoneException>(() => TestUtil.WithTimeout(task)));
    }

    /// <summary>An awaiter that offers only INotifyCompletion, so the builder takes its AwaitOnCompleted path.</summary>
    private readonly struct NonCriticalAwaitable
    {
        private readonly Task<int> _task;

        public NonCriticalAwaitable(Task<int> task) => _task = task;

        public Awaiter GetAwaiter() => new(_task);

        public readonly struct Awaiter : INotifyCompletion
        {
            private readonly Task<int> _task;

            public Awaiter(Task<int> task) => _task = task;

            public bool IsCompleted => _task.IsCompleted;

            public int GetResult() => _task.GetAwaiter().GetResult();

            public void OnCompleted(Action continuation) => _task.GetAwaiter().OnCompleted(continuation);
        }
    }

    private static async SpindleTask<int> AwaitsNonCritical(Task<int> task) => await new NonCriticalAwaitable(task) + 1;

    [Fact]
    public async Task AsyncMethod_AwaitsNonCriticalAwaiter_ResumesWithResult()
    {
        var tcs = new TaskCompletionSource<int>(TaskCreationOptions.RunContinuationsAsynchronously);

        SpindleTask<int> task = AwaitsNonCritical(tcs.Task);
        Assert.Equal(SpindleTaskStatus.Pending, task.Status);
        tcs.SetResult(41);

        Assert.Equal(42, await TestUtil.WithTimeout(task));
    }

    private static async Task<int> BclMethodAwaitingSpindle(SpindleTask<int> inner) => await inner + 1;

    [Fact]
    public async Task AsyncTaskMethod_AwaitsPendingSpindleTask_GetsTheResult()
    {
        var promise = new Promise<int>();

        Task<int> bcl = BclMethodAwaitingSpindle(AsyncMethodBoxOf(promise));
        Assert.False(bcl.IsCompleted);
        promise.SetResult(1);

        Assert.Equal(2, await TestUtil.WithTimeout(bcl));
    }

    private static async SpindleTask<int> AsyncMethodBoxOf(Promise<int> promise) => await promise.Task;

    private static async SpindleTask<int> Awaits(SpindleTask<int> task) => await task;

    [Fact]
    public async Task Await_PendingPooledTaskFromTwoAsyncMethods_SecondFaultsNamingPreserveAndFirstCompletes()
    {
        var promise = new Promise<int>();
        SpindleTask<int> pooled = AsyncMethodBoxOf(promise);

        SpindleTask<int> first = Awaits(pooled);
        SpindleTask<int> second = Awaits(pooled);

        var ex = await Assert.ThrowsAsync<InvalidOperationException>(() => TestUtil.WithTimeout(second));
        Assert.Contains("Preserve()", ex.Message, StringComparison.Ordinal);
        Assert.Equal(SpindleTaskStatus.Pending, first.Status);
        promise.SetResult(31);
        Assert.Equal(31, await TestUtil.WithTimeout(first));
    }

    [Fact]
    public void Await_CompletedPooledTaskTwice_SecondThrowsAndAFreshTaskFromThePoolStillWorks()
    {
        var promise = new Promise<int>();
        SpindleTask<int> pooled = AsyncMethodBoxOf(promise);
        promise.SetResult(1);
        Assert.Equal(1, pooled.GetAwaiter().GetResult());

        var ex = Assert.Throws<InvalidOperationException>(() => pooled.GetAwaiter().GetResult());
        Assert.Contains("Preserve()", ex.Message, StringComparison.Ordinal);
        Assert.Throws<InvalidOperationException>(() => pooled.GetAwaiter().GetResult());

        // The box went back to this thread's pool slot; the next call of the method rents it again and works.
        var nextPromise = new Promise<int>();
        SpindleTask<int> fresh = AsyncMethodBoxOf(nextPromise);
        Assert.Same(pooled._source, fresh._source);
        Assert.Equal(SpindleTaskStatus.Pending, fresh.Status);
        Assert.Throws<InvalidOperationException>(() => pooled.GetAwaiter().GetResult());
        nextPromise.SetResult(2);
        Assert.Equal(2, fresh.GetAwaiter().GetResult());
    }

    [Fact]
    public async Task GetResult_OnWorkerWaitingForItsOwnNestedRun_HelpsAndCompletes()
    {
        // The nested item lands in the blocked worker's own run-next slot; only helping can run it promptly.
        int result = await TestUtil.WithTimeout(Spindle.Run(() => Spindle.Run(() => 42).GetAwaiter().GetResult()));

        Assert.Equal(42, result);
    }

    [Fact]
    public async Task GetResult_EveryWorkerBlockedOnNestedWork_AllComplete()
    {
        int outer = Environment.ProcessorCount * 4;
        var tasks = new SpindleTask<int>[outer];

        for (int i = 0; i < outer; i++)
        {
            int n = i;
            tasks[i] = Spindle.Run(() =>
            {
                SpindleTask<int> a = Spindle.Run(() => n);
                SpindleTask<int> b = Spindle.Run(() => n * 10);
                return a.GetAwaiter().GetResult() + b.GetAwaiter().GetResult();
            });
        }

        for (int i = 0; i < outer; i++)
        {
            Assert.Equal(i * 11, await TestUtil.WithTimeout(tasks[i]));
        }
    }
}

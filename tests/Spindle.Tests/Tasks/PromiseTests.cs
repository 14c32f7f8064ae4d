using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Tasks;

public class PromiseTests
{
    [Fact]
    public void TrySet_AlreadyCompleted_ReturnsFalseAndKeepsTheFirstOutcome()
    {
        var promise = new Promise<int>();

        Assert.True(promise.TrySetResult(1));
        Assert.False(promise.TrySetResult(2));
        Assert.False(promise.TrySetException(new InvalidTimeZoneException()));
        Assert.False(promise.TrySetCanceled());

        Assert.True(promise.IsCompleted);
        Assert.Equal(1, promise.Task.GetAwaiter().GetResult());
    }

    [Fact]
    public void TrySet_VoidPromiseAlreadyCompleted_ReturnsFalseAndKeepsTheFirstOutcome()
    {
        var promise = new Promise();
        var error = new InvalidTimeZoneException();

        Assert.True(promise.TrySetException(error));
        Assert.False(promise.TrySetResult());
        Assert.False(promise.TrySetException(new InvalidTimeZoneException()));
        Assert.False(promise.TrySetCanceled());

        Assert.Same(error, Assert.Throws<InvalidTimeZoneException>(() => promise.Task.GetAwaiter().GetResult()));
    }

    [Fact]
    public void Set_AlreadyCompleted_ThrowsInvalidOperation()
    {
        var typed = new Promise<int>();
        typed.SetResult(1);
        var untyped = new Promise();
        untyped.SetCanceled();

        Assert.Throws<InvalidOperationException>(() => typed.SetResult(2));
        Assert.Throws<InvalidOperationException>(() => typed.SetException(new InvalidTimeZoneException()));
        Assert.Throws<InvalidOperationException>(() => typed.SetCanceled());
        Assert.Throws<InvalidOperationException>(() => untyped.SetResult());
        Assert.Throws<InvalidOperationException>(() => untyped.SetException(new InvalidTimeZoneException()));
        Assert.Throws<InvalidOperationException>(() => untyped.SetCanceled());
        Assert.Equal(1, typed.Task.GetAwaiter().GetResult());
        Assert.Equal(SpindleTaskStatus.Canceled, untyped.Task.Status);
    }

    [Fact]
    public void SetException_NullException_ThrowsArgumentNull()
    {
        Assert.Throws<ArgumentNullException>(() => new Promise().TrySetException(null!));
        Assert.Throws<ArgumentNullException>(() => new Promise().SetException(null!));
        Assert.Throws<ArgumentNullException>(() => new Promise<int>().TrySetException(null!));
        Assert.Throws<ArgumentNullException>(() => new Promise<int>().SetException(null!));
    }

    [Fact]
    public void SetCanceled_WithoutToken_StatusCanceledAndAwaitThrowsOperationCanceled()
    {
        var promise = new Promise<int>();

        promise.SetCanceled();

        Assert.Equal(SpindleTaskStatus.Canceled, promise.Task.Status);
        Assert.ThrowsAny<OperationCanceledException>(() => promise.Task.GetAwaiter().GetResult());
    }

    [Fact]
    public void SetException_WithACancellationTypeException_IsCanceled_AsThePooledValueTaskCoreHasIt()
    {
        // The documented rule (Promise.SetException's remarks) is the BCL's ManualResetValueTaskSourceCore's.
        var exception = new OperationCanceledException("forwarded");
        var core = new System.Threading.Tasks.Sources.ManualResetValueTaskSourceCore<int>();
        core.SetException(exception);
        var promise = new Promise<int>();

        promise.SetException(exception);

        Assert.Equal(System.Threading.Tasks.Sources.ValueTaskSourceStatus.Canceled, core.GetStatus(core.Version));
        Assert.Equal(SpindleTaskStatus.Canceled, promise.Task.Status);
        Assert.Same(exception, Assert.ThrowsAny<OperationCanceledException>(() => promise.Task.GetAwaiter().GetResult()));
        var wrapped = new Promise();
        wrapped.SetException(new InvalidOperationException("forwarded as a failure", exception));
        Assert.Equal(SpindleTaskStatus.Faulted, wrapped.Task.Status);
    }

    [Fact]
    public void Reset_AfterCompletion_PendingAgainAndThePreviousTaskIsStale()
    {
        var promise = new Promise<int>();
        SpindleTask<int> first = promise.Task;
        promise.SetResult(1);
        Assert.Equal(1, first.GetAwaiter().GetResult());

        promise.Reset();

        Assert.False(promise.IsCompleted);
        Assert.Equal(SpindleTaskStatus.Pending, promise.Task.Status);
        Assert.Throws<InvalidOperationException>(() => first.Status);
        Assert.Throws<InvalidOperationException>(() => first.GetAwaiter().GetResult());
        Assert.Throws<InvalidOperationException>(() => first.GetAwaiter().UnsafeOnCompleted(() => { }));
        Assert.True(promise.TrySetResult(2));
        Assert.Equal(2, promise.Task.GetAwaiter().GetResult());
        Assert.Throws<InvalidOperationException>(() => first.GetAwaiter().GetResult());
    }

    [Fact]
    public void Reset_WhileNotYetCompletedAndNotAwaited_StartsANewUse()
    {
        var promise = new Promise();
        SpindleTask abandoned = promise.Task;

        promise.Reset();

        Assert.Throws<InvalidOperationException>(() => abandoned.Status);
        promise.SetResult();
        promise.Task.GetAwaiter().GetResult();
    }

    [Fact]
    public void Reset_WhileAnAwaitIsPending_ThrowsAndLeavesTheAwaitIntact()
    {
        var promise = new Promise<int>();
        int runs = 0;
        SpindleTask<int> task = promise.Task;
        task.GetAwaiter().UnsafeOnCompleted(() => runs++);

        InvalidOperationException e = Assert.Throws<InvalidOperationException>(() => promise.Reset());
        // It said "The source cannot be reset while an await on it is still pending": no promise, and no way out.
        Assert.Contains("promise cannot be reset", e.Message, StringComparison.Ordinal);
        Assert.Contains("Complete the use first", e.Message, StringComparison.Ordinal);
        Assert.Contains("use a new promise", e.Message, StringComparison.Ordinal);

        Assert.Equal(SpindleTaskStatus.Pending, task.Status);
        promise.SetResult(3);
        Assert.Equal(1, runs);
        Assert.Equal(3, task.GetAwaiter().GetResult());
    }

    [Fact]
    public void Task_CompletedAndReadManyTimes_ReturnsTheResultUntilReset()
    {
        var promise = new Promise<string>();
        promise.SetResult("a");

        for (int i = 0; i < 3; i++)
        {
            Assert.Equal("a", promise.Task.GetAwaiter().GetResult());
        }
    }

    [Fact]
    public async Task Task_ManyResetCycles_TokensStayDistinctAcrossTheShortWraparound()
    {
        // The version token is a short: run past 65,536 uses and check a stale task from the start is still stale
        // until its exact token comes round again.
        var promise = new Promise<int>();
        SpindleTask<int> first = promise.Task;
        promise.SetResult(-1);
        first.GetAwaiter().GetResult();

        for (int i = 0; i < 70_000; i++)
        {
            promise.Reset();
            SpindleTask<int> task = promise.Task;
            if (task._token != first._token)
            {
                Assert.Throws<InvalidOperationException>(() => first.Status);
            }
            promise.SetResult(i);
            Assert.Equal(i, task.GetAwaiter().GetResult());
        }
        promise.Reset();
        Task<int> awaiting = TestUtil.AwaitAsync(promise.Task);
        promise.SetResult(5);
        Assert.Equal(5, await TestUtil.WithTimeout(awaiting));
    }

    [Fact]
    public async Task SetResult_FromAnotherThread_ResumesTheAwaiter()
    {
        var promise = new Promise<int>();
        Task<int> awaiting = TestUtil.AwaitAsync(promise.Task);

        await TestUtil.WithTimeout(TestUtil.RunOnThread(() => promise.SetResult(99)));

        Assert.Equal(99, await TestUtil.WithTimeout(awaiting));
    }
}

using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// <see cref="SpindleTask.IsCompletedSuccessfully"/>, <see cref="SpindleTask.IsFaulted"/> and
/// <see cref="SpindleTask.IsCanceled"/> (and the typed task's) read what <see cref="Task"/>'s properties of the same names
/// read for the same outcome, follow <see cref="SpindleTask.Status"/>'s version-token rules (a consumed or stale task
/// throws the await-once error), and do not consume the task.
/// </summary>
public class TaskStatusPropertiesTests
{
    public enum Outcome { Pending, Succeeded, Faulted, Canceled }

    private static (bool Completed, bool Succeeded, bool Faulted, bool Canceled) Flags(SpindleTask t)
        => (t.IsCompleted, t.IsCompletedSuccessfully, t.IsFaulted, t.IsCanceled);

    private static (bool Completed, bool Succeeded, bool Faulted, bool Canceled) Flags<T>(SpindleTask<T> t)
        => (t.IsCompleted, t.IsCompletedSuccessfully, t.IsFaulted, t.IsCanceled);

    private static (bool Completed, bool Succeeded, bool Faulted, bool Canceled) Flags(Task t)
        => (t.IsCompleted, t.IsCompletedSuccessfully, t.IsFaulted, t.IsCanceled);

    /// <summary>The BCL's answer for the outcome: a TaskCompletionSource's task, and an async Task method awaiting it.</summary>
    private static (Task Source, Task Method) Bcl(Outcome outcome, CancellationToken token)
    {
        var tcs = new TaskCompletionSource<int>();
        static async Task<int> Relay(Task<int> t) => await t + 1;
        Task<int> method = Relay(tcs.Task);
        Complete(outcome, token, r => tcs.SetResult(r), e => tcs.SetException(e), ct => tcs.SetCanceled(ct));
        return (tcs.Task, method);
    }

    private static void Complete(Outcome outcome, CancellationToken token, Action<int> result, Action<Exception> error, Action<CancellationToken> cancel)
    {
        switch (outcome)
        {
            case Outcome.Succeeded: result(1); break;
            case Outcome.Faulted: error(new InvalidOperationException("failed")); break;
            case Outcome.Canceled: cancel(token); break;
        }
    }

    private static async SpindleTask<int> RelayTyped(SpindleTask<int> t) => await t + 1;
    private static async SpindleTask RelayVoid(SpindleTask<int> t) => await t;

    [Theory]
    [InlineData(Outcome.Pending)]
    [InlineData(Outcome.Succeeded)]
    [InlineData(Outcome.Faulted)]
    [InlineData(Outcome.Canceled)]
    public void Flags_OfAPromiseAndOfAnAsyncMethod_AreTheBclTasksFlagsForTheSameOutcome(Outcome outcome)
    {
        using var cts = new CancellationTokenSource();
        cts.Cancel();
        (Task bclSource, Task bclMethod) = Bcl(outcome, cts.Token);

        var promise = new Promise<int>();
        SpindleTask<int> typed = RelayTyped(promise.Task);
        var promise2 = new Promise<int>();
        SpindleTask untyped = RelayVoid(promise2.Task);
        Complete(outcome, cts.Token, r => promise.SetResult(r), e => promise.SetException(e), ct => promise.SetCanceled(ct));
        Complete(outcome, cts.Token, r => promise2.SetResult(r), e => promise2.SetException(e), ct => promise2.SetCanceled(ct));

        Assert.Equal(Flags(bclSource), Flags(promise.Task));
        Assert.Equal(Flags(bclSource), Flags(promise.Task.AsSpindleTask()));
        Assert.Equal(Flags(bclMethod), Flags(typed));
        Assert.Equal(Flags(bclMethod), Flags(untyped));
        // Reading the flags consumed nothing: each task is still awaited once, with its outcome.
        Assert.Equal(Flags(bclMethod), Flags(typed));
        if (outcome == Outcome.Pending)
        {
            promise.SetResult(1);
            promise2.SetResult(1);
            Assert.Equal((true, true, false, false), Flags(typed));
            Assert.Equal((true, true, false, false), Flags(untyped));
        }
        if (outcome is Outcome.Pending or Outcome.Succeeded)
        {
            Assert.Equal(2, typed.GetAwaiter().GetResult());
            untyped.GetAwaiter().GetResult();
        }
        else if (outcome == Outcome.Faulted)
        {
            Assert.Throws<InvalidOperationException>(() => typed.GetAwaiter().GetResult());
            Assert.Throws<InvalidOperationException>(() => untyped.GetAwaiter().GetResult());
        }
        else
        {
            Assert.ThrowsAny<OperationCanceledException>(() => typed.GetAwaiter().GetResult());
            Assert.ThrowsAny<OperationCanceledException>(() => untyped.GetAwaiter().GetResult());
        }
    }

    [Fact]
    public void Flags_OfCompletedTasksWithNoPooledSource_AreTheBclTasksFlags()
    {
        using var cts = new CancellationTokenSource();
        cts.Cancel();
        var error = new InvalidOperationException("failed");

        Assert.Equal(Flags(Task.CompletedTask), Flags(default(SpindleTask)));
        Assert.Equal(Flags(Task.CompletedTask), Flags(default(SpindleTask<int>)));
        Assert.Equal(Flags(Task.FromResult(3)), Flags(SpindleTask.FromResult(3)));
        Assert.Equal(Flags(Task.FromException(error)), Flags(SpindleTask.FromException(error)));
        Assert.Equal(Flags(Task.FromException<int>(error)), Flags(SpindleTask.FromException<int>(error)));
        Assert.Equal(Flags(Task.FromCanceled(cts.Token)), Flags(SpindleTask.FromCanceled(cts.Token)));
        Assert.Equal(Flags(Task.FromCanceled<int>(cts.Token)), Flags(SpindleTask.FromCanceled<int>(cts.Token)));
    }

    [Fact]
    public async Task Flags_OfACancelledWaitAndAFailedWhenAll_AreCanceledAndFaulted()
    {
        using var cts = new CancellationTokenSource();
        SpindleTask delay = Spindle.Delay(TimeSpan.FromMinutes(5), cts.Token);
        Assert.Equal((false, false, false, false), Flags(delay));
        cts.Cancel();
        Assert.Equal((true, false, false, true), Flags(delay));
        Assert.True((await delay.SuppressCancellationThrow()));

        var failing = new Promise<int>();
        var all = SpindleTask.WhenAll(failing.Task, SpindleTask.FromResult(1));
        failing.SetException(new InvalidOperationException("failed"));
        Assert.Equal((true, false, true, false), Flags(all));
        await Assert.ThrowsAsync<InvalidOperationException>(async () => await all);
    }

    [Fact]
    public async Task Flags_AfterThePooledTaskWasAwaited_ThrowTheAwaitOnceErrorNamingPreserve()
    {
        var promise = new Promise<int>();
        SpindleTask<int> typed = RelayTyped(promise.Task);
        var promise2 = new Promise<int>();
        SpindleTask untyped = RelayVoid(promise2.Task);
        promise.SetResult(1);
        promise2.SetResult(1);
        Assert.Equal(2, await typed);
        await untyped;

        foreach (Func<bool> read in new Func<bool>[]
                 {
                     () => typed.IsCompletedSuccessfully, () => typed.IsFaulted, () => typed.IsCanceled,
                     () => untyped.IsCompletedSuccessfully, () => untyped.IsFaulted, () => untyped.IsCanceled,
                 })
        {
            Assert.Contains("Preserve()", Assert.Throws<InvalidOperationException>(() => read()).Message, StringComparison.Ordinal);
        }
    }

    [Fact]
    public async Task Flags_OfAPromisesTask_AreReadableAfterItsAwaitAndRefusedAfterReset()
    {
        var promise = new Promise<int>();
        SpindleTask<int> task = promise.Task;
        promise.SetException(new InvalidOperationException("failed"));
        await Assert.ThrowsAsync<InvalidOperationException>(async () => await task);
        Assert.True(task.IsFaulted);
        Assert.False(task.IsCompletedSuccessfully);

        promise.Reset();
        Assert.Contains("Reset()", Assert.Throws<InvalidOperationException>(() => task.IsFaulted).Message, StringComparison.Ordinal);
        Assert.Equal((false, false, false, false), Flags(promise.Task));
    }

    [Fact]
    public async Task Flags_OfAPreservedTask_AnswerEveryReaderBeforeAndAfterItsAwaits()
    {
        var promise = new Promise<int>();
        SpindleTask<int> preserved = RelayTyped(promise.Task).Preserve();
        Assert.Equal((false, false, false, false), Flags(preserved));
        using var cts = new CancellationTokenSource();
        cts.Cancel();
        promise.SetCanceled(cts.Token);
        Assert.Equal((true, false, false, true), Flags(preserved));
        await Assert.ThrowsAnyAsync<OperationCanceledException>(async () => await preserved);
        await Assert.ThrowsAnyAsync<OperationCanceledException>(async () => await preserved);
        Assert.True(preserved.IsCanceled);
    }
}

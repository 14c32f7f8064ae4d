using System;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Combinators;

/// <summary>
/// A combinator input given as a <see cref="ValueTask"/> made from a promise's task (<c>promise.Task</c> converts
/// implicitly, or <c>AsValueTask()</c>) is the promise's completion, as the task itself is: its fault is reported to
/// Spindle.UnobservedException once, whichever report comes first (the combinator's, for a loser or a stored failure its
/// token or timeout decided, a <c>Forget()</c> of the promise's task, or a second combinator over it). Found by a review:
/// the ValueTask input kept no origin, so its report claimed nothing. Sequential: the event is process-wide.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class ValueTaskInputReportOnceTests
{
    private readonly InvalidOperationException Error = new("the promise's one fault"); // one per test

    private int CountReports(Action body, int expected)
    {
        using UnobservedReports watch = UnobservedReports.Start(UnobservedReports.Own.Instances(Error));
        int Count() => watch.Reports.Count(e => e == Error);
        Assert.True(Task.Run(body).Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "the body ended");
        SpinWait.SpinUntil(() => Count() >= expected, TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds));
        Thread.Sleep(100); // a report too many comes from the same thread, inline: this is only for a late one
        return Count();
    }

    /// <summary>A WhenAny over the promise's ValueTask decided by its token; the promise faults, and its task is forgotten.</summary>
    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public void WhenAny_DecidedByItsToken_ThenThePromiseFaults_AndItsTaskIsForgotten_IsReportedOnce(bool typed)
    {
        var promise = new Promise<int>();
        using var cts = new CancellationTokenSource();
        int reports = CountReports(() =>
        {
            if (typed)
            {
                SpindleTask<(int, int)> any = SpindleTask.WhenAny(new ValueTask<int>[] { promise.Task }, cts.Token);
                cts.Cancel();
                Assert.ThrowsAny<OperationCanceledException>(() => any.GetAwaiter().GetResult());
            }
            else
            {
                SpindleTask<int> any = SpindleTask.WhenAny(new ValueTask[] { ((SpindleTask)promise.Task).AsValueTask() }, cts.Token);
                cts.Cancel();
                Assert.ThrowsAny<OperationCanceledException>(() => any.GetAwaiter().GetResult());
            }
            promise.SetException(Error); // the losing slot reads the ValueTask here, inline, and reports the fault
            promise.Task.Forget(); // the same completion: reported already
        }, expected: 1);
        Assert.Equal(1, reports);
    }

    /// <summary>The other order: the task is forgotten (after it faulted) first, then the combinator's loser reads it.</summary>
    [Fact]
    public void WhenAny_SettledAtTheCall_APromisesFaultedValueTaskLoses_AfterItsTaskWasForgotten_IsReportedOnce()
    {
        var promise = new Promise();
        int reports = CountReports(() =>
        {
            promise.SetException(Error);
            promise.Task.Forget(); // reported here
            SpindleTask<int> any = SpindleTask.WhenAny(ValueTask.CompletedTask, promise.Task);
            Assert.Equal(0, any.GetAwaiter().GetResult()); // the faulted loser: the same completion
        }, expected: 1);
        Assert.Equal(1, reports);
    }

    /// <summary>A WhenAll over the promise's ValueTask stores its fault; its token then decides; the task is forgotten too.</summary>
    [Fact]
    public void WhenAll_StoredFaultDecidedByItsToken_AndThePromisesTaskForgotten_IsReportedOnce()
    {
        var promise = new Promise();
        var pending = new Promise();
        using var cts = new CancellationTokenSource();
        int reports = CountReports(() =>
        {
            SpindleTask all = SpindleTask.WhenAll(new ValueTask[] { promise.Task, pending.Task }, cts.Token);
            promise.SetException(Error);
            cts.Cancel();
            Assert.ThrowsAny<OperationCanceledException>(() => all.GetAwaiter().GetResult());
            promise.Task.Forget();
            pending.SetResult();
        }, expected: 1);
        Assert.Equal(1, reports);
    }

    /// <summary>
    /// Every kind of Spindle task a read does not consume, made faulted (a promise's, a preserved task's, a task made
    /// failed), loses a WhenAny settled at the call as a ValueTask, and the task is forgotten too: one report.
    /// </summary>
    [Theory]
    [InlineData("promise")]
    [InlineData("preserved")]
    [InlineData("failed")]
    public void WhenAny_SettledAtTheCall_AFaultedRereadableTasksValueTaskLoses_AndTheTaskIsForgotten_IsReportedOnce(string kind)
    {
        int reports = CountReports(() =>
        {
            SpindleTask task = Faulted(kind);
            Assert.Equal(0, SpindleTask.WhenAny(ValueTask.CompletedTask, task.AsValueTask()).GetAwaiter().GetResult());
            task.Forget();
        }, expected: 1);
        Assert.Equal(1, reports);
    }

    private SpindleTask Faulted(string kind)
    {
        switch (kind)
        {
            case "promise":
                var promise = new Promise();
                promise.SetException(Error);
                return promise.Task;
            case "preserved":
                var source = new Promise();
                SpindleTask preserved = source.Task.Preserve();
                source.SetException(Error);
                return preserved;
            default:
                return SpindleTask.FromException(Error);
        }
    }

    /// <summary>
    /// A ValueTask whose source a read consumes (an async method's) still has its fault reported, once: nothing else can
    /// read that completion, so there is nothing to claim it from.
    /// </summary>
    [Fact]
    public void WhenAny_SettledAtTheCall_AFaultedAsyncMethodsValueTaskLoses_IsReportedOnce()
    {
        var gate = new Promise();
        int reports = CountReports(() =>
        {
            SpindleTask failing = FailAfter(gate.Task);
            gate.SetResult(); // the method faults here, inline
            Assert.Equal(0, SpindleTask.WhenAny(ValueTask.CompletedTask, failing.AsValueTask()).GetAwaiter().GetResult());
        }, expected: 1);
        Assert.Equal(1, reports);
    }

    private async SpindleTask FailAfter(SpindleTask gate)
    {
        await gate;
        throw Error;
    }

    /// <summary>Two promises faulted with one exception object are two completions: reported twice, as before.</summary>
    [Fact]
    public void TwoPromisesFaultedWithOneException_LosingAsValueTasks_AreReportedTwice()
    {
        var first = new Promise();
        var second = new Promise();
        int reports = CountReports(() =>
        {
            first.SetException(Error);
            second.SetException(Error);
            Assert.Equal(0, SpindleTask.WhenAny(ValueTask.CompletedTask, first.Task, second.Task).GetAwaiter().GetResult());
            first.Task.Forget();
            second.Task.Forget();
        }, expected: 2);
        Assert.Equal(2, reports);
    }

    /// <summary>
    /// A pending WhenAny over the promise's ValueTask, won by another input; the promise then faults (its losing slot
    /// reads it), and a second WhenAny over the promise's task loses it too: one report.
    /// </summary>
    [Fact]
    public void PendingWhenAny_LosingThePromisesValueTask_ThenASecondCombinatorLosesItsTask_IsReportedOnce()
    {
        var promise = new Promise();
        var other = new Promise();
        int reports = CountReports(() =>
        {
            SpindleTask<int> any = SpindleTask.WhenAny(promise.Task.AsValueTask(), other.Task.AsValueTask());
            other.SetResult();
            Assert.Equal(1, any.GetAwaiter().GetResult());
            promise.SetException(Error);
            Assert.Equal(0, SpindleTask.WhenAny(SpindleTask.CompletedTask, promise.Task).GetAwaiter().GetResult());
        }, expected: 1);
        Assert.Equal(1, reports);
    }

    /// <summary>The same promise's task lost by two combinators, one over its ValueTask and one over the task itself.</summary>
    [Fact]
    public void TwoCombinators_OneOverThePromisesValueTask_BothLose_IsReportedOnce()
    {
        var promise = new Promise();
        int reports = CountReports(() =>
        {
            promise.SetException(Error);
            Assert.Equal(0, SpindleTask.WhenAny(ValueTask.CompletedTask, promise.Task).GetAwaiter().GetResult());
            Assert.Equal(0, SpindleTask.WhenAny(SpindleTask.CompletedTask, promise.Task).GetAwaiter().GetResult());
        }, expected: 1);
        Assert.Equal(1, reports);
    }
}

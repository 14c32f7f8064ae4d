using System;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Combinators;

/// <summary>
/// A BCL task completes once, so its fault is reported to Spindle.UnobservedException at most once, however many losing
/// slots read it: the same task passed twice to a combinator that its token (or another input) decided, stored twice by a
/// WhenAll that its token then cancelled, or lost by two combinators. Before, each copy reported it (found by a review:
/// "Expected: 1, Actual: 2"). The completion is the task object itself: the claim is kept with it, weakly. Sequential:
/// Spindle.UnobservedException is process-wide.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class BclTaskReportOnceTests
{
    private readonly InvalidOperationException Error = new("the bcl task's one fault"); // one per test: a late report of another test's cannot count

    /// <summary>
    /// Runs <paramref name="body"/> on a thread-pool thread and counts how many times <see cref="Error"/> is reported: the
    /// losing slots' continuations may run after the body, on the thread pool, so the count is taken once it reaches
    /// <paramref name="expected"/> (or the time is up) and after a short wait for a report too many.
    /// </summary>
    private int CountReports(Action body, int expected)
    {
        using UnobservedReports watch = UnobservedReports.Start(UnobservedReports.Own.Instances(Error));
        int Count() => watch.Reports.Count(e => e == Error);
        Assert.True(Task.Run(body).Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "the body ended");
        SpinWait.SpinUntil(() => Count() >= expected, TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds));
        Thread.Sleep(100);
        return Count();
    }

    [Fact]
    public void WhenAny_TheSameBclTaskTwice_DecidedByItsToken_ThenTheTaskFaults_IsReportedOnce()
    {
        var tcs = new TaskCompletionSource();
        using var cts = new CancellationTokenSource();
        int reports = CountReports(() =>
        {
            SpindleTask<int> any = SpindleTask.WhenAny(new[] { tcs.Task, tcs.Task }, cts.Token);
            cts.Cancel();
            Assert.Throws<TaskCanceledException>(() => any.GetAwaiter().GetResult());
            tcs.SetException(Error); // both losing slots' continuations run here, inline
        }, expected: 1);
        Assert.Equal(1, reports);
    }

    [Fact]
    public void WhenAll_TheSameBclTaskTwice_DecidedByItsToken_ThenTheTaskFaults_IsReportedOnce()
    {
        var tcs = new TaskCompletionSource();
        using var cts = new CancellationTokenSource();
        int reports = CountReports(() =>
        {
            SpindleTask all = SpindleTask.WhenAll(new[] { tcs.Task, tcs.Task }, cts.Token);
            cts.Cancel();
            Assert.Throws<TaskCanceledException>(() => all.GetAwaiter().GetResult());
            tcs.SetException(Error);
        }, expected: 1);
        Assert.Equal(1, reports);
    }

    /// <summary>Both copies failed and were stored before the token decided: the stored failures are reported once.</summary>
    [Fact]
    public void WhenAll_TheSameBclTaskTwice_FaultedAndStored_ThenItsTokenDecides_IsReportedOnce()
    {
        var tcs = new TaskCompletionSource();
        var pending = new Promise();
        using var cts = new CancellationTokenSource();
        int reports = CountReports(() =>
        {
            SpindleTask all = SpindleTask.WhenAll(new[] { tcs.Task, tcs.Task, pending.Task.AsTask() }, cts.Token);
            tcs.SetException(Error);
            cts.Cancel();
            Assert.Throws<TaskCanceledException>(() => all.GetAwaiter().GetResult());
            pending.SetResult();
        }, expected: 1);
        Assert.Equal(1, reports);
    }

    [Fact]
    public void TwoWhenAnys_LosingTheSameBclTask_ThenItFaults_IsReportedOnce()
    {
        var tcs = new TaskCompletionSource();
        int reports = CountReports(() =>
        {
            SpindleTask<int> first = SpindleTask.WhenAny(new[] { tcs.Task, Task.CompletedTask.ContinueWith(_ => { }) });
            SpindleTask<int> second = SpindleTask.WhenAny(new[] { tcs.Task, Task.Delay(1) });
            Assert.Equal(1, first.GetAwaiter().GetResult());
            Assert.Equal(1, second.GetAwaiter().GetResult());
            tcs.SetException(Error);
        }, expected: 1);
        Assert.Equal(1, reports);
    }

    /// <summary>Settled at the call: a finished winner, and a faulted BCL task twice among the losers.</summary>
    [Fact]
    public void WhenAny_SettledAtTheCall_TheSameFaultedBclTaskTwiceAmongTheLosers_IsReportedOnce()
    {
        Task faulted = Task.FromException(Error);
        int reports = CountReports(() =>
        {
            SpindleTask<int> any = SpindleTask.WhenAny(new[] { Task.CompletedTask, faulted, faulted });
            Assert.Equal(0, any.GetAwaiter().GetResult());
        }, expected: 1);
        Assert.Equal(1, reports);
    }

    /// <summary>Two different faulted BCL tasks are two completions, even with one exception object: two reports.</summary>
    [Fact]
    public void TwoDifferentBclTasks_WithTheSameException_AreTwoCompletions_ReportedTwice()
    {
        int reports = CountReports(() =>
        {
            SpindleTask<int> any = SpindleTask.WhenAny(new[] { Task.CompletedTask, Task.FromException(Error), Task.FromException(Error) });
            Assert.Equal(0, any.GetAwaiter().GetResult());
        }, expected: 2);
        Assert.Equal(2, reports);
    }
}

using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Combinators;

/// <summary>
/// Differential tests: the same WhenAll program over <see cref="TaskCompletionSource"/>s with <c>Task.WhenAll</c>, and over
/// promises with <c>SpindleTask.WhenAll</c>. A WhenAll whose inputs were cancelled and faulted is faulted in the BCL (a
/// fault wins over a cancellation, whatever their order), and <c>await</c> rethrows the first fault in input order; it
/// is cancelled only when no input faulted. SpindleTask.WhenAll's docs promise the BCL's <c>await Task.WhenAll</c>.
/// </summary>
public sealed class WhenAllFaultOverCancellationTests
{
    private static readonly CancellationToken s_canceled = new(true);

    /// <summary>What an await of a combined task shows: its status and the exception it throws.</summary>
    private static (string Status, Exception? Thrown) Outcome(Task task)
    {
        Exception? thrown = Record.Exception(() => task.GetAwaiter().GetResult());
        return (task.IsFaulted ? "Faulted" : task.IsCanceled ? "Canceled" : "Succeeded", thrown);
    }

    private static (string Status, Exception? Thrown) Outcome(SpindleTask task)
    {
        string status = task.Status.ToString();
        return (status, Record.Exception(() => task.GetAwaiter().GetResult()));
    }

    /// <summary>The BCL's outcome for inputs finished in the given order: 'c' cancelled, 'f' faulted (by <paramref name="errors"/>), 's' succeeded.</summary>
    private static (string, Exception?) Bcl(string kinds, Exception[] errors, bool finishFirst)
    {
        var sources = new TaskCompletionSource[kinds.Length];
        var tasks = new Task[kinds.Length];
        for (int i = 0; i < kinds.Length; i++)
        {
            sources[i] = new TaskCompletionSource();
            tasks[i] = sources[i].Task;
        }
        Task all = finishFirst ? null! : Task.WhenAll(tasks);
        Finish(kinds, errors, i => sources[i].SetCanceled(s_canceled), (i, e) => sources[i].SetException(e), i => sources[i].SetResult());
        return Outcome(finishFirst ? Task.WhenAll(tasks) : all);
    }

    private static (string, Exception?) Spn(string kinds, Exception[] errors, bool finishFirst)
    {
        var promises = new Promise[kinds.Length];
        var tasks = new SpindleTask[kinds.Length];
        for (int i = 0; i < kinds.Length; i++)
        {
            promises[i] = new Promise();
            tasks[i] = promises[i].Task;
        }
        SpindleTask all = finishFirst ? default : SpindleTask.WhenAll(tasks);
        Finish(kinds, errors, i => promises[i].SetCanceled(s_canceled), (i, e) => promises[i].SetException(e), i => promises[i].SetResult());
        return Outcome(finishFirst ? SpindleTask.WhenAll(tasks) : all);
    }

    private static void Finish(string kinds, Exception[] errors, Action<int> cancel, Action<int, Exception> fail, Action<int> succeed)
    {
        int f = 0;
        for (int i = 0; i < kinds.Length; i++)
        {
            switch (kinds[i])
            {
                case 'c': cancel(i); break;
                case 'f': fail(i, errors[f++]); break;
                default: succeed(i); break;
            }
        }
    }

    [Theory]
    [InlineData("cf", false)]
    [InlineData("cf", true)]
    [InlineData("cfs", false)]
    [InlineData("scff", false)]
    [InlineData("ccfc", true)]
    [InlineData("fc", false)]
    [InlineData("cc", false)]
    [InlineData("cc", true)]
    public void WhenAll_CancelledAndFaultedInputs_SameOutcomeAsTaskWhenAll(string kinds, bool finishedBeforeTheCall)
    {
        var errors = new Exception[] { new FormatException("first fault"), new InvalidTimeZoneException("second fault") };
        (string bclStatus, Exception? bclThrown) = Bcl(kinds, errors, finishedBeforeTheCall);
        (string spnStatus, Exception? spnThrown) = Spn(kinds, errors, finishedBeforeTheCall);
        Assert.Equal(bclStatus, spnStatus);
        Assert.NotNull(spnThrown);
        if (bclThrown is OperationCanceledException)
        {
            Assert.IsAssignableFrom<OperationCanceledException>(spnThrown);
        }
        else
        {
            Assert.Same(bclThrown, spnThrown); // the first fault in input order, the cancellations before it passed over
        }
    }

    [Fact]
    public void WhenAll_Typed_CancelledBeforeFaulted_ThrowsTheFault()
    {
        var a = new Promise<int>();
        var b = new Promise<int>();
        SpindleTask<int[]> all = SpindleTask.WhenAll([a.Task, b.Task]);
        var fault = new FormatException("b failed");
        a.SetCanceled(s_canceled);
        b.SetException(fault);
        Assert.Equal(SpindleTaskStatus.Faulted, all.Status);
        Assert.Same(fault, Record.Exception(() => all.GetAwaiter().GetResult()));
    }

    [Fact]
    public void WhenAll_Tuple_CancelledBeforeFaulted_ThrowsTheFault()
    {
        var a = new Promise<int>();
        var b = new Promise<string>();
        var all = SpindleTask.WhenAll(a.Task, b.Task);
        var fault = new FormatException("b failed");
        a.SetCanceled(s_canceled);
        b.SetException(fault);
        Assert.Same(fault, Record.Exception(() => all.GetAwaiter().GetResult()));
    }

    [Fact]
    public void WhenAll_OverBclTasks_CancelledBeforeFaulted_ThrowsTheFault()
    {
        var fault = new FormatException("b failed");
        Task canceled = Task.FromCanceled(s_canceled);
        Task faulted = Task.FromException(fault);
        var pending = new TaskCompletionSource();
        SpindleTask completedPath = SpindleTask.WhenAll(canceled, faulted);
        SpindleTask pendingPath = SpindleTask.WhenAll(canceled, faulted, pending.Task);
        pending.SetResult();
        Assert.Same(fault, Record.Exception(() => completedPath.GetAwaiter().GetResult()));
        Assert.Same(fault, Record.Exception(() => TestUtil.WithTimeout(pendingPath).GetAwaiter().GetResult()));
    }

    [Fact]
    public async Task WhenAll_AsTask_CancelledBeforeFaulted_IsFaultedAsTaskWhenAllIs()
    {
        var a = new Promise();
        var b = new Promise();
        Task bridged = SpindleTask.WhenAll(a.Task, b.Task).AsTask();
        var fault = new FormatException("b failed");
        a.SetCanceled(s_canceled);
        b.SetException(fault);
        Assert.Same(fault, await TestUtil.Catch(() => TestUtil.WithTimeout(bridged)));
        Assert.True(bridged.IsFaulted, $"status {bridged.Status}");
        Assert.Same(fault, Assert.Single(bridged.Exception!.InnerExceptions));
    }
}

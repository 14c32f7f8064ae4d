using System;
using System.Collections.Concurrent;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using static SpindleLib.Tests.Combinators.CombinatorTestSupport;
using static SpindleLib.Tests.UnobservedReports;

namespace SpindleLib.Tests.Combinators;

/// <summary>
/// WhenAllOptions.AggregateExceptions: every failed input's exception, in input order, whatever order they failed in,
/// for every kind of input, whether the inputs finished before or after the call. Sequential: it checks that nothing
/// reaches the process-wide UnobservedException event.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class AggregateExceptionsTests
{
    private static readonly WhenAllOptions s_aggregate = new() { AggregateExceptions = true };

    private static void AssertAggregateInOrder(Exception? thrown, params Exception[] expected)
    {
        AggregateException aggregate = Assert.IsType<AggregateException>(thrown);
        Assert.Equal(expected.Length, aggregate.InnerExceptions.Count);
        for (int i = 0; i < expected.Length; i++)
        {
            Assert.Same(expected[i], aggregate.InnerExceptions[i]);
        }
    }

    [Fact]
    public void SpindleInputs_FailingInReverseOrder_AggregateInInputOrder_NothingReported()
    {
        Promise[] promises = Promises(4);
        Exception[] errors = [new FormatException("0"), new TimeoutException("2"), new InvalidTimeZoneException("3")];
        Exception? thrown = null;
        ConcurrentQueue<Exception> reported = Observe(Own.InstancesOrOnTestThreads(errors), () =>
        {
            SpindleTask all = SpindleTask.WhenAll(promises.Select(Await).ToArray(), s_aggregate);
            promises[3].SetException(errors[2]);
            promises[2].SetException(errors[1]);
            promises[1].SetResult();
            promises[0].SetException(errors[0]);
            Assert.Equal(SpindleTaskStatus.Faulted, all.Status);
            thrown = Record.Exception(() => all.GetAwaiter().GetResult());
        });
        AssertAggregateInOrder(thrown, errors);
        Assert.Empty(reported);
    }

    [Fact]
    public void SpindleInputs_AlreadyFailed_FastPathAggregatesToo()
    {
        var a = new FormatException("a");
        var b = new TimeoutException("b");
        SpindleTask all = SpindleTask.WhenAll([SpindleTask.FromException(a), SpindleTask.CompletedTask, SpindleTask.FromException(b)], s_aggregate);
        AssertAggregateInOrder(Record.Exception(() => all.GetAwaiter().GetResult()), a, b);
    }

    [Fact]
    public void OneFailure_IsStillAnAggregate_AndCancellationsAreIncludedInOrder()
    {
        Promise[] promises = Promises(3);
        var fault = new FormatException("fault");
        SpindleTask all = SpindleTask.WhenAll(TasksOf(promises), s_aggregate);
        promises[2].SetException(fault);
        promises[0].SetCanceled();
        promises[1].SetResult();
        AggregateException aggregate = Assert.IsType<AggregateException>(Record.Exception(() => all.GetAwaiter().GetResult()));
        Assert.IsAssignableFrom<OperationCanceledException>(aggregate.InnerExceptions[0]);
        Assert.Same(fault, aggregate.InnerExceptions[1]);

        var single = new TimeoutException("only");
        SpindleTask one = SpindleTask.WhenAll([SpindleTask.FromException(single)], s_aggregate);
        AssertAggregateInOrder(Record.Exception(() => one.GetAwaiter().GetResult()), single);
    }

    [Fact]
    public void OnlyCancellations_TheCombinedTaskIsCancelled()
    {
        Promise[] promises = Promises(2);
        SpindleTask all = SpindleTask.WhenAll(TasksOf(promises), s_aggregate);
        promises[1].SetCanceled();
        promises[0].SetCanceled();
        Assert.Equal(SpindleTaskStatus.Canceled, all.Status);
        Assert.ThrowsAny<OperationCanceledException>(() => all.GetAwaiter().GetResult());
    }

    [Fact]
    public async Task NoFailure_SucceedsAsWithoutTheOption()
    {
        Promise<int>[] promises = [new(), new()];
        SpindleTask<int[]> all = SpindleTask.WhenAll(promises.Select(Await).ToArray(), s_aggregate);
        promises[1].SetResult(2);
        promises[0].SetResult(1);
        Assert.Equal(new[] { 1, 2 }, await TestUtil.WithTimeout(all));
    }

    [Fact]
    public void DefaultOptions_RethrowTheLowestIndexOnly()
    {
        Promise[] promises = Promises(2);
        var first = new FormatException("index 0");
        SpindleTask all = SpindleTask.WhenAll(TasksOf(promises), default(WhenAllOptions));
        promises[1].SetException(new TimeoutException("index 1"));
        promises[0].SetException(first);
        Assert.Same(first, Record.Exception(() => all.GetAwaiter().GetResult()));
        Assert.False(default(WhenAllOptions).AggregateExceptions);
    }

    [Fact]
    public async Task BclTasks_PendingAndAlreadyFailed_AggregateInInputOrder()
    {
        var pending = new TaskCompletionSource();
        var early = new FormatException("index 0, failed before the call");
        var late = new TimeoutException("index 2, fails later");
        SpindleTask all = SpindleTask.WhenAll([Task.FromException(early), Task.CompletedTask, pending.Task], s_aggregate);
        pending.SetException(late);
        AssertAggregateInOrder(await Record.ExceptionAsync(() => TestUtil.WithTimeout(all)), early, late);
    }

    [Fact]
    public async Task ValueTasks_TypedAndUntyped_AggregateInInputOrder()
    {
        var sources = new[] { new CountingValueTaskSource<int>(), new CountingValueTaskSource<int>() };
        Exception[] errors = [new FormatException("0"), new TimeoutException("1")];
        SpindleTask<int[]> typed = SpindleTask.WhenAll([sources[0].Task, sources[1].Task], s_aggregate);
        sources[1].SetException(errors[1]);
        sources[0].SetException(errors[0]);
        AssertAggregateInOrder(await Record.ExceptionAsync(() => TestUtil.WithTimeout(typed)), errors);

        foreach (CountingValueTaskSource<int> s in sources)
        {
            s.Reset();
        }
        SpindleTask untyped = SpindleTask.WhenAll([sources[0].UntypedTask, sources[1].UntypedTask], s_aggregate, CancellationToken.None);
        sources[0].SetException(errors[0]);
        sources[1].SetException(errors[1]);
        AssertAggregateInOrder(await Record.ExceptionAsync(() => TestUtil.WithTimeout(untyped)), errors);
    }

    [Fact]
    public async Task IntoDestinationAndTupleForms_Aggregate()
    {
        var a = new FormatException("a");
        var b = new TimeoutException("b");
        Promise<int>[] promises = [new(), new()];
        SpindleTask into = SpindleTask.WhenAll(promises.Select(Await).ToArray(), new int[2], s_aggregate);
        promises[1].SetException(b);
        promises[0].SetException(a);
        AssertAggregateInOrder(await Record.ExceptionAsync(() => TestUtil.WithTimeout(into)), a, b);

        var p1 = new Promise<string>();
        var p2 = new Promise<double>();
        SpindleTask<(string, double)> tuple = SpindleTask.WhenAll(Await(p1), Await(p2), s_aggregate);
        p2.SetException(b);
        p1.SetException(a);
        AssertAggregateInOrder(await Record.ExceptionAsync(() => TestUtil.WithTimeout(tuple)), a, b);
    }
}

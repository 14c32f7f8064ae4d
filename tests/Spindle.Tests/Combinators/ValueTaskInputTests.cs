using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Linq;
using System.Threading.Tasks;
using static SpindleLib.Tests.Combinators.CombinatorTestSupport;
using static SpindleLib.Tests.UnobservedReports;

namespace SpindleLib.Tests.Combinators;

/// <summary>
/// WhenAll/WhenAny over ValueTask and ValueTask&lt;T&gt;: results, order and index, and every ValueTask over an
/// IValueTaskSource read exactly once (winner, losers, failures, completed and pending alike). Sequential: the loser
/// tests watch the process-wide UnobservedException event.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class ValueTaskInputTests
{
    private static CountingValueTaskSource<T>[] Sources<T>(int n) => Enumerable.Range(0, n).Select(_ => new CountingValueTaskSource<T>()).ToArray();

    private static void AssertEachReadOnce<T>(CountingValueTaskSource<T>[] sources)
    {
        for (int i = 0; i < sources.Length; i++)
        {
            Assert.True(sources[i].Reads == 1, $"source {i} was read {sources[i].Reads} times");
            Assert.True(sources[i].Registrations <= 1, $"source {i} was registered on {sources[i].Registrations} times");
        }
    }

    [Fact]
    public async Task WhenAll_TypedValueTasksFinishingInAnyOrder_ResultsInInputOrder_EachReadOnce()
    {
        CountingValueTaskSource<int>[] sources = Sources<int>(4);
        SpindleTask<int[]> all = SpindleTask.WhenAll(sources.Select(s => s.Task).ToArray());
        foreach (int i in new[] { 2, 0, 3 })
        {
            sources[i].SetResult(i * 10);
            Assert.False(all.IsCompleted);
        }
        sources[1].SetResult(10);
        Assert.Equal(new[] { 0, 10, 20, 30 }, await TestUtil.WithTimeout(all));
        AssertEachReadOnce(sources);
    }

    [Fact]
    public async Task WhenAll_UntypedValueTasks_MixedCompletedAndPending_EachReadOnce()
    {
        CountingValueTaskSource<bool>[] sources = Sources<bool>(3);
        sources[1].SetResult(true);
        ValueTask[] inputs = [sources[0].UntypedTask, sources[1].UntypedTask, default, ValueTask.CompletedTask, sources[2].UntypedTask];
        SpindleTask all = SpindleTask.WhenAll(inputs);
        Assert.False(all.IsCompleted);
        sources[2].SetResult(true);
        sources[0].SetResult(true);
        await TestUtil.WithTimeout(all);
        AssertEachReadOnce(sources);
    }

    [Fact]
    public void WhenAll_AllValueTasksAlreadyComplete_FastPathReadsEachOnce()
    {
        CountingValueTaskSource<string>[] sources = Sources<string>(3);
        for (int i = 0; i < sources.Length; i++)
        {
            sources[i].SetResult("v" + i);
        }
        SpindleTask<string[]> all = SpindleTask.WhenAll(sources[0].Task, sources[1].Task, new ValueTask<string>("inline"), sources[2].Task);
        Assert.Null(all._source); // no combinator: the result is inline
        Assert.Equal(new[] { "v0", "v1", "inline", "v2" }, all.GetAwaiter().GetResult());
        AssertEachReadOnce(sources);
    }

    [Fact]
    public async Task WhenAll_FailedValueTask_RethrowsTheLowestIndexAndReadsEveryInputOnce()
    {
        CountingValueTaskSource<int>[] sources = Sources<int>(3);
        var first = new FormatException("index 0");
        var second = new TimeoutException("index 2");
        SpindleTask<int[]> all = SpindleTask.WhenAll(sources.Select(s => s.Task).ToArray());
        sources[2].SetException(second);
        sources[1].SetResult(1);
        sources[0].SetException(first);
        Assert.Same(first, await Assert.ThrowsAsync<FormatException>(() => TestUtil.WithTimeout(all)));
        AssertEachReadOnce(sources);
    }

    [Fact]
    public void WhenAny_TypedValueTasks_ReturnsTheFirstsIndexAndResult_LosersReadWhenTheyFinish()
    {
        CountingValueTaskSource<string>[] sources = Sources<string>(3);
        var loserError = new InvalidTimeZoneException("loser");
        (int Index, string Result) winner = default;
        ConcurrentQueue<Exception> reported = Observe(Own.InstancesOrOnTestThreads(loserError), () =>
        {
            SpindleTask<(int Index, string Result)> any = SpindleTask.WhenAny(sources.Select(s => s.Task).ToArray());
            sources[1].SetResult("one");
            winner = any.GetAwaiter().GetResult();
            Assert.Equal(0, sources[0].Reads); // a loser still running is read when it finishes, not before
            sources[0].SetException(loserError);
            sources[2].SetResult("two");
        });
        Assert.Equal((1, "one"), winner);
        Assert.Same(loserError, Assert.Single(reported));
        AssertEachReadOnce(sources);
    }

    [Fact]
    public void WhenAny_UntypedValueTasks_OneAlreadyComplete_TheOthersStillReadOnceWhenTheyFinish()
    {
        CountingValueTaskSource<int>[] sources = Sources<int>(3);
        sources[2].SetResult(2);
        SpindleTask<int> any = SpindleTask.WhenAny(sources.Select(s => s.UntypedTask).ToArray());
        Assert.Equal(2, any.GetAwaiter().GetResult());
        sources[0].SetResult(0);
        sources[1].SetResult(1);
        AssertEachReadOnce(sources);
    }

    [Fact]
    public void WhenAny_EveryValueTaskAlreadyComplete_FirstWins_LosersReadAndTheirFaultsReported()
    {
        CountingValueTaskSource<int>[] sources = Sources<int>(3);
        var loserError = new InvalidTimeZoneException("loser");
        sources[0].SetResult(7);
        sources[1].SetException(loserError);
        sources[2].SetResult(9);
        (int, int) winner = default;
        ConcurrentQueue<Exception> reported = Observe(Own.InstancesOrOnTestThreads(loserError), () => winner = SpindleTask.WhenAny(sources.Select(s => s.Task).ToArray()).GetAwaiter().GetResult());
        Assert.Equal((0, 7), winner);
        Assert.Same(loserError, Assert.Single(reported));
        AssertEachReadOnce(sources);
    }

    [Fact]
    public async Task WhenAny_FaultedWinner_RethrowsItsException()
    {
        CountingValueTaskSource<int>[] sources = Sources<int>(2);
        var error = new FormatException("winner");
        SpindleTask<(int, int)> any = SpindleTask.WhenAny(sources[0].Task, sources[1].Task);
        sources[1].SetException(error);
        Assert.Same(error, await Assert.ThrowsAsync<FormatException>(() => TestUtil.WithTimeout(any)));
        sources[0].SetResult(0);
        AssertEachReadOnce(sources);
    }

    [Fact]
    public async Task WhenAllAndWhenAny_OverSequencesOfValueTasks()
    {
        CountingValueTaskSource<int>[] sources = Sources<int>(3);
        IEnumerable<ValueTask<int>> typed = sources.Select(s => s.Task).ToList();
        SpindleTask<int[]> all = SpindleTask.WhenAll(typed);
        for (int i = 0; i < 3; i++)
        {
            sources[i].SetResult(i + 1);
        }
        Assert.Equal(new[] { 1, 2, 3 }, await TestUtil.WithTimeout(all));

        foreach (CountingValueTaskSource<int> s in sources)
        {
            s.Reset();
        }
        SpindleTask<int> any = SpindleTask.WhenAny(sources.Select(s => s.UntypedTask).ToList());
        sources[2].SetResult(0);
        Assert.Equal(2, await TestUtil.WithTimeout(any));
        sources[0].SetResult(0);
        sources[1].SetResult(0);
        AssertEachReadOnce(sources);
    }

    [Fact]
    public async Task WhenAll_ValueTasksFromPoolingAsyncMethods_Complete()
    {
        // ValueTasks from the BCL's pooling builder are backed by pooled IValueTaskSources: reading one twice would
        // corrupt another call's result. The combined results must come out right, call after call.
        for (int round = 0; round < 50; round++)
        {
            var gate = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
            ValueTask<int>[] inputs = [Pooled(gate.Task, 1), Pooled(gate.Task, 2), Pooled(Task.CompletedTask, 3)];
            SpindleTask<int[]> all = SpindleTask.WhenAll(inputs);
            gate.SetResult();
            Assert.Equal(new[] { 1, 2, 3 }, await TestUtil.WithTimeout(all));
        }
    }

    [System.Runtime.CompilerServices.AsyncMethodBuilder(typeof(System.Runtime.CompilerServices.PoolingAsyncValueTaskMethodBuilder<>))]
    private static async ValueTask<int> Pooled(Task gate, int value)
    {
        await gate;
        return value;
    }
}

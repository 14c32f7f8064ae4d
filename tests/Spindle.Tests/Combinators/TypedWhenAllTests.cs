using System;
using System.Collections.Generic;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using static SpindleLib.Tests.Combinators.CombinatorTestSupport;

namespace SpindleLib.Tests.Combinators;

/// <summary>
/// Typed WhenAll over Spindle tasks, BCL tasks and ValueTasks: the results in input order, as a new array or written
/// into the caller's buffer; and typed WhenAny over BCL tasks.
/// </summary>
public sealed class TypedWhenAllTests
{
    private static Promise<int>[] IntPromises(int n) => Enumerable.Range(0, n).Select(_ => new Promise<int>()).ToArray();

    [Theory]
    [InlineData(1)]
    [InlineData(3)]
    [InlineData(9)]
    public async Task WhenAll_TypedSpindleTasksFinishingInReverse_ResultsInInputOrder(int n)
    {
        Promise<int>[] promises = IntPromises(n);
        SpindleTask<int>[] inputs = promises.Select(Await).ToArray();
        SpindleTask<int[]> all = SpindleTask.WhenAll(inputs);
        for (int i = n - 1; i >= 0; i--)
        {
            Assert.False(all.IsCompleted);
            promises[i].SetResult(i * i);
        }
        Assert.Equal(Enumerable.Range(0, n).Select(i => i * i), await TestUtil.WithTimeout(all));
        Assert.All(inputs, t => Assert.True(WasConsumed(t)));
    }

    [Fact]
    public void WhenAll_TypedInputsAlreadyComplete_ResultInlineWithNoCombinator()
    {
        // A collection expression picks the span form (separate arguments would pick the tuple form).
        SpindleTask<int[]> all = SpindleTask.WhenAll([SpindleTask.FromResult(1), TestUtil.CompletesSynchronouslyWithValue(1), SpindleTask.FromResult(3)]);
        Assert.Null(all._source);
        Assert.Equal(new[] { 1, 2, 3 }, all.GetAwaiter().GetResult());
    }

    [Fact]
    public void WhenAll_NoTypedInputs_CompletesAtOnceWithAnEmptyArray()
    {
        Assert.Empty(SpindleTask.WhenAll(ReadOnlySpan<SpindleTask<int>>.Empty).GetAwaiter().GetResult());
        Assert.Empty(SpindleTask.WhenAll(ReadOnlySpan<Task<int>>.Empty).GetAwaiter().GetResult());
        Assert.Empty(SpindleTask.WhenAll(new List<ValueTask<int>>()).GetAwaiter().GetResult());
        Assert.Same(Array.Empty<string>(), SpindleTask.WhenAll(Array.Empty<SpindleTask<string>>()).GetAwaiter().GetResult());
    }

    [Fact]
    public async Task WhenAll_TypedBclTasks_ResultsInInputOrder_AndTheTasksStayReadable()
    {
        var sources = Enumerable.Range(0, 3).Select(_ => new TaskCompletionSource<string>()).ToArray();
        Task<string>[] tasks = [sources[0].Task, Task.FromResult("done"), sources[1].Task, sources[2].Task];
        SpindleTask<string[]> all = SpindleTask.WhenAll(tasks);
        sources[2].SetResult("c");
        sources[0].SetResult("a");
        Assert.False(all.IsCompleted);
        sources[1].SetResult("b");
        Assert.Equal(new[] { "a", "done", "b", "c" }, await TestUtil.WithTimeout(all));
        Assert.Equal("a", await tasks[0]);
    }

    [Fact]
    public async Task WhenAll_TypedBclTasksAsASequence_ResultsInInputOrder()
    {
        var source = new TaskCompletionSource<int>(TaskCreationOptions.RunContinuationsAsynchronously);
        IEnumerable<Task<int>> tasks = new[] { Task.FromResult(1), source.Task, Task.FromResult(3) }.Select(t => t);
        SpindleTask<int[]> all = SpindleTask.WhenAll(tasks);
        source.SetResult(2);
        Assert.Equal(new[] { 1, 2, 3 }, await TestUtil.WithTimeout(all));
    }

    [Fact]
    public async Task WhenAny_TypedBclTasks_ReturnsTheFirstsIndexAndResult()
    {
        var sources = Enumerable.Range(0, 3).Select(_ => new TaskCompletionSource<string>()).ToArray();
        SpindleTask<(int Index, string Result)> any = SpindleTask.WhenAny(sources.Select(s => s.Task).ToArray());
        sources[2].SetResult("third");
        Assert.Equal((2, "third"), await TestUtil.WithTimeout(any));
        sources[0].SetResult("late");
        sources[1].SetResult("late");

        SpindleTask<(int Index, string Result)> completed = SpindleTask.WhenAny(new[] { new TaskCompletionSource<string>().Task, Task.FromResult("ready") }.AsEnumerable());
        Assert.Equal((1, "ready"), completed.GetAwaiter().GetResult());
    }

    [Theory]
    [InlineData(2)]
    [InlineData(5)]
    public async Task WhenAll_IntoDestination_WritesEachResultAtItsIndex_AndLeavesTheRestAlone(int n)
    {
        Promise<int>[] promises = IntPromises(n);
        int[] buffer = Enumerable.Repeat(-1, n + 2).ToArray();
        SpindleTask all = SpindleTask.WhenAll(promises.Select(Await).ToArray(), buffer.AsMemory(1));
        for (int i = 0; i < n; i++)
        {
            promises[(i + 1) % n].SetResult(100 + (i + 1) % n);
        }
        await TestUtil.WithTimeout(all);
        Assert.Equal(new[] { -1 }.Concat(Enumerable.Range(100, n)).Append(-1), buffer);
    }

    [Fact]
    public async Task WhenAll_IntoDestination_EveryInputKind()
    {
        var buffer = new string[3];
        var source = new TaskCompletionSource<string>();
        SpindleTask fromTasks = SpindleTask.WhenAll([Task.FromResult("x"), source.Task, Task.FromResult("z")], buffer);
        source.SetResult("y");
        await TestUtil.WithTimeout(fromTasks);
        Assert.Equal(new[] { "x", "y", "z" }, buffer);

        var counting = new CountingValueTaskSource<string>();
        SpindleTask fromValueTasks = SpindleTask.WhenAll([counting.Task, new ValueTask<string>("b")], buffer.AsMemory(1));
        counting.SetResult("a");
        await TestUtil.WithTimeout(fromValueTasks);
        Assert.Equal(new[] { "x", "a", "b" }, buffer);
        Assert.Equal(1, counting.Reads);
    }

    [Fact]
    public void WhenAll_IntoDestination_InputsAlreadyComplete_WrittenAtOnce()
    {
        var buffer = new int[2];
        SpindleTask all = SpindleTask.WhenAll([SpindleTask.FromResult(4), SpindleTask.FromResult(5)], buffer);
        Assert.Equal(new[] { 4, 5 }, buffer);
        Assert.Equal(SpindleTaskStatus.Succeeded, all.Status);
    }

    [Fact]
    public async Task WhenAll_IntoDestination_FailedInput_RethrowsAndWritesNothing()
    {
        Promise<int>[] promises = IntPromises(2);
        int[] buffer = [-1, -1];
        var error = new FormatException("failed");
        SpindleTask all = SpindleTask.WhenAll(promises.Select(Await).ToArray(), buffer);
        promises[0].SetResult(1);
        promises[1].SetException(error);
        Assert.Same(error, await Assert.ThrowsAsync<FormatException>(() => TestUtil.WithTimeout(all)));
        Assert.Equal(new[] { -1, -1 }, buffer);
    }

    [Fact]
    public void WhenAll_IntoDestination_CancelledWait_NothingWrittenWhenTheInputsFinishLater()
    {
        Promise<int>[] promises = IntPromises(2);
        int[] buffer = [-1, -1];
        using var cts = new CancellationTokenSource();
        SpindleTask all = SpindleTask.WhenAll(promises.Select(Await).ToArray(), buffer, cancellationToken: cts.Token);
        promises[0].SetResult(1);
        cts.Cancel();
        Assert.ThrowsAny<OperationCanceledException>(() => all.GetAwaiter().GetResult());
        buffer[0] = 42; // the caller reuses its buffer at once
        promises[1].SetResult(2);
        Assert.Equal(new[] { 42, -1 }, buffer);
    }

    [Fact]
    public void WhenAll_IntoDestination_TooShort_ThrowsNamingBothLengths_AndConsumesNothing()
    {
        var promise = new Promise<int>();
        SpindleTask<int>[] inputs = [Await(promise), SpindleTask.FromResult(2), SpindleTask.FromResult(3)];
        ArgumentException ex = Assert.Throws<ArgumentException>(() => SpindleTask.WhenAll(inputs, new int[2]));
        Assert.Equal("destination", ex.ParamName);
        Assert.Contains("room for 2", ex.Message, StringComparison.Ordinal);
        Assert.Contains("3 tasks", ex.Message, StringComparison.Ordinal);
        Assert.False(WasConsumed(inputs[0]));
        Assert.Throws<ArgumentException>(() => SpindleTask.WhenAll([Task.FromResult(1)], Memory<int>.Empty));
        Assert.Throws<ArgumentException>(() => SpindleTask.WhenAll([new ValueTask<int>(1)], Memory<int>.Empty));
        promise.SetResult(1);
        Assert.Equal(1, inputs[0].GetAwaiter().GetResult()); // still the caller's to await
    }

    [Fact]
    public async Task WhenAll_TypedResult_ReadTwice_ThrowsTheAwaitOnceError()
    {
        var promise = new Promise<int>();
        SpindleTask<int[]> all = SpindleTask.WhenAll([Await(promise), SpindleTask.FromResult(2)]);
        Task<int[]> first = TestUtil.AwaitAsync(all);
        promise.SetResult(1);
        Assert.Equal(new[] { 1, 2 }, await TestUtil.WithTimeout(first));
        InvalidOperationException ex = Assert.Throws<InvalidOperationException>(() => all.GetAwaiter().GetResult());
        Assert.Contains("Preserve()", ex.Message, StringComparison.Ordinal);
    }

    /// <summary>
    /// A slot marks a typed use with a flag over the cell it keeps across uses (stop 54, no second reference): a pooled
    /// combinator used with a typed input in a slot, then an untyped one in that same slot, reads the untyped input itself
    /// (its failure surfaces; a stale mark would read the cell and succeed), and the typed one's result, whichever slot.
    /// </summary>
    [Fact]
    public void APooledCombinator_ReusedWithTypedAndUntypedInputsInTheSameSlots_ReadsEachInputItsOwnWay()
    {
        object? first = null;
        for (int round = 0; round < 20; round++)
        {
            int typedSlot = round % 2;
            var typed = new Promise<int>();
            var untyped = new Promise();
            var c = Combinator<int>.RentAll(2, default, typedSlot == 0 ? static x => x.Value<int>(0) : static x => x.Value<int>(1));
            first ??= c;
            Assert.Same(first, c); // read on this thread, the one combinator goes back to this thread's pool each round
            short token = c.Start(default);
            if (typedSlot == 0)
            {
                c.Add(0, typed.Task);
                c.Add(1, untyped.Task);
            }
            else
            {
                c.Add(0, untyped.Task);
                c.Add(1, typed.Task);
            }
            SpindleTask<int> all = c.ToTask(token);
            typed.SetResult(round);
            if (round % 4 < 2)
            {
                untyped.SetResult();
                Assert.Equal(round, all.GetAwaiter().GetResult());
            }
            else
            {
                untyped.SetException(new InvalidOperationException("untyped " + round));
                Assert.Equal("untyped " + round, Assert.Throws<InvalidOperationException>(() => all.GetAwaiter().GetResult()).Message);
            }
        }
    }
}

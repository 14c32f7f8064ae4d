using System;
using System.Collections.Generic;
using System.Linq;
using System.Threading.Tasks;
using static SpindleLib.Tests.Combinators.CombinatorTestSupport;

namespace SpindleLib.Tests.Combinators;

/// <summary>Empty, null and re-awaited inputs and results.</summary>
public class CombinatorBadInputTests
{
    [Fact]
    public void WhenAny_EmptyInput_ThrowsArgumentException_EveryOverload()
    {
        Assert.Throws<ArgumentException>(() => SpindleTask.WhenAny(ReadOnlySpan<SpindleTask>.Empty));
        Assert.Throws<ArgumentException>(() => SpindleTask.WhenAny(ReadOnlySpan<Task>.Empty));
        Assert.Throws<ArgumentException>(() => SpindleTask.WhenAny((IEnumerable<SpindleTask>)new List<SpindleTask>()));
        Assert.Throws<ArgumentException>(() => SpindleTask.WhenAny((IEnumerable<Task>)Array.Empty<Task>()));
        Assert.Throws<ArgumentException>(() => SpindleTask.WhenAny(Enumerable.Empty<Task>().Select(t => t)));
    }

    [Fact]
    public void WhenAll_EmptyInput_CompletesAtOnce_EveryOverload()
    {
        SpindleTask[] results =
        [
            SpindleTask.WhenAll(ReadOnlySpan<SpindleTask>.Empty),
            SpindleTask.WhenAll(ReadOnlySpan<Task>.Empty),
            SpindleTask.WhenAll((IEnumerable<SpindleTask>)new List<SpindleTask>()),
            SpindleTask.WhenAll(Enumerable.Empty<Task>().Select(t => t)),
        ];
        foreach (SpindleTask all in results)
        {
            Assert.True(all.IsCompleted);
            Assert.Equal(SpindleTaskStatus.Succeeded, all.Status);
            all.GetAwaiter().GetResult();
        }
    }

    [Fact]
    public async Task WhenAll_EmptyInput_AwaitDoesNotSuspend()
        => await TestUtil.WithTimeout(SpindleTask.WhenAll(ReadOnlySpan<SpindleTask>.Empty), 5);

    [Fact]
    public void NullTaskInSpan_ThrowsArgumentExceptionNamingTheIndex()
    {
        var pending = new TaskCompletionSource();
        Task?[] withNull = [pending.Task, pending.Task, null, pending.Task]; // every other input pending

        AssertNamesIndex(2, () => SpindleTask.WhenAll(withNull!));
        AssertNamesIndex(2, () => SpindleTask.WhenAny(withNull!));
        AssertNamesIndex(0, () => SpindleTask.WhenAll(new Task[] { null!, pending.Task }));
        AssertNamesIndex(0, () => SpindleTask.WhenAny(new Task[] { null!, pending.Task }));
        pending.SetResult();
    }

    [Fact]
    public void NullTaskAfterAnAlreadyCompletedOne_StillThrowsArgumentExceptionNamingTheIndex()
    {
        // The fast paths (an input already complete) must validate the rest of the input too.
        AssertNamesIndex(1, () => SpindleTask.WhenAny(new Task[] { Task.CompletedTask, null! }));
        AssertNamesIndex(3, () => SpindleTask.WhenAny(new Task[] { Task.CompletedTask, Task.CompletedTask, Task.CompletedTask, null! }));
        AssertNamesIndex(1, () => SpindleTask.WhenAll(new Task[] { Task.CompletedTask, null! }));
    }

    [Fact]
    public void NullTaskInEnumerable_ThrowsArgumentExceptionNamingTheIndex()
    {
        var pending = new TaskCompletionSource();
        var list = new List<Task?> { pending.Task, pending.Task, pending.Task, null };
        AssertNamesIndex(3, () => SpindleTask.WhenAll(list!));
        AssertNamesIndex(3, () => SpindleTask.WhenAny(list!));
        AssertNamesIndex(3, () => SpindleTask.WhenAll(list.Select(t => t)!));
        AssertNamesIndex(3, () => SpindleTask.WhenAny(list.Select(t => t)!));
        AssertNamesIndex(1, () => SpindleTask.WhenAny((IEnumerable<Task>)new Task[] { Task.CompletedTask, null! }));
        pending.SetResult();
    }

    [Fact]
    public void NullEnumerable_ThrowsArgumentNullException_EveryOverload()
    {
        Assert.Equal("tasks", Assert.Throws<ArgumentNullException>(() => SpindleTask.WhenAll((IEnumerable<SpindleTask>)null!)).ParamName);
        Assert.Equal("tasks", Assert.Throws<ArgumentNullException>(() => SpindleTask.WhenAll((IEnumerable<Task>)null!)).ParamName);
        Assert.Equal("tasks", Assert.Throws<ArgumentNullException>(() => SpindleTask.WhenAny((IEnumerable<SpindleTask>)null!)).ParamName);
        Assert.Equal("tasks", Assert.Throws<ArgumentNullException>(() => SpindleTask.WhenAny((IEnumerable<Task>)null!)).ParamName);
    }

    private static void AssertNamesIndex(int index, Func<object> call)
    {
        ArgumentException ex = Assert.Throws<ArgumentException>(() => call());
        Assert.Contains($"index {index}", ex.Message, StringComparison.Ordinal);
        Assert.Equal("tasks", ex.ParamName);
    }

    private static void AssertAwaitOnceError(Action secondRead)
    {
        InvalidOperationException ex = Assert.Throws<InvalidOperationException>(secondRead);
        Assert.Contains("Preserve()", ex.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void WhenAll_ResultReadTwice_ThrowsTheAwaitOnceError()
    {
        Promise[] promises = Promises(2);
        SpindleTask all = SpindleTask.WhenAll(TasksOf(promises));
        promises[0].SetResult();
        promises[1].SetResult();
        all.GetAwaiter().GetResult();
        AssertAwaitOnceError(() => all.GetAwaiter().GetResult());
        AssertAwaitOnceError(() => _ = all.IsCompleted);
    }

    [Fact]
    public void WhenAll_FaultedResultReadTwice_ThrowsTheAwaitOnceErrorNotTheFault()
    {
        Promise[] promises = Promises(2);
        SpindleTask all = SpindleTask.WhenAll(TasksOf(promises));
        promises[0].SetException(new FormatException("x"));
        promises[1].SetResult();
        Assert.Throws<FormatException>(() => all.GetAwaiter().GetResult());
        AssertAwaitOnceError(() => all.GetAwaiter().GetResult());
    }

    [Fact]
    public void WhenAny_ResultReadTwice_WhileLosersArePendingAndAfter_ThrowsTheAwaitOnceError()
    {
        Promise[] promises = Promises(3);
        SpindleTask<int> any = SpindleTask.WhenAny(TasksOf(promises));
        promises[1].SetResult();
        Assert.Equal(1, any.GetAwaiter().GetResult());
        AssertAwaitOnceError(() => any.GetAwaiter().GetResult()); // combinator still alive: the losers hold it
        promises[0].SetResult();
        promises[2].SetResult();
        AssertAwaitOnceError(() => any.GetAwaiter().GetResult()); // combinator back in its pool

        // Even after the pooled combinator is reused by another call, the old result stays stale.
        Promise[] next = Promises(3);
        SpindleTask<int> reused = SpindleTask.WhenAny(TasksOf(next));
        AssertAwaitOnceError(() => any.GetAwaiter().GetResult());
        next[2].SetResult();
        next[0].SetResult();
        next[1].SetResult();
        Assert.Equal(2, reused.GetAwaiter().GetResult());
    }

    [Fact]
    public async Task WhenAllAndWhenAny_AwaitedTwice_SecondAwaitThrowsTheAwaitOnceError()
    {
        Promise[] promises = Promises(2);
        SpindleTask all = SpindleTask.WhenAll(TasksOf(promises));
        Task first = TestUtil.AwaitAsync(all);
        promises[0].SetResult();
        promises[1].SetResult();
        await TestUtil.WithTimeout(first, 10);
        InvalidOperationException ex = await Assert.ThrowsAsync<InvalidOperationException>(() => TestUtil.WithTimeout(all, 10));
        Assert.Contains("Preserve()", ex.Message, StringComparison.Ordinal);

        Promise[] more = Promises(2);
        SpindleTask<int> any = SpindleTask.WhenAny(TasksOf(more));
        more[0].SetResult();
        Assert.Equal(0, await TestUtil.WithTimeout(any, 10));
        ex = await Assert.ThrowsAsync<InvalidOperationException>(() => TestUtil.WithTimeout(any, 10));
        Assert.Contains("Preserve()", ex.Message, StringComparison.Ordinal);
        more[1].SetResult();
    }

    [Fact]
    public void WhenAny_PreservedResult_CanBeReadManyTimes()
    {
        Promise[] promises = Promises(2);
        SpindleTask<int> any = SpindleTask.WhenAny(TasksOf(promises)).Preserve();
        promises[1].SetResult();
        promises[0].SetResult();
        Assert.Equal(1, any.GetAwaiter().GetResult());
        Assert.Equal(1, any.GetAwaiter().GetResult());
    }

    [Fact]
    public void InputAlreadyConsumedByAnotherCombinator_IsRejectedAsStale()
    {
        // Inputs are consumed: passing a pooled task to a second combinator after the first read it is the await-once error.
        var promise = new Promise();
        SpindleTask input = Await(promise);
        SpindleTask all = SpindleTask.WhenAll(input);
        promise.SetResult();
        all.GetAwaiter().GetResult();
        AssertAwaitOnceError(() => SpindleTask.WhenAll(input));
        AssertAwaitOnceError(() => SpindleTask.WhenAny(input));
    }

    /// <summary>A pooled task whose one read has been made: stale, so any look at it is the await-once error.</summary>
    private static SpindleTask<int> Consumed()
    {
        var promise = new Promise<int>();
        SpindleTask<int> task = Await(promise);
        promise.SetResult(0);
        task.GetAwaiter().GetResult();
        return task;
    }

    [Fact]
    public void WhenAny_StaleInputBehindAFinishedOne_ThrowsBeforeLettingGoOfTheInputsBeforeIt()
    {
        // A finished input settles a WhenAny of Spindle tasks at once, letting go of the losers. A stale input further on
        // must be rejected before that: it threw while being let go of, after the pending inputs before it had been
        // taken from the caller (the async method forgotten, the signal's wait ended, the delay taken out of its wheel).
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var gate = new Promise();
        SpindleTask method = Await(gate);
        var signal = new Signal();
        SpindleTask wait = signal.WaitAsync();
        SpindleTask delay = wheel.Delay(TimeSpan.FromSeconds(1));
        AssertAwaitOnceError(() => SpindleTask.WhenAny(SpindleTask.CompletedTask, method, wait, delay, Consumed()));
        AssertAwaitOnceError(() => SpindleTask.WhenAny(new List<SpindleTask> { SpindleTask.CompletedTask, method, wait, delay, Consumed() }));

        Assert.True(signal.HasWaiter, "the signal's wait was ended");
        Assert.Equal(1, wheel.PendingCount);
        gate.SetResult();
        signal.Set();
        clock.Advance(TimeSpan.FromSeconds(1));
        method.GetAwaiter().GetResult(); // each is still the caller's, to await once
        wait.GetAwaiter().GetResult();
        delay.GetAwaiter().GetResult();
        Assert.False(signal.IsSet, "the caller's wait took the set");
    }

    [Fact]
    public void WhenAnyTyped_StaleInputBehindAFinishedOne_ThrowsBeforeLettingGoOfTheInputsBeforeIt()
    {
        var gate = new Promise<int>();
        SpindleTask<int> method = Await(gate);
        AssertAwaitOnceError(() => SpindleTask.WhenAny(new[] { SpindleTask.FromResult(1), method, Consumed() }));
        gate.SetResult(7);
        Assert.Equal(7, method.GetAwaiter().GetResult());
    }

    /// <summary>A pooled task (an async method's box) that has finished and not been read: readable exactly once.</summary>
    private static SpindleTask<int> Finished(int value)
    {
        var promise = new Promise<int>();
        SpindleTask<int> task = Await(promise);
        promise.SetResult(value);
        return task;
    }

    private static SpindleTask<int> FinishedFaulted(Exception error)
    {
        var promise = new Promise<int>();
        SpindleTask<int> task = Await(promise);
        promise.SetException(error);
        return task;
    }

    private static void AssertRepeatedInput(int index, int earlier, Action call)
    {
        InvalidOperationException ex = Assert.Throws<InvalidOperationException>(call);
        Assert.Contains($"index {index}", ex.Message, StringComparison.Ordinal);
        Assert.Contains($"index {earlier}", ex.Message, StringComparison.Ordinal);
        Assert.Contains("Preserve()", ex.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void WhenAll_SameFinishedPooledTaskTwice_ThrowsAtTheCall_AndConsumesNothing()
    {
        // Every input finished: no combinator. The first copy was read (consumed: the box went back to its pool), and the
        // second copy's await-once error became the combined task's failure, or hid behind an earlier input's failure.
        var error = new FormatException("the earlier input's own fault");
        SpindleTask<int> faulted = FinishedFaulted(error);
        SpindleTask<int> value = Finished(1);
        SpindleTask<int> twice = Finished(2);
        AssertRepeatedInput(2, 1, () => SpindleTask.WhenAll(value.AsSpindleTask(), twice.AsSpindleTask(), twice.AsSpindleTask()));
        AssertRepeatedInput(2, 1, () => SpindleTask.WhenAll(new[] { faulted, twice, twice }));
        AssertRepeatedInput(2, 1, () => SpindleTask.WhenAll(new[] { value, twice, twice }, new int[3]));
        AssertRepeatedInput(1, 0, () => SpindleTask.WhenAll(new List<SpindleTask> { twice, twice }));

        // Nothing was read: each task is still the caller's, to read once.
        Assert.Equal(1, value.GetAwaiter().GetResult());
        Assert.Equal(2, twice.GetAwaiter().GetResult());
        Assert.Same(error, Assert.Throws<FormatException>(() => faulted.GetAwaiter().GetResult()));
    }

    [Fact]
    public void WhenAll_ManyFinishedInputs_OneRepeated_ThrowsAtTheCall_AndConsumesNothing()
    {
        // Past the pairwise look (more than 16 inputs with a source), the repeat is found as well.
        SpindleTask<int>[] tasks = Enumerable.Range(0, 40).Select(Finished).ToArray();
        SpindleTask<int> kept = tasks[37];
        tasks[37] = tasks[5];
        AssertRepeatedInput(37, 5, () => SpindleTask.WhenAll(tasks));
        AssertRepeatedInput(37, 5, () => SpindleTask.WhenAny(tasks));
        tasks[37] = kept;
        Assert.Equal(Enumerable.Range(0, 40).ToArray(), SpindleTask.WhenAll(tasks).GetAwaiter().GetResult());
    }

    [Fact]
    public void WhenAny_SameTaskTwiceBehindAFinishedInput_ThrowsAtTheCall_AndLetsGoOfNothing()
    {
        // Settled at once by a finished input: a finished repeat was read twice (the second read's error became the
        // result when it was the winner), and a pending repeat was forgotten by its first copy before the second threw.
        SpindleTask<int> twice = Finished(2);
        AssertRepeatedInput(1, 0, () => SpindleTask.WhenAny(new[] { twice, twice }));
        var gate = new Promise<int>();
        SpindleTask<int> pending = Await(gate);
        AssertRepeatedInput(2, 1, () => SpindleTask.WhenAny(new[] { SpindleTask.FromResult(0), pending, pending }));

        Assert.Equal(2, twice.GetAwaiter().GetResult());
        gate.SetResult(7);
        Assert.Equal(7, pending.GetAwaiter().GetResult()); // not forgotten: still the caller's
    }

    [Fact]
    public void TupleForms_SameFinishedPooledTaskTwice_ThrowAtTheCall_NamingBothIndices_AndConsumeNothing()
    {
        // The typed tuple forms (2 to 8 tasks) always register with a combinator. A finished task passed twice was read
        // (consumed) at its first index and refused at its second with the await-once error, whose message ("was already
        // awaited, was passed to Forget(), or was let go of by a combinator") named neither the repeat nor the indices,
        // and the inputs before it were consumed too; the span forms refuse the same call naming both indices.
        var error = new FormatException("the earlier input's own fault");
        SpindleTask<int> faulted = FinishedFaulted(error);
        SpindleTask<int> value = Finished(1);
        SpindleTask<int> twice = Finished(2);
        AssertRepeatedInput(1, 0, () => SpindleTask.WhenAll(twice, twice));
        AssertRepeatedInput(2, 1, () => SpindleTask.WhenAll(faulted, twice, twice));
        AssertRepeatedInput(2, 0, () => SpindleTask.WhenAll(twice, value, twice, new WhenAllOptions { AggregateExceptions = true }));
        AssertRepeatedInput(7, 3, () => SpindleTask.WhenAll(value, faulted, SpindleTask.FromResult(3), twice,
            SpindleTask.FromResult(4), SpindleTask.FromResult(5), SpindleTask.FromResult(6), twice));
        AssertRepeatedInput(1, 0, () => SpindleTask.WhenAny(twice, twice));
        AssertRepeatedInput(2, 1, () => SpindleTask.WhenAny(value, twice, twice));

        // Nothing was read: each task is still the caller's, to read once.
        Assert.Equal(1, value.GetAwaiter().GetResult());
        Assert.Equal(2, twice.GetAwaiter().GetResult());
        Assert.Same(error, Assert.Throws<FormatException>(() => faulted.GetAwaiter().GetResult()));
    }

    [Fact]
    public void TupleForms_SamePendingPooledTaskTwice_ThrowAtTheCall_NamingBothIndices_AndRegisterNothing()
    {
        var gate = new Promise<int>();
        SpindleTask<int> pending = Await(gate);
        var other = new Promise<int>();
        AssertRepeatedInput(2, 0, () => SpindleTask.WhenAll(pending, other.Task, pending));
        AssertRepeatedInput(1, 0, () => SpindleTask.WhenAny(pending, pending));

        // Neither call took the pending task, nor the promise's: the caller still awaits them, once each.
        other.SetResult(3);
        Assert.Equal(3, other.Task.GetAwaiter().GetResult());
        gate.SetResult(7);
        Assert.Equal(7, pending.GetAwaiter().GetResult());
    }

    [Fact]
    public void TupleForms_SamePromiseTaskTwice_StillAllowedWhenFinished()
    {
        // A promise's task is not consumed by a read: as in the span forms, a finished one may be passed twice.
        var promise = new Promise<int>();
        promise.SetResult(5);
        Assert.Equal((5, 5), SpindleTask.WhenAll(promise.Task, promise.Task).GetAwaiter().GetResult());
        SpindleTask<int> preserved = Finished(3).Preserve();
        Assert.Equal((3, 3), SpindleTask.WhenAll(preserved, preserved).GetAwaiter().GetResult());
    }

    [Fact]
    public void WhenAll_SameFinishedPromiseTaskTwice_StillReadsItTwice()
    {
        // A promise's task is not consumed by a read: passing a finished one twice is allowed, as before.
        var promise = new Promise<int>();
        promise.SetResult(5);
        Assert.Equal(new[] { 5, 5 }, SpindleTask.WhenAll(new[] { promise.Task, promise.Task }).GetAwaiter().GetResult());
        Assert.Equal((0, 5), SpindleTask.WhenAny(new[] { promise.Task, promise.Task }).GetAwaiter().GetResult());
        SpindleTask<int> preserved = Finished(3).Preserve();
        Assert.Equal(new[] { 3, 3 }, SpindleTask.WhenAll(new[] { preserved, preserved }).GetAwaiter().GetResult());
    }

#if DEBUG
    [Fact]
    public void WhenAll_ManyCopiesOfOnePromiseTask_TheRepeatCheckStaysLinear()
    {
        // A finished promise's task may be read again until Reset (and a preserved task as often as needed): passing one
        // many times is allowed. Every copy has the same source and token, so in the repeat check's table each copy
        // landed after all the copies before it: n copies cost n²/2 compares (2,000 copies, about two million), a WhenAll
        // over a broadcast result that grew quadratically with the fan-out.
        const int copies = 2000;
        var promise = new Promise<int>();
        promise.SetResult(9);
        SpindleTask<int>[] tasks = Enumerable.Repeat(promise.Task, copies).ToArray();
        int probes = 0;
        int thread = Environment.CurrentManagedThreadId;
        Action count = () =>
        {
            if (Environment.CurrentManagedThreadId == thread)
            {
                probes++;
            }
        };
        Combine.TestHookRepeatProbe += count;
        try
        {
            Assert.Equal(Enumerable.Repeat(9, copies).ToArray(), SpindleTask.WhenAll(tasks).GetAwaiter().GetResult());
        }
        finally
        {
            Combine.TestHookRepeatProbe -= count;
        }
        Assert.True(probes <= copies, $"The repeat check compared {probes} table entries for {copies} inputs.");
    }
#endif

    [Fact]
    public void WhenAllAndWhenAny_SameFinishedUserSourceTwice_StillReadItTwice()
    {
        // A user's ISpindleSource need not be pooled: one whose result can be read any number of times (as the interface
        // allows for a source that is not pooled) was read twice before the repeat check, and must still be. The check is
        // for Spindle's own tasks, which a read consumes; a user's source that refuses a second read says so itself.
        var source = new RereadableUserSource(4);
        var task = new SpindleTask<int>(source, 0);
        Assert.Equal(new[] { 4, 4 }, SpindleTask.WhenAll(new[] { task, task }).GetAwaiter().GetResult());
        Assert.Equal((0, 4), SpindleTask.WhenAny(new[] { task, task }).GetAwaiter().GetResult());
        SpindleTask plain = task.AsSpindleTask();
        SpindleTask.WhenAll(plain, plain).GetAwaiter().GetResult();
        Assert.Equal(0, SpindleTask.WhenAny(plain, plain).GetAwaiter().GetResult());
    }

    /// <summary>A user's source, finished with <c>value</c>, that any number of reads may read (not pooled, never consumed).</summary>
    private sealed class RereadableUserSource : ISpindleSource<int>
    {
        private readonly int _value;

        public RereadableUserSource(int value) => _value = value;

        public SpindleTaskStatus GetStatus(short token) => SpindleTaskStatus.Succeeded;

        System.Threading.Tasks.Sources.ValueTaskSourceStatus System.Threading.Tasks.Sources.IValueTaskSource.GetStatus(short token)
            => System.Threading.Tasks.Sources.ValueTaskSourceStatus.Succeeded;

        System.Threading.Tasks.Sources.ValueTaskSourceStatus System.Threading.Tasks.Sources.IValueTaskSource<int>.GetStatus(short token)
            => System.Threading.Tasks.Sources.ValueTaskSourceStatus.Succeeded;

        public int GetResult(short token) => _value;

        void System.Threading.Tasks.Sources.IValueTaskSource.GetResult(short token) => GetResult(token);

        public void OnCompleted(Action<object?> continuation, object? state, short token) => continuation(state);

        void System.Threading.Tasks.Sources.IValueTaskSource.OnCompleted(Action<object?> continuation, object? state, short token,
            System.Threading.Tasks.Sources.ValueTaskSourceOnCompletedFlags flags) => continuation(state);

        void System.Threading.Tasks.Sources.IValueTaskSource<int>.OnCompleted(Action<object?> continuation, object? state, short token,
            System.Threading.Tasks.Sources.ValueTaskSourceOnCompletedFlags flags) => continuation(state);
    }

    [Fact]
    public void NewInputKinds_EmptyWhenAny_ThrowsArgumentException_EmptyWhenAll_CompletesAtOnce()
    {
        Assert.Equal("tasks", Assert.Throws<ArgumentException>(() => SpindleTask.WhenAny(ReadOnlySpan<ValueTask>.Empty)).ParamName);
        Assert.Throws<ArgumentException>(() => SpindleTask.WhenAny(ReadOnlySpan<ValueTask<int>>.Empty));
        Assert.Throws<ArgumentException>(() => SpindleTask.WhenAny(ReadOnlySpan<Task<int>>.Empty));
        Assert.Throws<ArgumentException>(() => SpindleTask.WhenAny(new List<Task<int>>()));
        Assert.Throws<ArgumentException>(() => SpindleTask.WhenAny(Enumerable.Empty<ValueTask>().Select(t => t)));
        Assert.Throws<ArgumentException>(() => SpindleTask.WhenAny(ReadOnlySpan<SpindleTask<int>>.Empty, System.Threading.CancellationToken.None));
        Assert.Throws<ArgumentException>(() => SpindleTask.WhenAny(ReadOnlySpan<Task>.Empty, System.Threading.CancellationToken.None));
        Assert.Equal(SpindleTaskStatus.Succeeded, SpindleTask.WhenAll(ReadOnlySpan<ValueTask>.Empty).Status);
        Assert.Equal(SpindleTaskStatus.Succeeded, SpindleTask.WhenAll(ReadOnlySpan<Task>.Empty, new WhenAllOptions { AggregateExceptions = true }).Status);
        Assert.Equal(SpindleTaskStatus.Succeeded, SpindleTask.WhenAll(ReadOnlySpan<ValueTask<int>>.Empty, Memory<int>.Empty).Status);
    }

    [Fact]
    public void NullTypedTask_InSpanOrSequence_ThrowsArgumentExceptionNamingTheIndex_BeforeConsumingAnything()
    {
        var pending = new TaskCompletionSource<int>();
        var list = new List<Task<int>?> { pending.Task, Task.FromResult(1), null };
        AssertNamesIndex(2, () => SpindleTask.WhenAll(list!));
        AssertNamesIndex(2, () => SpindleTask.WhenAny(list!));
        AssertNamesIndex(2, () => SpindleTask.WhenAll(list.Select(t => t)!));
        AssertNamesIndex(2, () => SpindleTask.WhenAll(list.ToArray()!, new int[3]));
        AssertNamesIndex(0, () => SpindleTask.WhenAny(new Task<int>[] { null!, pending.Task }, System.Threading.CancellationToken.None));
        AssertNamesIndex(1, () => SpindleTask.WhenAll(new Task[] { Task.CompletedTask, null! }, System.Threading.CancellationToken.None));
        AssertNamesIndex(1, () => SpindleTask.WhenAll(new Task[] { pending.Task, null! }, new WhenAllOptions { AggregateExceptions = true }));
        pending.SetResult(0);
    }

    [Fact]
    public void NullSequence_NewOverloads_ThrowArgumentNullException()
    {
        Assert.Equal("tasks", Assert.Throws<ArgumentNullException>(() => SpindleTask.WhenAll((IEnumerable<ValueTask>)null!)).ParamName);
        Assert.Equal("tasks", Assert.Throws<ArgumentNullException>(() => SpindleTask.WhenAll((IEnumerable<Task<int>>)null!)).ParamName);
        Assert.Equal("tasks", Assert.Throws<ArgumentNullException>(() => SpindleTask.WhenAll((IEnumerable<SpindleTask<int>>)null!)).ParamName);
        Assert.Equal("tasks", Assert.Throws<ArgumentNullException>(() => SpindleTask.WhenAny((IEnumerable<ValueTask<int>>)null!)).ParamName);
        Assert.Equal("tasks", Assert.Throws<ArgumentNullException>(() => SpindleTask.WhenAny((IEnumerable<Task<int>>)null!)).ParamName);
    }
}

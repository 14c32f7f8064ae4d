using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Sources;

/// <summary>
/// A user's <see cref="ISpindleSource"/> that runs the continuation it was handed twice (misuse its
/// <c>OnCompleted</c> contract forbids) gets an <see cref="InvalidOperationException"/> naming the misuse, on the thread
/// that runs it the second time, and the waiter is left alone. Before (leads49's lead 1, left open by section 45), the
/// second run resumed the awaiting method again: a method whose box was back in its pool ran its code again with default
/// locals (a Release build) or threw NullReferenceException (Debug); a box rented again by another call, or the same
/// method waiting at a later await, was resumed out of turn and faulted with the await-once error; a WhenAll counted the
/// input twice and completed early with a NullReferenceException; a preserved task faulted with one.
/// </summary>
public sealed class ContinuationRunTwiceTests
{
    private sealed class Counter
    {
        public int AfterFirstAwait;
        public int AfterSecondAwait;
    }

    private static async SpindleTask<int> AwaitBoth(SpindleTask<int> first, Promise? second, Counter counter)
    {
        int value = await first;
        Interlocked.Increment(ref counter.AfterFirstAwait);
        if (second is not null)
        {
            await second.Task;
            Interlocked.Increment(ref counter.AfterSecondAwait);
        }
        return value + 1;
    }

    private static void AssertRefused(Action secondRun)
    {
        InvalidOperationException error = Assert.Throws<InvalidOperationException>(secondRun);
        Assert.Contains("ran a continuation it had already run", error.Message, StringComparison.Ordinal);
    }

    /// <summary>Runs <paramref name="secondRun"/> on a thread of its own, as a source's late completion would, and asserts it was refused.</summary>
    private static void AssertRefusedOnAnotherThread(Action secondRun)
    {
        Exception? error = null;
        var thread = new Thread(() =>
        {
            try
            {
                secondRun();
            }
            catch (Exception ex)
            {
                error = ex;
            }
        });
        thread.Start();
        Assert.True(thread.Join(TimeSpan.FromSeconds(30)), "the second run did not return");
        InvalidOperationException refused = Assert.IsType<InvalidOperationException>(error);
        Assert.Contains("ran a continuation it had already run", refused.Message, StringComparison.Ordinal);
    }

    /// <summary>
    /// Runs <paramref name="run"/> on this thread and on another at once (a source completed from two threads that both
    /// take its continuation), and asserts that exactly one of the two runs was refused.
    /// </summary>
    private static void RunTwiceAtOnce_OneRefused(Action run, int round)
    {
        Exception? firstError = null;
        Exception? secondError = null;
        using var start = new Barrier(2);
        var thread = new Thread(() =>
        {
            start.SignalAndWait();
            try
            {
                run();
            }
            catch (Exception ex)
            {
                firstError = ex;
            }
        });
        thread.Start();
        start.SignalAndWait();
        try
        {
            run();
        }
        catch (Exception ex)
        {
            secondError = ex;
        }
        Assert.True(thread.Join(TimeSpan.FromSeconds(30)), $"round {round}: a run did not return");
        Exception only = Assert.Single(new[] { firstError, secondError }, e => e is not null)!;
        Assert.IsType<InvalidOperationException>(only);
    }

    [Fact]
    public void ASecondRun_AfterTheMethodFinishedAndItsBoxWentBack_IsRefused_AndRunsNoCodeOfTheMethod()
    {
        var counter = new Counter();
        var source = new RerunningSource();
        SpindleTask<int> method = AwaitBoth(source.Task, null, counter);
        source.Complete();
        Assert.Equal(43, method.GetAwaiter().GetResult()); // the read sends the box back to its pool

        AssertRefused(source.RunAgain);
        Assert.Equal(1, counter.AfterFirstAwait);
    }

    [Fact]
    public void ASecondRun_WhenTheBoxWasRentedAgainByAnotherCall_IsRefused_AndLeavesThatCallAlone()
    {
        var counter = new Counter();
        var source = new RerunningSource();
        SpindleTask<int> first = AwaitBoth(source.Task, null, counter);
        source.Complete();
        Assert.Equal(43, first.GetAwaiter().GetResult());

        // The next call of the same method on this thread rents the box back from the thread's pool cache.
        var otherCounter = new Counter();
        var ready = new Promise<int>();
        var gate = new Promise();
        SpindleTask<int> other = AwaitBoth(ready.Task, gate, otherCounter);
        ready.TrySetResult(9);
        Assert.Equal(1, otherCounter.AfterFirstAwait); // it waits at its second await, on the gate

        AssertRefusedOnAnotherThread(source.RunAgain);
        Assert.Equal(SpindleTaskStatus.Pending, other.Status);
        Assert.Equal(0, otherCounter.AfterSecondAwait);

        gate.TrySetResult();
        Assert.Equal(10, other.GetAwaiter().GetResult());
        Assert.Equal(1, otherCounter.AfterFirstAwait);
        Assert.Equal(1, otherCounter.AfterSecondAwait);
        Assert.Equal(1, counter.AfterFirstAwait);
    }

    [Fact]
    public void ASecondRun_WhileTheSameMethodWaitsAtALaterAwait_IsRefused_AndTheMethodResumesOnceThere()
    {
        var counter = new Counter();
        var source = new RerunningSource();
        var gate = new Promise();
        SpindleTask<int> method = AwaitBoth(source.Task, gate, counter);
        source.Complete();
        Assert.Equal(1, counter.AfterFirstAwait);

        AssertRefusedOnAnotherThread(source.RunAgain);
        Assert.Equal(SpindleTaskStatus.Pending, method.Status);

        gate.TrySetResult();
        Assert.Equal(43, method.GetAwaiter().GetResult());
        Assert.Equal(1, counter.AfterFirstAwait);
        Assert.Equal(1, counter.AfterSecondAwait);
    }

    [Fact]
    public void ASecondRun_OfAWhenAllInput_IsRefused_AndIsNotCountedAsAnotherInput()
    {
        var source = new RerunningSource();
        var other = new Promise<int>();
        SpindleTask<(int, int)> all = SpindleTask.WhenAll(source.Task, other.Task);
        source.Complete();

        AssertRefused(source.RunAgain);
        Assert.Equal(SpindleTaskStatus.Pending, all.Status); // before: Faulted (NullReferenceException), the promise still pending

        other.TrySetResult(5);
        Assert.Equal((42, 5), all.GetAwaiter().GetResult());
    }

    [Fact]
    public void ASecondRun_OfAPreservedTasksSource_IsRefused_AndTheOutcomeIsKept()
    {
        var source = new RerunningSource();
        SpindleTask<int> preserved = source.Task.Preserve();
        source.Complete();

        AssertRefused(source.RunAgain);
        Assert.Equal(SpindleTaskStatus.Succeeded, preserved.Status); // before: Faulted (NullReferenceException)
        Assert.Equal(42, preserved.GetAwaiter().GetResult());
    }

    [Fact]
    public async Task ASecondRun_OfAScopesChild_IsRefused_AndTheChildIsCountedOutOnce()
    {
        var scope = RerunningSource.ScopeWithChildAndSibling(out var source, out var sibling);
        Assert.Equal(2, scope.RunningChildren);
        source.Complete();
        Assert.Equal(1, scope.RunningChildren);

        AssertRefused(source.RunAgain);
        Assert.Equal(1, scope.RunningChildren); // the sibling still runs

        sibling.TrySetResult();
        await scope.WaitAsync();
        await scope.DisposeAsync();
    }

    /// <summary>
    /// review49: the scope's observer of a child went back to this thread's pool after the child's run, and the next
    /// child started on this thread rented it, so the late run found a waiting observer: it counted the sibling out while
    /// the sibling still ran (the scope could finish early), and the sibling's own completion was then refused, thrown at
    /// the code completing a Spindle promise. An observer registered on a user's source is no longer pooled.
    /// </summary>
    [Fact]
    public async Task ASecondRun_OfAScopesChild_AfterItsObserverWasRentedForTheNextChild_IsRefused_AndLeavesThatChildCounted()
    {
        var source = new RerunningSource();
        var scope = new TaskScope();
        scope.Run(_ => source.UntypedTask);
        source.Complete(); // the child is counted out, and its observer's holds are both dropped
        Assert.Equal(0, scope.RunningChildren);

        var sibling = new Promise();
        scope.Run(_ => sibling.Task); // the next child started on this thread
        Assert.Equal(1, scope.RunningChildren);

        AssertRefused(source.RunAgain);
        Assert.Equal(1, scope.RunningChildren); // the sibling still runs

        sibling.TrySetResult(); // its own completion counts it out, and its completer is not blamed
        Assert.Equal(0, scope.RunningChildren);
        await scope.WaitAsync();
        await scope.DisposeAsync();
    }

    /// <summary>
    /// review49: two runs of a scope child's continuation at once count the child out once and refuse the other: the
    /// observer's claim is an exchange, where a plain flag let both runs through the check.
    /// </summary>
    [Fact]
    public void TwoRunsRacing_OfAScopesChild_CountItOutOnce_AndRefuseTheOther()
    {
        const int Rounds = 1_000;
        for (int round = 0; round < Rounds; round++)
        {
            var scope = RerunningSource.ScopeWithChildAndSibling(out var source, out var sibling);
            RunTwiceAtOnce_OneRefused(source.Complete, round);
            Assert.Equal(1, scope.RunningChildren); // the sibling still runs
            sibling.TrySetResult();
            Assert.Equal(0, scope.RunningChildren);
            scope.WaitAsync().GetAwaiter().GetResult(); // every child has finished: it has completed
            scope.DisposeAsync().AsTask().GetAwaiter().GetResult();
        }
    }

    [Fact]
    public void TwoRunsRacing_ResumeTheMethodOnce_AndRefuseTheOther()
    {
        const int Rounds = 2_000;
        for (int round = 0; round < Rounds; round++)
        {
            var counter = new Counter();
            var source = new RerunningSource();
            SpindleTask<int> method = AwaitBoth(source.Task, null, counter);
            RunTwiceAtOnce_OneRefused(source.Complete, round);
            Assert.Equal(43, method.GetAwaiter().GetResult());
            Assert.Equal(1, counter.AfterFirstAwait);
        }
    }
}

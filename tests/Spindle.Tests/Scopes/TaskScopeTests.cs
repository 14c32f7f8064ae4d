using System;
using System.Collections.Concurrent;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Scopes;

public sealed class TaskScopeTests
{
    /// <summary>A child that waits until the scope's token is cancelled (or its gate is set), recording how it ended.</summary>
    private static async SpindleTask WaitForCancelOrGate(Signal gate, CancellationToken token, ConcurrentQueue<string> log, string name)
    {
        try
        {
            await gate.WaitAsync(token);
            log.Enqueue(name + ":done");
        }
        catch (OperationCanceledException)
        {
            log.Enqueue(name + ":canceled");
            throw;
        }
    }

    private static async SpindleTask FailAfter(Signal gate, Exception error)
    {
        await gate.WaitAsync();
        throw error;
    }

    [Fact]
    public async Task WaitAsync_AllChildrenSucceed_CompletesAfterTheLastChild()
    {
        await TestUtil.WithTimeout(Body());

        static async Task Body()
        {
            await using var scope = new TaskScope();
            var gates = new[] { new Signal(), new Signal(), new Signal() };
            var log = new ConcurrentQueue<string>();
            for (int i = 0; i < gates.Length; i++)
            {
                Signal gate = gates[i];
                string name = "c" + i;
                scope.Run(ct => WaitForCancelOrGate(gate, ct, log, name));
            }
            SpindleTask waiting = scope.WaitAsync();
            gates[0].Set();
            gates[2].Set();
            Assert.False(waiting.IsCompleted);
            Assert.Equal(1, scope.RunningChildren);
            gates[1].Set();
            await waiting;
            Assert.Equal(3, log.Count);
            Assert.All(log, e => Assert.EndsWith(":done", e, StringComparison.Ordinal));
        }
    }

    [Fact]
    public async Task Run_ChildFails_SiblingsAreCancelledAndTheFailureIsRethrownAsItself()
    {
        await TestUtil.WithTimeout(Body());

        static async Task Body()
        {
            var error = new InvalidTimeZoneException("boom");
            var log = new ConcurrentQueue<string>();
            var trigger = new Signal();
            var scope = new TaskScope();
            scope.Run(ct => WaitForCancelOrGate(new Signal(), ct, log, "sibling1"));
            scope.Run(ct => WaitForCancelOrGate(new Signal(), ct, log, "sibling2"));
            scope.Run(_ => FailAfter(trigger, error));
            trigger.Set();

            Exception thrown = await Assert.ThrowsAsync<InvalidTimeZoneException>(async () => await scope.WaitAsync());
            Assert.Same(error, thrown);
            Assert.True(scope.Token.IsCancellationRequested);
            Assert.Equal(new[] { "sibling1:canceled", "sibling2:canceled" }, log.OrderBy(x => x).ToArray());
            await scope.DisposeAsync(); // already delivered: does not throw again
        }
    }

    [Fact]
    public async Task WaitAsync_SeveralChildrenFail_AggregatesEveryFailure()
    {
        await TestUtil.WithTimeout(Body());

        static async Task Body()
        {
            var a = new FormatException("a");
            var b = new TimeoutException("b");
            var gate = new Signal();
            var gate2 = new Signal();
            await using var scope = new TaskScope();
            scope.Run(_ => FailAfter(gate, a));
            // b fails from its first line, before anything is cancelled: both failures are real, neither is a cancellation.
            scope.Run(_ => SpindleTask.FromException(b));
            gate.Set();
            gate2.Set();
            var aggregate = await Assert.ThrowsAsync<AggregateException>(async () => await scope.WaitAsync());
            Assert.Equal(2, aggregate.InnerExceptions.Count);
            Assert.Contains(a, aggregate.InnerExceptions);
            Assert.Contains(b, aggregate.InnerExceptions);
        }
    }

    [Fact]
    public async Task DisposeAsync_Early_CancelsWhatIsLeftAndWaitsForIt()
    {
        await TestUtil.WithTimeout(Body());

        static async Task Body()
        {
            var log = new ConcurrentQueue<string>();
            var finished = new Signal();
            int running;
            await using (var scope = new TaskScope())
            {
                scope.Run(ct => WaitForCancelOrGate(new Signal(), ct, log, "long"));
                scope.RunTask(async ct =>
                {
                    try
                    {
                        await Task.Delay(Timeout.Infinite, ct);
                    }
                    finally
                    {
                        log.Enqueue("bcl:ended");
                    }
                });
                running = scope.RunningChildren;
            }
            // Disposal returned: every child has finished, and cancellation is not a failure, so nothing was thrown.
            Assert.Equal(2, running);
            Assert.Contains("long:canceled", log);
            Assert.Contains("bcl:ended", log);
        }
    }

    [Fact]
    public async Task DisposeAsync_FailureNeverAwaited_IsRethrownByDisposal()
    {
        await TestUtil.WithTimeout(Body());

        static async Task Body()
        {
            var error = new FormatException("lost?");
            var scope = new TaskScope();
            scope.Run(_ => SpindleTask.FromException(error));
            _ = scope.WaitAsync(); // closed, never awaited
            Exception thrown = await Assert.ThrowsAsync<FormatException>(async () => await scope.DisposeAsync());
            Assert.Same(error, thrown);
        }
    }

    [Fact]
    public async Task NestedScopes_OuterCancellationReachesInnerChildren_InnerFailureFailsTheOuterChild()
    {
        await TestUtil.WithTimeout(Body());

        static async Task Body()
        {
            var log = new ConcurrentQueue<string>();
            var innerError = new InvalidTimeZoneException("inner");
            var trigger = new Signal();
            var outer = new TaskScope();
            outer.Run(async SpindleTask (ct) =>
            {
                await using var inner = new TaskScope(ct);
                inner.Run(innerCt => WaitForCancelOrGate(new Signal(), innerCt, log, "inner-sibling"));
                inner.Run(_ => FailAfter(trigger, innerError));
                await inner.WaitAsync();
            });
            outer.Run(ct => WaitForCancelOrGate(new Signal(), ct, log, "outer-sibling"));
            trigger.Set();

            Exception thrown = await Assert.ThrowsAsync<InvalidTimeZoneException>(async () => await outer.WaitAsync());
            Assert.Same(innerError, thrown);
            Assert.Contains("inner-sibling:canceled", log);
            Assert.Contains("outer-sibling:canceled", log);

            // And cancelling an outer scope reaches a nested scope's children.
            var log2 = new ConcurrentQueue<string>();
            using var cts = new CancellationTokenSource();
            var top = new TaskScope(cts.Token);
            top.Run(async SpindleTask (ct) =>
            {
                await using var nested = new TaskScope(ct);
                nested.Run(nct => WaitForCancelOrGate(new Signal(), nct, log2, "deep"));
                await nested.WaitAsync();
            });
            cts.Cancel();
            await top.DisposeAsync();
            Assert.Equal(new[] { "deep:canceled" }, log2.ToArray());
        }
    }

    [Fact]
    public async Task NoChildOutlivesItsScope_ManyChildrenOnWorkers_AllFinishedWhenDisposalReturns()
    {
        await TestUtil.WithTimeout(Body());

        static async Task Body()
        {
            const int Children = 200;
            int finished = 0;
            await using (var scope = new TaskScope())
            {
                for (int i = 0; i < Children; i++)
                {
                    scope.Run(async SpindleTask (ct) =>
                    {
                        await Spindle.Yield();
                        Thread.SpinWait(200);
                        Interlocked.Increment(ref finished);
                    });
                }
                await scope.WaitAsync();
            }
            Assert.Equal(Children, Volatile.Read(ref finished));
        }
    }

    [Fact]
    public async Task Run_BadInput_ThrowsAndLeavesTheScopeUsable()
    {
        var scope = new TaskScope();
        Assert.Throws<ArgumentNullException>(() => scope.Run((Func<CancellationToken, SpindleTask>)null!));
        Assert.Throws<ArgumentNullException>(() => scope.RunTask(null!));
        scope.Run(_ => SpindleTask.CompletedTask);
        await TestUtil.WithTimeout(scope.WaitAsync().AsTask());
        var e = Assert.Throws<InvalidOperationException>(() => scope.Run(_ => SpindleTask.CompletedTask));
        Assert.Contains("no longer accepts children", e.Message, StringComparison.Ordinal);
        await scope.DisposeAsync();
    }

    // A child that returned null failed the scope with "returned null instead of a task", naming no fix.
    [Fact]
    public async Task RunTask_ChildReturnsNull_FailsTheScopeWithAMessageNamingTheFix()
    {
        var scope = new TaskScope();
        scope.RunTask(_ => null!);
        Assert.Equal(0, scope.RunningChildren);
        InvalidOperationException e = await Assert.ThrowsAsync<InvalidOperationException>(async () => await scope.DisposeAsync());
        Assert.Contains("Task.CompletedTask", e.Message, StringComparison.Ordinal);
    }

    [Fact]
    public async Task Run_ChildThrowsSynchronously_CountsAsAFailure()
    {
        var scope = new TaskScope();
        var error = new FormatException("sync");
        scope.Run(_ => throw error);
        Exception thrown = await Assert.ThrowsAsync<FormatException>(async () => await scope.DisposeAsync());
        Assert.Same(error, thrown);
    }

    [Fact]
    public async Task RunTask_ChildFaultsWithSeveralExceptions_EveryOneIsKept()
    {
        // A BCL task can fault with several exceptions (a Task.WhenAll, a Parallel.ForEachAsync): Task.WhenAll keeps every
        // one of them, and so must a scope, which promises that no failure is lost.
        var a = new FormatException("a");
        var b = new InvalidCastException("b");
        var c = new ArithmeticException("c");
        var scope = new TaskScope();
        scope.RunTask(_ => Task.WhenAll(Task.FromException(a), Task.FromException(b)));
        scope.Run(_ => SpindleTask.FromException(c));
        Exception? thrown = await Record.ExceptionAsync(() => TestUtil.WithTimeout(scope.WaitAsync()));
        var all = Assert.IsType<AggregateException>(thrown);
        Assert.Equal(3, all.InnerExceptions.Count);
        Assert.Contains(a, all.InnerExceptions);
        Assert.Contains(b, all.InnerExceptions);
        Assert.Contains(c, all.InnerExceptions);
        await scope.DisposeAsync();
    }

    /// <summary>
    /// A crawler's shape: the scope is awaited at once, and each child starts the next level's children into the same
    /// scope. WaitAsync waits for all of them (before, a child started after WaitAsync was refused, which failed the
    /// scope and cancelled everything); once the last has finished, the scope takes no more.
    /// </summary>
    [Fact]
    public async Task ChildrenStartMoreChildrenAfterWaitAsync_TheScopeWaitsForAll_ThenTakesNoMore()
    {
        var scope = new TaskScope();
        int visited = 0;
        var gate = new Promise();
        async SpindleTask Visit(int depth, CancellationToken ct)
        {
            await gate.Task.Preserve();
            Interlocked.Increment(ref visited);
            if (depth < 5)
            {
                scope.Run(c => Visit(depth + 1, c));
                scope.Run(c => Visit(depth + 1, c));
            }
            await Spindle.Yield();
        }
        scope.Run(ct => Visit(0, ct));
        SpindleTask wait = scope.WaitAsync(); // closes the scope before any child has started another
        Assert.False(wait.IsCompleted);
        gate.SetResult();
        await TestUtil.WithTimeout(wait);
        Assert.Equal(63, Volatile.Read(ref visited)); // 1 + 2 + 4 + 8 + 16 + 32: every level, none refused
        Assert.Equal(0, scope.RunningChildren);
        var e = Assert.Throws<InvalidOperationException>(() => scope.Run(_ => SpindleTask.CompletedTask));
        Assert.Contains("no longer accepts children", e.Message, StringComparison.Ordinal);
        await scope.DisposeAsync();
    }

    /// <summary>A child started after WaitAsync that fails is a failure of the scope like any other, and cancels the rest.</summary>
    [Fact]
    public async Task AChildStartedAfterWaitAsyncFails_WaitAsyncRethrowsIt_AndTheSiblingsAreCancelled()
    {
        var scope = new TaskScope();
        var gate = new Promise();
        bool siblingCancelled = false;
        scope.Run(async ct =>
        {
            await gate.Task;
            scope.Run(async _ =>
            {
                await Spindle.Yield();
                throw new TimeoutException("late child");
            });
            try
            {
                await Spindle.Delay(TimeSpan.FromMinutes(5), ct);
            }
            catch (OperationCanceledException)
            {
                siblingCancelled = true;
                throw;
            }
        });
        SpindleTask wait = scope.WaitAsync();
        gate.SetResult();
        var e = await Assert.ThrowsAsync<TimeoutException>(() => TestUtil.WithTimeout(wait));
        Assert.Equal("late child", e.Message);
        Assert.True(siblingCancelled);
        await scope.DisposeAsync();
    }

    /// <summary>Disposal still closes the scope at once: a child started once it has begun is refused, and never called.</summary>
    [Fact]
    public async Task RunWhileDisposing_IsRefused_EvenWithChildrenRunning()
    {
        var scope = new TaskScope();
        var gate = new Promise();
        scope.Run(async _ => await gate.Task);
        System.Threading.Tasks.ValueTask disposal = scope.DisposeAsync(); // cancels, then waits for the child
        bool called = false;
        var e = Assert.Throws<InvalidOperationException>(() => scope.Run(_ => { called = true; return default; }));
        Assert.Contains("being disposed", e.Message, StringComparison.Ordinal);
        Assert.False(called);
        gate.SetResult();
        await TestUtil.WithTimeout(disposal.AsTask());
    }

    /// <summary>
    /// The outer token cancelled after every child had finished, and before WaitAsync: the work was done, so WaitAsync
    /// succeeds (from a review: the cancellation was sampled when WaitAsync completed the scope, not when the last child
    /// finished). Cancelled while a child still ran, it is canceled.
    /// </summary>
    [Fact]
    public void OuterTokenCancelledAfterTheLastChildFinished_WaitAsyncSucceeds_CancelledBefore_ItIsCanceled()
    {
        using var late = new CancellationTokenSource();
        var done = new TaskScope(late.Token);
        done.Run(_ => SpindleTask.CompletedTask);
        late.Cancel();
        SpindleTask finished = done.WaitAsync();
        Assert.Equal(SpindleTaskStatus.Succeeded, finished.Status);
        finished.GetAwaiter().GetResult();

        using var early = new CancellationTokenSource();
        var cut = new TaskScope(early.Token);
        var gate = new Promise();
        cut.Run(async _ => await gate.Task);
        early.Cancel();
        gate.SetResult(); // the child ignores the token and finishes its work, but after the cancellation
        SpindleTask canceled = cut.WaitAsync();
        Assert.Equal(SpindleTaskStatus.Canceled, canceled.Status);
        Assert.ThrowsAny<OperationCanceledException>(() => canceled.GetAwaiter().GetResult());
    }

    /// <summary>
    /// A child that answers the token given at the scope's creation itself (captured from the caller, as
    /// <c>Task.Delay(..., ct)</c> does) registered on it after the scope did, so its cancellation callback runs first (a
    /// token runs its callbacks last registered, first run), and its task may end, inline, before the scope's own token
    /// has been cancelled. The documented rule is "an OperationCanceledException while the scope's token is cancelled
    /// (whichever token it carries) is not a failure ... after the token given at creation was cancelled". Before the fix
    /// (found by a review), that child's cancellation was kept as a failure: WaitAsync faulted instead of completing as
    /// canceled, and disposal threw it.
    /// </summary>
    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task AChildAnsweringTheCreationTokenItself_IsCancelled_NotFailed(bool bclChild)
    {
        await TestUtil.WithTimeout(Body(bclChild));

        static async Task Body(bool bclChild)
        {
            using var outer = new CancellationTokenSource();
            var scope = new TaskScope(outer.Token);
            if (bclChild)
            {
                var bcl = new TaskCompletionSource<bool>(); // continuations inline, as a Task.Delay's are
                outer.Token.Register(() => bcl.TrySetCanceled(outer.Token));
                scope.RunTask(_ => bcl.Task);
            }
            else
            {
                var promise = new Promise();
                outer.Token.Register(() => promise.TrySetCanceled(outer.Token));
                scope.Run(_ => promise.Task);
            }
            // Without a synchronization context (xunit installs one), as in a service: a BCL task then runs the
            // scope's continuation inline, inside the token's callback.
            SynchronizationContext? context = SynchronizationContext.Current;
            SynchronizationContext.SetSynchronizationContext(null);
            try
            {
                outer.Cancel();
            }
            finally
            {
                SynchronizationContext.SetSynchronizationContext(context);
            }
            Assert.Equal(0, scope.RunningChildren);

            SpindleTask wait = scope.WaitAsync();
            Assert.Equal(SpindleTaskStatus.Canceled, wait.Status);
            var canceled = Assert.ThrowsAny<OperationCanceledException>(() => wait.GetAwaiter().GetResult());
            Assert.Equal(outer.Token, canceled.CancellationToken);
            await scope.DisposeAsync(); // disposal does not throw a cancellation
        }
    }

    private sealed class ContinuationFault : Exception;

    /// <summary>
    /// A child started after WaitAsync whose completion is the scope's last (its delegate finished the only other child,
    /// and it returned at once) completes the scope inside Run, which runs WaitAsync's continuations inline. One that
    /// throws (a raw awaiter callback) reaches Run's caller, as from any completer, and the child is counted out once:
    /// before (from a review), Run took that exception for the child's own failure and counted the child out a second
    /// time (RunningChildren -1, and a failure recorded after the scope had completed).
    /// </summary>
    [Fact]
    public void ContinuationOfTheScopesCompletionThrowsInsideRun_TheChildIsCountedOutOnce()
    {
        var scope = new TaskScope();
        var gate = new Promise();
        scope.Run(async _ => await gate.Task);
        SpindleTask wait = scope.WaitAsync();
        wait.GetAwaiter().UnsafeOnCompleted(() => throw new ContinuationFault());
        Assert.Throws<ContinuationFault>(() => scope.Run(_ =>
        {
            gate.SetResult(); // the other child finishes: this one is now the last
            return SpindleTask.CompletedTask;
        }));
        Assert.Equal(0, scope.RunningChildren);
        Assert.Equal(SpindleTaskStatus.Succeeded, wait.Status); // no failure recorded after the scope completed
        wait.GetAwaiter().GetResult();
    }
}

using System;
using System.Runtime.CompilerServices;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Threading;

/// <summary>
/// Spindle.Run's forms given a state (as the BCL's <c>Task.Factory.StartNew(Action&lt;object?&gt;, object?)</c>): the work
/// gets the state on a worker, a static lambda with its state allocates nothing in steady state (a capturing lambda
/// allocates a closure and a delegate per call), and the pooled item lets go of the state once the work has started.
/// Run alone: the thread checks, as in <see cref="SpindleRunTests"/>.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class RunWithStateTests
{
    private sealed class Session
    {
        public int Handled;
        public string? Thread;
    }

    [Fact]
    public async Task EveryForm_GivesTheWorkItsState_OnAWorker()
    {
        var session = new Session();
        await TestUtil.WithTimeout(Spindle.Run(static s =>
        {
            var x = (Session)s!;
            x.Handled++;
            x.Thread = Thread.CurrentThread.Name;
        }, session));
        Assert.Equal(1, session.Handled);
        Assert.StartsWith("Spindle worker", session.Thread, StringComparison.Ordinal);

        Assert.Equal(2, await TestUtil.WithTimeout(Spindle.Run(static s => ++((Session)s!).Handled, session)));

        using var cts = new CancellationTokenSource();
        await TestUtil.WithTimeout(Spindle.Run(static async s =>
        {
            Assert.True(TestUtil.OnSpindleWorker);
            await Spindle.Yield();
            ((Session)s!).Handled++;
        }, session, cts.Token));
        Assert.Equal(3, session.Handled);

        Assert.Equal(4, await TestUtil.WithTimeout(Spindle.Run(static async s =>
        {
            Assert.True(TestUtil.OnSpindleWorker);
            await Spindle.Yield();
            return ++((Session)s!).Handled;
        }, session)));

        // A null state is a state like any other.
        Assert.True(await TestUtil.WithTimeout(Spindle.Run(static s => s is null, null)));
    }

    [Fact]
    public async Task Failures_SurfaceAtTheAwait()
    {
        await Assert.ThrowsAsync<InvalidOperationException>(
            () => TestUtil.WithTimeout(Spindle.Run(static s => throw new InvalidOperationException((string)s!), "action")));
        InvalidOperationException ex = await Assert.ThrowsAsync<InvalidOperationException>(
            () => TestUtil.WithTimeout(Spindle.Run((Func<object?, int>)(static s => throw new InvalidOperationException((string)s!)), "function")));
        Assert.Equal("function", ex.Message);
        await Assert.ThrowsAsync<InvalidOperationException>(
            () => TestUtil.WithTimeout(Spindle.Run(static async s =>
            {
                await Spindle.Yield();
                throw new InvalidOperationException((string)s!);
            }, "async")));
    }

    [Fact]
    public void NullDelegate_ThrowsArgumentNull_AndQueuesNothing()
    {
        Assert.Equal("action", Assert.Throws<ArgumentNullException>(() => Spindle.Run((Action<object?>)null!, 1)).ParamName);
        Assert.Equal("function", Assert.Throws<ArgumentNullException>(() => Spindle.Run((Func<object?, int>)null!, 1)).ParamName);
        Assert.Equal("function", Assert.Throws<ArgumentNullException>(() => Spindle.Run((Func<object?, SpindleTask>)null!, 1)).ParamName);
        Assert.Equal("function", Assert.Throws<ArgumentNullException>(() => Spindle.Run((Func<object?, SpindleTask<int>>)null!, 1)).ParamName);
    }

    [Fact]
    public void CancelledToken_GivesACanceledTask_AndTheWorkNeverRuns()
    {
        var session = new Session();
        var token = new CancellationToken(canceled: true);
        SpindleTask[] tasks =
        [
            Spindle.Run(static s => ((Session)s!).Handled++, session, token),
            Spindle.Run(static s => ((Session)s!).Handled++ + 1, session, token),
            Spindle.Run(static s => { ((Session)s!).Handled++; return SpindleTask.CompletedTask; }, session, token),
            Spindle.Run(static s => { ((Session)s!).Handled++; return SpindleTask.FromResult(1); }, session, token),
        ];
        foreach (SpindleTask task in tasks)
        {
            Assert.Equal(SpindleTaskStatus.Canceled, task.Status);
            Assert.ThrowsAny<OperationCanceledException>(() => task.GetAwaiter().GetResult());
        }
        Assert.Equal(0, session.Handled);
    }

    [Fact]
    public void SteadyState_AllocatesNothing()
    {
        using var cts = new CancellationTokenSource();
        var session = new Session();
        Action<object?> action = static s => ((Session)s!).Handled++;
        Func<object?, int> function = static s => ((Session)s!).Handled;
        Func<object?, SpindleTask> asyncAction = static s => SpindleTask.CompletedTask;
        Func<object?, SpindleTask<int>> asyncFunction = static s => SpindleTask.FromResult(((Session)s!).Handled);

        TestUtil.AssertSteadyStateAllocatesNothing(_ =>
        {
            Spindle.Run(action, session).GetAwaiter().GetResult();
            Spindle.Run(function, session).GetAwaiter().GetResult();
            Spindle.Run(asyncAction, session).GetAwaiter().GetResult();
            Spindle.Run(asyncFunction, session).GetAwaiter().GetResult();
            Spindle.Run(action, session, cts.Token).GetAwaiter().GetResult();
            Spindle.Run(function, session, cts.Token).GetAwaiter().GetResult();
            Spindle.Run(asyncAction, session, cts.Token).GetAwaiter().GetResult();
            Spindle.Run(asyncFunction, session, cts.Token).GetAwaiter().GetResult();
        }, 2_000);
        Assert.Equal(0, Scopes.TokenRegistrationLeakTests.RegistrationCount(cts));
    }

    /// <summary>
    /// The item marks a use without a state with a sentinel in its state field, and a cancelable use with its token (no
    /// flags of their own, stop 54): one pooled item, rented again by each run, gives each use its own form (a null state
    /// is still a state; a use without one gets none), and a cancelable run that started leaves no mark on the next.
    /// </summary>
    [Fact]
    public void ThePooledItem_ReusedAcrossForms_GivesEachUseItsOwnStateAndToken()
    {
        using var cts = new CancellationTokenSource();
        var marker = new object();
        Func<object?, object?> withState = static s => s ?? "null state";
        Func<object?> withoutState = () => marker;
        ISpindleSource? item = null;

        object? RunAndRead(SpindleTask<object?> task)
        {
            // Read on this thread: the item goes back to this thread's pool slot, and the next run rents it again.
            item ??= task._source;
            Assert.Same(item, task._source);
            TestUtil.SpinUntil(() => task.IsCompleted);
            return task.GetAwaiter().GetResult();
        }

        for (int round = 0; round < 3; round++)
        {
            Assert.Equal("null state", RunAndRead(Spindle.Run(withState, null)));
            Assert.Same(marker, RunAndRead(Spindle.Run(withoutState)));
            Assert.Equal("a", RunAndRead(Spindle.Run(withState, "a", cts.Token)));
            Assert.Same(marker, RunAndRead(Spindle.Run(withoutState)));
            Assert.Same(marker, RunAndRead(Spindle.Run(withoutState, cts.Token)));
            Assert.Equal("b", RunAndRead(Spindle.Run(withState, "b")));
        }
        cts.Cancel(); // the started runs dropped their registrations: nothing of theirs runs now
        Assert.Equal(0, Scopes.TokenRegistrationLeakTests.RegistrationCount(cts));
    }

    [Fact]
    public async Task ThePooledItem_LetsGoOfTheState_OnceTheWorkHasRun()
    {
        WeakReference state = await RunOnceWithAState();
        for (int i = 0; i < 5 && state.IsAlive; i++)
        {
            GC.Collect();
            GC.WaitForPendingFinalizers();
        }
        Assert.False(state.IsAlive, "the state of a finished run is still reachable: a pooled item kept it");
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    private static async Task<WeakReference> RunOnceWithAState()
    {
        var session = new Session();
        await TestUtil.WithTimeout(Spindle.Run(static s => ((Session)s!).Handled++, session));
        return new WeakReference(session);
    }
}

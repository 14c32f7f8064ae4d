using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Scopes;

/// <summary>
/// What starting a scope's child costs: a server starts a scope with a few children per session, hundreds of thousands
/// at a restart (stop 40's startup review). Once the pools are warm, a child's start allocates nothing: its async
/// method's box is pooled, and so is the observer that counts it out of its scope. Measured with the calling thread's
/// allocation counter (see <see cref="Tasks.AllocationTests"/>); run alone.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class TaskScopeAllocationTests
{
    private static async SpindleTask AwaitPromise(Promise promise) => await promise.Task;

    [Fact]
    public async Task Run_AChildThatSuspends_AllocatesNothingInSteadyState()
    {
        var promise = new Promise();
        Func<CancellationToken, SpindleTask> child = _ => AwaitPromise(promise); // made once: the closure is the caller's
        var scope = new TaskScope();
        TestUtil.AssertSteadyStateAllocatesNothing(i =>
        {
            promise.Reset();
            scope.Run(child); // suspends on the promise: the scope observes a pending child
            if (scope.RunningChildren != 1)
            {
                throw new InvalidOperationException("the child did not stay pending");
            }
            promise.SetResult(); // the child finishes inline, and its observer counts it out
            if (scope.RunningChildren != 0)
            {
                throw new InvalidOperationException("the child was not counted out");
            }
        }, 1_000);
        await TestUtil.WithTimeout(scope.WaitAsync());
        await scope.DisposeAsync();
    }

    private sealed class Session
    {
        public readonly Promise Inbox = new();
        public CancellationToken Seen;
    }

    private static async SpindleTask AwaitInbox(Session session, CancellationToken token)
    {
        session.Seen = token;
        await session.Inbox.Task;
    }

    [Fact]
    public async Task Run_WithAState_GivesTheChildItsStateAndToken_AndAllocatesNothingInSteadyState()
    {
        // A child per session, started by a static lambda given the session: no closure per child, where
        // `scope.Run(ct => AwaitInbox(session, ct))` allocates one for each.
        var sessions = new[] { new Session(), new Session(), new Session() };
        var scope = new TaskScope();
        TestUtil.AssertSteadyStateAllocatesNothing(i =>
        {
            Session session = sessions[i % sessions.Length];
            session.Inbox.Reset();
            scope.Run(static (s, ct) => AwaitInbox(s, ct), session);
            if (scope.RunningChildren != 1 || session.Seen != scope.Token)
            {
                throw new InvalidOperationException("the child did not start with its state and the scope's token, or did not stay pending");
            }
            session.Inbox.SetResult();
            if (scope.RunningChildren != 0)
            {
                throw new InvalidOperationException("the child was not counted out");
            }
        }, 1_000);
        await TestUtil.WithTimeout(scope.WaitAsync());
        await scope.DisposeAsync();
    }

    [Fact]
    public async Task Run_WithAState_NullChild_IsRefused_AndAThrowingChildFailsTheScope()
    {
        var scope = new TaskScope();
        Assert.Equal("child", Assert.Throws<ArgumentNullException>(() => scope.Run((Func<int, CancellationToken, SpindleTask>)null!, 1)).ParamName);
        Assert.Equal(0, scope.RunningChildren);
        scope.Run(static (int code, CancellationToken _) => throw new InvalidOperationException("child " + code), 7);
        InvalidOperationException ex = await Assert.ThrowsAsync<InvalidOperationException>(async () => await TestUtil.WithTimeout(scope.WaitAsync()));
        Assert.Equal("child 7", ex.Message);
        Assert.True(scope.Token.IsCancellationRequested);
        await scope.DisposeAsync();
    }

    [Fact]
    public async Task ADisposalThatWaits_StillWaitsForEveryChild()
    {
        // The promise a first disposal waits on is made only when it has to wait; made then, it must still be completed
        // by the last child's end (and a scope that had finished needs none).
        var gate = new Promise();
        var scope = new TaskScope();
        int ended = 0;
        scope.Run(async ct =>
        {
            try
            {
                await gate.Task; // ignores the token: disposal has to wait for it
            }
            finally
            {
                Interlocked.Increment(ref ended);
            }
        });
        ValueTask disposal = scope.DisposeAsync();
        Assert.False(disposal.IsCompleted);
        Assert.True(scope.Token.IsCancellationRequested);
        gate.SetResult();
        await TestUtil.WithTimeout(disposal.AsTask());
        Assert.Equal(1, Volatile.Read(ref ended));

        var finished = new TaskScope();
        finished.Run(static _ => SpindleTask.CompletedTask);
        await TestUtil.WithTimeout(finished.WaitAsync());
        ValueTask quick = finished.DisposeAsync();
        Assert.True(quick.IsCompletedSuccessfully);
        await quick;
    }
}

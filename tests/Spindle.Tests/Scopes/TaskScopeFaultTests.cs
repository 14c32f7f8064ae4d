using System;
using System.Linq;
using System.Collections.Concurrent;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Scopes;

/// <summary>
/// A scope never lets a child outlive it, whatever the children do wrong: a callback on the scope's token that throws
/// during disposal, and a child whose task cannot be awaited. Both failed before their fix (found by a review). Run
/// alone: they watch the process-wide UnobservedException event.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class TaskScopeFaultTests
{
    [Fact]
    public async Task DisposeAsync_ACallbackOnTheScopeTokenThrows_DisposalStillWaitsForTheChild_AndTheCallbackFaultIsReported()
    {
        var callbackFault = new InvalidOperationException("a cancellation callback failed");
        var watch = UnobservedReports.Start(UnobservedReports.Own.Instances(callbackFault)); // kept: an aggregate of it too
        try
        {
            var gate = new Signal();
            int finished = 0;
            var scope = new TaskScope();
            scope.Run(ct => Child(ct, gate, callbackFault, () => Volatile.Write(ref finished, 1)));
            // Disposal must wait for the child, which ignores the token: it is let go a little later.
            _ = Task.Delay(200).ContinueWith(_ => gate.Set(), TaskScheduler.Default);

            await TestUtil.WithTimeout(scope.DisposeAsync().AsTask(), 10);

            Assert.Equal(1, Volatile.Read(ref finished));
            Assert.Equal(0, scope.RunningChildren);
            var aggregate = Assert.IsType<AggregateException>(watch.Reports.LastOrDefault());
            Assert.IsType<InvalidOperationException>(Assert.Single(aggregate.InnerExceptions));
        }
        finally
        {
            watch.Dispose();
        }

        static async SpindleTask Child(CancellationToken ct, Signal gate, Exception callbackFault, Action done)
        {
            ct.Register(() => throw callbackFault);
            await gate.WaitAsync(); // does not answer the token: disposal must wait for it
            done();
        }
    }

    [Fact]
    public async Task Run_ChildReturnsATaskThatIsAlreadyAwaited_CountsAsAFailedChild_AndTheScopeCompletes()
    {
        var p = new Promise();
        SpindleTask t = p.Task;
        t.Forget(); // t has its one awaiter now
        var scope = new TaskScope();
        scope.Run(_ => t); // the await-once error is the child's failure, not Run's
        p.SetResult();

        Exception? error = await Record.ExceptionAsync(() => TestUtil.WithTimeout(scope.WaitAsync(), 10));

        Assert.Equal(0, scope.RunningChildren);
        var failure = Assert.IsType<InvalidOperationException>(error);
        Assert.Contains("Preserve", failure.Message, StringComparison.Ordinal);
        Assert.True(scope.Token.IsCancellationRequested); // the failure cancelled the (absent) siblings, as any child failure does
        await scope.DisposeAsync();
    }

    /// <summary>
    /// A scope's WaitAsync can be read again once it has completed, so Forget() may meet its one completion twice (two
    /// calls forgetting the scope's wait). Each reported the child's failure again; it is reported once, as a promise's
    /// fault is (Forget's contract: once per completion).
    /// </summary>
    [Fact]
    public void WaitAsync_ForgottenTwiceAfterAChildFailed_ReportsTheFailureOnce()
    {
        var error = new InvalidTimeZoneException("the child's failure");
        var scope = new TaskScope();
        scope.Run(_ => SpindleTask.FromException(error));
        ConcurrentQueue<Exception> reported = UnobservedReports.Observe(UnobservedReports.Own.Instances(error), () =>
        {
            scope.WaitAsync().Forget();
            scope.WaitAsync().Forget();
        });
        Assert.Single(reported, e => ReferenceEquals(e, error));
    }
    /// <summary>
    /// A scope's wait that nobody awaits (it lost a WhenAny to a timeout, or was forgotten), then disposal, which cancels
    /// the children and waits for them: a child's failure is rethrown by disposal, as documented, and must not also reach
    /// UnobservedException (the brief of every report: exactly once). Before the fix (found by a review), disposal threw
    /// it, and then the scope's completion let the loser's (or Forget's) read report it again, because disposal's
    /// delivery did not claim the completion's one fault report.
    /// </summary>
    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public void WaitAsync_NotAwaited_ThenDisposal_TheFailureIsDeliveredOnce(bool forget)
    {
        var error = new InvalidTimeZoneException("the child's failure");
        var scope = new TaskScope();
        var child = new Promise();
        scope.Run(_ => child.Task); // ignores the token
        Exception? thrown = null;
        ConcurrentQueue<Exception> reported = UnobservedReports.Observe(UnobservedReports.Own.Instances(error), () =>
        {
            if (forget)
            {
                scope.WaitAsync().Forget();
            }
            else
            {
                var other = new Promise();
                SpindleTask<int> any = SpindleTask.WhenAny(scope.WaitAsync(), other.Task);
                other.SetResult(); // the scope's wait loses (to a timeout, say)
                Assert.Equal(1, any.GetAwaiter().GetResult());
            }
            ValueTask disposal = scope.DisposeAsync(); // cancels the child and waits for it
            Assert.False(disposal.IsCompleted);
            child.SetException(error);
            Assert.True(disposal.IsCompleted);
            thrown = Record.Exception(() => disposal.GetAwaiter().GetResult());
        });
        Assert.Same(error, thrown);
        Assert.DoesNotContain(reported, e => ReferenceEquals(e, error));
    }
}

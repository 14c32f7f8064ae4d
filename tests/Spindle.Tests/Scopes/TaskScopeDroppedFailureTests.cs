using System;
using System.Collections.Concurrent;
using System.Linq;
using System.Runtime.CompilerServices;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Scopes;

/// <summary>
/// A child's failure is never lost. Disposal without <see cref="TaskScope.WaitAsync"/> rethrows the failures kept so far
/// (and any a cancelled child has while it ends, other than its cancellation); a scope that is neither awaited nor
/// disposed and is dropped reports them to <see cref="Spindle.UnobservedException"/> when it is collected, as a job's
/// unobserved failure is (and as the BCL reports a faulted task nobody observed). Before (leads49's lead 3), such a scope
/// kept them in a list that went with it to the GC, and nothing was reported.
/// </summary>
public sealed class TaskScopeDroppedFailureTests
{
    private const int CollectionTries = 20;

    [MethodImpl(MethodImplOptions.NoInlining)]
    private static void DropAScopeWithAFailedChild(Exception error)
    {
        var scope = new TaskScope();
        scope.Run(_ => throw error);
        Assert.Equal(0, scope.RunningChildren);
        // Neither WaitAsync nor DisposeAsync: the scope is dropped here.
    }

    private static bool CollectUntil(Func<bool> reported)
    {
        for (int i = 0; i < CollectionTries; i++)
        {
            GC.Collect();
            GC.WaitForPendingFinalizers();
            GC.Collect();
            if (reported())
            {
                return true;
            }
            Thread.Sleep(10);
        }
        return false;
    }

    [Fact]
    public void AFailureOfAScopeDroppedWithoutWaitOrDisposal_IsReportedOnce_WhenTheScopeIsCollected()
    {
        var error = new InvalidOperationException("a child of a dropped scope failed");
        using var watch = UnobservedReports.Start(e => ReferenceEquals(e, error));

        DropAScopeWithAFailedChild(error);

        Assert.True(CollectUntil(() => !watch.Reports.IsEmpty), "the dropped scope's failure was never reported");
        CollectUntil(() => false); // more collections find nothing more to report
        Assert.Same(error, Assert.Single(watch.Reports));
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    private static async Task DisposeAScopeWithAFailedChild(Exception error)
    {
        var scope = new TaskScope();
        scope.Run(_ => throw error);
        Exception thrown = await Assert.ThrowsAnyAsync<Exception>(async () => await scope.DisposeAsync());
        Assert.Same(error, thrown); // disposal without WaitAsync rethrows the child's failure
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    private static async Task AwaitAScopeWithAFailedChild(Exception error)
    {
        await using var scope = new TaskScope();
        scope.Run(_ => throw error);
        Exception thrown = await Assert.ThrowsAnyAsync<Exception>(async () => await scope.WaitAsync());
        Assert.Same(error, thrown);
    }

    [Fact]
    public async Task AFailureDeliveredByDisposalOrByWaitAsync_IsNotReportedAgain_WhenTheScopeIsCollected()
    {
        var disposed = new InvalidOperationException("delivered by disposal");
        var awaited = new InvalidOperationException("delivered by WaitAsync");
        using var watch = UnobservedReports.Start(e => ReferenceEquals(e, disposed) || ReferenceEquals(e, awaited));

        await DisposeAScopeWithAFailedChild(disposed);
        await AwaitAScopeWithAFailedChild(awaited);

        CollectUntil(() => false);
        Assert.Empty(watch.Reports);
    }

    [Fact]
    public async Task AChildCancelledByDisposal_IsNoFailure_ButOneThatFailsWhileItEnds_IsRethrownByDisposal()
    {
        var cleanup = new InvalidOperationException("cleanup failed");
        var scope = new TaskScope();
        var started = new Promise();
        scope.Run(async ct =>
        {
            var never = new Promise();
            using CancellationTokenRegistration registration = ct.Register(() => never.TrySetCanceled(ct));
            started.TrySetResult();
            await never.Task; // ends only by the scope's cancellation
        });
        scope.Run(async ct =>
        {
            var never = new Promise();
            using CancellationTokenRegistration registration = ct.Register(() => never.TrySetCanceled(ct));
            try
            {
                await never.Task;
            }
            catch (OperationCanceledException)
            {
                throw cleanup;
            }
        });
        Assert.Equal(SpindleTaskStatus.Succeeded, started.Task.Status);
        Assert.Equal(2, scope.RunningChildren);

        Exception thrown = await Assert.ThrowsAnyAsync<Exception>(async () => await scope.DisposeAsync());
        Assert.Same(cleanup, thrown); // the first child's cancellation is not a failure; the second's cleanup failure is
    }
}

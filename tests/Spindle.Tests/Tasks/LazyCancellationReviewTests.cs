using System;
using System.Runtime.CompilerServices;
using System.Runtime.ExceptionServices;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// Stop 46's review of the lazily built cancellation (<c>docs/decisions.md</c> section 43): a reader that passes a
/// cancellation on (a combinator's input, a forgotten task's observer) leaves nothing on its thread that keeps the
/// cancelling token's source alive; a read of a promise racing its reset and next cancellation never gets the next
/// use's token.
/// </summary>
[Collection(SequentialCollection.Name)] // forces collections
public sealed class LazyCancellationReviewTests
{
    /// <summary>
    /// A quiet read builds the promise's cancellation and passes it on (as a WhenAll's read of its input does); the thread
    /// then idles. Before the fix the thread-static record of the last build held that exception, its token, and the
    /// token's source (with every callback registered on it) until the thread's next build or throw: for ever on an idle
    /// worker.
    /// </summary>
    [Fact]
    public void AQuietReadThatPassesACancellationOn_KeepsNothingAliveOnItsThread()
    {
        WeakReference? weak = null;
        using var read = new ManualResetEventSlim();
        using var release = new ManualResetEventSlim();
        var thread = new Thread(() =>
        {
            weak = BuildAndPassOn();
            read.Set();
            release.Wait(); // an idle thread: no later build or throw clears anything
        });
        thread.IsBackground = true;
        thread.Start();
        read.Wait();
        GC.Collect();
        GC.WaitForPendingFinalizers();
        GC.Collect();
        bool alive = weak!.IsAlive;
        release.Set();
        thread.Join();
        Assert.False(alive, "the cancelling token's source stays alive, held by the reading thread's record of its last build");
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    private static WeakReference BuildAndPassOn()
    {
        var cts = new CancellationTokenSource();
        cts.Cancel();
        var promise = new Promise();
        Assert.True(promise.TrySetCanceled(cts.Token));
        SpindleTask task = promise.Task;
        ExceptionDispatchInfo? error = QuietRead.Read(task._source!, task._token);
        var canceled = Assert.IsType<TaskCanceledException>(error!.SourceException);
        Assert.Equal(cts.Token, canceled.CancellationToken);
        return new WeakReference(cts);
    }

#if DEBUG
    /// <summary>
    /// A read of a canceled promise's use that has seen it completed, while (misuse) the owner resets the promise and cancels
    /// its next use with another token: the read is the await-once error, never a cancellation carrying the next use's
    /// token. The token is read after the marker and before the read's second look at the version, as the failure slot is.
    /// </summary>
    [Fact]
    public void AReadRacingAResetAndTheNextCancellation_IsTheAwaitOnceError_NeverTheNextUsesToken()
    {
        using var first = new CancellationTokenSource();
        using var second = new CancellationTokenSource();
        first.Cancel();
        second.Cancel();
        var promise = new Promise();
        Assert.True(promise.TrySetCanceled(first.Token));
        SpindleTask task = promise.Task;
        bool once = false;
        SourceCoreTestHooks.ReadSawCompleted = () =>
        {
            if (!once)
            {
                once = true;
                promise.Reset();
                Assert.True(promise.TrySetCanceled(second.Token));
            }
        };
        try
        {
            Exception ex = Assert.ThrowsAny<Exception>(() => task.GetAwaiter().GetResult());
            Assert.IsType<InvalidOperationException>(ex);
        }
        finally
        {
            SourceCoreTestHooks.ReadSawCompleted = null;
        }
        var next = Assert.ThrowsAny<OperationCanceledException>(() => promise.Task.GetAwaiter().GetResult());
        Assert.Equal(second.Token, next.CancellationToken);
    }
#endif
}

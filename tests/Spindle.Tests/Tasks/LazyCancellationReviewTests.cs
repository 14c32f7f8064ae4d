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
        Assert.False(TestUtil.StaysAliveWhileItsThreadIdles(BuildAndPassOn), "the cancelling token's source stays alive, held by the reading thread's record of its last build");
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

    public static TheoryData<int> Readers() => new() { 0, 1, 2, 3, 4, 5, 6 };

    /// <summary>
    /// Every reader of a promise canceled by a token (now kept lazily, with no exception built at the cancellation) sees
    /// it canceled by that token, as when the exception was built at once: a direct await, AsTask, AsValueTask, Preserve
    /// (read twice), WhenAll, WhenAny's winner, and the status.
    /// </summary>
    [Theory]
    [MemberData(nameof(Readers))]
    public async Task EveryReaderOfACanceledPromise_SeesItsToken(int reader)
    {
        using var cts = new CancellationTokenSource();
        cts.Cancel();
        var promise = new Promise<int>();
        Assert.True(promise.TrySetCanceled(cts.Token));
        Assert.False(promise.TrySetCanceled(default)); // once only: the kept token is not replaced
        Assert.Equal(SpindleTaskStatus.Canceled, promise.Task.Status);
        OperationCanceledException ex;
        switch (reader)
        {
            case 0: ex = await Assert.ThrowsAnyAsync<OperationCanceledException>(async () => await promise.Task); break;
            case 1:
                Task<int> task = promise.Task.AsTask();
                ex = await Assert.ThrowsAnyAsync<OperationCanceledException>(() => task);
                Assert.True(task.IsCanceled);
                break;
            case 2: ex = await Assert.ThrowsAnyAsync<OperationCanceledException>(async () => await promise.Task.AsValueTask()); break;
            case 3:
                SpindleTask<int> preserved = promise.Task.Preserve();
                ex = await Assert.ThrowsAnyAsync<OperationCanceledException>(async () => await preserved);
                var again = await Assert.ThrowsAnyAsync<OperationCanceledException>(async () => await preserved);
                Assert.Equal(cts.Token, again.CancellationToken);
                break;
            case 4: ex = await Assert.ThrowsAnyAsync<OperationCanceledException>(async () => await SpindleTask.WhenAll([promise.Task])); break;
            case 5: ex = await Assert.ThrowsAnyAsync<OperationCanceledException>(async () => await SpindleTask.WhenAny([promise.Task])); break;
            default:
                ex = await Assert.ThrowsAnyAsync<OperationCanceledException>(async () => await promise.Task);
                var second = await Assert.ThrowsAnyAsync<OperationCanceledException>(async () => await promise.Task);
                Assert.NotSame(ex, second); // each throwing read builds its own (section 43)
                Assert.Equal(cts.Token, second.CancellationToken);
                break;
        }
        Assert.Equal(cts.Token, ex.CancellationToken);
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
        ReadRacingAResetAndTheNextCancellation(promise, first.Token, second.Token);
        var next = Assert.ThrowsAny<OperationCanceledException>(() => promise.Task.GetAwaiter().GetResult());
        Assert.Equal(second.Token, next.CancellationToken);
    }

    /// <summary>
    /// Cancels <paramref name="promise"/> with <paramref name="canceled"/> and reads that use with a throw while (misuse) its
    /// owner, once the read has seen it completed, resets it and cancels its next use with <paramref name="next"/>: the
    /// read must be the await-once error. Also <see cref="LazyCancellationLeftoversTests"/>' stale-token read.
    /// </summary>
    internal static void ReadRacingAResetAndTheNextCancellation(Promise promise, CancellationToken canceled, CancellationToken next)
    {
        Assert.True(promise.TrySetCanceled(canceled));
        SpindleTask task = promise.Task;
        bool once = false;
        SourceCoreTestHooks.ReadSawCompleted = () =>
        {
            if (!once)
            {
                once = true;
                promise.Reset();
                Assert.True(promise.TrySetCanceled(next));
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
        Assert.True(once, "the read did not reach the hook");
    }
#endif
}

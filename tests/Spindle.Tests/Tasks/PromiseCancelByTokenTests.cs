using System;
using System.Collections.Concurrent;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// <see cref="Promise.TrySetCanceled(short, CancellationToken)"/> and its typed twin: a primitive's cancellation callback
/// cancels the one use it was registered for, as canceled by the caller's token, and a callback that runs late (after the
/// use was answered and the promise reset for the next ask) cancels nothing. Before, the only forms were
/// <c>TrySetCanceled(token)</c> (any use: a late callback cancels the next ask) and
/// <c>TrySetException(use, new OperationCanceledException(token))</c> (an exception built and captured at every
/// cancellation, a trace that grows through its rethrow; a fourteenth user's review).
/// </summary>
public sealed class PromiseCancelByTokenTests
{
    [Fact]
    public async Task ACancellationByToken_LandsOnItsUseOnly_AndTheAwaiterSeesTheCallersToken()
    {
        using var cts = new CancellationTokenSource();
        cts.Cancel();
        var reply = new Promise<int>();
        short first = reply.Token;
        reply.Reset();
        short second = reply.Token;

        Assert.False(reply.TrySetCanceled(first, cts.Token)); // the earlier use's late callback
        Assert.False(reply.IsCompleted);
        Task<int> awaiting = TestUtil.AwaitAsync(reply.Task);
        Assert.True(reply.TrySetCanceled(second, cts.Token));
        var canceled = await Assert.ThrowsAnyAsync<OperationCanceledException>(() => TestUtil.WithTimeout(awaiting));
        Assert.Equal(cts.Token, canceled.CancellationToken);
        Assert.Equal(SpindleTaskStatus.Canceled, reply.Task.Status);
        Assert.False(reply.TrySetCanceled(second, cts.Token)); // a completed use is not completed again
        Assert.False(reply.TrySetResult(second, 5));

        var untyped = new Promise();
        short use = untyped.Token;
        Assert.False(untyped.TrySetCanceled(unchecked((short)(use + 1)), cts.Token));
        Assert.True(untyped.TrySetCanceled(use, cts.Token));
        var untypedCanceled = await Assert.ThrowsAnyAsync<OperationCanceledException>(async () => await untyped.Task);
        Assert.Equal(cts.Token, untypedCanceled.CancellationToken);
        Assert.False(untyped.TrySetResult(use));
        untyped.Reset();
        Assert.True(untyped.TrySetResult(untyped.Token));
        await untyped.Task; // the reset let go of the token: the next use is not canceled
    }

    [Fact]
    public async Task ALateCancellationCallback_AfterTheAskWasAnswered_CancelsNothing_WhereThePlainFormCancelsTheNextAsk()
    {
        using var cts = new CancellationTokenSource();
        var reply = new Promise<int>();

        // Ask 1, with a cancellation callback that will run late (it is never unregistered).
        short ask1 = reply.Token;
        cts.Token.Register(() => reply.TrySetCanceled(ask1, cts.Token));
        Assert.True(reply.TrySetResult(ask1, 1));
        Assert.Equal(1, await reply.Task);
        reply.Reset();
        cts.Cancel(); // ask 1's callback, during ask 2
        Assert.False(reply.IsCompleted);
        Assert.True(reply.TrySetResult(reply.Token, 2));
        Assert.Equal(2, await reply.Task);

        // The same with the form that names no use: the late callback cancels ask 2.
        using var plain = new CancellationTokenSource();
        var other = new Promise<int>();
        plain.Token.Register(() => other.TrySetCanceled(plain.Token));
        Assert.True(other.TrySetResult(other.Token, 1));
        Assert.Equal(1, await other.Task);
        other.Reset();
        plain.Cancel();
        Assert.Equal(SpindleTaskStatus.Canceled, other.Task.Status);
    }

    [Fact]
    public void ACancellationByToken_BuildsNothing_WhereTheWorkaroundBuildsAnExceptionPerCancel()
    {
        using var cts = new CancellationTokenSource();
        var reply = new Promise<int>();
        long byToken = long.MaxValue, workaround = long.MaxValue;
        for (int round = 0; round < 5; round++)
        {
            long before = GC.GetAllocatedBytesForCurrentThread();
            for (int i = 0; i < 100; i++)
            {
                reply.Reset();
                reply.TrySetCanceled(reply.Token, cts.Token);
            }
            byToken = Math.Min(byToken, GC.GetAllocatedBytesForCurrentThread() - before);

            before = GC.GetAllocatedBytesForCurrentThread();
            for (int i = 0; i < 100; i++)
            {
                reply.Reset();
                reply.TrySetException(reply.Token, new OperationCanceledException(cts.Token));
            }
            workaround = Math.Min(workaround, GC.GetAllocatedBytesForCurrentThread() - before);
        }
        Assert.True(byToken == 0, $"100 cancellations by token allocated {byToken} B");
        Assert.True(workaround > 100 * 100, $"the workaround allocated only {workaround} B for 100 cancellations");
    }

    /// <summary>
    /// An asker completes each use by its token and resets for the next; a canceller on another thread cancels each use
    /// by its token, later (often during a later ask). Each use is completed exactly once, and a cancellation returns true
    /// exactly for the uses the asker found canceled: a late callback never lands on a later use. With
    /// <c>TrySetCanceled(cts.Token)</c> in the canceller instead, this fails at once (late cancels land on later asks).
    /// </summary>
    [Fact]
    public async Task ACancellerRacingTheAskersResets_CancelsOnlyTheUsesItNamed()
    {
        int asks = TestUtil.Stress(20_000);
        using var cts = new CancellationTokenSource();
        cts.Cancel();
        var reply = new Promise<int>();
        var cancels = new BlockingCollection<(short Token, int Ask)>();
        var cancelWon = new bool[asks];
        var askerSawCanceled = new bool[asks];
        int wrongValue = 0, wrongToken = 0;
        Task canceller = TestUtil.RunOnThread(() =>
        {
            foreach (var (token, ask) in cancels.GetConsumingEnumerable())
            {
                cancelWon[ask] = reply.TrySetCanceled(token, cts.Token);
            }
        }, "canceller");
        Task asker = TestUtil.RunOnThread(() =>
        {
            for (int ask = 0; ask < asks; ask++)
            {
                if (ask > 0)
                {
                    reply.Reset();
                }
                short token = reply.Token;
                cancels.Add((token, ask));
                for (int spin = 0; spin < (ask % 7) * 20; spin++)
                {
                    Thread.SpinWait(1);
                }
                if (reply.TrySetResult(token, ask))
                {
                    if (reply.Task.GetAwaiter().GetResult() != ask)
                    {
                        wrongValue++;
                    }
                    continue;
                }
                askerSawCanceled[ask] = true;
                try
                {
                    reply.Task.GetAwaiter().GetResult();
                    wrongValue++;
                }
                catch (OperationCanceledException e) when (e.CancellationToken == cts.Token)
                {
                }
                catch (OperationCanceledException)
                {
                    wrongToken++;
                }
            }
            cancels.CompleteAdding();
        }, "asker");
        await TestUtil.WithTimeout(Task.WhenAll(asker, canceller), TestUtil.StressTimeout(60));
        int mismatched = 0, canceledAsks = 0;
        for (int ask = 0; ask < asks; ask++)
        {
            if (cancelWon[ask] != askerSawCanceled[ask])
            {
                mismatched++;
            }
            if (askerSawCanceled[ask])
            {
                canceledAsks++;
            }
        }
        Assert.True(mismatched == 0, $"{mismatched} of {asks} asks: a cancellation landed on a use it did not name ({canceledAsks} canceled)");
        Assert.Equal(0, wrongValue);
        Assert.Equal(0, wrongToken);
    }
}

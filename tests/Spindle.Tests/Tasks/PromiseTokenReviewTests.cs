using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// Review44's pins of a promise completed by its use's token (<see cref="Promise{T}.Token"/>,
/// <see cref="Promise{T}.TrySetResult(short, T)"/>): the token's 16-bit wrap, a let-go use awaited again, and a token
/// completion meeting the owner's reset at each of the reset's steps (Debug hooks).
/// </summary>
public sealed class PromiseTokenReviewTests
{
    /// <summary>
    /// The token is the core's 16-bit version, as a <see cref="ValueTask"/>'s is: a completer that kept use N's token is
    /// refused through the next 65,535 uses, and takes use N + 65,536 (the same token again). Promise.Token's docs say
    /// so; before review44 they said "never a later one".
    /// </summary>
    [Fact]
    public void AKeptTokenIsRefusedFor65535ResetsAndWrapsAtThe65536th()
    {
        var reply = new Promise<int>();
        short kept = reply.Token;
        for (int i = 0; i < ushort.MaxValue; i++)
        {
            reply.Reset();
            Assert.NotEqual(kept, reply.Token);
        }
        Assert.False(reply.TrySetResult(kept, 1));
        Assert.False(reply.TrySetException(kept, new InvalidOperationException("late")));
        Assert.False(reply.IsCompleted);

        reply.Reset(); // the 65,536th: the token has wrapped to the kept one
        Assert.Equal(kept, reply.Token);
        Assert.True(reply.TrySetResult(kept, 2)); // the documented limit: a completer that late completes this use
        Assert.Equal(2, reply.Task.GetAwaiter().GetResult());

        var untyped = new Promise();
        short first = untyped.Token;
        for (int i = 0; i < 1 << 16; i++)
        {
            untyped.Reset();
        }
        Assert.Equal(first, untyped.Token);
    }

    /// <summary>
    /// A use a combinator let go of (its timeout fired) and then awaited again (a promise's let-go use may be) is still
    /// the use the token names: a completion by that token resumes the second awaiter, and a stale token does not.
    /// </summary>
    [Fact]
    public async Task ALetGoUseAwaitedAgainIsCompletedByItsTokenAndResumesTheNewAwaiter()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var reply = new Promise<int>();
        reply.Reset();
        short token = reply.Token;
        SpindleTask<int> first = reply.Task.WithTimeout(TimeSpan.FromMilliseconds(5), wheel);
        clock.Advance(TimeSpan.FromMilliseconds(5));
        await Assert.ThrowsAsync<TimeoutException>(async () => await first);

        Task<int> again = TestUtil.AwaitAsync(reply.Task); // the let-go use, awaited again
        Assert.False(again.IsCompleted);
        Assert.False(reply.TrySetResult(unchecked((short)(token - 1)), 1));
        Assert.False(again.IsCompleted);
        Assert.True(reply.TrySetResult(token, 9));
        Assert.Equal(9, await TestUtil.WithTimeout(again));
        Assert.False(reply.TrySetResult(token, 10)); // once
        Assert.Equal(0, wheel.PendingCount);
    }

#if DEBUG
    /// <summary>
    /// The late completer completes the old use fully between the reset's look at the word (Pending) and its claim: the
    /// claim's CAS fails, the reset finds the use completed and resets it as any completed use. The late result stays on
    /// its own use (the old task is stale afterwards, never read as the new use's), and the new use is pending and refuses
    /// the old token.
    /// </summary>
    [Fact]
    public void ACompletionByTokenJustBeforeTheResetsClaimStaysOnItsUse()
    {
        var reply = new Promise<int>();
        SpindleTask<int> old = reply.Task;
        short token = reply.Token;
        bool set = false;
        SourceCoreTestHooks.ResetSawState = () =>
        {
            SourceCoreTestHooks.ResetSawState = null;
            set = reply.TrySetResult(token, 42);
        };
        try
        {
            reply.Reset();
        }
        finally
        {
            SourceCoreTestHooks.ResetSawState = null;
        }
        Assert.True(set);
        Assert.False(reply.IsCompleted);
        Assert.NotEqual(token, reply.Token);
        Assert.Throws<InvalidOperationException>(() => old.GetAwaiter().GetResult()); // over, not the new use
        Assert.False(reply.TrySetResult(token, 43));
        Assert.True(reply.TrySetResult(reply.Token, 7));
        Assert.Equal(7, reply.Task.GetAwaiter().GetResult());
    }

    /// <summary>
    /// The reset of a completed use holds the word (the next version, Registering) while it clears the old outcome. A
    /// completer with the old token that arrives then is refused at once (the version has moved on); one with the next
    /// use's token waits for the hold and then completes the next use, whose result the clearing does not wipe.
    /// </summary>
    [Fact]
    public void CompletionsByTokenDuringTheResetsClearingLandOnTheirOwnUseOnly()
    {
        var reply = new Promise<int>();
        short old = reply.Token;
        Assert.True(reply.TrySetResult(old, 1));
        short next = unchecked((short)(old + 1));
        bool oldSet = true;
        Task<bool>? nextSet = null;
        SourceCoreTestHooks.ResetClearing = () =>
        {
            SourceCoreTestHooks.ResetClearing = null;
            oldSet = reply.TrySetResult(old, 2); // this thread: must return at once, refused
            int started = 0;
            nextSet = Task.Factory.StartNew(
                () =>
                {
                    Volatile.Write(ref started, 1);
                    return reply.TrySetResult(next, 3);
                },
                CancellationToken.None, TaskCreationOptions.LongRunning, TaskScheduler.Default);
            TestUtil.SpinUntil(() => Volatile.Read(ref started) == 1);
            Assert.False(nextSet.IsCompleted); // held off until the reset publishes (it spins on the hold)
        };
        try
        {
            reply.Reset();
        }
        finally
        {
            SourceCoreTestHooks.ResetClearing = null;
        }
        Assert.False(oldSet);
        Assert.Equal(next, reply.Token);
        Assert.True(nextSet!.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)));
        Assert.True(nextSet.Result);
        Assert.Equal(3, reply.Task.GetAwaiter().GetResult());
    }

    /// <summary>
    /// The owner resets while a completer by token is between its claim and its publication, on a use nobody awaits: the
    /// reset waits for the publication and then starts a clean use that the old token cannot complete (before, the reset
    /// was refused naming that race, and the owner had to catch it and retry).
    /// </summary>
    [Fact]
    public void AResetMeetingACompletionByTokenMidwayWaitsForItAndStartsACleanUse()
    {
        var reply = new Promise<int>();
        SpindleTask<int> old = reply.Task;
        short token = reply.Token;
        (bool set, Exception? reset) = ResetRaceTests.CompleteWhileAResetMeetsTheClaim(reply, () => reply.TrySetResult(token, 42), resetWaits: true);
        Assert.True(set);
        Assert.Null(reset);
        Assert.NotEqual(token, reply.Token);
        Assert.False(reply.IsCompleted);
        Assert.Throws<InvalidOperationException>(() => old.GetAwaiter().GetResult());
        Assert.False(reply.TrySetResult(token, 43));
        Assert.False(reply.IsCompleted);
    }
#endif
}

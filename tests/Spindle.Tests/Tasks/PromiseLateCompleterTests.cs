using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// An actor's ask reuses one promise per asker: each ask resets it, sends the request with the promise, and awaits the
/// reply with a timeout. A reply that comes after its ask timed out must not complete the asker's next ask. A plain
/// <c>TrySetResult(value)</c> cannot tell the uses apart (a ninth user's review, an actor runtime: 80,419 of 200,000
/// asks got another ask's reply), so a completer that may come late completes by the use's token
/// (<see cref="Promise{T}.Token"/>, <see cref="Promise{T}.TrySetResult(short, T)"/>): after a reset it completes nothing.
/// </summary>
public sealed class PromiseLateCompleterTests
{
    [Fact]
    public async Task ALateReplyByTokenAfterTheResetCompletesNothingAndTheNextAskGetsItsOwnReply()
    {
        var reply = new Promise<int>();
        short first = reply.Token;
        Assert.Equal(first, reply.Token); // stable within a use
        reply.Reset();                    // the first ask timed out (never completed): the next ask begins
        short second = reply.Token;
        Assert.NotEqual(first, second);

        Assert.False(reply.TrySetResult(first, 1)); // the first ask's late reply
        Assert.False(reply.IsCompleted);
        Assert.False(reply.Task.IsCompleted);

        Assert.True(reply.TrySetResult(second, 2));
        Assert.Equal(2, await reply.Task);
        Assert.False(reply.TrySetResult(second, 3)); // a completed use is not completed again
        Assert.Equal(2, await reply.Task);
    }

    [Fact]
    public void WithoutTheTokenALateReplyCompletesTheNextUse_TheHazardTheTokenRemoves()
    {
        var reply = new Promise<int>();
        reply.Reset();
        Assert.True(reply.TrySetResult(1)); // the plain form cannot tell which use the completer meant
        Assert.Equal(1, reply.Task.GetAwaiter().GetResult());
    }

    [Fact]
    public async Task AnAskThatTimedOutOnAWheelThenResetIsNotCompletedByItsLateReply()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var reply = new Promise<long>();
        long replies = 0, timeouts = 0;
        for (int ask = 0; ask < 200; ask++)
        {
            if (ask > 0)
            {
                reply.Reset();
            }
            short token = reply.Token;
            SpindleTask<long> answer = reply.Task.WithTimeout(TimeSpan.FromMilliseconds(10), wheel);
            if (ask % 3 == 0)
            {
                clock.Advance(TimeSpan.FromMilliseconds(10)); // no reply in time
                await Assert.ThrowsAsync<TimeoutException>(async () => await answer);
                timeouts++;
                // The late reply, before the next ask: the use was let go of, not reset, so it still takes it (nobody reads it).
                Assert.True(reply.TrySetResult(token, ask));
                continue;
            }
            if (ask % 3 == 1)
            {
                clock.Advance(TimeSpan.FromMilliseconds(10));
                await Assert.ThrowsAsync<TimeoutException>(async () => await answer);
                timeouts++;
                // The late reply comes after the next ask began: it must complete nothing.
                reply.Reset();
                short next = reply.Token;
                Assert.False(reply.TrySetResult(token, ask));
                Assert.False(reply.IsCompleted);
                Assert.True(reply.TrySetResult(next, -ask));
                Assert.Equal(-ask, await reply.Task);
                continue;
            }
            Assert.True(reply.TrySetResult(token, ask));
            Assert.Equal(ask, await answer);
            replies++;
        }
        Assert.Equal(66, replies);
        Assert.Equal(134, timeouts);
        Assert.Equal(0, wheel.PendingCount);
    }

    [Fact]
    public async Task AFailureByTokenLandsOnItsUseOnlyAndACancellationIsCanceled()
    {
        var reply = new Promise();
        short first = reply.Token;
        reply.Reset();
        short second = reply.Token;
        Assert.False(reply.TrySetException(first, new InvalidOperationException("late")));
        Assert.False(reply.TrySetResult(first));
        Assert.False(reply.IsCompleted);
        var failure = new InvalidOperationException("mine");
        Assert.True(reply.TrySetException(second, failure));
        Assert.Same(failure, await Assert.ThrowsAsync<InvalidOperationException>(async () => await reply.Task));

        reply.Reset();
        Assert.True(reply.TrySetException(reply.Token, new OperationCanceledException()));
        Assert.Equal(SpindleTaskStatus.Canceled, reply.Task.Status);

        reply.Reset();
        Assert.True(reply.TrySetResult(reply.Token));
        Assert.Equal(SpindleTaskStatus.Succeeded, reply.Task.Status);

        var typed = new Promise<int>();
        Assert.Throws<ArgumentNullException>(() => typed.TrySetException(typed.Token, null!));
        Assert.Throws<ArgumentNullException>(() => reply.TrySetException(reply.Token, null!));
        Assert.False(typed.IsCompleted);
    }

    [Fact]
    public async Task AnAwaitedUseIsCompletedByItsTokenAndResumesItsAwaiter()
    {
        var reply = new Promise<int>(runContinuationsAsynchronously: true);
        reply.Reset();
        short token = reply.Token;
        Task<int> awaiting = TestUtil.AwaitAsync(reply.Task);
        Assert.False(reply.TrySetResult(unchecked((short)(token - 1)), 1));
        Assert.True(reply.TrySetResult(token, 7));
        Assert.Equal(7, await TestUtil.WithTimeout(awaiting));
    }

    /// <summary>
    /// An asker and a late replier on two threads: the asker resets the promise for each ask and gives up on some asks
    /// at once (a timeout); the replier completes each ask by its token, later. No ask ever reads another ask's reply.
    /// No reset is refused either: one that meets the replier completing the old use at that instant waits for it (a use
    /// nobody awaits), where before it threw and the asker had to take a new promise.
    /// </summary>
    [Fact]
    public async Task ALateReplierRacingTheAskersResetsNeverCompletesAnotherAsk()
    {
        int asks = TestUtil.Stress(20_000);
        var requests = new System.Collections.Concurrent.BlockingCollection<(Promise<int> Reply, short Token, int Ask)>();
        int wrong = 0, answered = 0, asked = 0, replied = 0;
        Exception? resetRefused = null;
        Task replier = TestUtil.RunOnThread(() =>
        {
            foreach (var (reply, token, ask) in requests.GetConsumingEnumerable())
            {
                reply.TrySetResult(token, ask);
                Volatile.Write(ref replied, replied + 1);
            }
        }, "late replier");
        Task asker = TestUtil.RunOnThread(() =>
        {
            var reply = new Promise<int>();
            for (int ask = 0; ask < asks; ask++)
            {
                if (ask > 0)
                {
                    try
                    {
                        reply.Reset();
                    }
                    catch (InvalidOperationException e)
                    {
                        resetRefused ??= e;
                        reply = new Promise<int>();
                    }
                }
                requests.Add((reply, reply.Token, ask));
                Volatile.Write(ref asked, ask + 1);
                if (ask % 2 == 0)
                {
                    continue; // gave up at once: its reply comes late, during a later ask
                }
                SpinWait spin = default;
                while (!reply.IsCompleted && spin.Count < 200)
                {
                    spin.SpinOnce(sleep1Threshold: -1);
                }
                if (reply.Task.Status == SpindleTaskStatus.Succeeded)
                {
                    int value = reply.Task.GetAwaiter().GetResult();
                    if (value != ask)
                    {
                        wrong++;
                    }
                    answered++;
                }
            }
            requests.CompleteAdding();
        }, "asker");
        // Bounded by progress, not by a fixed time for the whole run: every ask is a hand-off between two threads, and
        // at load 60 on two cores the 20,000 took more than 30 s (in both test projects of one suite run beside two CPU
        // hogs; 10-14 s at load 30). A lost wake-up or a reset that never ends still stops both counts.
        await TestUtil.WithStallTimeout(Task.WhenAll(asker, replier), () => Volatile.Read(ref asked) + (long)Volatile.Read(ref replied),
            () => $"{Volatile.Read(ref asked)} of {asks} asks made, {Volatile.Read(ref replied)} replied", TestUtil.StressTimeout(30));
        Assert.Equal(0, wrong);
        Assert.Null(resetRefused);
        _ = answered;
    }

    /// <summary>
    /// A late failure by token is refused before its exception is captured: a stale completer costs nothing (review44's
    /// note: the capture, an <c>ExceptionDispatchInfo</c> and the exception's stack trace, came before the token check).
    /// </summary>
    [Fact]
    public void ALateFailureByToken_IsRefusedWithoutCapturingItsException()
    {
        var reply = new Promise<int>();
        var plain = new Promise();
        short stale = reply.Token;
        short plainStale = plain.Token;
        reply.Reset();
        plain.Reset();
        Exception error = new InvalidOperationException("late");
        Assert.False(reply.TrySetException(stale, error)); // warm-up (JIT)
        Assert.False(plain.TrySetException(plainStale, error));
        long before = GC.GetAllocatedBytesForCurrentThread();
        bool anyTaken = false;
        for (int i = 0; i < 100; i++)
        {
            anyTaken |= reply.TrySetException(stale, error);
            anyTaken |= plain.TrySetException(plainStale, error);
        }
        long allocated = GC.GetAllocatedBytesForCurrentThread() - before;
        Assert.False(anyTaken);
        Assert.Equal(0, allocated);
        Assert.False(reply.IsCompleted);
        Assert.False(plain.IsCompleted);
        Assert.True(reply.TrySetException(reply.Token, error)); // the current use still takes it
        Assert.Equal(SpindleTaskStatus.Faulted, reply.Task.Status);
    }
}

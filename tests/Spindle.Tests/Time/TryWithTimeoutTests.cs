using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Time;

/// <summary>
/// What only TryWithTimeout does (the rules it shares with WithTimeout are <see cref="WithTimeoutTests"/>' theories, run
/// for both forms): its result's shapes, a finished input's outcome at once, an infinite timeout, the token, and the
/// README's ask recipe.
/// </summary>
public class TryWithTimeoutTests
{
    private static readonly TimeSpan OneSecond = TimeSpan.FromSeconds(1);

    [Fact]
    public void TryWithTimeout_TimedOut_IsFalseWithADefaultResult_AndThrowsNothing()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var text = new Promise<string>();
        var untyped = new Promise();
        SpindleTask<(bool Completed, string Result)> timed = text.Task.TryWithTimeout(TimeSpan.FromMilliseconds(5), wheel);
        SpindleTask<bool> timedUntyped = untyped.Task.TryWithTimeout(TimeSpan.FromMilliseconds(5), wheel);
        int thrown = 0;
        int thread = Environment.CurrentManagedThreadId;
        void Count(object? sender, System.Runtime.ExceptionServices.FirstChanceExceptionEventArgs e)
        {
            if (Environment.CurrentManagedThreadId == thread)
            {
                Interlocked.Increment(ref thrown);
            }
        }
        AppDomain.CurrentDomain.FirstChanceException += Count;
        try
        {
            clock.Advance(TimeSpan.FromMilliseconds(5));
            Assert.Equal(SpindleTaskStatus.Succeeded, timed.Status);
            Assert.Equal((false, (string?)null), timed.GetAwaiter().GetResult());
            Assert.False(timedUntyped.GetAwaiter().GetResult());
        }
        finally
        {
            AppDomain.CurrentDomain.FirstChanceException -= Count;
        }
        Assert.Equal(0, thrown);
        Assert.Equal(0, wheel.PendingCount);
        text.Reset(); // let go of by the timeout
        untyped.Reset();
    }

    [Fact]
    public void TryWithTimeout_InTime_IsTrueWithTheResult_AndTheNamesRead()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var input = new Promise<string>();
        SpindleTask<(bool Completed, string Result)> timed = input.Task.TryWithTimeout(OneSecond, wheel);
        input.SetResult("reply");
        var (completed, result) = timed.GetAwaiter().GetResult();
        Assert.True(completed);
        Assert.Equal("reply", result);
        var untyped = new Promise();
        SpindleTask<bool> timedUntyped = untyped.Task.TryWithTimeout(OneSecond, wheel);
        untyped.SetResult();
        Assert.True(timedUntyped.GetAwaiter().GetResult());
        Assert.Equal(0, wheel.PendingCount);
    }

    [Fact]
    public void TryWithTimeout_InputAlreadyCompleted_HasItsOutcomeAtOnceWithNoTimer_WhateverTheTimeoutOrToken()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var cancelled = new CancellationTokenSource();
        cancelled.Cancel();
        Assert.Equal((true, 5), SpindleTask.FromResult(5).TryWithTimeout(OneSecond, wheel).GetAwaiter().GetResult());
        Assert.True(SpindleTask.CompletedTask.TryWithTimeout(TimeSpan.Zero, wheel, cancelled.Token).GetAwaiter().GetResult());
        var done = new Promise<int>();
        done.SetResult(9);
        SpindleTask<(bool, int)> zero = done.Task.TryWithTimeout(TimeSpan.Zero, wheel, cancelled.Token);
        Assert.True(zero.IsCompleted);
        Assert.Equal((true, 9), zero.GetAwaiter().GetResult()); // finished: in time, even for a zero timeout
        var untypedDone = new Promise();
        untypedDone.SetResult();
        Assert.True(untypedDone.Task.TryWithTimeout(Timeout.InfiniteTimeSpan, wheel).GetAwaiter().GetResult());

        var failed = new Promise();
        var failure = new FormatException();
        failed.SetException(failure);
        SpindleTask<bool> faulted = failed.Task.TryWithTimeout(OneSecond, wheel);
        Assert.Equal(SpindleTaskStatus.Faulted, faulted.Status);
        Assert.Same(failure, Assert.Throws<FormatException>(() => faulted.GetAwaiter().GetResult()));
        var canceled = new Promise<int>();
        canceled.SetCanceled();
        Assert.ThrowsAny<OperationCanceledException>(() => canceled.Task.TryWithTimeout(OneSecond, wheel).GetAwaiter().GetResult());
        Assert.Equal(0, wheel.PendingCount);
    }

    [Fact]
    public void TryWithTimeout_Infinite_ArmsNoTimer_AndIsTrueWhenTheInputFinishes()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var input = new Promise<int>();
        SpindleTask<(bool, int)> timed = input.Task.TryWithTimeout(Timeout.InfiniteTimeSpan, wheel);
        Assert.Equal(0, wheel.PendingCount);
        clock.Advance(TimerWheel.MaxDelay);
        Assert.False(timed.IsCompleted);
        input.SetResult(1);
        Assert.Equal((true, 1), timed.GetAwaiter().GetResult());

        // The token alone bounds an infinite wait.
        using var cts = new CancellationTokenSource();
        var untyped = new Promise();
        SpindleTask<bool> bounded = untyped.Task.TryWithTimeout(Timeout.InfiniteTimeSpan, wheel, cts.Token);
        Assert.Equal(0, wheel.PendingCount);
        cts.Cancel();
        Assert.Equal(cts.Token, Assert.ThrowsAny<OperationCanceledException>(() => bounded.GetAwaiter().GetResult()).CancellationToken);
        untyped.Reset(); // let go of by the token
    }

    [Fact]
    public void TryWithTimeout_TokenWins_IsCanceledForThatToken_LetsGoOfTheInputAndTakesTheTimerBack()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var cts = new CancellationTokenSource();
        var input = new Promise<int>();
        SpindleTask<(bool, int)> timed = input.Task.TryWithTimeout(OneSecond, wheel, cts.Token);
        Assert.Equal(1, wheel.PendingCount);
        cts.Cancel();
        Assert.Equal(SpindleTaskStatus.Canceled, timed.Status);
        Assert.Equal(0, wheel.PendingCount);
        Assert.Equal(cts.Token, Assert.ThrowsAny<OperationCanceledException>(() => timed.GetAwaiter().GetResult()).CancellationToken);
        input.Reset(); // let go of: can be reset at once
        SpindleTask<(bool, int)> again = input.Task.TryWithTimeout(OneSecond, wheel);
        input.SetResult(2);
        Assert.Equal((true, 2), again.GetAwaiter().GetResult());
    }

    [Fact]
    public void TryWithTimeout_TokenAlreadyCancelled_OnAPendingInput_IsCanceledNotFalse_EvenForAZeroTimeout()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var cts = new CancellationTokenSource();
        cts.Cancel();
        var input = new Promise();
        SpindleTask<bool> timed = input.Task.TryWithTimeout(TimeSpan.Zero, wheel, cts.Token);
        Assert.Equal(SpindleTaskStatus.Canceled, timed.Status); // the token is checked first, as Task.WaitAsync does
        Assert.ThrowsAny<OperationCanceledException>(() => timed.GetAwaiter().GetResult());
        Assert.Equal(0, wheel.PendingCount);
        input.Reset();
    }

    [Fact]
    public void TryWithTimeout_ReadTwice_IsTheAwaitOnceError_AndTheCombinatorIsReusedWithANewToken()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var input = new Promise<int>();
        SpindleTask<(bool, int)> first = input.Task.TryWithTimeout(OneSecond, wheel);
        clock.Advance(OneSecond);
        Assert.Equal((false, 0), first.GetAwaiter().GetResult());
        input.Reset();
        SpindleTask<(bool, int)> second = input.Task.TryWithTimeout(OneSecond, wheel);
        Assert.Same(first._source, second._source); // the same pooled combinator, a new use
        Assert.NotEqual(first._token, second._token);
        InvalidOperationException e = Assert.Throws<InvalidOperationException>(() => first.GetAwaiter().GetResult());
        Assert.Contains("Preserve()", e.Message, StringComparison.Ordinal);
        Assert.False(second.IsCompleted); // the stale read did not touch the new use
        input.SetResult(4);
        Assert.Equal((true, 4), second.GetAwaiter().GetResult());
    }

    /// <summary>
    /// A combinator whose timeout was a result goes back to its pool with that setting cleared: the next use of the same
    /// object, a WithTimeout, fails with a <see cref="TimeoutException"/> again, and a TryWithTimeout after it is a result
    /// again. A recycle that kept the flag (the sixth mutation pass, mut57: M06) made the WithTimeout that reused the
    /// object succeed at its timeout, with a default result, as if it had been asked for a TryWithTimeout.
    /// </summary>
    [Fact]
    public void TryWithTimeout_ThenWithTimeoutOnTheReusedCombinator_TheTimeoutIsAFailureAgain()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var untyped = new Promise();
        SpindleTask<bool> tried = untyped.Task.TryWithTimeout(OneSecond, wheel);
        clock.Advance(OneSecond);
        Assert.False(tried.GetAwaiter().GetResult());
        untyped.Reset();

        var typed = new Promise<bool>();
        SpindleTask<bool> bounded = typed.Task.WithTimeout(OneSecond, wheel);
        Assert.Same(tried._source, bounded._source); // the same pooled Combinator<bool>, a new use
        clock.Advance(OneSecond);
        Assert.Equal(SpindleTaskStatus.Faulted, bounded.Status);
        Assert.Throws<TimeoutException>(() => bounded.GetAwaiter().GetResult());
        typed.Reset();

        SpindleTask<bool> triedAgain = untyped.Task.TryWithTimeout(OneSecond, wheel);
        Assert.Same(tried._source, triedAgain._source);
        clock.Advance(OneSecond);
        Assert.False(triedAgain.GetAwaiter().GetResult());
        untyped.Reset();
        Assert.Equal(0, wheel.PendingCount);
    }

    /// <summary>
    /// README's ask recipe: the asker's timeout and a late reply meet through the ask's token. A reply that lands after the
    /// timeout but before the asker claims the ask is read (the claim fails); a reply after the claim completes nothing.
    /// </summary>
    [Theory]
    [InlineData(true)]
    [InlineData(false)]
    public async Task TryWithTimeout_AsksRecipe_ALateReplyIsReadOrRefused_NeverLost(bool replyBeforeTheClaim)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var reply = new Promise<long>();
        short token = reply.Token;
        SpindleTask<(bool, long)> ask = reply.Task.TryWithTimeout(TimeSpan.FromMilliseconds(20), wheel);
        clock.Advance(TimeSpan.FromMilliseconds(20));
        (bool answered, long value) = await ask;
        Assert.False(answered);
        if (replyBeforeTheClaim)
        {
            Assert.True(reply.TrySetResult(token, 42)); // the replier thinks it was taken: it must be
        }
        if (!reply.TrySetCanceled(token, default))
        {
            value = await reply.Task; // the reply came first: read it
            answered = true;
        }
        Assert.Equal(replyBeforeTheClaim, answered);
        Assert.Equal(replyBeforeTheClaim ? 42 : 0, value);
        Assert.False(reply.TrySetResult(token, 43)); // later replies complete nothing
        reply.Reset();
    }
}

using System;
using System.Runtime.CompilerServices;
using System.Threading;
using System.Threading.Tasks.Sources;
using static SpindleLib.Tests.Combinators.CombinatorTestSupport;

namespace SpindleLib.Tests.Combinators;

/// <summary>
/// A combinator that is pending at the call gives back the set that a signal wait it read took, when that set never
/// reaches its caller: a losing wait of a WhenAny, or a wait a WhenAll read before its token or timeout decided
/// (decisions sections 13 and 21). But a signal's wait may be read again: a wait the caller had read or had awaited
/// elsewhere before handing it over, or reads after (while the WhenAll is pending, or once the combinator is done), has
/// handed its set out already. Given back as well, the one set was counted twice. An auto-reset signal never hands out
/// more completions than sets: a misused read gets the set, or the await-once error, never a second completion.
/// </summary>
public class PendingCombinatorSetMisuseTests
{
    public enum Reader
    {
        /// <summary>The caller read the wait (it had completed) before handing it to the combinator.</summary>
        ReadBefore,

        /// <summary>An async method awaited the wait and was resumed by the set, before the wait was handed over.</summary>
        AwaitedBefore,

        /// <summary>The caller read the wait while the combinator that holds it was pending (after the set).</summary>
        ReadWhilePending,

        /// <summary>The caller read the wait once the combinator had completed.</summary>
        ReadAfter,
    }

    public enum Decider
    {
        Token,
        Timeout,
    }

    /// <summary>
    /// The outcome of a misused read <paramref name="read"/> of a wait whose set a combinator may give back: it had the
    /// set (then the signal must not have it again), or it threw the await-once error (then the signal keeps the set).
    /// </summary>
    private static void AssertOneTaker(Signal signal, Func<Exception?> read, string what)
    {
        Exception? e = read();
        if (e is null)
        {
            AssertTheSetWasHandedOutOnce(signal, what);
            return;
        }
        Assert.IsType<InvalidOperationException>(e);
        Assert.True(signal.IsSet, "the misused read failed, and the set was lost: " + what);
    }

    private static Exception? Read(SpindleTask wait) => Record.Exception(() => wait.GetAwaiter().GetResult());

    [Theory]
    [InlineData(Decider.Token, Reader.ReadBefore)]
    [InlineData(Decider.Token, Reader.AwaitedBefore)]
    [InlineData(Decider.Token, Reader.ReadWhilePending)]
    [InlineData(Decider.Token, Reader.ReadAfter)]
    [InlineData(Decider.Timeout, Reader.ReadBefore)]
    [InlineData(Decider.Timeout, Reader.AwaitedBefore)]
    [InlineData(Decider.Timeout, Reader.ReadWhilePending)]
    [InlineData(Decider.Timeout, Reader.ReadAfter)]
    public void WhenAllDecidedByItsTokenOrTimeout_AWaitWhoseSetAlsoReachedTheCaller_IsHandedOutOnce(Decider decider, Reader reader)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var cts = new CancellationTokenSource();
        var signal = new Signal();
        var other = new Promise();
        SpindleTask wait = signal.WaitAsync();
        var resumed = new StrongBox<int>();
        if (reader == Reader.AwaitedBefore)
        {
            _ = AwaitAndCount(wait, resumed);
        }
        if (reader is Reader.ReadBefore or Reader.AwaitedBefore)
        {
            signal.Set();
        }
        if (reader == Reader.ReadBefore)
        {
            wait.GetAwaiter().GetResult(); // a signal's wait may be read again: this read takes the set
            resumed.Value++;
        }
        SpindleTask all = decider == Decider.Token
            ? SpindleTask.WhenAll([wait, other.Task], cts.Token)
            : SignalSetKeptByCombinatorTests.TimedWhenAll(wheel, 5, wait, other.Task);
        Exception? misused = null;
        if (reader is Reader.ReadWhilePending or Reader.ReadAfter)
        {
            signal.Set(); // resumes the WhenAll's slot, which reads the wait and keeps its set until the outcome is known
        }
        if (reader == Reader.ReadWhilePending)
        {
            misused = Read(wait); // the caller's misuse: the wait is the WhenAll's until it completes
        }
        if (decider == Decider.Token)
        {
            cts.Cancel();
        }
        else
        {
            clock.Advance(TimeSpan.FromMilliseconds(5));
        }
        Assert.NotNull(Record.Exception(() => all.GetAwaiter().GetResult()));
        string what = "the wait's " + reader + " took it and the WhenAll decided by its " + decider + " gave it back";
        switch (reader)
        {
            case Reader.ReadBefore or Reader.AwaitedBefore:
                Assert.Equal(1, resumed.Value);
                AssertTheSetWasHandedOutOnce(signal, what);
                break;
            case Reader.ReadWhilePending:
                AssertOneTaker(signal, () => misused, what);
                break;
            default:
                AssertOneTaker(signal, () => Read(wait), what);
                break;
        }
        other.SetResult();
    }

    /// <summary>
    /// A pending input that completes when <see cref="Complete"/> is called, and sets <paramref name="signal"/> when the
    /// WhenAny that it wins reads it: so the set lands on the signal's wait, another input of the same WhenAny, after the
    /// race is decided and before that loser is let go of. <paramref name="readAfterSet"/> runs just after the set: a
    /// misused read of the losing wait at that instant.
    /// </summary>
    private sealed class SetsWhenRead(Signal signal, Action? readAfterSet) : ISpindleSource
    {
        private Action<object?>? _continuation;
        private object? _state;
        private volatile bool _done;

        public void Complete()
        {
            _done = true;
            _continuation!(_state);
        }

        public SpindleTaskStatus GetStatus(short token) => _done ? SpindleTaskStatus.Succeeded : SpindleTaskStatus.Pending;

        ValueTaskSourceStatus IValueTaskSource.GetStatus(short token) => (ValueTaskSourceStatus)GetStatus(token);

        public void GetResult(short token)
        {
            signal.Set();
            readAfterSet?.Invoke();
        }

        public void OnCompleted(Action<object?> continuation, object? state, short token)
        {
            _continuation = continuation;
            _state = state;
        }

        void IValueTaskSource.OnCompleted(Action<object?> continuation, object? state, short token, ValueTaskSourceOnCompletedFlags flags)
            => OnCompleted(continuation, state, token);
    }

    /// <summary>
    /// A pending WhenAny whose signal wait loses with a set that landed while the race was decided: the WhenAny reads the
    /// wait (its slot, or its decider's early read when the signal dispatches its waiters) and gives the set back. A read
    /// of the wait by the caller at that instant, or once the WhenAny has completed, must not be a second taker of it.
    /// </summary>
    [Theory]
    [InlineData(false, false)]
    [InlineData(false, true)]
    [InlineData(true, false)]
    [InlineData(true, true)]
    public void WhenAnyPending_ALosingWaitWhoseSetWasGivenBack_ReadByTheCaller_IsHandedOutOnce(bool dispatch, bool readAtTheDecision)
    {
        var signal = new Signal(false, runContinuationsAsynchronously: dispatch);
        SpindleTask wait = signal.WaitAsync();
        Exception? atTheDecision = null;
        bool read = false;
        var winner = new SetsWhenRead(signal, readAtTheDecision ? () =>
        {
            read = true;
            atTheDecision = Read(wait);
        } : null);
        SpindleTask<int> any = SpindleTask.WhenAny(new SpindleTask(winner, 0), wait);
        Assert.False(any.IsCompleted);
        winner.Complete();
        Assert.Equal(0, any.GetAwaiter().GetResult());
        Assert.Equal(readAtTheDecision, read);
        // A dispatched slot may give the set back on a worker after the WhenAny completed: wait for the read to settle.
        Assert.True(SpinWait.SpinUntil(() => !signal.HasWaiter && (signal.IsSet || readAtTheDecision),
            TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "the losing wait's set was neither given back nor read");
        string what = "the caller read the losing wait " + (readAtTheDecision ? "at the decision" : "after the WhenAny")
            + " and the WhenAny gave its set back" + (dispatch ? " (dispatched)" : "");
        AssertOneTaker(signal, () => readAtTheDecision ? atTheDecision : Read(wait), what);
    }
}

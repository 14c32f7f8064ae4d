using System;
using System.Collections.Concurrent;
using System.Linq;
using System.Runtime.CompilerServices;
using System.Threading;
using System.Threading.Tasks;
using static SpindleLib.Tests.UnobservedReports;
using static SpindleLib.Tests.Combinators.CombinatorTestSupport;

namespace SpindleLib.Tests.Combinators;

/// <summary>
/// A WhenAny settled at the call reads its winner and lets go of its losers. A losing signal wait that has ended is read
/// by the let-go, and the set it took is given back to the signal when it never reached anybody: but a signal's wait may
/// be read again, and a wait the caller has read, or that an awaiter elsewhere got resumed by (the caller's misuse), has
/// handed its set out already. Given back as well, the one set was counted twice: the next wait completed with nobody
/// having set the signal. An auto-reset signal never hands out more completions than sets.
/// </summary>
[Collection(SequentialCollection.Name)] // process-wide hooks, and UnobservedException
public class SettledLetGoMisuseTests
{
    public enum Reader
    {
        /// <summary>The wait was read synchronously (its task completed before the read).</summary>
        Read,

        /// <summary>An async method awaited the wait and was resumed by the set.</summary>
        Awaited,
    }

    /// <summary>
    /// A wait of <paramref name="signal"/> that a set completed and that <paramref name="reader"/> then took the set of: the
    /// caller's own read (a signal's wait may be read again) or an awaiter the set resumed; counted in <paramref name="resumed"/>.
    /// </summary>
    private static SpindleTask WaitWhoseSetReached(Signal signal, Reader reader, StrongBox<int> resumed)
    {
        SpindleTask wait = signal.WaitAsync();
        if (reader == Reader.Awaited)
        {
            _ = AwaitAndCount(wait, resumed);
        }
        signal.Set();
        if (reader == Reader.Read)
        {
            wait.GetAwaiter().GetResult();
            resumed.Value++;
        }
        Assert.Equal(1, resumed.Value);
        return wait;
    }

    [Theory]
    [InlineData(Reader.Read)]
    [InlineData(Reader.Awaited)]
    public void AllFinished_ALosingWaitWhoseSetWasTakenAlready_IsNotGivenBackAsASecondSet(Reader reader)
    {
        var signal = new Signal();
        var resumed = new StrongBox<int>();
        SpindleTask wait = WaitWhoseSetReached(signal, reader, resumed);
        int winner = SpindleTask.WhenAny(SpindleTask.CompletedTask, wait).GetAwaiter().GetResult();
        Assert.Equal(0, winner);
        AssertTheSetWasHandedOutOnce(signal, "the wait's " + reader + " took it and the settled WhenAny gave it back");
    }

    /// <summary>
    /// The winner's form: a WhenAny settled at the call whose loser is awaited elsewhere throws, and gives back the set
    /// its read of the winning wait took (decisions section 27); but if the caller had read that wait already, the set
    /// was the caller's, not the failed call's.
    /// </summary>
    [Theory]
    [InlineData(Reader.Read)]
    [InlineData(Reader.Awaited)]
    public void SettledAtTheCall_ALoserAwaitedElsewhere_AWinningWaitWhoseSetWasTakenAlready_IsNotGivenBack(Reader reader)
    {
        var signal = new Signal();
        var resumed = new StrongBox<int>();
        SpindleTask wait = WaitWhoseSetReached(signal, reader, resumed);
        var other = new Promise();
        SpindleTask awaited = other.Task;
        awaited.Forget(); // pending, and it already has its one awaiter
        Assert.Throws<InvalidOperationException>(() => SpindleTask.WhenAny(wait, awaited));
        Assert.Equal(1, resumed.Value);
        AssertTheSetWasHandedOutOnce(signal, "the wait's " + reader + " took it and the failed WhenAny gave it back");
        other.SetResult();
    }

    /// <summary>The section-27 case stays: a winning wait nobody had read gives its set back when the call throws.</summary>
    [Fact]
    public void SettledAtTheCall_ALoserAwaitedElsewhere_AWinningWaitNobodyRead_GivesItsSetBack()
    {
        var signal = new Signal();
        SpindleTask wait = signal.WaitAsync();
        signal.Set();
        var other = new Promise();
        SpindleTask awaited = other.Task;
        awaited.Forget();
        Assert.Throws<InvalidOperationException>(() => SpindleTask.WhenAny(wait, awaited));
        Assert.True(signal.IsSet, "the set the failed call had taken was lost");
        Assert.Throws<InvalidOperationException>(() => wait.GetAwaiter().GetResult()); // given back: the wait's token is stale
        other.SetResult();
    }

    /// <summary>A losing wait nobody had read still gives its set back (section 21's rule), and its token goes stale.</summary>
    [Fact]
    public void AllFinished_ALosingWaitNobodyRead_GivesItsSetBack_AndALaterReadOfItThrows()
    {
        var signal = new Signal();
        SpindleTask wait = signal.WaitAsync();
        signal.Set();
        Assert.Equal(0, SpindleTask.WhenAny(SpindleTask.CompletedTask, wait).GetAwaiter().GetResult());
        Assert.True(signal.IsSet, "the losing wait's set was lost");
        Assert.Throws<InvalidOperationException>(() => wait.GetAwaiter().GetResult());
        SpindleTask next = signal.WaitAsync();
        Assert.True(next.IsCompleted);
        next.GetAwaiter().GetResult();
    }

#if DEBUG
    /// <summary>
    /// The suspected window itself: the losing wait is awaited elsewhere (the caller's misuse), so the let-go cannot
    /// abandon it; the signal is set just after that attempt fails, and the set resumes the awaiter. The let-go then
    /// found the wait ended by a set and gave that set back too.
    /// </summary>
    [Fact]
    public void SettledAtTheCall_ALoserAwaitedElsewhere_SetJustAfterTheLetGoFails_IsHandedOutOnce()
    {
        var signal = new Signal();
        SpindleTask wait = signal.WaitAsync();
        var resumed = new StrongBox<int>();
        _ = AwaitAndCount(wait, resumed); // the misuse: the wait has an awaiter, and is passed to a WhenAny too
        bool ran = false;
        SpindleInputs.TestHookAfterAbandonFailed = source =>
        {
            if (ReferenceEquals(source, signal))
            {
                SpindleInputs.TestHookAfterAbandonFailed = null;
                ran = true;
                signal.Set(); // resumes the awaiter, inline
            }
        };
        Exception? thrown;
        try
        {
            thrown = Record.Exception(() => Assert.Equal(0, SpindleTask.WhenAny(SpindleTask.CompletedTask, wait).GetAwaiter().GetResult()));
        }
        finally
        {
            SpindleInputs.TestHookAfterAbandonFailed = null;
        }
        Assert.True(ran);
        Assert.True(thrown is null or InvalidOperationException, "unexpected: " + thrown);
        Assert.Equal(1, resumed.Value);
        AssertTheSetWasHandedOutOnce(signal, "the awaiter elsewhere was resumed by it and the settled WhenAny gave it back");
    }

    /// <summary>
    /// Another thread reads the losing wait at the instant the let-go meets it (after its abandon attempt failed, before
    /// its own read): exactly one of them has the set, or the misused read throws.
    /// </summary>
    [Fact]
    public void AllFinished_ALosingWaitReadFromAnotherThreadAtTheLetGo_IsHandedOutOnce()
    {
        var signal = new Signal();
        SpindleTask wait = signal.WaitAsync();
        signal.Set();
        Exception? otherRead = null;
        bool ran = false;
        SpindleInputs.TestHookAfterAbandonFailed = source =>
        {
            if (ReferenceEquals(source, signal))
            {
                SpindleInputs.TestHookAfterAbandonFailed = null;
                ran = true;
                otherRead = Record.Exception(() => TestUtil.RunOnThread(() => wait.GetAwaiter().GetResult())
                    .Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)));
            }
        };
        try
        {
            Assert.Equal(0, SpindleTask.WhenAny(SpindleTask.CompletedTask, wait).GetAwaiter().GetResult());
        }
        finally
        {
            SpindleInputs.TestHookAfterAbandonFailed = null;
        }
        Assert.True(ran);
        if (otherRead is null)
        {
            AssertTheSetWasHandedOutOnce(signal, "the other thread's read took it and the settled WhenAny gave it back");
        }
        else
        {
            Assert.True(signal.IsSet, "the other thread's read failed, and the set was lost: " + otherRead);
        }
    }

    /// <summary>
    /// Item 3 of the brief: a WhenAny whose inputs have all finished, and another thread that reads a losing pooled input
    /// (an async method's box) at the instant the settling reaches it. The box may be read once: whichever read comes
    /// second must fail with the await-once error (to its caller), the box must go back to its pool once, and a fault
    /// must reach exactly one reader or be reported once: never lost, never read twice.
    /// </summary>
    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public void AllFinished_APooledLoserReadFromAnotherThreadAtTheSettling_IsReadOnce_AndPooledOnce(bool faulted)
    {
        var gates = new[] { new Promise(), new Promise() }; // a promise's task has one awaiter at a time
        var error = new InvalidTimeZoneException("the losing box's fault");
        SpindleTask<int> winner = ValueAfter(gates[0], 1);
        SpindleTask<int> loser = faulted ? FailsAfter(gates[1], error) : ValueAfter(gates[1], 2);
        gates[0].SetResult();
        gates[1].SetResult(); // both finish: the WhenAny below settles at the call, with no combinator
        Assert.Equal(faulted ? SpindleTaskStatus.Faulted : SpindleTaskStatus.Succeeded, loser.Status);
        object box = loser._source!;
        int returned = 0;
        Exception? otherRead = null;
        int otherValue = 0;
        bool ran = false;
        PoolTestHooks.Returning = item =>
        {
            if (ReferenceEquals(item, box))
            {
                Interlocked.Increment(ref returned);
            }
        };
        Combine.TestHookBeforeLetGo = index =>
        {
            Combine.TestHookBeforeLetGo = null;
            ran = true;
            otherRead = Record.Exception(() => TestUtil.RunOnThread(() => otherValue = loser.GetAwaiter().GetResult())
                .Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)));
        };
        Exception? thrown = null;
        ConcurrentQueue<Exception> reported;
        try
        {
            reported = Observe(Own.Any(Own.Instances(error), Own.ReportedOnTestThreads()), () =>
                thrown = Record.Exception(() => Assert.Equal((0, 1), SpindleTask.WhenAny((ReadOnlySpan<SpindleTask<int>>)new[] { winner, loser }).GetAwaiter().GetResult())));
        }
        finally
        {
            Combine.TestHookBeforeLetGo = null;
            PoolTestHooks.Returning = null;
        }
        Assert.True(ran);
        Exception? otherError = (otherRead as AggregateException)?.InnerException ?? otherRead;
        string seen = "call: " + (thrown?.Message ?? "returned") + "; other read: " + (otherError?.Message ?? "value " + otherValue)
            + "; reported: " + string.Join(" | ", reported);
        Assert.Equal(1, Volatile.Read(ref returned));
        if (faulted)
        {
            int reachedError = (ReferenceEquals(otherError, error) ? 1 : 0) + reported.Count(e => ReferenceEquals(e, error));
            Assert.True(reachedError == 1, "the loser's fault reached " + reachedError + " readers: " + seen);
        }
        else
        {
            Assert.True(otherError is null ? otherValue == 2 : otherError is InvalidOperationException, seen);
        }
        // The misuse is an exception somewhere: the second read of the box threw, to the call or to the other reader.
        Assert.True(thrown is InvalidOperationException || otherError is InvalidOperationException
            || reported.Count(e => e is InvalidOperationException) == 1, "the misuse went unnoticed: " + seen);
    }
#endif
}

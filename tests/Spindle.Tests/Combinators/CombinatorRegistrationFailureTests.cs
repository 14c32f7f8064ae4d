using System;
using System.Collections.Concurrent;
using System.Linq;
using System.Threading.Tasks;
using static SpindleLib.Tests.Combinators.CombinatorTestSupport;
using static SpindleLib.Tests.UnobservedReports;

namespace SpindleLib.Tests.Combinators;

/// <summary>
/// A combinator whose registration throws part-way (a pending input already awaited elsewhere, or the same task passed
/// twice: the caller's error) throws that error and leaves nothing half-done: a WhenAny lets go of the inputs it had
/// taken, a fault of one of them is still reported, and the combinator goes back to its pool once they are settled.
/// Before, the inputs taken stayed attached to a combinator nobody would read (a promise could not be reset, a fault
/// was lost, the combinator never pooled). Found by a review. Sequential: the tests watch UnobservedException.
/// </summary>
[Collection(SequentialCollection.Name)]
public class CombinatorRegistrationFailureTests
{
    private static async SpindleTask FailsAfter(Promise gate, Exception error)
    {
        await gate.Task;
        throw error;
    }

    [Fact]
    public void WhenAny_SameTaskTwice_Throws_AndLetsGoOfIt()
    {
        var p = new Promise();
        SpindleTask t = p.Task;
        InvalidOperationException error = Assert.Throws<InvalidOperationException>(() => SpindleTask.WhenAny(t, t));
        Assert.Contains("Preserve", error.Message, StringComparison.Ordinal);
        p.Reset(); // nobody awaits it any more
        SpindleTask next = p.Task;
        p.SetResult();
        next.GetAwaiter().GetResult();
    }

    [Fact]
    public async Task WhenAny_ALaterInputAlreadyAwaited_Throws_AndAFaultOfAnEarlierInputIsReported()
    {
        var gate = new Promise();
        var error = new InvalidTimeZoneException("earlier input");
        ConcurrentQueue<Exception> reported = await ObserveAsync(Own.Instances(error), async _ =>
        {
            SpindleTask failing = FailsAfter(gate, error);
            var other = new Promise();
            SpindleTask awaited = other.Task;
            awaited.Forget(); // pending, and it already has its one awaiter
            Assert.Throws<InvalidOperationException>(() => SpindleTask.WhenAny(failing, awaited));
            gate.SetResult(); // the async method was let go of (forgotten): it reports its own fault
            await Task.Yield();
            other.SetResult();
        });
        Assert.Equal(new Exception[] { error }, reported.ToArray());
    }

    /// <summary>
    /// The same misuse where the WhenAny settles at the call (its first input had already failed, so no combinator is
    /// rented): letting go of the loser that is awaited elsewhere throws. The finished winner had already been read
    /// (consumed: an async method's box goes back to its pool), so its fault must be reported, as the combinator path
    /// reports an input it had taken; before, it was read, then dropped with the exception, and reported nowhere.
    /// </summary>
    [Fact]
    public void WhenAny_SettledAtTheCall_ALoserAlreadyAwaited_Throws_AndTheFinishedWinnersFaultIsReported()
    {
        var gate = new Promise();
        var error = new InvalidTimeZoneException("the finished winner");
        ConcurrentQueue<Exception> reported = Observe(Own.Instances(error), () =>
        {
            SpindleTask failed = FailsAfter(gate, error);
            gate.SetResult(); // the async method has failed: the WhenAny below settles at the call
            Assert.Equal(SpindleTaskStatus.Faulted, failed.Status);
            var other = new Promise();
            SpindleTask awaited = other.Task;
            awaited.Forget(); // pending, and it already has its one awaiter
            Assert.Throws<InvalidOperationException>(() => SpindleTask.WhenAny(failed, awaited));
            other.SetResult();
        });
        Assert.Equal(new Exception[] { error }, reported.ToArray());
    }

    /// <summary>
    /// As above, with a signal's wait as the finished winner: its read took the set, which never reached the caller (who
    /// got the exception). A set is delivered or kept, never lost: it is given back to the signal, whose next wait takes
    /// it. Before, the wait was read and the set dropped with the exception.
    /// </summary>
    [Fact]
    public void WhenAny_SettledAtTheCall_ALoserAlreadyAwaited_Throws_AndTheWinningWaitsSetIsKept()
    {
        var signal = new Signal();
        SpindleTask wait = signal.WaitAsync();
        signal.Set(); // the wait has taken the set: the WhenAny below settles at the call
        var other = new Promise();
        SpindleTask awaited = other.Task;
        awaited.Forget(); // pending, and it already has its one awaiter
        Assert.Throws<InvalidOperationException>(() => SpindleTask.WhenAny(wait, awaited));
        SpindleTask next = signal.WaitAsync();
        Assert.True(next.IsCompleted, "the set the failed call had taken was lost");
        next.GetAwaiter().GetResult();
        other.SetResult();
    }

    /// <summary>
    /// As above, with a signal's wait as the loser already awaited elsewhere: the call throws the same error, as for a
    /// promise's task, reports nothing, and leaves the wait to its awaiter, which the next set resumes. Before, letting go
    /// of it read the pending wait with a read that caught the refusal of its registration: the call returned the finished
    /// input as the winner, and the await-once error went to Spindle.UnobservedException instead of to the caller.
    /// </summary>
    [Fact]
    public void WhenAny_SettledAtTheCall_ASignalWaitLoserAlreadyAwaited_Throws_AndItsAwaiterKeepsTheWait()
    {
        var finished = new Promise();
        finished.SetResult();
        var signal = new Signal();
        SpindleTask wait = signal.WaitAsync();
        int resumed = 0;
        wait.GetAwaiter().OnCompleted(() => resumed++); // pending, and it already has its one awaiter
        ConcurrentQueue<Exception> reported = Observe(Own.ReportedOnTestThreads(), () => // the await-once error this call would report, inline
        {
            Exception? thrown = Record.Exception(() => SpindleTask.WhenAny(finished.Task, wait));
            Assert.True(thrown is InvalidOperationException, "the call did not throw the await-once error: " + (thrown?.ToString() ?? "it returned"));
        });
        Assert.Empty(reported);
        signal.Set();
        Assert.Equal(1, resumed);
        Assert.False(signal.IsSet, "the set reached the wait's awaiter");
    }

    /// <summary>
    /// The winner and a finished loser are signal waits that took a set, and a later loser is a signal wait already
    /// awaited elsewhere: the call throws; each set it had taken is given back exactly once (the signal is set, and its
    /// next wait takes it; a second one finds nothing), and the awaited wait stays its awaiter's, resumed once by the next
    /// set. Written by the review of stop 31's changes; passes on the current code.
    /// </summary>
    [Fact]
    public void WhenAny_SettledAtTheCall_SetsTakenByTheWinnerAndAFinishedLoser_AreEachGivenBackOnce_WhenALaterLoserThrows()
    {
        var winner = new Signal();
        SpindleTask winning = winner.WaitAsync();
        winner.Set();
        var loser = new Signal();
        SpindleTask finishedLoser = loser.WaitAsync();
        loser.Set();
        var awaited = new Signal();
        SpindleTask awaitedWait = awaited.WaitAsync();
        int resumed = 0;
        awaitedWait.GetAwaiter().OnCompleted(() => resumed++);
        ConcurrentQueue<Exception> reported = Observe(Own.ReportedOnTestThreads(), () =>
            Assert.Throws<InvalidOperationException>(() => SpindleTask.WhenAny(winning, finishedLoser, awaitedWait)));
        Assert.Empty(reported);
        foreach (Signal signal in new[] { winner, loser })
        {
            SpindleTask next = signal.WaitAsync();
            Assert.True(next.IsCompleted, "a set the failed call had taken was lost");
            next.GetAwaiter().GetResult();
            SpindleTask<bool> after = signal.WaitAsync(TimeSpan.Zero);
            Assert.True(after.IsCompleted);
            Assert.False(after.GetAwaiter().GetResult(), "a set the failed call had taken was given back twice");
        }
        Assert.Throws<InvalidOperationException>(() => winning.GetAwaiter().GetResult()); // given back: the copy is stale
        Assert.Equal(0, resumed);
        awaited.Set();
        Assert.Equal(1, resumed);
        Assert.False(awaited.IsSet, "the set reached the wait's awaiter");
    }

    [Fact]
    public void WhenAll_ALaterInputAlreadyAwaited_Throws_AnEarlierFaultIsReported_AndTheCombinatorIsPooledAgain()
    {
        var a = new Promise();
        var b = new Promise();
        var error = new InvalidTimeZoneException("earlier input");
        // One combinator in this thread's pool first, so the failed call rents it: if it were never recycled, the count
        // would end one lower.
        var warm = new Promise();
        SpindleTask warmAll = SpindleTask.WhenAll(warm.Task, SpindleTask.CompletedTask);
        warm.SetResult();
        warmAll.GetAwaiter().GetResult();
        int pooled = ObjectPool<Combinator<VoidResult>>.LocalCount + ObjectPool<Combinator<VoidResult>>.Count;
        Assert.True(pooled > 0);
        ConcurrentQueue<Exception> reported = Observe(Own.Instances(error), () =>
        {
            SpindleTask awaited = b.Task;
            awaited.Forget();
            Assert.Throws<InvalidOperationException>(() => SpindleTask.WhenAll(a.Task, awaited, SpindleTask.CompletedTask));
            a.SetException(error); // a WhenAll without a token reads its inputs when they finish: this one, with nobody to rethrow to
            b.SetResult();
        });
        Assert.Equal(new Exception[] { error }, reported.ToArray());
        Assert.True(ObjectPool<Combinator<VoidResult>>.LocalCount + ObjectPool<Combinator<VoidResult>>.Count >= pooled,
            "the combinator of the failed call never went back to its pool");
        a.Reset();
    }

    [Fact]
    public void WhenAll_TupleForm_ALaterInputAlreadyAwaited_Throws_AndTheEarlierInputIsReadWhenItFinishes()
    {
        var a = new Promise<int>();
        var b = new Promise<string>();
        SpindleTask<string> awaited = b.Task;
        awaited.Forget();
        ConcurrentQueue<Exception> reported = Observe(Own.ReportedOnTestThreads(), () => // whatever this call and the inline completions would report
        {
            Assert.Throws<InvalidOperationException>(() => SpindleTask.WhenAll(a.Task, awaited));
            a.SetResult(1);
            b.SetResult("b");
        });
        Assert.Empty(reported);
        a.Reset(); // read by the abandoned combination: not awaited any more
    }

    [Fact]
    public void WithTimeout_AnInputAwaitedElsewhere_Throws_AndNothingIsLeftBehind()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var p = new Promise();
        SpindleTask awaited = p.Task;
        awaited.Forget();
        ConcurrentQueue<Exception> reported = Observe(Own.ReportedOnTestThreads(), () => // whatever this call and the inline timer pass would report
        {
            Assert.Throws<InvalidOperationException>(() => awaited.WithTimeout(TimeSpan.FromSeconds(1), wheel));
            Assert.Equal(0, wheel.PendingCount);
            clock.Advance(TimeSpan.FromSeconds(2));
            p.SetResult();
        });
        Assert.Empty(reported);
    }
}

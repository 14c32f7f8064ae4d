using System;
using System.Collections.Concurrent;
using System.Threading;
using static SpindleLib.Tests.Combinators.CombinatorTestSupport;
using static SpindleLib.Tests.UnobservedReports;

namespace SpindleLib.Tests.Combinators;

/// <summary>
/// The same long-lived task raced in every turn of a loop, as BCL code races a <c>TaskCompletionSource</c>'s task or a
/// shared task (<c>await Task.WhenAny(next, stop.Task)</c>, <c>await tcs.Task.WaitAsync(timeout)</c> until it answers):
/// a combinator that lost the race let go of the task, so the next turn awaits it again, and nothing piles up per turn.
/// A promise's task takes one awaiter at a time, so a use a combinator let go of can be awaited again (its fault then
/// goes to that awaiter; awaited by nobody, it is reported once when it completes); a <c>Preserve()</c>d task holds
/// no waiter of a combinator that let go of it.
/// </summary>
[Collection(SequentialCollection.Name)] // UnobservedException is process-wide
public class RacedEveryTurnTests
{
    private const int Turns = 2_000;

    private static readonly TimeSpan Five = TimeSpan.FromMilliseconds(5);

    /// <summary>A turn's race, pending when called (the signal set after the call) or settled at the call (set before).</summary>
    public static TheoryData<bool> SetBeforeTheCall => new() { false, true };

    [Theory]
    [MemberData(nameof(SetBeforeTheCall))]
    public void Promise_StopTaskRacedEveryTurn_TheLoopRunsUntilTheStopWins(bool setFirst)
    {
        var signal = new Signal();
        var stop = new Promise();
        SpindleTask stopTask = stop.Task;
        for (int turn = 0; turn < Turns; turn++)
        {
            if (setFirst)
            {
                signal.Set();
            }
            SpindleTask<int> any = SpindleTask.WhenAny(signal.WaitAsync(), stopTask);
            if (!setFirst)
            {
                signal.Set();
            }
            Assert.Equal(0, any.GetAwaiter().GetResult()); // before: "already has an awaiter" at the second turn
        }
        SpindleTask<int> last = SpindleTask.WhenAny(signal.WaitAsync(), stopTask);
        stop.SetResult();
        Assert.Equal(1, last.GetAwaiter().GetResult());
        Assert.False(signal.HasWaiter);
        Assert.Equal(1, SpindleTask.WhenAny(signal.WaitAsync(), stopTask).GetAwaiter().GetResult()); // completed: read again
    }

    [Fact]
    public void TypedPromise_WithTimeoutEveryTurn_TheSameUseIsWaitedOnUntilItAnswers()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var reply = new Promise<int>();
        for (int turn = 0; turn < 50; turn++)
        {
            SpindleTask<int> wait = reply.Task.WithTimeout(Five, wheel);
            clock.Advance(Five);
            Assert.Throws<TimeoutException>(() => wait.GetAwaiter().GetResult());
        }
        SpindleTask<int> answered = reply.Task.WithTimeout(Five, wheel);
        reply.SetResult(42);
        Assert.Equal(42, answered.GetAwaiter().GetResult());
        Assert.Equal(0, wheel.PendingCount);
    }

    [Fact]
    public void Promise_WithCancellationEveryTurn_TheSameUseIsWaitedOnAgain()
    {
        var done = new Promise();
        for (int turn = 0; turn < 50; turn++)
        {
            using var cts = new CancellationTokenSource();
            SpindleTask wait = done.Task.WithCancellation(cts.Token);
            cts.Cancel();
            Assert.ThrowsAny<OperationCanceledException>(() => wait.GetAwaiter().GetResult());
        }
        using var last = new CancellationTokenSource();
        SpindleTask finished = done.Task.WithCancellation(last.Token);
        done.SetResult();
        finished.GetAwaiter().GetResult();
    }

    [Fact]
    public void Promise_LetGoThenAwaitedAgain_ItsFaultGoesToTheNewAwaiter_AndIsNotReported()
    {
        var other = new Promise();
        var stop = new Promise();
        var error = new InvalidTimeZoneException("stop failed");
        ConcurrentQueue<Exception> reported = Observe(Own.Instances(error), () =>
        {
            SpindleTask<int> first = SpindleTask.WhenAny(other.Task, stop.Task);
            other.SetResult();
            Assert.Equal(0, first.GetAwaiter().GetResult());
            other.Reset();
            SpindleTask<int> second = SpindleTask.WhenAny(other.Task, stop.Task);
            stop.SetException(error);
            Assert.Same(error, Assert.Throws<InvalidTimeZoneException>(() => second.GetAwaiter().GetResult()));
        });
        Assert.Empty(reported);
    }

    [Fact]
    public void Promise_LetGoAndNeverAwaitedAgain_ItsFaultIsReportedOnce()
    {
        var other = new Promise();
        var stop = new Promise();
        var error = new InvalidTimeZoneException("stop failed, nobody waits");
        ConcurrentQueue<Exception> reported = Observe(Own.Instances(error), () =>
        {
            SpindleTask<int> any = SpindleTask.WhenAny(other.Task, stop.Task);
            other.SetResult();
            Assert.Equal(0, any.GetAwaiter().GetResult());
            stop.SetException(error);
            stop.Task.Forget(); // read again later and forgotten: the same completion is not reported twice
        });
        Assert.Equal(new Exception[] { error }, reported.ToArray());
    }

    [Fact]
    public void Promise_LetGoThenAwaitedAgain_StillOneAwaiterAtATime_AndNoResetUnderIt()
    {
        var other = new Promise();
        var stop = new Promise();
        SpindleTask<int> lost = SpindleTask.WhenAny(other.Task, stop.Task);
        other.SetResult();
        Assert.Equal(0, lost.GetAwaiter().GetResult());
        stop.Reset(); // a use let go of may be reset: a new use starts
        other.Reset();
        SpindleTask<int> again = SpindleTask.WhenAny(other.Task, stop.Task);
        other.SetResult();
        Assert.Equal(0, again.GetAwaiter().GetResult());
        int ran = 0;
        stop.Task.GetAwaiter().UnsafeOnCompleted(() => ran++); // the let-go use awaited again
        var second = Assert.Throws<InvalidOperationException>(() => stop.Task.GetAwaiter().UnsafeOnCompleted(() => { }));
        Assert.Contains("Preserve()", second.Message, StringComparison.Ordinal);
        Assert.Throws<InvalidOperationException>(() => stop.Reset()); // an await on it is pending again
        stop.SetResult();
        Assert.Equal(1, ran);
    }

    [Theory]
    [MemberData(nameof(SetBeforeTheCall))]
    public void Preserved_StopTaskRacedEveryTurn_HoldsNoWaiterOfALostRace(bool setFirst)
    {
        var signal = new Signal();
        var stop = new Promise<int>();
        SpindleTask<int> stopTask = stop.Task.Preserve();
        for (int turn = 0; turn < Turns; turn++)
        {
            if (setFirst)
            {
                signal.Set();
            }
            SpindleTask<int> any = SpindleTask.WhenAny(signal.WaitAsync(), stopTask.AsSpindleTask());
            if (!setFirst)
            {
                signal.Set();
            }
            Assert.Equal(0, any.GetAwaiter().GetResult());
            Assert.Equal(0, PreservedWaiters(stopTask)); // before: one more per turn, each holding its combinator
        }
        SpindleTask<int> last = SpindleTask.WhenAny(signal.WaitAsync(), stopTask.AsSpindleTask());
        stop.SetResult(7);
        Assert.Equal(1, last.GetAwaiter().GetResult());
        Assert.Equal(7, stopTask.GetAwaiter().GetResult());
    }

    [Fact]
    public void Preserved_WithTimeoutEveryTurn_HoldsNoWaiter_AndAnswersTheLastTurn()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var reply = new Promise<int>();
        SpindleTask<int> shared = reply.Task.Preserve();
        for (int turn = 0; turn < 50; turn++)
        {
            SpindleTask<int> wait = shared.WithTimeout(Five, wheel);
            clock.Advance(Five);
            Assert.Throws<TimeoutException>(() => wait.GetAwaiter().GetResult());
            Assert.Equal(0, PreservedWaiters(shared));
        }
        SpindleTask<int> answered = shared.WithTimeout(Five, wheel);
        reply.SetResult(42);
        Assert.Equal(42, answered.GetAwaiter().GetResult());
    }

    [Fact]
    public void Preserved_LetGoAndAwaitedByNobody_ItsFaultIsReportedOnce_AwaitedByTheNextTurn_NotAtAll()
    {
        var error = new InvalidTimeZoneException("shared failed, nobody waits");
        var error2 = new InvalidTimeZoneException("shared failed, the next turn waits");
        ConcurrentQueue<Exception> reported = Observe(Own.Instances(error, error2), () =>
        {
            foreach (Exception e in new Exception[] { error, error2 })
            {
                var source = new Promise();
                var other = new Promise();
                SpindleTask shared = source.Task.Preserve();
                SpindleTask<int> lost = SpindleTask.WhenAny(other.Task, shared);
                other.SetResult();
                Assert.Equal(0, lost.GetAwaiter().GetResult());
                if (e == error2)
                {
                    other.Reset();
                    SpindleTask<int> next = SpindleTask.WhenAny(other.Task, shared);
                    source.SetException(e);
                    Assert.Same(e, Assert.Throws<InvalidTimeZoneException>(() => next.GetAwaiter().GetResult())); // the winner's fault
                }
                else
                {
                    source.SetException(e);
                }
                Assert.Same(e, Assert.Throws<InvalidTimeZoneException>(() => shared.GetAwaiter().GetResult()));
            }
        });
        Assert.Equal(new Exception[] { error }, reported.ToArray());
    }

    /// <summary>The waiters a <c>Preserve()</c>d task holds (continuations registered before it completed).</summary>
    private static int PreservedWaiters<T>(SpindleTask<T> preserved)
        => ((PreservedSource<T>)preserved._source!).WaiterCountForTests;
}

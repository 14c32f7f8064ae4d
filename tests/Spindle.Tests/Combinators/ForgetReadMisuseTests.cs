using System;
using System.Collections.Concurrent;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using static SpindleLib.Tests.UnobservedReports;
using static SpindleLib.Tests.Combinators.CombinatorTestSupport;

namespace SpindleLib.Tests.Combinators;

/// <summary>
/// <c>Forget()</c> of a task that has finished reads it at the call (ForgetObserver.Observe), as does a WhenAny settled at
/// the call for a loser it cannot let go of. Another thread that reads the same pooled task (an async method's box) at
/// that instant is the caller's misuse: the box may be read once. A read that comes before the call's look at the task
/// makes the call throw the await-once error (its status check finds the token stale); one that comes between that look
/// and the call's read must do the same, not leave the error to <see cref="Spindle.UnobservedException"/>, where it was
/// reported as if the forgotten task had faulted with it. Either way the box is read once, pooled once, and its fault
/// reaches exactly one reader.
/// </summary>
[Collection(SequentialCollection.Name)] // process-wide hooks, and UnobservedException
public class ForgetReadMisuseTests
{
    /// <summary>
    /// <c>Forget()</c> of a pending task racing the fault that finishes it (the observer registered first, or the
    /// registration finding the task finished and leaving the read to the call, or the task finished before the call's
    /// look): the fault is reported exactly once a round, and the call never throws (nobody else reads the task).
    /// </summary>
    [Fact]
    public async Task Forget_RacingTheFaultThatFinishesThePendingTask_ReportsTheFaultOnce()
    {
        var promise = new Promise();
        var error = new InvalidTimeZoneException("the forgotten combination's fault, once a round");
        SpindleTask<int> any = default;
        int rounds = 0;
        ConcurrentQueue<Exception> reported = await ObserveAsync(Own.Any(Own.Instances(error), Own.AwaitOnceErrors()), async q =>
            rounds = await TestUtil.WithTimeout(Race.Run(TestUtil.Stress(20_000),
                before: _ =>
                {
                    promise.Reset();
                    any = SpindleTask.WhenAny(promise.Task);
                },
                after: round => Assert.True(q.Count == round + 1, $"round {round}: {q.Count} reports after {round + 1} faults"),
                _ => any.Forget(),
                _ => promise.SetException(error))));
        Assert.Equal(rounds, reported.Count);
        Assert.All(reported, e => Assert.Same(error, e));
    }

#if DEBUG
    private sealed class Outcome
    {
        public Exception? Thrown;
        public Exception? OtherError;
        public int OtherValue;
        public int Returned;
        public bool Ran;
        public ConcurrentQueue<Exception> Reported = new();

        public string Seen => "call: " + (Thrown?.Message ?? "returned") + "; other read: " + (OtherError?.Message ?? "value " + OtherValue)
            + "; reported: " + string.Join(" | ", Reported.Select(e => e.GetType().Name + ": " + e.Message));
    }

    /// <summary>
    /// Runs <paramref name="call"/>, whose read of <paramref name="task"/> at the call meets another thread's read of it
    /// (the hook, between the call's look at the task and its read).
    /// </summary>
    private static Outcome ReadElsewhereAtTheCallsRead(SpindleTask<int> task, Exception error, Action call)
    {
        var outcome = new Outcome();
        object box = task._source!;
        PoolTestHooks.Returning = item =>
        {
            if (ReferenceEquals(item, box))
            {
                Interlocked.Increment(ref outcome.Returned);
            }
        };
        ForgetObserver.TestHookBeforeReadAtCall = source =>
        {
            if (!ReferenceEquals(source, box))
            {
                return;
            }
            ForgetObserver.TestHookBeforeReadAtCall = null;
            outcome.Ran = true;
            Exception? other = Record.Exception(() => TestUtil.RunOnThread(() => outcome.OtherValue = task.GetAwaiter().GetResult())
                .Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)));
            outcome.OtherError = (other as AggregateException)?.InnerException ?? other;
        };
        try
        {
            outcome.Reported = Observe(Own.Any(Own.Instances(error), Own.AwaitOnceErrors(), Own.ReportedOnTestThreads()),
                () => outcome.Thrown = Record.Exception(call));
        }
        finally
        {
            ForgetObserver.TestHookBeforeReadAtCall = null;
            PoolTestHooks.Returning = null;
        }
        return outcome;
    }

    private static void AssertReadOnce_AndTheMisuseThrownByTheCall(Outcome outcome, bool faulted, Exception error, int value)
    {
        Assert.True(outcome.Ran, "the hook did not run");
        Assert.True(Volatile.Read(ref outcome.Returned) == 1, "the box went back to its pool " + outcome.Returned + " times: " + outcome.Seen);
        if (faulted)
        {
            Assert.True(ReferenceEquals(outcome.OtherError, error), "the other read did not get the box's fault: " + outcome.Seen);
        }
        else
        {
            Assert.True(outcome.OtherError is null && outcome.OtherValue == value, "the other read did not get the box's value: " + outcome.Seen);
        }
        Assert.True(outcome.Thrown is InvalidOperationException { Message: var m } && m == ThrowHelper.AwaitOnceMessage,
            "the call's read of a task read elsewhere did not throw the await-once error to the call: " + outcome.Seen);
        Assert.True(outcome.Reported.IsEmpty, "something was reported: " + outcome.Seen);
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public void Forget_AFinishedBoxReadElsewhereAtTheForgetsRead_ThrowsTheAwaitOnceErrorToTheCaller(bool faulted)
    {
        var gate = new Promise();
        var error = new InvalidTimeZoneException("the forgotten box's fault");
        SpindleTask<int> task = faulted ? FailsAfter(gate, error) : ValueAfter(gate, 7);
        gate.SetResult();
        Assert.True(task.IsCompleted);
        Outcome outcome = ReadElsewhereAtTheCallsRead(task, error, () => task.Forget());
        AssertReadOnce_AndTheMisuseThrownByTheCall(outcome, faulted, error, 7);
    }

    /// <summary>The same window through a WhenAny settled at the call, which forgets a finished loser.</summary>
    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public void WhenAny_SettledAtTheCall_AFinishedLoserReadElsewhereAtTheForgetsRead_ThrowsTheAwaitOnceErrorToTheCaller(bool faulted)
    {
        var gates = new[] { new Promise(), new Promise() };
        var error = new InvalidTimeZoneException("the losing box's fault");
        SpindleTask<int> winner = ValueAfter(gates[0], 1);
        SpindleTask<int> loser = faulted ? FailsAfter(gates[1], error) : ValueAfter(gates[1], 2);
        gates[0].SetResult();
        gates[1].SetResult();
        Outcome outcome = ReadElsewhereAtTheCallsRead(loser, error,
            () => SpindleTask.WhenAny((ReadOnlySpan<SpindleTask<int>>)new[] { winner, loser }).GetAwaiter().GetResult());
        AssertReadOnce_AndTheMisuseThrownByTheCall(outcome, faulted, error, 2);
    }

    /// <summary>
    /// The same misuse when the task is still pending at the call's look and finishes as the call registers its observer:
    /// the registration finds it finished and runs the observer at once, on the caller's thread, inside <c>Forget()</c>.
    /// Another thread's read of the task just then (here a WhenAny's combined task, a pooled source read once) consumes
    /// it before the observer's read, which must throw the await-once error to the caller as the read at the call does,
    /// not report it as the task's fault. (Found by the review of stop 32's changes: the observer run by the registration
    /// read as if Forget() had returned.)
    /// </summary>
    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public void Forget_APendingTaskFinishingAsTheObserverRegisters_ReadElsewhereBeforeItsRead_ThrowsTheAwaitOnceErrorToTheCaller(bool faulted)
    {
        Promise[] inputs = Promises(2);
        var error = new InvalidTimeZoneException("the forgotten combination's fault");
        SpindleTask<int> any = SpindleTask.WhenAny(inputs[0].Task, inputs[1].Task);
        Assert.False(any.IsCompleted);
        object combinator = any._source!;
        int caller = Environment.CurrentManagedThreadId;
        var outcome = new Outcome();
        ForgetObserver.TestHookBeforeRegister = source =>
        {
            if (ReferenceEquals(source, combinator))
            {
                ForgetObserver.TestHookBeforeRegister = null;
                if (faulted)
                {
                    inputs[0].SetException(error);
                }
                else
                {
                    inputs[0].SetResult();
                }
            }
        };
        PoolTestHooks.Returning = item =>
        {
            if (ReferenceEquals(item, combinator))
            {
                Interlocked.Increment(ref outcome.Returned);
            }
            else if (item is ForgetObserver && Environment.CurrentManagedThreadId == caller && !outcome.Ran)
            {
                // The observer is done with its registration and is about to read the finished task: another thread
                // reads it first.
                outcome.Ran = true;
                Exception? other = Record.Exception(() => TestUtil.RunOnThread(() => outcome.OtherValue = any.GetAwaiter().GetResult())
                    .Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)));
                outcome.OtherError = (other as AggregateException)?.InnerException ?? other;
            }
        };
        try
        {
            outcome.Reported = Observe(Own.Any(Own.Instances(error), Own.AwaitOnceErrors(), Own.ReportedOnTestThreads()),
                () => outcome.Thrown = Record.Exception(() => any.Forget()));
        }
        finally
        {
            ForgetObserver.TestHookBeforeRegister = null;
            PoolTestHooks.Returning = null;
        }
        AssertReadOnce_AndTheMisuseThrownByTheCall(outcome, faulted, error, 0);
    }

    /// <summary>
    /// Without the misuse: a pending task that faults as <c>Forget()</c> registers its observer is read at the call, and its
    /// fault reported once; the call returns, and the observer goes back to its pool once.
    /// </summary>
    [Fact]
    public void Forget_APendingTaskFaultingAsTheObserverRegisters_ReportsTheFaultOnce()
    {
        Promise[] inputs = Promises(1);
        var error = new InvalidTimeZoneException("the forgotten combination's fault, read at the call");
        SpindleTask<int> any = SpindleTask.WhenAny(inputs[0].Task);
        object combinator = any._source!;
        int observersReturned = 0;
        ForgetObserver.TestHookBeforeRegister = source =>
        {
            if (ReferenceEquals(source, combinator))
            {
                ForgetObserver.TestHookBeforeRegister = null;
                inputs[0].SetException(error);
            }
        };
        PoolTestHooks.Returning = item =>
        {
            if (item is ForgetObserver)
            {
                Interlocked.Increment(ref observersReturned);
            }
        };
        ConcurrentQueue<Exception> reported;
        try
        {
            reported = Observe(Own.Any(Own.Instances(error), Own.AwaitOnceErrors()), () => any.Forget());
        }
        finally
        {
            ForgetObserver.TestHookBeforeRegister = null;
            PoolTestHooks.Returning = null;
        }
        Assert.Same(error, Assert.Single(reported));
        Assert.Equal(1, Volatile.Read(ref observersReturned));
    }

    /// <summary>The window's other side: a read elsewhere before the call's look throws at the call already (pinned).</summary>
    [Fact]
    public void Forget_AFinishedBoxReadElsewhereBeforeTheCall_ThrowsTheAwaitOnceErrorToTheCaller()
    {
        var gate = new Promise();
        SpindleTask<int> task = ValueAfter(gate, 3);
        gate.SetResult();
        SpindleTask<int> copy = task;
        Assert.Equal(3, copy.GetAwaiter().GetResult());
        ConcurrentQueue<Exception> reported = Observe(Own.Any(Own.AwaitOnceErrors(), Own.ReportedOnTestThreads()),
            () => Assert.Throws<InvalidOperationException>(() => task.Forget()));
        Assert.Empty(reported);
    }
#endif
}

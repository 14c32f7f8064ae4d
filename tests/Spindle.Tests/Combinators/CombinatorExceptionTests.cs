using System;
using System.Collections.Concurrent;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using static SpindleLib.Tests.Combinators.CombinatorTestSupport;
using static SpindleLib.Tests.UnobservedReports;

namespace SpindleLib.Tests.Combinators;

/// <summary>
/// Every input's exception is observed exactly once: rethrown by the combined task, or reported to
/// Spindle.UnobservedException, never both and never neither. The event is process-wide, so these run alone.
/// </summary>
[Collection(SequentialCollection.Name)]
public class CombinatorExceptionTests
{
    [Fact]
    public void WhenAll_SeveralInputsFail_RethrowsTheLowestIndexFailureAndReportsNone()
    {
        var first = new InvalidTimeZoneException("first to fail");
        var second = new FormatException("second");
        var third = new TimeoutException("third");
        Promise[] promises = Promises(4);
        SpindleTask[] inputs = promises.Select(Await).ToArray();
        Exception? thrown = null;

        ConcurrentQueue<Exception> reported = Observe(Own.Instances(first, second, third), () =>
        {
            SpindleTask all = SpindleTask.WhenAll(inputs);
            promises[2].SetException(first);
            promises[0].SetException(second);
            Assert.False(all.IsCompleted);
            promises[3].SetException(third);
            promises[1].SetResult();
            Assert.Equal(SpindleTaskStatus.Faulted, all.Status);
            thrown = Record.Exception(() => all.GetAwaiter().GetResult());
        });

        // As the BCL's await Task.WhenAll: the failure of the lowest index (input 0 failed second), whatever the order.
        Assert.Same(second, thrown);
        Assert.Empty(reported);
        Assert.All(inputs, t => Assert.True(WasConsumed(t), "an input was not read"));
    }

    [Fact]
    public async Task WhenAll_SeveralInputsFail_AwaitRethrowsTheFirstToFail()
    {
        var first = new InvalidTimeZoneException("first to fail");
        Promise[] promises = Promises(3);
        var later = new FormatException("later");
        ConcurrentQueue<Exception> reported = await ObserveAsync(Own.Instances(first, later), async _ =>
        {
            Task awaiting = TestUtil.AwaitAsync(SpindleTask.WhenAll(TasksOf(promises)));
            promises[1].SetException(first);
            promises[2].SetException(later);
            promises[0].SetResult();
            Exception thrown = await Assert.ThrowsAsync<InvalidTimeZoneException>(() => TestUtil.WithTimeout(awaiting));
            Assert.Same(first, thrown);
        });
        Assert.Empty(reported);
    }

    [Fact]
    public void WhenAll_AlreadyFailedInputs_RethrowsOneOfThemAndReportsNone()
    {
        var a = new InvalidTimeZoneException("a");
        var b = new FormatException("b");
        Exception? thrown = null;
        ConcurrentQueue<Exception> reported = Observe(Own.Instances(a, b), () =>
        {
            SpindleTask all = SpindleTask.WhenAll(SpindleTask.CompletedTask, SpindleTask.FromException(a), SpindleTask.FromException(b));
            Assert.True(all.IsCompleted);
            thrown = Record.Exception(() => all.GetAwaiter().GetResult());
        });
        Assert.True(ReferenceEquals(thrown, a) || ReferenceEquals(thrown, b), $"threw {thrown}");
        Assert.Empty(reported);
    }

    [Fact]
    public void WhenAll_CanceledAndFailedInputs_NothingIsReported()
    {
        Promise[] promises = Promises(3);
        var fault = new FormatException("x");
        Exception? thrown = null;
        ConcurrentQueue<Exception> reported = Observe(Own.Any(Own.Instances(fault), Own.Cancellations()), () =>
        {
            SpindleTask all = SpindleTask.WhenAll(TasksOf(promises));
            promises[0].SetCanceled();
            promises[1].SetException(fault);
            promises[2].SetResult();
            Assert.Equal(SpindleTaskStatus.Faulted, all.Status); // as Task.WhenAll: a fault wins over a cancellation before it
            thrown = Record.Exception(() => all.GetAwaiter().GetResult());
        });
        Assert.IsType<FormatException>(thrown);
        Assert.Empty(reported);
    }

    [Fact]
    public void WhenAny_FailingLoser_ReportedExactlyOnce()
    {
        var loserError = new InvalidTimeZoneException("loser");
        Promise[] promises = Promises(3);
        SpindleTask[] inputs = promises.Select(Await).ToArray();
        int winner = -1;
        ConcurrentQueue<Exception> reported = Observe(Own.Instances(loserError), () =>
        {
            SpindleTask<int> any = SpindleTask.WhenAny(inputs);
            promises[1].SetResult();
            winner = any.GetAwaiter().GetResult();
            promises[0].SetException(loserError);
            promises[2].SetResult();
        });
        Assert.Equal(1, winner);
        Assert.Single(reported);
        Assert.Same(loserError, reported.Single());
        Assert.All(inputs, t => Assert.True(WasConsumed(t)));
    }

    [Fact]
    public void WhenAny_LoserFailsBeforeTheResultIsRead_ReportedExactlyOnce()
    {
        var loserError = new InvalidTimeZoneException("loser");
        Promise[] promises = Promises(2);
        int winner = -1;
        ConcurrentQueue<Exception> reported = Observe(Own.Instances(loserError), () =>
        {
            SpindleTask<int> any = SpindleTask.WhenAny(TasksOf(promises));
            promises[0].SetResult();
            promises[1].SetException(loserError);
            winner = any.GetAwaiter().GetResult();
        });
        Assert.Equal(0, winner);
        Assert.Same(loserError, Assert.Single(reported));
    }

    [Fact]
    public void WhenAny_CanceledLoser_IsNotReported()
    {
        Promise[] promises = Promises(3);
        ConcurrentQueue<Exception> reported = Observe(Own.Cancellations(), () =>
        {
            SpindleTask<int> any = SpindleTask.WhenAny(TasksOf(promises));
            promises[2].SetResult();
            promises[0].SetCanceled();
            Assert.Equal(2, any.GetAwaiter().GetResult());
            promises[1].SetCanceled(new CancellationToken(true));
        });
        Assert.Empty(reported);
    }

    [Fact]
    public void WhenAny_FailingWinner_RethrownAndNotReported()
    {
        var winnerError = new InvalidTimeZoneException("winner");
        var loserError = new FormatException("loser");
        Promise[] promises = Promises(3);
        Exception? thrown = null;
        ConcurrentQueue<Exception> reported = Observe(Own.Instances(winnerError, loserError), () =>
        {
            SpindleTask<int> any = SpindleTask.WhenAny(TasksOf(promises));
            promises[1].SetException(winnerError);
            Assert.Equal(SpindleTaskStatus.Faulted, any.Status);
            promises[0].SetException(loserError);
            promises[2].SetResult();
            thrown = Record.Exception(() => any.GetAwaiter().GetResult());
        });
        Assert.Same(winnerError, thrown);
        Assert.Same(loserError, Assert.Single(reported));
    }

    [Fact]
    public void WhenAny_CanceledWinner_RethrowsCancellationAndReportsNothing()
    {
        Promise[] promises = Promises(2);
        Exception? thrown = null;
        ConcurrentQueue<Exception> reported = Observe(Own.Cancellations(), () =>
        {
            SpindleTask<int> any = SpindleTask.WhenAny(TasksOf(promises));
            promises[0].SetCanceled();
            Assert.Equal(SpindleTaskStatus.Canceled, any.Status);
            promises[1].SetResult();
            thrown = Record.Exception(() => any.GetAwaiter().GetResult());
        });
        Assert.IsAssignableFrom<OperationCanceledException>(thrown);
        Assert.Empty(reported);
    }

    [Fact]
    public void WhenAny_AlreadyFailedWinner_RethrownAndNotReported()
    {
        var winnerError = new InvalidTimeZoneException("winner");
        var pendingLoser = new Promise();
        Exception? thrown = null;
        ConcurrentQueue<Exception> reported = Observe(Own.Instances(winnerError), () =>
        {
            SpindleTask<int> any = SpindleTask.WhenAny(pendingLoser.Task, SpindleTask.FromException(winnerError));
            Assert.Equal(SpindleTaskStatus.Faulted, any.Status);
            thrown = Record.Exception(() => any.GetAwaiter().GetResult());
            pendingLoser.SetResult();
        });
        Assert.Same(winnerError, thrown);
        Assert.Empty(reported);
    }

    [Fact]
    public void WhenAny_AlreadyCompletedWinner_LosersThatFailLaterOrAlreadyFailed_EachReportedOnce()
    {
        var already = new InvalidTimeZoneException("already failed loser");
        var later = new FormatException("later loser");
        var pending = new Promise();
        int winner = -1;
        ConcurrentQueue<Exception> reported = Observe(Own.Instances(already, later), () =>
        {
            SpindleTask<int> any = SpindleTask.WhenAny(pending.Task, SpindleTask.CompletedTask, SpindleTask.FromException(already));
            winner = any.GetAwaiter().GetResult();
            pending.SetException(later);
        });
        Assert.Equal(1, winner);
        Assert.Equal(2, reported.Count);
        Assert.Single(reported, e => ReferenceEquals(e, already));
        Assert.Single(reported, e => ReferenceEquals(e, later));
    }

    [Fact]
    public void WhenAny_OverBclTasks_FailingLoserReportedOnce_CanceledLoserNot()
    {
        var winner = new TaskCompletionSource();
        var failing = new TaskCompletionSource();
        var canceled = new TaskCompletionSource();
        var loserError = new InvalidTimeZoneException("bcl loser");
        int result = -1;
        // The canceled loser's cancellation is claimed too: the test checks that it is not reported.
        ConcurrentQueue<Exception> reported = Observe(Own.Any(Own.Instances(loserError), Own.Cancellations()), r =>
        {
            SpindleTask<int> any = SpindleTask.WhenAny(failing.Task, winner.Task, canceled.Task);
            winner.SetResult();
            result = TestUtil.WithTimeout(any).GetAwaiter().GetResult();
            failing.SetException(loserError);
            canceled.SetCanceled();
            // The BCL runs the combinator's continuation inline here, but allow for it being scheduled: the wait catches a
            // lost report, so it is the suite's default (it was 2 s, which a loaded machine can turn into a false failure).
            TestUtil.SpinUntil(() => !r.IsEmpty);
            Thread.Sleep(20); // and the cancellation's report, if there were one, would show up
        });
        Assert.Equal(1, result);
        Assert.Same(loserError, Assert.Single(reported));
    }

    [Fact]
    public async Task WhenAll_RacingFailures_ExactlyOneRethrownNoneReported()
    {
        var errors = new[] { new InvalidTimeZoneException("0"), new InvalidTimeZoneException("1"), new InvalidTimeZoneException("2") };
        Promise[] promises = Promises(3);
        SpindleTask all = default;
        int rounds = 2_000;
        ConcurrentQueue<Exception> reported = await ObserveAsync(Own.Instances(errors), async _ =>
        {
            await TestUtil.WithTimeout(Race.Run(
                rounds,
                before: round =>
                {
                    if (round > 0)
                    {
                        foreach (Promise p in promises)
                        {
                            p.Reset();
                        }
                    }
                    all = SpindleTask.WhenAll(TasksOf(promises));
                },
                after: round =>
                {
                    Exception? thrown = Record.Exception(() => all.GetAwaiter().GetResult());
                    Assert.Contains(thrown, errors);
                },
                _ => promises[0].SetException(errors[0]),
                _ => promises[1].SetException(errors[1]),
                _ => promises[2].SetException(errors[2])), 30);
        });
        Assert.Empty(reported);
    }

    [Fact]
    public async Task WhenAny_RacingFailures_WinnerRethrownEveryOtherReportedOnce()
    {
        var errors = new[] { new InvalidTimeZoneException("0"), new InvalidTimeZoneException("1"), new InvalidTimeZoneException("2") };
        Promise[] promises = Promises(3);
        SpindleTask<int> any = default;
        int rounds = 2_000;
        await ObserveAsync(Own.Instances(errors), async reported =>
        {
            await TestUtil.WithTimeout(Race.Run(
                rounds,
                before: round =>
                {
                    if (round > 0)
                    {
                        foreach (Promise p in promises)
                        {
                            p.Reset();
                        }
                    }
                    reported.Clear();
                    any = SpindleTask.WhenAny(TasksOf(promises));
                },
                after: round =>
                {
                    Exception? thrown = Record.Exception(() => any.GetAwaiter().GetResult());
                    Assert.Contains(thrown, errors);
                    // Every loser finished before the barrier, and was reported inline on its completing thread: by the
                    // combinator if it completed before the winner detached it, or by its own promise if it was detached
                    // first and failed with nobody waiting. Either way exactly once (the detach races each failure).
                    Assert.Equal(2, reported.Count);
                    Assert.DoesNotContain(thrown, reported);
                    Assert.Equal(3, reported.Append(thrown!).Distinct().Count());
                },
                _ => promises[0].SetException(errors[0]),
                _ => promises[1].SetException(errors[1]),
                _ => promises[2].SetException(errors[2])), 30);
        });
    }

    [Fact]
    public void WhenAll_ConsumerReusesTheCombinatorInlineFromTheLastInputsCompletion_TheNewUsesFailureIsNotLost()
    {
        // The last input publishes the combined task, and its consumer runs inline: it reads the result (returning the
        // pooled combinator) and starts the next WhenAll, which rents the same object. The old last input must not touch
        // the slots after publishing, or it would wipe the new use's recorded failure.
        var p1 = new Promise();
        var p2 = new Promise();
        var gate = new Promise();
        var error = new InvalidTimeZoneException("must not be lost");
        SpindleTask first = SpindleTask.WhenAll(p1.Task, p2.Task);
        SpindleTask second = default;
        first.GetAwaiter().UnsafeOnCompleted(() =>
        {
            first.GetAwaiter().GetResult();
            second = SpindleTask.WhenAll(Task.FromException(error), gate.Task.AsTask()); // input 0 failed already
        });
        p1.SetResult();
        p2.SetResult();
        gate.SetResult();
        Exception thrown = Assert.ThrowsAny<Exception>(() => second.GetAwaiter().GetResult());
        Assert.Same(error, thrown);
    }
}

using System;
using System.Collections.Concurrent;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using static SpindleLib.Tests.UnobservedReports;

namespace SpindleLib.Tests.Tasks;

/// <summary>Forget() and Spindle.UnobservedException. The event is process-wide, so these tests run alone.</summary>
[Collection(SequentialCollection.Name)]
public class ForgetTests
{
    private static async SpindleTask<int> Box(Promise<int> promise) => await promise.Task;

    private static async SpindleTask VoidBox(Promise promise) => await promise.Task;

    [Fact]
    public void Forget_TaskThatFaultsLater_ReportsTheOriginalExceptionOnce()
    {
        var error = new InvalidTimeZoneException("forgotten");
        var promise = new Promise<int>();

        ConcurrentQueue<Exception> reported = Observe(Own.Instances(error), _ =>
        {
            Box(promise).Forget();
            promise.SetException(error); // the observer runs inline here
        });

        Assert.Single(reported, e => ReferenceEquals(e, error));
    }

    [Fact]
    public void Forget_AlreadyFaultedTask_ReportsImmediately()
    {
        var error = new InvalidTimeZoneException("already faulted");

        ConcurrentQueue<Exception> reported = Observe(Own.Instances(error), _ =>
        {
            SpindleTask.FromException(error).Forget();
            SpindleTask.FromException<int>(error).Forget();
        });

        Assert.Equal(2, reported.Count(e => ReferenceEquals(e, error)));
    }

    [Fact]
    public void Forget_CanceledTask_IsNotReported()
    {
        var promise = new Promise();
        var voidPromise = new Promise();

        ConcurrentQueue<Exception> reported = Observe(Own.Any(Own.ReportedOnTestThreads(), Own.Cancellations()), _ =>
        {
            Box(new Promise<int>()).Forget(); // never completes: nothing to report either
            VoidBox(voidPromise).Forget();
            promise.Task.Forget();
            voidPromise.SetCanceled();
            promise.SetCanceled();
            SpindleTask.FromCanceled().Forget();
            var gate = new Promise();
            ThrowsCanceledAfter(gate).Forget();
            gate.SetResult(); // the method resumes inline, throws, and its observer runs inline too
        });

        Assert.DoesNotContain(reported, e => e is OperationCanceledException);
        Assert.Empty(reported);

        static async SpindleTask ThrowsCanceledAfter(Promise gate)
        {
            await gate.Task;
            throw new OperationCanceledException();
        }
    }

    [Fact]
    public async Task Forget_RunDelegateThatThrows_ReportsTheException()
    {
        var error = new InvalidTimeZoneException("worker fault");
        using var reportedEvent = new ManualResetEventSlim();
        Exception? seen = null;
        Action<Exception> handler = e =>
        {
            if (ReferenceEquals(e, error))
            {
                seen = e;
                reportedEvent.Set();
            }
        };
        Spindle.UnobservedException += handler;
        try
        {
            Spindle.Run(new Action(() => throw error)).Forget();
            await TestUtil.WithTimeout(Task.Run(() => reportedEvent.Wait()));
        }
        finally
        {
            Spindle.UnobservedException -= handler;
        }

        Assert.Same(error, seen);
    }

    [Fact]
    public void Forget_Succeeded_IsNotReported()
    {
        var promise = new Promise<int>();

        ConcurrentQueue<Exception> reported = Observe(Own.ReportedOnTestThreads(), _ =>
        {
            Box(promise).Forget();
            promise.SetResult(1);
            SpindleTask.FromResult(1).Forget();
            default(SpindleTask).Forget();
        });

        Assert.Empty(reported);
    }

    private static async SpindleTask FailsAfter(Promise gate, Exception error)
    {
        await gate.Task;
        throw error;
    }

    /// <summary>
    /// A promise's task is not consumed by a read, so Forget() may meet the same completed use more than once (twice
    /// forgotten, or forgotten while pending and again once its observer had read it). Each Forget reported the fault
    /// again: one failure, two reports. One completion's fault is reported once; it can still be read by an await, and a
    /// new use's fault is reported again.
    /// </summary>
    [Fact]
    public void Forget_TwiceOnTheSameCompletedPromiseUse_ReportsItsFaultOnce()
    {
        var error = new InvalidTimeZoneException("one completion");
        var next = new InvalidTimeZoneException("the next use");
        var promise = new Promise();
        var typed = new Promise<int>();

        ConcurrentQueue<Exception> reported = Observe(Own.Instances(error), _ =>
        {
            promise.SetException(error);
            promise.Task.Forget();
            promise.Task.Forget();
            typed.Task.Forget(); // pending: its observer reads it when it completes
            typed.SetException(error);
            typed.Task.Forget();
        });

        Assert.Equal(2, reported.Count(e => ReferenceEquals(e, error)));
        Assert.Same(error, Assert.Throws<InvalidTimeZoneException>(() => promise.Task.GetAwaiter().GetResult())); // still readable
        promise.Reset();
        reported = Observe(Own.Instances(next), _ =>
        {
            promise.SetException(next);
            promise.Task.Forget();
            promise.Task.Forget();
        });
        Assert.Single(reported, e => ReferenceEquals(e, next));
    }

    /// <summary>
    /// The other tasks a read does not consume: a preserved task and one made by FromException. Forgotten twice, each
    /// reported its one fault twice.
    /// </summary>
    [Fact]
    public void Forget_TwiceOnAPreservedOrAFromExceptionTask_ReportsItsFaultOnce()
    {
        var error = new InvalidTimeZoneException("preserved");
        var made = new InvalidTimeZoneException("made failed");
        var gate = new Promise();

        ConcurrentQueue<Exception> reported = Observe(Own.Instances(error, made), _ =>
        {
            SpindleTask preserved = FailsAfter(gate, error).Preserve();
            preserved.Forget(); // pending: reported when it faults
            gate.SetResult();
            preserved.Forget();
            SpindleTask<int> failed = SpindleTask.FromException<int>(made);
            failed.Forget();
            failed.Forget();
        });

        Assert.Single(reported, e => ReferenceEquals(e, error));
        Assert.Single(reported, e => ReferenceEquals(e, made));
    }

    /// <summary>
    /// A promise a WhenAny let go of (another input won) reports its own later fault, since nobody waits for it any more.
    /// A Forget of the same completed use afterwards reported it a second time.
    /// </summary>
    [Fact]
    public void Forget_OfAPromiseUseThatReportedItsFaultWhenLetGoOf_DoesNotReportItAgain()
    {
        var error = new InvalidTimeZoneException("abandoned loser");
        var winner = new Promise();
        var loser = new Promise();

        ConcurrentQueue<Exception> reported = Observe(Own.Instances(error), _ =>
        {
            SpindleTask<int> any = SpindleTask.WhenAny(winner.Task, loser.Task);
            winner.SetResult();
            Assert.Equal(0, any.GetAwaiter().GetResult());
            loser.SetException(error); // reported: the loser was let go of
            loser.Task.Forget();
        });

        Assert.Single(reported, e => ReferenceEquals(e, error));
    }

    [Fact]
    public void Forget_ThenAwaitPendingPooledTask_ThrowsNamingPreserve()
    {
        var promise = new Promise<int>();
        SpindleTask<int> task = Box(promise);

        task.Forget();

        var ex = Assert.Throws<InvalidOperationException>(() => task.GetAwaiter().UnsafeOnCompleted(() => { }));
        Assert.Contains("Preserve()", ex.Message, StringComparison.Ordinal);
        promise.SetResult(1);
        ex = Assert.Throws<InvalidOperationException>(() => task.GetAwaiter().GetResult());
        Assert.Contains("Preserve()", ex.Message, StringComparison.Ordinal);
    }

    [Fact]
    public async Task Forget_ThenAwaitCompletedPooledTask_ThrowsNamingPreserveAndThePoolStillWorks()
    {
        var promise = new Promise<int>();
        SpindleTask<int> task = Box(promise);
        promise.SetResult(1);

        task.Forget(); // reads (consumes) the result at once

        var ex = await Assert.ThrowsAsync<InvalidOperationException>(() => TestUtil.WithTimeout(task));
        Assert.Contains("Preserve()", ex.Message, StringComparison.Ordinal);
        var next = new Promise<int>();
        SpindleTask<int> fresh = Box(next);
        next.SetResult(2);
        Assert.Equal(2, await TestUtil.WithTimeout(fresh));
    }

    [Fact]
    public void UnobservedException_ThrowingHandler_OtherHandlersStillRun()
    {
        var error = new InvalidTimeZoneException("two handlers");
        int secondRuns = 0;
        Action<Exception> throwing = _ => throw new InvalidOperationException("bad handler");
        Action<Exception> counting = e =>
        {
            if (ReferenceEquals(e, error))
            {
                secondRuns++;
            }
        };
        Spindle.UnobservedException += throwing;
        Spindle.UnobservedException += counting;
        try
        {
            SpindleTask.FromException(error).Forget();
        }
        finally
        {
            Spindle.UnobservedException -= throwing;
            Spindle.UnobservedException -= counting;
        }

        Assert.Equal(1, secondRuns);
    }

    [Fact]
    public void UnobservedException_DetachedHandler_IsNoLongerCalled()
    {
        int runs = 0;
        Action<Exception> handler = _ => runs++;
        Spindle.UnobservedException += handler;
        Spindle.UnobservedException -= handler;

        var previousError = Console.Error;
        using var sink = new System.IO.StringWriter();
        Console.SetError(sink);
        try
        {
            SpindleTask.FromException(new InvalidTimeZoneException("nobody listens")).Forget();
        }
        finally
        {
            Console.SetError(previousError);
        }

        Assert.Equal(0, runs);
        // With no handler the fault is not swallowed: it goes to standard error.
        Assert.Contains("nobody listens", sink.ToString(), StringComparison.Ordinal);
    }
    [Fact]
    public void Forget_OnASourceThatDispatches_TheOwnersNextUseRightAfterward_ReportsOnlyRealFaults()
    {
        // The forgotten use is read as it completes, not later on a worker: by then its owner may have started the next
        // use (the signal waited on again, the promise reset), and the late read reported the stale token as a fault.
        // (Found by a review: 200 of 200 rounds reported.)
        var error = new InvalidTimeZoneException("a real fault");
        // The stale read this test is about reports the await-once error, on a worker: claimed by its message.
        var watch = UnobservedReports.Start(Own.Any(Own.InstancesOrOnTestThreads(error), Own.AwaitOnceErrors()));
        ConcurrentQueue<Exception> reported = watch.Reports;
        using (watch)
        {
            var signal = new Signal(initiallySet: false, runContinuationsAsynchronously: true);
            var promise = new Promise(runContinuationsAsynchronously: true);
            for (int i = 0; i < 200; i++)
            {
                signal.WaitAsync().Forget();
                signal.Set();
                SpindleTask next = signal.WaitAsync(); // the forgotten wait is over: the signal is idle
                signal.Set();
                next.GetAwaiter().GetResult();

                promise.Task.Forget();
                if (i % 2 == 0)
                {
                    promise.SetException(error);
                }
                else
                {
                    promise.SetResult();
                }
                promise.Reset();
            }
            Thread.Sleep(100); // anything queued to a worker has run by now
        }
        Assert.Equal(100, reported.Count);
        Assert.All(reported, e => Assert.Same(error, e));
    }

#if DEBUG
    /// <summary>
    /// The caller's misuse (from a review): a forgotten task read anyway, on another thread, at the moment it completes
    /// (the hook stands in for that thread, between the completion's publication and its observer's read). Before, the
    /// read consumed the use and the box went back to its pool; the observer then read with the box's version of that
    /// moment, which named the box's next use: it blocked on a pooled box for ever (or consumed another call's result and
    /// returned the box to its pool a second time). Now the forgotten use is marked until its observer takes it: the
    /// misused read is the await-once error, and the observer reads the forgotten use, once.
    /// </summary>
    [Fact]
    public async Task Forget_TaskReadByTheCallerAsItCompletes_IsTheAwaitOnceError_AndTheObserverReadsTheUseOnce()
    {
        var promise = new Promise<int>();
        SpindleTask<int> task = default;
        Exception? misuse = null;
        var fault = new TimeoutException("the forgotten use's own fault");
        StateMachineBoxBase.TestHookBeforeObserveForgotten = _ =>
        {
            StateMachineBoxBase.TestHookBeforeObserveForgotten = null;
            misuse = Record.Exception(() => task.GetAwaiter().GetResult());
        };
        ConcurrentQueue<Exception>? reported = null;
        try
        {
            Task completing = TestUtil.RunOnThread(() => reported = Observe(Own.Any(Own.Instances(fault), Own.ReportedOnTestThreads(), Own.AwaitOnceErrors()), _ =>
            {
                task = Box(promise);
                task.Forget();
                promise.SetException(fault); // runs the box, and its observer, inline
            }));
            Task finished = await Task.WhenAny(completing, Task.Delay(TimeSpan.FromSeconds(10)));
            Assert.True(finished == completing, "the observer of the forgotten task blocked on the box's next use");
            await completing;
        }
        finally
        {
            StateMachineBoxBase.TestHookBeforeObserveForgotten = null;
        }
        Assert.IsType<InvalidOperationException>(misuse);
        Assert.Contains("Forget()", misuse!.Message, StringComparison.Ordinal);
        Assert.Single(reported!, e => e is TimeoutException); // the observer read the forgotten use and reported its fault
        Assert.DoesNotContain(reported!, e => e is InvalidOperationException);
        Assert.Equal(7, Box(CompletedPromise(7)).GetAwaiter().GetResult()); // the box's pool still hands out working boxes
    }

    /// <summary>
    /// Outside that window the mark changes nothing a caller sees: a blocking read of a pending forgotten task is refused
    /// at once, as before, and the observer still reads the use when it completes.
    /// </summary>
    [Fact]
    public void Forget_ThenABlockingReadWhilePending_IsTheAwaitOnceErrorAtOnce()
    {
        var promise = new Promise<int>();
        SpindleTask<int> task = Box(promise);
        task.Forget();
        Assert.Throws<InvalidOperationException>(() => task.GetAwaiter().GetResult());
        ConcurrentQueue<Exception> reported = Observe(Own.Any(Own.ReportedOnTestThreads(), Own.AwaitOnceErrors()), _ => promise.SetResult(1));
        Assert.Empty(reported); // the observer read it: a success, nothing to report
        Assert.Equal(7, Box(CompletedPromise(7)).GetAwaiter().GetResult());
    }

    /// <summary>
    /// The same misuse a moment later: the read lands right after the observer has taken the forgotten use's mark. Before,
    /// the mark was taken by one CAS and the use consumed by another, so the read between them found an ordinary completed
    /// use: it consumed the forgotten use and got its outcome with no error, and the observer's own read then failed,
    /// reporting the await-once error as an unobserved exception instead of the use's outcome. Now the observer takes the
    /// mark and consumes the use in one CAS.
    /// </summary>
    [Fact]
    public void Forget_TaskReadByTheCallerJustAfterItsObserverTookTheUse_IsTheAwaitOnceError()
    {
        var promise = new Promise<int>();
        SpindleTask<int> task = default;
        Exception? misuse = null;
        bool ran = false;
        var fault = new TimeoutException("the forgotten use's own fault");
        StateMachineBoxBase.TestHookAfterForgottenTaken = _ =>
        {
            StateMachineBoxBase.TestHookAfterForgottenTaken = null;
            ran = true;
            misuse = Record.Exception(() => task.GetAwaiter().GetResult());
        };
        ConcurrentQueue<Exception> reported;
        try
        {
            reported = Observe(Own.Any(Own.Instances(fault), Own.ReportedOnTestThreads(), Own.AwaitOnceErrors()), _ =>
            {
                task = Box(promise);
                task.Forget();
                promise.SetException(fault); // runs the box, and its observer, inline
            });
        }
        finally
        {
            StateMachineBoxBase.TestHookAfterForgottenTaken = null;
        }
        Assert.True(ran);
        Assert.IsType<InvalidOperationException>(misuse);
        Assert.Single(reported, e => e is TimeoutException); // the observer read the forgotten use and reported its fault
        Assert.DoesNotContain(reported, e => e is InvalidOperationException);
        Assert.Equal(7, Box(CompletedPromise(7)).GetAwaiter().GetResult());
    }

    /// <summary>
    /// A blocking read that saw the task pending, and meanwhile the task was forgotten (the same task read twice, the
    /// caller's misuse) and completed: the read's registration finds the use completed and returns at once. Before, the
    /// read then consumed the use from the word it read after waking without testing the forgotten mark again: it took the
    /// forgotten use's fault (no await-once error), the observer found nothing to read, and the fault was never reported
    /// (failed 5 of 5 runs: the read threw the TimeoutException). Now the mark is tested on the word the read consumes.
    /// </summary>
    [Fact]
    public void Forget_WhileABlockingReadThatSawItPendingRegisters_IsTheAwaitOnceError_AndTheObserverReadsTheUse()
    {
        var promise = new Promise<int>();
        var fault = new TimeoutException("the forgotten use's own fault");
        SpindleTask<int> task = default;
        using var readEnded = new ManualResetEventSlim(false);
        bool observerRan = false;
        Exception? misuse = null;
        Task completing = Task.CompletedTask;
        StateMachineBoxBase.TestHookBeforeObserveForgotten = _ =>
        {
            StateMachineBoxBase.TestHookBeforeObserveForgotten = null;
            observerRan = true;
            readEnded.Wait(TimeSpan.FromSeconds(10)); // the observer runs after the misused read has ended
        };
        ConcurrentQueue<Exception> reported;
        try
        {
            reported = Observe(Own.Any(Own.Instances(fault), Own.ReportedOnTestThreads(), Own.AwaitOnceErrors()), _ =>
            {
                task = Box(promise);
                BlockingWait.TestHookBeforeRegister = () =>
                {
                    BlockingWait.TestHookBeforeRegister = null;
                    task.Forget();
                    completing = TestUtil.RunOnThread(() => promise.SetException(fault)); // completes the box, runs its observer
                    TestUtil.SpinUntil(() => observerRan);
                };
                try
                {
                    misuse = Record.Exception(() => task.GetAwaiter().GetResult());
                }
                finally
                {
                    readEnded.Set();
                }
                Assert.True(completing.Wait(TimeSpan.FromSeconds(10)), "the completion did not end");
            });
        }
        finally
        {
            BlockingWait.TestHookBeforeRegister = null;
            StateMachineBoxBase.TestHookBeforeObserveForgotten = null;
        }
        Assert.True(observerRan);
        Assert.IsType<InvalidOperationException>(misuse);
        Assert.Single(reported, e => e is TimeoutException); // the observer read the forgotten use and reported its fault
        Assert.DoesNotContain(reported, e => e is InvalidOperationException);
        Assert.Equal(7, Box(CompletedPromise(7)).GetAwaiter().GetResult()); // the box's pool still hands out working boxes
    }

    private static Promise<int> CompletedPromise(int value)
    {
        var p = new Promise<int>();
        p.SetResult(value);
        return p;
    }
#endif
}

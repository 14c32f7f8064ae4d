using System;
using System.Collections.Concurrent;
using System.Threading;
using System.Threading.Tasks;
using System.Threading.Tasks.Sources;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// The public sources used through <see cref="IValueTaskSource"/> directly (as a ValueTask's awaiter uses them): a null
/// continuation is refused at the call with every flag combination, as Spindle's own awaiters refuse it. With
/// FlowExecutionContext or UseSchedulingContext it was wrapped into a context binding and accepted: the completer's
/// SetResult then threw a NullReferenceException, far from the bad call (found by the bridges review). Sequential: it
/// watches Spindle.UnobservedException.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class ValueTaskSourceMisuseTests
{
    private static readonly ValueTaskSourceOnCompletedFlags[] s_flags =
    [
        ValueTaskSourceOnCompletedFlags.None,
        ValueTaskSourceOnCompletedFlags.FlowExecutionContext,
        ValueTaskSourceOnCompletedFlags.UseSchedulingContext,
        ValueTaskSourceOnCompletedFlags.FlowExecutionContext | ValueTaskSourceOnCompletedFlags.UseSchedulingContext,
    ];

    /// <summary>A context that is not the base class, so UseSchedulingContext captures it.</summary>
    private sealed class PostingContext : SynchronizationContext
    {
        public override void Post(SendOrPostCallback d, object? state) => d(state);
    }

    private static void UnderContext(Action body)
    {
        SynchronizationContext? before = SynchronizationContext.Current;
        SynchronizationContext.SetSynchronizationContext(new PostingContext());
        try
        {
            body();
        }
        finally
        {
            SynchronizationContext.SetSynchronizationContext(before);
        }
    }

    [Fact]
    public void NullContinuation_WithAnyFlags_IsRefusedAtTheCall_AndTheSourceStillCompletesAndReads()
    {
        // What this test's calls report on its thread, and a NullReferenceException: what a refused null continuation
        // would throw if it had been kept and run, on whichever thread (no test throws one on purpose).
        var watch = UnobservedReports.Start(UnobservedReports.Own.Any(UnobservedReports.Own.ReportedOnTestThreads(), UnobservedReports.Own.Type<NullReferenceException>()));
        ConcurrentQueue<Exception> reported = watch.Reports;
        using (watch)
        {
            foreach (ValueTaskSourceOnCompletedFlags flags in s_flags)
            {
                var promise = new Promise();
                short token = promise.Task._token;
                UnderContext(() => Assert.Equal("continuation", Assert.Throws<ArgumentNullException>(
                    () => ((IValueTaskSource)promise).OnCompleted(null!, null, token, flags)).ParamName));
                promise.SetResult(); // the call left nothing registered: nothing runs, nothing throws
                promise.Task.GetAwaiter().GetResult();

                var typed = new Promise<int>();
                short typedToken = typed.Task._token;
                UnderContext(() => Assert.Equal("continuation", Assert.Throws<ArgumentNullException>(
                    () => ((IValueTaskSource<int>)typed).OnCompleted(null!, null, typedToken, flags)).ParamName));
                typed.SetResult(3);
                Assert.Equal(3, typed.Task.GetAwaiter().GetResult());

                var signal = new Signal();
                SpindleTask wait = signal.WaitAsync();
                UnderContext(() => Assert.Equal("continuation", Assert.Throws<ArgumentNullException>(
                    () => ((IValueTaskSource)signal).OnCompleted(null!, null, wait._token, flags)).ParamName));
                signal.Set();
                wait.GetAwaiter().GetResult();
            }
        }
        Assert.True(reported.IsEmpty, "reported: " + string.Join(" | ", reported));
    }

    private static async SpindleTask AwaitOnce(SpindleTask task) => await task;

    [Fact]
    public void NullContinuation_OnEveryKindOfSource_IsRefusedAtTheCall_ThroughBothInterfaces()
    {
        // ISpindleSource.OnCompleted documents the ArgumentNullException for Spindle's own sources: the sources behind a
        // completed, faulted and canceled task, a preserved task, a combined task, an async method and a delay, as well
        // as the promises and signals above (a faulted or canceled task's source ran the null continuation before).
        foreach (ValueTaskSourceOnCompletedFlags flags in s_flags)
        {
            // The delay is cancelled at the end: a timer left in the default wheel would hold up the sequential tests
            // that wait for it to be empty (three timed out at 30 s in a CI run when this left a minute's delay there).
            using var delayCancel = new CancellationTokenSource();
            var promise = new Promise();
            var preserved = new Promise();
            var combined = new Promise();
            var awaited = new Promise();
            SpindleTask[] tasks =
            [
                SpindleTask.FromResult(1),
                SpindleTask.FromException(new InvalidOperationException("expected")),
                SpindleTask.FromCanceled(new CancellationToken(canceled: true)),
                preserved.Task.Preserve(),
                SpindleTask.WhenAll(combined.Task, promise.Task),
                AwaitOnce(awaited.Task),
                Spindle.Delay(TimeSpan.FromMinutes(1), delayCancel.Token),
            ];
            foreach (SpindleTask task in tasks)
            {
                ISpindleSource? source = task._source;
                if (source is null)
                {
                    continue; // a completed task with no source: nothing to call
                }
                string kind = source.GetType().Name;
                Assert.True("continuation" == Assert.Throws<ArgumentNullException>(() => source.OnCompleted(null!, null, task._token)).ParamName, kind);
                Assert.True("continuation" == Assert.Throws<ArgumentNullException>(
                    () => ((IValueTaskSource)source).OnCompleted(null!, null, task._token, flags)).ParamName, kind + " " + flags);
            }
            promise.SetResult();
            preserved.SetResult();
            combined.SetResult();
            awaited.SetResult();
            delayCancel.Cancel();
            tasks[3].GetAwaiter().GetResult();
            tasks[4].GetAwaiter().GetResult();
            tasks[5].GetAwaiter().GetResult();
            Assert.ThrowsAny<OperationCanceledException>(() => tasks[6].GetAwaiter().GetResult());
        }
        TestUtil.SpinUntil(() => TimerWheel.Default.PendingCount == 0, () => TimerWheel.Default.PendingCount + " timers left in the default wheel");
    }
}

using System;
using System.Collections.Concurrent;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using SpindleLib.Tests.Time;
using static SpindleLib.Tests.Combinators.CombinatorTestSupport;
using static SpindleLib.Tests.UnobservedReports;

namespace SpindleLib.Tests.Combinators;

/// <summary>
/// A WhenAll whose token or timeout wins lets go of its inputs before the combined task completes, as a WhenAny lets go
/// of its losers: a promise can be reset at once (a later fault of it is reported exactly once), a signal wait ends (a
/// later set is kept for the next wait), and no late read can meet an input's next use. Before, the inputs stayed
/// attached and were read "when they finished": a read that was dispatched, or that raced the owner's next use, met
/// that use (stale-token errors reported, the input's own fault lost, a new wait's cancellation dropped). Found by a
/// review. Sequential: the tests watch the process-wide UnobservedException event.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class WhenAllLetGoTests
{
    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public void WhenAllCancelled_PromiseInputs_CanBeResetAtOnce_AndALaterFaultIsReportedOnce(bool dispatches)
    {
        var error = new InvalidTimeZoneException("input fault");
        ConcurrentQueue<Exception> reported = Observe(Own.InstancesOrOnTestThreads(error), () =>
        {
            for (int round = 0; round < 50; round++)
            {
                var a = new Promise(dispatches);
                var b = new Promise(dispatches);
                using var cts = new CancellationTokenSource();
                SpindleTask all = SpindleTask.WhenAll([a.Task, b.Task], cts.Token);
                cts.Cancel();
                Assert.ThrowsAny<OperationCanceledException>(() => all.GetAwaiter().GetResult());
                b.Reset(); // let go of: not awaited any more (before, "an await on it is still pending")
                a.SetException(error); // abandoned: nobody reads it, so the promise reports the fault itself
                a.Reset();
            }
        });
        Assert.Equal(50, reported.Count);
        Assert.All(reported, e => Assert.Same(error, e));
    }

    [Fact]
    public async Task WhenAllCancelled_SignalInput_TheWaitEndsAtOnce_ALaterSetIsKept_AndTheNextWaitKeepsItsToken()
    {
        ConcurrentQueue<Exception> reported = await ObserveAsync(Own.ReportedOnTestThreads(), async _ =>
        {
            for (int round = 0; round < 50; round++)
            {
                var signal = new Signal(initiallySet: false, runContinuationsAsynchronously: round % 2 == 0);
                using var cts = new CancellationTokenSource();
                SpindleTask all = SpindleTask.WhenAll([signal.WaitAsync()], cts.Token);
                cts.Cancel();
                Assert.ThrowsAny<OperationCanceledException>(() => all.GetAwaiter().GetResult());
                Assert.False(signal.HasWaiter);

                signal.Set(); // nobody waits: kept for the next wait
                Assert.True(signal.IsSet);
                signal.WaitAsync().GetAwaiter().GetResult();

                using var next = new CancellationTokenSource();
                SpindleTask again = signal.WaitAsync(next.Token);
                await Task.Yield();
                next.Cancel();
                Assert.Equal(SpindleTaskStatus.Canceled, again.Status);
                Assert.ThrowsAny<OperationCanceledException>(() => again.GetAwaiter().GetResult());
            }
        });
        Assert.Empty(reported);
    }

    [Fact]
    public void WhenAllTimedOut_OnAManualClock_LetsGoOfItsInputs_AndOfItsTimer()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var p = new Promise();
        var signal = new Signal();
        ConcurrentQueue<Exception> reported = Observe(Own.ReportedOnTestThreads(), () =>
        {
            SpindleTask all = SpindleTask.WhenAll([p.Task, signal.WaitAsync()], new WhenAllOptions { Timeout = TimeSpan.FromMilliseconds(5), Timers = wheel });
            clock.Advance(TimeSpan.FromMilliseconds(5));
            Assert.Throws<TimeoutException>(() => all.GetAwaiter().GetResult());
            p.Reset();
            Assert.False(signal.HasWaiter);
            Assert.Equal(0, wheel.PendingCount);
        });
        Assert.Empty(reported);
    }

    [Fact]
    public void WhenAllCancelled_AnInputThatFailedBefore_IsReported_AndTheOthersAreLetGoOf()
    {
        var error = new InvalidTimeZoneException("failed before the cancellation");
        var a = new Promise();
        var b = new Promise();
        ConcurrentQueue<Exception> reported = Observe(Own.InstancesOrOnTestThreads(error), () =>
        {
            using var cts = new CancellationTokenSource();
            SpindleTask all = SpindleTask.WhenAll([a.Task, b.Task], cts.Token);
            a.SetException(error); // read by its slot and kept for the combined failure...
            cts.Cancel();          // ...which the cancellation wins: the kept fault is reported, not lost
            Assert.ThrowsAny<OperationCanceledException>(() => all.GetAwaiter().GetResult());
            b.Reset();
        });
        Assert.Equal(new Exception[] { error }, reported.ToArray());
    }

    [Fact]
    public void WhenAll_TokenAlreadyCancelled_InputsRegisteredAfterTheDecisionAreLetGoOfToo()
    {
        var a = new Promise();
        var b = new Promise<int>();
        using var cts = new CancellationTokenSource();
        cts.Cancel();
        ConcurrentQueue<Exception> reported = Observe(Own.ReportedOnTestThreads(), () =>
        {
            // The token's callback runs as the token is registered, before any input is: each registrant lets go of its own.
            SpindleTask all = SpindleTask.WhenAll([a.Task, Await(b)], cts.Token);
            Assert.ThrowsAny<OperationCanceledException>(() => all.GetAwaiter().GetResult());
            a.Reset(); // not awaited any more
            b.SetResult(1); // the async method was forgotten: it reads its own outcome
            b.Reset();
        });
        Assert.Empty(reported);
    }

    [Fact]
    public async Task WhenAllCancelled_WhileASignalInputIsSetAndWaitedAgain_NoStaleReadAndTheNewWaitKeepsItsToken()
    {
        // Raced without dispatching: the cancellation and a set race on two threads; as soon as the WhenAll has completed
        // (until then the wait is still the WhenAll's, as a WhenAny's is) and the signal is idle, the owner waits on it
        // again with a token of its own. Whoever ends the old wait, no late read meets the new one.
        var signal = new Signal();
        var cts = new CancellationTokenSource();
        var next = new CancellationTokenSource();
        SpindleTask again = default;
        SpindleTask all = default;
        int problems = 0;
        string? first = null;
        await ObserveAsync(Own.ReportedOnTestThreads(), reported => TestUtil.WithTimeout(Race.Run(
            TestUtil.Stress(5_000),
            before: _ =>
            {
                reported.Clear();
                signal = new Signal();
                cts = new CancellationTokenSource();
                next = new CancellationTokenSource();
                again = default;
                all = SpindleTask.WhenAll([signal.WaitAsync()], cts.Token);
            },
            after: round =>
            {
                string? problem = null;
                if (!reported.IsEmpty)
                {
                    problem = "reported " + reported.First().GetType().Name;
                }
                try
                {
                    all.GetAwaiter().GetResult();
                }
                catch (OperationCanceledException)
                {
                }
                next.Cancel();
                if (again.Status == SpindleTaskStatus.Pending)
                {
                    problem ??= "the new wait ignored its token";
                    signal.Set();
                }
                try
                {
                    again.GetAwaiter().GetResult();
                }
                catch (OperationCanceledException)
                {
                }
                if (problem is not null)
                {
                    problems++;
                    first ??= $"round {round}: {problem}";
                }
            },
            _ => cts.Cancel(),
            _ =>
            {
                signal.Set();
                SpinWait spin = default;
                while (!all.IsCompleted || signal.HasWaiter)
                {
                    spin.SpinOnce();
                }
                again = signal.WaitAsync(next.Token);
            }), TestUtil.StressTimeout(120)));
        Assert.True(problems == 0, $"{problems} rounds went wrong; first: {first}");
    }
}

using System;
using System.Linq;
using System.Threading;
using static SpindleLib.Tests.Combinators.CombinatorTestSupport;
using static SpindleLib.Tests.UnobservedReports;

namespace SpindleLib.Tests.Combinators;

/// <summary>
/// A WhenAll decided by its token or its timeout reports the failures its inputs had stored (nobody will rethrow them),
/// and a fault is reported once per completion: an input whose read does not consume it (a promise's task, a task made
/// failed, a preserved task) claims that report, so a Forget() of the same input, before or after, reports nothing more.
/// Before, the WhenAll reported without claiming, and the input's Forget() reported the same completion a second time.
/// Sequential: Spindle.UnobservedException is process-wide (reports are counted by identity, too).
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class WhenAllStoredFailureReportTests
{
    public enum Input
    {
        Promise,
        FromException,
        Preserved,
        TypedPromise,
    }

    public enum Decider
    {
        Token,
        Timeout,
    }

    /// <summary>
    /// Runs a WhenAll over a failed input and a pending promise, decided by the token or the timeout, with the failed
    /// input forgotten before or after; returns how many times its fault was reported.
    /// </summary>
    private static int ReportsOfTheStoredFault(Input kind, Decider decider, bool failsAfterTheCall, bool forgetFirst)
    {
        var error = new InvalidOperationException("the stored failure");
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var options = decider == Decider.Timeout ? new WhenAllOptions { Timeout = TimeSpan.FromMilliseconds(5), Timers = wheel } : default;
        var reported = Observe(Own.Instances(error), () =>
        {
            var failing = new Promise();
            var typed = new Promise<int>();
            var pending = new Promise();
            var pendingTyped = new Promise<int>();
            using var cts = new CancellationTokenSource();
            void Fail()
            {
                failing.SetException(error);
                typed.SetException(error);
            }
            if (!failsAfterTheCall)
            {
                Fail();
            }
            SpindleTask input = kind switch
            {
                Input.Promise => failing.Task,
                Input.FromException => SpindleTask.FromException(error),
                Input.Preserved => Await(failing).Preserve(),
                _ => typed.Task,
            };
            if (forgetFirst)
            {
                input.Forget(); // reports the fault once it has one, and claims that report
            }
            SpindleTask combined = kind == Input.TypedPromise
                ? SpindleTask.WhenAll([typed.Task, pendingTyped.Task], options, cts.Token)
                : SpindleTask.WhenAll([input, pending.Task], options, cts.Token);
            if (failsAfterTheCall)
            {
                Fail(); // stored by the input's callback
            }
            if (decider == Decider.Token)
            {
                cts.Cancel();
            }
            else
            {
                clock.Advance(TimeSpan.FromMilliseconds(5));
            }
            Assert.True(combined.IsCompleted);
            combined.Forget();
            if (!forgetFirst)
            {
                input.Forget();
            }
        });
        return reported.Count(e => e == error);
    }

    [Theory]
    [InlineData(Input.Promise, Decider.Token)]
    [InlineData(Input.Promise, Decider.Timeout)]
    [InlineData(Input.FromException, Decider.Token)]
    [InlineData(Input.FromException, Decider.Timeout)]
    [InlineData(Input.Preserved, Decider.Token)]
    [InlineData(Input.Preserved, Decider.Timeout)]
    [InlineData(Input.TypedPromise, Decider.Token)]
    [InlineData(Input.TypedPromise, Decider.Timeout)]
    public void StoredFailure_ThenTheInputForgotten_IsReportedOnce(Input kind, Decider decider)
        => Assert.Equal(1, ReportsOfTheStoredFault(kind, decider, failsAfterTheCall: false, forgetFirst: false));

    [Theory]
    [InlineData(Input.Promise, Decider.Token)]
    [InlineData(Input.Promise, Decider.Timeout)]
    [InlineData(Input.Preserved, Decider.Token)]
    public void FailureStoredByTheInputsCallback_ThenTheInputForgotten_IsReportedOnce(Input kind, Decider decider)
        => Assert.Equal(1, ReportsOfTheStoredFault(kind, decider, failsAfterTheCall: true, forgetFirst: false));

    [Theory]
    [InlineData(Input.Promise, Decider.Token)]
    [InlineData(Input.FromException, Decider.Timeout)]
    [InlineData(Input.Preserved, Decider.Token)]
    public void InputForgottenFirst_ThenItsFailureStored_IsReportedOnce(Input kind, Decider decider)
        => Assert.Equal(1, ReportsOfTheStoredFault(kind, decider, failsAfterTheCall: false, forgetFirst: true));
}

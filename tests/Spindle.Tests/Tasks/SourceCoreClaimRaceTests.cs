using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Threading;
using SpindleLib.Tests.Sources;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// Claims of a source's core made with one compare-and-swap on its word, raced by two threads through
/// <see cref="ContinuationRacer"/> (mutation testing mut53c found no test that failed with either made a read and then a
/// store). Two reads of one completed async method's task at once (the caller's mistake): the read consumes the use, so
/// exactly one gets the result and the other the await-once error, and the pooled box goes back to its pool once; with
/// <c>Consume</c>'s claim made a read and a store (mutant A3) both reads went through, each returning the box to its
/// pool (<c>AsyncMethodRaceTests</c>' form of this race, whose threads a barrier releases, never met it). A promise's
/// reset of a use nobody awaits, racing a late completer of that use by its token (an ask's reply landing as the asker,
/// timed out, resets for its next ask): either the reply completes the old use and the reset then starts the next, or
/// the reset comes first and the reply completes nothing, and the next use is pending either way; with
/// <c>ClaimForReset</c>'s claim made a read and a store (mutant A6) the completer's claim was overwritten and its
/// publication landed on the next use. Two forgets of one faulted promise's task at once: a read does not consume a
/// promise's use, so both reads meet the fault, and its report is claimed once (<c>TryClaimFaultReport</c>); with that
/// claim made a read and a store (mutant A5) both reported it. Run alone: its two threads must run at once.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class SourceCoreClaimRaceTests
{
    private static async SpindleTask<int> Suspends(Promise<int> p) => await p.Task + 1;

    [Fact]
    public void TwoReadsAtOnce_OfACompletedMethodsTask_OneGetsTheResult_TheOtherTheAwaitOnceError()
    {
        int rounds = TestUtil.Stress(Spinning.Helps ? 50_000 : 2_000);
        var cap = Stopwatch.StartNew();
        var failures = new List<string>();
        using (var racer = new ContinuationRacer("ConsumeClaimRaceTests racer"))
        {
            for (int round = 0; round < rounds && failures.Count < 10 && cap.Elapsed < TimeSpan.FromSeconds(5); round++)
            {
                var p = new Promise<int>();
                SpindleTask<int> task = Suspends(p);
                p.SetResult(41);
                int mine = 0;
                int theirs = 0;
                (Exception? myError, Exception? theirError) = racer.RunBothAtOnce(
                    round, () => mine = task.GetAwaiter().GetResult(), () => theirs = task.GetAwaiter().GetResult());
                int reads = (myError is null ? 1 : 0) + (theirError is null ? 1 : 0);
                foreach (Exception? e in new[] { myError, theirError })
                {
                    if (e is not null and not InvalidOperationException)
                    {
                        failures.Add($"round {round}: a read threw {e.GetType().Name}: {e.Message}");
                    }
                }
                if (reads != 1)
                {
                    failures.Add($"round {round}: {reads} of the two reads got the result ({mine}, {theirs})");
                }
                else if (mine + theirs != 42)
                {
                    failures.Add($"round {round}: the read got {mine + theirs}, not 42");
                }
            }
        }
        Assert.True(failures.Count == 0, $"two reads of one completed task at once: {string.Join("; ", failures)}");
    }

    [Fact]
    public void AResetRacingALateReplyByToken_LeavesTheNextUsePending()
    {
        int rounds = TestUtil.Stress(Spinning.Helps ? 50_000 : 2_000);
        var cap = Stopwatch.StartNew();
        var failures = new List<string>();
        var promise = new Promise<int>();
        using (var racer = new ContinuationRacer("ResetClaimRaceTests racer"))
        {
            for (int round = 0; round < rounds && failures.Count < 10 && cap.Elapsed < TimeSpan.FromSeconds(5); round++)
            {
                short old = promise.Token;
                (Exception? mine, Exception? theirs) = racer.RunBothAtOnce(round, promise.Reset, () => promise.TrySetResult(old, round));
                Assert.Null(mine);
                Assert.Null(theirs);
                if (promise.Token == old || promise.IsCompleted)
                {
                    failures.Add($"round {round}: after the reset the promise is on token {promise.Token} (was {old}), completed: {promise.IsCompleted}");
                    break; // the promise's state is not to be trusted for the next round
                }
            }
        }
        Assert.True(failures.Count == 0, $"a reset racing a late reply by token: {string.Join("; ", failures)}");
    }

    [Fact]
    public void TwoForgetsAtOnce_OfAFaultedPromisesTask_ReportTheFaultOnce()
    {
        const string Marker = "SourceCoreClaimRaceTests: the fault two forgets report";
        int rounds = TestUtil.Stress(Spinning.Helps ? 50_000 : 2_000);
        var cap = Stopwatch.StartNew();
        var failures = new List<string>();
        int reports = 0;
        using (UnobservedReports.Start(e => e.Message == Marker, _ => Interlocked.Increment(ref reports)))
        using (var racer = new ContinuationRacer("FaultReportClaimRaceTests racer"))
        {
            for (int round = 0; round < rounds && failures.Count < 10 && cap.Elapsed < TimeSpan.FromSeconds(5); round++)
            {
                var promise = new Promise();
                promise.SetException(new InvalidOperationException(Marker));
                SpindleTask task = promise.Task;
                int before = Volatile.Read(ref reports);
                (Exception? mine, Exception? theirs) = racer.RunBothAtOnce(round, task.Forget, task.Forget);
                Assert.Null(mine);
                Assert.Null(theirs);
                int reported = Volatile.Read(ref reports) - before;
                if (reported != 1)
                {
                    failures.Add($"round {round}: the fault was reported {reported} times");
                }
            }
        }
        Assert.True(failures.Count == 0, $"two forgets of one faulted promise's task at once: {string.Join("; ", failures)}");
    }
}

using System;
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
        var race = new RaceRounds("ConsumeClaimRaceTests", TestUtil.Stress(Spinning.Helps ? 50_000 : 2_000)) { TimeCap = TimeSpan.FromSeconds(5) };
        race.Run(round =>
        {
            var p = new Promise<int>();
            SpindleTask<int> task = Suspends(p);
            p.SetResult(41);
            int mine = 0;
            int theirs = 0;
            (Exception? myError, Exception? theirError) = race.Racer.RunBothAtOnce(
                round, () => mine = task.GetAwaiter().GetResult(), () => theirs = task.GetAwaiter().GetResult());
            int reads = (myError is null ? 1 : 0) + (theirError is null ? 1 : 0);
            foreach (Exception? e in new[] { myError, theirError })
            {
                if (e is not null and not InvalidOperationException)
                {
                    race.Fail($"a read threw {e.GetType().Name}: {e.Message}");
                }
            }
            if (reads != 1)
            {
                race.Fail($"{reads} of the two reads got the result ({mine}, {theirs})");
            }
            else if (mine + theirs != 42)
            {
                race.Fail($"the read got {mine + theirs}, not 42");
            }
        });
        race.AssertNone("two reads of one completed task at once");
    }

    [Fact]
    public void AResetRacingALateReplyByToken_LeavesTheNextUsePending()
    {
        var promise = new Promise<int>();
        // A failing round stops the run: the promise's state is not to be trusted for the next round.
        var race = new RaceRounds("ResetClaimRaceTests", TestUtil.Stress(Spinning.Helps ? 50_000 : 2_000)) { MaxFailures = 1, TimeCap = TimeSpan.FromSeconds(5) };
        race.Run(round =>
        {
            short old = promise.Token;
            (Exception? mine, Exception? theirs) = race.Racer.RunBothAtOnce(round, promise.Reset, () => promise.TrySetResult(old, round));
            Assert.Null(mine);
            Assert.Null(theirs);
            if (promise.Token == old || promise.IsCompleted)
            {
                race.Fail($"after the reset the promise is on token {promise.Token} (was {old}), completed: {promise.IsCompleted}");
            }
        });
        race.AssertNone("a reset racing a late reply by token");
    }

    [Fact]
    public void TwoForgetsAtOnce_OfAFaultedPromisesTask_ReportTheFaultOnce()
    {
        const string Marker = "SourceCoreClaimRaceTests: the fault two forgets report";
        int reports = 0;
        using var watch = UnobservedReports.Start(e => e.Message == Marker, _ => Interlocked.Increment(ref reports));
        var race = new RaceRounds("FaultReportClaimRaceTests", TestUtil.Stress(Spinning.Helps ? 50_000 : 2_000)) { TimeCap = TimeSpan.FromSeconds(5) };
        race.Run(round =>
        {
            var promise = new Promise();
            promise.SetException(new InvalidOperationException(Marker));
            SpindleTask task = promise.Task;
            int before = Volatile.Read(ref reports);
            (Exception? mine, Exception? theirs) = race.Racer.RunBothAtOnce(round, task.Forget, task.Forget);
            Assert.Null(mine);
            Assert.Null(theirs);
            int reported = Volatile.Read(ref reports) - before;
            if (reported != 1)
            {
                race.Fail($"the fault was reported {reported} times");
            }
        });
        race.AssertNone("two forgets of one faulted promise's task at once");
    }
}

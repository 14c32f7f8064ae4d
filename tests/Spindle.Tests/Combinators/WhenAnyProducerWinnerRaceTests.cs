using System;
using System.Threading;
using SpindleLib.Tests.Sources;

namespace SpindleLib.Tests.Combinators;

/// <summary>
/// A WhenAny of producers decides its winner with one compare-and-swap, and only the winner completes the combined task:
/// its index and result are the winner's. Two producers finishing on two threads at once, one failed and one with a
/// result, must give either the failure or the other's index and result, never the failed one's index with a result.
/// A claim made of a read and a store let both finishers through: one completed the task and the other overwrote the
/// winner's index, so a WhenAny that succeeded named the failed producer with a default result, and that failure was
/// neither thrown nor reported; mutation testing (mut52, mutant C3) found no test that failed with it. Run alone: its two
/// threads must run at once. On a loaded machine a round waits for both threads to be on a core at once: the 50,000
/// rounds took 153 s at load 5-10, and were 34,000 rounds into a 900 s hang timeout at load 30-45 (a run of the sixth
/// mutation pass "hung" so, at a 240 s timeout), so a time cap ends the run after a floor of rounds. So that the floor
/// still finds C3 there (it first failed at rounds 114, 5,268 and 5,806 at load 29-38), the two finishers meet just before
/// their claims in a Debug build (<see cref="HookMeeting"/> at <c>CombinatorCore.TestHookBeforeWinnerClaim</c>), and each
/// first stores to cache lines the other wrote last (<see cref="ContinuationRacer.StoreToLines"/>), so that its store of
/// the winner reaches the other side later while its read goes ahead.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class WhenAnyProducerWinnerRaceTests
{
    [Fact]
    public void AFailedAndASucceededProducerFinishingAtOnce_GiveOneWinnersOutcome()
    {
        // On one processor the racer yields where it would spin, and a round takes a time slice: fewer rounds there.
        var thrown = new InvalidOperationException("producer 0 failed");
        int failedWins = 0;
        using UnobservedReports watch = UnobservedReports.Start(UnobservedReports.Own.Instances(thrown));
        long[][] lines = ContinuationRacer.NewLinePair();
        var race = new RaceRounds("WhenAnyProducerWinnerRaceTests", TestUtil.Stress(Spinning.Helps ? 50_000 : 2_000))
        {
            TimeCap = TimeSpan.FromSeconds(5),
            MinRounds = TestUtil.Stress(1_000),
#if DEBUG
            ClearHooks = () => CombinatorCore.TestHookBeforeWinnerClaim = null,
#endif
        };
#if DEBUG
        var meeting = new HookMeeting();
        object? target = null;
        int current = -1;
        int failingSide = Environment.CurrentManagedThreadId; // this thread finishes the failing producer, the racer the other
        CombinatorCore.TestHookBeforeWinnerClaim = (combinator, _) =>
        {
            if (combinator == Volatile.Read(ref target))
            {
                meeting.Arrive(Environment.CurrentManagedThreadId == failingSide ? 0 : 1, Volatile.Read(ref current));
            }
        };
#endif
        race.Run(round =>
        {
            var failing = new Promise<int>();
            var succeeding = new Promise<int>();
            SpindleTask<(int Index, int Result)> any = SpindleTask.WhenAny<int>(
            [
                _ => failing.Task,
                _ => succeeding.Task,
            ]);
#if DEBUG
            Volatile.Write(ref current, round);
            Volatile.Write(ref target, any._source);
#endif
            (Exception? mine, Exception? theirs) = race.Racer.RunBothAtOnce(
                round,
                () =>
                {
                    ContinuationRacer.StoreToLines(lines[round & 1], round);
                    failing.TrySetException(thrown);
                },
                () =>
                {
                    ContinuationRacer.StoreToLines(lines[(round & 1) ^ 1], round); // the lines the other side wrote last round
                    succeeding.TrySetResult(7);
                });
#if DEBUG
            Volatile.Write(ref target, null);
#endif
            Assert.Null(mine);
            Assert.Null(theirs);
            if (!any.IsCompleted)
            {
                race.Fail("both producers finished, and the WhenAny is still pending");
                return;
            }
            try
            {
                (int index, int result) = any.GetAwaiter().GetResult();
                if (index != 1 || result != 7)
                {
                    race.Fail($"the WhenAny succeeded with ({index}, {result}), not the succeeding producer's (1, 7)");
                }
            }
            catch (InvalidOperationException ex) when (ex == thrown)
            {
                failedWins++;
            }
        });
#if DEBUG
        Assert.True(meeting.Missed == -1, $"round {meeting.Missed}: the two producers did not both reach their claim within 10 s");
#endif
        race.AssertNone($"two producers finishing at once gave a mixed outcome ({race.Ran} rounds)");
        // The failure was thrown where its producer won, and reported, once, where it lost: never both, never neither.
        Assert.Equal(race.Ran - failedWins, watch.Reports.Count);
    }
}

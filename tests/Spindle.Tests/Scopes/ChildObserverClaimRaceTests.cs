using System;

using SpindleLib.Tests.Sources;

namespace SpindleLib.Tests.Scopes;

/// <summary>
/// A scope counts a child out from the continuation it registers on the child's task (its child observer's Done). Only a
/// user's <see cref="ISpindleSource"/> can run that continuation twice (misuse its <c>OnCompleted</c> contract forbids):
/// Spindle's own sources run it once, and a registration that throws is counted out by <c>ObserveChild</c> only while the
/// observer has not run. Two runs from two threads at once must still count the child out once and refuse the other with
/// the misuse's error: the observer's claim is one exchange. A check of the flag followed by a store of it let both runs
/// through when they met between the two: the child was counted out twice, so a scope with a sibling still running read
/// no children running (and its count went below zero when the sibling finished, so its wait never completed), and
/// neither run was refused. Mutation testing (mut51) found that <c>ContinuationRunTwiceTests</c>' race, two threads
/// released by a Barrier a round apart, met there too seldom to fail with such a claim. Run alone: its two threads must
/// run at once, on the two cores a small machine has. On a loaded machine a round waits for both threads to be on a core:
/// the 100,000 rounds took 1 s quiet and 19-26 s at load 10-12 (six spinners on two cores, tests59), so a time cap ends
/// the run after a floor of 10,000 rounds. The two runs used to race bare, and then that claim (M25) first failed anywhere
/// from round 156 to 71,020 and passed 2 of 5 whole runs at load 10-17; so each run first stores to cache lines the other
/// wrote last (<see cref="ContinuationRacer.StoreToLines"/>), so that its store of the flag reaches the other side later
/// while its read goes ahead, and the claim then first failed by round 978 in each of 21 runs (load 7-14): the floor is
/// ten times that.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class ChildObserverClaimRaceTests
{
    /// <summary>
    /// Each round, a scope runs a child on a <see cref="RerunningSource"/> and a sibling that stays pending; this thread
    /// and a second one then run the child's continuation at the same moment (<see cref="ContinuationRacer"/>). Exactly
    /// one run must return and the other throw the misuse's error, and the scope must still count the sibling as running.
    /// </summary>
    [Fact]
    public void TwoRunsAtOnce_OfAChildsContinuation_CountTheChildOutOnce_AndRefuseTheOther()
    {
        long[][] lines = ContinuationRacer.NewLinePair();
        var race = new RaceRounds("ChildObserverClaimRaceTests", TestUtil.Stress(100_000))
        {
            TimeCap = TimeSpan.FromSeconds(5),
            MinRounds = TestUtil.Stress(10_000),
        };
        race.Run(round =>
        {
            var scope = RerunningSource.ScopeWithChildAndSibling(out var source, out var sibling);
            Assert.Equal(2, scope.RunningChildren);
            source.MarkCompleted();

            (Exception? mine, Exception? theirs) = race.Racer.RunBothAtOnce(round, source, lines);
            int refused = ContinuationRacer.Refusals(round, mine, theirs);
            int running = scope.RunningChildren;
            if (refused != 1 || running != 1)
            {
                // The scope's count is wrong: its wait would never complete, so it is left, not awaited.
                race.Fail($"{refused} of the two runs refused, {running} children counted running (the sibling still runs: 1)");
                return;
            }
            sibling.TrySetResult();
            Assert.Equal(0, scope.RunningChildren);
            scope.WaitAsync().GetAwaiter().GetResult(); // every child has finished: it has completed
            scope.DisposeAsync().AsTask().GetAwaiter().GetResult();
        });
        race.AssertNone("two runs of one child's continuation both counted it out");
    }
}

using System;
using System.Threading;

namespace SpindleLib.Tests.Sources;

/// <summary>
/// An async method awaiting a user's <see cref="ISpindleSource"/> hands it a continuation that runs the method's box
/// once: the box's claim on that run is a compare-exchange of its pool link, marked while the method waits. A user's
/// source that runs the continuation from two threads at once (misuse its <c>OnCompleted</c> contract forbids) must
/// resume the method once and have the other run refused with the misuse's error. A claim made of a read of the mark and
/// a store let both runs through when they met between the two, and the method resumed twice from one await; mutation
/// testing (mut52) found that <see cref="ContinuationRunTwiceTests"/>' race, two threads released by a Barrier, met there
/// too seldom to fail with such a claim. Run alone: its two threads must run at once. On a loaded machine a round waits
/// for both threads to be on a core: the 100,000 rounds took 0.7 s quiet and 6-11 s with three spinners on two cores
/// (race59), so a time cap ends the run after a floor of 10,000 rounds. The two runs used to race bare, and then that
/// claim (S3) first failed anywhere from round 767 to 24,830 (6 runs), the latest past the floor; so each run first
/// stores to cache lines the other wrote last (<see cref="ContinuationRacer.StoreToLines"/>), so that its store of the
/// claim reaches the other side later while its read goes ahead, and the claim then first failed by round 2,666 in each
/// of 18 runs (with and without three spinners; 15 of them by round 833): the floor is nearly four times that.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class BoxRunClaimRaceTests
{
    private static async SpindleTask<int> AwaitOnce(SpindleTask<int> task, StrongBox resumed)
    {
        int value = await task;
        Interlocked.Increment(ref resumed.Count);
        return value + 1;
    }

    private sealed class StrongBox
    {
        public int Count;
    }

    /// <summary>
    /// Each round, a method awaits a new <see cref="RerunningSource"/>; this thread and a second one then run its
    /// continuation at the same moment (<see cref="ContinuationRacer"/>). Exactly one run must resume the method, which
    /// then returns its result, and the other must be refused.
    /// </summary>
    [Fact]
    public void TwoRunsAtOnce_OfAMethodsContinuation_ResumeItOnce_AndRefuseTheOther()
    {
        long[][] lines = ContinuationRacer.NewLinePair();
        var race = new RaceRounds("BoxRunClaimRaceTests", TestUtil.Stress(100_000))
        {
            TimeCap = TimeSpan.FromSeconds(5),
            MinRounds = TestUtil.Stress(10_000),
        };
        race.Run(round =>
        {
            var source = new RerunningSource();
            var resumed = new StrongBox();
            SpindleTask<int> method = AwaitOnce(source.Task, resumed);
            source.MarkCompleted();

            (Exception? mine, Exception? theirs) = race.Racer.RunBothAtOnce(round, source, lines);
            int refused;
            try
            {
                refused = ContinuationRacer.Refusals(round, mine, theirs);
            }
            catch (InvalidOperationException ex)
            {
                race.Fail("a run threw something other than the misuse's error: " + ex.InnerException); // two runs at once in the method's code
                return;
            }
            int resumes = Volatile.Read(ref resumed.Count);
            if (refused != 1 || resumes != 1)
            {
                // The box ran twice: it is left, not read (its pool would take it back twice).
                race.Fail($"{refused} of the two runs refused, the method resumed {resumes} times");
                return;
            }
            Assert.Equal(43, method.GetAwaiter().GetResult());
        });
        race.AssertNone("two runs of one method's continuation both resumed it");
    }
}

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
/// too seldom to fail with such a claim. Run alone: its two threads must run at once.
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
        var race = new RaceRounds("BoxRunClaimRaceTests", TestUtil.Stress(100_000));
        race.Run(round =>
        {
            var source = new RerunningSource();
            var resumed = new StrongBox();
            SpindleTask<int> method = AwaitOnce(source.Task, resumed);
            source.MarkCompleted();

            (Exception? mine, Exception? theirs) = race.Racer.RunBothAtOnce(round, source);
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

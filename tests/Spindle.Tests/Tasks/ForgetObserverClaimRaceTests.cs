using System;

using SpindleLib.Tests.Sources;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// <c>Forget()</c> on a pending task of a source other than an async method registers an observer that reads the task when
/// it finishes. A task that finishes while the registration is still returning is read by <c>Forget()</c> itself, at the
/// call: the observer's run and the registrant each take the observer's phase with one atomic step, and whichever comes
/// second reads. An observer's run that took the phase with a read and then a store let the registrant's step fall
/// between the two: each then left the read to the other, and the task was never read (a failure never reported, a
/// pooled source never given back). Mutation testing (mut52) found no test that failed with such a run. Run alone: its
/// two threads must run at once.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class ForgetObserverClaimRaceTests
{
    /// <summary>
    /// Each round forgets a pending task of a user's source that another thread completes, and runs the continuation of,
    /// the moment the source is handed it (<see cref="ContinuationRacer.RunOnceRegistered"/>): the task must be read
    /// exactly once, by the observer's run or by <c>Forget()</c>.
    /// </summary>
    [Fact]
    public void ATaskFinishingOnAnotherThread_WhileForgetRegistersItsObserver_IsReadOnce()
    {
        var race = new RaceRounds("ForgetObserverClaimRaceTests", TestUtil.Stress(50_000));
        race.Run(round =>
        {
            var source = new RerunningSource();
            Exception? error = race.Racer.RunOnceRegistered(round, source, () => source.UntypedTask.Forget());
            if (error is not null)
            {
                race.Fail($"the observer's run threw {error}");
            }
            int reads = source.Reads; // both sides have returned: whichever reads has read
            if (reads != 1)
            {
                race.Fail($"the forgotten task was read {reads} times");
            }
        });
        race.AssertNone("a forgotten task finishing during the registration");
    }
}

using System;
using System.Linq;
using System.Threading;

using SpindleLib.Tests.Sources;

namespace SpindleLib.Tests.Threading;

/// <summary>
/// A run given a token is claimed once, by whichever comes first with a compare-exchange: the worker that starts it or
/// the token's callback that ends it as cancelled. A worker's claim made of a read and a store let a cancellation that
/// came between the two end the task as cancelled and still run the work. <c>RunCancellationTests</c>' race cancels
/// against a run queued from outside the workers, which a worker starts a wake-up later: it met that window too seldom to
/// fail (mutation testing, mut52). Here the run is handed off on a worker, which starts it as soon as the item that
/// queued it returns, and the cancellation follows the hand-off by a few iterations that sweep through the rounds. Run
/// alone: its threads must run at once. On a loaded machine a round waits for the worker, the racer and this thread to
/// be on a core: the 20,000 rounds took 5 s quiet and 116 s at load 6-7 (three spinners on two cores), so a time cap ends
/// the run after a floor of 10,000 rounds. The floor is for the claim made of a read and a store (W6), which failed one
/// round in about 2,500 at that load (8 of 20,000, the first at round 4,511): the floor meets it about four times.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class RunStartClaimRaceTests
{
    [Fact]
    public void ACancellationAsAWorkerStartsAHandedOffRun_EndsItOneWayOnly()
    {
        int rounds = TestUtil.Stress(20_000);
        var ranFor = new int[rounds];
        var cancelled = new bool[rounds];
        int queued = -1;
        // Each round's outcome is checked after the run (a cancelled run's work could start late).
        var race = new RaceRounds("RunStartClaimRaceTests", rounds)
        {
            TimeCap = TimeSpan.FromSeconds(5),
            MinRounds = TestUtil.Stress(10_000),
        };
        race.Run(round =>
        {
            int r = round;
            using var cts = new CancellationTokenSource();
            SpindleTask<int> run = default;
            SpindleTask outer = default;
            (Exception? mine, Exception? theirs) = race.Racer.RunOnceReady(round, () => Volatile.Read(ref queued) == r, spins: round % 128, cts.Cancel, () =>
            {
                outer = Spindle.Run(() =>
                {
                    // The cancellation takes longer to arrive than the hand-off to start: the racer sets out now.
                    Volatile.Write(ref queued, r);
                    // On a worker: into its run-next slot, started as soon as this item returns.
                    run = Spindle.Run(() =>
                    {
                        Interlocked.Increment(ref ranFor[r]);
                        return r;
                    }, cts.Token);
                });
            });
            Assert.Null(mine);
            Assert.Null(theirs);
            TestUtil.WithTimeout(outer).GetAwaiter().GetResult(); // publishes the run's task
            try
            {
                Assert.Equal(r, TestUtil.WithTimeout(run).GetAwaiter().GetResult());
            }
            catch (OperationCanceledException)
            {
                cancelled[r] = true;
            }
        });
        Thread.Sleep(100); // a run started after its cancellation would have run its work by now
        int ranAndCancelled = 0, ranNot = 0, cancels = 0;
        for (int r = 0; r < race.Ran; r++)
        {
            int ran = Volatile.Read(ref ranFor[r]);
            cancels += cancelled[r] ? 1 : 0;
            if (cancelled[r] && ran != 0)
            {
                ranAndCancelled++;
                race.Fail(r, $"cancelled, and its work ran {ran} times");
            }
            else if (!cancelled[r] && ran != 1)
            {
                ranNot++;
                race.Fail(r, $"succeeded, and its work ran {ran} times");
            }
        }
        Assert.True(race.Failures.Count == 0, $"{ranAndCancelled} cancelled runs ran their work, {ranNot} runs that succeeded did not run it once ({cancels} of {race.Ran} cancelled): {string.Join("; ", race.Failures.Take(10))}");
    }
}

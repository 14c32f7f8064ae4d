using System;
using System.Threading;

using SpindleLib.Tests.Sources;

namespace SpindleLib.Tests.Time;

/// <summary>
/// A worker's shard is its worker's while the worker runs, and a canceller may enter it only while the worker is parked
/// (<see cref="WheelShard.ReleaseCancelledWhileParked"/>, one compare-exchange from Parked to Tidying). The worker takes it
/// back on waking with a compare-exchange from Parked to Owned (<see cref="WheelShard.Unpark"/>), waiting out a
/// canceller that holds it. Taken back with a read of Parked and a store of Owned, a canceller's claim between the two
/// let both in the shard (the canceller unlinking and recycling nodes while the worker links and fires), and the
/// canceller then handed the shard "back" as Parked while the worker ran on: every later cancellation tidied the shard
/// under its running owner, until the worker next parked (mutation testing, mut52: T3). The worker pool's tests park and
/// wake workers a wake-up apart from any cancellation, and never met that window. Here the test's thread is a shard's
/// owner, and wakes it at the moment the racing thread cancels one of its timers (<see cref="ContinuationRacer"/>). Run
/// alone: its two threads must run at once.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class ShardUnparkClaimRaceTests
{
    /// <summary>
    /// Each round the owner links two ten-minute timers and parks its shard; then it unparks while the racing thread
    /// cancels the first timer (takes it back, as a timeout whose operation finished first is: the node goes to the
    /// shard's cancel inbox as a token's cancellation sends it). Once unparked the shard is its owner's: a cancellation of
    /// the second timer made then is left to the owner (it stays in the cancel inbox, nobody else releases it), and the
    /// owner's next pass releases both.
    /// </summary>
    [Fact]
    public void ACancellationAsTheOwnerUnparks_LeavesTheShardToTheOwnerAlone()
    {
        using var wheel = new TimerWheel(new ManualClock()); // never advanced: nothing fires
        var shard = new WheelShard(wheel, dispatch: false, worker: true);
        int tidiedFirst = 0;
        // Fewer rounds on a loaded machine (each round checks its outcome), never fewer than 200.
        var race = new RaceRounds("ShardUnparkClaimRaceTests", TestUtil.Stress(100_000)) { TimeCap = TimeSpan.FromSeconds(3), MinRounds = 200 };
        race.Run(round =>
        {
            TimerNode first = Link(shard, wheel);
            TimerNode second = Link(shard, wheel);
            Assert.True(shard.TryPark(), $"round {round}: the shard did not park with nothing cancelled");
            // The owner sets out 0-31 spins later than the racer's sweep would have it: a cancellation's path to its claim
            // on the shard is longer than the owner's to its own.
            int lead = (round >> 4) & 31;
            (Exception? mine, Exception? theirs) = race.Racer.RunBothAtOnce(round, () =>
            {
                Thread.SpinWait(lead);
                shard.Unpark();
            }, () => Assert.True(first.TryCancelQuietly()));
            Assert.Null(mine);
            Assert.Null(theirs);
            tidiedFirst += shard.HasInbox ? 0 : 1; // the canceller found the shard parked, and released the first timer itself
            Assert.True(second.TryCancelQuietly());
            if (!shard.HasInbox)
            {
                // The second cancellation's thread released it under the running owner: it found the shard marked parked.
                race.Fail($"a timer cancelled after its owner unparked was released by its canceller ({shard.Describe()})");
                shard = new WheelShard(wheel, dispatch: false, worker: true); // left marked parked: start over
            }
            else
            {
                shard.Poll(out _); // the owner's pass releases what was left to it
                Assert.Equal("count=0 linked=0", shard.Describe());
            }
        });
        race.AssertNone($"{race.Failures.Count} of {race.Ran} rounds let a canceller into the shard of a running owner ({tidiedFirst} first timers released by their canceller while parked)");
    }

    /// <summary>Links a timer due in ten minutes into <paramref name="shard"/>, as its owner does for a delay started on its worker.</summary>
    private static TimerNode Link(WheelShard shard, TimerWheel wheel)
    {
        TimerNode node = TimerNode.Rent(wheel);
        long now = wheel.NowTick();
        node.Deadline = now + 600_000;
        shard.AddOwned(node, now);
        return node;
    }
}

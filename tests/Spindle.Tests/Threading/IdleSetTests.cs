using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Threading;

/// <summary>
/// The parked-worker set: a wake-up is aimed at the worker a producer claimed, so no other worker can take it. The pool's
/// first version shared one semaphore, and a worker claimed while its re-check took an item waited for a permit that a
/// worker parking in between had taken: it slept for ever with the item in hand (the sequential benchmark's hang).
/// </summary>
public class IdleSetTests
{
    /// <summary>Every worker announces and waits for no time: a permit left in any worker's semaphore would wake it.</summary>
    internal static void AssertNoWakeUpLeft(IdleSet set, int workers)
    {
        for (int w = 0; w < workers; w++)
        {
            set.Announce(w);
            Assert.False(set.Block(w, 0), $"worker {w} found a wake-up nobody sent it, or one left over");
        }
        Assert.Equal(0, set.Count);
    }

    [Fact]
    public void AWorkerClaimedDuringItsRecheck_GetsItsOwnWakeUp_AndAnotherWorkerParkingMeanwhileCannotTakeIt()
    {
        var set = new IdleSet(2);
        set.Announce(0);                  // worker 0 announces, and its re-check is about to find an item
        Assert.True(set.TryWakeOne());    // a producer claims worker 0 and releases its wake-up
        set.Announce(1);                  // worker 1 parks in between (the interleaving that hung)
        Assert.False(set.Block(1, 50), "worker 1 was woken by the wake-up meant for worker 0");
        var standDown = Task.Run(() => set.StandDown(0)); // worker 0 leaves to run its item: its wake-up is there for it
        // The defect blocks for ever: the default bound (it was 5 s; a Task.Run can start late on a loaded machine).
        Assert.True(standDown.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "the claimed worker waited for a wake-up another worker had taken");
        Assert.Equal(0, set.Count);
        Assert.False(set.TryWakeOne()); // nobody is announced: no stray permit is left for a later wait either
        set.Announce(0);
        Assert.False(set.Block(0, 20), "a stray permit woke a later wait");
    }

    [Fact]
    public void Count_FollowsAnnouncementsClaimsAndStandDowns()
    {
        var set = new IdleSet(3);
        set.Announce(0);
        set.Announce(1);
        set.Announce(2);
        Assert.Equal(3, set.Count);
        set.StandDown(1);                 // left by itself
        Assert.Equal(2, set.Count);
        Assert.True(set.TryWakeOne());    // the one after the last announced first (0), then the next announced one (2)
        Assert.True(set.TryWakeOne());
        Assert.False(set.TryWakeOne());
        Assert.Equal(0, set.Count);
        Assert.True(set.Block(2, 1000));  // each claimed worker finds its own wake-up at once
        Assert.True(set.Block(0, 1000));
        Assert.Equal(0, set.Count);
        IdleSetTests.AssertNoWakeUpLeft(set, 3);
        Assert.Equal(0, set.Count);
    }

    [Fact]
    public void Block_TimedOut_LeavesTheSet_AndAClaimRacingTheTimeOutIsConsumedByTheSameWorker()
    {
        var set = new IdleSet(1);
        set.Announce(0);
        Assert.False(set.Block(0, 10));
        Assert.Equal(0, set.Count);
        Assert.False(set.TryWakeOne());

        // A claim that lands just as the wait times out: StandDown (inside Block) then takes the wake-up.
        for (int round = 0; round < 200; round++)
        {
            set.Announce(0);
            var producer = Task.Run(() => set.TryWakeOne());
            set.Block(0, round % 3);
            bool claimed = producer.Result;
            Assert.Equal(0, set.Count);
            // Whether or not the producer claimed the worker, its permit (if any) was consumed by it: a new wait times out.
            set.Announce(0);
            Assert.False(set.Block(0, 0), $"round {round} (claimed: {claimed}): a permit was left over for a later wait");
        }
    }

    [Fact]
    public async Task ManyProducersAndParkingWorkers_EveryWakeUpReachesAWorkerAndNoneIsLeftOver()
    {
        // Workers park and wake in a loop; producers wake whoever is announced. Each worker checks its own invariant:
        // after Block or StandDown it is out of the set. At the end, with everyone stood down, the count is zero and no
        // worker's wait is woken by a stray permit.
        const int Workers = 4;
        var set = new IdleSet(Workers);
        int stop = 0;
        long wakes = 0;
        var workers = new Task[Workers];
        for (int w = 0; w < Workers; w++)
        {
            int id = w;
            workers[w] = Task.Factory.StartNew(() =>
            {
                var random = new Random(id);
                while (Volatile.Read(ref stop) == 0)
                {
                    set.Announce(id);
                    if (random.Next(3) == 0)
                    {
                        set.StandDown(id); // a re-check that found work
                    }
                    else if (set.Block(id, random.Next(0, 3)))
                    {
                        Interlocked.Increment(ref wakes);
                    }
                }
            }, TaskCreationOptions.LongRunning);
        }
        var producers = new Task[2];
        for (int p = 0; p < producers.Length; p++)
        {
            producers[p] = Task.Factory.StartNew(() =>
            {
                long until = Environment.TickCount64 + (TestUtil.IsStress ? 20_000 : 1_000);
                while (Environment.TickCount64 < until)
                {
                    set.TryWakeOne();
                    Thread.SpinWait(50);
                }
            }, TaskCreationOptions.LongRunning);
        }
        await TestUtil.WithTimeout(Task.WhenAll(producers), TestUtil.StressTimeout(60));
        Volatile.Write(ref stop, 1);
        await TestUtil.WithTimeout(Task.WhenAll(workers), 30); // every wait has a limit of a few ms
        Assert.True(Interlocked.Read(ref wakes) > 0, "no worker was ever woken by a producer");
        Assert.Equal(0, set.Count);
        IdleSetTests.AssertNoWakeUpLeft(set, Workers);
        Assert.Equal(0, set.Count);
    }
}

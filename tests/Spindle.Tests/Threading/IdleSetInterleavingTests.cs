using System;
using System.Diagnostics;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Threading;

/// <summary>IdleSet interleavings played step by step, with the steps a test cannot pause inside done by hand.</summary>
public class IdleSetInterleavingTests
{
    private static object Slot(IdleSet set, int worker)
        => ((Array)typeof(IdleSet).GetField("_slots", System.Reflection.BindingFlags.NonPublic | System.Reflection.BindingFlags.Instance)!.GetValue(set)!).GetValue(worker)!;

    private static void SetField(object target, string name, int value)
        => target.GetType().GetField(name, System.Reflection.BindingFlags.Public | System.Reflection.BindingFlags.NonPublic | System.Reflection.BindingFlags.Instance)!.SetValue(target, value);

    private static int GetField(object target, string name)
        => (int)target.GetType().GetField(name, System.Reflection.BindingFlags.Public | System.Reflection.BindingFlags.NonPublic | System.Reflection.BindingFlags.Instance)!.GetValue(target)!;

    // Steps inside Announce and StandDown a test cannot pause between, done by hand: Announce stores State = Announced
    // and then increments the count; StandDown CASes State to Running and then decrements the count.
    private static void AnnounceStoreOnly(IdleSet set, int worker) => SetField(Slot(set, worker), "State", 1);

    private static void AnnounceIncrementOnly(IdleSet set) => SetField(set, "_count", GetField(set, "_count") + 1);

    private static void StandDownCasOnly(IdleSet set, int worker) => SetField(Slot(set, worker), "State", 0);

    private static void StandDownDecrementOnly(IdleSet set) => SetField(set, "_count", GetField(set, "_count") - 1);

    [Fact]
    public void AClaimBetweenAnnouncesStoreAndItsIncrement_TakesTheCountBelowZero_AndItComesBackWhenTheIncrementLands()
    {
        var set = new IdleSet(2);
        set.Announce(1);                  // worker 1 announced: count 1
        StandDownCasOnly(set, 1);         // worker 1's re-check found work: it is Running, its decrement not done yet
        AnnounceStoreOnly(set, 0);        // worker 0 is inside Announce: Announced, its increment not done yet
        Assert.True(set.TryWakeOne());    // a producer sees count 1 and claims the only announced worker, 0
        StandDownDecrementOnly(set);      // worker 1's decrement lands
        Assert.Equal(-1, set.Count);      // what WorkerPool.IdleWorkers clamps to 0
        Assert.False(set.TryWakeOne());   // nothing to claim, and nothing wrong
        AnnounceIncrementOnly(set);       // worker 0's increment lands; its re-check finds nothing and it blocks
        Assert.Equal(0, set.Count);
        Assert.True(set.Block(0, 1000), "the worker claimed before its increment did not get its wake-up");
        Assert.Equal(0, set.Count);
        IdleSetTests.AssertNoWakeUpLeft(set, 2);
        Assert.Equal(0, set.Count);
    }

    [Fact]
    public void AClaimBetweenAnnouncesStoreAndItsIncrement_WhoseRecheckFindsWork_StandsDownOnItsOwnWakeUp()
    {
        var set = new IdleSet(3);
        set.Announce(2);
        StandDownCasOnly(set, 2);
        AnnounceStoreOnly(set, 0);
        Assert.True(set.TryWakeOne());                     // claims 0, before its increment
        StandDownDecrementOnly(set);
        AnnounceIncrementOnly(set);
        Assert.Equal(0, set.Count);
        set.Announce(1);                                   // another worker parks meanwhile
        var standDown = Task.Run(() => set.StandDown(0));  // worker 0's re-check found an item
        // The defect blocks for ever: the default bound (it was 5 s; a Task.Run can start late on a loaded machine).
        Assert.True(standDown.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "the claimed worker waited for a wake-up it never got");
        Assert.Equal(1, set.Count);
        Assert.True(set.TryWakeOne());                      // worker 1 is there to be claimed, its wake-up intact
        Assert.True(set.Block(1, 1000));
        Assert.Equal(0, set.Count);
        IdleSetTests.AssertNoWakeUpLeft(set, 3);
    }

    [Fact]
    public async Task AnnounceThenRecheck_AgainstPublishThenWake_NoUnitOfWorkIsLeftWithEveryWorkerBlockedForEver()
    {
        // The pool's protocol on a bare IdleSet and a counter of work: workers block with no time limit, so a lost
        // wake-up is a unit left while all sleep. Two producers each publish one unit (a full fence) and wake one worker,
        // then wait for it to be taken, so most units arrive while the workers are parking or parked.
        const int Workers = 3;
        var set = new IdleSet(Workers);
        int work = 0;
        long taken = 0;
        int stop = 0;

        bool TryTake()
        {
            int w = Volatile.Read(ref work);
            while (w > 0)
            {
                int seen = Interlocked.CompareExchange(ref work, w - 1, w);
                if (seen == w)
                {
                    Interlocked.Increment(ref taken);
                    return true;
                }
                w = seen;
            }
            return false;
        }

        var workers = new Task[Workers];
        for (int i = 0; i < Workers; i++)
        {
            int id = i;
            workers[i] = TestUtil.RunOnThread(() =>
            {
                while (Volatile.Read(ref stop) == 0)
                {
                    if (TryTake())
                    {
                        continue;
                    }
                    set.Announce(id);
                    if (TryTake())
                    {
                        set.StandDown(id);
                        if (Volatile.Read(ref work) > 0)
                        {
                            set.TryWakeOne(); // WakeIfMoreWork
                        }
                        continue;
                    }
                    set.Block(id, Timeout.Infinite);
                }
            }, "idle-set worker " + id);
        }
        var clock = Stopwatch.StartNew();
        TimeSpan length = TimeSpan.FromSeconds(TestUtil.IsStress ? 60 : 3);
        // Past the length until MinUnits have gone through (a loaded machine runs fewer: 764 in 3 s beside two busy
        // loops on the two cores), up to a cap.
        const long MinUnits = 1000;
        TimeSpan cap = length + TimeSpan.FromSeconds(30);
        long published = 0;
        var producers = new Task[2];
        for (int p = 0; p < producers.Length; p++)
        {
            int seed = p;
            producers[p] = TestUtil.RunOnThread(() =>
            {
                var rng = new Random(seed);
                while ((clock.Elapsed < length || Interlocked.Read(ref published) < MinUnits) && clock.Elapsed < cap)
                {
                    Interlocked.Increment(ref work);          // publish: its interlocked update is the full fence
                    Interlocked.Increment(ref published);
                    set.TryWakeOne();
                    var wait = Stopwatch.StartNew();
                    while (Volatile.Read(ref work) > 0)
                    {
                        Assert.True(wait.Elapsed < TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds), $"a unit of work waits with {set.Count} workers announced"); // they block with no limit
                        Thread.Yield();
                    }
                    Thread.SpinWait(rng.Next(0, 4000));
                }
            }, "idle-set producer " + p);
        }
        try
        {
            await TestUtil.WithTimeout(Task.WhenAll(producers), (int)cap.TotalSeconds + 60);
        }
        finally
        {
            Volatile.Write(ref stop, 1);
            for (int k = 0; k < 3; k++)
            {
                set.ReleaseAll();
            }
        }
        await TestUtil.WithTimeout(Task.WhenAll(workers), 10);
        Assert.Equal(Interlocked.Read(ref published), Interlocked.Read(ref taken));
        Assert.True(Interlocked.Read(ref published) >= MinUnits, $"only {published} units in {clock.Elapsed.TotalSeconds:F0} s");
    }

    [Fact]
    public void ReleaseAll_WakesAnnouncedBlockedAndClaimedWorkers_AndTheCountEndsAtZero()
    {
        var set = new IdleSet(3);
        set.Announce(1);
        Assert.True(set.TryWakeOne()); // claims 1, the only one announced
        set.Announce(0);
        // 0 blocks with no limit; 1 is claimed and stands down; 2 is running.
        var blocked = Task.Run(() => set.Block(0, Timeout.Infinite));
        set.ReleaseAll();
        // The defect blocks for ever: the default bound (it was 5 s; a Task.Run can start late on a loaded machine).
        Assert.True(blocked.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "Dispose did not wake a parked worker");
        Assert.True(blocked.Result);
        set.StandDown(1);   // takes one of its two permits at once
        Assert.Equal(0, set.Count);
        set.Announce(2);    // a running worker that parks after Dispose finds its permit at once
        Assert.True(set.Block(2, 0));
        Assert.Equal(0, set.Count);
    }
}

using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Runtime.CompilerServices;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Threading;

using Item = WorkStealingDequeTests.Item;

/// <summary>
/// The deque's owner clears the slots thieves took (ClearTaken). Played as a model: thieves whose TrySteal is split into
/// its reads and its CAS, stalled at every point while the owner pushes (growing, wrapping), pops and steals from itself;
/// and with real threads.
/// </summary>
public class WorkStealingDequeClearTakenTests
{
    [UnsafeAccessor(UnsafeAccessorKind.Field, Name = "_top")]
    private static extern ref long Top(WorkStealingDeque<Item> deque);

    [UnsafeAccessor(UnsafeAccessorKind.Field, Name = "_bottom")]
    private static extern ref long Bottom(WorkStealingDeque<Item> deque);

    private static ref Item?[] Array(WorkStealingDeque<Item> deque) => ref DequeFields<Item>.Array(deque);

    /// <summary>A field of the generic type's own type parameter needs an accessor declared with the same parameter.</summary>
    private static class DequeFields<T> where T : class
    {
        [UnsafeAccessor(UnsafeAccessorKind.Field, Name = "_array")]
        public static extern ref T?[] Array(WorkStealingDeque<T> deque);
    }

    /// <summary>A thief's TrySteal cut at each of its shared reads, so a schedule can stall it anywhere.</summary>
    private sealed class StagedThief
    {
        public int Stage; // 0 idle, 1 read top, 2 read bottom, 3 read array and slot
        public long T;
        public long B;
        public Item?[]? A;
        public Item? Seen;
    }

    private sealed class Coverage
    {
        public int Grown;
        public int StalledWins;
        public int StalledWinsAfterGrowth;
        public int LostHavingReadACleared;
    }

    [Fact]
    public void StalledThieves_AgainstAnOwnerThatPushesPopsGrowsWrapsAndStealsFromItself_EachItemTakenOnceAndNeverCleared()
    {
        int schedules = TestUtil.Stress(3000);
        var coverage = new Coverage();
        for (int seed = 0; seed < schedules; seed++)
        {
            RunSchedule(seed, coverage);
        }
        // The schedules reach what the argument for ClearTaken is about.
        Assert.True(coverage.Grown > 50, $"only {coverage.Grown} schedules grew the array");
        Assert.True(coverage.StalledWins > 1000, $"only {coverage.StalledWins} stalled thieves won");
        Assert.True(coverage.StalledWinsAfterGrowth > 10, $"only {coverage.StalledWinsAfterGrowth} stalled thieves won holding an old array");
        Assert.True(coverage.LostHavingReadACleared > 50, $"only {coverage.LostHavingReadACleared} stalled thieves read a cleared slot (and lost)");
    }

    private static void RunSchedule(int seed, Coverage coverage)
    {
        var rng = new Random(seed);
        var deque = new WorkStealingDeque<Item>();
        var live = new Dictionary<long, Item>(); // the model: index -> item in [top, bottom)
        var takenCount = new Dictionary<int, int>();
        int nextId = 0;
        var thieves = new StagedThief[3];
        for (int i = 0; i < thieves.Length; i++)
        {
            thieves[i] = new StagedThief();
        }
        // Bias the schedule so the deque sometimes fills past 64 and 128 (growth) and sometimes runs dry (wrap, empty pops).
        int pushWeight = rng.Next(2, 9);
        int steps = rng.Next(50, 600);

        void Took(Item item, long index, string how)
        {
            Assert.True(live.TryGetValue(index, out Item? expected), $"seed {seed}: {how} took index {index}, not in the deque");
            Assert.Same(expected, item);
            live.Remove(index);
            takenCount[item.Id] = takenCount.GetValueOrDefault(item.Id) + 1;
            Assert.True(takenCount[item.Id] == 1, $"seed {seed}: item {item.Id} taken twice ({how})");
        }

        for (int step = 0; step < steps; step++)
        {
            int choice = rng.Next(pushWeight + 6);
            if (choice < pushWeight)
            {
                long b = Bottom(deque);
                var item = new Item(nextId++);
                deque.Push(item);
                live[b] = item;
            }
            else if (choice < pushWeight + 2)
            {
                long b = Bottom(deque);
                Item? item = deque.TryPop();
                if (item is not null)
                {
                    Took(item, b - 1, "the owner's pop");
                }
            }
            else if (choice == pushWeight + 2)
            {
                long t = Volatile.Read(ref Top(deque));
                Item? item = deque.TrySteal(); // the owner stealing from its own deque (FindWorkFairly)
                if (item is not null)
                {
                    Took(item, t, "the owner's own steal");
                }
            }
            else
            {
                StagedThief thief = thieves[rng.Next(thieves.Length)];
                switch (thief.Stage)
                {
                    case 0:
                        thief.T = Volatile.Read(ref Top(deque));
                        thief.Stage = 1;
                        break;
                    case 1:
                        thief.B = Volatile.Read(ref Bottom(deque));
                        thief.Stage = thief.T >= thief.B ? 0 : 2;
                        break;
                    case 2:
                        thief.A = Volatile.Read(ref Array(deque));
                        thief.Seen = thief.A[thief.T & (thief.A.Length - 1)];
                        thief.Stage = 3;
                        break;
                    default:
                        if (Interlocked.CompareExchange(ref Top(deque), thief.T + 1, thief.T) == thief.T)
                        {
                            Assert.True(thief.Seen is not null, $"seed {seed}: a thief won index {thief.T} but read a cleared slot");
                            Took(thief.Seen!, thief.T, "a stalled thief");
                            coverage.StalledWins++;
                            if (thief.A != Array(deque))
                            {
                                coverage.StalledWinsAfterGrowth++;
                            }
                        }
                        else if (thief.Seen is null)
                        {
                            coverage.LostHavingReadACleared++;
                        }
                        thief.Stage = 0;
                        thief.A = null;
                        thief.Seen = null;
                        break;
                }
            }
        }
        // Drain, then check the owner let go of everything once it found the deque empty.
        foreach (StagedThief thief in thieves)
        {
            if (thief.Stage == 3 && Interlocked.CompareExchange(ref Top(deque), thief.T + 1, thief.T) == thief.T)
            {
                Assert.True(thief.Seen is not null, $"seed {seed}: a thief won index {thief.T} but read a cleared slot");
                Took(thief.Seen!, thief.T, "a stalled thief at the end");
            }
            thief.A = null;
            thief.Seen = null;
        }
        while (true)
        {
            long b = Bottom(deque);
            Item? item = deque.TryPop();
            if (item is null)
            {
                break;
            }
            Took(item, b - 1, "the final pops");
        }
        Assert.True(live.Count == 0, $"seed {seed}: {live.Count} items lost");
        coverage.Grown += Array(deque).Length > 64 ? 1 : 0;
        Assert.Equal(nextId, takenCount.Count);
        Item?[] array = Array(deque);
        for (int i = 0; i < array.Length; i++)
        {
            Assert.True(array[i] is null, $"seed {seed}: slot {i} of an empty deque still holds item {array[i]?.Id}");
        }
    }

    [Fact]
    public async Task OwnerPushingPoppingAndStealingFromItself_WithThievesOnOtherThreads_EachItemTakenOnce_AndNothingHeldAtTheEnd()
    {
        // Real threads: the owner keeps the deque around the array's length (growth and wrap-around at every size), pops,
        // steals from its own top as FindWorkFairly does, and drains it now and then (the empty pop clears). A slot
        // cleared under a thief that then wins its CAS shows up as a lost item.
        const int Items = 3_000_000;
        var deque = new WorkStealingDeque<Item>();
        var tally = new WorkStealingDequeTests.TakenTally(Items);
        long stolen = 0;
        int stop = 0;

        var thiefTasks = new Task[2];
        for (int t = 0; t < thiefTasks.Length; t++)
        {
            thiefTasks[t] = TestUtil.RunOnThread(() =>
            {
                while (Volatile.Read(ref stop) == 0)
                {
                    if (deque.TrySteal() is { } item)
                    {
                        Interlocked.Increment(ref stolen);
                        tally.Take(item);
                    }
                    else
                    {
                        Thread.SpinWait(20);
                    }
                }
            }, "deque thief " + t);
        }
        Task owner = TestUtil.RunOnThread(() =>
        {
            var rng = new Random(7);
            int next = 0;
            var clock = Stopwatch.StartNew();
            while (next < Items && clock.Elapsed < TimeSpan.FromSeconds(TestUtil.IsStress ? 60 : 4))
            {
                int target = rng.Next(4) switch { 0 => rng.Next(1, 8), 1 => rng.Next(60, 70), 2 => rng.Next(125, 135), _ => rng.Next(250, 600) };
                while (deque.Count < target && next < Items)
                {
                    deque.Push(new Item(next++));
                }
                int ops = rng.Next(1, 40);
                for (int k = 0; k < ops; k++)
                {
                    Item? item = rng.Next(3) == 0 ? deque.TrySteal() : deque.TryPop();
                    if (item is not null)
                    {
                        tally.Take(item);
                    }
                }
                if (rng.Next(8) == 0)
                {
                    while (deque.TryPop() is { } rest)
                    {
                        tally.Take(rest);
                    }
                }
            }
            while (deque.TryPop() is { } last)
            {
                tally.Take(last);
            }
            // Thieves may still hold the last items: wait until every pushed item is accounted for.
            TestUtil.SpinUntil(() => tally.Total == next, 10);
            Assert.Null(deque.TryPop()); // the empty pop clears what thieves took last
            Volatile.Write(ref stop, 1);
            Item?[] array = Array(deque);
            for (int i = 0; i < array.Length; i++)
            {
                Assert.True(array[i] is null, $"slot {i} of the empty deque still holds item {array[i]?.Id}");
            }
            Assert.Equal(next, tally.Total);
        }, "deque owner");
        try
        {
            await TestUtil.WithTimeout(owner, TestUtil.StressTimeout(30)); // the owner runs 4 s, or 60 s under SPINDLE_STRESS
        }
        finally
        {
            Volatile.Write(ref stop, 1);
        }
        await TestUtil.WithTimeout(Task.WhenAll(thiefTasks), 10);
        Assert.Equal(0, tally.Duplicates);
        Assert.True(Interlocked.Read(ref stolen) > 0, "the thieves stole nothing");
    }
}

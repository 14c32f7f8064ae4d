using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Threading;

public class WorkStealingDequeTests
{
    /// <summary>An item of the deque tests: its id indexes a <see cref="TakenTally"/>.</summary>
    internal sealed class Item
    {
        public Item(int id) => Id = id;

        public int Id { get; }
    }

    /// <summary>Counts, from any thread, how often each item was taken: each must be taken exactly once.</summary>
    internal sealed class TakenTally
    {
        private readonly int[] _taken;
        private int _duplicates;
        private int _total;

        public TakenTally(int items) => _taken = new int[items];

        public int Total => Volatile.Read(ref _total);

        public int Duplicates => Volatile.Read(ref _duplicates);

        public int CountOf(int id) => Volatile.Read(ref _taken[id]);

        public void Take(Item item)
        {
            if (Interlocked.Increment(ref _taken[item.Id]) != 1)
            {
                Interlocked.Increment(ref _duplicates);
            }
            Interlocked.Increment(ref _total);
        }
    }

    private static Item[] MakeItems(int count)
    {
        var items = new Item[count];
        for (int i = 0; i < count; i++)
        {
            items[i] = new Item(i);
        }
        return items;
    }

    [Fact]
    public void TryPopAndTrySteal_Empty_ReturnNull()
    {
        var deque = new WorkStealingDeque<Item>();

        Assert.True(deque.IsEmpty);
        Assert.Equal(0, deque.Count);
        Assert.Null(deque.TryPop());
        Assert.Null(deque.TrySteal());
        Assert.True(deque.IsEmpty);
    }

    [Fact]
    public void TryPop_EveryItemIncludingTheLast_TheDequeKeepsNoReferenceToIt()
    {
        // A popped item must not stay reachable from the deque's array: a failed job kept alive there is not reported
        // as unobserved, and a pooled one not collected, until its slot is reused. The last item goes by the path that
        // races the thieves.
        var deque = new WorkStealingDeque<Item>();
        WeakReference[] popped = PushAndPopAll(deque, 3);
        GC.Collect();
        GC.WaitForPendingFinalizers();
        GC.Collect();
        foreach (WeakReference weak in popped)
        {
            Assert.False(weak.IsAlive, "the deque still holds an item it handed out");
        }
        GC.KeepAlive(deque);
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public void TrySteal_StolenItems_TheDequeLetsGoOfThemAtItsOwnersNextLook(bool ownerPushesAgain)
    {
        // A thief cannot clear the slot it stole from (the owner may have wrapped around and refilled it), so the owner
        // clears stolen slots when it next pushes or finds the deque empty. Without that a stolen failed job stayed
        // reachable, and unreported, until its slot was reused (found by a flaky job-fault test). 300 items: the array
        // grows, and the stolen range wraps it.
        var deque = new WorkStealingDeque<Item>();
        WeakReference[] stolen = PushAndStealAll(deque, 300);
        var kept = new Item(-1);
        if (ownerPushesAgain)
        {
            deque.Push(kept);
        }
        else
        {
            Assert.Null(deque.TryPop());
        }
        int alive = TestUtil.CountAliveAfterCollection(stolen);
        Assert.True(alive == 0, $"the deque still holds {alive} of the {stolen.Length} items thieves took");
        Assert.Same(ownerPushesAgain ? kept : null, deque.TryPop()); // a live item is never cleared
        GC.KeepAlive(deque);
    }

    [System.Runtime.CompilerServices.MethodImpl(System.Runtime.CompilerServices.MethodImplOptions.NoInlining)]
    private static WeakReference[] PushAndStealAll(WorkStealingDeque<Item> deque, int count)
    {
        var weak = new WeakReference[count];
        for (int i = 0; i < count; i++)
        {
            var item = new Item(i);
            weak[i] = new WeakReference(item);
            deque.Push(item);
            if (i % 3 == 2)
            {
                Assert.NotNull(deque.TrySteal()); // some taken while the owner still pushes: stolen ranges between pushes
            }
        }
        while (deque.TrySteal() is not null)
        {
        }
        Assert.True(deque.IsEmpty);
        return weak;
    }

    [System.Runtime.CompilerServices.MethodImpl(System.Runtime.CompilerServices.MethodImplOptions.NoInlining)]
    private static WeakReference[] PushAndPopAll(WorkStealingDeque<Item> deque, int count)
    {
        var weak = new WeakReference[count];
        for (int i = 0; i < count; i++)
        {
            var item = new Item(i);
            weak[i] = new WeakReference(item);
            deque.Push(item);
        }
        for (int i = 0; i < count; i++)
        {
            Assert.NotNull(deque.TryPop());
        }
        Assert.Null(deque.TryPop());
        return weak;
    }

    [Fact]
    public void TryPop_AfterPushesPastTheInitialCapacity_ReturnsItemsLastInFirstOut()
    {
        var deque = new WorkStealingDeque<Item>();
        Item[] items = MakeItems(200); // grows the 64-slot array twice

        foreach (Item item in items)
        {
            deque.Push(item);
        }

        Assert.Equal(200, deque.Count);
        for (int i = 199; i >= 0; i--)
        {
            Assert.Same(items[i], deque.TryPop());
        }
        Assert.Null(deque.TryPop());
        Assert.True(deque.IsEmpty);
    }

    [Fact]
    public void TrySteal_AfterPushes_ReturnsItemsFirstInFirstOut()
    {
        var deque = new WorkStealingDeque<Item>();
        Item[] items = MakeItems(150);

        foreach (Item item in items)
        {
            deque.Push(item);
        }

        for (int i = 0; i < 150; i++)
        {
            Assert.Same(items[i], deque.TrySteal());
        }
        Assert.Null(deque.TrySteal());
    }

    [Fact]
    public void PushPopSteal_Interleaved_TakesFromBothEndsAndWrapsAround()
    {
        var deque = new WorkStealingDeque<Item>();
        Item[] items = MakeItems(1000);
        int next = 0;
        int taken = 0;
        var seen = new bool[items.Length];

        // Keep the deque short while the indices run far past the array length, so slots are reused.
        while (next < items.Length)
        {
            deque.Push(items[next++]);
            deque.Push(items[next++]);
            Item? stolen = deque.TrySteal();
            Item? popped = deque.TryPop();
            Assert.NotNull(stolen);
            Assert.NotNull(popped);
            Assert.Same(items[next - 1], popped);
            seen[stolen!.Id] = true;
            seen[popped!.Id] = true;
            taken += 2;
        }

        Assert.True(deque.IsEmpty);
        Assert.Equal(items.Length, taken);
        Assert.All(seen, Assert.True);
    }

    [Fact]
    public async Task PushPopWithConcurrentThieves_EveryPushedItemTakenExactlyOnce()
    {
        const int Thieves = 3;
        const int PerRound = 200_000;
        int rounds = TestUtil.Stress(3);
        Item[] items = MakeItems(PerRound);

        await TestUtil.WithTimeout(Task.Run(async () =>
        {
            for (int round = 0; round < rounds; round++)
            {
                await RunRound(items, Thieves, round);
            }
        }), TestUtil.StressTimeout(60));
    }

    private static async Task RunRound(Item[] items, int thieves, int round)
    {
        var deque = new WorkStealingDeque<Item>();
        var tally = new TakenTally(items.Length);
        long stolenCount = 0;
        int stop = 0;

        var thiefTasks = new Task[thieves];
        for (int t = 0; t < thieves; t++)
        {
            thiefTasks[t] = TestUtil.RunOnThread(() =>
            {
                var spin = default(SpinWait);
                while (tally.Total < items.Length && Volatile.Read(ref stop) == 0)
                {
                    Item? item = deque.TrySteal();
                    if (item is null)
                    {
                        spin.SpinOnce(sleep1Threshold: -1);
                        continue;
                    }
                    Interlocked.Increment(ref stolenCount);
                    tally.Take(item);
                }
            }, "thief " + t);
        }

        Task owner = TestUtil.RunOnThread(() =>
        {
            // Owner: pushes everything, popping now and then, with bursts long enough to grow the array while
            // thieves steal; then pops until the deque is empty, racing the thieves for the last items.
            var rng = new Random(round);
            int i = 0;
            // Start with a batch and wait for the thieves to be at work, so the rest really runs concurrently.
            while (i < 1000)
            {
                deque.Push(items[i++]);
            }
            TestUtil.SpinUntil(() => Interlocked.Read(ref stolenCount) > 0);
            while (i < items.Length)
            {
                int burst = rng.Next(10) == 0 ? rng.Next(500, 3000) : rng.Next(1, 20);
                for (int k = 0; k < burst && i < items.Length; k++)
                {
                    deque.Push(items[i++]);
                }
                int pops = rng.Next(0, burst + 1);
                for (int k = 0; k < pops; k++)
                {
                    Item? item = deque.TryPop();
                    if (item is null)
                    {
                        break;
                    }
                    tally.Take(item);
                }
            }
            Item? rest;
            while ((rest = deque.TryPop()) is not null)
            {
                tally.Take(rest);
            }
        }, "deque owner");

        try
        {
            await TestUtil.WithTimeout(owner);
            await TestUtil.WithTimeout(Task.WhenAll(thiefTasks));
        }
        finally
        {
            Volatile.Write(ref stop, 1);
        }

        Assert.Equal(0, tally.Duplicates);
        Assert.Equal(items.Length, tally.Total);
        Assert.All(items, item => Assert.Equal(1, tally.CountOf(item.Id)));
        Assert.True(Interlocked.Read(ref stolenCount) > 0, "the thieves stole nothing: the race did not happen");
        Assert.True(deque.IsEmpty);
    }
}

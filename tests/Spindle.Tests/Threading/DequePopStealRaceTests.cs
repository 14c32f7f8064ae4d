using System;
using System.Collections.Generic;
using System.Threading;

using SpindleLib.Tests.Sources;

namespace SpindleLib.Tests.Threading;

/// <summary>
/// The owner of a <see cref="WorkStealingDeque{T}"/> pops while a thief steals, the deque a few items long: the owner's
/// store of the lowered bottom must be seen by every thief before the owner reads top (a full fence, the exchange in
/// <see cref="WorkStealingDeque{T}.TryPop"/>). With a plain store there, x64 lets the owner's read of top pass its store:
/// the owner reads a top below the item it pops and takes it without racing for it, while a thief that still sees the
/// old bottom steals up to that item and takes it too (or finds its slot already cleared). One item is then taken twice,
/// and top passes bottom (mutation testing, mut52: W2). The stress test of <see cref="WorkStealingDequeTests"/> keeps its
/// deque long, and met that moment too seldom to fail. Here every round sets it up: three items, the owner popping and
/// the thief stealing at the same moment (<see cref="ContinuationRacer"/>), at offsets that sweep through the rounds, the
/// owner's store of bottom held back behind stores of its own (<see cref="ContinuationRacer.StoreToLines"/>). Run alone:
/// its two threads must run at once.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class DequePopStealRaceTests
{
    private const int Items = 3;

    /// <summary>
    /// Each round the owner pushes three items to one deque (its indices growing round by round), then pops until it is
    /// empty while the racing thread tries to steal three times. Each item is taken exactly once, every steal that
    /// succeeds returns an item, and the deque is empty afterwards, with nothing more to pop or steal.
    /// </summary>
    [Fact]
    public void OwnerPoppingWhileAThiefSteals_TakesEachItemOnce()
    {
        var deque = new WorkStealingDeque<WorkStealingDequeTests.Item>();
        var items = new WorkStealingDequeTests.Item[Items];
        for (int i = 0; i < Items; i++)
        {
            items[i] = new WorkStealingDequeTests.Item(i);
        }
        var taken = new int[Items];
        var popped = new List<WorkStealingDequeTests.Item>(Items);
        var stolen = new List<WorkStealingDequeTests.Item>(Items);
        // Written by the owner just before it pops, and by the thief after its steals: the pop's store of bottom reaches
        // the thief later, while its read of top goes ahead (ContinuationRacer.StoreToLines).
        long[][] lines = ContinuationRacer.NewLinePair();
        // Fewer rounds on a loaded machine (each round checks its outcome), never fewer than 200.
        var race = new RaceRounds("DequePopStealRaceTests", TestUtil.Stress(200_000)) { TimeCap = TimeSpan.FromSeconds(3), MinRounds = 200 };
        race.Run(round =>
        {
            popped.Clear();
            stolen.Clear();
            foreach (WorkStealingDequeTests.Item item in items)
            {
                deque.Push(item);
            }
            // The owner sets out 4-11 spins later than the racer's own sweep would have it: the thief, a steal ahead, meets its pops.
            int lead = 4 + ((round >> 4) & 7);
            (Exception? mine, Exception? theirs) = race.Racer.RunBothAtOnce(round, () =>
            {
                Thread.SpinWait(lead);
                ContinuationRacer.StoreToLines(lines[round & 1], round);
                while (deque.TryPop() is { } item)
                {
                    popped.Add(item);
                }
            }, () =>
            {
                for (int i = 0; i < Items; i++)
                {
                    if (deque.TrySteal() is { } item)
                    {
                        stolen.Add(item);
                    }
                }
                ContinuationRacer.StoreToLines(lines[(round & 1) ^ 1], round); // the owner's lines next round
            });
            // What the thief left (it lost a race with the owner for the last item, or came after the owner's pops).
            while (deque.TryPop() is { } rest)
            {
                popped.Add(rest);
            }
            Array.Clear(taken, 0, Items);
            popped.ForEach(item => taken[item.Id]++);
            stolen.ForEach(item => taken[item.Id]++);
            if (mine is not null || theirs is not null || Array.Exists(taken, count => count != 1) || !deque.IsEmpty || deque.TrySteal() is not null)
            {
                // A Debug build's assert that a won steal found an item comes here as the thief's exception.
                race.Fail($"items taken [{string.Join(", ", taken)}] times (popped {popped.Count}, stolen {stolen.Count}), {deque.Count} left"
                    + (mine is null ? "" : $", the owner threw {mine.Message}") + (theirs is null ? "" : $", the thief threw {theirs.Message}"));
                deque = new WorkStealingDeque<WorkStealingDequeTests.Item>(); // top may have passed bottom: start over
            }
        });
        race.AssertNone($"{race.Failures.Count} of {race.Ran} rounds took an item other than once");
    }
}

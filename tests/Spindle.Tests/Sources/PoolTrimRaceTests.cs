using System;
using System.Reflection;

namespace SpindleLib.Tests.Sources;

/// <summary>
/// A pool's trim racing a give-back of the same type, raced by two threads through <see cref="ContinuationRacer"/>: this
/// thread's return past its own stack's limit gives a chunk back to the shared stack (which holds a chunk already) while
/// the racing thread trims the type's pool. Either the trim comes first (the shared stack then holds the chunk given back)
/// or the give-back does (the trim empties it), and the shared stack's count matches the objects it holds either way: the
/// trim takes the shared stack's gate. With the trim's gate take and release removed (mutation testing mut53c, mutant O1)
/// its stores fell between the give-back's, and the count no longer matched the objects. The objects are counted by
/// renting them all on this thread. Run alone: its two threads must run at once.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class PoolTrimRaceTests
{
    private sealed class TrimRaceNode : IPoolNode<TrimRaceNode>
    {
        private TrimRaceNode? _next;

        public ref TrimRaceNode? Next => ref _next;
    }

    [Fact]
    public void ATrimRacingAGiveBack_LeavesTheSharedStacksCountMatchingItsObjects()
    {
        // The type's own trim (SpindlePool.Trim trims every type, and the calling thread's stacks of each).
        var trim = (Action)Delegate.CreateDelegate(typeof(Action), typeof(ObjectPool<TrimRaceNode>).GetMethod("Trim", BindingFlags.NonPublic | BindingFlags.Static)!);
        int localMax = ObjectPool<TrimRaceNode>.LocalMax;
        Drain();
        // A failing round stops the run: the pool's state is not to be trusted for the next round.
        var race = new RaceRounds("PoolTrimRaceTests", TestUtil.Stress(Spinning.Helps ? 20_000 : 1_000)) { MaxFailures = 1, TimeCap = TimeSpan.FromSeconds(5) };
        race.Run(round =>
        {
            // This thread's stack full, and a chunk in the shared stack (given back by the first fill).
            while (ObjectPool<TrimRaceNode>.Count == 0 || ObjectPool<TrimRaceNode>.LocalCount < localMax)
            {
                ObjectPool<TrimRaceNode>.Return(new TrimRaceNode());
            }
            (Exception? mine, Exception? theirs) = race.Racer.RunBothAtOnce(round, () => ObjectPool<TrimRaceNode>.Return(new TrimRaceNode()), trim);
            Assert.Null(mine);
            Assert.Null(theirs);
            int counted = ObjectPool<TrimRaceNode>.Count;
            int local = ObjectPool<TrimRaceNode>.LocalCount;
            int held;
            try
            {
                held = Drain() - local;
            }
            catch (NullReferenceException)
            {
                race.Fail($"the shared stack counted {counted}, and a rent walked off the end of its objects");
                return;
            }
            if (held != counted)
            {
                race.Fail($"the shared stack counted {counted} but held {held}");
                return; // this thread's stack took the count the shared stack had: its own is off too
            }
        });
        trim();
        race.AssertNone("a trim racing a give-back");
    }

    /// <summary>Rents every object this thread's stack and the shared stack hold, and returns how many.</summary>
    private static int Drain()
    {
        int rented = 0;
        while (ObjectPool<TrimRaceNode>.TryRent() is not null)
        {
            rented++;
        }
        return rented;
    }
}

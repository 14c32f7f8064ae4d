using System;
using System.Threading;

namespace SpindleLib.Tests.Frames;

/// <summary>
/// In steady state a frame allocates nothing, whatever the number of waiting tasks: measured on the loop thread (the
/// test's) with <see cref="GC.GetAllocatedBytesForCurrentThread"/>. Run alone, so that the JIT's tier-up is not held
/// back by other tests (tier-0 code can box where optimized code does not).
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class FrameAllocationTests
{
    private sealed class Stop
    {
        public bool Requested;
    }

    private static async SpindleTask NextFrameLoop(FrameLoop loop, int[] counts, int index, Stop stop)
    {
        while (!stop.Requested)
        {
            await loop.NextFrame();
            counts[index]++;
        }
    }

    [Fact]
    public void FiftyThousandTasks_HundredFrames_AllocateNothingAfterWarmUp()
    {
        const int Tasks = 50_000;
        const int Frames = 100;
        FrameLoop loop = FrameUtil.NewBoundLoop();
        var counts = new int[Tasks];
        var stop = new Stop();
        for (int i = 0; i < Tasks; i++)
        {
            NextFrameLoop(loop, counts, i, stop).Forget();
        }

        // Warm-up, then runs of 100 frames until one allocates nothing (see TestUtil.AssertSteadyStateAllocatesNothing).
        TestUtil.AssertSteadyStateAllocatesNothing(_ => loop.RunFrame(), Frames);

        int frames = counts[0];
        Assert.True(frames >= 3 * Frames);
        foreach (int c in counts)
        {
            Assert.Equal(frames, c); // every task resumed in every frame
        }
        stop.Requested = true;
        loop.RunFrame();
        Assert.Equal(0, loop.QueuedCount);
    }

    /// <summary>An entity whose behaviour cycles through every kind of frame-loop await, all with one token.</summary>
    private sealed class Entity
    {
        public Entity(FrameLoop loop) => Loop = loop;

        public FrameLoop Loop { get; }

        public long ReadyAt;
        public int Cycles;
    }

    private static async SpindleTask Behave(FrameLoop loop, Entity e, Stop stop, CancellationToken token)
    {
        while (!stop.Requested)
        {
            await loop.Yield(loop.EarlyUpdate, token);
            await loop.NextFrame(token);
            await loop.Yield(loop.LateUpdate);
            await loop.DelayFrame(3, token);
            await loop.Delay(TimeSpan.FromMilliseconds(25), token);
            await loop.Delay(TimeSpan.FromMilliseconds(15), FrameTimeKind.Unscaled, loop.FixedUpdate, token);
            e.ReadyAt = loop.FrameCount + 2;
            await loop.WaitUntil(e, static x => x.Loop.FrameCount >= x.ReadyAt, token);
            await loop.WaitWhile((loop, e), static s => s.loop.FrameCount < s.e.ReadyAt + 1, loop.LateUpdate, token); // a value-type state: no box
            await loop.SwitchTo(token); // on the loop already: continues at once
            await SpindleTask.WhenAll(loop.DelayFrame(2, token), loop.NextFrame().AsSpindleTask());
            await SpindleTask.WhenAny(loop.DelayFrame(1, token), loop.Delay(TimeSpan.FromSeconds(1), token));
            e.Cycles++;
        }
    }

    [Fact]
    public void EveryKindOfAwait_WithTokens_ManyTasks_AllocateNothingAfterWarmUp()
    {
        // These awaits use pooled objects (waiters, timer nodes, combinators). Each frame returns some to their pools and
        // rents others; with 2,000 entities the objects in flight between frames fit the pools' default cap
        // (SpindlePool.MaxRetainedPerType, 4096 per type), beyond which returns go to the GC.
        const int Tasks = 2_000;
        FrameLoop loop = FrameUtil.NewBoundLoop();
        using var cts = new CancellationTokenSource();
        var stop = new Stop();
        var entities = new Entity[Tasks];
        for (int i = 0; i < Tasks; i++)
        {
            entities[i] = new Entity(loop);
            Behave(loop, entities[i], stop, cts.Token).Forget();
        }

        AssertNoAllocationThenStop(loop, entities, 100, 5, stop, cts);
    }

    /// <summary>
    /// Checks that the loop's frames allocate nothing once warm (<see cref="TestUtil.AssertSteadyStateAllocatesNothing"/>,
    /// over <paramref name="measuredRuns"/> runs), that every entity went through at least <paramref name="minCycles"/>
    /// steps, and that stopping and cancelling them leaves nothing queued or pending on the loop.
    /// </summary>
    private static void AssertNoAllocationThenStop(FrameLoop loop, Entity[] entities, int measuredRuns, int minCycles, Stop stop, CancellationTokenSource cts)
    {
        TestUtil.AssertSteadyStateAllocatesNothing(_ => loop.RunFrame(), measuredRuns);
        Assert.All(entities, e => Assert.True(e.Cycles >= minCycles, "an entity went through only " + e.Cycles + " steps of its behaviour"));
        stop.Requested = true;
        cts.Cancel();
        loop.RunFrames(3);
        Assert.Equal(0, loop.QueuedCount);
        Assert.Equal(0, loop.PendingTimers);
    }

    /// <summary>A game entity's behaviour: each step a different kind of await, all with the entity's token.</summary>
    private static async SpindleTask MixedBehave(FrameLoop loop, FramePhase behave, Entity e, int id, Stop stop, CancellationToken token)
    {
        int step = 0;
        while (!stop.Requested)
        {
            switch (step++ % 4)
            {
                case 0:
                    await loop.NextFrame(behave, token);
                    break;
                case 1:
                    await loop.Delay(TimeSpan.FromMilliseconds(5 + id % 60), token);
                    break;
                case 2:
                    e.ReadyAt = loop.FrameCount + 1 + id % 5;
                    await loop.WaitUntil(e, static x => x.Loop.FrameCount >= x.ReadyAt, token);
                    break;
                default:
                    await loop.DelayFrame(1 + id % 3, token);
                    break;
            }
            e.Cycles++;
        }
    }

    [Fact]
    public void TwentyThousandEntities_MixingAwaitKinds_AllocateNothingAfterWarmUp_AtTheDefaultPoolCap()
    {
        // A game's frame (a user's review program): 20,000 entities, each moving through NextFrame, Delay, WaitUntil and
        // DelayFrame with its token. Each kind's resumes return one kind of pooled object and rent another (a Delay's
        // resume returns a phase waiter and a timer node, and rents a predicate waiter), so between the phases of a
        // frame, and from one frame to the next, thousands of one type wait in the pools while thousands of another are
        // in use: more than the shared stacks' default cap (4096 per type). The loop thread keeps them instead of giving
        // them to the GC, whatever the cap (FrameLoop's steps; ObjectPool.ReturnChunk).
        const int Tasks = 20_000;
        Assert.Equal(4096, SpindlePool.MaxRetainedPerType); // the default, which the program did not change
        FrameLoop loop = FrameUtil.NewBoundLoop();
        FramePhase behave = loop.AddPhaseAfter(loop.Update, "Behaviour");
        using var cts = new CancellationTokenSource();
        var stop = new Stop();
        var entities = new Entity[Tasks];
        for (int i = 0; i < Tasks; i++)
        {
            entities[i] = new Entity(loop);
            MixedBehave(loop, behave, entities[i], i, stop, cts.Token).Forget();
        }

        try
        {
            AssertNoAllocationThenStop(loop, entities, 30, 10, stop, cts);
        }
        finally
        {
            SpindlePool.Trim(); // this thread ran the loop: its own stacks hold the entities' objects
        }
    }
}

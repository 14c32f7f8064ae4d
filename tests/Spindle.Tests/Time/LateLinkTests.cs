using System;
using System.Diagnostics;
using System.Threading;
using System.Threading.Tasks;
using SpindleLib.Tests.Threading;

namespace SpindleLib.Tests.Time;

/// <summary>
/// A worker starting a delay reads the clock for its deadline (<c>TimerWheel.Start</c>), then links it into its own shard
/// (<c>WheelShard.AddOwned</c>), taking the shard back from a rescuer if it had lent it for an item. A rescuer's pass in
/// between (the worker preempted, or waiting for the rescuer) moves the shard's time to its own, later reading of the
/// clock, past that deadline. Linked at its deadline, behind the shard's time, the timer sat in a slot a pass takes for one
/// a whole level ahead: a Debug build failed the assert "only the top level wraps" (found beside two CPU hogs in
/// <c>TimerStormFairnessTests</c>, section 36), a Release build fired it 64 ms or about 4 s late. These tests force the
/// window with a Debug hook (<c>TimerWheel.TestHookBeforeAddOwned</c>) instead of waiting for a preemption.
/// </summary>
[Collection(SequentialCollection.Name)]
public class LateLinkTests
{
    /// <summary>
    /// The fix's claim at every level, on a shard driven by the test's thread alone (its owner, with explicit ticks): a
    /// timer whose deadline (1) is behind the shard's time (moved on by a pass, as a rescuer's pass moves it, by
    /// <paramref name="gap"/>) is linked at that time, in the current fine slot, whichever level its own deadline would
    /// have taken; the shard's next expiration is that time, and the pass at that time fires it (a timer due later, also
    /// in the shard, stays). Linked at its own deadline, the next expiration was a whole rotation of that level later (and a
    /// Debug build failed the assert "only the top level wraps").
    /// </summary>
    [Theory]
    [InlineData(1L, 0)]
    [InlineData(100L, 1)]
    [InlineData(5_000L, 2)]
    [InlineData(300_000L, 3)]
    [InlineData(20_000_000L, 4)]
    [InlineData(2_000_000_000L, 5)]
    public void ADeadlineBehindTheShardsTime_IsLinkedAtThatTime_AndFiresOnTheNextPass_AtEveryLevel(long gap, int level)
    {
        using var wheel = new TimerWheel(new ManualClock());
        var shard = new WheelShard(wheel, dispatch: false, worker: true);
        const long Start = 0;
        const long Deadline = Start + 1;
        long passedTo = Deadline + gap;
        Assert.Equal(level, WheelShard.LevelFor(passedTo, Deadline));

        TimerNode later = TimerNode.Rent(wheel);
        var laterTask = new SpindleTask(later, later.Version);
        later.Deadline = passedTo + 1_000;
        shard.AddOwned(later, Start);
        shard.DrainInboxes(passedTo); // the pass that overtook the deadline (a rescuer's, in the race)
        Assert.Equal(passedTo, shard.Elapsed);

        TimerNode node = TimerNode.Rent(wheel);
        var task = new SpindleTask(node, node.Version);
        node.Deadline = Deadline;
        shard.AddOwned(node, Start); // the clock read before that pass
        Assert.False(task.IsCompleted);
        Assert.Equal(passedTo, shard.NextDeadline());
        shard.DrainInboxes(passedTo);
        Assert.True(task.IsCompleted, "the timer did not fire on the pass at the shard's time");
        Assert.False(laterTask.IsCompleted);
        task.GetAwaiter().GetResult();
        long next = shard.NextDeadline(); // the later timer's slot: a coarse one starts at or before its deadline
        Assert.True(next > passedTo && next <= passedTo + 1_000, $"the next expiration is {next}, after the pass at {passedTo}");
        shard.CancelEverything();
        Assert.Throws<OperationCanceledException>(() => laterTask.GetAwaiter().GetResult());
    }

#if DEBUG
    /// <summary>
    /// In the hook, the owner starts a second delay (linked first, so the shard is lent with it for the item), and waits,
    /// without polling its timers, until an idle worker's rescue has fired it: that pass moved the shard's time past the
    /// first delay's deadline (checked). The first delay must then fire on the next pass: before a third, due 30 ms later,
    /// and not before its own deadline. <paramref name="acrossABlock"/> starts the first delay near the end of a 64 ms block
    /// of the clock, so that the rescue's time falls in the next block and the stale deadline differs from it at level 1
    /// (4 s late in a Release build before the fix); otherwise near a block's start, at level 0 (64 ms late).
    /// </summary>
    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task ADelayWhoseDeadlineARescuePassedBeforeItsLink_FiresOnTheNextPass_BeforeALaterOne(bool acrossABlock)
    {
        if (!await WorkerShardRescueTests.LeaveWorkersEachWithAShard())
        {
            return; // the rescuer is another worker (SPINDLE_WORKERS=1 runs have none)
        }
        TimerWheel wheel = TimerWheel.Default;
        using var rescued = new ManualResetEventSlim();
        var firstFired = new TaskCompletionSource<long>(TaskCreationOptions.RunContinuationsAsynchronously);
        var laterFired = new TaskCompletionSource<long>(TaskCreationOptions.RunContinuationsAsynchronously);
        long order = 0;
        int ownerThread = 0;
        int armed = 0;
        long deadline = 0;
        long elapsedAtLink = 0;
        string? problem = null;
        double waited = 0;

        TimerWheel.TestHookBeforeAddOwned = (shard, node) =>
        {
            if (Environment.CurrentManagedThreadId != Volatile.Read(ref ownerThread) || Interlocked.Exchange(ref armed, 0) == 0)
            {
                return; // another delay, or the one started below (its own Start comes here too)
            }
            Volatile.Write(ref deadline, node.Deadline);
            // Linked at once (the hook is disarmed): the shard, lent for this item from now on, holds it, and an idle worker
            // rescues it when due, its pass moving the shard's time to the clock's reading then.
            Spindle.Delay(acrossABlock ? 8 : 3).ContinueWithForTest(rescued.Set);
            // The owner waits as a preempted thread would: without polling its timers.
            if (!rescued.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)))
            {
                problem = "the second delay was not rescued while its worker waited in the item";
            }
            // The rescue's pass set the time before it queued the continuation that set the event.
            Volatile.Write(ref elapsedAtLink, shard.Elapsed);
        };
        try
        {
            SpindleTask item = Spindle.Run(() =>
            {
                Volatile.Write(ref ownerThread, Environment.CurrentManagedThreadId);
                // Where in the clock's 64 ms block the first delay starts (see the summary); the spin is bounded by a block.
                int at = acrossABlock ? 60 : 2;
                SpinWait.SpinUntil(() => wheel.NowTick() % TimerWheel.SlotsPerLevel == at, 1000);
                Volatile.Write(ref armed, 1);
                long start = Stopwatch.GetTimestamp();
                Spindle.Delay(1).ContinueWithForTest(() =>
                {
                    waited = Stopwatch.GetElapsedTime(start).TotalMilliseconds;
                    firstFired.SetResult(Interlocked.Increment(ref order));
                });
                Spindle.Delay(30).ContinueWithForTest(() => laterFired.SetResult(Interlocked.Increment(ref order)));
            });
            await TestUtil.WithTimeout(item.AsTask());
            long first = await TestUtil.WithTimeout(firstFired.Task);
            long later = await TestUtil.WithTimeout(laterFired.Task);

            Assert.Null(problem);
            long d = Volatile.Read(ref deadline);
            long e = Volatile.Read(ref elapsedAtLink);
            Assert.True(e > d, $"the window was not forced: the shard's time {e} at the link, the deadline {d}");
            // The second delay is due in the next block (at least 8 ms after the 60th of 64), so the rescue's time is too:
            // linked at its own deadline, the first would have gone to level 1 or above.
            Assert.True(!acrossABlock || WheelShard.LevelFor(e, d) >= 1, $"the case meant to cross a 64 ms block did not: {d} and {e}");
            Assert.True(first < later,
                $"a delay whose deadline ({d}) a rescue's pass had passed (to {e}, level {WheelShard.LevelFor(e, d)} apart) before its link fired after one due 30 ms after it");
            Assert.True(waited >= 1, $"the 1 ms delay fired after {waited:F3} ms");
        }
        finally
        {
            TimerWheel.TestHookBeforeAddOwned = null;
        }
        TestUtil.SpinUntil(() => wheel.PendingCount == 0);
    }
#endif
}

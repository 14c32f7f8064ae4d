using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Time;

/// <summary>
/// A worker that ends a timer of its own shard (a timeout whose task won, a delay whose token it cancels, a delay that
/// loses a WhenAny) takes it out of the wheel at once (<c>WheelShard.TryUnlinkAsOwner</c>), where it used to push it to
/// the shard's cancel inbox for its next pass. Real workers, <see cref="TimerWheel.Default"/>: the timers go into the
/// worker's own shard.
/// </summary>
[Collection(SequentialCollection.Name)]
public class OwnerCancelTests
{
    private static readonly TimeSpan Long = TimeSpan.FromSeconds(30);

    /// <summary>The calling worker's shard of the default wheel (it must have one: a delay was started on it).</summary>
    private static WheelShard OwnShard()
        => WorkerPool.Shared.GetOrAddCurrentWorkerTimers<int>(static _ => throw new InvalidOperationException("no shard yet"), 0) as WheelShard
            ?? throw new InvalidOperationException("not on a Spindle worker");

    public enum Ending
    {
        TimeoutsTaskWins,
        TokenCancelsADelay,
        ADelayLosesAWhenAny,
    }

    /// <summary>
    /// On the worker that owns the timer, and inside one item (so with no pass of the shard in between): the timer is out
    /// of the wheel, uncounted, and in no cancel inbox as soon as the call that ended it returns, and the awaiting code
    /// has its outcome.
    /// </summary>
    [Theory]
    [InlineData(Ending.TimeoutsTaskWins)]
    [InlineData(Ending.TokenCancelsADelay)]
    [InlineData(Ending.ADelayLosesAWhenAny)]
    public async Task ATimerEndedOnItsOwnWorker_LeavesTheWheelAtOnce(Ending ending)
    {
        // No timer left by an earlier test in any shard: one that fell due while the item below runs could be fired by a
        // rescuer meanwhile, and move the count.
        TestUtil.SpinUntil(() => TimerWheel.Default.PendingCount == 0, () => "the default wheel still holds timers: " + TimerWheel.Default.Describe());
        string seen = await TestUtil.WithTimeout(Spindle.Run(() =>
        {
            Spindle.Delay(1).GetAwaiter().GetResult(); // this worker's shard exists from here on
            WheelShard shard = OwnShard();
            long before = shard.PendingCount;
            Assert.Equal(0, before);
            var reply = new Promise<int>();
            using var cts = new CancellationTokenSource();
            string outcome;
            switch (ending)
            {
                case Ending.TimeoutsTaskWins:
                {
                    SpindleTask<int> ask = reply.Task.WithTimeout(Long);
                    Assert.Equal(before + 1, shard.PendingCount);
                    reply.SetResult(7);
                    outcome = "reply " + ask.GetAwaiter().GetResult();
                    break;
                }
                case Ending.TokenCancelsADelay:
                {
                    SpindleTask delay = Spindle.Delay(Long, cts.Token);
                    Assert.Equal(before + 1, shard.PendingCount);
                    cts.Cancel();
                    outcome = delay.SuppressCancellationThrow().GetAwaiter().GetResult() ? "canceled" : "fired";
                    break;
                }
                default:
                {
                    SpindleTask<int> any = SpindleTask.WhenAny(reply.Task.AsSpindleTask(), Spindle.Delay(Long));
                    Assert.Equal(before + 1, shard.PendingCount);
                    reply.SetResult(7);
                    outcome = "winner " + any.GetAwaiter().GetResult();
                    break;
                }
            }
            Assert.Equal(before, shard.PendingCount);
            Assert.DoesNotContain("cancel-inbox", shard.Describe(), StringComparison.Ordinal);
            // Emptied, the shard tells the idle workers that nothing is due: left at the ended timer's deadline, they woke
            // every look once it passed, and no pass of the owner's would correct it (a review found 2,300 idle spins a
            // second).
            Assert.Equal(Timeout.InfiniteTimeSpan, shard.UntilDue());
            return outcome;
        }));
        Assert.Equal(ending switch { Ending.TimeoutsTaskWins => "reply 7", Ending.TokenCancelsADelay => "canceled", _ => "winner 0" }, seen);
    }

#if DEBUG
    /// <summary>
    /// An owner that ends a timer while it has lent its shard (it runs an item) takes the shard back first, and waits for
    /// a rescuer that holds it (firing its overdue timers) to let go, as it does to start a timer: the two never touch
    /// the slots at once. The rescuer, finding the shard taken back after its claim, leaves it.
    /// </summary>
    [Fact]
    public async Task AnOwnerEndingATimerOfItsLentShard_WaitsForTheRescuerThatHoldsIt()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var shard = new WheelShard(wheel, dispatch: false, worker: true);
        TimerNode due = Add(shard, wheel, 1);
        TimerNode timeout = Add(shard, wheel, 1000);
        short timeoutUse = timeout.Version;
        int timeoutRan = 0;
        timeout.OnCompleted(_ => timeoutRan++, null, timeoutUse);
        int dueRan = 0;
        short dueUse = due.Version;
        due.OnCompleted(_ =>
        {
            due.GetResult(dueUse);
            dueRan++;
        }, null, due.Version);
        shard.EnterItem(); // lent, as its worker's are while it runs an item
        clock.Advance(TimeSpan.FromMilliseconds(2)); // the first timer is overdue: a rescuer may fire it
        using var claimed = new ManualResetEventSlim();
        using var letGo = new ManualResetEventSlim();
        int ownerReturned = 0;
        bool ownerTookItBack = false;
        WorkerTimers.TestHookRescuerClaimed = t =>
        {
            if (t != shard)
            {
                return;
            }
            claimed.Set();
            // Hold the claim while the owner ends its timer: it must take the shard back and then wait here.
            TestUtil.SpinUntil(() => !shard.IsLent || Volatile.Read(ref ownerReturned) != 0);
            ownerTookItBack = !shard.IsLent;
            Assert.Equal(0, Volatile.Read(ref ownerReturned)); // taken back, it waits for this claim to end
            letGo.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds));
        };
        try
        {
            Task rescuer = TestUtil.RunOnThread(() => Assert.False(shard.TryRescue(), "the rescuer fired the shard the owner took back"), "rescuer");
            Assert.True(claimed.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)));
            Task owner = TestUtil.RunOnThread(() =>
            {
                shard.OwnerThreadForTests = Environment.CurrentManagedThreadId;
                Assert.True(timeout.TryCancelQuietly());
                Volatile.Write(ref ownerReturned, 1);
            }, "owner");
            TestUtil.SpinUntil(() => !shard.IsLent || Volatile.Read(ref ownerReturned) != 0);
            letGo.Set();
            await TestUtil.WithTimeout(Task.WhenAll(rescuer, owner));
            Assert.True(ownerTookItBack, "the owner ended its timer without taking its lent shard back");
            Assert.True(shard.IsLent, "the owner, still in its item with a timer left, did not lend its shard again");
            Assert.Equal(1, shard.PendingCount); // the ended timer is out; the overdue one waits for the owner's pass
            shard.OwnerThreadForTests = Environment.CurrentManagedThreadId;
            shard.ExitItem();
            shard.Poll(out _);
            Assert.Equal(1, dueRan);
            Assert.Equal(0, timeoutRan);
            Assert.Equal(0, shard.PendingCount);
        }
        finally
        {
            WorkerTimers.TestHookRescuerClaimed = null;
            letGo.Set();
        }
    }

    private static TimerNode Add(WheelShard shard, TimerWheel wheel, long deadlineTick)
    {
        TimerNode node = TimerNode.Rent(wheel);
        node.Deadline = deadlineTick;
        shard.AddOwned(node, wheel.NowTick());
        return node;
    }
#endif

    /// <summary>
    /// Many async loops on the workers, each round one of: a timeout whose reply comes at once on the same thread, or
    /// from another worker, or never (the timeout fires); a delay whose token the loop cancels itself; a WhenAny a reply
    /// wins over a delay; a short delay that fires; and a round that starts short delays and long timeouts, then computes
    /// past the delays' deadlines while it ends the timeouts (its shard lent, so other workers fire the delays meanwhile,
    /// and each end first takes the shard back from them). Every round has exactly one outcome, each delay fires once, no
    /// ended timer fires, and the wheel's count comes back to where it started.
    /// </summary>
    [Fact]
    public async Task OwnersEndingTimersWhileOthersFireAndRescue_LoseNothingAndRunNothingTwice()
    {
        await TestUtil.LeaveSpindleWorkers();
        long before = TimerWheel.Default.PendingCount;
        int loops = Spindle.WorkerCount * 4;
        int rounds = TestUtil.Stress(400);
        var outcomes = new int[loops * rounds];
        long delaysStarted = 0;
        long delaysFired = 0;
        long endedButFired = 0;

        async SpindleTask Loop(int loop)
        {
            var rng = new Random(loop);
            var reply = new Promise<int>();
            for (int round = 0; round < rounds; round++)
            {
                int index = loop * rounds + round;
                reply.Reset();
                switch (rng.Next(7))
                {
                    case 0:
                    {
                        SpindleTask<int> ask = reply.Task.WithTimeout(Long);
                        reply.SetResult(index);
                        Assert.Equal(index, await ask);
                        break;
                    }
                    case 1:
                    {
                        SpindleTask<int> ask = reply.Task.WithTimeout(Long);
                        Spindle.Run(() => reply.SetResult(index)).Forget();
                        Assert.Equal(index, await ask);
                        break;
                    }
                    case 2:
                    {
                        (bool completed, int _) = await reply.Task.TryWithTimeout(TimeSpan.FromMilliseconds(1));
                        Assert.False(completed);
                        break;
                    }
                    case 3:
                    {
                        using var cts = new CancellationTokenSource();
                        SpindleTask delay = Spindle.Delay(Long, cts.Token);
                        cts.Cancel();
                        Assert.True(await delay.SuppressCancellationThrow());
                        break;
                    }
                    case 4:
                    {
                        SpindleTask<int> any = SpindleTask.WhenAny(reply.Task.AsSpindleTask(), Spindle.Delay(Long));
                        reply.SetResult(index);
                        Assert.Equal(0, await any);
                        break;
                    }
                    case 5:
                        await Spindle.Delay(1);
                        break;
                    default:
                        await Spindle.Yield(); // a fresh item, so its shard is lent while it computes below
                        ComputeWhileEndingTimeouts(rng);
                        break;
                }
                Interlocked.Increment(ref outcomes[index]);
            }
        }

        void ComputeWhileEndingTimeouts(Random rng)
        {
            var promises = new Promise<int>[4];
            var asks = new SpindleTask<int>[promises.Length];
            for (int i = 0; i < promises.Length; i++)
            {
                Interlocked.Increment(ref delaysStarted);
                Spindle.Delay(1).ContinueWithForTest(() => Interlocked.Increment(ref delaysFired));
                promises[i] = new Promise<int>();
                asks[i] = promises[i].Task.WithTimeout(Long);
            }
            // Past the delays' deadlines: idle workers rescue them from this worker's lent shard while it computes.
            var spin = System.Diagnostics.Stopwatch.StartNew();
            for (int i = 0; i < promises.Length; i++)
            {
                while (spin.Elapsed < TimeSpan.FromMilliseconds(1 + i))
                {
                    Thread.SpinWait(20);
                }
                promises[i].SetResult(rng.Next());
                if (!asks[i].IsCompletedSuccessfully)
                {
                    Interlocked.Increment(ref endedButFired);
                }
                asks[i].GetAwaiter().GetResult();
            }
        }

        var running = new Task[loops];
        for (int loop = 0; loop < loops; loop++)
        {
            int l = loop;
            running[loop] = TestUtil.AwaitAsync(Spindle.Run(() => Loop(l)));
        }
        await TestUtil.WithTimeout(Task.WhenAll(running), TestUtil.StressTimeout(120));

        Assert.All(outcomes, n => Assert.Equal(1, n));
        Assert.Equal(0, Volatile.Read(ref endedButFired));
        TestUtil.SpinUntil(() => Volatile.Read(ref delaysFired) == Volatile.Read(ref delaysStarted),
            () => $"{Volatile.Read(ref delaysFired)} of {Volatile.Read(ref delaysStarted)} delays fired");
        TestUtil.SpinUntil(() => TimerWheel.Default.PendingCount <= before,
            () => $"the default wheel holds {TimerWheel.Default.PendingCount} timers, {before} before: {TimerWheel.Default.Describe()}");
        Assert.Equal(Volatile.Read(ref delaysStarted), Volatile.Read(ref delaysFired)); // and none twice
    }
}

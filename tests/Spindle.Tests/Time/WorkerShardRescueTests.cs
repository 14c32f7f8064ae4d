using System;
using System.Collections.Concurrent;
using System.Diagnostics;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using SpindleLib.Tests.Threading;

namespace SpindleLib.Tests.Time;

/// <summary>
/// A worker lends its timer shard while it runs an item, and an idle worker fires the lent shard's overdue timers
/// (<c>WorkerTimers.TryRescue</c>): a delay started on a worker that then blocks, or runs a long computation, fires on
/// time instead of when that item ends. Real clock; the tests wait for conditions, never for a sleep.
/// </summary>
[Collection(SequentialCollection.Name)]
public class WorkerShardRescueTests
{
    /// <summary>Runs one item on every worker at once, each starting a delay there, so that every worker owns a shard.</summary>
    private static Task GiveEveryWorkerAShard()
        => TestUtil.RunOnEveryWorkerAtOnce(() => Spindle.Delay(1).GetAwaiter().GetResult()); // started here: this worker's shard

    /// <summary>
    /// Leaves Spindle's workers and gives each a shard (<see cref="GiveEveryWorkerAShard"/>); false, doing nothing, when
    /// there is one worker, which no other worker can rescue.
    /// </summary>
    internal static async Task<bool> LeaveWorkersEachWithAShard()
    {
        if (Spindle.WorkerCount < 2)
        {
            return false;
        }
        await TestUtil.LeaveSpindleWorkers();
        await GiveEveryWorkerAShard();
        return true;
    }

    /// <summary>True if every one of <paramref name="fired"/> is set within <paramref name="seconds"/>.</summary>
    internal static async Task<bool> AllSetWithin(TaskCompletionSource[] fired, int seconds)
    {
        Task all = Task.WhenAll(Array.ConvertAll(fired, f => f.Task));
        return await Task.WhenAny(all, Task.Delay(TimeSpan.FromSeconds(seconds))) == all;
    }

    [Fact]
    public async Task DelaysStartedByAnItemThatThenBlocks_FireWhileItBlocks_OnAnotherWorker()
    {
        if (!await LeaveWorkersEachWithAShard())
        {
            return; // the rescuer is another worker (SPINDLE_WORKERS=1 runs have none)
        }

        const int Waiters = 8;
        using var release = new ManualResetEventSlim();
        var fired = new TaskCompletionSource[Waiters];
        var early = new ConcurrentQueue<string>();
        int blockerThread = 0;
        int blocking = 0;
        int ranByTheBlockedWorker = 0;
        for (int i = 0; i < Waiters; i++)
        {
            fired[i] = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        }

        async SpindleTask Waiter(int i)
        {
            int ms = 20 + 5 * i;
            long start = Stopwatch.GetTimestamp();
            await Spindle.Delay(ms);
            double waited = Stopwatch.GetElapsedTime(start).TotalMilliseconds;
            if (waited < ms)
            {
                early.Enqueue($"a {ms} ms delay completed after {waited:F3} ms");
            }
            // A delay that fell due before its await looked (a preempted thread) resumes inline, on the blocker's thread,
            // before it blocks; once it blocks, the blocked worker runs none of them.
            if (Environment.CurrentManagedThreadId == Volatile.Read(ref blockerThread) && Volatile.Read(ref blocking) == 1)
            {
                Interlocked.Increment(ref ranByTheBlockedWorker);
            }
            fired[i].SetResult();
        }

        SpindleTask blocker = Spindle.Run(() =>
        {
            Volatile.Write(ref blockerThread, Environment.CurrentManagedThreadId);
            for (int i = 0; i < Waiters; i++)
            {
                Waiter(i).Forget(); // each delay goes into this worker's own shard
            }
            // A long item: a blocking call that returns only once the delays have fired (or the test gives up).
            Volatile.Write(ref blocking, 1);
            release.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds));
        });
        try
        {
            Assert.True(await AllSetWithin(fired, TestUtil.DefaultTimeoutSeconds),
                $"the delays of a worker blocked in an item did not fire while it blocked; {TimerWheel.Default.Describe()}; {WorkerPool.Shared.Describe()}");
            Assert.False(release.IsSet);
            Assert.Empty(early);
            Assert.Equal(0, Volatile.Read(ref ranByTheBlockedWorker));
        }
        finally
        {
            release.Set();
        }
        await TestUtil.WithTimeout(blocker);
        TestUtil.SpinUntil(() => TimerWheel.Default.PendingCount == 0);
    }

    /// <summary>
    /// As <see cref="DelaysStartedByAnItemThatThenBlocks_FireWhileItBlocks_OnAnotherWorker"/>, with no worker ever idle:
    /// every other worker always has an item to run (loops of <c>await Spindle.Yield()</c>, as a saturated server's
    /// workers always have work). Only an idle worker rescued the blocked worker's timers, so they waited for the item to
    /// end, however long: a user's latency program (200,000 delay loops and a chain of 1-5 ms computations on the pool)
    /// saw a 5 s delay, and its reduction held 100 delays of 10 ms for 3 s. A busy worker now rescues them too, between
    /// its items, every TimerPollInterval items, as it polls its own.
    /// </summary>
    [Fact]
    public async Task DelaysOfABlockedWorker_FireWhileItBlocks_EvenWithNoWorkerIdle()
    {
        if (!await LeaveWorkersEachWithAShard())
        {
            return; // the rescuer is another worker (SPINDLE_WORKERS=1 runs have none)
        }

        const int Waiters = 8;
        using var release = new ManualResetEventSlim();
        var fired = new TaskCompletionSource[Waiters];
        for (int i = 0; i < Waiters; i++)
        {
            fired[i] = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        }
        int stop = 0;
        int busyLoopsRunning = 0;

        async SpindleTask Busy()
        {
            await Spindle.SwitchToWorker();
            Interlocked.Increment(ref busyLoopsRunning);
            while (Volatile.Read(ref stop) == 0)
            {
                await Spindle.Yield(); // always an item queued: the worker running this loop is never idle
                Thread.SpinWait(200);
            }
            Interlocked.Decrement(ref busyLoopsRunning);
        }

        async SpindleTask Waiter(int i)
        {
            await Spindle.Delay(10 + i);
            fired[i].SetResult();
        }

        // One loop per worker: whichever worker the blocker takes, every other one has a loop to run, or steals one.
        for (int i = 0; i < Spindle.WorkerCount; i++)
        {
            Busy().Forget();
        }
        TestUtil.SpinUntil(() => Volatile.Read(ref busyLoopsRunning) == Spindle.WorkerCount);
        SpindleTask blocker = Spindle.Run(() =>
        {
            for (int i = 0; i < Waiters; i++)
            {
                Waiter(i).Forget(); // each delay goes into this worker's own shard
            }
            release.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds));
        });
        try
        {
            Assert.True(await AllSetWithin(fired, TestUtil.DefaultTimeoutSeconds - 5),
                $"with no worker idle, the delays of a worker blocked in an item did not fire while it blocked; {TimerWheel.Default.Describe()}; {WorkerPool.Shared.Describe()}");
            Assert.False(release.IsSet);
        }
        finally
        {
            release.Set();
            Volatile.Write(ref stop, 1);
        }
        await TestUtil.WithTimeout(blocker);
        TestUtil.SpinUntil(() => Volatile.Read(ref busyLoopsRunning) == 0);
        TestUtil.SpinUntil(() => TimerWheel.Default.PendingCount == 0);
    }

    /// <summary>
    /// As <see cref="DelaysOfABlockedWorker_FireWhileItBlocks_EvenWithNoWorkerIdle"/>, with every other worker inside a
    /// blocking wait of its own (<c>GetResult</c> on a pending task, on a worker), which helps: it runs queued work
    /// (<paramref name="helpersRunWork"/>: a yield loop started before the wait) or finds none. Neither is idle in its loop
    /// nor counts items there, so neither made the idle worker's nor the busy worker's look, and the blocked worker's
    /// delays waited for its item (found by the review of stop 38).
    /// </summary>
    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task DelaysOfABlockedWorker_FireWhileEveryOtherWorkerWaitsHelping(bool helpersRunWork)
    {
        if (!await LeaveWorkersEachWithAShard())
        {
            return; // the rescuer is another worker (SPINDLE_WORKERS=1 runs have none)
        }

        const int Waiters = 8;
        using var release = new ManualResetEventSlim();
        var helpersGo = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var fired = new TaskCompletionSource[Waiters];
        for (int i = 0; i < Waiters; i++)
        {
            fired[i] = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        }
        int roles = 0;
        int stop = 0;
        int helping = 0;

        async SpindleTask Waiter(int i)
        {
            await Spindle.Delay(10 + i);
            fired[i].SetResult();
        }

        async SpindleTask Busy()
        {
            while (Volatile.Read(ref stop) == 0)
            {
                await Spindle.Yield(); // queued to this worker, which runs it inside its wait
                Thread.SpinWait(200);
            }
        }

        async SpindleTask WaitForTheTest()
        {
            await helpersGo.Task;
        }

        // Every worker takes one item at once: the first becomes the blocked worker, the others wait helping.
        Task items = TestUtil.RunOnEveryWorkerAtOnce(() =>
        {
            if (Interlocked.Increment(ref roles) == 1)
            {
                for (int i = 0; i < Waiters; i++)
                {
                    Waiter(i).Forget(); // each delay goes into this worker's own shard
                }
                release.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)); // blocks, not helping
                return;
            }
            if (helpersRunWork)
            {
                Busy().Forget();
            }
            Interlocked.Increment(ref helping);
            WaitForTheTest().GetAwaiter().GetResult(); // a blocking wait on a worker: it helps until the task completes
            Interlocked.Decrement(ref helping);
        });
        try
        {
            Assert.True(await AllSetWithin(fired, TestUtil.DefaultTimeoutSeconds - 5),
                $"with every other worker in a helping wait ({Volatile.Read(ref helping)} of {Spindle.WorkerCount - 1}), the delays of a worker blocked in an item did not fire while it blocked; {TimerWheel.Default.Describe()}; {WorkerPool.Shared.Describe()}");
            Assert.False(release.IsSet);
            Assert.Equal(Spindle.WorkerCount - 1, Volatile.Read(ref helping));
        }
        finally
        {
            Volatile.Write(ref stop, 1);
            helpersGo.TrySetResult();
            release.Set();
        }
        await items;
        TestUtil.SpinUntil(() => TimerWheel.Default.PendingCount == 0);
    }

    [Fact]
    public async Task ALongComputationsDelays_FireDuringIt()
    {
        if (!await LeaveWorkersEachWithAShard())
        {
            return; // the rescuer is another worker (SPINDLE_WORKERS=1 runs have none)
        }

        var fired = new TaskCompletionSource<bool>(TaskCreationOptions.RunContinuationsAsynchronously);
        int stop = 0;
        SpindleTask<long> computation = Spindle.Run(() =>
        {
            long start = Stopwatch.GetTimestamp();
            Spindle.Delay(10).ContinueWithForTest(() => fired.TrySetResult(true));
            long spins = 0;
            // CPU-bound work that ends when the delay fired, or after the suite's bound.
            while (Volatile.Read(ref stop) == 0 && !fired.Task.IsCompleted
                   && Stopwatch.GetElapsedTime(start) < TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds))
            {
                spins++;
            }
            return spins;
        });
        try
        {
            Task first = await Task.WhenAny(fired.Task, Task.Delay(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)));
            Assert.True(first == fired.Task,
                $"the delay of a worker busy computing did not fire during the computation; {TimerWheel.Default.Describe()}; {WorkerPool.Shared.Describe()}");
        }
        finally
        {
            Volatile.Write(ref stop, 1);
        }
        await TestUtil.WithTimeout(computation);
    }

    /// <summary>
    /// More timers than one batch holds, due together on a worker blocked in an item, are fired by a rescuer: their
    /// continuations must run in the order the timers were started, as the owner runs them. Queued from the rescuer (a
    /// worker), each full batch went to its run-next slot and pushed the one before into its deque, so they ran newest
    /// batch first.
    /// </summary>
    [Fact]
    public async Task RescuedTimersDueTogether_RunInTheOrderTheyWereStarted_AcrossBatches()
    {
        if (!await LeaveWorkersEachWithAShard())
        {
            return; // the rescuer is another worker (SPINDLE_WORKERS=1 runs have none)
        }

        const int Count = 2 * TimerBatch.Capacity + 10; // three batches
        var order = new ConcurrentQueue<int>();
        using var all = new ManualResetEventSlim();
        int blockerThread = 0;
        var ranOn = new ConcurrentQueue<int>();
        SpindleTask blocker = Spindle.Run(() =>
        {
            blockerThread = Environment.CurrentManagedThreadId;
            for (int i = 0; i < Count; i++)
            {
                int index = i;
                Spindle.Delay(30).ContinueWithForTest(() =>
                {
                    ranOn.Enqueue(Environment.CurrentManagedThreadId);
                    order.Enqueue(index);
                    if (order.Count == Count)
                    {
                        all.Set();
                    }
                });
            }
            // Blocks (without helping) until every continuation ran: only a rescuer can fire them.
            all.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds));
        });
        await TestUtil.WithTimeout(blocker);
        Assert.True(all.IsSet, $"the timers of a blocked worker were not rescued; {TimerWheel.Default.Describe()}; {WorkerPool.Shared.Describe()}");
        Assert.All(ranOn, thread => Assert.NotEqual(blockerThread, thread));
        Assert.Equal(Enumerable.Range(0, Count), order.ToArray());
        TestUtil.SpinUntil(() => TimerWheel.Default.PendingCount == 0);
    }

#if DEBUG
    /// <summary>
    /// A worker's first timer, started by an item that then blocks: the shard the item creates must be lent like an
    /// existing one, or nothing can rescue it and the delay waits for the item (here, for ever: the item waits for it).
    /// </summary>
    [Fact]
    public async Task AWorkersFirstDelay_StartedByAnItemThatThenBlocks_FiresWhileItBlocks()
    {
        if (!await LeaveWorkersEachWithAShard())
        {
            return; // the rescuer is another worker (SPINDLE_WORKERS=1 runs have none)
        }
        TestUtil.SpinUntil(() => TimerWheel.Default.PendingCount == 0); // the forgotten shard must hold nothing

        // The worker forgets its timers in one item and hands the next to itself (its run-next slot): that item starts
        // on a worker with no timers, as a worker's first item that starts a delay does. Another worker may steal it:
        // then try again.
        bool tested = false;
        for (int attempt = 0; attempt < 20 && !tested; attempt++)
        {
            var fired = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
            bool firedInTime = false;
            var second = new TaskCompletionSource<bool>(TaskCreationOptions.RunContinuationsAsynchronously);
            await TestUtil.WithTimeout(Spindle.Run(() =>
            {
                int thread = Environment.CurrentManagedThreadId;
                WorkerPool.Shared.ForgetCurrentWorkerTimersForTests(); // as a worker that never started a timer
                Spindle.Run(() =>
                {
                    if (Environment.CurrentManagedThreadId != thread)
                    {
                        second.SetResult(false); // stolen: this worker still has its timers
                        return;
                    }
                    Spindle.Delay(20).ContinueWithForTest(() => fired.TrySetResult()); // creates this worker's shard
                    firedInTime = fired.Task.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)); // blocks, not helping
                    second.SetResult(true);
                }).Forget();
            }));
            tested = await TestUtil.WithTimeout(second.Task, 2 * TestUtil.DefaultTimeoutSeconds);
            if (tested)
            {
                Assert.True(firedInTime, $"a worker's first delay waited for the item that started it; {TimerWheel.Default.Describe()}; {WorkerPool.Shared.Describe()}");
            }
            TestUtil.SpinUntil(() => TimerWheel.Default.PendingCount == 0);
        }
        Assert.True(tested, "the second item never ran on the worker that forgot its timers");
    }
#endif

    /// <summary>
    /// The lending protocol alone, on a stand-in for a shard: an owner lends and takes back its timers in a tight loop,
    /// around an item (a fenced take-back) or around a timer's continuation in one of its passes (an unfenced one, the
    /// rescuer fencing for both), sometimes taking them back in the middle to touch them (a timer started there), and
    /// touches them only while they are its own; two rescuers race to fire them while they are lent. No pass of a rescuer
    /// may overlap an owner's touch, and the rescuers must get in under both kinds of lending.
    /// </summary>
    [Fact]
    public async Task AnOwnerAndTwoRescuers_NeverHoldTheTimersAtOnce()
    {
        var timers = new ProbeTimers();
        int rounds = TestUtil.Stress(200_000);
        int stop = 0;
        Task owner = TestUtil.RunOnThread(() =>
        {
            for (int r = 0; r < rounds; r++)
            {
                bool continuation = (r & 1) != 0;
                if (continuation)
                {
                    timers.LendAroundContinuation();
                }
                else
                {
                    timers.EnterItem();
                }
                Thread.SpinWait(r % 64); // the item or the continuation
                if (r % 3 == 0)
                {
                    timers.Reclaim(); // it starts a timer
                    timers.Touch();
                    timers.LendAgainForTests();
                    Thread.SpinWait(r % 16);
                }
                if (continuation)
                {
                    timers.EndContinuationForTests();
                }
                else
                {
                    timers.ExitItem();
                }
                timers.Touch(); // owner only, between items or continuations
            }
            Volatile.Write(ref stop, 1);
        }, "owner");
        Task[] rescuers = new Task[2];
        for (int i = 0; i < rescuers.Length; i++)
        {
            rescuers[i] = TestUtil.RunOnThread(() =>
            {
                while (Volatile.Read(ref stop) == 0)
                {
                    timers.TryRescue();
                }
            }, "rescuer");
        }
        await TestUtil.WithTimeout(Task.WhenAll(owner, Task.WhenAll(rescuers)), TestUtil.StressTimeout(120));
        Assert.Equal(0, timers.Overlaps);
        Assert.True(timers.Rescues > 0, "no rescuer ever got timers lent for an item");
        Assert.True(timers.ContinuationRescues > 0, "no rescuer ever got timers lent for a continuation");
        Assert.Equal(rounds + (rounds + 2) / 3, timers.OwnerTouches);
    }

#if DEBUG
    /// <summary>
    /// A rescuer that has claimed the timers when the owner takes them back: the owner's exchange is already visible, so
    /// the rescuer must leave them alone, and the owner must wait until the rescuer lets go before it goes on. Lent around a
    /// continuation, the owner takes them back with a plain store, and the rescuer's process-wide barrier must make it
    /// visible all the same.
    /// </summary>
    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task ARescuerThatClaimsAsTheOwnerTakesBack_LeavesTheTimers_AndTheOwnerWaitsForIt(bool aroundAContinuation)
    {
        var timers = new ProbeTimers();
        using var claimed = new ManualResetEventSlim();
        using var letGo = new ManualResetEventSlim();
        int ownerBack = 0;
        WorkerTimers.TestHookRescuerClaimed = t =>
        {
            if (t != timers)
            {
                return;
            }
            claimed.Set();
            // Hold the claim until the owner has taken its timers back (its exchange is done; it now waits for this thread).
            TestUtil.SpinUntil(() => !timers.IsLent);
            letGo.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds));
            Assert.Equal(0, Volatile.Read(ref ownerBack)); // the owner is still waiting
        };
        try
        {
            if (aroundAContinuation)
            {
                timers.LendAroundContinuation();
            }
            else
            {
                timers.Lend();
            }
            Task rescuer = TestUtil.RunOnThread(() => Assert.False(timers.TryRescue()), "rescuer");
            Assert.True(claimed.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)));
            Task owner = TestUtil.RunOnThread(() =>
            {
                if (aroundAContinuation)
                {
                    timers.EndContinuationForTests();
                }
                else
                {
                    timers.Reclaim();
                }
                Volatile.Write(ref ownerBack, 1);
                timers.Touch();
            }, "owner");
            TestUtil.SpinUntil(() => !timers.IsLent);
            Assert.False(owner.IsCompleted, "the owner took its timers back while a rescuer held them");
            letGo.Set();
            await TestUtil.WithTimeout(Task.WhenAll(rescuer, owner));
            Assert.Equal(0, timers.Rescues + timers.ContinuationRescues); // the rescuer saw them taken back after its claim
            Assert.Equal(0, timers.Overlaps);
        }
        finally
        {
            WorkerTimers.TestHookRescuerClaimed = null;
            letGo.Set();
        }
    }

    /// <summary>
    /// A rescue of timers lent around a continuation runs the process-wide barrier only where the owner takes them back
    /// with a plain store (.NET builds). The netstandard2.1 build's owner takes them back with the exchange, a full fence
    /// that the rescuer's CAS pairs with, so the barrier (a membarrier(2) system call or an inter-processor interrupt on
    /// every core, on each takeover) bought nothing there, and the runtimes that build serves are not known to have it.
    /// Found by the review of stop 37: the netstandard2.1 rescuer ran it all the same.
    /// </summary>
    [Fact]
    public void ARescueOfTimersLentAroundAContinuation_RunsTheProcessWideBarrier_OnlyWhereTheOwnerDoesNotFence()
    {
        var timers = new ProbeTimers();
        int barriers = 0;
        WorkerTimers.TestHookProcessWideBarrier = t =>
        {
            if (t == timers)
            {
                Interlocked.Increment(ref barriers);
            }
        };
        try
        {
            timers.LendAroundContinuation();
            Assert.True(timers.TryRescue());
            timers.EndContinuationForTests();
        }
        finally
        {
            WorkerTimers.TestHookProcessWideBarrier = null;
        }
        Assert.Equal(1, timers.ContinuationRescues);
#if SPINDLE_NETSTANDARD_BUILD
        Assert.Equal(0, barriers);
#else
        Assert.Equal(1, barriers);
#endif
    }
#endif

#if DEBUG
    /// <summary>
    /// A busy worker's look rescues only the timers of a worker held in one item since its previous look: lent for an
    /// item, with the same count of items begun as then (<c>WorkerPool.RescueOverdueTimers</c>). The look reads the two
    /// words one after the other; an owner that was between items at both looks and begins one between the two reads must
    /// not be taken for held (its timers rescued as it starts an item: the rescue of a worker merely busy, which the rule
    /// is there to avoid). A Debug hook begins the item in that window. Found by the review of stop 38: with the count read
    /// first, the look took the new item for the old one.
    /// </summary>
    [Fact]
    public async Task ABusyLook_DoesNotTakeAnOwnerThatBeginsAnItemDuringIt_ForHeld()
    {
        await TestUtil.LeaveSpindleWorkers();
        var pool = new WorkerPool(2, "busy look test");
        var timers = new ProbeTimers();
        using var release = new ManualResetEventSlim();
        using var inside = new ManualResetEventSlim();
        int stop = 0;
        int lookerThread = 0;
        int installed = 0;
        int looks = 0;
        int lastEntered = -1;
        int began = 0;
        int ownerInItem = 0;
        int ownerThread = 0;
        try
        {
            // The looker: a chain of tiny items, each queueing the next to its own worker, which looks every 64 of them. The
            // owner, parking, may take one from the looker's run-next slot: it sends it back through the injection queue.
            ActionItem? chain = null;
            chain = new ActionItem(() =>
            {
                if (Volatile.Read(ref stop) != 0)
                {
                    return;
                }
                if (Environment.CurrentManagedThreadId == Volatile.Read(ref ownerThread))
                {
                    pool.QueueInOrder(chain!);
                    return;
                }
                Volatile.Write(ref lookerThread, Environment.CurrentManagedThreadId);
                pool.Queue(chain!);
            });
            pool.Queue(chain);
            TestUtil.SpinUntil(() => Volatile.Read(ref lookerThread) != 0);

            // The owner: the other worker takes the stand-in as its timers (in an item: one item begun), then goes idle.
            ActionItem? install = null;
            install = new ActionItem(() =>
            {
                if (Environment.CurrentManagedThreadId == Volatile.Read(ref lookerThread))
                {
                    pool.QueueInOrder(install!); // the looker took it at a fair look: the other worker is to own the timers
                    return;
                }
                Volatile.Write(ref ownerThread, Environment.CurrentManagedThreadId);
                pool.GetOrAddCurrentWorkerTimers(static t => t, (WorkerTimers)timers);
                Volatile.Write(ref installed, 1);
            });
            pool.QueueInOrder(install);
            TestUtil.SpinUntil(() => Volatile.Read(ref installed) == 1);

            int rescuesBefore = 0;
            int rescuesByTheNextLook = -1;
            WorkerPool.TestHookBusyLookBetweenReads = (p, t) =>
            {
                if (p != pool || t != timers)
                {
                    return;
                }
                if (Volatile.Read(ref began) != 0)
                {
                    if (Volatile.Read(ref rescuesByTheNextLook) < 0)
                    {
                        // The look that began the item has decided (the next one, which may rescue rightly, decides below).
                        Volatile.Write(ref rescuesByTheNextLook, Volatile.Read(ref timers.Rescues) - rescuesBefore);
                    }
                    return;
                }
                looks++;
                int entered = timers.ItemsEntered;
                // At a look that follows one with the same count, the owner between items: it begins one now.
                if (entered == lastEntered && !timers.IsLentForItem)
                {
                    rescuesBefore = Volatile.Read(ref timers.Rescues);
                    Volatile.Write(ref began, 1);
                    pool.QueueInOrder(new ActionItem(() =>
                    {
                        inside.Set();
                        release.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds));
                    }));
                    // No assertion here, on a worker's loop: what it finds is checked by the test's thread.
                    Volatile.Write(ref ownerInItem, inside.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)) && timers.IsLentForItem ? 1 : 2);
                }
                lastEntered = entered;
            };
            TestUtil.SpinUntil(() => Volatile.Read(ref rescuesByTheNextLook) >= 0, () => $"{looks} looks, began {Volatile.Read(ref began)}; {pool.Describe()}");
            Assert.True(Volatile.Read(ref ownerInItem) == 1, "the owner should be in the item, its timers lent for it, when the look reads on");
            Assert.True(Volatile.Read(ref rescuesByTheNextLook) == 0,
                "a busy look rescued the timers of a worker that began its item during that look, as if held in it since the look before");
        }
        finally
        {
            WorkerPool.TestHookBusyLookBetweenReads = null;
            Volatile.Write(ref stop, 1);
            release.Set();
            pool.Dispose();
        }
    }
#endif

    /// <summary>A stand-in for a shard that counts its holders: always overdue, and a pass is a short critical section.</summary>
    private sealed class ProbeTimers : WorkerTimers
    {
        private int _inside;
        public int Overlaps;
        public int Rescues;
        public int ContinuationRescues;
        public int OwnerTouches;
        private int _inContinuation; // written by the owner before it lends around a continuation, cleared after it takes them back

        public void LendAroundContinuation()
        {
            Volatile.Write(ref _inContinuation, 1);
            LendForContinuation();
        }

        public void EndContinuationForTests()
        {
            EndContinuation();
            Volatile.Write(ref _inContinuation, 0);
        }

        public void LendAgainForTests() => LendAgain();

        public override bool HasPending => true;

        public override bool Poll(out TimeSpan untilNext)
        {
            untilNext = Timeout.InfiniteTimeSpan;
            return false;
        }

        protected override bool IsOverdue() => true;

        protected override bool PassRunsLong() => true;

        protected override bool Rescue()
        {
            Enter();
            if (Volatile.Read(ref _inContinuation) != 0)
            {
                ContinuationRescues++;
            }
            else
            {
                Rescues++;
            }
            Thread.SpinWait(20);
            Leave();
            return true;
        }

        public void Touch()
        {
            Enter();
            OwnerTouches++;
            Leave();
        }

        private void Enter()
        {
            if (Interlocked.Increment(ref _inside) != 1)
            {
                Interlocked.Increment(ref Overlaps);
            }
        }

        private void Leave() => Interlocked.Decrement(ref _inside);
    }
}

internal static class SpindleTaskTestExtensions
{
    /// <summary>Runs <paramref name="then"/> when <paramref name="task"/> completes (on whatever thread completes it).</summary>
    public static void ContinueWithForTest(this SpindleTask task, Action then)
    {
        async SpindleTask Continue(SpindleTask t)
        {
            await t;
            then();
        }
        Continue(task).Forget();
    }
}

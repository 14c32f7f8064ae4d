using System;
using System.Diagnostics;
using System.Linq;
using System.Runtime.CompilerServices;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Threading;

/// <summary>
/// The worker pool at its edges, on private pools (the shared pool is left alone): fairness
/// of the run-next slot against the other queues, parking against producers, contexts of stolen items, faults of items,
/// and the deque's one-item race.
/// </summary>
public class WorkerPoolEdgeTests
{
    /// <summary>The suite's default bound on a wait that only a starvation (or a hang) runs out.</summary>
    internal static readonly TimeSpan Bound = TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds);

    /// <summary>How long a loop that could starve an item runs at most: past <see cref="Bound"/>, so a starved item fails it.</summary>
    internal static readonly TimeSpan LoopLimit = TimeSpan.FromSeconds(2 * TestUtil.DefaultTimeoutSeconds);

    /// <summary>
    /// A chain that re-queues itself from its worker until <paramref name="stop"/> is set or its deadline passes: what
    /// <c>while (...) await Spindle.Yield();</c> does on a worker (the continuation goes to the worker's run-next slot).
    /// </summary>
    /// <summary>
    /// An item that re-queues itself from its worker (into the run-next slot, as a yield's continuation does) until
    /// <c>stop</c> holds or its limit runs out. The tests give it <see cref="LoopLimit"/> and wait <see cref="Bound"/> for
    /// the item it must not starve: a starved item runs only when the loop ends, so it still shows as the wait running
    /// out, and a loaded machine has the default bound to get the item through (the limits were 4-6 s and the waits 3 s).
    /// </summary>
    private sealed class YieldLoop : WorkItem
    {
        private readonly WorkerPool _pool;
        private readonly Func<bool> _stop;
        private readonly long _deadline;
        public int ThreadId;
        public long Rounds;
        public readonly ManualResetEventSlim Ended = new();

        public YieldLoop(WorkerPool pool, Func<bool> stop, TimeSpan limit)
        {
            _pool = pool;
            _stop = stop;
            _deadline = Stopwatch.GetTimestamp() + (long)(limit.TotalSeconds * Stopwatch.Frequency);
        }

        public override void Execute()
        {
            Volatile.Write(ref ThreadId, Environment.CurrentManagedThreadId);
            Interlocked.Increment(ref Rounds);
            if (_stop() || Stopwatch.GetTimestamp() > _deadline)
            {
                Ended.Set();
                return;
            }
            _pool.Queue(this); // from its worker: into that worker's run-next slot, as a yield's continuation
        }
    }

    [Theory]
    [InlineData(1)]
    [InlineData(2)]
    public void InjectedItem_Runs_WhileEveryWorkerRunsAYieldLoop(int workers)
    {
        // Each worker runs a cooperative loop that yields on every round (it goes back through the queues, as
        // Spindle.Yield does). Work queued from outside the pool must still get a turn: Go checks its global queue every
        // 61 ticks for exactly this; the .NET ThreadPool puts Task.Yield's continuation in its global queue.
        var pool = new WorkerPool(workers, "edge yield-loop worker");
        int injectedRan = 0;
        var loops = new YieldLoop[workers];
        try
        {
            for (int i = 0; i < workers; i++)
            {
                loops[i] = new YieldLoop(pool, () => Volatile.Read(ref injectedRan) != 0, LoopLimit);
                pool.Queue(loops[i]);
                YieldLoop loop = loops[i];
                TestUtil.SpinUntil(() => Volatile.Read(ref loop.Rounds) > 1000);
            }
            // One loop per worker, every worker busy (so it is without a fair look; a fair worker may well run two loops
            // by turns, which leaves nobody starving either).
            SpinWait.SpinUntil(() => workers == 1 || Volatile.Read(ref loops[0].ThreadId) != Volatile.Read(ref loops[1].ThreadId), 2000);

            using var ran = new ManualResetEventSlim();
            pool.Queue(new ActionItem(() =>
            {
                Volatile.Write(ref injectedRan, 1);
                ran.Set();
            }));
            bool ranInTime = ran.Wait(Bound);
            bool loopsStillRunning = !loops[0].Ended.IsSet;
            Assert.True(ranInTime,
                $"an item queued from outside waited {Bound.TotalSeconds} s in the injection queue while {workers} worker(s) ran yield loops ({pool.Describe()})");
            Assert.True(loopsStillRunning || ranInTime, "unreachable");
        }
        finally
        {
            Volatile.Write(ref injectedRan, 1);
            foreach (YieldLoop? loop in loops)
            {
                loop?.Ended.Wait(TimeSpan.FromSeconds(10));
            }
            pool.Dispose();
        }
    }

    [Fact]
    public void DisplacedItem_InTheDeque_Runs_WhileItsOwnerRunsAYieldLoop()
    {
        // A worker queues two items (the first is displaced into its deque by the second), and the second is a yield
        // loop that keeps refilling the run-next slot. With one worker nobody steals: the displaced item must still run.
        var pool = new WorkerPool(1, "edge deque-starve worker");
        int displacedRan = 0;
        YieldLoop? loop = null;
        try
        {
            using var ran = new ManualResetEventSlim();
            loop = new YieldLoop(pool, () => Volatile.Read(ref displacedRan) != 0, LoopLimit);
            YieldLoop theLoop = loop;
            pool.Queue(new ActionItem(() =>
            {
                pool.Queue(new ActionItem(() =>
                {
                    Volatile.Write(ref displacedRan, 1);
                    ran.Set();
                }));
                pool.Queue(theLoop); // displaces the item above into the deque
            }));
            Assert.True(ran.Wait(Bound),
                $"an item displaced into the deque waited {Bound.TotalSeconds} s behind a yield loop in the run-next slot ({pool.Describe()})");
        }
        finally
        {
            Volatile.Write(ref displacedRan, 1);
            loop?.Ended.Wait(TimeSpan.FromSeconds(10));
            pool.Dispose();
        }
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public void ItemBehindAYieldLoop_Runs_WhileTheOnlyWorkerHelpsInABlockingWait(bool displacedIntoTheDeque)
    {
        // The worker's loop takes its fair look every 61 items (decisions.md section 9); a worker blocked on a result helps
        // instead (TryRunOne), and must be as fair: here it waits for an item queued from outside (the injection queue) or
        // displaced into its own deque, while a yield loop it started keeps refilling its run-next slot. One worker, so
        // nobody else can take the item: a helper that always takes the run-next slot first waits until the loop ends.
        var pool = new WorkerPool(1, "edge helping yield-loop worker");
        int itemRan = 0;
        YieldLoop? loop = null;
        using var helping = new ManualResetEventSlim();
        using var finished = new ManualResetEventSlim();
        try
        {
            using var ran = new ManualResetEventSlim();
            var item = new ActionItem(() =>
            {
                Volatile.Write(ref itemRan, 1);
                ran.Set();
            });
            loop = new YieldLoop(pool, () => Volatile.Read(ref itemRan) != 0, LoopLimit);
            YieldLoop theLoop = loop;
            pool.Queue(new ActionItem(() =>
            {
                if (displacedIntoTheDeque)
                {
                    pool.Queue(item);
                }
                pool.Queue(theLoop); // into this worker's run-next slot (displacing the item into the deque)
                helping.Set();
                // Blocks as BlockingWait does on a worker: helps until what it waits for has happened (bounded here).
                long limit = Stopwatch.GetTimestamp() + (long)(LoopLimit.TotalSeconds * Stopwatch.Frequency);
                while (Volatile.Read(ref itemRan) == 0 && Stopwatch.GetTimestamp() < limit)
                {
                    if (!pool.TryRunOne())
                    {
                        Thread.Sleep(1);
                    }
                }
                finished.Set();
            }));
            Assert.True(helping.Wait(TimeSpan.FromSeconds(10)), "the helping item did not start");
            if (!displacedIntoTheDeque)
            {
                TestUtil.SpinUntil(() => Volatile.Read(ref theLoop.Rounds) > 1000); // the worker is deep in the loop
                pool.Queue(item); // from outside: the injection queue
            }
            Assert.True(ran.Wait(Bound),
                $"an item {(displacedIntoTheDeque ? "displaced into the deque" : "queued from outside")} waited {Bound.TotalSeconds} s while the only worker, " +
                $"blocked on it, helped with a yield loop ({Volatile.Read(ref theLoop.Rounds)} rounds; {pool.Describe()})");
        }
        finally
        {
            Volatile.Write(ref itemRan, 1);
            loop?.Ended.Wait(TimeSpan.FromSeconds(10));
            finished.Wait(TimeSpan.FromSeconds(15));
            pool.Dispose();
        }
    }

    [Fact]
    public void ItemQueuedFromOutside_AsTheOnlyWorkerGoesFromSpinningToParked_IsNeverMissed()
    {
        // One worker, so no other worker is running and the 10 ms look-again bound does not apply: a lost wake-up here
        // is a hang. The outside producer queues at a random moment of the worker's spin-then-park sequence.
        var pool = new WorkerPool(1, "edge park worker");
        try
        {
            var rng = new Random(4242);
            var clock = Stopwatch.StartNew();
            int rounds = 0;
            using var ran = new AutoResetEvent(false);
            TimeSpan length = TimeSpan.FromSeconds(TestUtil.IsStress ? 60 : 2);
            // Past the length until the sequence has been tried 50 times (fewer fit on a loaded machine), up to a cap.
            while ((clock.Elapsed < length || rounds < 50) && clock.Elapsed < length + TimeSpan.FromSeconds(30))
            {
                rounds++;
                pool.Queue(new ActionItem(() => ran.Set()));
                Assert.True(ran.WaitOne(TimeSpan.FromSeconds(10)), $"round {rounds}: the first item never ran ({pool.Describe()})");
                // Sometimes wait until parked, otherwise a random delay across the spin phase.
                if (rng.Next(4) == 0)
                {
                    SpinWait.SpinUntil(() => pool.IdleWorkers == 1, 100);
                }
                else
                {
                    long until = Stopwatch.GetTimestamp() + (long)(rng.NextDouble() * 2e-3 * Stopwatch.Frequency);
                    while (Stopwatch.GetTimestamp() < until)
                    {
                    }
                }
                pool.Queue(new ActionItem(() => ran.Set()));
                Assert.True(ran.WaitOne(TimeSpan.FromSeconds(10)), $"round {rounds}: an item queued from outside was not run within 10 s ({pool.Describe()})");
            }
            Assert.True(rounds >= 50, $"only {rounds} rounds in {clock.Elapsed.TotalSeconds:F0} s");
        }
        finally
        {
            pool.Dispose();
        }
    }

    private static readonly AsyncLocal<int> s_local = new();

    [Fact]
    public void StolenRunItems_SeeTheirQueuersContext_AndLeakNothingIntoTheWorkerThatStoleThem()
    {
        // The owner queues Spindle.Run items (run-next, then displaced into its deque) under an AsyncLocal value and then
        // blocks without helping, so the other worker must steal them. Each item sees the queuer's value and changes it;
        // context-free probes queued in between (flow suppressed: they run as they are, in the worker's own context) must
        // see the default, or a stolen item's change leaked into the thief.
        var pool = new WorkerPool(2, "edge context worker");
        try
        {
            const int Items = 200;
            int rounds = TestUtil.Stress(20);
            for (int round = 0; round < rounds; round++)
            {
                var seen = new int[Items];
                var probes = new int[Items];
                var ranOn = new int[Items];
                int owner = 0;
                int probesRun = 0;
                var tasks = new SpindleTask[Items];
                using var queued = new ManualResetEventSlim();
                using var release = new ManualResetEventSlim();
                pool.Queue(new ActionItem(() =>
                {
                    owner = Environment.CurrentManagedThreadId;
                    s_local.Value = 7;
                    for (int i = 0; i < Items; i++)
                    {
                        int id = i;
                        RunItem<VoidResult> item = RunItem<VoidResult>.Rent(new Action(() =>
                        {
                            seen[id] = s_local.Value;
                            ranOn[id] = Environment.CurrentManagedThreadId;
                            s_local.Value = 1000 + id;
                        }));
                        tasks[id] = new SpindleTask(item, item.Version);
                        pool.Queue(item);
                        ExecutionContext.SuppressFlow();
                        try
                        {
                            pool.Queue(new ActionItem(() =>
                            {
                                probes[id] = s_local.Value;
                                Interlocked.Increment(ref probesRun);
                            }));
                        }
                        finally
                        {
                            ExecutionContext.RestoreFlow();
                        }
                    }
                    queued.Set();
                    release.Wait(TimeSpan.FromSeconds(20)); // blocks without helping: the other worker steals everything
                }));
                Assert.True(queued.Wait(TimeSpan.FromSeconds(10)));
                foreach (SpindleTask task in tasks)
                {
                    // Blocks this test thread (never a worker: an await's continuation could run on the thief and hold it).
                    TestUtil.WithTimeout(task, 10).GetAwaiter().GetResult();
                }
                // The probes in the owner's slot and deque: the other worker takes those too.
                Assert.True(SpinWait.SpinUntil(() => Volatile.Read(ref probesRun) == Items, TimeSpan.FromSeconds(10)),
                    $"round {round}: only {Volatile.Read(ref probesRun)} of {Items} probes ran in 10 s ({pool.Describe()})");
                release.Set();
                for (int i = 0; i < Items; i++)
                {
                    Assert.True(seen[i] == 7, $"round {round}: item {i} saw {seen[i]}, not the queuer's 7");
                    Assert.NotEqual(owner, ranOn[i]);
                    Assert.True(probes[i] == 0, $"round {round}: context-free probe {i} saw {probes[i]}: a stolen item's AsyncLocal leaked into its thief");
                }
            }
        }
        finally
        {
            pool.Dispose();
        }
    }

    [Fact]
    public void ItemQueuedFromOutside_WhileTheOnlyWorkerHelpsInABlockingWait_IsRunByTheHelper()
    {
        // A worker blocked on a result keeps helping (TryRunOne): an item queued from outside while it waits, into the
        // injection queue, must be run by it (it is the only worker), or the wait could never end.
        var pool = new WorkerPool(1, "edge helping worker");
        try
        {
            for (int round = 0; round < 20; round++)
            {
                int done = 0;
                int helped = 0;
                using var waiting = new ManualResetEventSlim();
                using var finished = new ManualResetEventSlim();
                pool.Queue(new ActionItem(() =>
                {
                    waiting.Set();
                    long limit = Stopwatch.GetTimestamp() + 10 * Stopwatch.Frequency;
                    while (Volatile.Read(ref done) == 0 && Stopwatch.GetTimestamp() < limit)
                    {
                        if (pool.TryRunOne())
                        {
                            helped++;
                        }
                        else
                        {
                            Thread.Sleep(1); // as BlockingWait does on a worker
                        }
                    }
                    finished.Set();
                }));
                Assert.True(waiting.Wait(TimeSpan.FromSeconds(10)));
                Thread.Sleep(round % 3); // 0-2 ms: before, during and after the helper's sleep
                pool.Queue(new ActionItem(() => Volatile.Write(ref done, 1)));
                Assert.True(finished.Wait(TimeSpan.FromSeconds(15)));
                Assert.True(Volatile.Read(ref done) == 1, $"round {round}: the helping worker never ran the item it waited for");
                Assert.Equal(1, helped);
            }
        }
        finally
        {
            pool.Dispose();
        }
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public void ItemsRunByAHelpingWorker_SeeTheirOwnContext_AndLeaveTheWaitersAsItWas(bool waiterSuppressesFlow)
    {
        // A worker that helps while it waits (TryRunOne) runs other items inside its own code's context: a Spindle.Run
        // item queued under another AsyncLocal value must see that value, a context-free item must see the default, and
        // neither may change what the waiting code sees afterwards (nor lift its flow suppression).
        var pool = new WorkerPool(1, "edge helping-context worker");
        try
        {
            (int runItemSaw, int contextFreeSaw, int after, bool stillSuppressed, int ran) result = default;
            using var done = new ManualResetEventSlim();
            pool.Queue(new ActionItem(() =>
            {
                s_local.Value = 9;
                RunItem<VoidResult> item = RunItem<VoidResult>.Rent(new Action(() =>
                {
                    result.runItemSaw = s_local.Value;
                    s_local.Value = 99;
                }));
                var task = new SpindleTask(item, item.Version);
                pool.Queue(item); // run-next
                RunItem<VoidResult> contextFree;
                using (ExecutionContext.SuppressFlow())
                {
                    // Queued with flow suppressed: it captured no context, so it runs in the default one, wherever it runs.
                    contextFree = RunItem<VoidResult>.Rent(new Action(() =>
                    {
                        result.contextFreeSaw = s_local.Value;
                        s_local.Value = 13;
                    }));
                }
                var contextFreeTask = new SpindleTask(contextFree, contextFree.Version);
                pool.Queue(contextFree); // displaces the first into the deque
                s_local.Value = 5; // the waiting code's own context, different from the RunItem's
                AsyncFlowControl? flow = waiterSuppressesFlow ? ExecutionContext.SuppressFlow() : null;
                try
                {
                    while (pool.TryRunOne())
                    {
                        result.ran++;
                    }
                    result.after = s_local.Value;
                    result.stillSuppressed = ExecutionContext.IsFlowSuppressed();
                }
                finally
                {
                    flow?.Undo();
                }
                task.GetAwaiter().GetResult();
                contextFreeTask.GetAwaiter().GetResult();
                done.Set();
            }));
            Assert.True(done.Wait(TimeSpan.FromSeconds(10)));
            Assert.Equal(2, result.ran);
            Assert.Equal(9, result.runItemSaw);
            Assert.Equal(0, result.contextFreeSaw);
            Assert.Equal(5, result.after);
            Assert.Equal(waiterSuppressesFlow, result.stillSuppressed);
        }
        finally
        {
            pool.Dispose();
        }
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public void ContinuationItemsRunByAHelpingWorker_SeeTheDefaultContext_NotTheWaiters(bool timerBatch)
    {
        // A bare continuation queued to the workers carries no context of its own (a BCL method's continuation that
        // captured none under SuppressFlow, a raw UnsafeOnCompleted callback dispatched by a promise that runs its
        // continuations asynchronously, the expired timers' batch): on a worker's loop it runs in the default context,
        // as on the .NET ThreadPool. Run by a worker helping while it waits, it must not see the waiting code's values
        // either, as a context-free Spindle.Run item does not (ItemsRunByAHelpingWorker_SeeTheirOwnContext_...).
        var pool = new WorkerPool(1, "edge helping-continuation worker");
        try
        {
            (int seen, int after, bool ran) result = (-1, -1, false);
            using var done = new ManualResetEventSlim();
            pool.Queue(new ActionItem(() =>
            {
                s_local.Value = 5; // the waiting code's own context
                Action<object?> record = static o =>
                {
                    var box = (StrongBox<int>)o!;
                    box.Value = s_local.Value;
                    s_local.Value = 77;
                };
                var seen = new StrongBox<int>(-1);
                WorkItem item;
                if (timerBatch)
                {
                    TimerBatch batch = TimerBatch.Rent();
                    batch.Add(record, seen);
                    item = batch;
                }
                else
                {
                    item = ContinuationWorkItem.Rent(record, seen);
                }
                pool.Queue(item); // run-next
                result.ran = pool.TryRunOne();
                result.seen = seen.Value;
                result.after = s_local.Value;
                done.Set();
            }));
            Assert.True(done.Wait(TimeSpan.FromSeconds(10)));
            Assert.True(result.ran);
            Assert.Equal(0, result.seen);
            Assert.Equal(5, result.after);
        }
        finally
        {
            pool.Dispose();
        }
    }

    private sealed class MarkerSyncContext : SynchronizationContext
    {
    }

    [Theory]
    [InlineData(false, false)]
    [InlineData(true, false)]
    [InlineData(false, true)]
    public void AnItemThatInstallsASynchronizationContext_DoesNotLeaveItOnTheWorkerForTheNextItems(bool capturedDefault, bool plainItem)
    {
        // The worker resets the AsyncLocals an item leaves behind; the SynchronizationContext an item leaves installed is
        // thread state of the same kind (the .NET ThreadPool resets both after every item): the next items on that worker
        // would otherwise run under it, and a BCL await in them would post its continuation there.
        var pool = new WorkerPool(1, "edge sync-context worker");
        try
        {
            SynchronizationContext? seenByNext = null;
            int nextThread = 0;
            int firstThread = 0;
            using var done = new ManualResetEventSlim();
            var queuer = new Thread(() =>
            {
                // A thread with no context of the test's: Spindle.Run items queued here captured the default context
                // (capturedDefault), or none at all (flow suppressed).
                AsyncFlowControl? flow = capturedDefault ? null : ExecutionContext.SuppressFlow();
                var install = new Action(() =>
                {
                    firstThread = Environment.CurrentManagedThreadId;
                    SynchronizationContext.SetSynchronizationContext(new MarkerSyncContext()); // and returns, leaving it
                });
                // A Spindle.Run item puts back what its delegate left; any other item (a resumed async method that
                // installed one, a job) relies on the worker loop.
                WorkItem first = plainItem ? new ActionItem(install) : RunItem<VoidResult>.Rent(install);
                RunItem<VoidResult> next = RunItem<VoidResult>.Rent(new Action(() =>
                {
                    nextThread = Environment.CurrentManagedThreadId;
                    seenByNext = SynchronizationContext.Current;
                    done.Set();
                }));
                flow?.Undo();
                pool.Queue(first);
                pool.Queue(next);
            });
            queuer.UnsafeStart();
            queuer.Join();
            Assert.True(done.Wait(TimeSpan.FromSeconds(10)));
            Assert.Equal(firstThread, nextThread); // one worker
            Assert.True(seenByNext is null,
                $"the next item on the worker ran under the SynchronizationContext a previous item left installed ({seenByNext?.GetType().Name})");
        }
        finally
        {
            pool.Dispose();
        }
    }

    [Fact]
    public void SpindleRun_DelegateThatInstallsASynchronizationContext_TheAwaitingCodeDoesNotFindIt()
    {
        // Whether the awaited item runs inline (taken back from the run-next slot), on another worker, or on this one
        // with the awaiting method resumed right after it, the code after the await must not run under the context the
        // delegate left installed: the BCL never shows it either (it queues a continuation instead of running it under
        // a context a task left behind), and a BCL await there would post to it.
        int leaked = 0;
        int rounds = TestUtil.Stress(300);
        async SpindleTask Loop()
        {
            for (int i = 0; i < rounds; i++)
            {
                await Spindle.Run(static () => SynchronizationContext.SetSynchronizationContext(new MarkerSyncContext()));
                if (SynchronizationContext.Current is MarkerSyncContext)
                {
                    leaked++;
                    SynchronizationContext.SetSynchronizationContext(null);
                }
            }
        }
        Spindle.Run(Loop).GetAwaiter().GetResult();
        Assert.Equal(0, leaked);
    }

    private sealed class Item
    {
        public Item(int id) => Id = id;

        public int Id { get; }
    }

    [Fact]
    public async Task Deque_OneItemAtATime_OwnerAndThiefRaceForTheLastItem_EachTakenExactlyOnce()
    {
        // The last-element race, over and over: the owner pushes one item (sometimes two) and pops at once, while a thief
        // steals without pause. Each item must be taken exactly once, and a successful steal must never return null.
        int count = TestUtil.Stress(300_000);
        var items = new Item[count];
        for (int i = 0; i < count; i++)
        {
            items[i] = new Item(i);
        }
        var deque = new WorkStealingDeque<Item>();
        var taken = new int[count];
        int takenTotal = 0;
        int stolen = 0;
        int stop = 0;

        void Take(Item item)
        {
            Interlocked.Increment(ref taken[item.Id]);
            Interlocked.Increment(ref takenTotal);
        }

        Task thief = TestUtil.RunOnThread(() =>
        {
            while (Volatile.Read(ref stop) == 0 && Volatile.Read(ref takenTotal) < count)
            {
                Item? item = deque.TrySteal();
                if (item is not null)
                {
                    stolen++;
                    Take(item);
                }
            }
        }, "edge thief");
        Task owner = TestUtil.RunOnThread(() =>
        {
            int i = 0;
            while (i < count)
            {
                deque.Push(items[i++]);
                if ((i & 7) == 0 && i < count)
                {
                    deque.Push(items[i++]);
                }
                Item? item;
                while ((item = deque.TryPop()) is not null)
                {
                    Take(item);
                }
            }
        }, "edge owner");
        try
        {
            await TestUtil.WithTimeout(owner, 60);
            await TestUtil.WithTimeout(Task.Run(() => SpinWait.SpinUntil(() => Volatile.Read(ref takenTotal) == count, 10_000)), 30);
        }
        finally
        {
            Volatile.Write(ref stop, 1);
        }
        await TestUtil.WithTimeout(thief, 30);

        for (int i = 0; i < count; i++)
        {
            Assert.True(taken[i] == 1, $"item {i} taken {taken[i]} times ({stolen} stolen in all)");
        }
        Assert.True(deque.IsEmpty);
    }
}

/// <summary>The edge tests that touch process-wide state: the UnobservedException event, the environment, the shared pool.</summary>
[Collection(SequentialCollection.Name)]
public class WorkerPoolEdgeSequentialTests
{
    private sealed class ThrowingItem : WorkItem
    {
        public override void Execute() => throw new InvalidOperationException("edge test: item fault");
    }

    [Fact]
    public void AnItemThatThrows_IsReportedToUnobservedException_AndItsWorkerGoesOn()
    {
        var pool = new WorkerPool(1, "edge fault worker");
        var watch = UnobservedReports.Start(UnobservedReports.Own.Message("edge test: item fault")); // ThrowingItem's marker
        try
        {
            // From outside (the loop's path), from the worker itself (run-next and deque), and while it helps (TryRunOne).
            using var after = new CountdownEvent(2);
            pool.Queue(new ThrowingItem());
            pool.Queue(new ActionItem(() =>
            {
                pool.Queue(new ThrowingItem());
                pool.Queue(new ThrowingItem()); // displaces the first into the deque
                while (pool.TryRunOne())
                {
                }
                after.Signal();
            }));
            pool.Queue(new ActionItem(() => after.Signal()));
            Assert.True(after.Wait(TimeSpan.FromSeconds(10)), "the worker stopped running items after a fault");
            TestUtil.SpinUntil(() => watch.Reports.Count == 3, 10);
        }
        finally
        {
            watch.Dispose();
            pool.Dispose();
        }
    }

    [Theory]
    [InlineData("0")]
    [InlineData("-3")]
    [InlineData("four")]
    [InlineData("1025")]
    [InlineData("100000")]
    public void SpindleWorkersEnvironmentVariable_Invalid_IsRefusedWithAClearError(string value)
    {
        // ConfigureWorkers refuses a count outside 1..1024 at once and says why; the environment variable, its
        // alternative, should not be quietly ignored (0, -3, "four" fall back to one worker per processor) nor
        // bypass the cap (100000 would start 100000 threads).
        string? saved = Environment.GetEnvironmentVariable("SPINDLE_WORKERS");
        Environment.SetEnvironmentVariable("SPINDLE_WORKERS", value);
        int asked = -1;
        WorkerPool? created = null;
        try
        {
            var slot = new SharedPoolSlot(count =>
            {
                asked = count;
                return created = new WorkerPool(1, "edge env worker"); // never the threads asked for
            });
            Exception? error = Record.Exception(() => slot.Get());
            Assert.True(error is not null,
                $"SPINDLE_WORKERS={value} was accepted silently: the pool was asked for {asked} workers (ProcessorCount is {Environment.ProcessorCount}, the cap {WorkerPool.MaxWorkers})");
            Assert.Contains("SPINDLE_WORKERS", error!.Message);
        }
        finally
        {
            Environment.SetEnvironmentVariable("SPINDLE_WORKERS", saved);
            created?.Dispose();
        }
    }

    [Fact]
    public Task SpindleRun_FromOutside_Runs_WhileEveryWorkerAwaitsYieldInALoop()
        // The public form of the starvation: every shared worker runs `while (...) await Spindle.Yield();`.
        => AssertRunFromOutsideGetsThrough("looped on Spindle.Yield", YieldOnce);

    private static async SpindleTask YieldOnce() => await Spindle.Yield();

    [NetBuildFact("nothing is run inline on netstandard2.1")]
    public Task SpindleRun_FromOutside_Runs_WhileEveryWorkerAwaitsItsOwnRunsInALoop()
        // decisions.md section 9: the inline budget is there so that "a long run of inline awaits cannot hold back the
        // worker's own timers, its deque or the injection queue". Every shared worker runs such a run.
        => AssertRunFromOutsideGetsThrough("looped on awaits of their own runs", static () => Spindle.Run(static () => { }));

    /// <summary>
    /// Every shared worker loops on <paramref name="step"/> (for at most <see cref="WorkerPoolEdgeTests.LoopLimit"/>); a
    /// Spindle.Run queued from outside meanwhile must run within the default bound (a starved one runs when the loops end).
    /// </summary>
    private static async Task AssertRunFromOutsideGetsThrough(string what, Func<SpindleTask> step)
    {
        await TestUtil.LeaveSpindleWorkers(); // the Spindle.Run calls below must queue from outside, as in the case below
        int workers = WorkerPool.Shared.WorkerCount;
        int stop = 0;
        var loops = new Task[workers];
        var threads = new System.Collections.Concurrent.ConcurrentDictionary<int, byte>();
        long deadline = Stopwatch.GetTimestamp() + (long)(WorkerPoolEdgeTests.LoopLimit.TotalSeconds * Stopwatch.Frequency);
        try
        {
            for (int i = 0; i < workers; i++)
            {
                loops[i] = TestUtil.AwaitAsync(Spindle.Run(async () =>
                {
                    while (Volatile.Read(ref stop) == 0 && Stopwatch.GetTimestamp() < deadline)
                    {
                        threads.TryAdd(Environment.CurrentManagedThreadId, 0);
                        await step();
                    }
                }));
            }
            TestUtil.SpinUntil(() => threads.Count == workers);
            Task<int> probe = TestUtil.AwaitAsync(Spindle.Run(() => 42));
            Task first = await Task.WhenAny(probe, Task.Delay(WorkerPoolEdgeTests.Bound));
            Assert.True(first == probe, $"Spindle.Run from outside did not run in {WorkerPoolEdgeTests.Bound.TotalSeconds} s while {workers} worker(s) {what}");
        }
        finally
        {
            Volatile.Write(ref stop, 1);
            await TestUtil.WithTimeout(Task.WhenAll(loops), 15);
        }
    }

    [Fact]
    public Task SpindleRun_FromOutside_Runs_WhileEveryWorkerBlocksOnItAndAwaitsYieldInALoop()
        // The public form of the helper's starvation: every shared worker blocks in GetResult (and so helps) while an
        // async method it started loops on Spindle.Yield, and the result comes from a Spindle.Run queued from outside.
        => AssertRunFromOutsideReachesBlockedWorkers("looped on Spindle.Yield", YieldOnce);

    [NetBuildFact("nothing is run inline on netstandard2.1")]
    public Task SpindleRun_FromOutside_Runs_WhileEveryWorkerBlocksOnItAndAwaitsItsOwnRunsInALoop()
        // As above with a long run of inline awaits (decisions.md section 9's budget) on each blocked worker.
        => AssertRunFromOutsideReachesBlockedWorkers("looped on awaits of their own runs", static () => Spindle.Run(static () => { }));

    /// <summary>
    /// Every shared worker starts a loop on <paramref name="step"/> (for at most <see cref="WorkerPoolEdgeTests.LoopLimit"/>)
    /// and then blocks on a promise that only a Spindle.Run queued from outside sets: that run must get through within the
    /// default bound (a starved one runs when the loops end).
    /// </summary>
    private static async Task AssertRunFromOutsideReachesBlockedWorkers(string what, Func<SpindleTask> step)
    {
        await TestUtil.LeaveSpindleWorkers(); // the Spindle.Run calls below must queue from outside
        int workers = WorkerPool.Shared.WorkerCount;
        int stop = 0;
        var promises = new Promise[workers];
        var blockers = new Task[workers];
        var loopThreads = new System.Collections.Concurrent.ConcurrentDictionary<int, byte>();
        long deadline = Stopwatch.GetTimestamp() + (long)(WorkerPoolEdgeTests.LoopLimit.TotalSeconds * Stopwatch.Frequency);
        using var started = new CountdownEvent(workers);
        try
        {
            for (int i = 0; i < workers; i++)
            {
                var promise = promises[i] = new Promise();
                blockers[i] = TestUtil.AwaitAsync(Spindle.Run(() =>
                {
                    started.Signal();
                    // Every worker takes one blocker before any loop starts (a helper could take a second blocker itself).
                    started.Wait(TimeSpan.FromSeconds(10));
                    SpindleTask loop = Loop();
                    promise.Task.GetAwaiter().GetResult(); // blocks, helping
                    Volatile.Write(ref stop, 1);
                    loop.GetAwaiter().GetResult();
                }));
            }
            Assert.True(started.Wait(TimeSpan.FromSeconds(10)), "not every worker took a blocking item");
            TestUtil.SpinUntil(() => loopThreads.Count == workers);
            Task probe = TestUtil.AwaitAsync(Spindle.Run(() =>
            {
                foreach (Promise p in promises)
                {
                    p.TrySetResult();
                }
            }));
            Task first = await Task.WhenAny(probe, Task.Delay(WorkerPoolEdgeTests.Bound));
            Assert.True(first == probe,
                $"Spindle.Run from outside did not run in {WorkerPoolEdgeTests.Bound.TotalSeconds} s while {workers} worker(s), blocked on it, {what} ({WorkerPool.Shared.Describe()})");
        }
        finally
        {
            Volatile.Write(ref stop, 1);
            foreach (Promise p in promises)
            {
                p?.TrySetResult();
            }
            await TestUtil.WithTimeout(Task.WhenAll(blockers), 15);
        }

        async SpindleTask Loop()
        {
            while (Volatile.Read(ref stop) == 0 && Stopwatch.GetTimestamp() < deadline)
            {
                loopThreads.TryAdd(Environment.CurrentManagedThreadId, 0);
                await step();
            }
        }
    }

    [Fact]
    public async Task TwoWorkersBlockedOnEachOthersHandOffs_BothFinish_AndEachHandOffRunsOnce()
    {
        // Each of two workers puts a run in its own run-next slot and then blocks (GetResult, helping) on the run the other
        // worker queued: neither may wait for the other for ever, and no run may be lost or run twice, whichever takes it
        // (its owner's helper, or the other's as a thief). Needs two workers at once (with one, nothing to check).
        await TestUtil.LeaveSpindleWorkers();
        if (WorkerPool.Shared.WorkerCount < 2)
        {
            return;
        }
        int rounds = TestUtil.Stress(300);
        for (int round = 0; round < rounds; round++)
        {
            var handOffs = new SpindleTask<int>[2];
            var runs = new int[2];
            using var both = new Barrier(2);
            SpindleTask<int> Side(int me) => Spindle.Run(() =>
            {
                handOffs[me] = Spindle.Run(() => Interlocked.Increment(ref runs[me]) * 10 + me);
                if (!both.SignalAndWait(TimeSpan.FromSeconds(10)))
                {
                    throw new TimeoutException("the other side never started");
                }
                return handOffs[1 - me].GetAwaiter().GetResult();
            });
            SpindleTask<int> first = Side(0);
            SpindleTask<int> second = Side(1);
            Assert.Equal(11, await TestUtil.WithTimeout(first, 10));
            Assert.Equal(10, await TestUtil.WithTimeout(second, 10));
            Assert.True(runs[0] == 1 && runs[1] == 1, $"round {round}: the hand-offs ran {runs[0]} and {runs[1]} times");
        }
    }

    private static int s_reachabilityRan;

    /// <summary>Queues <paramref name="count"/> items from a worker, as hand-offs and displaced items, and returns weak references to them.</summary>
    [MethodImpl(MethodImplOptions.NoInlining)]
    private static WeakReference[] QueueItemsFromAWorker(WorkerPool pool, int count)
    {
        var refs = new WeakReference[count];
        using var done = new ManualResetEventSlim();
        pool.Queue(new ActionItem(() =>
        {
            var random = new Random(17);
            for (int i = 0; i < count; i++)
            {
                var item = new ActionItem(static () => Interlocked.Increment(ref s_reachabilityRan));
                refs[i] = new WeakReference(item);
                pool.Queue(item); // into this worker's run-next slot; a second one displaces the first into its deque
                // Leave it there a while: the other worker sees it (and may steal it, from the slot or the deque) or not.
                Thread.SpinWait(random.Next(0, 400));
                // Sometimes the owner runs its own hand-off first, and always in the last stretch: the other worker, which
                // steals a hand-off only on its second look, has then seen items that it never took.
                if ((i & 3) == 0 || i >= count - count / 4)
                {
                    pool.TryRunOne();
                }
            }
            done.Set();
        }));
        Assert.True(done.Wait(TimeSpan.FromSeconds(20)), "the queuing item did not finish");
        return refs;
    }

    [Fact]
    public void ItemsThatRan_AreNotKeptReachableByThePool_AfterItsWorkersGoIdle()
    {
        // A queue slot or a thief's memory of a slot that still points at an item that ran keeps it from the GC: a failed
        // job that nobody observed would then never be reported (its finalizer reports it), and a large closure would
        // stay alive. Found by a flaky job test whose failure stayed unreported through 50 collections.
        const int Count = 3000;
        var pool = new WorkerPool(2, "edge reachability worker");
        try
        {
            Interlocked.Exchange(ref s_reachabilityRan, 0);
            WeakReference[] refs = QueueItemsFromAWorker(pool, Count);
            TestUtil.SpinUntil(() => Volatile.Read(ref s_reachabilityRan) == Count, 20);
            // Let both workers run out of work, spin and park. Waited for, not slept: a worker that has not parked yet may
            // still hold the last item it ran or looked at (the count above is taken inside that item), for as long as it
            // is descheduled; a 300 ms sleep failed under load with both workers still spinning ("idle=0 spinning=2").
            TestUtil.SpinUntil(() => pool.IdleWorkers == pool.WorkerCount, () => pool.Describe());
            GC.Collect();
            GC.WaitForPendingFinalizers();
            GC.Collect();
            int alive = refs.Count(r => r.IsAlive);
            Assert.True(alive == 0, $"{alive} of {Count} items that ran are still reachable from the idle pool ({pool.Describe()})");
        }
        finally
        {
            pool.Dispose();
        }
    }
}

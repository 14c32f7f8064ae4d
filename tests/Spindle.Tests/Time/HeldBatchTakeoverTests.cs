using System;
using System.Collections.Concurrent;
using System.Diagnostics;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Time;

/// <summary>
/// Due timers handed to the workers in batches (the main shard's timer thread dispatches that way, and so does a rescuer
/// of a worker's shard) run one batch's continuations one after another: a continuation that blocks must not hold the
/// rest of its batch while another worker is idle, which takes the rest over. Real clock; the tests wait for
/// conditions, never for a sleep.
/// </summary>
[Collection(SequentialCollection.Name)]
public class HeldBatchTakeoverTests
{
    private const int Others = 20; // with the holder, one batch (TimerBatch.Capacity)

    /// <summary>
    /// Waits for the start of a tick of the default wheel, then calls <paramref name="start"/>, which starts the delays
    /// that must fall due together; true if the tick did not change meanwhile (so they are due at the same tick and fire
    /// in one pass, one batch).
    /// </summary>
    private static bool StartInOneTick(Action start)
    {
        TimerWheel wheel = TimerWheel.Default;
        long tick = wheel.NowTick();
        while (wheel.NowTick() == tick)
        {
            Thread.SpinWait(10);
        }
        tick = wheel.NowTick();
        start();
        return wheel.NowTick() == tick;
    }

    /// <summary>
    /// The state of one attempt: the holder's delay is the first of <see cref="Others"/> + 1 due together; its continuation
    /// notes its thread, signals <see cref="Holding"/> and blocks (not helping) until <see cref="Release"/> is set.
    /// </summary>
    private sealed class Attempt : IDisposable
    {
        public readonly ManualResetEventSlim Release = new();
        public readonly ManualResetEventSlim Holding = new();
        public readonly ManualResetEventSlim AllRan = new();
        public readonly ConcurrentQueue<int> Order = new();
        public readonly ConcurrentQueue<int> RanOn = new();
        public int HolderThread;

        public void StartAll()
        {
            Spindle.Delay(30).ContinueWithForTest(() =>
            {
                Volatile.Write(ref HolderThread, Environment.CurrentManagedThreadId);
                Holding.Set();
                Release.Wait(TimeSpan.FromSeconds(2 * TestUtil.DefaultTimeoutSeconds)); // blocks its worker, not helping
            });
            for (int i = 0; i < Others; i++)
            {
                int index = i;
                Spindle.Delay(30).ContinueWithForTest(() =>
                {
                    RanOn.Enqueue(Environment.CurrentManagedThreadId);
                    Order.Enqueue(index);
                    if (Order.Count == Others)
                    {
                        AllRan.Set();
                    }
                });
            }
        }

        /// <summary>Every other delay must run while the holder holds, off the holder's thread, in the order started.</summary>
        public void AssertTheOthersRanWhileHeld(string where)
        {
            try
            {
                Assert.True(AllRan.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)),
                    $"{Order.Count} of {Others} timers due with one that blocks in {where} ran while it blocked; {TimerWheel.Default.Describe()}; {WorkerPool.Shared.Describe()}");
                Assert.All(RanOn, thread => Assert.NotEqual(Volatile.Read(ref HolderThread), thread));
                Assert.Equal(Enumerable.Range(0, Others), Order.ToArray());
            }
            finally
            {
                Release.Set();
            }
        }

        /// <summary>Lets the holder go and waits for every delay to have run and left the wheel.</summary>
        public void Finish()
        {
            Release.Set();
            Assert.True(AllRan.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "the timers never ran");
            TestUtil.SpinUntil(() => TimerWheel.Default.PendingCount == 0, () => TimerWheel.Default.Describe());
        }

        public void Dispose()
        {
            Release.Set();
            Release.Dispose();
            Holding.Dispose();
            AllRan.Dispose();
        }
    }

    [Fact]
    public async Task DelaysOnTheMainShard_DueWithOneThatBlocks_RunWhileItBlocks_OnAnotherWorker()
    {
        if (Spindle.WorkerCount < 2)
        {
            return; // the taker is another worker (SPINDLE_WORKERS=1 runs have none)
        }
        await TestUtil.LeaveSpindleWorkers(); // started here, off the workers: the main shard, fired by the timer thread
        for (int attempt = 0; attempt < 10; attempt++)
        {
            using var run = new Attempt();
            if (!StartInOneTick(run.StartAll))
            {
                run.Finish(); // the starts crossed a tick: two passes, two batches; try again
                continue;
            }
            Assert.True(run.Holding.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "the holder never ran");
            run.AssertTheOthersRanWhileHeld("a batch of the main shard");
            run.Finish();
            return;
        }
        Assert.Fail("the delays never started within one tick");
    }

    /// <summary>
    /// As <see cref="DelaysOnTheMainShard_DueWithOneThatBlocks_RunWhileItBlocks_OnAnotherWorker"/>, with every other worker
    /// inside a blocking wait of its own (<c>GetResult</c> on a pending task, on a worker), which helps and finds nothing
    /// to run: it is as idle as a worker about to park, but it never parks, so only a look from its wait can take the rest
    /// over (found by the review of stop 38: the rest waited for the holder). The other workers block without helping
    /// until the holder holds (so the batch runs on the one left free), then start their waits.
    /// </summary>
    [Fact]
    public async Task DelaysOnTheMainShard_DueWithOneThatBlocks_RunWhileItBlocks_WithEveryOtherWorkerWaitingHelping()
    {
        if (Spindle.WorkerCount < 2)
        {
            return; // the taker is another worker (SPINDLE_WORKERS=1 runs have none)
        }
        for (int attempt = 0; attempt < 10; attempt++)
        {
            // Started here, off the workers: the main shard, fired by the timer thread. Left again at every attempt: the
            // last attempt's awaits of its items may have resumed this method on a worker, whose helping waits below
            // would then run one of this attempt's blocking items and wait inside it for ever (a stalled suite, stop 40).
            await TestUtil.LeaveSpindleWorkers();
            using var run = new Attempt();
            using var startWaiting = new ManualResetEventSlim();
            var helpersGo = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
            int roles = 0;
            int waiting = 0;

            async SpindleTask WaitForTheTest()
            {
                await helpersGo.Task;
            }

            // Every worker takes one item at once: the first returns at once (the worker that will run the batch); the
            // others block until the holder holds, then wait helping until the attempt ends.
            using var together = new Barrier(Spindle.WorkerCount);
            var items = new SpindleTask[Spindle.WorkerCount];
            for (int i = 0; i < items.Length; i++)
            {
                items[i] = Spindle.Run(() =>
                {
                    Assert.True(together.SignalAndWait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "every worker should take one of the items");
                    if (Interlocked.Increment(ref roles) == 1)
                    {
                        return;
                    }
                    startWaiting.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)); // blocks, not helping
                    Interlocked.Increment(ref waiting);
                    WaitForTheTest().GetAwaiter().GetResult(); // a blocking wait on a worker: it helps until the task completes
                });
            }
            try
            {
                TestUtil.SpinUntil(() => Volatile.Read(ref roles) == Spindle.WorkerCount);
                if (!StartInOneTick(run.StartAll))
                {
                    startWaiting.Set();
                    run.Finish(); // the starts crossed a tick: two passes, two batches; try again
                    continue;
                }
                Assert.True(run.Holding.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "the holder never ran");
                startWaiting.Set();
                TestUtil.SpinUntil(() => Volatile.Read(ref waiting) == Spindle.WorkerCount - 1);
                run.AssertTheOthersRanWhileHeld("a batch of the main shard, every other worker waiting helping");
                run.Finish();
                return;
            }
            finally
            {
                startWaiting.Set();
                helpersGo.TrySetResult();
                foreach (SpindleTask item in items)
                {
                    await TestUtil.WithTimeout(item);
                }
            }
        }
        Assert.Fail("the delays never started within one tick");
    }

    [Fact]
    public async Task RescuedDelays_DueWithOneThatBlocks_RunWhileItBlocks_OnAnotherWorker()
    {
        if (!await WorkerShardRescueTests.LeaveWorkersEachWithAShard())
        {
            return; // the rescuer and the taker are other workers (SPINDLE_WORKERS=1 runs have none)
        }
        for (int attempt = 0; attempt < 10; attempt++)
        {
            using var run = new Attempt();
            int itemThread = 0;
            bool oneTick = false;
            // The item starts the delays in its worker's shard, then blocks (not helping) until the holder runs: the shard
            // is lent for the item, so another worker rescues the delays and runs their batch, whose first one holds it.
            // Then the item returns, and its worker, idle, must take over the rest of that batch.
            await TestUtil.WithTimeout(Spindle.Run(() =>
            {
                Volatile.Write(ref itemThread, Environment.CurrentManagedThreadId);
                oneTick = StartInOneTick(run.StartAll);
                run.Holding.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)); // else not rescued: tried again below
            }));
            await TestUtil.LeaveSpindleWorkers(); // the item's completion may resume this method on its worker
            Assert.True(run.Holding.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "the holder never ran");
            if (!oneTick || Volatile.Read(ref run.HolderThread) == itemThread)
            {
                run.Finish(); // two batches, or not a rescue (the item ended before the delays fell due): try again
                continue;
            }
            run.AssertTheOthersRanWhileHeld("a rescuer's batch");
            run.Finish();
            return;
        }
        Assert.Fail("the delays were never rescued in one batch");
    }

    /// <summary>
    /// Timers started in bursts due together, from a thread that is not a worker (the main shard's batches) and from items
    /// on workers that then sometimes block (rescued batches), some of whose continuations block or compute for a few
    /// milliseconds (so batches are taken over while other continuations run, fire and are cancelled), and a thread that
    /// cancels some: every timer must end exactly once (fired, not early, or cancelled).
    /// </summary>
    [Fact]
    public async Task BurstsWhoseContinuationsSometimesBlock_EndEveryTimerExactlyOnce()
    {
        if (Spindle.WorkerCount < 2)
        {
            return; // the taker is another worker (SPINDLE_WORKERS=1 runs have none)
        }
        await TestUtil.LeaveSpindleWorkers();
        int bursts = TestUtil.Stress(200);
        const int PerBurst = 40;
        int count = bursts * PerBurst;
        var ended = new int[count];
        var problems = new ConcurrentQueue<string>();
        var toCancel = new ConcurrentQueue<CancellationTokenSource>();
        var sources = new ConcurrentQueue<CancellationTokenSource>();
        long done = 0;
        var allEnded = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        int stop = 0;

        async SpindleTask Timer(int id, int ms, CancellationToken token, int hold)
        {
            long start = Stopwatch.GetTimestamp();
            try
            {
                await Spindle.Delay(ms, token);
                double waited = Stopwatch.GetElapsedTime(start).TotalMilliseconds;
                if (waited < ms)
                {
                    problems.Enqueue($"timer {id} of {ms} ms fired after {waited:F3} ms");
                }
            }
            catch (OperationCanceledException)
            {
            }
            if (Interlocked.Increment(ref ended[id]) != 1)
            {
                problems.Enqueue($"timer {id} ended twice");
            }
            if (hold == 1)
            {
                Thread.Sleep(10 + (id % 20)); // a blocking call, inside the batch that fired this timer: longer than an idle worker's look
            }
            else if (hold == 2)
            {
                long spinStart = Stopwatch.GetTimestamp();
                while (Stopwatch.GetElapsedTime(spinStart).TotalMilliseconds < 10 + (id % 20))
                {
                    Thread.SpinWait(20); // a long computation, inside the batch
                }
            }
            if (Interlocked.Increment(ref done) == count)
            {
                allEnded.SetResult();
            }
        }

        void StartBurst(int burst, Random random)
        {
            int ms = 1 + random.Next(15);
            for (int i = 0; i < PerBurst; i++)
            {
                CancellationTokenSource? cts = null;
                if (random.Next(10) == 0)
                {
                    cts = new CancellationTokenSource();
                    sources.Enqueue(cts);
                    toCancel.Enqueue(cts);
                }
                int roll = random.Next(50);
                Timer(burst * PerBurst + i, ms, cts?.Token ?? default, roll == 0 ? 1 : roll == 1 ? 2 : 0).Forget();
            }
        }

        Task canceller = TestUtil.RunOnThread(() =>
        {
            var random = new Random(7);
            while (Volatile.Read(ref stop) == 0)
            {
                if (toCancel.TryDequeue(out CancellationTokenSource? cts))
                {
                    cts.CancelAfter(random.Next(3)); // now, or as it may fire
                }
                else
                {
                    Thread.Yield();
                }
            }
        }, "canceller");
        Task producer = TestUtil.RunOnThread(() =>
        {
            var random = new Random(11);
            for (int burst = 0; burst < bursts; burst++)
            {
                if (burst % 3 == 2)
                {
                    int b = burst;
                    int seed = random.Next();
                    // On a worker, into its shard: the item sometimes blocks, and another worker rescues the burst.
                    Spindle.Run(() =>
                    {
                        var r = new Random(seed);
                        StartBurst(b, r);
                        if (r.Next(2) == 0)
                        {
                            Thread.Sleep(20);
                        }
                    }).Forget();
                }
                else
                {
                    StartBurst(burst, random); // the main shard
                }
                Thread.Sleep(random.Next(3)); // bursts apart, so that a worker is often idle while another is held
            }
        }, "producer");
        try
        {
            await TestUtil.WithTimeout(producer);
            await TestUtil.WithStallTimeout(allEnded.Task, () => Volatile.Read(ref done),
                () => $"{Volatile.Read(ref done)} of {count} timers ended; {TimerWheel.Default.Describe()}; {WorkerPool.Shared.Describe()}");
        }
        finally
        {
            Volatile.Write(ref stop, 1);
        }
        await TestUtil.WithTimeout(canceller);
        Assert.Empty(problems);
        Assert.All(ended, n => Assert.Equal(1, n));
        TestUtil.SpinUntil(() => TimerWheel.Default.PendingCount == 0, () => TimerWheel.Default.Describe());
        while (sources.TryDequeue(out CancellationTokenSource? cts))
        {
            cts.Dispose();
        }
    }

#if DEBUG
    private sealed class Piece
    {
        public int Index;
        public int[]? Runs;
        public int Spin;
    }

    /// <summary>
    /// The protocol alone, on plain threads: a runner runs batches of 64 pieces, each of which spins a little, while two
    /// takers take over the rest of whichever batch it runs at once (no wait for a long run) and run what they take. Every
    /// piece must run exactly once, whichever side wins each race; a taker also meets batches that have ended and been
    /// reused.
    /// </summary>
    [Fact]
    public async Task ARunnerAndTwoTakers_RunEveryContinuationOnce()
    {
        await TestUtil.LeaveSpindleWorkers();
        int rounds = TestUtil.Stress(10_000); // without the taker's barrier, 20 and 74 pieces ran twice in 60,000 rounds (2 of 2 runs)
        var runs = new int[rounds * TimerBatch.Capacity];
        TimerBatch? current = null;
        int stop = 0;
        long takeovers = 0;
        long taken = 0;
        Action<object?> run = static o =>
        {
            var piece = (Piece)o!;
            Interlocked.Increment(ref piece.Runs![piece.Index]);
            Thread.SpinWait(piece.Spin);
        };
        long saved = TimerBatch.LongRunTimestamps;
        TimerBatch.LongRunTimestamps = 0;
        try
        {
            int seeds = 0;
            Action take = () =>
            {
                var random = new Random(Interlocked.Increment(ref seeds));
                while (Volatile.Read(ref stop) == 0)
                {
                    // At a random point of the run: the race with the runner's next check is what is tested.
                    Thread.SpinWait(random.Next(200));
                    if (Volatile.Read(ref current) is { } batch && batch.TryTakeRest() is TimerBatch rest)
                    {
                        Interlocked.Increment(ref takeovers);
                        rest.Execute();
                    }
                }
            };
            Task taker1 = TestUtil.RunOnThread(take, "taker 1");
            Task taker2 = TestUtil.RunOnThread(take, "taker 2");
            Task runner = TestUtil.RunOnThread(() =>
            {
                var random = new Random(3);
                for (int round = 0; round < rounds; round++)
                {
                    TimerBatch batch = TimerBatch.Rent();
                    for (int i = 0; i < TimerBatch.Capacity; i++)
                    {
                        batch.Add(run, new Piece { Index = round * TimerBatch.Capacity + i, Runs = runs, Spin = random.Next(8) });
                    }
                    Volatile.Write(ref current, batch);
                    batch.Execute();
                }
                Volatile.Write(ref current, null);
            }, "runner");
            try
            {
                await TestUtil.WithTimeout(runner);
            }
            finally
            {
                Volatile.Write(ref stop, 1);
            }
            await TestUtil.WithTimeout(Task.WhenAll(taker1, taker2));
            for (int i = 0; i < runs.Length; i++)
            {
                if (runs[i] != 1)
                {
                    Interlocked.Increment(ref taken); // counted as wrong
                }
            }
            Assert.True(Volatile.Read(ref takeovers) > 0, "no batch was taken over: nothing was tested");
            Assert.True(taken == 0, $"{taken} of {runs.Length} pieces ran other than once ({runs.Count(n => n == 0)} never, {runs.Count(n => n > 1)} twice or more), in {takeovers} takeovers");
        }
        finally
        {
            TimerBatch.LongRunTimestamps = saved;
        }
    }
#endif
}

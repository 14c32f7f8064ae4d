using System;
using System.Diagnostics;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Time;

/// <summary>
/// A timer lives on the shard of the worker that started it, and its continuation runs on the worker that fires it, so a
/// loop of delays stays on one worker. A rescue (another worker firing a held worker's timers) runs the rescued loops on
/// the rescuer, and they re-arm there: a worker whose timers far outnumber an idle worker's shares its due continuations
/// (<c>WorkerPool.ShouldShareTimers</c>, <c>WorkerTimers.PollSharing</c>), so the sessions spread again. And a worker
/// kept busy only by its own timers' passes still rescues a held worker's timers. Real clock; the tests wait for
/// conditions, never for a sleep.
/// </summary>
[Collection(SequentialCollection.Name)]
public class TimerSharingTests
{
    private static string Shards() => string.Join(" / ", TimerWheel.Default.WorkerShardCounts());

    /// <summary>How many shards hold at least <paramref name="atLeast"/> timers each.</summary>
    private static int ShardsHolding(long atLeast) => TimerWheel.Default.WorkerShardCounts().Count(count => count >= atLeast);

    /// <summary>
    /// Loops of short delays, all started on one worker, which then blocks: an idle worker rescues them, and they gather on
    /// its shard. Released, the blocked worker had no timers and the other kept every loop for ever (the user's latency
    /// program, at the scale of 200,000 loops: the delays ran at half the rate, one worker idle). Now they spread again.
    /// </summary>
    [Fact]
    public async Task LoopsGatheredOnARescuer_SpreadAgain_OnceTheHeldWorkerIsFree()
    {
        if (!await WorkerShardRescueTests.LeaveWorkersEachWithAShard())
        {
            return; // a rescue needs another worker
        }
        const int Loops = 1_000;
        int stop = 0;
        int running = 0;
        int early = 0;
        int heldThread = 0;
        using var release = new ManualResetEventSlim();

        async SpindleTask Loop(int seed)
        {
            var rng = new Random(seed);
            Interlocked.Increment(ref running);
            try
            {
                while (Volatile.Read(ref stop) == 0)
                {
                    int ms = rng.Next(2, 11);
                    long start = Stopwatch.GetTimestamp();
                    await Spindle.Delay(ms);
                    if (Stopwatch.GetElapsedTime(start).TotalMilliseconds < ms)
                    {
                        Interlocked.Increment(ref early);
                    }
                }
            }
            finally
            {
                Interlocked.Decrement(ref running);
            }
        }

        long before = TimerWheel.Default.PendingCount;
        SpindleTask held = Spindle.Run(() =>
        {
            Volatile.Write(ref heldThread, Environment.CurrentManagedThreadId);
            for (int i = 0; i < Loops; i++)
            {
                Loop(i).Forget(); // every first delay goes into this worker's shard
            }
            // Held (not helping) until the loops have all moved to the rescuer's shard.
            release.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds));
        });
        try
        {
            // Gathered: one shard holds every loop, the held worker's none.
            TestUtil.SpinUntil(() => ShardsHolding(Loops) == 1 && TimerWheel.Default.PendingCount - before == Loops,
                () => "the loops did not gather on the rescuer: " + Shards());
            release.Set();
            await TestUtil.WithTimeout(held);
            await TestUtil.LeaveSpindleWorkers(); // the await may resume on the freed worker: this thread must not hold it
            // Spread: at least two shards hold a tenth of the loops each (the rule stops sharing at twice the lighter's
            // count, and an idle worker takes only some of the shared continuations; in practice a few passes).
            TestUtil.SpinUntil(() => ShardsHolding(Loops / 10) >= 2,
                () => $"the loops stayed on one worker's shard after the held worker was free: {Shards()}; {WorkerPool.Shared.Describe()}");
        }
        finally
        {
            release.Set();
            Volatile.Write(ref stop, 1);
        }
        TestUtil.SpinUntil(() => Volatile.Read(ref running) == 0);
        Assert.Equal(0, Volatile.Read(ref early));
        TestUtil.SpinUntil(() => TimerWheel.Default.PendingCount == 0);
    }

    /// <summary>
    /// A worker held in one item while the other worker runs only its own timers' passes (thousands of 1 ms delay loops,
    /// always due: it never runs out of timers, never parks and runs almost no items): the held worker's delays waited
    /// for the item to end, however long, since the busy worker's look at a held worker's timers came only between items
    /// (the user's latency program: 5-6 s). Now it comes every TimerPollInterval passes too.
    /// </summary>
    [Fact]
    public async Task DelaysOfAHeldWorker_Fire_WhileTheOtherRunsOnlyTimerPasses()
    {
        if (!await WorkerShardRescueTests.LeaveWorkersEachWithAShard())
        {
            return;
        }
        const int Loops = 50_000;
        const int Waiters = 8;
        int stop = 0;
        int running = 0;
        int startedOn = 0;
        int heldThread = 0;
        using var loopsStarted = new ManualResetEventSlim();
        using var release = new ManualResetEventSlim();
        var fired = new TaskCompletionSource[Waiters];
        for (int i = 0; i < Waiters; i++)
        {
            fired[i] = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        }

        async SpindleTask Loop()
        {
            Interlocked.Increment(ref running);
            try
            {
                while (Volatile.Read(ref stop) == 0)
                {
                    await Spindle.Delay(1);
                }
            }
            finally
            {
                Interlocked.Decrement(ref running);
            }
        }

        async SpindleTask Waiter(int i)
        {
            await Spindle.Delay(10 + i);
            fired[i].SetResult();
        }

        SpindleTask held = Spindle.Run(() =>
        {
            Volatile.Write(ref heldThread, Environment.CurrentManagedThreadId);
            // The loops start on another worker (this one is held: the other takes the item), so their timers are its.
            Spindle.Run(() =>
            {
                Volatile.Write(ref startedOn, Environment.CurrentManagedThreadId);
                for (int i = 0; i < Loops; i++)
                {
                    Loop().Forget();
                }
                loopsStarted.Set();
            }).Forget();
            loopsStarted.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds));
            for (int i = 0; i < Waiters; i++)
            {
                Waiter(i).Forget(); // into this worker's shard, lent while this item holds it
            }
            release.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds));
        });
        try
        {
            bool allFired = await WorkerShardRescueTests.AllSetWithin(fired, TestUtil.DefaultTimeoutSeconds - 5);
            Assert.NotEqual(Volatile.Read(ref heldThread), Volatile.Read(ref startedOn));
            Assert.True(allFired,
                $"the delays of a held worker did not fire while the other worker ran only timer passes; {Shards()}; {WorkerPool.Shared.Describe()}");
            Assert.False(release.IsSet);
        }
        finally
        {
            release.Set();
            Volatile.Write(ref stop, 1);
        }
        await TestUtil.WithTimeout(held);
        TestUtil.SpinUntil(() => Volatile.Read(ref running) == 0);
        TestUtil.SpinUntil(() => TimerWheel.Default.PendingCount == 0);
    }

    /// <summary>
    /// Loops of short delays, each with a token that another thread cancels at random, while one worker is held again and
    /// again (its loops gather on the other worker) and let go (they are shared back): every delay ends exactly once,
    /// fired no earlier than its deadline or cancelled, and nothing stays in the wheel.
    /// </summary>
    [Fact]
    public async Task DelaysSharedAndGatheredUnderCancellation_EndExactlyOnce_NeverEarly()
    {
        if (!await WorkerShardRescueTests.LeaveWorkersEachWithAShard())
        {
            return;
        }
        const int Loops = 2_000;
        int rounds = TestUtil.Stress(12);
        int stop = 0;
        int running = 0;
        long started = 0;
        long fired = 0;
        long cancelled = 0;
        long early = 0;
        long twice = 0;
        var sources = new CancellationTokenSource[Loops];
        for (int i = 0; i < Loops; i++)
        {
            sources[i] = new CancellationTokenSource();
        }

        async SpindleTask Loop(int index)
        {
            var rng = new Random(index);
            Interlocked.Increment(ref running);
            int inside = 0; // a second resume of the same wait would find it set
            try
            {
                while (Volatile.Read(ref stop) == 0)
                {
                    CancellationTokenSource source = Volatile.Read(ref sources[index]);
                    if (source.IsCancellationRequested)
                    {
                        source = new CancellationTokenSource();
                        Volatile.Write(ref sources[index], source);
                    }
                    int ms = rng.Next(1, 9);
                    Interlocked.Increment(ref started);
                    long start = Stopwatch.GetTimestamp();
                    SpindleTask delay = Spindle.Delay(ms, source.Token);
                    try
                    {
                        await delay;
                        if (Interlocked.Exchange(ref inside, 1) != 0)
                        {
                            Interlocked.Increment(ref twice);
                        }
                        if (Stopwatch.GetElapsedTime(start).TotalMilliseconds < ms)
                        {
                            Interlocked.Increment(ref early);
                        }
                        Interlocked.Increment(ref fired);
                    }
                    catch (OperationCanceledException)
                    {
                        if (Interlocked.Exchange(ref inside, 1) != 0)
                        {
                            Interlocked.Increment(ref twice);
                        }
                        Interlocked.Increment(ref cancelled);
                    }
                    Volatile.Write(ref inside, 0);
                }
            }
            finally
            {
                Interlocked.Decrement(ref running);
            }
        }

        for (int i = 0; i < Loops; i++)
        {
            int index = i;
            Spindle.Run(() => Loop(index).Forget()).Forget(); // on whichever worker takes it
        }
        var canceller = TestUtil.RunOnThread(() =>
        {
            var rng = new Random(7);
            while (Volatile.Read(ref stop) == 0)
            {
                Volatile.Read(ref sources[rng.Next(Loops)]).Cancel();
                Thread.SpinWait(rng.Next(100, 2_000));
            }
        }, "spindle-test-canceller");
#if DEBUG
        long sharedBefore = Volatile.Read(ref WheelShard.SharingPassesForTests);
#endif
        try
        {
            for (int round = 0; round < rounds; round++)
            {
                // Held until the other worker has rescued, and so gathered, the loops (one shard holds half of them and every
                // other fewer than a tenth: only a share brings them back), then let go. Waiting only for a shard with half
                // of them passed at once when the loops were spread already, and nothing had to be shared (1 CI run).
                using var release = new ManualResetEventSlim();
                SpindleTask held = Spindle.Run(() => release.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)));
                TestUtil.SpinUntil(() => ShardsHolding(Loops / 2) >= 1 && ShardsHolding(Loops / 10) == 1,
                    () => "the loops did not gather on one shard: " + Shards());
                release.Set();
                await TestUtil.WithTimeout(held);
                await TestUtil.LeaveSpindleWorkers();
                TestUtil.SpinUntil(() => ShardsHolding(Loops / 10) >= 2, () => "the loops did not spread again: " + Shards());
            }
        }
        finally
        {
            Volatile.Write(ref stop, 1);
        }
        await TestUtil.WithTimeout(canceller);
        TestUtil.SpinUntil(() => Volatile.Read(ref running) == 0, () => $"{Volatile.Read(ref running)} loops still running; {Shards()}");
        Assert.Equal(0, Interlocked.Read(ref twice));
        Assert.Equal(0, Interlocked.Read(ref early));
        Assert.Equal(Interlocked.Read(ref started), Interlocked.Read(ref fired) + Interlocked.Read(ref cancelled));
        Assert.True(Interlocked.Read(ref cancelled) > 0, "the canceller cancelled nothing");
#if DEBUG
        Assert.True(Volatile.Read(ref WheelShard.SharingPassesForTests) > sharedBefore, "no pass shared its continuations");
#endif
        TestUtil.SpinUntil(() => TimerWheel.Default.PendingCount == 0, () => "timers left: " + TimerWheel.Default.Describe());
        foreach (CancellationTokenSource source in sources)
        {
            source.Dispose();
        }
    }
}

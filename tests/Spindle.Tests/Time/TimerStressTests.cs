using System;
using System.Collections.Concurrent;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Time;

/// <summary>
/// Stress on the default wheel, on the real clock: delays, timeouts and periodic timers started and ended from workers
/// (their own shards) and from other threads (the main shard), cancelled and disposed from yet other threads. Each
/// thing ends exactly once, the totals add up in closed form, and nothing stays in the wheel. Sizes grow with
/// SPINDLE_STRESS=1. Sequential: they use the workers and read the default wheel's pending count.
/// </summary>
[Collection(SequentialCollection.Name)]
public class TimerStressTests
{
    /// <summary>
    /// Every timer these tests left fires within milliseconds or was cancelled, so one still counted is a leak (never
    /// leaves) or a release nobody made; the bound only has to tell those apart from a loaded machine: the suite's
    /// default (it was 10 s). The wait helps when this code runs on a worker (TestUtil.SpinUntil), whose own shard may
    /// hold the cancellations it waits for.
    /// </summary>
    private static void AssertDefaultWheelDrains()
        => TestUtil.SpinUntil(
            () => TimerWheel.Default.PendingCount == 0,
            () => $"{TimerWheel.Default.PendingCount} timers still pending; {TimerWheel.Default.Describe()}; {WorkerPool.Shared.Describe()}");

    /// <summary>
    /// Four kinds of delay, from two plain threads and four worker loops: not cancelled (must fire), token already
    /// cancelled (must be canceled at once), cancelled at once by the starter, cancelled later by a canceller thread
    /// (either outcome). Every delay's continuation runs exactly once.
    /// </summary>
    [Fact]
    public async Task DelaysStartedAndCancelledFromWorkersAndThreadsEachEndExactlyOnce()
    {
        const int threads = 2;
        const int workerLoops = 4;
        int perStarter = TestUtil.Stress(2_500);
        int total = (threads + workerLoops) * perStarter;
        var ended = new int[total];
        int fired = 0;
        int canceled = 0;
        int duplicates = 0;
        int wrongOutcomes = 0;
        int mustFire = 0;
        int mustCancel = 0;
        var toCancel = new ConcurrentQueue<CancellationTokenSource>();
        int startersLeft = threads + workerLoops;
        using var precanceled = new CancellationTokenSource();
        precanceled.Cancel();

        void Start(int id, Random rng)
        {
            int kind = rng.Next(4);
            CancellationTokenSource? cts = kind is 2 or 3 ? new CancellationTokenSource() : null;
            CancellationToken token = kind switch { 1 => precanceled.Token, 2 or 3 => cts!.Token, _ => default };
            if (kind == 0)
            {
                Interlocked.Increment(ref mustFire);
            }
            else if (kind == 1)
            {
                Interlocked.Increment(ref mustCancel);
            }
            SpindleTask delay = Spindle.Delay(TimeSpan.FromTicks(rng.Next(1, 4 * (int)TimeSpan.TicksPerMillisecond)), token);
            SpindleTask.Awaiter awaiter = delay.GetAwaiter();
            awaiter.UnsafeOnCompleted(() =>
            {
                if (Interlocked.Increment(ref ended[id]) != 1)
                {
                    Interlocked.Increment(ref duplicates);
                }
                try
                {
                    awaiter.GetResult();
                    if (kind == 1)
                    {
                        Interlocked.Increment(ref wrongOutcomes); // a delay with a cancelled token fired
                    }
                    Interlocked.Increment(ref fired);
                }
                catch (OperationCanceledException)
                {
                    if (kind == 0)
                    {
                        Interlocked.Increment(ref wrongOutcomes); // a delay without a token was canceled
                    }
                    Interlocked.Increment(ref canceled);
                }
            });
            if (kind == 2)
            {
                cts!.Cancel();
            }
            else if (kind == 3)
            {
                toCancel.Enqueue(cts!);
            }
        }

        Task canceller = TestUtil.RunOnThread(() =>
        {
            var rng = new Random(99);
            while (Volatile.Read(ref startersLeft) > 0 || !toCancel.IsEmpty)
            {
                if (toCancel.TryDequeue(out CancellationTokenSource? cts))
                {
                    if (rng.Next(8) == 0)
                    {
                        Thread.SpinWait(rng.Next(2_000)); // lets some reach their deadline first
                    }
                    cts.Cancel();
                }
                else
                {
                    Thread.Yield();
                }
            }
        }, "canceller");

        var starters = new Task[threads + workerLoops];
        for (int t = 0; t < threads; t++)
        {
            int me = t;
            starters[t] = TestUtil.RunOnThread(() =>
            {
                var rng = new Random(me);
                for (int i = 0; i < perStarter; i++)
                {
                    Start(me * perStarter + i, rng);
                }
                Interlocked.Decrement(ref startersLeft);
            }, "starter " + me);
        }

        async SpindleTask WorkerLoop(int me)
        {
            await Spindle.SwitchToWorker();
            var rng = new Random(me);
            for (int i = 0; i < perStarter; i++)
            {
                Start(me * perStarter + i, rng);
                if (i % 64 == 63)
                {
                    await Spindle.Delay(1); // lets the worker run its due timers and hop between workers
                }
            }
            Interlocked.Decrement(ref startersLeft);
        }

        for (int w = 0; w < workerLoops; w++)
        {
            starters[threads + w] = TestUtil.AwaitAsync(WorkerLoop(threads + w));
        }
        await TestUtil.WithTimeout(Task.WhenAll(starters), TestUtil.StressTimeout(30));
        await TestUtil.WithTimeout(canceller, TestUtil.StressTimeout(30));
        TestUtil.SpinUntil(() => Volatile.Read(ref fired) + Volatile.Read(ref canceled) == total, TestUtil.StressTimeout(30));

        Assert.Equal(0, duplicates);
        Assert.Equal(0, wrongOutcomes);
        Assert.All(ended, e => Assert.Equal(1, e));
        Assert.Equal(total, fired + canceled);
        Assert.InRange(fired, mustFire, total - mustCancel);
        Assert.InRange(canceled, mustCancel, total - mustFire);
        AssertDefaultWheelDrains();
    }

    /// <summary>
    /// Timeouts on the default wheel racing their inputs, started from plain threads and from workers: each input is
    /// completed at a random moment around its 1 ms timeout, from the starting thread or from a completer thread. Each
    /// timed task ends exactly once, with the input's value or a timeout, and no timer stays behind.
    /// </summary>
    [Fact]
    public async Task TimeoutsRacingTheirInputsFromWorkersAndThreadsEachEndExactlyOnce()
    {
        const int starters = 4;
        int perStarter = TestUtil.Stress(2_000);
        int total = starters * perStarter;
        var ended = new int[total];
        int succeeded = 0;
        int timedOut = 0;
        int duplicates = 0;
        int wrongValues = 0;
        var toComplete = new ConcurrentQueue<(Promise<int> input, int value)>();
        int startersLeft = starters;

        void Start(int id, Random rng)
        {
            var input = new Promise<int>();
            SpindleTask<int> timed = input.Task.WithTimeout(TimeSpan.FromMilliseconds(1));
            SpindleTask<int>.Awaiter awaiter = timed.GetAwaiter();
            awaiter.UnsafeOnCompleted(() =>
            {
                if (Interlocked.Increment(ref ended[id]) != 1)
                {
                    Interlocked.Increment(ref duplicates);
                }
                try
                {
                    if (awaiter.GetResult() != id)
                    {
                        Interlocked.Increment(ref wrongValues);
                    }
                    Interlocked.Increment(ref succeeded);
                }
                catch (TimeoutException)
                {
                    Interlocked.Increment(ref timedOut);
                }
            });
            switch (rng.Next(3))
            {
                case 0:
                    input.SetResult(id); // at once: the timer is cancelled quietly
                    break;
                case 1:
                    Thread.SpinWait(rng.Next(20_000)); // around the deadline, on this thread
                    input.SetResult(id);
                    break;
                default:
                    toComplete.Enqueue((input, id)); // from the completer thread
                    break;
            }
        }

        Task completer = TestUtil.RunOnThread(() =>
        {
            var rng = new Random(7);
            while (Volatile.Read(ref startersLeft) > 0 || !toComplete.IsEmpty)
            {
                if (toComplete.TryDequeue(out (Promise<int> input, int value) item))
                {
                    Thread.SpinWait(rng.Next(5_000));
                    item.input.SetResult(item.value);
                }
                else
                {
                    Thread.Yield();
                }
            }
        }, "completer");

        var tasks = new Task[starters];
        for (int s = 0; s < starters; s++)
        {
            int me = s;
            if (me % 2 == 0)
            {
                tasks[s] = TestUtil.RunOnThread(() =>
                {
                    var rng = new Random(me);
                    for (int i = 0; i < perStarter; i++)
                    {
                        Start(me * perStarter + i, rng);
                    }
                    Interlocked.Decrement(ref startersLeft);
                }, "timeout starter " + me);
            }
            else
            {
                tasks[s] = TestUtil.AwaitAsync(Spindle.Run(() =>
                {
                    var rng = new Random(me);
                    for (int i = 0; i < perStarter; i++)
                    {
                        Start(me * perStarter + i, rng);
                    }
                    Interlocked.Decrement(ref startersLeft);
                    return 0;
                }));
            }
        }
        await TestUtil.WithTimeout(Task.WhenAll(tasks), TestUtil.StressTimeout(30));
        await TestUtil.WithTimeout(completer, TestUtil.StressTimeout(30));
        TestUtil.SpinUntil(() => Volatile.Read(ref succeeded) + Volatile.Read(ref timedOut) == total, TestUtil.StressTimeout(30));

        Assert.Equal(0, duplicates);
        Assert.Equal(0, wrongValues);
        Assert.All(ended, e => Assert.Equal(1, e));
        Assert.Equal(total, succeeded + timedOut);
        AssertDefaultWheelDrains();
    }

    /// <summary>
    /// Periodic timers of 1-3 ms on the default wheel, each consumed by an async loop on the workers (some waits with a
    /// token a canceller fires), disposed at random moments by a disposer thread. Every loop ends exactly once, by a
    /// wait returning false or by the disposed timer's ObjectDisposedException, and nothing stays in the wheel.
    /// </summary>
    [Fact]
    public async Task PeriodicTimersDisposedConcurrentlyWithTheirWaitsEachEndExactlyOnce()
    {
        int timers = TestUtil.Stress(200);
        var periodic = new SpindlePeriodicTimer[timers];
        var ended = new int[timers];
        int endedFalse = 0;
        int endedDisposed = 0;
        int canceledWaits = 0;
        long ticks = 0;
        var unexpected = new ConcurrentQueue<Exception>();
        for (int i = 0; i < timers; i++)
        {
            periodic[i] = new SpindlePeriodicTimer(TimeSpan.FromMilliseconds(1 + i % 3));
        }

        async SpindleTask Consume(int i)
        {
            await Spindle.SwitchToWorker();
            var rng = new Random(i);
            try
            {
                while (true)
                {
                    bool ticked;
                    if (rng.Next(4) == 0)
                    {
                        using var cts = new CancellationTokenSource();
                        cts.CancelAfter(rng.Next(0, 3));
                        try
                        {
                            ticked = await periodic[i].WaitForNextTickAsync(cts.Token);
                        }
                        catch (OperationCanceledException)
                        {
                            Interlocked.Increment(ref canceledWaits);
                            continue; // the tick is not lost: the next wait returns at once if it has passed
                        }
                    }
                    else
                    {
                        ticked = await periodic[i].WaitForNextTickAsync();
                    }
                    if (!ticked)
                    {
                        Interlocked.Increment(ref endedFalse);
                        break;
                    }
                    Interlocked.Increment(ref ticks);
                }
            }
            catch (ObjectDisposedException)
            {
                Interlocked.Increment(ref endedDisposed); // disposed between two waits
            }
            catch (Exception ex)
            {
                unexpected.Enqueue(ex);
            }
            Interlocked.Increment(ref ended[i]);
        }

        var loops = new Task[timers];
        for (int i = 0; i < timers; i++)
        {
            loops[i] = TestUtil.AwaitAsync(Consume(i));
        }
        Task disposer = TestUtil.RunOnThread(() =>
        {
            var rng = new Random(3);
            int[] order = new int[timers];
            for (int i = 0; i < timers; i++)
            {
                order[i] = i;
            }
            for (int i = timers - 1; i > 0; i--)
            {
                int j = rng.Next(i + 1);
                (order[i], order[j]) = (order[j], order[i]);
            }
            foreach (int i in order)
            {
                Thread.SpinWait(rng.Next(50_000));
                periodic[i].Dispose();
            }
        }, "disposer");

        await TestUtil.WithTimeout(disposer, TestUtil.StressTimeout(30));
        var watch = System.Diagnostics.Stopwatch.StartNew();
        while (!Task.WhenAll(loops).IsCompleted)
        {
            if (watch.Elapsed > TimeSpan.FromSeconds(TestUtil.StressTimeout(10)))
            {
                int stuck = 0;
                foreach (int e in ended)
                {
                    stuck += e == 0 ? 1 : 0;
                }
                Assert.Fail($"{stuck} of {timers} consumer loops never ended after their timers were disposed; {unexpected.Count} unexpected exceptions; {TimerWheel.Default.Describe()}");
            }
            await Task.Delay(1);
        }
        await Task.WhenAll(loops);

        Assert.Empty(unexpected);
        Assert.All(ended, e => Assert.Equal(1, e));
        Assert.Equal(timers, endedFalse + endedDisposed);
        Assert.True(Volatile.Read(ref ticks) > 0, "no periodic timer ever ticked");
        AssertDefaultWheelDrains();
    }
}

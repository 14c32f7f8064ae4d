using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Diagnostics;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Threading;

/// <summary>
/// The whole park/spin/wake cycle under load, on a private pool: producers outside and inside, bursts separated by
/// pauses long enough for the workers to park, workers with timers that fire, refuse to park and time out at random
/// (every StandDown path), then quiet rounds in which a lost wake-up is a hang, then Dispose.
/// </summary>
public class WorkerPoolParkStressTests
{
    private sealed class Counted : WorkItem
    {
        private readonly Harness _h;
        private readonly int _id;
        private readonly int _children;

        public Counted(Harness h, int id, int children)
        {
            _h = h;
            _id = id;
            _children = children;
        }

        public override void Execute()
        {
            _h.Threads.TryAdd(Thread.CurrentThread, 0);
            if (Interlocked.Increment(ref _h.Ran[_id]) != 1)
            {
                Interlocked.Increment(ref _h.Duplicates);
            }
            // Children queued from the worker: the first into its run-next slot, the others displace it into the deque.
            for (int c = 0; c < _children; c++)
            {
                _h.Pool.Queue(_h.NewItem(_children - 1));
            }
            if ((_id & 63) == 0)
            {
                Thread.SpinWait(2000); // now and then a longer item, so thieves and parked workers have something to find
            }
            Interlocked.Increment(ref _h.Executed);
        }
    }

    private sealed class Harness
    {
        public readonly WorkerPool Pool;
        public readonly int[] Ran = new int[4_000_000];
        public readonly ConcurrentDictionary<Thread, byte> Threads = new();
        public int Created;
        public int Executed;
        public int Duplicates;

        public Harness(WorkerPool pool) => Pool = pool;

        public Counted NewItem(int children)
        {
            int id = Interlocked.Increment(ref Created) - 1;
            return new Counted(this, id, Math.Max(0, children));
        }

        public string State() => $"created {Volatile.Read(ref Created)}, executed {Volatile.Read(ref Executed)}, duplicates {Volatile.Read(ref Duplicates)} ({Pool.Describe()})";
    }

    [Fact]
    public async Task BurstsFromOutsideAndInside_WithTimersThatFireAndRefuseToPark_EveryItemRunsOnce_NoWakeUpIsLost_AndDisposeEndsEveryWorker()
    {
        const int Workers = 3;
        var pool = new WorkerPool(Workers, "park stress worker");
        var h = new Harness(pool);
        var timers = new List<ScriptedTimers>();
        try
        {
            // Timers on the workers that run the installing items (some workers may get none: that is fine).
            using (var installed = new CountdownEvent(Workers))
            {
                for (int w = 0; w < Workers; w++)
                {
                    var random = new Random(w);
                    ScriptedTimers? self = null;
                    var t = new ScriptedTimers(
                        _ =>
                        {
                            // Now and then a timer falls due before the next poll: a spinning owner stops spinning for it
                            // (review45: the spin's look for due timers, under the same bursts).
                            self!.ReportDue = random.Next(4) == 0;
                            return random.Next(10) switch
                            {
                                0 => (true, TimeSpan.FromMilliseconds(random.Next(0, 3))),  // a timer fired
                                1 => (false, TimeSpan.Zero),                                // one is due now
                                2 or 3 => (false, TimeSpan.FromMilliseconds(random.Next(1, 4))),
                                _ => (false, Timeout.InfiniteTimeSpan),
                            };
                        },
                        () => random.Next(8) != 0); // now and then a cancellation arrived: stay up
                    self = t;
                    timers.Add(t);
                    pool.Queue(new ActionItem(() =>
                    {
                        pool.GetOrAddCurrentWorkerTimers(static x => x, (WorkerTimers)t);
                        installed.Signal();
                    }));
                }
                Assert.True(installed.Wait(TimeSpan.FromSeconds(10)));
            }

            var clock = Stopwatch.StartNew();
            TimeSpan length = TimeSpan.FromSeconds(TestUtil.IsStress ? 60 : 4);
            var producers = new Task[2];
            for (int p = 0; p < producers.Length; p++)
            {
                int seed = 100 + p;
                producers[p] = TestUtil.RunOnThread(() =>
                {
                    var rng = new Random(seed);
                    while (clock.Elapsed < length && Volatile.Read(ref h.Created) < h.Ran.Length - 100_000)
                    {
                        int burst = rng.Next(1, 12);
                        for (int k = 0; k < burst; k++)
                        {
                            Counted item = h.NewItem(rng.Next(4) == 0 ? rng.Next(1, 4) : 0);
                            if (rng.Next(3) == 0)
                            {
                                pool.QueueShared(item);
                            }
                            else
                            {
                                pool.Queue(item);
                            }
                        }
                        switch (rng.Next(4))
                        {
                            case 0:
                                // Quiet: wait for everything, then let the workers spin down and park (mostly or fully).
                                TestUtil.SpinUntil(() => Volatile.Read(ref h.Executed) == Volatile.Read(ref h.Created), 10);
                                Thread.Sleep(rng.Next(0, 3));
                                break;
                            case 1:
                                Thread.Sleep(rng.Next(0, 2));
                                break;
                            case 2:
                                pool.TryRunHelpable(); // an outside waiter helping with jobs
                                break;
                            default:
                                Thread.SpinWait(rng.Next(10, 3000));
                                break;
                        }
                    }
                }, "park stress producer " + p);
            }
            await TestUtil.WithTimeout(Task.WhenAll(producers), (int)length.TotalSeconds + 60);
            TestUtil.SpinUntil(() => Volatile.Read(ref h.Executed) == Volatile.Read(ref h.Created), 10);

            // Quiet rounds with timers gone: every worker parks with no time limit, so a lost wake-up is a hang.
            int dueSeenBySpinners = 0;
            foreach (ScriptedTimers t in timers)
            {
                t.Pending = false;
                t.ReportDue = false;
                dueSeenBySpinners += t.DueSeenByOwner;
            }
            if (Spinning.Helps)
            {
                // On one processor (Spinning.Helps false) every yield of a spin gives the core to the producers and
                // takes a time slice, so the slow-yield rule ends each spin at its first yielding round, before the
                // look for due timers: that look may never run there (flaky49, section 46).
                Assert.True(dueSeenBySpinners > 0, "no spinning worker found one of its timers due: the spin's look was never run");
            }
            var rounds = new Random(5);
            for (int round = 0; round < 200; round++)
            {
                if (round % 4 == 0)
                {
                    SpinWait.SpinUntil(() => pool.IdleWorkers == Workers, 200);
                }
                else
                {
                    Thread.SpinWait(rounds.Next(0, 20_000));
                }
                pool.Queue(h.NewItem(rounds.Next(3)));
                var wait = Stopwatch.StartNew();
                while (Volatile.Read(ref h.Executed) != Volatile.Read(ref h.Created))
                {
                    Assert.True(wait.Elapsed < TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds), $"quiet round {round}: an item waits with workers parked: {h.State()}"); // a lost wake-up: the workers end up parked with no limit
                    Thread.Yield();
                }
            }
            Assert.Equal(0, Volatile.Read(ref h.Duplicates));
            int created = Volatile.Read(ref h.Created);
            for (int i = 0; i < created; i++)
            {
                Assert.True(h.Ran[i] == 1, $"item {i} ran {h.Ran[i]} times: {h.State()}");
            }
            Assert.True(created > 1000, $"only {created} items");
            // Workers that never park, not speed: the default bound (it was 2 s, which a loaded machine can use up).
            SpinWait.SpinUntil(() => pool.IdleWorkers == Workers, TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds));
            Assert.Equal(Workers, pool.IdleWorkers);
        }
        finally
        {
            pool.Dispose();
        }
        foreach (Thread thread in h.Threads.Keys)
        {
            // A worker Dispose did not wake never ends: the default bound (it was 5 s).
            Assert.True(thread.Join(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), $"{thread.Name} did not end after Dispose");
        }
    }

    [Fact]
    public void Dispose_WhileWorkersSpinParkAndAreClaimed_EndsEveryWorker()
    {
        for (int round = 0; round < 30; round++)
        {
            var pool = new WorkerPool(3, "dispose worker");
            var threads = new ConcurrentDictionary<Thread, byte>();
            using var seen = new CountdownEvent(3);
            using var gate = new ManualResetEventSlim(false);
            for (int w = 0; w < 3; w++)
            {
                // Hold each worker until all three are seen, so each thread is recorded.
                pool.Queue(new ActionItem(() =>
                {
                    if (threads.TryAdd(Thread.CurrentThread, 0))
                    {
                        seen.Signal();
                    }
                    gate.Wait(TimeSpan.FromSeconds(10));
                }));
            }
            Assert.True(seen.Wait(TimeSpan.FromSeconds(10)), "the three workers never each took an item");
            gate.Set();
            // Some churn so the dispose lands at a random point of spin, announce, claim and park.
            int n = round % 5 * 3;
            for (int i = 0; i < n; i++)
            {
                pool.Queue(new ActionItem(() => Thread.SpinWait(100)));
            }
            Thread.SpinWait(round * 1000);
            pool.Dispose();
            foreach (Thread thread in threads.Keys)
            {
                // A worker Dispose did not wake never ends: the default bound (it was 5 s).
                Assert.True(thread.Join(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), $"round {round}: {thread.Name} did not end after Dispose");
            }
        }
    }
}

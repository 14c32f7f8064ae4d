using System;
using System.Diagnostics;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Threading;

/// <summary>
/// Timers a test scripts: they stand in for a worker's timer wheel, so a test decides what each poll does. Polls
/// alternate on a worker with no work: the one before its spin, then the one on its park path.
/// </summary>
internal sealed class ScriptedTimers : WorkerTimers
{
    private readonly Func<int, (bool Ran, TimeSpan UntilNext)> _onPoll;
    private readonly Func<bool>? _tryPark;
    private int _polls;

    public ScriptedTimers(Func<int, (bool Ran, TimeSpan UntilNext)> onPoll, Func<bool>? tryPark = null)
    {
        _onPoll = onPoll;
        _tryPark = tryPark;
    }

    public volatile bool Pending = true;

    public override bool HasPending => Pending;

    public override bool Poll(out TimeSpan untilNext)
    {
        Volatile.Write(ref _owner, Environment.CurrentManagedThreadId);
        (bool ran, TimeSpan until) = _onPoll(++_polls);
        untilNext = until;
        return ran;
    }

    /// <summary>
    /// Set by a script to say a timer is due (<see cref="UntilDue"/> zero) until the next poll, so that a spinning owner
    /// stops spinning (WorkerPool's spin loop); otherwise none is published (infinite), as the base class says.
    /// </summary>
    public volatile bool ReportDue;

    private int _owner = -1;
    private int _dueSeenByOwner;

    /// <summary>How many times the owner (the thread that polls) read a due timer from <see cref="UntilDue"/>: its spin's look.</summary>
    public int DueSeenByOwner => Volatile.Read(ref _dueSeenByOwner);

    public override TimeSpan UntilDue()
    {
        if (!ReportDue)
        {
            return Timeout.InfiniteTimeSpan;
        }
        if (Environment.CurrentManagedThreadId == Volatile.Read(ref _owner))
        {
            Interlocked.Increment(ref _dueSeenByOwner);
        }
        return TimeSpan.Zero;
    }

    public override bool TryPark() => _tryPark?.Invoke() ?? true;
}

/// <summary>
/// The park path against timers whose continuations run on the worker (the default wheel's worker shards run them
/// inline): a worker must not run them while it is in the idle set, or a wake-up aimed at it waits for them while
/// another worker sleeps. Found by the review of the aimed wake-ups (a561e7d), which brought this in: with one shared
/// semaphore, the permit went to whichever worker was really waiting.
/// </summary>
public class WorkerPoolTimersWhileParkingTests
{
    [Fact]
    public void ItemQueuedFromOutside_WhileAWorkerRunsATimerContinuationOnItsParkPath_IsRunByTheParkedWorker()
    {
        // Two workers. W has timers; V has none. W's park-path poll runs a "continuation" that takes a while (it waits
        // for the outside item, up to 3 s, as user code that blocks or just computes would). V is parked. An item queued
        // from outside must be run by V at once, not wait for W's continuation.
        var pool = new WorkerPool(2, "timers-while-parking worker");
        try
        {
            // Not disposed: W's poll may still reach itemRan.Wait after the assertions (preempted between its Set and its
            // Wait, on a loaded machine), and a disposed event would throw there, on a worker, and crash the test host.
            var continuationStarted = new ManualResetEventSlim(false);
            var itemRan = new ManualResetEventSlim(false);
            int go = 0;
            int continuationThread = -1;
            var timers = new ScriptedTimers(poll =>
            {
                bool parkPath = poll % 2 == 0;
                if (parkPath && Volatile.Read(ref go) == 1 && Interlocked.Exchange(ref go, 2) == 1)
                {
                    continuationThread = Environment.CurrentManagedThreadId;
                    continuationStarted.Set();
                    itemRan.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)); // the continuation: until the item has run
                    return (true, TimeSpan.FromMilliseconds(300));
                }
                return (false, TimeSpan.FromMilliseconds(300)); // nothing due: the worker blocks up to 300 ms, and again
            });
            using var installed = new ManualResetEventSlim(false);
            pool.Queue(new ActionItem(() =>
            {
                pool.GetOrAddCurrentWorkerTimers(static t => t, (WorkerTimers)timers);
                installed.Set();
            }));
            Assert.True(installed.Wait(TimeSpan.FromSeconds(10)));
            // Let both settle: W cycles through 300 ms timed parks; V, which parks while W is announced or spinning,
            // parks with no limit.
            Thread.Sleep(700);
            Volatile.Write(ref go, 1);
            Assert.True(continuationStarted.Wait(TimeSpan.FromSeconds(10)), "W's park-path poll never came");

            var clock = Stopwatch.StartNew();
            int ranOn = -1;
            long ranAfterMs = -1;
            pool.Queue(new ActionItem(() =>
            {
                ranAfterMs = clock.ElapsedMilliseconds;
                ranOn = Environment.CurrentManagedThreadId;
                itemRan.Set();
            }));
            Assert.True(itemRan.Wait(TimeSpan.FromSeconds(2 * TestUtil.DefaultTimeoutSeconds)), $"the item never ran ({pool.Describe()})");
            Thread.MemoryBarrier();
            // Sent to W, the wake-up waits for W's continuation, which waits for the item up to the default timeout (it
            // ran 3000 ms later when that wait was 3 s): half of it tells the two apart, and a loaded machine does not
            // (the bound was 1 s).
            Assert.True(ranAfterMs < TestUtil.DefaultTimeoutSeconds * 1000 / 2,
                $"the item queued from outside ran {ranAfterMs} ms later (on {(ranOn == continuationThread ? "W, after its timer continuation" : "V")}), "
                + "while the other worker was parked: the wake-up went to the worker running the continuation");
            Assert.NotEqual(continuationThread, ranOn);
        }
        finally
        {
            pool.Dispose();
        }
    }
}

/// <summary>The same on the public API: a delay's continuation on a worker, and an item queued from outside meanwhile.</summary>
[Collection(SequentialCollection.Name)]
public class WorkerPoolTimersWhileParkingPublicTests
{
    [Fact]
    public async Task ItemQueuedFromOutside_WhileADelaysContinuationWaitsForIt_RunsPromptly()
    {
        // A worker awaits Spindle.Delay (its own timer shard, whose continuations run inline on it), then waits, briefly
        // and synchronously, for an item that a thread outside the pool queues when the continuation starts. Another
        // worker is parked and should run that item at once.
        if (Spindle.WorkerCount < 2)
        {
            return;
        }
        // The worst wait allowed. A wake-up sent to the worker running the continuation waits for it, and the continuation
        // waits for the item up to the default timeout (2002 ms when that wait was 2 s): half of it tells the two apart,
        // and a loaded machine's scheduling delays do not (the bound was 500 ms, the worst of thousands of waits).
        const long WorstMs = TestUtil.DefaultTimeoutSeconds * 1000 / 2;
        using var started = new SemaphoreSlim(0);
        using var itemRan = new SemaphoreSlim(0);
        int stop = 0;
        int iterations = 0;
        long worstMs = 0;
        Task outside = TestUtil.RunOnThread(() =>
        {
            while (Volatile.Read(ref stop) == 0)
            {
                if (!started.Wait(50))
                {
                    continue;
                }
                Spindle.Run(() => { itemRan.Release(); });
            }
        }, "timers-while-parking producer");
        try
        {
            await TestUtil.WithTimeout(Spindle.Run(async () =>
            {
                var clock = Stopwatch.StartNew();
                while (clock.Elapsed < TimeSpan.FromSeconds(TestUtil.IsStress ? 60 : 5) && Volatile.Read(ref worstMs) < WorstMs)
                {
                    await Spindle.Delay(TimeSpan.FromMilliseconds(1));
                    var wait = Stopwatch.StartNew();
                    started.Release();
                    itemRan.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds));
                    worstMs = Math.Max(worstMs, wait.ElapsedMilliseconds);
                    iterations++;
                }
            }), TestUtil.StressTimeout(60)); // the loop runs 5 s, or 60 s under SPINDLE_STRESS
        }
        finally
        {
            Volatile.Write(ref stop, 1);
        }
        await TestUtil.WithTimeout(outside, 10);
        Assert.True(worstMs < WorstMs, $"an item queued from outside waited {worstMs} ms for a worker's delay continuation, with another worker parked ({iterations} iterations)");
    }
}

using System;
using System.Collections.Concurrent;
using System.Diagnostics;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Time;

/// <summary>
/// A worker fires its due timers in a pass and runs their continuations inline there: a continuation that blocks or
/// computes for long must not hold the worker's other timers, which an idle worker fires meanwhile (the owner lends its
/// shard around each inline continuation, and a rescuer takes over a pass that has run too long). Real clock; the tests
/// wait for conditions, never for a sleep.
/// </summary>
[Collection(SequentialCollection.Name)]
public class StuckPassRescueTests
{
    /// <summary>
    /// Starts, in one item on a worker, a short delay whose continuation (run inline by that worker's pass, once the item
    /// has returned) calls <paramref name="hold"/>, which must return once the event it is given is set, and
    /// <paramref name="others"/> later delays in the same shard. Every later delay must fire while the holder holds (the
    /// event is set after that, or after the suite's bound), none early and none on the held worker. False, having tested
    /// nothing, if the holder's delay was not fired by its worker's own pass (a preempted item let a rescuer fire it).
    /// </summary>
    /// <remarks>
    /// A delay that a rescuer fired before its await looked (the item preempted for longer than the delay, as under load)
    /// resumes inline, on the owner, inside the item that is still starting the others: the holder must not hold there (it
    /// held the item itself, so the item never returned and the run timed out after 30 s: 2 of 54 runs of this class
    /// beside other builds, load 30-41, a probe showing the holder holding and no other delay started), and a delay that
    /// resumes so was not run by the held worker. What runs on the owner before the item has returned is the item.
    /// </remarks>
    private static async Task<bool> HoldAPassOnce(Action<ManualResetEventSlim> hold, int others)
    {
        // Not disposed: a holder that reaches hold() only after this method has left (a timeout below) must meet an event
        // that is set, not a disposed one.
        var release = new ManualResetEventSlim();
        var fired = new TaskCompletionSource[others];
        for (int i = 0; i < others; i++)
        {
            fired[i] = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        }
        var early = new ConcurrentQueue<string>();
        var holding = new TaskCompletionSource<int>(TaskCreationOptions.RunContinuationsAsynchronously);
        int ownerThread = 0;
        int itemReturned = 0;
        bool tested;
        int ranOnTheHeldWorker = 0;
        Task all = Task.WhenAll(Array.ConvertAll(fired, f => f.Task));

        async SpindleTask Holder()
        {
            await Spindle.Delay(5);
            if (InsideTheItem())
            {
                holding.TrySetResult(0); // fired before the await looked: not held by a pass, tested nothing
                return;
            }
            holding.TrySetResult(Environment.CurrentManagedThreadId);
            hold(release);
        }

        async SpindleTask Other(int i)
        {
            int ms = 25 + 5 * i;
            long start = Stopwatch.GetTimestamp();
            await Spindle.Delay(ms);
            double waited = Stopwatch.GetElapsedTime(start).TotalMilliseconds;
            if (waited < ms)
            {
                early.Enqueue($"a {ms} ms delay completed after {waited:F3} ms");
            }
            if (Environment.CurrentManagedThreadId == Volatile.Read(ref ownerThread) && !InsideTheItem())
            {
                Interlocked.Increment(ref ranOnTheHeldWorker);
            }
            fired[i].SetResult();
        }

        bool InsideTheItem() => Environment.CurrentManagedThreadId == Volatile.Read(ref ownerThread) && Volatile.Read(ref itemReturned) == 0;

        // The holder holds a worker until the event is set: set on every path, the run's own timeout too (else that
        // worker of the shared pool stays held for the hold's bound, into the tests that follow).
        try
        {
            await TestUtil.WithTimeout(Spindle.Run(() =>
            {
                Volatile.Write(ref ownerThread, Environment.CurrentManagedThreadId);
                Holder().Forget(); // every delay goes into this worker's own shard, the holder's first
                for (int i = 0; i < others; i++)
                {
                    Other(i).Forget();
                }
                // The item returns at once: the worker's own pass fires the holder, and runs its continuation inline.
                Volatile.Write(ref itemReturned, 1);
            }));
            await TestUtil.LeaveSpindleWorkers(); // the item's completion may resume this method on its worker
            // Not held if the holder's delay was fired elsewhere (a rescue while the item still ran, on a preempted thread).
            tested = await TestUtil.WithTimeout(holding.Task) == ownerThread;
            if (tested)
            {
                Task first = await Task.WhenAny(all, Task.Delay(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)));
                Assert.True(first == all,
                    $"the delays of a worker held inside a timer's continuation did not fire while it was held; {TimerWheel.Default.Describe()}; {WorkerPool.Shared.Describe()}");
                Assert.Empty(early);
                Assert.Equal(0, Volatile.Read(ref ranOnTheHeldWorker));
            }
        }
        finally
        {
            release.Set();
        }
        await TestUtil.WithTimeout(all);
        TestUtil.SpinUntil(() => TimerWheel.Default.PendingCount == 0, () => TimerWheel.Default.Describe());
        return tested;
    }

    /// <summary>Runs <see cref="HoldAPassOnce"/> until it has tested a held pass, a few times at most.</summary>
    private static async Task HoldAPassWhileOthersFallDue(Action<ManualResetEventSlim> hold, int others)
    {
        for (int attempt = 0; attempt < 10; attempt++)
        {
            if (await HoldAPassOnce(hold, others))
            {
                return;
            }
        }
        Assert.Fail("the holding delay never fired in its own worker's pass");
    }

    [Fact]
    public async Task AContinuationThatBlocks_InsideItsWorkersPass_DoesNotHoldThatWorkersOtherTimers()
    {
        if (!await WorkerShardRescueTests.LeaveWorkersEachWithAShard())
        {
            return; // the rescuer is another worker (SPINDLE_WORKERS=1 runs have none)
        }
        // A blocking call (not a Spindle wait, so the worker does not help) that returns once the other delays have fired.
        await HoldAPassWhileOthersFallDue(release => release.Wait(TimeSpan.FromSeconds(2 * TestUtil.DefaultTimeoutSeconds)), others: 8);
    }

    [Fact]
    public async Task AContinuationThatComputesForLong_InsideItsWorkersPass_DoesNotHoldThatWorkersOtherTimers()
    {
        if (!await WorkerShardRescueTests.LeaveWorkersEachWithAShard())
        {
            return; // the rescuer is another worker (SPINDLE_WORKERS=1 runs have none)
        }
        await HoldAPassWhileOthersFallDue(release =>
        {
            long start = Stopwatch.GetTimestamp();
            // CPU-bound work that ends once the other delays have fired, or after the suite's bound.
            while (!release.IsSet && Stopwatch.GetElapsedTime(start) < TimeSpan.FromSeconds(2 * TestUtil.DefaultTimeoutSeconds))
            {
                Thread.SpinWait(20);
            }
        }, others: 8);
    }

    /// <summary>
    /// More timers than a batch holds, due together, the first of which holds its worker's pass: the rest of the slot,
    /// fired by a rescuer that takes the pass over where it stopped, must run in the order the timers were started.
    /// </summary>
    [Fact]
    public async Task TimersDueWithOneThatHoldsThePass_RunInTheOrderTheyWereStarted()
    {
        if (!await WorkerShardRescueTests.LeaveWorkersEachWithAShard())
        {
            return; // the rescuer is another worker (SPINDLE_WORKERS=1 runs have none)
        }
        const int Count = 2 * TimerBatch.Capacity + 10; // the held one, then more than two batches
        for (int attempt = 0; attempt < 10; attempt++)
        {
            var order = new ConcurrentQueue<int>();
            var rest = new ManualResetEventSlim(); // not disposed: the first timer may reach its wait after a timeout below
            int ownerThread = 0;
            int itemReturned = 0;
            int ranInsideTheItem = 0;
            int heldOnItsWorker = -1;
            var ranOn = new ConcurrentQueue<int>();
            // The first timer holds its worker until rest is set: set on every path, the run's own timeout too.
            try
            {
                await TestUtil.WithTimeout(Spindle.Run(() =>
                {
                    Volatile.Write(ref ownerThread, Environment.CurrentManagedThreadId);
                    for (int i = 0; i < Count; i++)
                    {
                        int index = i;
                        Spindle.Delay(30).ContinueWithForTest(() =>
                        {
                            // On the owner before the item has returned: fired by a rescuer before this continuation was
                            // registered (the item preempted for 30 ms), so it runs inline, inside the item, which must
                            // not block (the rest would never be started: a 30 s timeout under load), and tests nothing.
                            bool insideTheItem = Environment.CurrentManagedThreadId == Volatile.Read(ref ownerThread) && Volatile.Read(ref itemReturned) == 0;
                            if (insideTheItem)
                            {
                                Volatile.Write(ref ranInsideTheItem, 1);
                            }
                            if (index == 0)
                            {
                                bool onOwner = Environment.CurrentManagedThreadId == Volatile.Read(ref ownerThread) && !insideTheItem;
                                Volatile.Write(ref heldOnItsWorker, onOwner ? 1 : 0);
                                if (onOwner)
                                {
                                    rest.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)); // blocks, not helping
                                }
                                return;
                            }
                            ranOn.Enqueue(Environment.CurrentManagedThreadId);
                            order.Enqueue(index);
                            if (order.Count == Count - 1)
                            {
                                rest.Set();
                            }
                        });
                    }
                    Volatile.Write(ref itemReturned, 1);
                }));
                await TestUtil.LeaveSpindleWorkers(); // the item's completion may resume this method on its worker
                Assert.True(rest.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)),
                    $"the timers due with one that held its worker's pass did not run; {TimerWheel.Default.Describe()}; {WorkerPool.Shared.Describe()}");
            }
            finally
            {
                rest.Set();
            }
            TestUtil.SpinUntil(() => Volatile.Read(ref heldOnItsWorker) >= 0 && TimerWheel.Default.PendingCount == 0);
            if (heldOnItsWorker == 1 && Volatile.Read(ref ranInsideTheItem) == 0) // else a rescuer fired some during the item (a preempted item): try again
            {
                Assert.All(ranOn, thread => Assert.NotEqual(ownerThread, thread));
                Assert.Equal(Enumerable.Range(1, Count - 1), order.ToArray());
                return;
            }
        }
        Assert.Fail("the holding delay never fired in its own worker's pass");
    }

    /// <summary>
    /// Many delay loops on every worker, some of whose continuations block or compute for a few milliseconds (so passes may
    /// be taken over while others start timers, cancel them and fire: whether one is depends on a worker running dry
    /// meanwhile, which a loaded machine may not give), and a thread that cancels some delays: every delay of every loop
    /// must end exactly once (fired, not early, or cancelled), and each loop must finish.
    /// </summary>
    [Fact]
    public async Task LoopsWhoseContinuationsSometimesHoldThePass_EndEveryDelayExactlyOnce()
    {
        if (!await WorkerShardRescueTests.LeaveWorkersEachWithAShard())
        {
            return; // the rescuer is another worker (SPINDLE_WORKERS=1 runs have none)
        }
        const int LoopsPerWorker = 200; // few enough that a worker runs dry between ticks, and rescues
        int rounds = TestUtil.Stress(20);
        int loops = LoopsPerWorker * Spindle.WorkerCount;
        var ended = new int[loops * rounds];
        var problems = new ConcurrentQueue<string>();
        var toCancel = new ConcurrentQueue<CancellationTokenSource>();
        long done = 0;
        int finished = 0;
        var allFinished = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        int stop = 0;

        async SpindleTask Loop(int loop)
        {
            var random = new Random(loop);
            try
            {
                for (int round = 0; round < rounds; round++)
                {
                    int id = loop * rounds + round;
                    int ms = 1 + random.Next(20);
                    using var cts = random.Next(10) == 0 ? new CancellationTokenSource() : null;
                    if (cts is not null)
                    {
                        toCancel.Enqueue(cts);
                    }
                    long start = Stopwatch.GetTimestamp();
                    try
                    {
                        await Spindle.Delay(ms, cts?.Token ?? default);
                        double waited = Stopwatch.GetElapsedTime(start).TotalMilliseconds;
                        if (waited < ms)
                        {
                            problems.Enqueue($"delay {id} of {ms} ms fired after {waited:F3} ms");
                        }
                    }
                    catch (OperationCanceledException)
                    {
                    }
                    if (Interlocked.Increment(ref ended[id]) != 1)
                    {
                        problems.Enqueue($"delay {id} ended twice");
                    }
                    Interlocked.Increment(ref done);
                    switch (random.Next(100))
                    {
                        case 0:
                            Thread.Sleep(2 + random.Next(10)); // a blocking call, inside the pass that fired this delay
                            break;
                        case 1:
                            long spinStart = Stopwatch.GetTimestamp();
                            int spinMs = 2 + random.Next(10);
                            while (Stopwatch.GetElapsedTime(spinStart).TotalMilliseconds < spinMs)
                            {
                                Thread.SpinWait(20); // a long computation, inside the pass
                            }
                            break;
                    }
                }
            }
            catch (Exception ex)
            {
                problems.Enqueue(ex.ToString());
            }
            finally
            {
                if (Interlocked.Increment(ref finished) == loops)
                {
                    allFinished.SetResult();
                }
            }
        }

        Task canceller = TestUtil.RunOnThread(() =>
        {
            var random = new Random(7);
            while (Volatile.Read(ref stop) == 0)
            {
                if (toCancel.TryDequeue(out CancellationTokenSource? cts))
                {
                    try
                    {
                        cts.CancelAfter(random.Next(3)); // now, or as it may fire
                    }
                    catch (ObjectDisposedException)
                    {
                        // its delay has ended and its loop moved on
                    }
                }
                else
                {
                    Thread.Yield();
                }
            }
        }, "canceller");
        int next = -1;
        await TestUtil.RunOnEveryWorkerAtOnce(() =>
        {
            for (int i = 0; i < LoopsPerWorker; i++)
            {
                Loop(Interlocked.Increment(ref next)).Forget(); // its first delay goes into this worker's shard
            }
        });
        await TestUtil.LeaveSpindleWorkers(); // the items' completion may resume this method on a worker
        try
        {
            await TestUtil.WithStallTimeout(allFinished.Task, () => Volatile.Read(ref done),
                () => $"{Volatile.Read(ref finished)} of {loops} loops finished; {TimerWheel.Default.Describe()}; {WorkerPool.Shared.Describe()}");
        }
        finally
        {
            Volatile.Write(ref stop, 1);
        }
        await TestUtil.WithTimeout(canceller);
        Assert.Empty(problems);
        Assert.All(ended, count => Assert.Equal(1, count));
        TestUtil.SpinUntil(() => TimerWheel.Default.PendingCount == 0, () => TimerWheel.Default.Describe());
    }
}

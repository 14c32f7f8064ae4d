using System;
using System.Collections.Concurrent;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Threading;

/// <summary>
/// A worker that awaits the <see cref="Spindle.Run(Action)"/> item it has just queued runs it inline, instead of
/// suspending and running it next from its loop. These tests pin down what that may and may not change.
/// </summary>
[Collection(SequentialCollection.Name)]
public class RunInlineTests
{
    private static readonly AsyncLocal<int> s_local = new();

    [NetBuildFact("nothing is run inline: without ExecutionContext.Restore the awaiting code's context could not be put back")]
    public async Task AwaitOnAWorker_RunsTheItemOnThatWorker_BeforeTheAwaitWouldSuspend()
    {
        // The awaiter's IsCompleted is where the compiler decides to suspend: the item has run when it returns true. One
        // look in 65 is declined by design (the inline budget), and an idle worker may take the item first (a worker about
        // to park takes a run-next item at first sight, a spinning one an item it has seen twice): with one worker trying
        // and the other idle, 50 tries in a row lost it so under load (1 of 4 suite runs beside a spinning process, stop 60:
        // "no await of a just-queued item ran it inline in 50 tries", in 11 ms, so each lost try was a steal, not a
        // preemption). So every worker tries at once, as ALongRunOfInlineAwaits_DeclinesOneNowAndThen does, and one that
        // ends first waits at a blocking barrier (which does not help): no worker is idle to steal. A steal can still
        // happen (work left by another test), so each worker has up to 50 tries, and the test passes on any worker's
        // inline run; the first try normally succeeds on every worker.
        await TestUtil.LeaveSpindleWorkers();
        var results = new ConcurrentQueue<(bool Inline, int Awaiter, int RanOn, int Tries)>();
        using var finished = new Barrier(Spindle.WorkerCount);
        await TestUtil.RunOnEveryWorkerAtOnce(() =>
        {
            int me = Environment.CurrentManagedThreadId;
            (bool, int, int, int) outcome = (false, me, 0, 50);
            for (int attempt = 0; attempt < 50; attempt++)
            {
                int ran = 0;
                SpindleTask task = Spindle.Run(() => { ran = Environment.CurrentManagedThreadId; });
                if (task.GetAwaiter().IsCompleted)
                {
                    task.GetAwaiter().GetResult();
                    if (ran == me)
                    {
                        outcome = (true, me, ran, attempt + 1);
                        break;
                    }
                    // Another thread took it and ran it before IsCompleted looked: it was complete, not run inline.
                    continue;
                }
                task.GetAwaiter().GetResult(); // a worker that blocks helps: this runs the item if nobody else has
            }
            results.Enqueue(outcome);
            Assert.True(finished.SignalAndWait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "every worker should finish its tries");
        });

        Assert.Equal(Spindle.WorkerCount, results.Count);
        Assert.True(results.Any(r => r.Inline), "no await of a just-queued item ran it inline in 50 tries on any worker: " +
            string.Join(", ", results.Select(r => "worker " + r.Awaiter + ": " + r.Tries + " tries")));
        Assert.All(results.Where(r => r.Inline), r => Assert.Equal(r.Awaiter, r.RanOn));
    }

    [Fact]
    public async Task AwaitFromAThreadThatIsNotAWorker_StillRunsTheItemOnAWorker()
    {
        string? ranOn = null;
        await TestUtil.WithTimeout(Spindle.Run(() => { ranOn = Thread.CurrentThread.Name; }));
        Assert.StartsWith("Spindle worker", ranOn, StringComparison.Ordinal);
    }

    [Fact]
    public async Task InlineRun_SeesTheAwaitersAsyncLocals_AndItsChangesDoNotLeakBack()
    {
        (int seenInside, int afterAwait, int resultSeen) = await TestUtil.WithTimeout(Spindle.Run(async () =>
        {
            s_local.Value = 5;
            int inside = 0;
            await Spindle.Run(() =>
            {
                inside = s_local.Value;
                s_local.Value = 99; // a change made by the item belongs to the item
            });
            int after = s_local.Value;
            int seen = await Spindle.Run(() =>
            {
                int v = s_local.Value;
                s_local.Value = 42;
                return v;
            });
            return (inside, after, seen);
        }));

        Assert.Equal(5, seenInside);
        Assert.Equal(5, afterAwait);
        Assert.Equal(5, resultSeen);
    }

    [Fact]
    public async Task AnItemQueuedUnderAnotherContext_IsNotRunInline_AndStillSeesItsOwnContext()
    {
        (int seen, int after) = await TestUtil.WithTimeout(Spindle.Run(async () =>
        {
            s_local.Value = 1;
            SpindleTask<int> task = Spindle.Run(() => s_local.Value);
            s_local.Value = 2; // the awaiting code's context now differs from the item's
            int v = await task;
            return (v, s_local.Value);
        }));

        Assert.Equal(1, seen);
        Assert.Equal(2, after);
    }

    [Fact]
    public async Task InlineRun_ThatThrows_FaultsTheTask_AndTheAwaiterSeesTheException()
    {
        string message = await TestUtil.WithTimeout(Spindle.Run(async () =>
        {
            try
            {
                await Spindle.Run(() => throw new InvalidOperationException("inline boom"));
                return "no exception";
            }
            catch (InvalidOperationException ex)
            {
                return ex.Message;
            }
        }));

        Assert.Equal("inline boom", message);
    }

    [Fact]
    public async Task AnItemNotInTheRunNextSlot_IsNotRunInline_AndBothStillRun()
    {
        // The second Run displaces the first into the deque: awaiting the first cannot take it back from the slot.
        (int first, int second) = await TestUtil.WithTimeout(Spindle.Run(async () =>
        {
            SpindleTask<int> a = Spindle.Run(() => 1);
            SpindleTask<int> b = Spindle.Run(() => 2);
            int x = await a;
            int y = await b;
            return (x, y);
        }));

        Assert.Equal((1, 2), (first, second));
    }

    [Fact]
    public async Task ALongRunOfInlineAwaits_DeclinesOneNowAndThen_SoTheWorkersLoopGetsATurn()
    {
        // The inline budget is 64: of 200 consecutive awaits of just-queued items, at least three must suspend (be
        // declined) rather than run inline. Without the budget, none would. Every worker runs the loop at once, and one
        // that ends first waits at a barrier (a blocking wait, which does not help), so none is idle to steal: a thief
        // that ran an item first spared its owner a take-back and the budget a count, and on a loaded machine one steal
        // left 2 declines of 200. A steal can still happen (work left by another test, a worker that helps while it waits
        // for its declined item), so an attempt in which any item ran on another thread proves nothing and is tried
        // again; in one where none did, every decline is the budget's, and there are at least three.
        await TestUtil.LeaveSpindleWorkers();
        var attempts = new System.Text.StringBuilder();
        for (int attempt = 0; attempt < 10; attempt++)
        {
            var results = new ConcurrentQueue<(int Declined, int Stolen)>();
            using var finished = new Barrier(Spindle.WorkerCount);
            await TestUtil.RunOnEveryWorkerAtOnce(() =>
            {
                int me = Environment.CurrentManagedThreadId;
                int declined = 0;
                int stolen = 0;
                for (int i = 0; i < 200; i++)
                {
                    int ranOn = 0;
                    SpindleTask task = Spindle.Run(() => { ranOn = Environment.CurrentManagedThreadId; });
                    if (!task.GetAwaiter().IsCompleted)
                    {
                        declined++;
                    }
                    task.GetAwaiter().GetResult();
                    if (ranOn != me)
                    {
                        stolen++;
                    }
                }
                results.Enqueue((declined, stolen));
                Assert.True(finished.SignalAndWait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "every worker should finish its loop");
            });

            Assert.Equal(Spindle.WorkerCount, results.Count);
            attempts.Append(" [").Append(string.Join(", ", results.Select(r => r.Declined + " declined, " + r.Stolen + " stolen"))).Append(']');
            if (results.All(r => r.Stolen == 0))
            {
                Assert.All(results, r => Assert.InRange(r.Declined, 3, 200));
                return;
            }
        }
        Assert.Fail("an item was stolen in every one of 10 attempts:" + attempts);
    }

    [Fact]
    public async Task ALongRunOfInlineAwaits_StillLetsTheWorkersOwnTimersFire()
    {
        // A delay started on a worker goes into that worker's own timer shard, which only that worker polls. A loop of
        // inline awaits never returns to the worker's loop by itself; the inline budget makes it suspend now and then.
        // The test's proof is that the loop ends (WithTimeout fails it otherwise). An attempt whose worker was preempted
        // for the whole delay before its first await (a loaded machine) exercised nothing, so it is tried again.
        long iterations = 0;
        for (int attempt = 0; attempt < 10 && iterations == 0; attempt++)
        {
            iterations = await TestUtil.WithTimeout(Spindle.Run(async () =>
            {
                SpindleTask delay = Spindle.Delay(TimeSpan.FromMilliseconds(5));
                long n = 0;
                while (!delay.IsCompleted)
                {
                    await Spindle.Run(static () => { });
                    n++;
                }
                await delay;
                return n;
            }));
        }

        Assert.True(iterations > 0, "in 10 attempts the 5 ms delay fired before the loop's first await: nothing was exercised");
    }

    [Fact]
    public async Task ManyWorkersAwaitingTheirOwnRuns_WhileOthersSteal_LoseAndRepeatNothing()
    {
        // Inline take-back and a thief's steal race on the same run-next slot: each item must run exactly once.
        const int Chains = 8;
        int perChain = TestUtil.Stress(20_000);
        var runs = new int[Chains * perChain];
        var chains = new Task[Chains];
        for (int c = 0; c < Chains; c++)
        {
            int chain = c;
            chains[c] = TestUtil.AwaitAsync(Spindle.Run(async () =>
            {
                for (int i = 0; i < perChain; i++)
                {
                    int slot = chain * perChain + i;
                    await Spindle.Run(() => Interlocked.Increment(ref runs[slot]));
                    if (Volatile.Read(ref runs[slot]) != 1)
                    {
                        throw new InvalidOperationException($"item {slot} ran {runs[slot]} times before its await returned");
                    }
                }
            }));
        }
        await TestUtil.WithTimeout(Task.WhenAll(chains), TestUtil.StressTimeout(60));

        for (int i = 0; i < runs.Length; i++)
        {
            Assert.True(runs[i] == 1, $"item {i} ran {runs[i]} times");
        }
    }
}

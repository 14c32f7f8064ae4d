using System;
using System.Collections.Generic;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using SpindleLib.Tests.Scopes;

namespace SpindleLib.Tests.Threading;

/// <summary>
/// Spindle.Run with a CancellationToken, as Task.Run(work, token): a token that wins before the work starts ends the task
/// as cancelled at once (even while the item still waits in a queue) and the work never runs; once the work has started
/// the token no longer touches the task. Several tests occupy every worker, so these run alone.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class RunCancellationTests
{
    private static void AssertCanceledWith(CancellationToken token, SpindleTask task)
    {
        Assert.Equal(SpindleTaskStatus.Canceled, task.Status);
        OperationCanceledException e = Assert.ThrowsAny<OperationCanceledException>(() => task.GetAwaiter().GetResult());
        Assert.Equal(token, e.CancellationToken);
    }

    private static void AssertCanceledWith<T>(CancellationToken token, SpindleTask<T> task)
    {
        Assert.Equal(SpindleTaskStatus.Canceled, task.Status);
        OperationCanceledException e = Assert.ThrowsAny<OperationCanceledException>(() => task.GetAwaiter().GetResult());
        Assert.Equal(token, e.CancellationToken);
    }

    /// <summary>
    /// How many holders a cancelled run's item still has (RunItem's <c>_holds</c>): 2 while it waits in a queue, 1 once the
    /// worker that dequeued it has let go, so that the consumer's read is the last and returns it to the reader's pool.
    /// </summary>
    private static int QueueHolds(object item)
        => (int)item.GetType().GetField("_holds", System.Reflection.BindingFlags.NonPublic | System.Reflection.BindingFlags.Instance)!.GetValue(item)!;

    [Fact]
    public void AlreadyCancelled_EveryOverload_GivesACancelledTask_AndRunsNothing()
    {
        using var cts = new CancellationTokenSource();
        cts.Cancel();
        int ran = 0;

        AssertCanceledWith(cts.Token, Spindle.Run(() => { ran++; }, cts.Token));
        AssertCanceledWith(cts.Token, Spindle.Run(() => ++ran, cts.Token));
        AssertCanceledWith(cts.Token, Spindle.Run(() => { ran++; return SpindleTask.CompletedTask; }, cts.Token));
        AssertCanceledWith(cts.Token, Spindle.Run(() => { ran++; return SpindleTask.FromResult(1); }, cts.Token));

        Thread.Sleep(50); // had anything been queued, a worker would have run it by now
        Assert.Equal(0, Volatile.Read(ref ran));
        Assert.Equal(0, TokenRegistrationLeakTests.RegistrationCount(cts));
    }

    [Fact]
    public async Task TokenNeverCancelled_EveryOverload_RunsAndLeavesNoRegistration()
    {
        using var cts = new CancellationTokenSource();

        await TestUtil.WithTimeout(Spindle.Run(() => Assert.True(TestUtil.OnSpindleWorker), cts.Token));
        Assert.Equal(5, await TestUtil.WithTimeout(Spindle.Run(() => 5, cts.Token)));
        await TestUtil.WithTimeout(Spindle.Run(async () => await Spindle.Yield(), cts.Token));
        Assert.Equal(6, await TestUtil.WithTimeout(Spindle.Run(async () =>
        {
            await Spindle.Yield();
            return 6;
        }, cts.Token)));

        Assert.Equal(0, TokenRegistrationLeakTests.RegistrationCount(cts));
    }

    [Fact]
    public async Task TokenThatCannotBeCancelled_RunsAsWithoutOne()
    {
        Assert.Equal(3, await TestUtil.WithTimeout(Spindle.Run(() => 3, new CancellationToken(false))));
        Assert.Equal(4, await TestUtil.WithTimeout(Spindle.Run(() => SpindleTask.FromResult(4), CancellationToken.None)));
    }

    [Fact]
    public void NullWork_ThrowsWithAToken()
    {
        using var cts = new CancellationTokenSource();
        Assert.Equal("action", Assert.Throws<ArgumentNullException>(() => Spindle.Run((Action)null!, cts.Token)).ParamName);
        Assert.Equal("function", Assert.Throws<ArgumentNullException>(() => Spindle.Run((Func<int>)null!, cts.Token)).ParamName);
        Assert.Equal("function", Assert.Throws<ArgumentNullException>(() => Spindle.Run((Func<SpindleTask>)null!, cts.Token)).ParamName);
        Assert.Equal("function", Assert.Throws<ArgumentNullException>(() => Spindle.Run((Func<SpindleTask<int>>)null!, cts.Token)).ParamName);
        Assert.Equal(0, TokenRegistrationLeakTests.RegistrationCount(cts));
    }

    [Fact]
    public async Task CancelledWhileQueued_EndsAtOnce_TheWorkNeverRuns_AndTheItemIsReusedAfterwards()
    {
        await TestUtil.LeaveSpindleWorkers(); // HoldWorkers must be created off them (a test can start on one)
        using var cts = new CancellationTokenSource();
        int ran = 0;
        SpindleTask action;
        SpindleTask<int> function;
        SpindleTask asyncAction;
        SpindleTask<int> asyncFunction;
        var readLater = new SpindleTask<int>[4];
        var items = new HashSet<object>(ReferenceEqualityComparer.Instance);
        using (new HoldWorkers())
        {
            action = Spindle.Run(() => { Interlocked.Increment(ref ran); }, cts.Token);
            function = Spindle.Run(() => Interlocked.Increment(ref ran), cts.Token);
            asyncAction = Spindle.Run(() => { Interlocked.Increment(ref ran); return SpindleTask.CompletedTask; }, cts.Token);
            asyncFunction = Spindle.Run(() => SpindleTask.FromResult(Interlocked.Increment(ref ran)), cts.Token);
            for (int i = 0; i < readLater.Length; i++)
            {
                readLater[i] = Spindle.Run(() => Interlocked.Increment(ref ran), cts.Token);
                items.Add(readLater[i]._source!);
            }
            Assert.Equal(SpindleTaskStatus.Pending, action.Status);
            Assert.Equal(SpindleTaskStatus.Pending, function.Status);

            cts.Cancel(); // every worker is still busy: the items are in a queue

            // Read before any worker is free: they ended at the cancellation, not when a worker reached them. (The
            // workers then let go of these items last.)
            AssertCanceledWith(cts.Token, action);
            AssertCanceledWith(cts.Token, function);
            AssertCanceledWith(cts.Token, asyncAction);
            AssertCanceledWith(cts.Token, asyncFunction);
            foreach (SpindleTask<int> t in readLater)
            {
                Assert.Equal(SpindleTaskStatus.Canceled, t.Status); // ended, but not read yet
            }
        }

        // The workers now reach the cancelled items, let go of them, and run nothing.
        await TestUtil.WithTimeout(Spindle.Run(() => { }));
        // Each item's worker must have let go of it before this thread reads it, or the item goes back to that worker's
        // pool, not this thread's. A later item's completion does not prove that (another worker may have dequeued an
        // item and not yet let go), and a 50 ms sleep here was too short under load: wait for the holds themselves.
        TestUtil.SpinUntil(() => readLater.All(t => QueueHolds(t._source!) == 1),
            () => "holds: " + string.Join(",", readLater.Select(t => QueueHolds(t._source!))));
        Assert.Equal(0, Volatile.Read(ref ran));
        // Read last, these go back to this thread's pool here, and the next runs rented on this thread, before it
        // awaits anything (an await may resume on another thread, with another pool), get those very items.
        foreach (SpindleTask<int> t in readLater)
        {
            AssertCanceledWith(cts.Token, t);
        }
        using var again = new CancellationTokenSource();
        var next = new SpindleTask<int>[readLater.Length];
        for (int i = 0; i < next.Length; i++)
        {
            int value = i;
            next[i] = Spindle.Run(() => value, again.Token);
        }
        int reused = next.Count(t => items.Contains(t._source!));

        // And they work as usual.
        for (int i = 0; i < next.Length; i++)
        {
            Assert.Equal(i, await TestUtil.WithTimeout(next[i]));
        }
        Assert.Equal(0, TokenRegistrationLeakTests.RegistrationCount(again));
        Assert.Equal(0, Volatile.Read(ref ran));
        Assert.True(reused == readLater.Length, $"{reused} of the {readLater.Length} cancelled items were rented again");
    }

    /// <summary>
    /// The consumer's continuation runs inline in the token's callback, and a worker lets go of the cancelled item after
    /// the consumer: it must not wait for the callback (that is, for the continuation) to return. Here the continuation
    /// needs every worker at once, so a worker held there would keep it from ever finishing (the barrier's bound breaks
    /// the deadlock and the count shows it). From the review of the first version, which waited.
    /// </summary>
    [Fact]
    public void CancelledRun_AWorkerLettingGoLast_DoesNotWaitForTheConsumersInlineContinuation()
    {
        int workers = WorkerPool.Shared.WorkerCount;
        using var cts = new CancellationTokenSource();
        using var continuationRunning = new ManualResetEventSlim();
        using var workersReleased = new ManualResetEventSlim();
        int allMet = -1;
        Exception? failure = null; // the continuation's, thrown here: an assertion failing on the canceller thread would end the test host

        var busy = new HoldWorkers();
        SpindleTask task = Spindle.Run(() => { }, cts.Token);
        task.GetAwaiter().UnsafeOnCompleted(() =>
        {
            try
            {
                Assert.ThrowsAny<OperationCanceledException>(() => task.GetAwaiter().GetResult()); // the consumer lets go first
                continuationRunning.Set();
                workersReleased.Wait();
                Thread.Sleep(200); // a freed worker reaches the cancelled item meanwhile, and lets go of it last
                using var barrier = new Barrier(workers);
                var runs = new SpindleTask<bool>[workers];
                for (int i = 0; i < workers; i++)
                {
                    runs[i] = Spindle.Run(() => barrier.SignalAndWait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds))); // was 3 s
                }
                int met = 0;
                foreach (SpindleTask<bool> r in runs)
                {
                    met += r.GetAwaiter().GetResult() ? 1 : 0;
                }
                allMet = met;
            }
            catch (Exception e)
            {
                failure = e;
                continuationRunning.Set(); // the test goes on, and throws it
            }
        });
        Task canceller = TestUtil.RunOnThread(cts.Cancel, "canceller"); // whatever Cancel() throws fails the test, not the host
        Assert.True(continuationRunning.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)));
        busy.Dispose();
        workersReleased.Set();
        Assert.True(canceller.Wait(TimeSpan.FromSeconds(2 * TestUtil.DefaultTimeoutSeconds))); // past the barrier's bound
        Assert.True(failure is null, "the continuation failed: " + failure);
        Assert.Equal(workers, allMet);
    }

    /// <summary>
    /// The consumer's continuation, inline in the token's callback, reads last (the item is recycled inside the callback)
    /// and starts a new run at once, on the same pooled item: the old use's callback, still on the stack, leaves it alone.
    /// </summary>
    [Fact]
    public void CancelledRun_ReusedInsideItsOwnCallback_TheNewRunIsUntouched()
    {
        int sameItem = 0;
        for (int round = 0; round < 20; round++)
        {
            using var cts = new CancellationTokenSource();
            using var other = new CancellationTokenSource();
            using var inCallback = new ManualResetEventSlim();
            using var workerLetGo = new ManualResetEventSlim();
            int second = -1;
            bool same = false;
            Exception? failure = null; // the continuation's, thrown here: an assertion failing on the canceller thread would end the test host
            var busy = new HoldWorkers();
            SpindleTask<int> first = Spindle.Run(() => 1, cts.Token);
            object item = first._source!;
            first.GetAwaiter().UnsafeOnCompleted(() =>
            {
                inCallback.Set();
                workerLetGo.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds));
                try
                {
                    Assert.ThrowsAny<OperationCanceledException>(() => first.GetAwaiter().GetResult()); // last: recycled here
                    SpindleTask<int> again = Spindle.Run(() => 2, other.Token);
                    same = ReferenceEquals(again._source, item);
                    second = again.GetAwaiter().GetResult();
                }
                catch (Exception e)
                {
                    failure = e;
                }
            });
            Task canceller = TestUtil.RunOnThread(cts.Cancel, "canceller"); // whatever Cancel() throws fails the test, not the host
            Assert.True(inCallback.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)));
            busy.Dispose();
            // A worker reaches the cancelled item and lets go of it; then the continuation reads.
            Spindle.Run(() => { }).GetAwaiter().GetResult();
            Thread.Sleep(20);
            workerLetGo.Set();
            Assert.True(canceller.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)));
            Assert.True(failure is null, "the continuation failed: " + failure);
            Assert.Equal(2, second);
            sameItem += same ? 1 : 0;
            Assert.Equal(0, TokenRegistrationLeakTests.RegistrationCount(other));
        }
        Assert.True(sameItem > 0, "the new run never got the item recycled inside the callback");
    }

    /// <summary>
    /// The async forms start their function on a worker, never inside the Run call itself, also when called on a worker
    /// (where an await of a run just queued could take it back and run it on the spot). From the review: the first
    /// version ran the function on the caller's stack there. "Inside" is the calling thread before Run returned: another
    /// worker may rightly take the run from this one's queue and start it before Run returns.
    /// </summary>
    [Fact]
    public async Task AsyncForms_CalledOnAWorker_DoNotRunTheFunctionInsideTheRunCall()
    {
        using var cts = new CancellationTokenSource();
        int ranInsideRun = 0;
        for (int round = 0; round < 20; round++)
        {
            await TestUtil.WithTimeout(Spindle.Run(RoundAsync));
        }
        Assert.Equal(0, ranInsideRun);

        async SpindleTask RoundAsync()
        {
            Thread caller = Thread.CurrentThread;
            bool returned = false;
            void Check()
            {
                if (!Volatile.Read(ref returned) && Thread.CurrentThread == caller)
                {
                    Interlocked.Increment(ref ranInsideRun);
                }
            }
            SpindleTask inner = Spindle.Run(() =>
            {
                Check();
                return SpindleTask.CompletedTask;
            }, cts.Token);
            Volatile.Write(ref returned, true);
            await inner;

            caller = Thread.CurrentThread;
            Volatile.Write(ref returned, false);
            SpindleTask<int> innerT = Spindle.Run(() =>
            {
                Check();
                return SpindleTask.FromResult(1);
            }, cts.Token);
            Volatile.Write(ref returned, true);
            Assert.Equal(1, await innerT);
        }
    }

    /// <summary>
    /// Cancellation against a run queued from a worker (to its run-next slot) that the same worker then reads at once
    /// (its awaiter may take the item back and run it inline): exactly one outcome each round.
    /// </summary>
    [Fact]
    public async Task CancelRacingARunQueuedAndReadOnAWorker_ExactlyOneOutcome()
    {
        int rounds = TestUtil.Stress(5_000);
        CancellationTokenSource? cts = null;
        SpindleTask<int> outer = default;
        int ranCount = 0;

        int ran = await Race.Run(
            rounds,
            minRounds: Math.Min(rounds, 500), // past the budget too: the count below asks for them
            before: _ => cts = new CancellationTokenSource(),
            after: i =>
            {
                // 1: ran and read its result; 2: cancelled, never ran.
                int outcome = TestUtil.WithTimeout(outer).GetAwaiter().GetResult();
                Assert.True(outcome is 1 or 2, $"round {i}: outcome {outcome}");
                Thread.Sleep(0);
                cts!.Dispose();
            },
            _ => outer = Spindle.Run(() =>
            {
                int before = Volatile.Read(ref ranCount);
                SpindleTask<int> run = Spindle.Run(() => Interlocked.Increment(ref ranCount), cts!.Token);
                try
                {
                    run.GetAwaiter().GetResult(); // on a worker: may run the item inline first
                    return Volatile.Read(ref ranCount) == before + 1 ? 1 : 99;
                }
                catch (OperationCanceledException)
                {
                    return Volatile.Read(ref ranCount) == before ? 2 : 98;
                }
            }),
            i =>
            {
                Thread.SpinWait(i % 16 * 50);
                cts!.Cancel();
            });
        Assert.True(ran >= Math.Min(rounds, 500), $"only {ran} rounds ran");
    }

    [Fact]
    public async Task CancelledAfterStarting_TheTaskFollowsTheWork()
    {
        using var cts = new CancellationTokenSource();
        using var started = new ManualResetEventSlim();
        using var finish = new ManualResetEventSlim();

        SpindleTask<int> task = Spindle.Run(() =>
        {
            started.Set();
            finish.Wait();
            return 9;
        }, cts.Token);
        Assert.True(started.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)));
        Assert.Equal(0, TokenRegistrationLeakTests.RegistrationCount(cts)); // dropped when the work started
        cts.Cancel();
        Assert.Equal(SpindleTaskStatus.Pending, task.Status);
        finish.Set();

        Assert.Equal(9, await TestUtil.WithTimeout(task));
    }

    [Fact]
    public async Task AsyncFunction_CancelledAfterStarting_FollowsTheFunctionsTask()
    {
        using var cts = new CancellationTokenSource();
        var inner = new Promise<int>();
        bool started = false;

        SpindleTask<int> task = Spindle.Run(() =>
        {
            Volatile.Write(ref started, true);
            return inner.Task;
        }, cts.Token);
        TestUtil.SpinUntil(() => Volatile.Read(ref started));
        cts.Cancel();
        Thread.Sleep(20);
        Assert.Equal(SpindleTaskStatus.Pending, task.Status);
        inner.SetResult(11);

        Assert.Equal(11, await TestUtil.WithTimeout(task));
    }

    [Fact]
    public async Task WorkThrowsItsTokensCancellation_TheTaskIsCancelled()
    {
        using var cts = new CancellationTokenSource();

        SpindleTask task = Spindle.Run(() =>
        {
            cts.Cancel();
            cts.Token.ThrowIfCancellationRequested();
        }, cts.Token);

        OperationCanceledException e = await Assert.ThrowsAnyAsync<OperationCanceledException>(() => TestUtil.WithTimeout(task));
        Assert.Equal(cts.Token, e.CancellationToken);
    }

    [Fact]
    public async Task WorkFails_TheFailureSurfaces()
    {
        using var cts = new CancellationTokenSource();
        var error = new InvalidTimeZoneException("in run");

        SpindleTask<int> task = Spindle.Run(new Func<int>(() => throw error), cts.Token);

        Assert.Same(error, await Assert.ThrowsAsync<InvalidTimeZoneException>(() => TestUtil.WithTimeout(task)));
    }

    [Fact]
    public void AwaitedTwice_IsTheAwaitOnceError_ForACancelledRunToo()
    {
        using var cts = new CancellationTokenSource();
        SpindleTask task;
        using (new HoldWorkers())
        {
            task = Spindle.Run(() => { }, cts.Token);
            cts.Cancel();
            AssertCanceledWith(cts.Token, task);
            Assert.Throws<InvalidOperationException>(() => task.GetAwaiter().GetResult());
        }
    }

    [Fact]
    public void SteadyState_AllocatesNothing()
    {
        using var cts = new CancellationTokenSource();
        Action action = static () => { };
        Func<int> function = static () => 1;

        Func<SpindleTask> asyncAction = static () => SpindleTask.CompletedTask;
        Func<SpindleTask<int>> asyncFunction = static () => SpindleTask.FromResult(1);

        TestUtil.AssertSteadyStateAllocatesNothing(_ =>
        {
            Spindle.Run(action, cts.Token).GetAwaiter().GetResult();
            Spindle.Run(function, cts.Token).GetAwaiter().GetResult();
            Spindle.Run(asyncAction, cts.Token).GetAwaiter().GetResult();
            Spindle.Run(asyncFunction, cts.Token).GetAwaiter().GetResult();
        }, 2_000);
        Assert.Equal(0, TokenRegistrationLeakTests.RegistrationCount(cts));
    }

    /// <summary>
    /// Cancellation against the start, on a fresh token each round, round after round on the same pooled items: each run
    /// either ran its work exactly once and succeeded, or never ran it and was cancelled (checked once the queues have
    /// drained); no work runs twice or for another round, and a run that started left nothing registered. Both outcomes
    /// happen: freely the token won about 98% of the rounds (a worker's start is a wake-up away), and on a loaded machine
    /// one side could win them all, so one round in 256 forces each: the cancellation first (every worker held, so none
    /// can start the work), or the start first (the racer cancels once the work has run).
    /// </summary>
    [Fact]
    public async Task CancelRacingTheStart_ExactlyOneOutcome_EveryRound()
    {
        int rounds = TestUtil.Stress(20_000);
        var ranFor = new int[rounds];
        var cancelledRound = new bool[rounds];
        CancellationTokenSource? cts = null;
        SpindleTask<int> task = default;
        HoldWorkers? hold = null;
        int succeeded = 0;
        static bool CancelFirst(int round) => (round & 255) == 7;
        static bool StartFirst(int round) => (round & 255) == 135;

        int ran = await Race.Run(
            rounds,
            minRounds: Math.Min(rounds, 1_000), // past the budget too: the forced rounds and the count below need them
            before: i =>
            {
                cts = new CancellationTokenSource();
                int round = i;
                if (CancelFirst(i))
                {
                    hold = new HoldWorkers(); // this class runs alone (sequential collection)
                }
                task = Spindle.Run(() =>
                {
                    Interlocked.Increment(ref ranFor[round]);
                    return round;
                }, cts.Token);
            },
            after: i =>
            {
                if (hold is not null)
                {
                    try
                    {
                        // The forced order held: no worker was free, and the run ended at the cancellation.
                        Assert.True(hold.StillHolding, $"round {i}: a held worker was let go before the cancellation");
                        Assert.Equal(SpindleTaskStatus.Canceled, task.Status);
                    }
                    finally
                    {
                        hold.Dispose();
                        hold = null;
                    }
                }
                try
                {
                    Assert.Equal(i, TestUtil.WithTimeout(task).GetAwaiter().GetResult());
                    Assert.Equal(1, Volatile.Read(ref ranFor[i]));
                    Assert.Equal(0, TokenRegistrationLeakTests.RegistrationCount(cts!)); // dropped when it started
                    succeeded++;
                }
                catch (OperationCanceledException e)
                {
                    Assert.Equal(cts!.Token, e.CancellationToken);
                    cancelledRound[i] = true;
                }
                cts!.Dispose();
            },
            i =>
            {
                if (StartFirst(i))
                {
                    TestUtil.SpinUntil(() => Volatile.Read(ref ranFor[i]) == 1); // a dedicated thread: a plain spin
                }
                else
                {
                    // A spread of delays, so that the worker's start (a wake-up away) wins some rounds and the token others.
                    Thread.SpinWait(i % 32 * 100);
                }
                cts!.Cancel();
            });

        // A cancelled item is let go of by the worker that reaches it, later: wait for the queues to drain.
        await TestUtil.WithTimeout(Spindle.Run(() => { }));
        Thread.Sleep(50);
        int cancelled = 0;
        for (int i = 0; i < ran; i++)
        {
            int count = Volatile.Read(ref ranFor[i]);
            if (cancelledRound[i])
            {
                cancelled++;
                Assert.True(count == 0, $"round {i} was cancelled, and its work ran {count} times");
            }
            else
            {
                Assert.True(count == 1, $"round {i} succeeded, and its work ran {count} times");
            }
        }
        Assert.Equal(ran, succeeded + cancelled);
        Assert.True(ran >= Math.Min(rounds, 1_000), $"only {ran} rounds ran");
        // Both outcomes happened: the forced rounds make sure of it, under any load.
        Assert.True(cancelled > 0 && succeeded > 0, $"one side won every round: {succeeded} ran, {cancelled} cancelled");
    }
}

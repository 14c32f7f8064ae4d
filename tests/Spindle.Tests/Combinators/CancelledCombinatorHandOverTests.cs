using System;
using System.Collections.Concurrent;
using System.Reflection;
using System.Threading;
using System.Threading.Tasks;

#if DEBUG // the pools' return hook exists only in a Debug build of the library (PoolTestHooks)
namespace SpindleLib.Tests.Combinators;

/// <summary>
/// The review of the recycling of a combinator cancelled by its token (Combinator.RunCancel): the hand-over of the
/// recycling from a recycler on another thread to a callback still running below the reader. The reader runs inline in
/// the token's callback on the cancelling thread and reads the combined task, but a loser that cannot be let go of (a BCL
/// task, a producer's input, a WhenAll's input) still holds a reference; while the callback is still on the stack, that
/// loser finishes on another thread and drops the last reference. The object must not go back to its pool there, but on
/// the cancelling thread as the callback returns, once, with its state word idle. Each kind is also run with a token
/// already cancelled at Start (the callback runs inside Register, before the registration is stored; a WhenAny over producers rents nothing then).
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class CancelledCombinatorHandOverTests
{
    /// <summary>One use: the combined task (read by a reader that suppresses the cancellation) and the action that finishes the inputs it still holds.</summary>
    private sealed record Use(SpindleTask Task, Action FinishInputs);

    private static Use StartUse(string kind, CancellationToken token, TimerWheel wheel)
    {
        switch (kind)
        {
            case "WhenAnyOfBclTask":
            {
                var tcs = new TaskCompletionSource();
                return new Use(SpindleTask.WhenAny([tcs.Task], token), () => tcs.SetResult());
            }
            case "WhenAnyOfProducers":
            {
                // The producers ignore their token, so they finish only when their promises are set: still registered.
                var a = new Promise();
                var b = new Promise();
                return new Use(SpindleTask.WhenAny([_ => a.Task, _ => b.Task], token), () =>
                {
                    a.SetResult();
                    b.SetResult();
                });
            }
            case "WhenAllTimedOfBclTasks":
            {
                var a = new TaskCompletionSource();
                var b = new TaskCompletionSource();
                var options = new WhenAllOptions { Timeout = TimeSpan.FromMinutes(5), Timers = wheel };
                return new Use(SpindleTask.WhenAll([a.Task, b.Task], options, token), () =>
                {
                    a.SetResult();
                    b.SetResult();
                });
            }
            default: // "WhenAllTypedTuple": its inputs (async methods over promises) are let go of; the reader's is the last reference
            {
                var a = new Promise();
                var b = new Promise();
                return new Use(SpindleTask.WhenAll(Typed(a), Typed(b), token), () =>
                {
                    a.SetResult();
                    b.SetResult();
                });
            }
        }
    }

    private static async SpindleTask<int> Typed(Promise p)
    {
        await p.Task;
        return 1;
    }

    private sealed class Probe
    {
        public int CallbackThread;
        public int ReturnedWhileCallbackRan = -1;
        public bool Cancelled;
    }

    /// <summary>Reads the cancelled task, inline in the token's callback, then finishes the inputs on another thread and waits for it.</summary>
    private static async SpindleTask ReadThenFinishElsewhere(SpindleTask cancelled, Action finish, CombinatorReturns returns, Probe probe)
    {
        probe.Cancelled = await cancelled.SuppressCancellationThrow();
        probe.CallbackThread = Environment.CurrentManagedThreadId;
        var other = new Thread(() => finish());
        other.Start();
        other.Join(); // the inputs' callbacks ran there, inline: the last reference was dropped on that thread
        probe.ReturnedWhileCallbackRan = returns.Seen.Count;
    }

    [Theory]
    [InlineData("WhenAnyOfBclTask", false)]
    [InlineData("WhenAnyOfProducers", false)]
    [InlineData("WhenAllTimedOfBclTasks", false)]
    [InlineData("WhenAllTypedTuple", false)]
    [InlineData("WhenAnyOfBclTask", true)]
    [InlineData("WhenAnyOfProducers", true)]
    [InlineData("WhenAllTimedOfBclTasks", true)]
    [InlineData("WhenAllTypedTuple", true)]
    public void TheLastReferenceDroppedElsewhere_WhileTheCallbackRuns_HandsTheRecyclingToTheCallback(string kind, bool cancelledAtStart)
    {
        using var wheel = new TimerWheel(new ManualClock());
        for (int round = 0; round < 16; round++)
        {
            using var returns = new CombinatorReturns();
            using var cts = new CancellationTokenSource();
            var probe = new Probe();
            if (cancelledAtStart)
            {
                cts.Cancel();
                // The callback runs inside Register, with no reader yet: the reader comes later, on this thread, and the
                // inputs finish on another; the object goes back exactly once, with its state word idle.
                Use early = StartUse(kind, cts.Token, wheel);
                Assert.True(early.Task.SuppressCancellationThrow().GetAwaiter().GetResult());
                var other = new Thread(() => early.FinishInputs());
                other.Start();
                other.Join();
                if (kind == "WhenAnyOfProducers")
                {
                    Assert.Empty(returns.Seen); // no combinator at all: nothing is started, the task is cancelled at once (Combine)
                    continue;
                }
                TestUtil.SpinUntil(() => returns.Seen.Count >= 1, () => $"{kind}, round {round}: nothing went back to its pool");
                Assert.Single(returns.Seen);
                Assert.All(returns.Seen, r => Assert.Equal(0, r.CancelState));
                continue;
            }
            Use use = StartUse(kind, cts.Token, wheel);
            SpindleTask reader = ReadThenFinishElsewhere(use.Task, use.FinishInputs, returns, probe);
            int canceller = Environment.CurrentManagedThreadId;
            cts.Cancel(); // the reader runs inline in the callback, reads, and the inputs finish on another thread meanwhile
            Assert.Equal(SpindleTaskStatus.Succeeded, reader.Status);
            Assert.True(probe.Cancelled);
            Assert.Equal(canceller, probe.CallbackThread); // the reader did run inside the callback
            Assert.Equal(0, probe.ReturnedWhileCallbackRan); // not recycled under the callback
            (object combinator, int thread, object? state) = Assert.Single(returns.Seen);
            Assert.Equal(canceller, thread); // recycled by the callback as it returned
            Assert.Equal(0, state); // idle in the pool: the next use's Recycle will not defer
            // The next use on this thread rents that very object: its own token and input decide it, nothing else.
            using var live = new CancellationTokenSource();
            Use next = StartUse(kind, live.Token, wheel);
            Assert.Equal(SpindleTaskStatus.Pending, next.Task.Status);
            next.FinishInputs();
            TestUtil.SpinUntil(() => next.Task.IsCompleted, () => $"{kind}, round {round}: the next use never completed");
            next.Task.GetAwaiter().GetResult();
            GC.KeepAlive(combinator);
        }
    }
    /// <summary>
    /// The three parties race on three threads: the token's callback (here), the winner's completion with its reader (one
    /// thread), and a loser that cannot be let go of (a BCL task, another thread), whichever drops the last reference.
    /// Every use goes back to its pool exactly once, idle, and the next use rented from it is decided by its own input.
    /// </summary>
    [Fact]
    public async Task CallbackReaderAndLoser_OnThreeThreads_EveryUseGoesBackOnce_Idle()
    {
        int rounds = TestUtil.Stress(2_000);
        using var returns = new CombinatorReturns();
        int uses = 0;
        await TestUtil.RunOnThread(() =>
        {
            for (int round = 0; round < rounds; round++)
            {
                using var cts = new CancellationTokenSource();
                var input = new Promise();
                var loser = new TaskCompletionSource();
                var winner = new TaskCompletionSource();
                SpindleTask<int> any = SpindleTask.WhenAny([loser.Task, winner.Task], cts.Token);
                SpindleTask<int> any2 = SpindleTask.WhenAny([input.Task], cts.Token);
                uses += 2;
                using var barrier = new Barrier(3);
                Task cancel = Task.Run(() =>
                {
                    barrier.SignalAndWait();
                    cts.Cancel();
                });
                Task finish = Task.Run(() =>
                {
                    barrier.SignalAndWait();
                    loser.SetResult();
                });
                barrier.SignalAndWait();
                input.SetResult();
                winner.SetResult();
                any.SuppressCancellationThrow().GetAwaiter().GetResult();
                any2.SuppressCancellationThrow().GetAwaiter().GetResult();
                Assert.True(Task.WaitAll([cancel, finish], TimeSpan.FromSeconds(10)), $"round {round}: a thread hung");
                using var live = new CancellationTokenSource();
                var p = new Promise();
                var bcl = new TaskCompletionSource();
                SpindleTask<int> next = SpindleTask.WhenAny([bcl.Task], live.Token);
                SpindleTask<int> next2 = SpindleTask.WhenAny([p.Task], live.Token);
                uses += 2;
                Assert.Equal(SpindleTaskStatus.Pending, next.Status);
                Assert.Equal(SpindleTaskStatus.Pending, next2.Status);
                bcl.SetResult();
                p.SetResult();
                Assert.Equal(0, next.GetAwaiter().GetResult());
                Assert.Equal(0, next2.GetAwaiter().GetResult());
            }
        });
        TestUtil.SpinUntil(() => returns.Seen.Count >= uses, () => $"{returns.Seen.Count} of {uses} uses went back to their pools");
        Assert.Equal(uses, returns.Seen.Count); // none twice (a double return would show as more)
        Assert.All(returns.Seen, r => Assert.Equal(0, r.CancelState));
    }
}
#endif

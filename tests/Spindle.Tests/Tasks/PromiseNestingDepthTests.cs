using System;
using System.Collections.Concurrent;
using System.Threading;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// Two waiters a source never queues to the workers (SourceCore.RunWaiter, decisions.md sections 11 and 14): a thread
/// blocked in GetResult and the observer of a forgotten task. These tests complete the promise from a continuation
/// nested <see cref="Continuations.MaxInlineDepth"/> deep, where ordinary waiters are dispatched: the two must still run
/// on the completing thread. They touch the UnobservedException event and hold the workers, so they run alone.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class PromiseNestingDepthTests
{
    /// <summary>
    /// Runs <paramref name="inner"/> on this thread from inside <paramref name="levels"/> nested continuations: a chain of
    /// promises, each completed from the previous one's continuation (each runs inline, as far as the depth bound).
    /// </summary>
    internal static void RunNested(int levels, Action inner)
    {
        var chain = new Promise[levels];
        for (int i = 0; i < levels; i++)
        {
            chain[i] = new Promise();
        }
        bool ran = false;
        for (int i = 0; i < levels; i++)
        {
            int next = i + 1;
            chain[i].Task.GetAwaiter().UnsafeOnCompleted(next < levels ? () => chain[next].SetResult() : () => { ran = true; inner(); });
        }
        chain[0].SetResult();
        Assert.True(ran, "the innermost continuation did not run inline on this thread");
    }

    [Fact]
    public void RunNested_InnermostContinuation_IsAtTheDepthBound()
    {
        // The premise of the tests below: a delegate waiter completed from the innermost continuation is dispatched.
        int managedThread = Environment.CurrentManagedThreadId;
        int ranOn = -1;
        using var ran = new ManualResetEventSlim();
        var promise = new Promise();
        promise.Task.GetAwaiter().UnsafeOnCompleted(() =>
        {
            ranOn = Environment.CurrentManagedThreadId;
            ran.Set();
        });
        RunNested(Continuations.MaxInlineDepth, () => promise.SetResult());
        Assert.True(ran.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)));
        Assert.NotEqual(managedThread, ranOn);
    }

    [Fact]
    public void Forget_PromiseCompletedAtTheDepthBoundThenReset_ReportsTheRealFaultNotAStaleToken()
    {
        // Forget's contract: "the outcome is read as the task completes, before its source can be reused". At the depth
        // bound the observer was queued to a worker like any waiter, so it read the promise after the owner's Reset.
        const int Rounds = 20;
        var error = new InvalidTimeZoneException("the real fault");
        var watch = UnobservedReports.Start(UnobservedReports.Own.Any(UnobservedReports.Own.InstancesOrOnTestThreads(error), UnobservedReports.Own.AwaitOnceErrors()) /* the stale read this test is about */);
        ConcurrentQueue<Exception> reported = watch.Reports;
        using (watch)
        {
            var promise = new Promise();
            for (int i = 0; i < Rounds; i++)
            {
                promise.Task.Forget();
                RunNested(Continuations.MaxInlineDepth, () =>
                {
                    promise.SetException(error);
                    promise.Reset(); // the forgotten use is over: the owner starts the next one
                });
            }
            // Until every round's report is in (queued observers run on the workers; the count is checked below).
            SpinWait.SpinUntil(() => reported.Count >= Rounds, TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds));
            Thread.Sleep(50);
        }
        Exception[] seen = reported.ToArray();
        Assert.True(Array.TrueForAll(seen, e => ReferenceEquals(e, error)),
            $"{Array.FindAll(seen, e => !ReferenceEquals(e, error)).Length} of {seen.Length} reports were not the real fault, e.g. "
            + Array.Find(seen, e => !ReferenceEquals(e, error))?.Message);
        Assert.Equal(Rounds, seen.Length);
    }

    [Fact]
    public void BlockingGetResult_PromiseCompletedAtTheDepthBoundWhileEveryWorkerIsBusy_WakesTheBlockedThread()
    {
        // A blocked thread's wake-up only sets an event: queued to the workers it waits for a free one, and a thread that
        // is not a worker never runs queued work once asleep (decisions.md section 11). The depth bound queued it.
        var promise = new Promise<int>();
        SpindleTask<int> task = promise.Task;
        int result = 0;
        var hold = new HoldWorkers();
        bool woke;
        bool stillHolding;
        try
        {
            var waiter = new Thread(() => result = task.GetAwaiter().GetResult())
            {
                IsBackground = true,
                Name = "user thread blocked in GetResult",
            };
            waiter.Start();
            TestUtil.SpinUntil(() => (waiter.ThreadState & ThreadState.WaitSleepJoin) != 0);
            Thread.Sleep(20); // past its spinning: asleep on its event

            RunNested(Continuations.MaxInlineDepth, () => promise.SetResult(5));

            // A wake-up queued behind the held workers runs only when they let go (after HoldWorkers' 30 s): half the
            // default (it was 5 s), and stillHolding below tells that the holders had not let go meanwhile.
            woke = waiter.Join(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds / 2));
            stillHolding = hold.StillHolding;
        }
        finally
        {
            hold.Dispose(); // lets a queued wake-up run, so that a failing run does not leave the thread blocked
        }
        Assert.True(stillHolding);
        Assert.True(woke, "the blocked thread's wake-up was queued behind the busy workers");
        Assert.Equal(5, result);
    }
}

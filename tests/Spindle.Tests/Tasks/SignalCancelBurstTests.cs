using System;
using System.Reflection;
using System.Runtime.CompilerServices;
using System.Runtime.ExceptionServices;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// Many actor loops, each waiting on its own signal with one shared token, stopped by one <c>Cancel()</c> (an actor
/// runtime's shutdown; a user's review measured 1,000,000 of them). Pins where the loops' code runs then, which is what
/// decides the cost of a burst (<c>docs/decisions.md</c> section 42): a signal made plainly runs every cancelled loop on
/// the cancelling thread, inside <c>Cancel()</c>, as a signal's <see cref="Signal.Set"/> does (so loop code cancelled on a
/// game's main thread stays on it), and a signal made with <c>runContinuationsAsynchronously: true</c> queues each to the
/// workers, which share the burst, as a channel's reader does. Either way each loop ends exactly once, every signal is
/// left idle with nothing registered, and the loops' boxes go back to their pool within its cap.
/// </summary>
[Collection(SequentialCollection.Name)] // reads a pool's shared count
public sealed class SignalCancelBurstTests
{
    private sealed class Actor(bool queued)
    {
        public readonly Signal Mailbox = new(false, queued);
        public int Messages;
        public int Ends;
        public int EndThread;
        public bool EndedOnWorker;
    }

    private static async SpindleTask Run(Actor actor, CancellationToken stop, bool suppress)
    {
        while (true)
        {
            bool canceled;
            if (suppress)
            {
                canceled = await actor.Mailbox.WaitAsync(stop).SuppressCancellationThrow();
            }
            else
            {
                try
                {
                    await actor.Mailbox.WaitAsync(stop);
                    canceled = false;
                }
                catch (OperationCanceledException ex) when (ex.CancellationToken == stop)
                {
                    canceled = true;
                }
            }
            if (canceled)
            {
                break;
            }
            actor.Messages++;
        }
        actor.EndThread = Environment.CurrentManagedThreadId;
        actor.EndedOnWorker = TestUtil.OnSpindleWorker;
        Interlocked.Increment(ref actor.Ends);
    }

    [Theory]
    [InlineData(false, true, 50_000)]
    [InlineData(false, false, 20_000)]
    [InlineData(true, true, 50_000)]
    [InlineData(true, false, 20_000)]
    public async Task OneCancel_EndsEveryLoopOnce_WhereItsSignalRunsWaiters(bool queued, bool suppress, int loops)
    {
        await TestUtil.LeaveSpindleWorkers(); // the cancelling thread is not a worker (as in the review's program)
        loops = TestUtil.Stress(loops);
        var actors = new Actor[loops];
        var tasks = new SpindleTask[loops];
        using var stop = new CancellationTokenSource();
        for (int i = 0; i < loops; i++)
        {
            actors[i] = new Actor(queued);
            tasks[i] = Run(actors[i], stop.Token, suppress);
        }
        Type boxType = tasks[0]._source!.GetType();

        // Every other actor gets a message first: its loop goes round once and waits again with the same token, so the
        // burst cancels waits that re-registered as well as first ones.
        for (int i = 0; i < loops; i += 2)
        {
            actors[i].Mailbox.Set();
        }
        await WaitUntil(() => AllMessaged(actors), "the messaged loops to go round");

        int canceller = Environment.CurrentManagedThreadId;
        stop.Cancel();
        if (!queued)
        {
            // Inline: every loop ended inside Cancel(), on this thread.
            for (int i = 0; i < loops; i++)
            {
                Assert.True(actors[i].Ends == 1, $"loop {i} ended {actors[i].Ends} times by the time Cancel() returned");
                Assert.True(actors[i].EndThread == canceller, $"loop {i} ended on thread {actors[i].EndThread}, not the cancelling thread {canceller}");
            }
        }
        await SpindleTask.WhenAll(tasks).AsTask().WaitAsync(TimeSpan.FromSeconds(TestUtil.StressTimeout(60)));

        int onCanceller = 0;
        for (int i = 0; i < loops; i++)
        {
            Actor a = actors[i];
            Assert.True(a.Ends == 1, $"loop {i} ended {a.Ends} times");
            Assert.Equal(i % 2 == 0 ? 1 : 0, a.Messages);
            if (a.EndThread == canceller)
            {
                onCanceller++;
            }
            if (queued)
            {
                Assert.True(a.EndedOnWorker, $"loop {i} of a queueing signal ended on thread {a.EndThread}, not a worker");
            }
            Assert.False(a.Mailbox.HasWaiter);
            Assert.False(a.Mailbox.IsSet);
        }
        Assert.Equal(queued ? 0 : loops, onCanceller);

        // Nothing of the cancelled waits is left registered or armed: each signal takes a new wait, which a set ends.
        for (int i = 0; i < loops; i += 997)
        {
            SpindleTask next = actors[i].Mailbox.WaitAsync(CancellationToken.None);
            actors[i].Mailbox.Set();
            await next.AsTask().WaitAsync(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds));
        }

        int shared = SharedCount(boxType);
        Assert.True(shared <= SpindlePool.MaxRetainedPerType,
            $"{shared} loop boxes in the shared pool after the burst, past the cap of {SpindlePool.MaxRetainedPerType}");
    }

    /// <summary>
    /// A throwing read of a wait its token cancelled throws the exception it built for itself as it is, not through a
    /// dispatch info (section 42): the same trace, without the restore. Measured against a fresh
    /// <see cref="TaskCanceledException"/> thrown through <see cref="ExceptionDispatchInfo.Throw()"/> two calls deep: the
    /// read allocated 296 B a throw more than that before (832 against 536 here; 368–536 B a throw in a burst of a
    /// million loops), and allocates no more now (264–368 in the burst).
    /// </summary>
    [Fact]
    public void AThrowingReadOfACancelledWait_ThrowsItsOwnException_WithoutADispatchInfo()
    {
        const int N = 256;
        var signals = new Signal[N];
        var waits = new SpindleTask[N];
        for (int i = 0; i < N; i++)
        {
            signals[i] = new Signal();
        }
        long fewestReads = long.MaxValue;
        long fewestRethrows = long.MaxValue;
        for (int round = 0; round < 6; round++)
        {
            using var cts = new CancellationTokenSource();
            for (int i = 0; i < N; i++)
            {
                waits[i] = signals[i].WaitAsync(cts.Token);
            }
            cts.Cancel();
            CancellationToken token = cts.Token;

            long before = GC.GetAllocatedBytesForCurrentThread();
            for (int i = 0; i < N; i++)
            {
                ReadAndCatch(waits[i], token);
            }
            fewestReads = Math.Min(fewestReads, GC.GetAllocatedBytesForCurrentThread() - before);

            before = GC.GetAllocatedBytesForCurrentThread();
            for (int i = 0; i < N; i++)
            {
                RethrowAndCatch(token);
            }
            fewestRethrows = Math.Min(fewestRethrows, GC.GetAllocatedBytesForCurrentThread() - before);
        }
        long perRead = fewestReads / N;
        long perRethrow = fewestRethrows / N;
        Assert.True(perRead <= perRethrow + 64,
            $"a throwing read of a cancelled signal wait allocated {perRead} B, a fresh exception thrown through a dispatch info {perRethrow} B: the read still restores one");

        [MethodImpl(MethodImplOptions.NoInlining)]
        static void ReadAndCatch(SpindleTask wait, CancellationToken token)
        {
            try
            {
                wait.GetAwaiter().GetResult();
                Assert.Fail("the wait was cancelled");
            }
            catch (TaskCanceledException ex) when (ex.CancellationToken == token)
            {
            }
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static void RethrowAndCatch(CancellationToken token)
        {
            try
            {
                Rethrow(ExceptionDispatchInfo.Capture(new TaskCanceledException(null, null, token)));
            }
            catch (TaskCanceledException ex) when (ex.CancellationToken == token)
            {
            }
        }

        // As deep as the read's throw (the awaiter's GetResult, then the signal's).
        [MethodImpl(MethodImplOptions.NoInlining)]
        static void Rethrow(ExceptionDispatchInfo error) => ThrowIt(error);

        [MethodImpl(MethodImplOptions.NoInlining)]
        static void ThrowIt(ExceptionDispatchInfo error) => error.Throw();
    }

    private static bool AllMessaged(Actor[] actors)
    {
        for (int i = 0; i < actors.Length; i += 2)
        {
            if (Volatile.Read(ref actors[i].Messages) != 1 || !actors[i].Mailbox.HasRegisteredWaiterForTests)
            {
                return false;
            }
        }
        return true;
    }

    private static async Task WaitUntil(Func<bool> condition, string what)
    {
        DateTime until = DateTime.UtcNow.AddSeconds(TestUtil.StressTimeout(TestUtil.DefaultTimeoutSeconds));
        while (!condition())
        {
            Assert.True(DateTime.UtcNow < until, $"timed out waiting for {what}");
            await Task.Delay(5);
        }
    }

    private static int SharedCount(Type boxType)
        => (int)typeof(ObjectPool<>).MakeGenericType(boxType).GetProperty("Count", BindingFlags.Public | BindingFlags.NonPublic | BindingFlags.Static)!.GetValue(null)!;
}

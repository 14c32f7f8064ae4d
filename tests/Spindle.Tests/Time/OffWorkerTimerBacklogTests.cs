using System;
using System.Diagnostics;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Time;

/// <summary>
/// A timer started off the workers (a server's request thread, a shutdown's deadline on the main thread) sits in the
/// timer thread's wheel, whose due continuations go to the workers in batches. Those batches jump the queue of work
/// queued from outside, as the .NET ThreadPool runs its timers from a high-priority queue: a deadline must not wait
/// behind the very backlog it bounds. Real clock; the test compares counts, never a measured time.
/// </summary>
[Collection(SequentialCollection.Name)]
public class OffWorkerTimerBacklogTests
{
    private static void SpinMicroseconds(int microseconds)
    {
        long end = Stopwatch.GetTimestamp() + microseconds * Stopwatch.Frequency / 1_000_000;
        while (Stopwatch.GetTimestamp() < end)
        {
        }
    }

    [Fact]
    public async Task DelayStartedOffTheWorkers_FiresAheadOfABacklogQueuedBeforeItFellDue()
    {
        await TestUtil.LeaveSpindleWorkers();
        // A 200 ms delay, then 20,000 items of 100 µs: about a second of backlog on each worker of a two-processor
        // machine. The delay falls due while most of it still waits. Before the fix its continuation was queued behind
        // all of it and ran when 20,000 of 20,000 items had run (a user's session server: a shutdown's 2 s drain
        // deadline returned 5 s after it was set, when 300,000 cancellations had all been handled; Task.Delay(100)
        // beside a ThreadPool backlog fired after 104 ms). The delay is started first, so that a preempted test thread
        // cannot find it complete at its await.
        const int Items = 20_000;
        int ran = 0;
        int stop = 0;
        int ranWhenFired = -1;
        var fired = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);

        async SpindleTask Deadline()
        {
            await Spindle.Delay(200); // started off the workers: the timer thread's wheel
            ranWhenFired = Volatile.Read(ref ran);
            Volatile.Write(ref stop, 1); // the rest of the backlog ends at once
            fired.SetResult();
        }

        Deadline().Forget();
        for (int i = 0; i < Items; i++)
        {
            Spindle.Run(() =>
            {
                if (Volatile.Read(ref stop) == 0)
                {
                    SpinMicroseconds(100);
                }
                Interlocked.Increment(ref ran);
            }).Forget(); // from outside the workers: the injection queue
        }
        await TestUtil.WithTimeout(fired.Task);
        TestUtil.SpinUntil(() => Volatile.Read(ref ran) == Items, () => $"{Volatile.Read(ref ran)} of {Items} items ran");
        Assert.True(ranWhenFired < Items / 2,
            $"a 200 ms delay started off the workers fired when {ranWhenFired} of {Items} items queued before it fell due had run: its continuation waited behind the backlog");
    }
}

using System;
using System.Threading;

namespace SpindleLib.Tests.Threading;

/// <summary>
/// A spinning worker leaves a job in the jobs' queue while the queue's head is moving (a thread is taking its own jobs
/// back, as one that schedules, flushes and calls Complete() at once does), and takes it once the head has stood still
/// for one of its looks (docs/decisions.md section 34). Before, a spinning worker took whatever it found: in a
/// schedule-flush-Complete loop workers took 5–20% of the jobs, and the caller waited about 1.7 µs for each.
/// </summary>
[Collection(SequentialCollection.Name)]
public class SpinningLookPatienceTests
{
#if DEBUG
    [Fact]
    public void AJobTakenBackBetweenTwoLooks_IsLeftToItsOwner_AndOneNobodyTakes_IsRunAtTheNextLook()
    {
        var pool = new WorkerPool(1, "patience test worker");
        using var leftOne = new SemaphoreSlim(0);
        using var goOn = new SemaphoreSlim(0);
        int leftCount = 0;
        WorkerPool.TestHookLeftAJob = p =>
        {
            if (p != pool)
            {
                return;
            }
            Interlocked.Increment(ref leftCount);
            leftOne.Release();
            Assert.True(goOn.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "the test never let the worker go on");
        };
        try
        {
            // Parked first: the job's wake-up starts the worker's spin from its first look.
            TestUtil.SpinUntil(() => pool.IdleWorkers == 1, () => pool.Describe());
            int testThread = Environment.CurrentManagedThreadId;
            int xThread = 0;
            int yThread = 0;
            using var yRan = new ManualResetEventSlim();
            pool.QueueShared(new ActionItem(() => xThread = Environment.CurrentManagedThreadId));

            // First look: the queue holds X and the count of takes is new to the worker, so it leaves X and waits here.
            // Before the patience, the worker took X at this look and this wait ran out.
            Assert.True(leftOne.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "the spinning worker never left the job it found: " + pool.Describe());
            // Meanwhile the owner takes X back, as Complete() does, and queues Y.
            Assert.True(pool.TryRunHelpable());
            Assert.Equal(testThread, xThread);
            pool.QueueShared(new ActionItem(() =>
            {
                yThread = Environment.CurrentManagedThreadId;
                yRan.Set();
            }));
            goOn.Release();

            // Second look: the head has moved (X was taken), so the worker leaves Y too.
            Assert.True(leftOne.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "the worker took Y although the head had just moved");
            goOn.Release();

            // Third look: nothing was taken since the second, so the worker takes Y and runs it.
            Assert.True(yRan.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "nobody ran Y: " + pool.Describe());
            Assert.NotEqual(testThread, yThread);
            Assert.Equal(2, Volatile.Read(ref leftCount));
        }
        finally
        {
            WorkerPool.TestHookLeftAJob = null;
            goOn.Release(4);
            pool.Dispose();
        }
    }
#endif

    /// <summary>
    /// The patience never strands a job: jobs queued by a thread that never takes them back, one at a time and in bursts,
    /// with the workers parked, spinning, or busy, all run, each once.
    /// </summary>
    [Fact]
    public void JobsNobodyTakesBack_AllRunOnce_WhateverTheWorkersAreDoing()
    {
        var pool = new WorkerPool(2, "patience test worker");
        try
        {
            const int Rounds = 400;
            int[] runs = new int[Rounds * 4];
            var rng = new Random(7);
            int queued = 0;
            for (int round = 0; round < Rounds; round++)
            {
                int burst = 1 + rng.Next(4);
                for (int b = 0; b < burst; b++)
                {
                    int index = queued++;
                    pool.QueueShared(new ActionItem(() => Interlocked.Increment(ref runs[index])));
                }
                switch (rng.Next(3))
                {
                    case 0:
                        break; // straight on: the workers are busy or spinning
                    case 1:
                        Thread.SpinWait(rng.Next(2000)); // a few microseconds: a spinning worker's next looks
                        break;
                    default:
                        SpinWait.SpinUntil(() => pool.IdleWorkers == 2, 20); // parked, mostly
                        break;
                }
            }
            int total = queued;
            TestUtil.SpinUntil(() => Sum(runs, total) == total, () => $"{Sum(runs, total)} of {total} ran: {pool.Describe()}");
            for (int i = 0; i < total; i++)
            {
                Assert.True(runs[i] == 1, $"job {i} ran {runs[i]} times");
            }
        }
        finally
        {
            pool.Dispose();
        }
    }

    private static int Sum(int[] runs, int count)
    {
        int sum = 0;
        for (int i = 0; i < count; i++)
        {
            sum += Volatile.Read(ref runs[i]);
        }
        return sum;
    }
}

using System;
using System.Threading;
using System.Threading.Tasks;
using Xunit.Abstractions;

namespace SpindleLib.Tests.Tasks;

/// <summary>The long promise race. Runs alone (sequential collection) so its two threads get the two cores.</summary>
[Collection(SequentialCollection.Name)]
public class PromiseRaceStressTests
{
    private readonly ITestOutputHelper _output;

    public PromiseRaceStressTests(ITestOutputHelper output) => _output = output;

    [Fact]
    public async Task SetAndAwait_OneMillionCyclesBetweenTwoThreads_EveryResultSeenExactlyOnce()
    {
        int cycles = TestUtil.Stress(1_000_000);
        // Cycles keep starting until all have run or Race.Budget has passed: on a loaded machine (two busy loops beside
        // it on the two cores) each hand-over waits for a time slice, and a million took longer than the timeout. Past
        // the budget they still go on until MinCycles have run, however long that takes (the timeout below bounds it):
        // a floor checked at the budget made the count depend on the machine's load, and the test failed with "only 9216
        // cycles ran in 20 s" (4096 once) with four busy loops beside it at a load of 12, where a cycle took 2 to 5 ms.
        const int MinCycles = 10 * 1024; // ten of each forced order (see below)
        int limit = cycles; // the awaiter lowers it to the cycle it stopped at; the setter completes exactly the cycles below
        var elapsed = System.Diagnostics.Stopwatch.StartNew();
        var promise = new Promise<int>();
        SpindleTask<int> current = default;
        int ready = -1;     // the cycle whose task the awaiter has taken: the setter may complete it
        int consumed = -1;  // the last cycle whose result the continuation has read
        int registered = -1; // the last forced cycle whose continuation the awaiter has registered
        long sum = 0;
        int stop = 0;
        int awaiterThread = 0;
        long completedBeforeAwait = 0; // IsCompleted already true: the await's synchronous path
        long ranOnAwaiter = 0;         // OnCompleted found the task completed (or won the race) and ran it inline
        long ranOnSetter = 0;          // TrySetResult found the continuation registered and ran it

        Action continuation = () =>
        {
            int result = current.GetAwaiter().GetResult();
            sum += result;
            if (Environment.CurrentManagedThreadId == awaiterThread)
            {
                ranOnAwaiter++;
            }
            else
            {
                ranOnSetter++;
            }
            Volatile.Write(ref consumed, result);
        };

        // Both orders must be tried whatever the scheduler does: on a loaded machine the two threads may only interleave
        // at preemption, and one order then took every cycle ("the set never came before the await", with the load at 10
        // to 13 on two cores). So one cycle in 1,024 forces each order, and the others race freely.
        static bool RegistrationFirst(int cycle) => (cycle & 1023) == 0;
        static bool SetFirst(int cycle) => (cycle & 1023) == 512;

        void SpinUntilCompleted(SpindleTask<int> task)
        {
            var spin = default(SpinWait);
            while (!task.IsCompleted)
            {
                if (Volatile.Read(ref stop) != 0)
                {
                    throw new OperationCanceledException("stopped");
                }
                spin.SpinOnce(sleep1Threshold: -1);
            }
        }

        // Waits for field to reach value; false if the awaiter stopped before cycle `value` (only the setter waits on that).
        bool SpinUntil(ref int field, int value)
        {
            var spin = default(SpinWait);
            while (Volatile.Read(ref field) != value)
            {
                if (Volatile.Read(ref stop) != 0)
                {
                    throw new OperationCanceledException("stopped");
                }
                if (value >= Volatile.Read(ref limit))
                {
                    return false;
                }
                spin.SpinOnce(sleep1Threshold: -1);
            }
            return true;
        }

        Task awaiter = TestUtil.RunOnThread(() =>
        {
            awaiterThread = Environment.CurrentManagedThreadId;
            for (int i = 0; i < cycles; i++)
            {
                if ((i & 1023) == 0 && i >= MinCycles && elapsed.Elapsed > Race.Budget)
                {
                    Volatile.Write(ref limit, i); // cycle i is never published: the setter stops before it
                    break;
                }
                if (i > 0)
                {
                    promise.Reset();
                }
                current = promise.Task;
                Volatile.Write(ref ready, i); // from here the setter races this thread
                if (SetFirst(i))
                {
                    SpinUntilCompleted(current); // a cycle of the forced order: the set comes before the await
                }
                SpindleTask<int>.Awaiter a = current.GetAwaiter();
                if (a.IsCompleted)
                {
                    completedBeforeAwait++;
                    sum += a.GetResult();
                    Volatile.Write(ref consumed, i);
                }
                else
                {
                    a.UnsafeOnCompleted(continuation);
                    if (RegistrationFirst(i))
                    {
                        Volatile.Write(ref registered, i);
                    }
                }
                SpinUntil(ref consumed, i);
            }
        }, "promise awaiter");

        Task setter = TestUtil.RunOnThread(() =>
        {
            for (int i = 0; i < cycles; i++)
            {
                if (!SpinUntil(ref ready, i))
                {
                    break; // the awaiter stopped at cycle i
                }
                if (RegistrationFirst(i))
                {
                    SpinUntil(ref registered, i); // a cycle of the forced order: the registration comes before the set
                }
                if (!promise.TrySetResult(i))
                {
                    throw new InvalidOperationException("TrySetResult lost on a fresh use in cycle " + i);
                }
            }
        }, "promise setter");

        try
        {
            // MinCycles took 55 s at the worst rate seen with four busy loops beside it, and over 120 s at a load average of
            // 60: a hang is a cycle that stops for the suite's bound, not a slow machine.
            await TestUtil.WithStallTimeout(
                Task.WhenAll(awaiter, setter),
                () => Volatile.Read(ref consumed),
                () => $"stuck at cycle {Volatile.Read(ref consumed)} (ready {Volatile.Read(ref ready)}, registered {Volatile.Read(ref registered)})",
                TestUtil.StressTimeout(TestUtil.DefaultTimeoutSeconds));
        }
        finally
        {
            Volatile.Write(ref stop, 1);
        }

        int ran = Volatile.Read(ref limit);
        _output.WriteLine($"{ran} cycles (at least {MinCycles} asked) in {elapsed.Elapsed.TotalSeconds:F1} s; completed before await: {completedBeforeAwait}, continuation inline on awaiter: {ranOnAwaiter}, on setter: {ranOnSetter}");
        Assert.Equal((long)ran * (ran - 1) / 2, sum);
        Assert.Equal(ran, completedBeforeAwait + ranOnAwaiter + ranOnSetter);
        Assert.True(ran >= Math.Min(cycles, MinCycles), $"only {ran} cycles ran in {elapsed.Elapsed.TotalSeconds:F0} s: the race was hardly tried");
        // Both orders happened: the forced cycles make sure of it, on any machine and under any load.
        Assert.True(ranOnSetter > 0, "the continuation never ran on the setter: the registration always came second");
        Assert.True(completedBeforeAwait + ranOnAwaiter > 0, "the set never came before the await");
    }
}

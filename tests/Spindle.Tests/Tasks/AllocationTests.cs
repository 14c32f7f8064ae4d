using System;
using System.Diagnostics;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// Zero-allocation claims, measured with the calling thread's allocation counter. Each scenario is warmed up first
/// (JIT, statics, pools); then the same loop is measured again until a run allocates nothing, within a bound:
/// a run or two may still include tier-0 code (which can box where optimized code does not), but a per-operation
/// allocation shows in every run and fails the test. Run alone, so the JIT's tier-up is not held back by other tests.
/// </summary>
[Collection(SequentialCollection.Name)]
public class AllocationTests
{
    private const int Iterations = 1_000;

    private static void AssertSteadyStateAllocatesNothing(Action<int> iteration) => TestUtil.AssertSteadyStateAllocatesNothing(iteration, Iterations);


    [Fact]
    public void AsyncMethod_CompletingSynchronously_AllocatesNothing()
    {
        AssertSteadyStateAllocatesNothing(static i =>
        {
            TestUtil.CompletesSynchronously(i).GetAwaiter().GetResult();
            if (TestUtil.CompletesSynchronouslyWithValue(i).GetAwaiter().GetResult() != i + 1)
            {
                throw new InvalidOperationException("wrong result");
            }
        });
    }

    private static async SpindleTask<int> AwaitPromise(Promise<int> promise) => await promise.Task + 1;

    private static async SpindleTask<int> AwaitNested(Promise<int> promise) => await AwaitPromise(promise) + 1;

    [Fact]
    public void AsyncMethod_AwaitingAnAlreadyCompletedPromise_AllocatesNothing()
    {
        var promise = new Promise<int>();
        AssertSteadyStateAllocatesNothing(i =>
        {
            promise.Reset();
            promise.SetResult(i);
            if (AwaitPromise(promise).GetAwaiter().GetResult() != i + 1)
            {
                throw new InvalidOperationException("wrong result");
            }
        });
    }

    [Fact]
    public void AsyncMethod_SuspendingOnAPendingPromise_SteadyStateAllocatesNothing()
    {
        // Suspends, so it rents a box; reading the result returns the box to this thread's slot for the next call.
        var promise = new Promise<int>();
        AssertSteadyStateAllocatesNothing(i =>
        {
            promise.Reset();
            SpindleTask<int> task = AwaitNested(promise);
            promise.SetResult(i);
            if (task.GetAwaiter().GetResult() != i + 2)
            {
                throw new InvalidOperationException("wrong result");
            }
        });
    }

    /// <summary>A type no other code awaits, so the builder's await path is compiled afresh for this test.</summary>
    private struct FirstAwaitProbe
    {
        public int Value;
    }

    private static async SpindleTask<int> AwaitProbe(Promise<FirstAwaitProbe> promise) => (await promise.Task).Value + 1;

    [Fact]
    public void AsyncMethod_SuspendingInCodeTheJitHasNotOptimizedYet_AllocatesNothing()
    {
        // A handful of calls on a fresh instantiation: far below the 30 calls after which the runtime would optimize
        // the code, so this measures first-call (Tier-0) code, which boxed a struct awaiter in every suspension (32 B)
        // until the await dispatch was compiled optimized from its first call. A loaded machine can keep a busy
        // process in Tier-0 code for seconds, and the benchmarks saw it.
        var promise = new Promise<FirstAwaitProbe>();
        long[] bytes = new long[4];
        for (int i = 0; i < bytes.Length; i++)
        {
            promise.Reset();
            long before = GC.GetAllocatedBytesForCurrentThread();
            SpindleTask<int> task = AwaitProbe(promise);
            promise.SetResult(new FirstAwaitProbe { Value = i });
            int result = task.GetAwaiter().GetResult();
            bytes[i] = GC.GetAllocatedBytesForCurrentThread() - before;
            Assert.Equal(i + 1, result);
        }
        // The first call rents a new box (the pool is empty for this state machine); later calls reuse it.
        Assert.Equal(new long[] { 0, 0, 0 }, bytes[1..]);
    }

    [Fact]
    public void AsyncMethod_ResumedOnAWorkerByAPromiseThatRunsContinuationsAsynchronously_AllocatesNothingOnAnyThread()
    {
        // The box is queued to the workers as itself; nothing is allocated on the completing thread or on the worker.
        // Counted on every thread, so the runtime's own threads may add a few hundred bytes to a run: the bound is far
        // below one byte per operation.
        const int Operations = 20_000;
        var promise = new Promise<int>(runContinuationsAsynchronously: true);
        void Run()
        {
            for (int i = 0; i < Operations; i++)
            {
                promise.Reset();
                SpindleTask<int> task = AwaitPromise(promise);
                promise.SetResult(i);
                if (task.GetAwaiter().GetResult() != i + 1)
                {
                    throw new InvalidOperationException("wrong result");
                }
            }
        }
        Run();
        long fewest = long.MaxValue;
        for (int run = 0; run < 10 && fewest >= Operations / 4; run++)
        {
            long before = GC.GetTotalAllocatedBytes(precise: true);
            Run();
            fewest = Math.Min(fewest, GC.GetTotalAllocatedBytes(precise: true) - before);
        }
        Assert.True(fewest < Operations / 4, $"{Operations} dispatched resumptions allocated {fewest} bytes on all threads");
    }

    [Fact]
    public void Promise_ResetSetReadCycle_AllocatesNothing()
    {
        var promise = new Promise();
        AssertSteadyStateAllocatesNothing(_ =>
        {
            promise.Reset();
            SpindleTask task = promise.Task;
            promise.SetResult();
            task.GetAwaiter().GetResult();
        });
    }

    [Fact]
    public void Signal_WaitSetCycle_AllocatesNothing()
    {
        var signal = new Signal();
        AssertSteadyStateAllocatesNothing(_ =>
        {
            SpindleTask wait = signal.WaitAsync();
            signal.Set();
            wait.GetAwaiter().GetResult();
            signal.Set();
            signal.WaitAsync().GetAwaiter().GetResult();
        });
    }

    [Fact]
    public void AsValueTask_PendingPromise_AllocatesNothing()
    {
        var promise = new Promise<int>();
        AssertSteadyStateAllocatesNothing(i =>
        {
            promise.Reset();
            ValueTask<int> valueTask = promise.Task.AsValueTask();
            ValueTask untyped = promise.Task.AsSpindleTask().AsValueTask();
            promise.SetResult(i);
            if (valueTask.GetAwaiter().GetResult() != i)
            {
                throw new InvalidOperationException("wrong result");
            }
            untyped.GetAwaiter().GetResult();
        });
    }

    [Fact]
    public void FromResultAndCompletedTask_ReadAndPreserved_AllocateNothing()
    {
        AssertSteadyStateAllocatesNothing(static i =>
        {
            SpindleTask<int> task = SpindleTask.FromResult(i);
            if (task.Preserve().GetAwaiter().GetResult() != i)
            {
                throw new InvalidOperationException("wrong result");
            }
            SpindleTask.CompletedTask.GetAwaiter().GetResult();
            _ = task.AsValueTask();
        });
    }
    private static async SpindleTask<int> AwaitPreservedTwice(SpindleTask<int> preserved) => await preserved + await preserved;

    /// <summary>Bytes allocated on this thread by <paramref name="iteration"/>, the fewest of several measured runs, per iteration.</summary>
    private static long FewestBytesPerIteration(Action<int> iteration)
    {
        for (int i = 0; i < 2 * Iterations; i++)
        {
            iteration(i);
        }
        long fewest = long.MaxValue;
        for (int run = 0; run < 10; run++)
        {
            long before = GC.GetAllocatedBytesForCurrentThread();
            for (int i = 0; i < Iterations; i++)
            {
                iteration(i);
            }
            fewest = Math.Min(fewest, GC.GetAllocatedBytesForCurrentThread() - before);
        }
        return fewest / Iterations;
    }

    [Fact]
    public void Preserve_OfAPendingTaskAwaitedByOneWaiter_AllocatesTheOneObjectItDocuments()
    {
        // Preserve() documents one object for a task that has not yet succeeded. A library author's async lazy value (one
        // preserved task, awaited by one caller at a time) measured 175 B for a pending task awaited once: the source, its
        // lock object, a list for its waiters and the list's array (docs/decisions.md section 44). The waiter now takes no
        // allocation of its own: awaiting the preserved task costs what preserving it does, and that is one object.
        var promise = new Promise<int>();
        long preservedOnly = FewestBytesPerIteration(i =>
        {
            promise.Reset();
            SpindleTask<int> preserved = promise.Task.Preserve();
            promise.SetResult(i);
            if (preserved.GetAwaiter().GetResult() != i)
            {
                throw new InvalidOperationException("wrong result");
            }
        });
        long awaited = FewestBytesPerIteration(i =>
        {
            promise.Reset();
            SpindleTask<int> preserved = promise.Task.Preserve();
            SpindleTask<int> sum = AwaitPreservedTwice(preserved); // suspends on the pending task: one waiter, then a read
            promise.SetResult(i);
            if (sum.GetAwaiter().GetResult() != 2 * i)
            {
                throw new InvalidOperationException("wrong result");
            }
        });
        Assert.True(awaited == preservedOnly, $"a preserved task awaited by one waiter allocated {awaited} B, one never awaited {preservedOnly} B: the waiter cost {awaited - preservedOnly} B");
        // One object: a header and the source's fields (a reference, the outcome, the token and flags, the first waiter).
        Assert.True(preservedOnly <= 88, $"Preserve() of a pending task allocated {preservedOnly} B, more than one object of its size");
    }
}

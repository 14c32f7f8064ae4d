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
}

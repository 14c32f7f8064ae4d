using System;

namespace SpindleLib.Tests.Combinators;

/// <summary>
/// WhenAll/WhenAny over Spindle promises allocate nothing in steady state, for any count, inputs completed or pending.
/// Sequential, as the other allocation tests: a busy machine makes tier-up (and so the measurement) slower.
/// </summary>
[Collection(SequentialCollection.Name)]
public class CombinatorAllocationTests
{
    private const int Iterations = 1_000;

    public static TheoryData<int> Counts => new() { 2, 3, 8 };

    /// <summary>Reusable promises and a reusable input buffer: the only objects a steady-state caller keeps.</summary>
    private sealed class Inputs
    {
        public readonly Promise[] Promises;
        public readonly SpindleTask[] Tasks;

        public Inputs(int n)
        {
            Promises = new Promise[n];
            Tasks = new SpindleTask[n];
            for (int i = 0; i < n; i++)
            {
                Promises[i] = new Promise();
                Promises[i].SetResult(); // so that the first Reset starts a clean use
            }
        }

        /// <summary>Resets every promise and fills the buffer with their new tasks.</summary>
        public ReadOnlySpan<SpindleTask> Fresh()
        {
            for (int i = 0; i < Promises.Length; i++)
            {
                Promises[i].Reset();
                Tasks[i] = Promises[i].Task;
            }
            return Tasks;
        }

        public void CompleteAll()
        {
            foreach (Promise p in Promises)
            {
                p.TrySetResult();
            }
        }
    }

    [Theory]
    [MemberData(nameof(Counts))]
    public void WhenAll_PendingPromiseInputs_SteadyStateAllocatesNothing(int n)
    {
        var inputs = new Inputs(n);
        TestUtil.AssertSteadyStateAllocatesNothing(i =>
        {
            SpindleTask all = SpindleTask.WhenAll(inputs.Fresh());
            if (all.IsCompleted)
            {
                throw new InvalidOperationException("completed before its inputs");
            }
            inputs.CompleteAll();
            all.GetAwaiter().GetResult();
        }, Iterations);
    }

    [Theory]
    [MemberData(nameof(Counts))]
    public void WhenAll_CompletedPromiseInputs_SteadyStateAllocatesNothing(int n)
    {
        var inputs = new Inputs(n);
        TestUtil.AssertSteadyStateAllocatesNothing(i =>
        {
            ReadOnlySpan<SpindleTask> tasks = inputs.Fresh();
            inputs.CompleteAll();
            SpindleTask.WhenAll(tasks).GetAwaiter().GetResult();
        }, Iterations);
    }

    [Theory]
    [MemberData(nameof(Counts))]
    public void WhenAll_SomeInputsCompletedSomePending_SteadyStateAllocatesNothing(int n)
    {
        var inputs = new Inputs(n);
        TestUtil.AssertSteadyStateAllocatesNothing(i =>
        {
            ReadOnlySpan<SpindleTask> tasks = inputs.Fresh();
            inputs.Promises[i % n].SetResult();
            SpindleTask all = SpindleTask.WhenAll(tasks);
            inputs.CompleteAll();
            all.GetAwaiter().GetResult();
        }, Iterations);
    }

    [Theory]
    [MemberData(nameof(Counts))]
    public void WhenAny_PendingPromiseInputs_SteadyStateAllocatesNothing(int n)
    {
        var inputs = new Inputs(n);
        TestUtil.AssertSteadyStateAllocatesNothing(i =>
        {
            SpindleTask<int> any = SpindleTask.WhenAny(inputs.Fresh());
            int k = i % n;
            inputs.Promises[k].SetResult();
            if (any.GetAwaiter().GetResult() != k)
            {
                throw new InvalidOperationException("wrong winner");
            }
            inputs.CompleteAll(); // the losers too, before the next Reset
        }, Iterations);
    }

    [Theory]
    [MemberData(nameof(Counts))]
    public void WhenAny_LosersCompleteBeforeTheResultIsRead_SteadyStateAllocatesNothing(int n)
    {
        var inputs = new Inputs(n);
        TestUtil.AssertSteadyStateAllocatesNothing(i =>
        {
            SpindleTask<int> any = SpindleTask.WhenAny(inputs.Fresh());
            int k = (n - 1) - (i % n);
            inputs.Promises[k].SetResult();
            inputs.CompleteAll();
            if (any.GetAwaiter().GetResult() != k)
            {
                throw new InvalidOperationException("wrong winner");
            }
        }, Iterations);
    }

    [Theory]
    [MemberData(nameof(Counts))]
    public void WhenAny_CompletedPromiseInputs_SteadyStateAllocatesNothing(int n)
    {
        var inputs = new Inputs(n);
        TestUtil.AssertSteadyStateAllocatesNothing(i =>
        {
            ReadOnlySpan<SpindleTask> tasks = inputs.Fresh();
            inputs.CompleteAll();
            if (SpindleTask.WhenAny(tasks).GetAwaiter().GetResult() != 0)
            {
                throw new InvalidOperationException("wrong winner");
            }
        }, Iterations);
    }

    [Theory]
    [MemberData(nameof(Counts))]
    public void WhenAny_OneInputCompletedOthersPending_SteadyStateAllocatesNothing(int n)
    {
        var inputs = new Inputs(n);
        TestUtil.AssertSteadyStateAllocatesNothing(i =>
        {
            ReadOnlySpan<SpindleTask> tasks = inputs.Fresh();
            int k = i % n;
            inputs.Promises[k].SetResult();
            if (SpindleTask.WhenAny(tasks).GetAwaiter().GetResult() != k)
            {
                throw new InvalidOperationException("wrong winner");
            }
            inputs.CompleteAll(); // the pending losers are read (Forget-style) as they finish
        }, Iterations);
    }
}

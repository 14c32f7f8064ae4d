using System;
using System.Threading;
using System.Threading.Tasks;
using static SpindleLib.Tests.Combinators.CombinatorTestSupport;

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

    /// <summary>Resettable ValueTask sources, as pooled ones are: the only objects a steady-state caller keeps.</summary>
    private sealed class ValueInputs
    {
        public readonly CountingValueTaskSource<int>[] Sources;
        public readonly ValueTask<int>[] Typed;
        public readonly ValueTask[] Untyped;

        public ValueInputs(int n)
        {
            Sources = new CountingValueTaskSource<int>[n];
            Typed = new ValueTask<int>[n];
            Untyped = new ValueTask[n];
            for (int i = 0; i < n; i++)
            {
                Sources[i] = new CountingValueTaskSource<int>();
            }
        }

        public void Fresh()
        {
            for (int i = 0; i < Sources.Length; i++)
            {
                Sources[i].Reset();
                Typed[i] = Sources[i].Task;
                Untyped[i] = Sources[i].UntypedTask;
            }
        }

        public void CompleteAll(int offset)
        {
            for (int i = 0; i < Sources.Length; i++)
            {
                Sources[i].SetResult(offset + i);
            }
        }
    }

    [Theory]
    [MemberData(nameof(Counts))]
    public void WhenAllAndWhenAny_PendingValueTasks_SteadyStateAllocatesNothing(int n)
    {
        var inputs = new ValueInputs(n);
        TestUtil.AssertSteadyStateAllocatesNothing(i =>
        {
            inputs.Fresh();
            SpindleTask all = SpindleTask.WhenAll(inputs.Untyped);
            inputs.CompleteAll(0);
            all.GetAwaiter().GetResult();

            inputs.Fresh();
            SpindleTask<(int Index, int Result)> any = SpindleTask.WhenAny(inputs.Typed);
            int k = i % n;
            inputs.Sources[k].SetResult(i);
            if (any.GetAwaiter().GetResult() != (k, i))
            {
                throw new InvalidOperationException("wrong winner");
            }
            for (int j = 0; j < n; j++)
            {
                if (j != k)
                {
                    inputs.Sources[j].SetResult(0);
                }
            }
        }, Iterations);
    }

    [Theory]
    [MemberData(nameof(Counts))]
    public void WhenAll_IntoDestination_PendingInputsOfEveryKind_SteadyStateAllocatesNothing(int n)
    {
        var values = new ValueInputs(n);
        var promises = new Promise<int>[n];
        var spindle = new SpindleTask<int>[n];
        for (int i = 0; i < n; i++)
        {
            promises[i] = new Promise<int>();
            promises[i].SetResult(0);
        }
        int[] destination = new int[n];
        TestUtil.AssertSteadyStateAllocatesNothing(i =>
        {
            for (int k = 0; k < n; k++)
            {
                promises[k].Reset();
                spindle[k] = promises[k].Task;
            }
            SpindleTask all = SpindleTask.WhenAll(spindle, destination);
            for (int k = n - 1; k >= 0; k--)
            {
                promises[k].SetResult(i + k);
            }
            all.GetAwaiter().GetResult();
            if (destination[n - 1] != i + n - 1)
            {
                throw new InvalidOperationException("wrong result");
            }

            values.Fresh();
            SpindleTask fromValues = SpindleTask.WhenAll(values.Typed, destination);
            values.CompleteAll(i);
            fromValues.GetAwaiter().GetResult();
            if (destination[0] != i)
            {
                throw new InvalidOperationException("wrong result");
            }
        }, Iterations);
    }

    [Fact]
    public void WhenAll_AggregateOptionAndCancellationToken_NothingFails_SteadyStateAllocatesNothing()
    {
        var inputs = new Inputs(3);
        var options = new WhenAllOptions { AggregateExceptions = true };
        using var cts = new CancellationTokenSource();
        TestUtil.AssertSteadyStateAllocatesNothing(i =>
        {
            SpindleTask all = SpindleTask.WhenAll(inputs.Fresh(), options, cts.Token);
            inputs.CompleteAll();
            all.GetAwaiter().GetResult();

            SpindleTask<int> any = SpindleTask.WhenAny(inputs.Fresh(), cts.Token);
            inputs.Promises[2].SetResult();
            if (any.GetAwaiter().GetResult() != 2)
            {
                throw new InvalidOperationException("wrong winner");
            }
            inputs.CompleteAll();
        }, Iterations);
    }

    [Fact]
    public void WhenAll_TypedToAnArray_AllocatesOnlyTheArray()
    {
        var promises = new[] { new Promise<int>(), new Promise<int>() };
        var inputs = new SpindleTask<int>[2];
        foreach (Promise<int> p in promises)
        {
            p.SetResult(0);
        }
        void Iteration()
        {
            for (int k = 0; k < 2; k++)
            {
                promises[k].Reset();
                inputs[k] = promises[k].Task;
            }
            SpindleTask<int[]> all = SpindleTask.WhenAll(inputs);
            promises[1].SetResult(1);
            promises[0].SetResult(0);
            all.GetAwaiter().GetResult();
        }
        for (int i = 0; i < 2 * Iterations; i++)
        {
            Iteration();
        }
        long fewest = long.MaxValue;
        for (int run = 0; run < 20 && fewest > 0; run++)
        {
            long before = GC.GetAllocatedBytesForCurrentThread();
            for (int i = 0; i < Iterations; i++)
            {
                Iteration();
            }
            fewest = Math.Min(fewest, GC.GetAllocatedBytesForCurrentThread() - before);
        }
        // One int[2] per call (24 bytes of header and length, 8 of data, on 64-bit), nothing else.
        long arrayBytes = IntPtr.Size == 8 ? 32 : 20;
        Assert.Equal(arrayBytes * Iterations, fewest);
    }
}

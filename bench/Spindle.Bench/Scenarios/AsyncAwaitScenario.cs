using System;
using System.Runtime.CompilerServices;
using System.Threading.Tasks;
using SpindleLib.Bench.Harness;

namespace SpindleLib.Bench.Scenarios;

/// <summary>
/// One async method awaiting a source that is already complete (<c>completed</c>) or that is completed later from
/// outside (<c>pending</c>): the cost of one await, as in seed 001 and the public cross-library benchmarks.
/// </summary>
public sealed class AsyncAwaitScenario : Scenario
{
    public override string Id => "asyncawait";

    public override string Title => "one async method awaiting a completed or a pending source";

    public override string Seed => "001";

    public override string Baseline => "Task";

    public override string Notes =>
        "Each operation creates (or resets) a source, calls an async method that awaits it, completes the source, and reads the method's result. " +
        "Task: a new TaskCompletionSource and an `async Task` method. ValueTask: an `async ValueTask` method with PoolingAsyncValueTaskMethodBuilder " +
        "awaiting a reusable ManualResetValueTaskSourceCore source (the BCL's zero-allocation building blocks). Spindle: an `async SpindleTask` " +
        "method awaiting a reused Promise. Case nested: the public cross-library benchmark's shape, 7 async methods (a top, two pairs, four leaves) " +
        "over 4 sources completed from outside, per operation. In each case the systems' rounds alternate (side by side), after a warm-up each. Anchors UniTask and ProtoPromise: not available from the package registry this machine reaches.";

    public override void Run(BenchContext context)
    {
        int ops = context.Pick(1_000, 200_000, 1_000_000);
        var valueSource = new AwaitSubjects.ResettableValueTaskSource();
        var promise = new Promise();
        RunSingle(context, ops, valueSource, promise);
        RunNested(context, context.Pick(200, 50_000, 250_000));
    }

    private static void RunSingle(BenchContext context, int ops, AwaitSubjects.ResettableValueTaskSource valueSource, Promise promise)
    {
        Action completedTask = () =>
        {
            for (int i = 0; i < ops; i++)
            {
                var tcs = new TaskCompletionSource();
                tcs.SetResult();
                AwaitSubjects.AwaitTask(tcs.Task).GetAwaiter().GetResult();
            }
        };
        Action completedValueTask = () =>
        {
            for (int i = 0; i < ops; i++)
            {
                valueSource.Reset();
                valueSource.SetResult();
                AwaitSubjects.AwaitValueTask(valueSource.Task).GetAwaiter().GetResult();
            }
        };
        Action completedSpindle = () =>
        {
            for (int i = 0; i < ops; i++)
            {
                promise.Reset();
                promise.SetResult();
                AwaitSubjects.AwaitSpindle(promise.Task).GetAwaiter().GetResult();
            }
        };
        context.MeasureOperationsSideBySide("completed", ops, ("Task", completedTask), ("ValueTask", completedValueTask), ("Spindle", completedSpindle));

        Action pendingTask = () =>
        {
            for (int i = 0; i < ops; i++)
            {
                var tcs = new TaskCompletionSource();
                Task t = AwaitSubjects.AwaitTask(tcs.Task);
                tcs.SetResult();
                t.GetAwaiter().GetResult();
            }
        };
        Action pendingValueTask = () =>
        {
            for (int i = 0; i < ops; i++)
            {
                valueSource.Reset();
                ValueTask t = AwaitSubjects.AwaitValueTask(valueSource.Task);
                valueSource.SetResult();
                t.GetAwaiter().GetResult();
            }
        };
        Action pendingSpindle = () =>
        {
            for (int i = 0; i < ops; i++)
            {
                promise.Reset();
                SpindleTask t = AwaitSubjects.AwaitSpindle(promise.Task);
                promise.SetResult();
                t.GetAwaiter().GetResult();
            }
        };
        context.MeasureOperationsSideBySide("pending", ops, ("Task", pendingTask), ("ValueTask", pendingValueTask), ("Spindle", pendingSpindle));
    }


    // Case "nested": the shape of the public cross-library benchmark (CSharpAsynchronousBenchmarks, "AsyncAwait" with
    // pending sources): a top method awaits two children, each of which awaits two leaves, each of which awaits its own
    // pending source. One operation = 7 async method calls and 4 sources completed from outside.
    private const int Leaves = 4;
    private static readonly TaskCompletionSource[] s_tcs = new TaskCompletionSource[Leaves];
    private static readonly AwaitSubjects.ResettableValueTaskSource[] s_vts = CreateSources();
    private static readonly Promise[] s_promises = { new(), new(), new(), new() };
    private static int s_leaf;

    private static AwaitSubjects.ResettableValueTaskSource[] CreateSources()
    {
        var sources = new AwaitSubjects.ResettableValueTaskSource[Leaves];
        for (int i = 0; i < Leaves; i++)
        {
            sources[i] = new AwaitSubjects.ResettableValueTaskSource();
        }
        return sources;
    }

    private static void RunNested(BenchContext context, int ops)
    {
        const string Case = "nested";
        Action nestedTask = () =>
        {
            for (int i = 0; i < ops; i++)
            {
                s_leaf = 0;
                Task t = TaskTop();
                for (int k = 0; k < Leaves; k++)
                {
                    s_tcs[k].SetResult();
                }
                t.GetAwaiter().GetResult();
            }
        };
        Action nestedValueTask = () =>
        {
            for (int i = 0; i < ops; i++)
            {
                s_leaf = 0;
                ValueTask t = ValueTaskTop();
                for (int k = 0; k < Leaves; k++)
                {
                    s_vts[k].SetResult();
                }
                t.GetAwaiter().GetResult();
            }
        };
        Action nestedSpindle = () =>
        {
            for (int i = 0; i < ops; i++)
            {
                s_leaf = 0;
                SpindleTask t = SpindleTop();
                for (int k = 0; k < Leaves; k++)
                {
                    s_promises[k].SetResult();
                }
                t.GetAwaiter().GetResult();
            }
        };
        context.MeasureOperationsSideBySide(Case, ops, ("Task", nestedTask), ("ValueTask", nestedValueTask), ("Spindle", nestedSpindle));
    }

    private static async Task TaskTop()
    {
        await TaskPair();
        await TaskPair();
    }

    private static async Task TaskPair()
    {
        _ = await TaskLeaf();
        _ = await TaskLeaf();
    }

    private static async Task<int> TaskLeaf()
    {
        var tcs = new TaskCompletionSource();
        s_tcs[s_leaf++] = tcs;
        await tcs.Task;
        return 1;
    }

    [AsyncMethodBuilder(typeof(PoolingAsyncValueTaskMethodBuilder))]
    private static async ValueTask ValueTaskTop()
    {
        await ValueTaskPair();
        await ValueTaskPair();
    }

    [AsyncMethodBuilder(typeof(PoolingAsyncValueTaskMethodBuilder))]
    private static async ValueTask ValueTaskPair()
    {
        _ = await ValueTaskLeaf();
        _ = await ValueTaskLeaf();
    }

    [AsyncMethodBuilder(typeof(PoolingAsyncValueTaskMethodBuilder<>))]
    private static async ValueTask<int> ValueTaskLeaf()
    {
        AwaitSubjects.ResettableValueTaskSource source = s_vts[s_leaf++];
        source.Reset();
        await source.Task;
        return 1;
    }

    private static async SpindleTask SpindleTop()
    {
        await SpindlePair();
        await SpindlePair();
    }

    private static async SpindleTask SpindlePair()
    {
        _ = await SpindleLeaf();
        _ = await SpindleLeaf();
    }

    private static async SpindleTask<int> SpindleLeaf()
    {
        Promise promise = s_promises[s_leaf++];
        promise.Reset();
        await promise.Task;
        return 1;
    }
}

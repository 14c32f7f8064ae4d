using System;
using System.Runtime.CompilerServices;
using System.Threading.Tasks;
using System.Threading.Tasks.Sources;
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
        "method awaiting a reused Promise. Anchors UniTask and ProtoPromise: not available from the package registry this machine reaches.";

    public override void Run(BenchContext context)
    {
        int ops = context.Pick(1_000, 200_000, 1_000_000);
        var valueSource = new ResettableValueTaskSource();
        var promise = new Promise();

        context.MeasureOperations("completed", "Task", ops, () =>
        {
            for (int i = 0; i < ops; i++)
            {
                var tcs = new TaskCompletionSource();
                tcs.SetResult();
                AwaitTask(tcs.Task).GetAwaiter().GetResult();
            }
        });
        context.MeasureOperations("completed", "ValueTask", ops, () =>
        {
            for (int i = 0; i < ops; i++)
            {
                valueSource.Reset();
                valueSource.SetResult();
                AwaitValueTask(valueSource.Task).GetAwaiter().GetResult();
            }
        });
        context.MeasureOperations("completed", "Spindle", ops, () =>
        {
            for (int i = 0; i < ops; i++)
            {
                promise.Reset();
                promise.SetResult();
                AwaitSpindle(promise.Task).GetAwaiter().GetResult();
            }
        });

        context.MeasureOperations("pending", "Task", ops, () =>
        {
            for (int i = 0; i < ops; i++)
            {
                var tcs = new TaskCompletionSource();
                Task t = AwaitTask(tcs.Task);
                tcs.SetResult();
                t.GetAwaiter().GetResult();
            }
        });
        context.MeasureOperations("pending", "ValueTask", ops, () =>
        {
            for (int i = 0; i < ops; i++)
            {
                valueSource.Reset();
                ValueTask t = AwaitValueTask(valueSource.Task);
                valueSource.SetResult();
                t.GetAwaiter().GetResult();
            }
        });
        context.MeasureOperations("pending", "Spindle", ops, () =>
        {
            for (int i = 0; i < ops; i++)
            {
                promise.Reset();
                SpindleTask t = AwaitSpindle(promise.Task);
                promise.SetResult();
                t.GetAwaiter().GetResult();
            }
        });
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    private static async Task AwaitTask(Task task) => await task;

    [MethodImpl(MethodImplOptions.NoInlining)]
    [AsyncMethodBuilder(typeof(PoolingAsyncValueTaskMethodBuilder))]
    private static async ValueTask AwaitValueTask(ValueTask task) => await task;

    [MethodImpl(MethodImplOptions.NoInlining)]
    private static async SpindleTask AwaitSpindle(SpindleTask task) => await task;

    /// <summary>The BCL's reusable source: a class around <see cref="ManualResetValueTaskSourceCore{TResult}"/>.</summary>
    private sealed class ResettableValueTaskSource : IValueTaskSource
    {
        private ManualResetValueTaskSourceCore<bool> _core;

        public ValueTask Task => new(this, _core.Version);

        public void Reset() => _core.Reset();

        public void SetResult() => _core.SetResult(true);

        public void GetResult(short token) => _core.GetResult(token);

        public ValueTaskSourceStatus GetStatus(short token) => _core.GetStatus(token);

        public void OnCompleted(Action<object?> continuation, object? state, short token, ValueTaskSourceOnCompletedFlags flags)
            => _core.OnCompleted(continuation, state, token, flags);
    }
}

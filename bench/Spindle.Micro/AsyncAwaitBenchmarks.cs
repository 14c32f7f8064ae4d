using System;
using System.Runtime.CompilerServices;
using System.Threading.Tasks;
using System.Threading.Tasks.Sources;
using BenchmarkDotNet.Attributes;
using BenchmarkDotNet.Configs;

namespace SpindleLib.Micro;

/// <summary>
/// BenchmarkDotNet cross-check of the Spindle.Bench scenario "asyncawait": the same operations, measured by
/// BenchmarkDotNet with the BCL as the baseline and allocations counted on all threads.
/// </summary>
[MemoryDiagnoser]
[GroupBenchmarksBy(BenchmarkLogicalGroupRule.ByCategory)]
[CategoriesColumn]
public class AsyncAwaitBenchmarks
{
    private readonly Promise _promise = new();
    private readonly ResettableValueTaskSource _valueSource = new();

    [BenchmarkCategory("completed"), Benchmark(Baseline = true)]
    public void Completed_Task()
    {
        var tcs = new TaskCompletionSource();
        tcs.SetResult();
        AwaitTask(tcs.Task).GetAwaiter().GetResult();
    }

    [BenchmarkCategory("completed"), Benchmark]
    public void Completed_ValueTask()
    {
        _valueSource.Reset();
        _valueSource.SetResult();
        AwaitValueTask(_valueSource.Task).GetAwaiter().GetResult();
    }

    [BenchmarkCategory("completed"), Benchmark]
    public void Completed_Spindle()
    {
        _promise.Reset();
        _promise.SetResult();
        AwaitSpindle(_promise.Task).GetAwaiter().GetResult();
    }

    [BenchmarkCategory("pending"), Benchmark(Baseline = true)]
    public void Pending_Task()
    {
        var tcs = new TaskCompletionSource();
        Task t = AwaitTask(tcs.Task);
        tcs.SetResult();
        t.GetAwaiter().GetResult();
    }

    [BenchmarkCategory("pending"), Benchmark]
    public void Pending_ValueTask()
    {
        _valueSource.Reset();
        ValueTask t = AwaitValueTask(_valueSource.Task);
        _valueSource.SetResult();
        t.GetAwaiter().GetResult();
    }

    [BenchmarkCategory("pending"), Benchmark]
    public void Pending_Spindle()
    {
        _promise.Reset();
        SpindleTask t = AwaitSpindle(_promise.Task);
        _promise.SetResult();
        t.GetAwaiter().GetResult();
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    private static async Task AwaitTask(Task task) => await task;

    [MethodImpl(MethodImplOptions.NoInlining)]
    [AsyncMethodBuilder(typeof(PoolingAsyncValueTaskMethodBuilder))]
    private static async ValueTask AwaitValueTask(ValueTask task) => await task;

    [MethodImpl(MethodImplOptions.NoInlining)]
    private static async SpindleTask AwaitSpindle(SpindleTask task) => await task;

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

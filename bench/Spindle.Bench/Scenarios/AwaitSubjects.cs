using System;
using System.Runtime.CompilerServices;
using System.Threading.Tasks;
using System.Threading.Tasks.Sources;

namespace SpindleLib.Bench.Scenarios;

/// <summary>
/// What the await benchmarks await, shared by Spindle.Bench's "asyncawait" scenario and its BenchmarkDotNet
/// cross-check (bench/Spindle.Micro links this file), so that both measure exactly the same code.
/// </summary>
public static class AwaitSubjects
{
    /// <summary>An <c>async Task</c> method awaiting <paramref name="task"/>.</summary>
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static async Task AwaitTask(Task task) => await task;

    /// <summary>An <c>async ValueTask</c> method with the BCL's pooling builder awaiting <paramref name="task"/>.</summary>
    [MethodImpl(MethodImplOptions.NoInlining)]
    [AsyncMethodBuilder(typeof(PoolingAsyncValueTaskMethodBuilder))]
    public static async ValueTask AwaitValueTask(ValueTask task) => await task;

    /// <summary>An <c>async SpindleTask</c> method awaiting <paramref name="task"/>.</summary>
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static async SpindleTask AwaitSpindle(SpindleTask task) => await task;

    /// <summary>The BCL's reusable source: a class around <see cref="ManualResetValueTaskSourceCore{TResult}"/>.</summary>
    public sealed class ResettableValueTaskSource : IValueTaskSource
    {
        private ManualResetValueTaskSourceCore<bool> _core;

        /// <summary>The task of the current use.</summary>
        public ValueTask Task => new(this, _core.Version);

        /// <summary>Starts a new use.</summary>
        public void Reset() => _core.Reset();

        /// <summary>Completes the current use.</summary>
        public void SetResult() => _core.SetResult(true);

        /// <inheritdoc/>
        public void GetResult(short token) => _core.GetResult(token);

        /// <inheritdoc/>
        public ValueTaskSourceStatus GetStatus(short token) => _core.GetStatus(token);

        /// <inheritdoc/>
        public void OnCompleted(Action<object?> continuation, object? state, short token, ValueTaskSourceOnCompletedFlags flags)
            => _core.OnCompleted(continuation, state, token, flags);
    }
}

using System;
using System.Diagnostics;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Threading;

namespace SpindleLib;

public readonly partial struct SpindleTask
{
    /// <summary>
    /// Awaits the task with its cancellation returned as a value instead of thrown: <c>await task.SuppressCancellationThrow()</c>
    /// is true if the task was canceled, false if it succeeded. Allocates nothing, and builds no exception for a
    /// cancellation made by a token (a delay's, a frame wait's).
    /// </summary>
    /// <remarks>
    /// <para>Canceled means the task's failure is an <see cref="OperationCanceledException"/> (its status is
    /// <see cref="SpindleTaskStatus.Canceled"/>), whoever canceled it, as for UniTask's method of this name and .NET's
    /// <c>ConfigureAwaitOptions.SuppressThrowing</c>. Any other failure is still thrown, and so is misuse (a task already
    /// awaited).</para>
    /// <para>Otherwise it is a normal await: it consumes the task (a pooled source goes back to its pool), resumes where a
    /// plain await of the task resumes (on the loop thread for a frame loop's waits), and flows the
    /// <see cref="ExecutionContext"/>. Its <c>GetAwaiter().GetResult()</c> blocks while the task is pending, as the task's own does.</para>
    /// <para>Use it where cancellation is the expected way out, such as 10,000 entity loops cancelled by a scene unload:
    /// each throw and unwind of an <see cref="OperationCanceledException"/> costs microseconds.</para>
    /// </remarks>
    /// <example><code>
    /// while (true)
    /// {
    ///     if (await loop.Delay(TimeSpan.FromSeconds(1), token).SuppressCancellationThrow())
    ///     {
    ///         return; // unloaded
    ///     }
    ///     Tick();
    /// }
    /// </code></example>
    public CancellationSuppressedAwaitable SuppressCancellationThrow() => new(this);
}

public readonly partial struct SpindleTask<T>
{
    /// <summary>
    /// Awaits the task with its cancellation returned as a value instead of thrown: <c>await task.SuppressCancellationThrow()</c>
    /// is <c>(IsCanceled: true, Result: default)</c> if the task was canceled, else <c>(false, result)</c>. Allocates nothing.
    /// </summary>
    /// <remarks>As <see cref="SpindleTask.SuppressCancellationThrow"/>: any failure that is not an
    /// <see cref="OperationCanceledException"/>, and misuse, are still thrown; otherwise it is a normal await.</remarks>
    public CancellationSuppressedAwaitable<T> SuppressCancellationThrow() => new(this);
}

public readonly partial struct FrameAwaitable
{
    /// <summary>
    /// Awaits the frame-loop wait with its cancellation returned as a value instead of thrown: true if the wait was
    /// canceled. It resumes on the loop thread as a plain await does, and allocates nothing (see
    /// <see cref="SpindleTask.SuppressCancellationThrow"/>).
    /// </summary>
    public CancellationSuppressedFrameAwaitable SuppressCancellationThrow() => new(this);
}

/// <summary>Awaits a <see cref="SpindleTask"/>, returning true if it was canceled (<see cref="SpindleTask.SuppressCancellationThrow"/>).</summary>
[StructLayout(LayoutKind.Auto)]
public readonly struct CancellationSuppressedAwaitable
{
    private readonly SpindleTask _task;

    internal CancellationSuppressedAwaitable(SpindleTask task) => _task = task;

    /// <summary>Gets the awaiter.</summary>
    public Awaiter GetAwaiter() => new(_task.GetAwaiter());

    /// <summary>Awaits the task; <see cref="GetResult"/> returns true if it was canceled.</summary>
    [StackTraceHidden]
    public readonly struct Awaiter : ICriticalNotifyCompletion, ISpindleAwaiter
    {
        private readonly SpindleTask.Awaiter _awaiter;

        internal Awaiter(SpindleTask.Awaiter awaiter) => _awaiter = awaiter;

        /// <summary>True when the task has completed (see <see cref="SpindleTask.Awaiter.IsCompleted"/>).</summary>
        public bool IsCompleted => _awaiter.IsCompleted;

        /// <summary>Ends the await, consuming the task: true if it was canceled, false if it succeeded. Blocks if it is still pending.</summary>
        /// <exception cref="Exception">The task failed with an exception that is not an <see cref="OperationCanceledException"/>: that exception.</exception>
        /// <exception cref="InvalidOperationException">The task was already awaited.</exception>
        public bool GetResult() => _awaiter.GetResultOrCanceled();

        /// <summary>Schedules the continuation, flowing the current <see cref="ExecutionContext"/>.</summary>
        /// <exception cref="ArgumentNullException"><paramref name="continuation"/> is null.</exception>
        /// <exception cref="InvalidOperationException">The task already has an awaiter, or was already awaited.</exception>
        public void OnCompleted(Action continuation) => _awaiter.OnCompleted(continuation);

        /// <summary>Schedules the continuation without flowing the <see cref="ExecutionContext"/>.</summary>
        /// <exception cref="ArgumentNullException"><paramref name="continuation"/> is null.</exception>
        /// <exception cref="InvalidOperationException">The task already has an awaiter, or was already awaited.</exception>
        public void UnsafeOnCompleted(Action continuation) => _awaiter.UnsafeOnCompleted(continuation);

        void ISpindleAwaiter.OnCompletedForBox(StateMachineBoxBase box) => SuppressedAwaiters.OnCompletedForBox(in _awaiter, box);
    }
}

/// <summary>
/// Awaits a <see cref="SpindleTask{T}"/>, returning <c>(IsCanceled, Result)</c> instead of throwing a cancellation
/// (<see cref="SpindleTask{T}.SuppressCancellationThrow"/>).
/// </summary>
/// <typeparam name="T">The task's result type.</typeparam>
[StructLayout(LayoutKind.Auto)]
public readonly struct CancellationSuppressedAwaitable<T>
{
    private readonly SpindleTask<T> _task;

    internal CancellationSuppressedAwaitable(SpindleTask<T> task) => _task = task;

    /// <summary>Gets the awaiter.</summary>
    public Awaiter GetAwaiter() => new(_task.GetAwaiter());

    /// <summary>Awaits the task; <see cref="GetResult"/> returns whether it was canceled, and its result if not.</summary>
    [StackTraceHidden]
    public readonly struct Awaiter : ICriticalNotifyCompletion, ISpindleAwaiter
    {
        private readonly SpindleTask<T>.Awaiter _awaiter;

        internal Awaiter(SpindleTask<T>.Awaiter awaiter) => _awaiter = awaiter;

        /// <summary>True when the task has completed (see <see cref="SpindleTask{T}.Awaiter.IsCompleted"/>).</summary>
        public bool IsCompleted => _awaiter.IsCompleted;

        /// <summary>
        /// Ends the await, consuming the task: <c>(true, default)</c> if it was canceled, else <c>(false, result)</c>.
        /// Blocks if it is still pending.
        /// </summary>
        /// <exception cref="Exception">The task failed with an exception that is not an <see cref="OperationCanceledException"/>: that exception.</exception>
        /// <exception cref="InvalidOperationException">The task was already awaited.</exception>
        public (bool IsCanceled, T Result) GetResult()
        {
            T result = _awaiter.GetResultOrCanceled(out bool canceled);
            return (canceled, result);
        }

        /// <summary>Schedules the continuation, flowing the current <see cref="ExecutionContext"/>.</summary>
        /// <exception cref="ArgumentNullException"><paramref name="continuation"/> is null.</exception>
        /// <exception cref="InvalidOperationException">The task already has an awaiter, or was already awaited.</exception>
        public void OnCompleted(Action continuation) => _awaiter.OnCompleted(continuation);

        /// <summary>Schedules the continuation without flowing the <see cref="ExecutionContext"/>.</summary>
        /// <exception cref="ArgumentNullException"><paramref name="continuation"/> is null.</exception>
        /// <exception cref="InvalidOperationException">The task already has an awaiter, or was already awaited.</exception>
        public void UnsafeOnCompleted(Action continuation) => _awaiter.UnsafeOnCompleted(continuation);

        void ISpindleAwaiter.OnCompletedForBox(StateMachineBoxBase box) => SuppressedAwaiters.OnCompletedForBox(in _awaiter, box);
    }
}

/// <summary>Awaits a <see cref="FrameAwaitable"/>, returning true if it was canceled (<see cref="FrameAwaitable.SuppressCancellationThrow"/>).</summary>
[StructLayout(LayoutKind.Auto)]
public readonly struct CancellationSuppressedFrameAwaitable
{
    private readonly FrameAwaitable _awaitable;

    internal CancellationSuppressedFrameAwaitable(FrameAwaitable awaitable) => _awaitable = awaitable;

    /// <summary>Gets the awaiter.</summary>
    public Awaiter GetAwaiter() => new(_awaitable.GetAwaiter());

    /// <summary>Awaits the frame-loop wait; <see cref="GetResult"/> returns true if it was canceled.</summary>
    [StackTraceHidden]
    public readonly struct Awaiter : ICriticalNotifyCompletion, ISpindleAwaiter
    {
        private readonly FrameAwaitable.Awaiter _awaiter;

        internal Awaiter(FrameAwaitable.Awaiter awaiter) => _awaiter = awaiter;

        /// <summary>True when the wait is over (see <see cref="FrameAwaitable.Awaiter.IsCompleted"/>).</summary>
        public bool IsCompleted => _awaiter.IsCompleted;

        /// <summary>Ends the await: true if the wait was canceled.</summary>
        /// <exception cref="InvalidOperationException">The wait was already awaited.</exception>
        public bool GetResult() => _awaiter.GetResultOrCanceled();

        /// <summary>Schedules the continuation, flowing the current <see cref="ExecutionContext"/>.</summary>
        /// <exception cref="ArgumentNullException"><paramref name="continuation"/> is null.</exception>
        public void OnCompleted(Action continuation) => _awaiter.OnCompleted(continuation);

        /// <summary>Schedules the continuation without flowing the <see cref="ExecutionContext"/>.</summary>
        /// <exception cref="ArgumentNullException"><paramref name="continuation"/> is null.</exception>
        public void UnsafeOnCompleted(Action continuation) => _awaiter.UnsafeOnCompleted(continuation);

        void ISpindleAwaiter.OnCompletedForBox(StateMachineBoxBase box) => SuppressedAwaiters.OnCompletedForBox(in _awaiter, box);
    }
}

/// <summary>The suppressing awaiters register as the awaiters they wrap.</summary>
internal static class SuppressedAwaiters
{
    /// <summary>A constrained call: the wrapped awaiter registers the box with no boxing of the awaiter itself.</summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public static void OnCompletedForBox<TAwaiter>(in TAwaiter awaiter, StateMachineBoxBase box)
        where TAwaiter : struct, ISpindleAwaiter
        => awaiter.OnCompletedForBox(box);
}

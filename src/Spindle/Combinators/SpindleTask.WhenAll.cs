using System;
using System.Collections.Generic;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib;

public readonly partial struct SpindleTask
{
    /// <summary>
    /// A task that completes when every input has. An empty input completes at once. If inputs fail, it fails as the BCL's
    /// <c>Task.WhenAll</c> does: faulted if any input faulted, and awaiting rethrows the fault of the lowest index (a
    /// cancellation does not hide a fault, wherever it stands); canceled if every failed input was canceled. Every input's
    /// failure is observed.
    /// Allocates nothing in steady state, for any count; inputs that have all completed already take a path with no
    /// combinator at all.
    /// </summary>
    /// <remarks>Each input is awaited by the combinator, so it is consumed: do not await the inputs yourself.</remarks>
    /// <exception cref="InvalidOperationException">An input was already awaited (the await-once error), or a pooled task is passed twice.</exception>
    public static SpindleTask WhenAll(params ReadOnlySpan<SpindleTask> tasks)
        => Combine.All<SpindleTask, SpindleInput>(tasks, default(WhenAllOptions), default);

    /// <summary>As <see cref="WhenAll(ReadOnlySpan{SpindleTask})"/>, for a sequence.</summary>
    /// <exception cref="ArgumentNullException"><paramref name="tasks"/> is null.</exception>
    public static SpindleTask WhenAll(IEnumerable<SpindleTask> tasks) => WhenAll(Combine.ToSpan(tasks));

    /// <summary>
    /// As <see cref="WhenAll(ReadOnlySpan{SpindleTask})"/>, and <paramref name="cancellationToken"/> cancels the wait: the
    /// combined task completes as canceled when it fires first. A token that is already cancelled cancels at once.
    /// </summary>
    /// <remarks>
    /// The cancellation is kept as a value: its <see cref="System.Threading.Tasks.TaskCanceledException"/>, with the token,
    /// is built only by a read that throws it, so an await with <see cref="SpindleTask{T}.SuppressCancellationThrow"/> of a
    /// combined task the token cancelled builds none (the same holds for a WhenAny's token).
    /// The inputs are not cancelled by it: the wait lets go of them before the combined task completes, as
    /// <see cref="WhenAny(ReadOnlySpan{SpindleTask})"/> lets go of its losers. A <see cref="Promise"/>'s task is left
    /// pending (it can be awaited again) and the promise can be reset at once; a <see cref="Signal"/>'s wait ends, and a later set is kept for the
    /// next wait; a delay leaves its timer wheel; an async method goes on running, forgotten. An input that has finished
    /// is read, and other kinds (BCL tasks, combinators, other sources) are read when they finish. A failure that nobody
    /// will read goes to <see cref="Spindle.UnobservedException"/>, once. The same holds when a timeout
    /// (<see cref="WhenAllOptions.Timeout"/>) fires first.
    /// </remarks>
    public static SpindleTask WhenAll(ReadOnlySpan<SpindleTask> tasks, CancellationToken cancellationToken)
        => Combine.All<SpindleTask, SpindleInput>(tasks, default(WhenAllOptions), cancellationToken);

    /// <summary>
    /// As <see cref="WhenAll(ReadOnlySpan{SpindleTask}, CancellationToken)"/>, with <paramref name="options"/>: for example
    /// <see cref="WhenAllOptions.AggregateExceptions"/>, to get every input's exception instead of the first, or
    /// <see cref="WhenAllOptions.Timeout"/>, to fail with a <see cref="TimeoutException"/> if the inputs take too long
    /// (the inputs are then let go of, as after a cancellation).
    /// </summary>
    /// <exception cref="ObjectDisposedException"><see cref="WhenAllOptions.Timers"/> has been disposed and a timer is needed.</exception>
    /// <exception cref="InvalidOperationException">A timer is needed on a wheel of <see cref="TimeProvider.System"/> (<see cref="TimerWheel.Default"/> among them), the workers had not started (this starts them, as its timer thread hands the resumed code to them), and the SPINDLE_WORKERS environment variable is invalid (see <see cref="Spindle.WorkerCount"/>).</exception>
    public static SpindleTask WhenAll(ReadOnlySpan<SpindleTask> tasks, WhenAllOptions options, CancellationToken cancellationToken = default)
        => Combine.All<SpindleTask, SpindleInput>(tasks, options, cancellationToken);

    /// <summary>A task that completes when every BCL task has. As <see cref="WhenAll(ReadOnlySpan{SpindleTask})"/>; the tasks stay readable.</summary>
    /// <exception cref="ArgumentException">An input is null (the message names its index).</exception>
    public static SpindleTask WhenAll(params ReadOnlySpan<Task> tasks)
        => Combine.All<Task, TaskInput>(tasks, default(WhenAllOptions), default);

    /// <summary>As <see cref="WhenAll(ReadOnlySpan{Task})"/>, for a sequence.</summary>
    /// <exception cref="ArgumentNullException"><paramref name="tasks"/> is null.</exception>
    /// <exception cref="ArgumentException">A task in the sequence is null (the message names its index).</exception>
    public static SpindleTask WhenAll(IEnumerable<Task> tasks) => WhenAll(Combine.ToSpan(tasks));

    /// <summary>
    /// As <see cref="WhenAll(ReadOnlySpan{Task})"/>, and <paramref name="cancellationToken"/> cancels the wait (not the
    /// tasks; see <see cref="WhenAll(ReadOnlySpan{SpindleTask}, CancellationToken)"/>).
    /// </summary>
    /// <exception cref="ArgumentException">An input is null (the message names its index).</exception>
    public static SpindleTask WhenAll(ReadOnlySpan<Task> tasks, CancellationToken cancellationToken)
        => Combine.All<Task, TaskInput>(tasks, default(WhenAllOptions), cancellationToken);

    /// <summary>As <see cref="WhenAll(ReadOnlySpan{Task}, CancellationToken)"/>, with <paramref name="options"/>.</summary>
    /// <exception cref="ArgumentException">An input is null (the message names its index).</exception>
    public static SpindleTask WhenAll(ReadOnlySpan<Task> tasks, WhenAllOptions options, CancellationToken cancellationToken = default)
        => Combine.All<Task, TaskInput>(tasks, options, cancellationToken);

    /// <summary>
    /// A task that completes when every ValueTask has. As <see cref="WhenAll(ReadOnlySpan{SpindleTask})"/>. Each ValueTask
    /// is read exactly once (a ValueTask over a pooled <c>IValueTaskSource</c> goes back to its pool), so it is consumed:
    /// do not await it yourself.
    /// </summary>
    public static SpindleTask WhenAll(params ReadOnlySpan<ValueTask> tasks)
        => Combine.All<ValueTask, ValueTaskInput>(tasks, default(WhenAllOptions), default);

    /// <summary>As <see cref="WhenAll(ReadOnlySpan{ValueTask})"/>, for a sequence.</summary>
    /// <exception cref="ArgumentNullException"><paramref name="tasks"/> is null.</exception>
    public static SpindleTask WhenAll(IEnumerable<ValueTask> tasks) => WhenAll(Combine.ToSpan(tasks));

    /// <summary>As <see cref="WhenAll(ReadOnlySpan{ValueTask})"/>, and <paramref name="cancellationToken"/> cancels the wait (not the inputs).</summary>
    public static SpindleTask WhenAll(ReadOnlySpan<ValueTask> tasks, CancellationToken cancellationToken)
        => Combine.All<ValueTask, ValueTaskInput>(tasks, default(WhenAllOptions), cancellationToken);

    /// <summary>As <see cref="WhenAll(ReadOnlySpan{ValueTask}, CancellationToken)"/>, with <paramref name="options"/>.</summary>
    public static SpindleTask WhenAll(ReadOnlySpan<ValueTask> tasks, WhenAllOptions options, CancellationToken cancellationToken = default)
        => Combine.All<ValueTask, ValueTaskInput>(tasks, options, cancellationToken);

    /// <summary>
    /// A task whose result holds every input's result, in input order. As <see cref="WhenAll(ReadOnlySpan{SpindleTask})"/>
    /// otherwise. The result array is allocated (as the BCL's <c>Task.WhenAll&lt;T&gt;</c> does), and nothing else is in
    /// steady state; to allocate nothing at all, use
    /// <see cref="WhenAll{T}(ReadOnlySpan{SpindleTask{T}}, Memory{T}, WhenAllOptions, CancellationToken)"/>, or the tuple
    /// forms for 2 to 8 tasks.
    /// </summary>
    /// <exception cref="InvalidOperationException">An input was already awaited (the await-once error), or a pooled task is passed twice.</exception>
    public static SpindleTask<T[]> WhenAll<T>(params ReadOnlySpan<SpindleTask<T>> tasks)
        => Combine.AllValues<SpindleTask<T>, T, SpindleInput<T>>(tasks, default(WhenAllOptions), default);

    /// <summary>As <see cref="WhenAll{T}(ReadOnlySpan{SpindleTask{T}})"/>, for a sequence.</summary>
    /// <exception cref="ArgumentNullException"><paramref name="tasks"/> is null.</exception>
    public static SpindleTask<T[]> WhenAll<T>(IEnumerable<SpindleTask<T>> tasks) => WhenAll(Combine.ToSpan(tasks));

    /// <summary>As <see cref="WhenAll{T}(ReadOnlySpan{SpindleTask{T}})"/>, and <paramref name="cancellationToken"/> cancels the wait (not the inputs).</summary>
    public static SpindleTask<T[]> WhenAll<T>(ReadOnlySpan<SpindleTask<T>> tasks, CancellationToken cancellationToken)
        => Combine.AllValues<SpindleTask<T>, T, SpindleInput<T>>(tasks, default(WhenAllOptions), cancellationToken);

    /// <summary>As <see cref="WhenAll{T}(ReadOnlySpan{SpindleTask{T}}, CancellationToken)"/>, with <paramref name="options"/>.</summary>
    public static SpindleTask<T[]> WhenAll<T>(ReadOnlySpan<SpindleTask<T>> tasks, WhenAllOptions options, CancellationToken cancellationToken = default)
        => Combine.AllValues<SpindleTask<T>, T, SpindleInput<T>>(tasks, options, cancellationToken);

    /// <summary>
    /// Waits for every input and writes result <c>i</c> to <c>destination[i]</c>: the form of
    /// <see cref="WhenAll{T}(ReadOnlySpan{SpindleTask{T}})"/> that allocates nothing in steady state.
    /// </summary>
    /// <remarks>
    /// The results are written when the combined task is read (awaited), and only if it succeeded; nothing is written
    /// after a cancelled wait, so the buffer may be reused at once. When every input had already finished at the call,
    /// they are read into the buffer at once, and a failure may leave some of it written. Keep the buffer alive and
    /// unshared until the task is awaited.
    /// </remarks>
    /// <param name="tasks">The tasks to wait for.</param>
    /// <param name="destination">Where the results go: at least as long as <paramref name="tasks"/>.</param>
    /// <param name="options">Options, such as <see cref="WhenAllOptions.AggregateExceptions"/>.</param>
    /// <param name="cancellationToken">Cancels the wait, which then lets go of the inputs as a WhenAny lets go of its losers (they are not cancelled).</param>
    /// <exception cref="ArgumentException"><paramref name="destination"/> is shorter than <paramref name="tasks"/>.</exception>
    public static SpindleTask WhenAll<T>(ReadOnlySpan<SpindleTask<T>> tasks, Memory<T> destination, WhenAllOptions options = default, CancellationToken cancellationToken = default)
        => Combine.AllInto<SpindleTask<T>, T, SpindleInput<T>>(tasks, destination, options, cancellationToken);

    /// <summary>
    /// A task whose result holds every BCL task's result, in input order: as the BCL's <c>Task.WhenAll&lt;T&gt;</c>, whose
    /// array allocation it shares, and otherwise as <see cref="WhenAll{T}(ReadOnlySpan{SpindleTask{T}})"/>.
    /// </summary>
    /// <exception cref="ArgumentException">An input is null (the message names its index).</exception>
    public static SpindleTask<T[]> WhenAll<T>(params ReadOnlySpan<Task<T>> tasks)
        => Combine.AllValues<Task<T>, T, TaskInput<T>>(tasks, default(WhenAllOptions), default);

    /// <summary>As <see cref="WhenAll{T}(ReadOnlySpan{Task{T}})"/>, for a sequence.</summary>
    /// <exception cref="ArgumentNullException"><paramref name="tasks"/> is null.</exception>
    /// <exception cref="ArgumentException">A task in the sequence is null (the message names its index).</exception>
    public static SpindleTask<T[]> WhenAll<T>(IEnumerable<Task<T>> tasks) => WhenAll(Combine.ToSpan(tasks));

    /// <summary>As <see cref="WhenAll{T}(ReadOnlySpan{Task{T}})"/>, and <paramref name="cancellationToken"/> cancels the wait (not the tasks).</summary>
    /// <exception cref="ArgumentException">An input is null (the message names its index).</exception>
    public static SpindleTask<T[]> WhenAll<T>(ReadOnlySpan<Task<T>> tasks, CancellationToken cancellationToken)
        => Combine.AllValues<Task<T>, T, TaskInput<T>>(tasks, default(WhenAllOptions), cancellationToken);

    /// <summary>As <see cref="WhenAll{T}(ReadOnlySpan{Task{T}}, CancellationToken)"/>, with <paramref name="options"/>.</summary>
    /// <exception cref="ArgumentException">An input is null (the message names its index).</exception>
    public static SpindleTask<T[]> WhenAll<T>(ReadOnlySpan<Task<T>> tasks, WhenAllOptions options, CancellationToken cancellationToken = default)
        => Combine.AllValues<Task<T>, T, TaskInput<T>>(tasks, options, cancellationToken);

    /// <summary>
    /// As <see cref="WhenAll{T}(ReadOnlySpan{SpindleTask{T}}, Memory{T}, WhenAllOptions, CancellationToken)"/>, over BCL
    /// tasks: allocates nothing in steady state.
    /// </summary>
    /// <param name="tasks">The tasks to wait for.</param>
    /// <param name="destination">Where the results go: at least as long as <paramref name="tasks"/>.</param>
    /// <param name="options">Options, such as <see cref="WhenAllOptions.AggregateExceptions"/>.</param>
    /// <param name="cancellationToken">Cancels the wait (not the tasks).</param>
    /// <exception cref="ArgumentException">An input is null, or <paramref name="destination"/> is shorter than <paramref name="tasks"/>.</exception>
    public static SpindleTask WhenAll<T>(ReadOnlySpan<Task<T>> tasks, Memory<T> destination, WhenAllOptions options = default, CancellationToken cancellationToken = default)
        => Combine.AllInto<Task<T>, T, TaskInput<T>>(tasks, destination, options, cancellationToken);

    /// <summary>
    /// A task whose result holds every ValueTask's result, in input order; each ValueTask is read exactly once. As
    /// <see cref="WhenAll{T}(ReadOnlySpan{SpindleTask{T}})"/> otherwise (the result array is allocated).
    /// </summary>
    public static SpindleTask<T[]> WhenAll<T>(params ReadOnlySpan<ValueTask<T>> tasks)
        => Combine.AllValues<ValueTask<T>, T, ValueTaskInput<T>>(tasks, default(WhenAllOptions), default);

    /// <summary>As <see cref="WhenAll{T}(ReadOnlySpan{ValueTask{T}})"/>, for a sequence.</summary>
    /// <exception cref="ArgumentNullException"><paramref name="tasks"/> is null.</exception>
    public static SpindleTask<T[]> WhenAll<T>(IEnumerable<ValueTask<T>> tasks) => WhenAll(Combine.ToSpan(tasks));

    /// <summary>As <see cref="WhenAll{T}(ReadOnlySpan{ValueTask{T}})"/>, and <paramref name="cancellationToken"/> cancels the wait (not the inputs).</summary>
    public static SpindleTask<T[]> WhenAll<T>(ReadOnlySpan<ValueTask<T>> tasks, CancellationToken cancellationToken)
        => Combine.AllValues<ValueTask<T>, T, ValueTaskInput<T>>(tasks, default(WhenAllOptions), cancellationToken);

    /// <summary>As <see cref="WhenAll{T}(ReadOnlySpan{ValueTask{T}}, CancellationToken)"/>, with <paramref name="options"/>.</summary>
    public static SpindleTask<T[]> WhenAll<T>(ReadOnlySpan<ValueTask<T>> tasks, WhenAllOptions options, CancellationToken cancellationToken = default)
        => Combine.AllValues<ValueTask<T>, T, ValueTaskInput<T>>(tasks, options, cancellationToken);

    /// <summary>
    /// As <see cref="WhenAll{T}(ReadOnlySpan{SpindleTask{T}}, Memory{T}, WhenAllOptions, CancellationToken)"/>, over
    /// ValueTasks (each read exactly once): allocates nothing in steady state.
    /// </summary>
    /// <param name="tasks">The ValueTasks to wait for.</param>
    /// <param name="destination">Where the results go: at least as long as <paramref name="tasks"/>.</param>
    /// <param name="options">Options, such as <see cref="WhenAllOptions.AggregateExceptions"/>.</param>
    /// <param name="cancellationToken">Cancels the wait, which then lets go of the inputs as a WhenAny lets go of its losers (they are not cancelled).</param>
    /// <exception cref="ArgumentException"><paramref name="destination"/> is shorter than <paramref name="tasks"/>.</exception>
    public static SpindleTask WhenAll<T>(ReadOnlySpan<ValueTask<T>> tasks, Memory<T> destination, WhenAllOptions options = default, CancellationToken cancellationToken = default)
        => Combine.AllInto<ValueTask<T>, T, ValueTaskInput<T>>(tasks, destination, options, cancellationToken);
}

using System;
using System.Diagnostics;
using System.Runtime.CompilerServices;
using System.Runtime.ExceptionServices;
using System.Runtime.InteropServices;
using System.Threading;
using System.Threading.Tasks;
using System.Threading.Tasks.Sources;

namespace SpindleLib;

/// <summary>
/// An awaitable operation with no result: a readonly struct of a source and a version token. Usable as the return
/// type of <c>async</c> methods; a method that completes without suspending allocates nothing, and one that
/// suspends rents a pooled state-machine box.
/// </summary>
/// <remarks>
/// <para><b>Await once.</b> A Spindle task is awaited exactly once: reading its result returns its source to the pool.
/// A second await, or an await after <see cref="Forget"/>, throws <see cref="InvalidOperationException"/>.
/// Use <see cref="Preserve"/> for a task that is awaited more than once. Two kinds of task are not consumed by a read:
/// a <see cref="Promise"/>'s and a <see cref="Signal"/> wait's may be read again, with the same outcome, until the
/// promise is reset or the signal's next wait begins; their owners, not the pool, decide when the use ends. A combinator
/// accepts a promise's task twice in one call, but not a signal wait (its read takes the set): passed twice, a wait is
/// refused as a pooled task is.</para>
/// <para><b>Stale tasks.</b> The version token is 16 bits, as a <see cref="ValueTask"/>'s is, and it wraps: a task kept
/// after its use ended is recognised as stale (the await-once error) only until its source has started 65,536 more uses.
/// A copy kept longer than that (a pooled box reused that often, a promise reset that often) names a later use again,
/// and reading it reads that use. Do not keep a task once it has been awaited or its source reset.</para>
/// <para><b>Continuations</b> run on the thread that completes the task. No <see cref="SynchronizationContext"/> is
/// captured, whatever kind of method awaits: an <c>async Task</c> method or <c>async void</c> handler on a UI thread or a
/// game engine's main thread (Godot's, Unity's) that awaits a Spindle task resumes on the completing thread (a worker, a
/// timer pass), where a <see cref="Task"/>'s await would have come back to the context; there is no
/// <c>ConfigureAwait</c> (a Spindle await is already what <c>ConfigureAwait(false)</c> asks for). To come back to the
/// context, await <see cref="AsValueTask"/> (or <see cref="AsTask"/>) instead, as any ValueTask resumes there.
/// The <see cref="ExecutionContext"/> flows, so <see cref="AsyncLocal{T}"/> works.</para>
/// <para><c>default(SpindleTask)</c> is a successfully completed task.</para>
/// </remarks>
[AsyncMethodBuilder(typeof(SpindleTaskMethodBuilder))]
[DebuggerDisplay("{DebuggerDisplay,nq}")]
[StructLayout(LayoutKind.Auto)]
public readonly partial struct SpindleTask
{
    internal readonly ISpindleSource? _source;
    internal readonly short _token;

    /// <summary>Creates a task over a source and the token of its current use.</summary>
    /// <param name="source">The source that completes the task.</param>
    /// <param name="token">The version token of the use this task represents.</param>
    /// <exception cref="ArgumentNullException"><paramref name="source"/> is null.</exception>
    public SpindleTask(ISpindleSource source, short token)
    {
        if (source is null)
        {
            ThrowHelper.ThrowArgumentNull(nameof(source));
        }
        _source = source;
        _token = token;
    }

    /// <summary>A task that has already completed successfully. Same as <c>default</c>.</summary>
    public static SpindleTask CompletedTask => default;

    /// <summary>The task's status. Reading it does not consume the task.</summary>
    /// <exception cref="InvalidOperationException">The task was already awaited.</exception>
    public SpindleTaskStatus Status => _source is null ? SpindleTaskStatus.Succeeded : _source.GetStatus(_token);

    /// <summary>True once the task has completed, successfully or not.</summary>
    /// <exception cref="InvalidOperationException">The task was already awaited.</exception>
    public bool IsCompleted => Status != SpindleTaskStatus.Pending;

    /// <summary>
    /// True once the task has completed successfully: <see cref="Status"/> is <see cref="SpindleTaskStatus.Succeeded"/>, as
    /// <see cref="Task.IsCompletedSuccessfully"/> reads. Reading it does not consume the task: await it (or read it with
    /// <c>GetAwaiter().GetResult()</c>) once to take its result.
    /// </summary>
    /// <exception cref="InvalidOperationException">The task was already awaited.</exception>
    public bool IsCompletedSuccessfully => Status == SpindleTaskStatus.Succeeded;

    /// <summary>
    /// True once the task has completed with an exception: <see cref="Status"/> is <see cref="SpindleTaskStatus.Faulted"/>,
    /// as <see cref="Task.IsFaulted"/> reads. Reading it does not consume the task, and a Spindle task has no
    /// <c>Exception</c> property: its await throws the exception (or, in a combinator, <see cref="WhenAllOptions.AggregateExceptions"/> keeps every one).
    /// </summary>
    /// <exception cref="InvalidOperationException">The task was already awaited.</exception>
    public bool IsFaulted => Status == SpindleTaskStatus.Faulted;

    /// <summary>
    /// True once the task has been canceled: <see cref="Status"/> is <see cref="SpindleTaskStatus.Canceled"/>, as
    /// <see cref="Task.IsCanceled"/> reads; its await throws an <see cref="OperationCanceledException"/>. Reading it does
    /// not consume the task.
    /// </summary>
    /// <exception cref="InvalidOperationException">The task was already awaited.</exception>
    public bool IsCanceled => Status == SpindleTaskStatus.Canceled;

    /// <summary>What a debugger shows: the status and the async method or source behind the task; never throws.</summary>
    private string DebuggerDisplay
        => DebuggerText.OfTask(_source, _token);

    /// <summary>Gets the awaiter. Awaiting consumes the task.</summary>
    public Awaiter GetAwaiter() => new(this);

    /// <summary>
    /// Returns a task that can be awaited any number of times, by any number of awaiters. This consumes the original
    /// task: await the returned one instead. It allocates one object when the task has not yet completed successfully.
    /// The preserved task keeps the outcome, not the original's source (a pooled one goes back to its pool once, when
    /// the original completes). A fault that no awaiter of it ever reads is not reported: pass the preserved task to
    /// <see cref="Forget"/> to have it reported. A combinator that stops waiting on it (a WhenAny it lost, a timeout)
    /// takes its waiter back, so the preserved task can be raced in every turn of a loop and holds nothing per turn; a
    /// fault that then completes it with no awaiter is reported once, as a <see cref="Forget"/> would report it.
    /// </summary>
    public SpindleTask Preserve()
    {
        ISpindleSource? s = _source;
        if (s is null)
        {
            return this;
        }
        if (s.GetStatus(_token) == SpindleTaskStatus.Succeeded)
        {
            s.GetResult(_token);
            return default;
        }
        return new SpindleTask(new PreservedSource<VoidResult>(s, _token), 0);
    }

    /// <summary>
    /// Lets the task run to completion with nobody awaiting it. A fault is reported to
    /// <see cref="Spindle.UnobservedException"/>, on the thread that completes the task (even for a source that runs its
    /// continuations asynchronously: the outcome is read as the task completes, before its source can be reused);
    /// cancellation is not a fault and is not reported. The task must not be awaited afterwards.
    /// A fault is reported once per completion: a task that a read does not consume (a <see cref="Promise"/>'s, a
    /// preserved one, one made by <see cref="FromException(Exception)"/>, a <see cref="TaskScope"/>'s
    /// <see cref="TaskScope.WaitAsync"/>) forgotten again reports nothing more, nor does a promise's use whose fault was
    /// reported when a WhenAny let go of it, or by a combinator it was given to (as itself, or as a
    /// <see cref="System.Threading.Tasks.ValueTask"/> made from it).
    /// </summary>
    /// <exception cref="InvalidOperationException">The task was already awaited or read (also by another thread while this
    /// call reads it), or already has an awaiter: a Spindle task has one reader, and a forgotten task's is its observer (a
    /// second Forget(), or one of a task a combinator let go of, is the await-once error).</exception>
    public void Forget()
    {
        if (_source is { } s)
        {
            ForgetObserver.Observe(s, _token);
        }
    }

    /// <summary>Converts to a <see cref="ValueTask"/> with no allocation: every Spindle source is an <see cref="IValueTaskSource"/>.</summary>
    /// <remarks>
    /// The ValueTask keeps the BCL's contract: a plain <c>await</c> of it resumes on the awaiting code's
    /// <see cref="SynchronizationContext"/> (or its TaskScheduler, when that is not the default), as for any ValueTask;
    /// <c>ConfigureAwait(false)</c> resumes where the task completed. Awaited directly, a Spindle task captures no
    /// context.
    /// </remarks>
    public ValueTask AsValueTask() => _source is null ? default : new ValueTask(_source, _token);

    /// <summary>Converts to a <see cref="Task"/>. Allocates a <see cref="Task"/> unless the task has already succeeded.</summary>
    /// <remarks>This consumes the task, as an await does: await the returned <see cref="Task"/> instead.</remarks>
    /// <exception cref="InvalidOperationException">The task was already awaited, or already has an awaiter (a Spindle task
    /// has one awaiter at a time: call <see cref="Preserve"/> to await it from several places).</exception>
    public Task AsTask()
    {
        ISpindleSource? s = _source;
        if (s is null)
        {
            return Task.CompletedTask;
        }
        return TaskBridge.ToTask(s, _token);
    }

    /// <summary>Converts a Spindle task to a <see cref="ValueTask"/> (see <see cref="AsValueTask"/>).</summary>
    public static implicit operator ValueTask(SpindleTask task) => task.AsValueTask();

    /// <summary>Creates a task that has failed with <paramref name="exception"/>.</summary>
    /// <exception cref="ArgumentNullException"><paramref name="exception"/> is null.</exception>
    public static SpindleTask FromException(Exception exception)
    {
        if (exception is null)
        {
            ThrowHelper.ThrowArgumentNull(nameof(exception));
        }
        return FromFailure(ExceptionDispatchInfo.Capture(exception));
    }

    /// <summary>Creates a task that has failed with <paramref name="exception"/>.</summary>
    /// <exception cref="ArgumentNullException"><paramref name="exception"/> is null.</exception>
    public static SpindleTask<T> FromException<T>(Exception exception)
    {
        if (exception is null)
        {
            ThrowHelper.ThrowArgumentNull(nameof(exception));
        }
        return FromFailure<T>(ExceptionDispatchInfo.Capture(exception));
    }

    /// <summary>A task failed with a failure captured elsewhere (a combinator's input's), rethrown with the trace it saved.</summary>
    internal static SpindleTask FromFailure(ExceptionDispatchInfo failure) => new(new CompletedSource<VoidResult>(failure), 0);

    /// <summary>As <see cref="FromFailure(ExceptionDispatchInfo)"/>, for a task with a result.</summary>
    internal static SpindleTask<T> FromFailure<T>(ExceptionDispatchInfo failure) => new(new CompletedSource<T>(failure), 0);

    /// <summary>
    /// Creates a task that has been canceled: its await throws a <see cref="TaskCanceledException"/> carrying
    /// <paramref name="cancellationToken"/>, as for <c>Task.FromCanceled</c>. The exception is built by the first read that
    /// throws it (then every read throws that one), so a read with <see cref="SuppressCancellationThrow"/> builds none.
    /// </summary>
    public static SpindleTask FromCanceled(CancellationToken cancellationToken = default) => new(new CompletedSource<VoidResult>(cancellationToken), 0);

    /// <summary>
    /// Creates a task that has been canceled: its await throws a <see cref="TaskCanceledException"/> carrying
    /// <paramref name="cancellationToken"/>, as for <c>Task.FromCanceled</c>. The exception is built by the first read that
    /// throws it (then every read throws that one), so a read with <see cref="SpindleTask{T}.SuppressCancellationThrow"/> builds none.
    /// </summary>
    public static SpindleTask<T> FromCanceled<T>(CancellationToken cancellationToken = default) => new(new CompletedSource<T>(cancellationToken), 0);

    /// <summary>Creates a task that has completed with <paramref name="result"/>. Allocates nothing.</summary>
    public static SpindleTask<T> FromResult<T>(T result) => new(result);

    /// <summary>Awaits a <see cref="SpindleTask"/>.</summary>
    [StackTraceHidden]
    public readonly struct Awaiter : ICriticalNotifyCompletion, ISpindleAwaiter
    {
        private readonly SpindleTask _task;

        internal Awaiter(SpindleTask task) => _task = task;

        /// <summary>
        /// True when the task has completed. On a Spindle worker awaiting the <see cref="Spindle.Run(Action)"/> it has just
        /// queued, which the worker would run next anyway, the action runs here first, so the await does not suspend.
        /// </summary>
        public bool IsCompleted => _task._source is not { } s || s.GetStatus(_task._token) != SpindleTaskStatus.Pending
            || (s is RunItem<VoidResult> item && item.TryRunInline());

        /// <summary>Ends the await: throws the task's exception, if any, and consumes the task. Blocks if the task is still pending.</summary>
        /// <remarks>
        /// Blocking on a Spindle worker makes that worker help: it runs queued work on its own stack while it waits, so
        /// an item it queued to itself cannot deadlock it. The limit of helping: an item it picks up that blocks in turn
        /// on something only the blocked code's own remainder brings about can never finish, since that wait sits above
        /// the first one on the same stack (the worker is lost). Do not block inside work that a blocked worker may run;
        /// await instead. A thread that is not a worker never runs queued work while it blocks.
        /// </remarks>
        /// <exception cref="InvalidOperationException">The task is pending and this thread is running a job that it waits
        /// for: it awaits that job's handle (<see cref="JobHandle.AsSpindleTask"/>, or an async method suspended in
        /// <c>await handle</c>), or a job that depends on it. It would block for ever; await it, or read it outside the job.</exception>
        public void GetResult()
        {
            if (_task._source is { } s)
            {
                RefusedAwaits.ThrowIfRefused(s, _task._token); // a BCL builder's refused await, resumed to throw here
                s.GetResult(_task._token); // Spindle's sources block here if the task is still pending
            }
        }

        /// <summary>As <see cref="GetResult"/>, returning a cancellation instead of throwing it (<see cref="SpindleTask.SuppressCancellationThrow"/>).</summary>
        internal bool GetResultOrCanceled()
        {
            if (_task._source is not { } s)
            {
                return false;
            }
            RefusedAwaits.ThrowIfRefused(s, _task._token);
            return QuietRead.ReadCanceled(s, _task._token);
        }

        /// <summary>Schedules the continuation, flowing the current <see cref="ExecutionContext"/>.</summary>
        /// <exception cref="ArgumentNullException"><paramref name="continuation"/> is null.</exception>
        /// <exception cref="InvalidOperationException">The task already has an awaiter, or was already awaited; the message
        /// ends by naming the awaiting method (share a task through <see cref="SpindleTask.Preserve"/>). Not thrown to a BCL async
        /// method builder on .NET (<c>async Task</c>, <c>async ValueTask</c>, <c>async void</c>), which would rethrow it on
        /// the thread pool and end the process, as for a <see cref="ValueTask"/> awaited twice: that method resumes on the
        /// thread pool instead, and its await throws this.</exception>
        public void OnCompleted(Action continuation)
        {
            if (continuation is null)
            {
                ThrowHelper.ThrowArgumentNull(nameof(continuation));
            }
            if (_task._source is { } s)
            {
                try
                {
                    s.OnCompleted(ActionContinuation.s_invoke, continuation, _task._token, ValueTaskSourceOnCompletedFlags.FlowExecutionContext);
                }
                catch (InvalidOperationException refusal) when (ThrowHelper.IsLastRefusal(refusal))
                {
                    RefusedAwaits.OnRefused(refusal, continuation, s, _task._token, flowContext: true);
                }
            }
            else
            {
                continuation();
            }
        }

        /// <summary>Schedules the continuation without flowing the <see cref="ExecutionContext"/>.</summary>
        /// <exception cref="ArgumentNullException"><paramref name="continuation"/> is null.</exception>
        /// <exception cref="InvalidOperationException">The task already has an awaiter, or was already awaited; the message
        /// ends by naming the awaiting method (share a task through <see cref="SpindleTask.Preserve"/>). Not thrown to a BCL async
        /// method builder on .NET (<c>async Task</c>, <c>async ValueTask</c>, <c>async void</c>), which would rethrow it on
        /// the thread pool and end the process, as for a <see cref="ValueTask"/> awaited twice: that method resumes on the
        /// thread pool instead, and its await throws this.</exception>
        public void UnsafeOnCompleted(Action continuation)
        {
            if (continuation is null)
            {
                ThrowHelper.ThrowArgumentNull(nameof(continuation));
            }
            if (_task._source is { } s)
            {
                try
                {
                    s.OnCompleted(ActionContinuation.s_invoke, continuation, _task._token);
                }
                catch (InvalidOperationException refusal) when (ThrowHelper.IsLastRefusal(refusal))
                {
                    RefusedAwaits.OnRefused(refusal, continuation, s, _task._token, flowContext: false);
                }
            }
            else
            {
                continuation();
            }
        }

        void ISpindleAwaiter.OnCompletedForBox(StateMachineBoxBase box)
        {
            if (_task._source is { } s)
            {
                if (DirectWaiter.IsUsersSource(s))
                {
                    box.RegisterOnUsersSource(s, _task._token); // a second run is refused, not run (ISpindleSource.OnCompleted)
                }
                else
                {
                    s.OnCompleted(DirectWaiter.s_moveNext, box, _task._token);
                }
            }
            else
            {
                box.MoveNext();
            }
        }
    }
}

/// <summary>Implemented by Spindle's awaiters so the builders can register a state-machine box without a delegate.</summary>
internal interface ISpindleAwaiter
{
    void OnCompletedForBox(StateMachineBoxBase box);
}

internal static class ActionContinuation
{
    public static readonly Action<object?> s_invoke = static o => ((Action)o!)();
}

using System;
using System.Diagnostics;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Threading.Tasks;
using System.Threading.Tasks.Sources;

namespace SpindleLib;

/// <summary>
/// An awaitable operation that produces a <typeparamref name="T"/>. A task that completed synchronously carries its
/// result inline, with no source object at all. See <see cref="SpindleTask"/> for the await-once rule and the
/// continuation semantics.
/// </summary>
/// <typeparam name="T">The result type.</typeparam>
[AsyncMethodBuilder(typeof(SpindleTaskMethodBuilder<>))]
[DebuggerDisplay("{DebuggerDisplay,nq}")]
[StructLayout(LayoutKind.Auto)]
public readonly partial struct SpindleTask<T>
{
    internal readonly ISpindleSource<T>? _source;
    internal readonly T _result;
    internal readonly short _token;

    /// <summary>Creates a task over a source and the token of its current use.</summary>
    /// <exception cref="ArgumentNullException"><paramref name="source"/> is null.</exception>
    public SpindleTask(ISpindleSource<T> source, short token)
    {
        if (source is null)
        {
            ThrowHelper.ThrowArgumentNull(nameof(source));
        }
        _source = source;
        _token = token;
        _result = default!;
    }

    /// <summary>Creates a task that has completed with <paramref name="result"/>.</summary>
    public SpindleTask(T result)
    {
        _source = null;
        _token = 0;
        _result = result;
    }

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
        => _source is null
            ? $"Succeeded, Result = {_result}"
            : DebuggerText.OfTask(_source, _token);

    /// <summary>Gets the awaiter. Awaiting consumes the task.</summary>
    public Awaiter GetAwaiter() => new(this);

    /// <summary>
    /// Returns a task that can be awaited any number of times. This consumes the original task. A fault that no awaiter
    /// of the returned task ever reads is not reported (see <see cref="SpindleTask.Preserve"/>).
    /// </summary>
    public SpindleTask<T> Preserve()
    {
        ISpindleSource<T>? s = _source;
        if (s is null)
        {
            return this;
        }
        if (s.GetStatus(_token) == SpindleTaskStatus.Succeeded)
        {
            return new SpindleTask<T>(s.GetResult(_token));
        }
        return new SpindleTask<T>(new PreservedSource<T>(s, _token), 0);
    }

    /// <summary>
    /// Lets the task run with nobody awaiting it; a fault goes to <see cref="Spindle.UnobservedException"/>, once per
    /// completion (see <see cref="SpindleTask.Forget"/>).
    /// </summary>
    /// <exception cref="InvalidOperationException">The task was already awaited or read (also by another thread while this
    /// call reads it), or already has an awaiter.</exception>
    public void Forget()
    {
        if (_source is { } s)
        {
            ForgetObserver.Observe(s, _token);
        }
    }

    /// <summary>Discards the result type.</summary>
    public SpindleTask AsSpindleTask() => _source is null ? default : new SpindleTask(_source, _token);

    /// <summary>Converts to a <see cref="ValueTask{T}"/> with no allocation.</summary>
    /// <remarks>
    /// The ValueTask keeps the BCL's contract: a plain <c>await</c> of it resumes on the awaiting code's
    /// <see cref="System.Threading.SynchronizationContext"/> (or its TaskScheduler, when that is not the default), as for any ValueTask;
    /// <c>ConfigureAwait(false)</c> resumes where the task completed. Awaited directly, a Spindle task captures no
    /// context.
    /// </remarks>
    public ValueTask<T> AsValueTask() => _source is null ? new ValueTask<T>(_result) : new ValueTask<T>(_source, _token);

    /// <summary>Converts to a <see cref="Task{T}"/>. Allocates.</summary>
    /// <remarks>This consumes the task, as an await does: await the returned <see cref="Task{T}"/> instead.</remarks>
    /// <exception cref="InvalidOperationException">The task was already awaited, or already has an awaiter (a Spindle task
    /// has one awaiter at a time: call <see cref="Preserve"/> to await it from several places).</exception>
    public Task<T> AsTask() => _source is null ? Task.FromResult(_result) : TaskBridge.ToTask(_source, _token);

    /// <summary>Discards the result type.</summary>
    public static implicit operator SpindleTask(SpindleTask<T> task) => task.AsSpindleTask();

    /// <summary>Converts to a <see cref="ValueTask{T}"/> (see <see cref="AsValueTask"/>).</summary>
    public static implicit operator ValueTask<T>(SpindleTask<T> task) => task.AsValueTask();

    /// <summary>Awaits a <see cref="SpindleTask{T}"/>.</summary>
    [StackTraceHidden]
    public readonly struct Awaiter : ICriticalNotifyCompletion, ISpindleAwaiter
    {
        private readonly SpindleTask<T> _task;

        internal Awaiter(SpindleTask<T> task) => _task = task;

        /// <summary>
        /// True when the task has completed. On a Spindle worker awaiting the <see cref="Spindle.Run{T}(Func{T})"/> it has
        /// just queued, which the worker would run next anyway, the function runs here first, so the await does not suspend.
        /// </summary>
        public bool IsCompleted => _task._source is not { } s || s.GetStatus(_task._token) != SpindleTaskStatus.Pending
            || (s is RunItem<T> item && item.TryRunInline());

        /// <summary>Ends the await: returns the result or throws, and consumes the task. Blocks if the task is still pending.</summary>
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
        public T GetResult()
        {
            if (_task._source is not { } s)
            {
                return _task._result;
            }
            RefusedAwaits.ThrowIfRefused(s, _task._token); // a BCL builder's refused await, resumed to throw here
            return s.GetResult(_task._token); // Spindle's sources block here if the task is still pending
        }

        /// <summary>As <see cref="GetResult"/>, returning a cancellation instead of throwing it (<see cref="SpindleTask{T}.SuppressCancellationThrow"/>).</summary>
        internal T GetResultOrCanceled(out bool canceled)
        {
            if (_task._source is not { } s)
            {
                canceled = false;
                return _task._result;
            }
            RefusedAwaits.ThrowIfRefused(s, _task._token);
            return QuietRead.ReadCanceled(s, _task._token, out canceled);
        }

        /// <summary>Schedules the continuation, flowing the current <see cref="System.Threading.ExecutionContext"/>.</summary>
        /// <exception cref="ArgumentNullException"><paramref name="continuation"/> is null.</exception>
        /// <exception cref="InvalidOperationException">The task already has an awaiter, or was already awaited; the message
        /// ends by naming the awaiting method (share a task through <see cref="SpindleTask{T}.Preserve"/>). Not thrown to a BCL async
        /// method builder on .NET (<c>async Task</c>, <c>async ValueTask</c>, <c>async void</c>), which would rethrow it on
        /// the thread pool and end the process, as for a <see cref="ValueTask{TResult}"/> awaited twice: that method resumes on the
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
                    ((IValueTaskSource<T>)s).OnCompleted(ActionContinuation.s_invoke, continuation, _task._token, ValueTaskSourceOnCompletedFlags.FlowExecutionContext);
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

        /// <summary>Schedules the continuation without flowing the <see cref="System.Threading.ExecutionContext"/>.</summary>
        /// <exception cref="ArgumentNullException"><paramref name="continuation"/> is null.</exception>
        /// <exception cref="InvalidOperationException">The task already has an awaiter, or was already awaited; the message
        /// ends by naming the awaiting method (share a task through <see cref="SpindleTask{T}.Preserve"/>). Not thrown to a BCL async
        /// method builder on .NET (<c>async Task</c>, <c>async ValueTask</c>, <c>async void</c>), which would rethrow it on
        /// the thread pool and end the process, as for a <see cref="ValueTask{TResult}"/> awaited twice: that method resumes on the
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

using System;
using System.Diagnostics;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Threading;

namespace SpindleLib;

/// <summary>
/// Spindle's static entry points: run work on the workers, move between threads, and observe faults nobody awaited.
/// </summary>
/// <remarks>All members are thread-safe.</remarks>
public static partial class Spindle
{
    /// <summary>
    /// Raised for a fault that nobody awaits: a forgotten task that failed, or a work item that threw with nobody to
    /// tell. When no handler is attached the exception is written to standard error; it is never swallowed.
    /// Each fault is reported once, to the handlers attached when the report starts (one attached or detached meanwhile,
    /// even by a handler, sees the next report). A handler that throws does not stop the others, nor reach the thread
    /// that reports; its exception is written to standard error with the fault. Handlers run on the thread that observed
    /// the fault (a worker, a timer's or a frame loop's thread, the finalizer thread) and must not block. They run in the
    /// default <see cref="System.Threading.ExecutionContext"/>, as <c>TaskScheduler.UnobservedTaskException</c>'s do: no
    /// AsyncLocal values and no <c>Activity.Current</c>, never those of the code that happened to complete the task (a
    /// thread that set a forgotten promise's exception is running its own request), and with no SynchronizationContext;
    /// what a handler sets or installs stays in the handler. To tag a fault with the request that forgot the task, catch it in the forgotten method. A null
    /// handler is ignored, as for any event.
    /// </summary>
    public static event Action<Exception>? UnobservedException
    {
        add => UnobservedExceptions.Handlers += value;
        remove => UnobservedExceptions.Handlers -= value;
    }

    /// <summary>
    /// The number of Spindle's worker threads: those running now, or, before anything has started them, the number that
    /// will start (set by <see cref="ConfigureWorkers"/>, else the SPINDLE_WORKERS environment variable, else
    /// <see cref="Environment.ProcessorCount"/>; an empty or blank SPINDLE_WORKERS counts as unset). Reading it does not
    /// start them.
    /// </summary>
    /// <exception cref="InvalidOperationException">Nothing called <see cref="ConfigureWorkers"/>, and SPINDLE_WORKERS is set
    /// to something other than a whole number from 1 to 1024 (the first use of the workers throws the same).</exception>
    public static int WorkerCount => WorkerPool.SharedSlot.WorkerCount;

    /// <summary>
    /// Sets how many worker threads Spindle starts, for example fewer than the processors, to leave a game's main and
    /// render threads a core each. Call it once at start-up, before anything uses the workers (the first
    /// <see cref="Run(Action)"/>, delay, job or worker await starts them); it takes precedence over the SPINDLE_WORKERS
    /// environment variable (an invalid value of which, 0 or "four" or 5000, is otherwise an error at the workers' first
    /// use, not a silent fallback). Calling it again with the number already in force does nothing.
    /// </summary>
    /// <param name="workerCount">The number of workers, from 1 to 1024.</param>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="workerCount"/> is below 1 or above 1024.</exception>
    /// <exception cref="InvalidOperationException">The workers have already started with another count.</exception>
    public static void ConfigureWorkers(int workerCount) => WorkerPool.SharedSlot.Configure(workerCount);

    /// <summary>Runs <paramref name="action"/> on a Spindle worker. The returned task completes when it has run.</summary>
    /// <remarks>The caller's <see cref="ExecutionContext"/> flows to the action. Steady state allocates nothing.</remarks>
    /// <exception cref="ArgumentNullException"><paramref name="action"/> is null.</exception>
    /// <exception cref="InvalidOperationException">The workers had not started, <see cref="ConfigureWorkers"/> was not
    /// called, and the SPINDLE_WORKERS environment variable is set to something other than a whole number from 1 to 1024
    /// (see <see cref="WorkerCount"/>).</exception>
    public static SpindleTask Run(Action action) => Run(action, default);

    /// <summary>
    /// As <see cref="Run(Action)"/>, and <paramref name="cancellationToken"/> cancels the run if the action has not
    /// started: the returned task then ends as cancelled at once, even while the action still waits for a worker, and
    /// the action never runs (as <c>Task.Run(action, token)</c>). Once it has started, the token is the action's to
    /// watch; an <see cref="OperationCanceledException"/> it throws cancels the task.
    /// </summary>
    /// <remarks>
    /// A token already cancelled gives a cancelled task and queues nothing. The registration on the token is removed
    /// when the action starts (or spent, when the token cancels the run). A run that is not cancelled allocates nothing
    /// in steady state. A cancellation is kept as a value: its <see cref="System.Threading.Tasks.TaskCanceledException"/>,
    /// with the token, is built only by a read that throws it, so an await with
    /// <see cref="SpindleTask.SuppressCancellationThrow"/> builds none (a token already cancelled costs the completed task's
    /// small source alone, as <see cref="SpindleTask.FromCanceled(CancellationToken)"/>).
    /// </remarks>
    /// <exception cref="ArgumentNullException"><paramref name="action"/> is null.</exception>
    /// <exception cref="InvalidOperationException">The workers had not started, <see cref="ConfigureWorkers"/> was not
    /// called, and the SPINDLE_WORKERS environment variable is set to something other than a whole number from 1 to 1024
    /// (see <see cref="WorkerCount"/>).</exception>
    public static SpindleTask Run(Action action, CancellationToken cancellationToken)
        => RunAction(action, withState: false, null, cancellationToken);

    /// <summary>Runs <paramref name="function"/> on a Spindle worker and returns its result.</summary>
    /// <exception cref="ArgumentNullException"><paramref name="function"/> is null.</exception>
    /// <exception cref="InvalidOperationException">The workers had not started, <see cref="ConfigureWorkers"/> was not
    /// called, and the SPINDLE_WORKERS environment variable is set to something other than a whole number from 1 to 1024
    /// (see <see cref="WorkerCount"/>).</exception>
    public static SpindleTask<T> Run<T>(Func<T> function) => Run(function, default);

    /// <summary>
    /// As <see cref="Run{T}(Func{T})"/>, and <paramref name="cancellationToken"/> cancels the run if the function has not
    /// started (see <see cref="Run(Action, CancellationToken)"/>).
    /// </summary>
    /// <exception cref="ArgumentNullException"><paramref name="function"/> is null.</exception>
    /// <exception cref="InvalidOperationException">The workers had not started, <see cref="ConfigureWorkers"/> was not
    /// called, and the SPINDLE_WORKERS environment variable is set to something other than a whole number from 1 to 1024
    /// (see <see cref="WorkerCount"/>).</exception>
    public static SpindleTask<T> Run<T>(Func<T> function, CancellationToken cancellationToken)
        => RunFunction<T>(function, withState: false, null, cancellationToken);

    /// <summary>
    /// Runs <paramref name="action"/> with <paramref name="state"/> on a Spindle worker, as
    /// <see cref="Run(Action, CancellationToken)"/> (and the BCL's <c>Task.Factory.StartNew(Action&lt;object?&gt;, object?)</c>):
    /// a static lambda given its state, instead of a lambda that captures it, allocates nothing in steady state, where
    /// the capture allocates a closure and a delegate per call.
    /// </summary>
    /// <remarks>A value-type state is boxed: pass an object the work needs anyway (a session, a message).</remarks>
    /// <param name="action">The work, given <paramref name="state"/>.</param>
    /// <param name="state">What the work is given: its <c>object?</c> argument.</param>
    /// <param name="cancellationToken">Cancels the run if the action has not started (see <see cref="Run(Action, CancellationToken)"/>).</param>
    /// <exception cref="ArgumentNullException"><paramref name="action"/> is null.</exception>
    /// <exception cref="InvalidOperationException">The workers had not started, <see cref="ConfigureWorkers"/> was not
    /// called, and the SPINDLE_WORKERS environment variable is set to something other than a whole number from 1 to 1024
    /// (see <see cref="WorkerCount"/>).</exception>
    public static SpindleTask Run(Action<object?> action, object? state, CancellationToken cancellationToken = default)
        => RunAction(action, withState: true, state, cancellationToken);

    /// <summary>
    /// Runs <paramref name="function"/> with <paramref name="state"/> on a Spindle worker and returns its result, as
    /// <see cref="Run{T}(Func{T}, CancellationToken)"/>; see <see cref="Run(Action{object}, object, CancellationToken)"/>
    /// for why a state.
    /// </summary>
    /// <param name="function">The work, given <paramref name="state"/>.</param>
    /// <param name="state">What the work is given: its <c>object?</c> argument.</param>
    /// <param name="cancellationToken">Cancels the run if the function has not started (see <see cref="Run(Action, CancellationToken)"/>).</param>
    /// <exception cref="ArgumentNullException"><paramref name="function"/> is null.</exception>
    /// <exception cref="InvalidOperationException">The workers had not started, <see cref="ConfigureWorkers"/> was not
    /// called, and the SPINDLE_WORKERS environment variable is set to something other than a whole number from 1 to 1024
    /// (see <see cref="WorkerCount"/>).</exception>
    public static SpindleTask<T> Run<T>(Func<object?, T> function, object? state, CancellationToken cancellationToken = default)
        => RunFunction<T>(function, withState: true, state, cancellationToken);

    /// <summary>The forms of Run given an action, with a state or without (see <see cref="RunItem{TResult}.Rent(Delegate, bool, object, CancellationToken)"/>).</summary>
    private static SpindleTask RunAction(Delegate action, bool withState, object? state, CancellationToken cancellationToken)
    {
        if (action is null)
        {
            ThrowHelper.ThrowArgumentNull(nameof(action));
        }
        if (cancellationToken.IsCancellationRequested)
        {
            return SpindleTask.FromCanceled(cancellationToken);
        }
        RunItem<VoidResult> item = Queue<VoidResult>(action, withState, state, cancellationToken);
        return new SpindleTask(item, item.Version);
    }

    /// <summary>The forms of Run given a function, with a state or without.</summary>
    private static SpindleTask<T> RunFunction<T>(Delegate function, bool withState, object? state, CancellationToken cancellationToken)
    {
        if (function is null)
        {
            ThrowHelper.ThrowArgumentNull(nameof(function));
        }
        if (cancellationToken.IsCancellationRequested)
        {
            return SpindleTask.FromCanceled<T>(cancellationToken);
        }
        RunItem<T> item = Queue<T>(function, withState, state, cancellationToken);
        return new SpindleTask<T>(item, item.Version);
    }

    /// <summary>
    /// Rents a run item for <paramref name="work"/> (registering a token that can be cancelled) and queues it. The
    /// workers are reached first: starting them may throw, and then nothing is rented or registered. The item's version
    /// may be read afterwards: only the consumer of the task moves it on, and there is none yet.
    /// </summary>
    private static RunItem<TResult> Queue<TResult>(Delegate work, bool withState, object? state, CancellationToken cancellationToken)
    {
        Scheduler scheduler = Scheduler.Default;
        RunItem<TResult> item = RunItem<TResult>.Rent(work, withState, state, cancellationToken);
        scheduler.Queue(item);
        return item;
    }

    /// <summary>Starts the asynchronous <paramref name="function"/> on a Spindle worker; the task completes when the function's task does.</summary>
    /// <exception cref="ArgumentNullException"><paramref name="function"/> is null.</exception>
    /// <exception cref="InvalidOperationException">The workers had not started, <see cref="ConfigureWorkers"/> was not
    /// called, and the SPINDLE_WORKERS environment variable is set to something other than a whole number from 1 to 1024
    /// (see <see cref="WorkerCount"/>): thrown here with a token that can be cancelled, else the returned task fails with
    /// it.</exception>
    public static SpindleTask Run(Func<SpindleTask> function) => Run(function, default);

    /// <summary>
    /// As <see cref="Run(Func{SpindleTask})"/>, and <paramref name="cancellationToken"/> cancels the run if the function
    /// has not started (see <see cref="Run(Action, CancellationToken)"/>). Once started, the returned task follows the
    /// function's task, as <c>Task.Run(function, token)</c> does: pass the token to the function for it to watch.
    /// </summary>
    /// <exception cref="ArgumentNullException"><paramref name="function"/> is null.</exception>
    /// <exception cref="InvalidOperationException">The workers had not started, <see cref="ConfigureWorkers"/> was not
    /// called, and the SPINDLE_WORKERS environment variable is set to something other than a whole number from 1 to 1024
    /// (see <see cref="WorkerCount"/>): thrown here with a token that can be cancelled, else the returned task fails with
    /// it.</exception>
    public static SpindleTask Run(Func<SpindleTask> function, CancellationToken cancellationToken)
    {
        if (function is null)
        {
            ThrowHelper.ThrowArgumentNull(nameof(function));
        }
        return cancellationToken.CanBeCanceled ? Unwrap(Run<SpindleTask>(function, cancellationToken)) : RunAsync(function);
    }

    /// <summary>Starts the asynchronous <paramref name="function"/> on a Spindle worker and returns its result.</summary>
    /// <exception cref="ArgumentNullException"><paramref name="function"/> is null.</exception>
    /// <exception cref="InvalidOperationException">The workers had not started, <see cref="ConfigureWorkers"/> was not
    /// called, and the SPINDLE_WORKERS environment variable is set to something other than a whole number from 1 to 1024
    /// (see <see cref="WorkerCount"/>): thrown here with a token that can be cancelled, else the returned task fails with
    /// it.</exception>
    public static SpindleTask<T> Run<T>(Func<SpindleTask<T>> function) => Run(function, default);

    /// <summary>
    /// As <see cref="Run{T}(Func{SpindleTask{T}})"/>, and <paramref name="cancellationToken"/> cancels the run if the
    /// function has not started (see <see cref="Run(Func{SpindleTask}, CancellationToken)"/>).
    /// </summary>
    /// <exception cref="ArgumentNullException"><paramref name="function"/> is null.</exception>
    /// <exception cref="InvalidOperationException">The workers had not started, <see cref="ConfigureWorkers"/> was not
    /// called, and the SPINDLE_WORKERS environment variable is set to something other than a whole number from 1 to 1024
    /// (see <see cref="WorkerCount"/>): thrown here with a token that can be cancelled, else the returned task fails with
    /// it.</exception>
    public static SpindleTask<T> Run<T>(Func<SpindleTask<T>> function, CancellationToken cancellationToken)
    {
        if (function is null)
        {
            ThrowHelper.ThrowArgumentNull(nameof(function));
        }
        return cancellationToken.CanBeCanceled ? Unwrap(Run<SpindleTask<T>>(function, cancellationToken)) : RunAsync(function);
    }

    private static async SpindleTask RunAsync(Func<SpindleTask> function)
    {
        await QueueToWorker();
        await function();
    }

    private static async SpindleTask<T> RunAsync<T>(Func<SpindleTask<T>> function)
    {
        await QueueToWorker();
        return await function();
    }

    /// <summary>
    /// Starts the asynchronous <paramref name="function"/> with <paramref name="state"/> on a Spindle worker, as
    /// <see cref="Run(Func{SpindleTask}, CancellationToken)"/>; see <see cref="Run(Action{object}, object, CancellationToken)"/>
    /// for why a state.
    /// </summary>
    /// <param name="function">The work, given <paramref name="state"/>.</param>
    /// <param name="state">What the work is given: its <c>object?</c> argument.</param>
    /// <param name="cancellationToken">Cancels the run if the function has not started (see <see cref="Run(Func{SpindleTask}, CancellationToken)"/>).</param>
    /// <exception cref="ArgumentNullException"><paramref name="function"/> is null.</exception>
    /// <exception cref="InvalidOperationException">The workers had not started, <see cref="ConfigureWorkers"/> was not
    /// called, and the SPINDLE_WORKERS environment variable is set to something other than a whole number from 1 to 1024
    /// (see <see cref="WorkerCount"/>): thrown here with a token that can be cancelled, else the returned task fails with
    /// it.</exception>
    public static SpindleTask Run(Func<object?, SpindleTask> function, object? state, CancellationToken cancellationToken = default)
    {
        if (function is null)
        {
            ThrowHelper.ThrowArgumentNull(nameof(function));
        }
        return cancellationToken.CanBeCanceled ? Unwrap(Run<SpindleTask>(function, state, cancellationToken)) : RunAsync(function, state);
    }

    /// <summary>
    /// Starts the asynchronous <paramref name="function"/> with <paramref name="state"/> on a Spindle worker and returns
    /// its result, as <see cref="Run{T}(Func{SpindleTask{T}}, CancellationToken)"/>; see
    /// <see cref="Run(Action{object}, object, CancellationToken)"/> for why a state.
    /// </summary>
    /// <param name="function">The work, given <paramref name="state"/>.</param>
    /// <param name="state">What the work is given: its <c>object?</c> argument.</param>
    /// <param name="cancellationToken">Cancels the run if the function has not started (see <see cref="Run(Func{SpindleTask}, CancellationToken)"/>).</param>
    /// <exception cref="ArgumentNullException"><paramref name="function"/> is null.</exception>
    /// <exception cref="InvalidOperationException">The workers had not started, <see cref="ConfigureWorkers"/> was not
    /// called, and the SPINDLE_WORKERS environment variable is set to something other than a whole number from 1 to 1024
    /// (see <see cref="WorkerCount"/>): thrown here with a token that can be cancelled, else the returned task fails with
    /// it.</exception>
    public static SpindleTask<T> Run<T>(Func<object?, SpindleTask<T>> function, object? state, CancellationToken cancellationToken = default)
    {
        if (function is null)
        {
            ThrowHelper.ThrowArgumentNull(nameof(function));
        }
        return cancellationToken.CanBeCanceled ? Unwrap(Run<SpindleTask<T>>(function, state, cancellationToken)) : RunAsync(function, state);
    }

    private static async SpindleTask RunAsync(Func<object?, SpindleTask> function, object? state)
    {
        await QueueToWorker();
        await function(state);
    }

    private static async SpindleTask<T> RunAsync<T>(Func<object?, SpindleTask<T>> function, object? state)
    {
        await QueueToWorker();
        return await function(state);
    }

    /// <summary>
    /// A started function's task, once it has one: the run's own task gives it when the function has returned it. The run
    /// is awaited as a ValueTask: a Spindle task's awaiter, on a worker, would take a run it has just queued back from the
    /// run-next slot and run it on the spot, and this method starts inside <see cref="Run(Func{SpindleTask}, CancellationToken)"/>,
    /// so the function would run before Run returned (the token-free form goes through <see cref="Yield"/>). Not on the
    /// caller's context: a plain await of a ValueTask would resume there (section 19 of docs/decisions.md).
    /// </summary>
    private static async SpindleTask Unwrap(SpindleTask<SpindleTask> started) => await await started.AsValueTask().ConfigureAwait(false);

    private static async SpindleTask<T> Unwrap<T>(SpindleTask<SpindleTask<T>> started) => await await started.AsValueTask().ConfigureAwait(false);

    /// <summary>
    /// Awaits to continue on a Spindle worker, always by way of the work queues (even from a worker), behind the work
    /// already waiting there, as <c>Task.Yield</c> on the .NET ThreadPool: loops that yield take turns with the work
    /// queued from outside the workers instead of holding it back.
    /// </summary>
    /// <remarks>
    /// The await starts the workers if nothing has: if SPINDLE_WORKERS is then invalid (see <see cref="WorkerCount"/>), the
    /// awaiter's <c>OnCompleted</c> throws <see cref="InvalidOperationException"/>, which a Spindle async method's task
    /// carries and which the BCL's async method builders rethrow on the thread pool, ending the process.
    /// </remarks>
    public static WorkerAwaitable Yield() => new(alwaysQueue: true, inOrder: true);

    /// <summary>Awaits to continue on a Spindle worker; completes at once when already on one.</summary>
    /// <remarks>As for <see cref="Yield"/>, an await off the workers starts them if nothing has, and throws
    /// <see cref="InvalidOperationException"/> if SPINDLE_WORKERS is then invalid.</remarks>
    public static WorkerAwaitable SwitchToWorker() => new(alwaysQueue: false, inOrder: false);

    /// <summary>
    /// <see cref="Run(Func{SpindleTask})"/>'s move to a worker: always queued, and from a worker to its run-next slot, so
    /// that a worker awaiting the run it has just started takes it back and runs it inline (section 9 of docs/decisions.md).
    /// </summary>
    private static WorkerAwaitable QueueToWorker() => new(alwaysQueue: true, inOrder: false);
}

/// <summary>The awaitable returned by <see cref="Spindle.Yield"/> and <see cref="Spindle.SwitchToWorker"/>.</summary>
[StructLayout(LayoutKind.Auto)]
public readonly struct WorkerAwaitable
{
    private readonly bool _alwaysQueue;
    private readonly bool _inOrder;

    internal WorkerAwaitable(bool alwaysQueue, bool inOrder)
    {
        _alwaysQueue = alwaysQueue;
        _inOrder = inOrder;
    }

    /// <summary>Gets the awaiter.</summary>
    public Awaiter GetAwaiter() => new(_alwaysQueue, _inOrder);

    /// <summary>Awaits a move to a Spindle worker.</summary>
    [StackTraceHidden]
    public readonly struct Awaiter : ICriticalNotifyCompletion, ISpindleAwaiter
    {
        private readonly bool _alwaysQueue;
        private readonly bool _inOrder;

        internal Awaiter(bool alwaysQueue, bool inOrder)
        {
            _alwaysQueue = alwaysQueue;
            _inOrder = inOrder;
        }

        /// <summary><see cref="Spindle.Yield"/>'s continuation goes behind the waiting work; the others, where <see cref="Scheduler.Queue"/> puts it.</summary>
        private void Queue(WorkItem item)
        {
            if (_inOrder)
            {
                Scheduler.Default.QueueInOrder(item);
            }
            else
            {
                Scheduler.Default.Queue(item);
            }
        }

        /// <summary>False unless this is <see cref="Spindle.SwitchToWorker"/> on a worker thread.</summary>
        public bool IsCompleted => !_alwaysQueue && Scheduler.Default.IsWorkerThread;

        /// <summary>Ends the await.</summary>
        public void GetResult()
        {
        }

        /// <summary>Queues the continuation to the workers, flowing the <see cref="ExecutionContext"/>.</summary>
        /// <exception cref="ArgumentNullException"><paramref name="continuation"/> is null.</exception>
        /// <exception cref="InvalidOperationException">The workers had not started and SPINDLE_WORKERS is invalid (see <see cref="Spindle.WorkerCount"/>).</exception>
        public void OnCompleted(Action continuation)
        {
            if (continuation is null)
            {
                ThrowHelper.ThrowArgumentNull(nameof(continuation));
            }
            ExecutionContext? ec = ExecutionContext.Capture();
            Queue(ec is null
                ? ContinuationWorkItem.Rent(ActionContinuation.s_invoke, continuation)
                : ContinuationWorkItem.Rent(ContextContinuation.s_run, new ContextContinuation(ActionContinuation.s_invoke, continuation, ec)));
        }

        /// <summary>Queues the continuation to the workers.</summary>
        /// <exception cref="ArgumentNullException"><paramref name="continuation"/> is null.</exception>
        /// <exception cref="InvalidOperationException">The workers had not started and SPINDLE_WORKERS is invalid (see <see cref="Spindle.WorkerCount"/>).</exception>
        public void UnsafeOnCompleted(Action continuation)
        {
            if (continuation is null)
            {
                ThrowHelper.ThrowArgumentNull(nameof(continuation));
            }
            Queue(ContinuationWorkItem.Rent(ActionContinuation.s_invoke, continuation));
        }

        void ISpindleAwaiter.OnCompletedForBox(StateMachineBoxBase box) => Queue(box);
    }
}

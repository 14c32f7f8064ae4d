using System;
using System.Diagnostics;
using System.Runtime.CompilerServices;
using System.Runtime.ExceptionServices;
using System.Threading;
using System.Threading.Tasks.Sources;

namespace SpindleLib;

/// <summary>
/// The pooled work item behind <see cref="Spindle.Run(Action)"/> and <see cref="Spindle.Run{T}(Func{T})"/>: it is both
/// what the worker runs and the source of the returned task, so a run allocates nothing in steady state.
/// </summary>
/// <remarks>
/// <para><b>A token</b> (<see cref="Spindle.Run(Action, CancellationToken)"/>) lets the task end as cancelled while the
/// item still waits in a queue, as <c>Task.Run(action, token)</c> does; once the item has started, the token no longer
/// touches it (the delegate may watch it). Whoever moves <see cref="_claim"/> away from <see cref="Queued"/> with a CAS
/// decides: the worker (<see cref="Started"/>: it runs the delegate) or the token's callback (<see cref="Canceled"/>: it
/// completes the task as cancelled, and the delegate never runs). This is the claim a <c>Task</c> makes on its own state
/// before running, which its cancellation registration races for (the BCL's <c>Task.TryCancel</c> against
/// <c>ExecuteEntry</c>); a pooled item adds only the question of when it may be reused.</para>
/// <para>Invariant: a cancelled item is still in a queue, and it is also the source of a task its consumer will read, so
/// it has two holders, and it goes back to the pool only when both have let go (<see cref="_holds"/>, counted down with
/// an interlocked decrement, by the worker that dequeues it and finds it cancelled, and by the consumer's read). A
/// started item has one holder again: the worker that claimed it drops the registration (waiting for a callback in
/// flight, which can only lose the CAS) and clears <see cref="_cancelToken"/> before it runs the delegate, so the rest
/// of that use is the token-free path, and the completion's publication orders those writes before the consumer's
/// read. Reuse never meets a callback from the previous use: the starting worker drops it (a callback in flight is
/// waited for, and loses the claim), and a cancelled item's callback is the one that claimed it, done with the item once
/// it has published the completion (<see cref="Recycle"/>).</para>
/// </remarks>
[StackTraceHidden]
internal sealed class RunItem<TResult> : WorkItem, ISpindleSource<TResult>, IPoolNode<RunItem<TResult>>, IQuietSource<TResult>, ILazyCanceledSource
{
    private static readonly ContextCallback s_runUnderContext = static o => ((RunItem<TResult>)o!).RunDelegate();

#if NET
    private static readonly Action<object?, CancellationToken> s_cancel = static (o, _) => ((RunItem<TResult>)o!).Cancel();
#else
    private static readonly Action<object?> s_cancel = static o => ((RunItem<TResult>)o!).Cancel();
#endif

    private const int Queued = 0;
    private const int Started = 1;
    private const int Canceled = 2;

    // Stands in _state for a use whose delegate takes no state (an Action or a Func<TResult>). With the token standing
    // for "cancelable" (below), it replaces the item's two bool flags, which made every item 8 bytes larger (section 51).
    private static readonly object s_noState = new();

    private Delegate? _delegate;
    // The state of a Run(action, state) use, given to the delegate (an Action<object?> or a Func<object?, TResult>), or
    // s_noState; null once the delegate has run.
    private object? _state;
    private ExecutionContext? _context;
    private SourceCore<TResult> _core;
    private RunItem<TResult>? _next;

    // _claim, _holds and _registration are used only while _cancelToken can be canceled: a use given a cancelable token
    // keeps it until its work starts (TryStart clears it) or, cancelled, until it is recycled. That token is the item's
    // "cancelable" mark (no flag of its own, section 51): written by the renter before the item is queued, cleared by the
    // thread that starts the work before that work can complete, so every reader of it below sees the value its path needs.
    private int _claim;
    private int _holds;
    private CancellationToken _cancelToken;
    private CancellationTokenRegistration _registration;

    ref RunItem<TResult>? IPoolNode<RunItem<TResult>>.Next => ref _next;

    public short Version => _core.Version;

    /// <summary>
    /// Rents an item for <paramref name="work"/>. A <paramref name="cancellationToken"/> that can be cancelled is
    /// registered here, before the caller queues the item (see the remarks); the caller has checked that it is not
    /// cancelled already.
    /// </summary>
    public static RunItem<TResult> Rent(Delegate work, CancellationToken cancellationToken = default)
        => Rent(work, withState: false, null, cancellationToken);

    /// <summary>As <see cref="Rent(Delegate, CancellationToken)"/>, for work that may take a state.</summary>
    /// <param name="work">An <see cref="Action"/> or a <see cref="Func{TResult}"/>; with <paramref name="withState"/>, an
    /// <see cref="Action{T}"/> or a <see cref="Func{T, TResult}"/> of <see cref="object"/>.</param>
    /// <param name="withState">The work takes <paramref name="state"/>.</param>
    /// <param name="state">What the work is given, if it takes a state; cleared (with <paramref name="withState"/>) when a worker takes the item.</param>
    /// <param name="cancellationToken">Cancels the run until it starts.</param>
    public static RunItem<TResult> Rent(Delegate work, bool withState, object? state, CancellationToken cancellationToken)
    {
        RunItem<TResult> item = ObjectPool<RunItem<TResult>>.TryRent() ?? new RunItem<TResult>();
        item._delegate = work;
        item._state = withState ? state : s_noState;
        item._context = ExecutionContext.Capture();
        if (cancellationToken.CanBeCanceled)
        {
            item._claim = Queued;
            item._holds = 2; // the queue's and the consumer's
            item._cancelToken = cancellationToken;
            item._registration = CancellationRegistrations.Register(cancellationToken, s_cancel, item);
        }
        return item;
    }

    /// <summary>The token's callback: ends the task as cancelled if the item has not started (see the remarks).</summary>
    private void Cancel()
    {
        if (Interlocked.CompareExchange(ref _claim, Canceled, Queued) == Queued)
        {
            // The publication: the consumer may read from here on. Lazily: the exception is built only for a reader that
            // throws it, from the token this use keeps until it is recycled (LazyCancellation).
            _core.TrySetCanceledLazily();
        }
    }

    /// <summary>The token that canceled this use (<see cref="ILazyCanceledSource"/>): kept until the item is recycled.</summary>
    CancellationToken ILazyCanceledSource.CanceledBy => _cancelToken;

    public override void Execute()
    {
        ExecutionContext? context = _context ?? ContextFlow.ForContextFree();
        _context = null;
        if (context is null)
        {
            RunDelegate();
        }
        else if (ContextFlow.CanRunInline(context))
        {
            RunDelegate();
            ContextFlow.RestoreDefaultIfChanged();
        }
        else
        {
            ContextFlow.Run(context, s_runUnderContext, this);
        }
    }

    public override void ExecuteOnDefaultContext()
    {
#if NET
        ExecutionContext? context = _context;
        _context = null;
        if (ContextFlow.RunsAsIsOnDefault(context))
        {
            RunDelegate(); // the caller is in the default context and restores it afterwards (WorkItem.ExecuteOnDefaultContext)
            return;
        }
        ExecutionContext.Run(context, s_runUnderContext, this);
#else
        Execute();
#endif
    }

    /// <summary>
    /// Runs the item here, on the code that awaits it, if it is still waiting in the calling worker's run-next slot
    /// (<see cref="WorkerPool.TryTakeBackRunNext"/>) and was queued from the context the caller is in now. The caller's
    /// context is as it was afterwards, whatever the delegate changed (and its SynchronizationContext: see RunDelegate). False, with nothing done, otherwise; always false
    /// on netstandard2.1, which cannot restore a context.
    /// </summary>
    public bool TryRunInline()
    {
#if NET
        ExecutionContext? current = ExecutionContext.Capture();
        if (current is null || _context != current || !WorkerPool.TryTakeBackRunNext(this))
        {
            return false;
        }
        _context = null;
        RunDelegate();
        ContextFlow.RestoreIfChanged(current);
        return true;
#else
        return false;
#endif
    }

    /// <summary>
    /// Runs the delegate and completes the item. A SynchronizationContext the delegate installed and left behind is taken
    /// down before the completion runs the awaiting code inline, as the BCL, which queues a continuation rather than run
    /// it under a context a task left behind, never shows it to the awaiting code either: otherwise that code's next BCL
    /// await would post there.
    /// </summary>
    private void RunDelegate()
    {
        Delegate work = _delegate!;
        object? state = _state;
        bool withState = state != s_noState;
        _delegate = null;
        _state = null;
        if (_cancelToken.CanBeCanceled && !TryStart())
        {
            return; // cancelled while it waited: the delegate never runs
        }
        SynchronizationContext? sync = SynchronizationContext.Current;
        TResult result;
        Exception? error;
        // Caught in a frame a trace shows: see UserWork.
        if (typeof(TResult) == typeof(VoidResult))
        {
            error = withState ? UserWork.Run((Action<object?>)work, state) : UserWork.Run((Action)work);
            result = default!;
        }
        else
        {
            error = withState ? UserWork.Run((Func<object?, TResult>)work, state, out result) : UserWork.Run((Func<TResult>)work, out result);
        }
        ContextFlow.RestoreSynchronizationContext(sync);
        if (error is not null)
        {
            _core.TrySetException(error);
            return;
        }
        _core.TrySetResult(result);
    }

    /// <summary>
    /// The worker's claim on an item that has a token (see the remarks). True: it has started, with the registration
    /// dropped and the token-free path from here on. False: the token won, and the worker lets go of the queue's hold.
    /// </summary>
    private bool TryStart()
    {
        if (Interlocked.CompareExchange(ref _claim, Started, Queued) != Queued)
        {
            LetGo();
            return false;
        }
        CancellationRegistrations.Drop(ref _registration); // a callback in flight loses the CAS above: waited for
        _cancelToken = default; // no longer cancelable: the consumer's read recycles the item
        return true;
    }

    /// <summary>One holder of a cancelled item lets go of it; the last one returns it to the pool.</summary>
    private void LetGo()
    {
        if (Interlocked.Decrement(ref _holds) == 0)
        {
            Recycle();
        }
    }

    private void Recycle()
    {
        if (_cancelToken.CanBeCanceled)
        {
            // Cancelled: its claim proves the callback fired, and once it published the completion the callback touches
            // nothing of this item, so there is nothing to unregister and nothing to wait for. (Waiting, as Dispose does,
            // would hold this thread for as long as the callback runs, and that includes the consumer's continuation
            // when it ran inline there: a worker could wait on code that waits for the workers.)
            _registration = default;
            _cancelToken = default;
        }
        _core.ClearForPool();
        ObjectPool<RunItem<TResult>>.Return(this);
    }

    public TResult GetResult(short token)
    {
        TResult result = ReadQuietly(token, out ExceptionDispatchInfo? error);
        if (error is not null)
        {
            throw LazyCancellation.ToThrow(error);
        }
        return result;
    }

    /// <summary>
    /// The read of a <see cref="SpindleTask"/>'s awaiter: the same read and throw as <see cref="GetResult"/>, written out
    /// rather than a call to it, so that a cancellation it throws is thrown at this frame, whatever the JIT inlines
    /// (<see cref="LazyCancellation.ToThrow"/>).
    /// </summary>
    void IValueTaskSource.GetResult(short token)
    {
        ReadQuietly(token, out ExceptionDispatchInfo? error);
        if (error is not null)
        {
            throw LazyCancellation.ToThrow(error);
        }
    }

    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public TResult ReadQuietly(short token, out ExceptionDispatchInfo? error)
    {
        TResult result = _core.Consume(token, this, out error);
        if (_cancelToken.CanBeCanceled)
        {
            LetGo(); // cancelled: the queue may still hold the item
        }
        else
        {
            Recycle();
        }
        return result;
    }

    ExceptionDispatchInfo? IQuietSource.ReadQuietly(short token)
    {
        ReadQuietly(token, out ExceptionDispatchInfo? error);
        return error;
    }

    public SpindleTaskStatus GetStatus(short token) => _core.GetStatus(token);

    ValueTaskSourceStatus IValueTaskSource.GetStatus(short token) => (ValueTaskSourceStatus)_core.GetStatus(token);

    ValueTaskSourceStatus IValueTaskSource<TResult>.GetStatus(short token) => (ValueTaskSourceStatus)_core.GetStatus(token);

    public void OnCompleted(Action<object?> continuation, object? state, short token) => _core.OnCompleted(continuation, state, token);

    public void OnCompleted(Action<object?> continuation, object? state, short token, ValueTaskSourceOnCompletedFlags flags)
        => _core.OnCompleted(continuation, state, token, flags);
}

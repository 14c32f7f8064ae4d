using System;
using System.Threading;
using System.Threading.Tasks.Sources;

namespace SpindleLib;

/// <summary>
/// The pooled work item behind <see cref="Spindle.Run(Action)"/> and <see cref="Spindle.Run{T}(Func{T})"/>: it is both
/// what the worker runs and the source of the returned task, so a run allocates nothing in steady state.
/// </summary>
internal sealed class RunItem<TResult> : WorkItem, ISpindleSource<TResult>, IPoolNode<RunItem<TResult>>
{
    private static readonly ContextCallback s_runUnderContext = static o => ((RunItem<TResult>)o!).RunDelegate();


    private Delegate? _delegate;
    private ExecutionContext? _context;
    private SourceCore<TResult> _core;
    private RunItem<TResult>? _next;

    ref RunItem<TResult>? IPoolNode<RunItem<TResult>>.Next => ref _next;

    public short Version => _core.Version;

    public static RunItem<TResult> Rent(Delegate work)
    {
        RunItem<TResult> item = ObjectPool<RunItem<TResult>>.TryRent() ?? new RunItem<TResult>();
        item._delegate = work;
        item._context = ExecutionContext.Capture();
        return item;
    }

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
        _delegate = null;
        SynchronizationContext? sync = SynchronizationContext.Current;
        TResult result;
        try
        {
            if (typeof(TResult) == typeof(VoidResult))
            {
                ((Action)work)();
                result = default!;
            }
            else
            {
                result = ((Func<TResult>)work)();
            }
        }
        catch (Exception ex)
        {
            ContextFlow.RestoreSynchronizationContext(sync);
            _core.TrySetException(ex);
            return;
        }
        ContextFlow.RestoreSynchronizationContext(sync);
        _core.TrySetResult(result);
    }

    public TResult GetResult(short token)
    {
        TResult result = _core.Consume(token, this, out var error);
        _core.ClearForPool();
        ObjectPool<RunItem<TResult>>.Return(this);
        error?.Throw();
        return result;
    }

    void IValueTaskSource.GetResult(short token) => GetResult(token);

    public SpindleTaskStatus GetStatus(short token) => _core.GetStatus(token);

    ValueTaskSourceStatus IValueTaskSource.GetStatus(short token) => (ValueTaskSourceStatus)_core.GetStatus(token);

    ValueTaskSourceStatus IValueTaskSource<TResult>.GetStatus(short token) => (ValueTaskSourceStatus)_core.GetStatus(token);

    public void OnCompleted(Action<object?> continuation, object? state, short token) => _core.OnCompleted(continuation, state, token);

    public void OnCompleted(Action<object?> continuation, object? state, short token, ValueTaskSourceOnCompletedFlags flags)
        => _core.OnCompleted(continuation, state, token, flags);
}

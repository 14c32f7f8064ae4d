using System;
using System.Runtime.CompilerServices;
using System.Threading;

namespace SpindleLib;

/// <summary>
/// Runs continuations on the completing thread, up to a bounded nesting depth. A chain of sources that each complete
/// the next from inside a continuation would otherwise dive the stack without limit; past
/// <see cref="MaxInlineDepth"/> nested continuations, the next one is dispatched to the workers instead, or, on a thread
/// inside a <see cref="FrameLoop"/>'s step, queued to that step (<see cref="FrameLoop.DeferNested"/>): it runs on the loop
/// thread once the item that started the chain returns, before the phase's next item, so loop code never continues on
/// a worker.
/// </summary>
internal static class Continuations
{
    /// <summary>How many continuations may run nested inside each other on one thread before Spindle dispatches.</summary>
    public const int MaxInlineDepth = 32;

    /// <summary>
    /// The depth <see cref="BeginQueueing"/> sets: past it every continuation goes to the workers, a frame loop's step
    /// included (a job finished inside a blocking Complete() on the loop thread resumes its awaiters on a worker, not
    /// inside the frame). Far above any depth <see cref="Invoke"/> reaches by nesting, which stops at the bound.
    /// </summary>
    private const int QueueingDepth = 1 << 20;

    [ThreadStatic]
    private static int t_depth;

    /// <summary>
    /// True for the waiters that always run on the completing thread, neither queued past the nesting bound nor by a
    /// source that dispatches its continuations (SourceCore.RunWaiter): a blocked thread's wake-up (queued, it would wait
    /// for a free worker, for ever if the workers wait for that thread; the BCL wakes Task.Wait inline too), and the
    /// observer of a forgotten task, a source's or an async method's own (it runs no user code but the fault handlers,
    /// and queued it would read the use only after its owner may have started the next one, or report the fault late and
    /// elsewhere), and the hand-over of a ValueTask's continuation to the awaiting code's SynchronizationContext or
    /// TaskScheduler (queued, the context's thread would wait for a free worker just to be told; the BCL posts from
    /// SetResult). None of them runs a further continuation, but for a job's finish of a wait made by
    /// <see cref="JobHandle.AsSpindleTask"/> (<see cref="JobWait"/>): it ends the wait's use, whose own waiter it runs
    /// through <see cref="Invoke"/>, one level deeper, so past the bound that waiter is queued unless it is one of these
    /// (a thread blocked reading the wait is woken at once, as by a blocking Complete()).
    /// </summary>
    public static bool NeverQueued(object waiter)
        => waiter == (object)BlockingWait.s_set || waiter == (object)ForgetObserver.s_onCompleted
            || waiter == (object)StateMachineBoxBase.s_observeForgotten || waiter == (object)ContextContinuation.s_schedule
            || waiter == (object)JobWait.s_onJobFinished;

    /// <summary>
    /// From now until <see cref="EndQueueing"/> on this thread, queues to the workers every continuation it would run
    /// (the waiters that are never queued excepted, see <see cref="NeverQueued"/>): for a job's finish on a thread outside
    /// the workers, which runs jobs only (inside <see cref="BlockingWait.WaitForJob"/>). It puts the nesting depth at the bound, past which
    /// <see cref="Invoke"/> queues already, so the paths that run continuations are unchanged. Returns the depth to put
    /// back.
    /// </summary>
    public static int BeginQueueing()
    {
        ref int slot = ref t_depth;
        int saved = slot;
        slot = Math.Max(saved, QueueingDepth);
        return saved;
    }

    /// <summary>Ends <see cref="BeginQueueing"/>: puts back the depth it returned.</summary>
    public static void EndQueueing(int saved) => t_depth = saved;

    /// <summary>Runs a waiter: a <see cref="DirectWaiter"/> (moved on directly) or an <c>Action&lt;object?&gt;</c> with its state.</summary>
    public static void Invoke(object continuation, object? state)
    {
        // One thread-static lookup (a runtime call on some platforms) for the read, the increment and the restore.
        ref int slot = ref t_depth;
        int depth = slot;
        // Past the bound, queue (to the frame loop whose step this thread is inside, else to the workers): except the
        // waiters that are never queued (NeverQueued), which run no further continuation, so running them here cannot
        // dive the stack. The compares cost nothing below the bound. Nor when the workers cannot start (an invalid
        // SPINDLE_WORKERS, met first here, on a thread no call of Spindle's had started them from): the waiter runs
        // here, deeper, rather than be lost (CanQueueToDefault reports why).
        if (depth >= MaxInlineDepth && !NeverQueued(continuation) && QueuedPastTheBound(continuation, state, depth))
        {
            return;
        }
        slot = depth + 1;
        try
        {
            // A waiter is an Action<object?> or else a direct waiter. The exact type compare is one instruction, where
            // "is Action<object?>" would take the slow variance-aware cast helper (Action<in T> is contravariant). A box's
            // MoveNext does not throw (the compiler's state machine routes every exception to the builder), but a
            // delegate may, and so may a combinator slot's (it runs its consumer's continuation).
            if (continuation.GetType() == typeof(Action<object?>))
            {
                Unsafe.As<Action<object?>>(continuation)(state);
            }
            else
            {
                Unsafe.As<DirectWaiter>(continuation).MoveNext();
            }
        }
        finally
        {
            slot = depth;
        }
    }

    /// <summary>
    /// Runs a waiter as <see cref="Invoke"/> does, and reports an exception it throws (a delegate continuation may) to
    /// <see cref="Spindle.UnobservedException"/> instead of letting it unwind the caller: for a caller that runs waiters
    /// one after another (a timer batch, a wheel's pass, a job's finish), where one that throws must not keep the rest
    /// from running, nor end a worker's thread.
    /// </summary>
    public static void InvokeReporting(object continuation, object? state)
    {
        try
        {
            Invoke(continuation, state);
        }
        catch (Exception ex)
        {
            UnobservedExceptions.Report(ex);
        }
    }

    /// <summary>
    /// A continuation past the nesting bound: queued to the frame loop whose step this thread is inside, which runs it on
    /// this thread when the item that began the chain returns (loop code stays on the loop thread, in that frame and
    /// phase, in a fixed order, and starts no worker), unless <see cref="BeginQueueing"/> asked for the workers; else
    /// dispatched to the workers. False, with nothing queued, when the workers cannot start: the caller runs it.
    /// </summary>
    [MethodImpl(MethodImplOptions.NoInlining)]
    private static bool QueuedPastTheBound(object continuation, object? state, int depth)
    {
        if (depth < QueueingDepth && FrameLoop.InStepOnThisThread is { } loop)
        {
            loop.DeferNested(AsWorkItem(continuation, state));
            return true;
        }
        if (!Scheduler.CanQueueToDefault())
        {
            return false;
        }
        Dispatch(continuation, state);
        return true;
    }

    /// <summary>
    /// Queues the continuation to the default scheduler. A direct waiter is queued as itself, allocation-free. Once
    /// Spindle's collectible context is unloading, the continuation is dropped (<see cref="Scheduler.ForHandOff"/>).
    /// </summary>
    public static void Dispatch(object continuation, object? state) => Scheduler.ForHandOff.Queue(AsWorkItem(continuation, state));

    /// <summary>The continuation as a work item: a direct waiter is itself, allocation-free; a delegate is wrapped in a pooled item.</summary>
    private static WorkItem AsWorkItem(object continuation, object? state)
    {
        if (continuation.GetType() != typeof(Action<object?>))
        {
            return Unsafe.As<DirectWaiter>(continuation);
        }
        if (continuation == (object)DirectWaiter.s_moveNext && state is DirectWaiter target)
        {
            return target;
        }
        return ContinuationWorkItem.Rent((Action<object?>)continuation, state);
    }
}

/// <summary>A pooled work item that runs one (continuation, state) pair.</summary>
internal sealed class ContinuationWorkItem : WorkItem, IPoolNode<ContinuationWorkItem>
{

    private Action<object?>? _continuation;
    private object? _state;
    private ContinuationWorkItem? _next;

    ref ContinuationWorkItem? IPoolNode<ContinuationWorkItem>.Next => ref _next;

    public static ContinuationWorkItem Rent(Action<object?> continuation, object? state)
    {
        ContinuationWorkItem item = ObjectPool<ContinuationWorkItem>.TryRent() ?? new ContinuationWorkItem();
        item._continuation = continuation;
        item._state = state;
        return item;
    }

    public override void Execute()
    {
        Action<object?> c = _continuation!;
        object? s = _state;
        _continuation = null;
        _state = null;
        ObjectPool<ContinuationWorkItem>.Return(this);
        c(s);
    }
}

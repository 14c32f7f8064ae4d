using System;
using System.Diagnostics;
using System.Runtime.CompilerServices;
using System.Runtime.ExceptionServices;
using System.Threading;
using System.Threading.Tasks.Sources;

namespace SpindleLib;

/// <summary>The part of a state-machine box the awaiters and schedulers see: something that can be moved on.</summary>
internal abstract class StateMachineBoxBase : DirectWaiter
{
    /// <summary>
    /// The continuation a forgotten box gets instead of a pooled observer (see <see cref="ForgetObserver.Observe"/>): the
    /// box itself is the state, and the forgotten use is marked in its core until the observer takes it (see
    /// <see cref="SpindleBox{TResult}.ObserveForgotten"/>).
    /// </summary>
    internal static readonly Action<object?> s_observeForgotten = static o => ((StateMachineBoxBase)o!).ObserveForgotten();

    private Action? _moveNextAction;

    /// <summary>The <see cref="ExecutionContext"/> captured at the last suspension (null when flow was suppressed).</summary>
    protected ExecutionContext? _context;

    /// <summary>
    /// A delegate for awaiters that are not Spindle's (Task, ValueTask, custom ones). Created on first need and kept
    /// with the box through its pooled lives, so steady state allocates nothing.
    /// </summary>
    public Action MoveNextAction => _moveNextAction ??= MoveNext;

    public void CaptureContext()
    {
        // Most suspensions capture the same context as the last one (the default): skipping the store then skips the
        // GC write barrier, which is a measurable part of a suspension that resumes in a few nanoseconds (a frame loop's).
        ExecutionContext? context = ExecutionContext.Capture();
        if (context != _context)
        {
            _context = context;
        }
    }

    /// <summary>Reads the outcome of a forgotten task (recycling the box) and reports a fault.</summary>
    internal abstract void ObserveForgotten();

    /// <summary>
    /// Makes the box read its own outcome when use <paramref name="token"/> completes (<see cref="SpindleTask.Forget"/>),
    /// instead of renting an observer: true; false if the use has completed already, and the caller reads it now.
    /// </summary>
    /// <exception cref="InvalidOperationException">The token is stale, or the use already has an awaiter.</exception>
    internal abstract bool TryObserveWhenCompleted(short token);

#if DEBUG
    /// <summary>
    /// Tests only (a Debug build): runs when a forgotten box's observer starts, right after the box's completion was
    /// published, standing in for another thread that reads the task (the caller's misuse) at that moment.
    /// </summary>
    internal static Action<StateMachineBoxBase>? TestHookBeforeObserveForgotten;

    /// <summary>
    /// Tests only (a Debug build): runs when a forgotten box's observer has taken the forgotten use (the mark is gone, and
    /// the use consumed with it), standing in for another thread that reads the task (the caller's misuse) at that moment.
    /// </summary>
    internal static Action<StateMachineBoxBase>? TestHookAfterForgottenTaken;
#endif

    public sealed override void Execute() => MoveNext();

    public sealed override void ExecuteOnDefaultContext() => MoveNextOnDefaultContext();

    /// <summary>As <see cref="DirectWaiter.MoveNext"/>, for a caller on the default context that restores it afterwards (see <see cref="WorkItem.ExecuteOnDefaultContext"/>).</summary>
    internal abstract void MoveNextOnDefaultContext();

    /// <summary>The async method this box runs, for the task tracker.</summary>
    internal virtual string MethodName => GetType().Name;

    /// <summary>The token of the box's current use, for the task tracker to tell that use from the box's later ones.</summary>
    internal abstract short VersionForDiagnostics { get; }

    /// <summary>
    /// The status of use <paramref name="version"/>, for the task tracker (a snapshot that may be stale at once); false
    /// if that use is over (its result was read, and the box may be in its pool or running a later use).
    /// </summary>
    internal abstract bool TryGetStatusForDiagnostics(short version, out SpindleTaskStatus status);
}

/// <summary>A box that is also the source of the async method's task.</summary>
[StackTraceHidden]
internal abstract class SpindleBox<TResult> : StateMachineBoxBase, ISpindleSource<TResult>, IDetachableSource, IQuietSource<TResult>
{
    protected SourceCore<TResult> _core;

    public short Version => _core.Version;

    internal sealed override short VersionForDiagnostics => _core.Version;

    internal sealed override bool TryGetStatusForDiagnostics(short version, out SpindleTaskStatus status)
        => _core.TryGetStatusRacy(version, out status);

    /// <summary>
    /// Completes the task. A SynchronizationContext the method installed and left behind is taken down first (the one
    /// the thread had when the method resumed is put back), as <c>RunItem</c> does for a <c>Spindle.Run</c> delegate:
    /// the completion may run the awaiting code inline, and that code must not find another task's context (its BCL
    /// awaits would post there). The BCL never shows it either: it queues a continuation rather than run it inline
    /// under a SynchronizationContext. Called only from the method's code, which after its first suspension (the only
    /// time there is a box) runs inside MoveNext, which noted the context.
    /// </summary>
    public void SetResult(TResult result)
    {
        ContextFlow.RestoreSynchronizationContext(ResumeContext.ResumedUnder);
        _core.TrySetResult(result);
    }

    /// <summary>
    /// Fails the task; an <see cref="OperationCanceledException"/> makes its status Canceled (the original object is
    /// kept). Takes down a SynchronizationContext the method left behind first, as <see cref="SetResult"/> does.
    /// </summary>
    public void SetException(Exception exception)
    {
        ContextFlow.RestoreSynchronizationContext(ResumeContext.ResumedUnder);
        _core.TrySetException(exception);
    }

    protected abstract void ReturnToPool();

    /// <summary>
    /// The forgotten use is marked in the core's word (SourceCore's ForgottenBit) until this observer takes it: a caller
    /// that reads the forgotten task anyway (misuse) gets the await-once error instead of consuming the use, so the
    /// observer reads exactly the forgotten use, never the box's next one.
    /// </summary>
    internal sealed override void ObserveForgotten()
    {
#if DEBUG
        TestHookBeforeObserveForgotten?.Invoke(this);
#endif
        if (_core.TryConsumeForgotten(out ExceptionDispatchInfo? error))
        {
            ReturnToPool();
#if DEBUG
            TestHookAfterForgottenTaken?.Invoke(this);
#endif
            ForgetObserver.Report(error);
        }
    }

    /// <summary>The observer is registered and the use marked forgotten in one step: nobody but it may consume the use.</summary>
    internal sealed override bool TryObserveWhenCompleted(short token) => _core.TryRegisterForgotten(s_observeForgotten, this, token);

    /// <summary>
    /// A waiter that leaves makes the task forgotten: the box reads its own outcome when the method finishes (see
    /// <see cref="ForgetObserver.Observe"/>). A completed box is left to its waiter: reading it consumes it.
    /// </summary>
    DetachOutcome IDetachableSource.TryDetach(DirectWaiter waiter)
    {
        DetachOutcome outcome = _core.TryReplaceWaiter(waiter, s_observeForgotten, this, forgotten: true);
        return outcome == DetachOutcome.Completed ? DetachOutcome.NotWaiting : outcome;
    }

    /// <summary>An async method is forgotten (<see cref="SpindleTask.Forget"/>), not abandoned: its box must read itself.</summary>
    bool IDetachableSource.TryAbandon(short token) => false;

    public TResult GetResult(short token)
    {
        TResult result = ReadQuietly(token, out ExceptionDispatchInfo? error);
        if (error is not null)
        {
            throw LazyCancellation.ToThrow(error);
        }
        return result;
    }

    void IValueTaskSource.GetResult(short token) => GetResult(token);

    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public TResult ReadQuietly(short token, out ExceptionDispatchInfo? error)
    {
        TResult result = _core.Consume(token, this, out error);
        ReturnToPool();
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

/// <summary>
/// The task of an async method that failed before its first suspension. Not pooled: it exists only on the exception
/// path, and keeps the builder down to one field.
/// </summary>
[StackTraceHidden]
internal sealed class FaultedBox<TResult> : SpindleBox<TResult>
{
    public FaultedBox(Exception exception) => _core.TrySetException(exception);

    public override void MoveNext()
    {
    }

    protected override void ReturnToPool()
    {
    }

    /// <summary>Never owed: the method has finished, so this box never waits on any source (a run is refused).</summary>
    private protected override bool ExchangeRunOwed(bool owed) => false;

    internal override void MoveNextOnDefaultContext()
    {
    }
}

/// <summary>
/// The pooled box for one state-machine type: it holds the compiler's state machine (copied in on the first real
/// suspension) and is the source of the method's task. It returns to its pool when the task's result is read.
/// </summary>
[StackTraceHidden]
internal sealed class StateMachineBox<TStateMachine, TResult> : SpindleBox<TResult>, IPoolNode<StateMachineBox<TStateMachine, TResult>>
    where TStateMachine : IAsyncStateMachine
{
    private static readonly ContextCallback s_runUnderContext = static o => ((StateMachineBox<TStateMachine, TResult>)o!).StateMachine.MoveNext();
    private static string? s_methodName; // worked out on the tracker's first look, not when the type is first used


    public TStateMachine StateMachine = default!;
    private StateMachineBox<TStateMachine, TResult>? _next;

    ref StateMachineBox<TStateMachine, TResult>? IPoolNode<StateMachineBox<TStateMachine, TResult>>.Next => ref _next;

    public static StateMachineBox<TStateMachine, TResult> Rent()
        => ObjectPool<StateMachineBox<TStateMachine, TResult>>.TryRent() ?? new StateMachineBox<TStateMachine, TResult>();

    internal override string MethodName => s_methodName ??= TaskTracker.MethodNameOf(typeof(TStateMachine));

    /// <summary>
    /// The mark is the pool link pointing at the box itself: a rented box's link is null (the pool clears it when it
    /// hands the box out, and sets it only when the box comes back, after its method finished), so the field is free
    /// while the method waits, and the mark can never be mistaken for a link (no pooled box links to itself). The take is
    /// a compare-exchange, never a plain exchange: a late run that meets the box in its pool must leave its link alone.
    /// </summary>
    private protected override bool ExchangeRunOwed(bool owed)
    {
        if (owed)
        {
            Volatile.Write(ref _next, this);
            return false;
        }
        return Interlocked.CompareExchange(ref _next, null, this) == this;
    }

    public override void MoveNext()
    {
        // The thread's SynchronizationContext now: the one the method's completion puts back (SetResult). ContextFlow.Run
        // keeps it (on .NET a context carries none), so the method runs under it in every branch.
        SynchronizationContext? sync = SynchronizationContext.Current;
        SynchronizationContext? outer = ResumeContext.ResumedUnder;
        if (sync != outer)
        {
            MoveNextNoting(sync, outer);
            return;
        }
        MoveNextUnder(sync);
    }

    /// <summary>
    /// Runs the method with <see cref="ResumeContext.ResumedUnder"/> set to <paramref name="sync"/>, the thread's context
    /// now, and puts <paramref name="outer"/> back afterwards (whatever happens: a stale value would make a later
    /// completion install it). Rare: the thread has a SynchronizationContext (a host's frame loop, a foreign thread
    /// completing a source inline), or this method resumes inline inside code that had one.
    /// </summary>
    [MethodImpl(MethodImplOptions.NoInlining)]
    private void MoveNextNoting(SynchronizationContext? sync, SynchronizationContext? outer)
    {
        ResumeContext.ResumedUnder = sync;
        try
        {
            MoveNextUnder(sync);
        }
        finally
        {
            ResumeContext.ResumedUnder = outer;
        }
    }

    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    private void MoveNextUnder(SynchronizationContext? sync)
    {
        ExecutionContext? context = _context ?? ContextFlow.ForContextFree();
        if (context is null)
        {
            StateMachine.MoveNext();
        }
        else if (ContextFlow.CanRunInline(context))
        {
            // As ExecutionContext.Run would: neither the AsyncLocals nor a SynchronizationContext the method installed
            // before it suspended or returned may stay on the thread that resumed it.
            StateMachine.MoveNext();
            ContextFlow.RestoreDefaultIfChanged();
            ContextFlow.RestoreSynchronizationContext(sync);
        }
        else
        {
            // ExecutionContext.Run restores the thread's context afterwards, so nothing the method sets leaks into the
            // completing thread; when both contexts are the default it only compares two references.
            ContextFlow.Run(context, s_runUnderContext, this);
        }
    }

    internal override void MoveNextOnDefaultContext()
    {
#if NET
        // None on a worker's loop; a frame phase's host may have one (see MoveNext).
        SynchronizationContext? sync = SynchronizationContext.Current;
        SynchronizationContext? outer = ResumeContext.ResumedUnder;
        if (sync != outer)
        {
            MoveNextNoting(sync, outer);
            return;
        }
        ExecutionContext? context = _context;
        if (ContextFlow.RunsAsIsOnDefault(context))
        {
            // The thread is in the default context (the caller's promise), which is what the method captured: no switch,
            // and the caller restores the default if the method changed it.
            StateMachine.MoveNext();
            return;
        }
        ExecutionContext.Run(context, s_runUnderContext, this);
#else
        MoveNext();
#endif
    }

    protected override void ReturnToPool()
    {
        // Clear everything a use left behind: the state machine (its locals and awaiters), the ExecutionContext
        // (AsyncLocal values), and the core's result, exception and continuation.
        StateMachine = default!;
        _context = null;
        _core.ClearForPool();
        TaskTracker.OnReturned(this);
        ObjectPool<StateMachineBox<TStateMachine, TResult>>.Return(this);
    }
}

/// <summary>The machinery the two public builders share.</summary>
internal static class BuilderCore
{
    /// <summary>
    /// <c>MethodImplOptions.AggressiveOptimization</c> by value: netstandard2.1's enum lacks the name, and a runtime
    /// that does not know the flag ignores it.
    /// </summary>
    private const MethodImplOptions AggressiveOptimization = (MethodImplOptions)512;

    public static SpindleBox<TResult> GetBox<TStateMachine, TResult>(ref SpindleBox<TResult>? boxField, ref TStateMachine stateMachine)
        where TStateMachine : IAsyncStateMachine
    {
        SpindleBox<TResult>? box = boxField;
        if (box is not null)
        {
            return box;
        }
        // First real suspension. boxField lives inside stateMachine (the builder is one of its fields), so the box
        // must be stored before the state machine is copied into it: the copy then refers to its own box.
        var created = StateMachineBox<TStateMachine, TResult>.Rent();
        boxField = created;
        created.StateMachine = stateMachine;
        TaskTracker.OnRented(created);
        return created;
    }

    // AggressiveOptimization: this method is compiled optimized from its first call. Unoptimized (Tier-0) code keeps
    // the box in `awaiter is ISpindleAwaiter` and in the cast below, 32 bytes an await, and a loaded machine can hold
    // a busy process at Tier-0 for seconds (call counting waits for a quiet 100 ms), so the zero-allocation await
    // would depend on how fast the JIT's background thread got CPU time.
    [MethodImpl(AggressiveOptimization)]
    public static void AwaitUnsafe<TAwaiter>(ref TAwaiter awaiter, StateMachineBoxBase box)
        where TAwaiter : ICriticalNotifyCompletion
    {
        box.CaptureContext();
        // For value-type awaiters the optimizing JIT resolves this test at compile time and removes the box (the BCL's
        // builders rely on the same pattern).
        if (default(TAwaiter) is not null && awaiter is ISpindleAwaiter)
        {
            ((ISpindleAwaiter)awaiter).OnCompletedForBox(box);
        }
        else
        {
            try
            {
                awaiter.UnsafeOnCompleted(box.MoveNextAction);
            }
            catch (Exception ex) when (!ThrowHelper.IsRefusedRegistration(ex))
            {
                OnForeignRegistrationFailed(ex);
            }
        }
    }

    public static void Await<TAwaiter>(ref TAwaiter awaiter, StateMachineBoxBase box)
        where TAwaiter : INotifyCompletion
    {
        box.CaptureContext();
        try
        {
            awaiter.OnCompleted(box.MoveNextAction);
        }
        catch (Exception ex) when (!ThrowHelper.IsRefusedRegistration(ex))
        {
            OnForeignRegistrationFailed(ex);
        }
    }

    /// <summary>
    /// An awaiter that is not Spindle's threw from OnCompleted. Nobody can tell whether it registered the continuation
    /// first, so the exception must not reach the state machine: its catch would complete the method, and a registered
    /// continuation would then run the finished state machine again (from its first line), or, once the box was back in
    /// its pool, another call's. As the BCL's builders do, the method stays suspended (it resumes if the awaiter calls
    /// back) and the exception goes elsewhere: to <see cref="Spindle.UnobservedException"/>, not to a crashed process.
    /// Spindle's own sources refuse a registration before touching anything (<see cref="ThrowHelper.IsRefusedRegistration"/>),
    /// so their await-once error, reached through a ValueTask, still faults the method.
    /// </summary>
    [MethodImpl(MethodImplOptions.NoInlining)]
    private static void OnForeignRegistrationFailed(Exception exception) => UnobservedExceptions.Report(exception);

    public static void Start<TStateMachine>(ref TStateMachine stateMachine) where TStateMachine : IAsyncStateMachine
    {
        // The BCL's Start runs the synchronous part and then restores the caller's ExecutionContext and
        // SynchronizationContext, so AsyncLocal changes made by the callee do not leak to the caller. It does not
        // allocate: the builder's Task is only created when its Task property is read, which we never do.
        System.Runtime.CompilerServices.AsyncTaskMethodBuilder.Create().Start(ref stateMachine);
    }
}

/// <summary>The thread-static behind async methods' completions (a class of its own: no other static to initialise).</summary>
internal static class ResumeContext
{
    /// <summary>
    /// The SynchronizationContext the thread had when the async method whose code it is running now resumed (each box's
    /// MoveNext sets it when it differs, and puts the outer value back, so nested inline resumptions keep it right). The
    /// method's completion puts it back before it runs the awaiting code inline (<c>SpindleBox.SetResult</c>), so that
    /// code never finds a context the method installed and left behind. A thread-static rather than a field, which would
    /// add 8 bytes to every pending async method's box (104 to 112; measured): the common case (no context, before and
    /// after) costs a read of it and of the thread's context per resumption and per completion, and no write. In a class
    /// of its own: kept in <c>ContextFlow</c>, whose other statics have initialisers, the same reads cost about 8 ns more
    /// per pending await (alternated runs of a promise awaited and set, 2026-11-28).
    /// </summary>
    [ThreadStatic]
    internal static SynchronizationContext? ResumedUnder;
}

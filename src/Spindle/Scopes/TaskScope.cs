using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Runtime.ExceptionServices;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib;

/// <summary>
/// Structured concurrency: children started with <see cref="Run(Func{CancellationToken, SpindleTask})"/> finish before the
/// scope does. The first failure cancels the siblings (through <see cref="Token"/>); disposing the scope early cancels
/// what is left and waits for it. This is what seed 000's <c>AttachedToParent</c> reached for.
/// </summary>
/// <remarks>
/// <para>Use it with <c>await using</c>: <c>await using var scope = new TaskScope(token); scope.Run(ChildA); scope.Run(ChildB);
/// await scope.WaitAsync();</c>. If the block is left without <see cref="WaitAsync"/> (an exception, an early return), disposal
/// cancels the children still running and waits for them: no child outlives its scope.</para>
/// <para><b>Failures.</b> Every child failure is kept. <see cref="WaitAsync"/> and <see cref="DisposeAsync"/> rethrow
/// them: the exception itself when there is one, an <see cref="AggregateException"/> of all of them when there are several
/// (a BCL child that faulted with several exceptions, as a <c>Task.WhenAll</c> does, gives each of them).</para>
/// <para><b>Cancellation is not failure.</b> An <see cref="OperationCanceledException"/> that a child ends with while the
/// scope's token is cancelled (whichever token it carries) is not a failure: after a sibling failed, after early disposal,
/// or after the token given at creation was cancelled. When that outer token was cancelled before the last child finished
/// and no child failed, <see cref="WaitAsync"/> completes as canceled, with an <see cref="OperationCanceledException"/>
/// carrying the outer token, as <c>Parallel.ForEachAsync</c> and Kotlin's <c>coroutineScope</c> report their
/// cancellation: the code after it never takes a cancelled scope's work for done (disposal does not throw it). An
/// <see cref="OperationCanceledException"/> that a child ends with while the scope's token is not cancelled (its own
/// timeout, another token) is a failure, and cancels the siblings, as any other exception does (as in Go's errgroup).
/// A child started while the scope's token is cancelled is still called, with that token. Give children the token the
/// scope passes them: a child that answers a token further out (the one an outer scope was made with, when this scope
/// was made with that scope's <see cref="Token"/>) may end before the cancellation has reached this scope, since a token
/// runs its callbacks newest first, and its <see cref="OperationCanceledException"/> then counts as a failure.</para>
/// <para><b>Nesting.</b> Pass a scope's <see cref="Token"/> to a child scope: cancelling the outer scope cancels the inner
/// one, and the inner scope's failures, rethrown by its WaitAsync inside a child, fail that child of the outer scope.</para>
/// <para>Thread-safety: <see cref="Run(Func{CancellationToken, SpindleTask})"/> may be called from any thread, including
/// from inside children. The scope stays open to new children until it has finished: after <see cref="WaitAsync"/>, a child
/// still running (or any thread, while one runs) may start more, and the scope waits for them too (a crawler's children
/// start the next pages' children), as a Trio nursery or Kotlin's <c>coroutineScope</c> does. Once every child has finished
/// after WaitAsync, or once disposal has begun, Run throws. A child must not await its own
/// scope's <see cref="WaitAsync"/> or <see cref="DisposeAsync"/>: they wait for every child, itself included, so they
/// would never complete.</para>
/// </remarks>
[DebuggerDisplay("{DebuggerDisplay,nq}")]
public sealed class TaskScope : IAsyncDisposable
{
    private static readonly Action<object?> s_childDone = static o => ((ChildObserver)o!).Done();

#if DEBUG
    /// <summary>
    /// Tests only (a Debug build): runs just before a child's observer drops one of its two holds (the registration's or
    /// the continuation's), standing in for a preemption there, so that a test can line the two drops up.
    /// </summary>
    internal static Action? TestHookBeforeObserverRelease;
#endif

    private readonly CancellationTokenSource _cts;
    private readonly CancellationToken _token; // kept: CancellationTokenSource.Token throws once the source is disposed
    private readonly CancellationToken _outer; // the token given at creation
    // _outer's state when the running count last came down to zero (or, if no child ever ran, when the scope completed):
    // true once the scope has completed means it was cancelled from outside before its work was done.
    private bool? _outerCanceledWhenIdle;
    private readonly ScopeOutcome _outcome;        // all children done, with the failures (for WaitAsync); also the scope's lock
    private Promise? _completion;                    // the same moment, for a first disposal that has to wait for it (made then, under the lock)
    // The failures kept, each in a holder whose finalizer reports it if it is never delivered: a scope dropped without
    // WaitAsync or disposal (leads49, docs/decisions.md section 46) reports them as a job graph's unobserved failure is.
    private List<ExceptionHolder>? _errors;
    private int _running;
    private bool _closed;
    private int _disposed;
    private bool _scopeDone;                         // every child has finished (CompleteScope ran)
    private TaskCompletionSource<bool>? _laterDisposals;   // what a DisposeAsync after the first waits on, if children still run
    private bool _failuresDelivered;

    /// <summary>Creates a scope whose children are also cancelled when <paramref name="cancellationToken"/> is.</summary>
    public TaskScope(CancellationToken cancellationToken = default)
    {
        _outer = cancellationToken;
        _cts = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
        _token = _cts.Token;
        _outcome = new ScopeOutcome(this);
    }

    /// <summary>Cancelled when a child fails, when the scope is disposed early, or when the token given at creation is.</summary>
    public CancellationToken Token => _token;

    /// <summary>The number of children still running.</summary>
    public int RunningChildren => Volatile.Read(ref _running);

    /// <summary>What a debugger shows: the children running, whether the scope's token is cancelled, the faults so far.</summary>
    private string DebuggerDisplay
        => $"RunningChildren = {RunningChildren}, Canceled = {_token.IsCancellationRequested}, Faults = {Volatile.Read(ref _errors)?.Count ?? 0}";

    /// <summary>Starts a child. It runs synchronously until its first await, like any async method called directly.</summary>
    /// <exception cref="ArgumentNullException"><paramref name="child"/> is null.</exception>
    /// <exception cref="InvalidOperationException">The scope has finished (every child had finished after <see cref="WaitAsync"/>), or is being disposed.</exception>
    public void Run(Func<CancellationToken, SpindleTask> child)
    {
        if (child is null)
        {
            ThrowHelper.ThrowArgumentNull(nameof(child));
        }
        Run(s_runWithoutState, child);
    }

    private static readonly Func<Func<CancellationToken, SpindleTask>, CancellationToken, SpindleTask> s_runWithoutState = static (child, token) => child(token);

    /// <summary>
    /// Starts a child given <paramref name="state"/>, as <see cref="Run(Func{CancellationToken, SpindleTask})"/>: a
    /// static lambda given its state (a session, a connection) allocates no closure, where a lambda that captures it
    /// allocates one per child. The state is passed as it is, not boxed or stored.
    /// </summary>
    /// <param name="child">The child, given <paramref name="state"/> and the scope's <see cref="Token"/>.</param>
    /// <param name="state">What the child is given.</param>
    /// <exception cref="ArgumentNullException"><paramref name="child"/> is null.</exception>
    /// <exception cref="InvalidOperationException">The scope has finished (every child had finished after <see cref="WaitAsync"/>), or is being disposed.</exception>
    public void Run<TState>(Func<TState, CancellationToken, SpindleTask> child, TState state)
    {
        if (child is null)
        {
            ThrowHelper.ThrowArgumentNull(nameof(child));
        }
        Enter();
        SpindleTask task;
        try
        {
            task = child(state, Token);
        }
        catch (Exception ex)
        {
            ChildFinished(ExceptionDispatchInfo.Capture(ex));
            return;
        }
        ObserveChild(task);
    }

    /// <summary>
    /// Starts a child that returns a BCL <see cref="Task"/>. (A separate name: an <c>async</c> lambda would otherwise fit both
    /// overloads, and C# could not choose.)
    /// </summary>
    /// <exception cref="ArgumentNullException"><paramref name="child"/> is null.</exception>
    /// <exception cref="InvalidOperationException">The scope has finished (every child had finished after <see cref="WaitAsync"/>), or is being disposed.</exception>
    public void RunTask(Func<CancellationToken, Task> child)
    {
        if (child is null)
        {
            ThrowHelper.ThrowArgumentNull(nameof(child));
        }
        Enter();
        Task task;
        try
        {
            task = child(Token) ?? throw new InvalidOperationException("A TaskScope child returned null instead of a task. Return a task from every child (Task.CompletedTask when it has nothing to wait for).");
        }
        catch (Exception ex)
        {
            ChildFinished(ExceptionDispatchInfo.Capture(ex));
            return;
        }
        task.ConfigureAwait(false).GetAwaiter().UnsafeOnCompleted(() => TaskChildFinished(task));
    }

    /// <summary>
    /// Waits for every child, including those that children still running start meanwhile; once the last has finished,
    /// the scope takes no more. Rethrows the children's failures (see the remarks); once
    /// an awaiter has seen them, disposal does not rethrow them again. One awaiter at a time; after it completes, the
    /// result can be read again. A combinator that stops waiting for it before the scope finishes (a WhenAny it lost,
    /// <c>WithTimeout</c>, <c>WithCancellation</c>, a WhenAll ended by its timeout or token) lets go of its await, as
    /// <c>Task.WhenAny</c> removes its continuations: a later WaitAsync can be awaited (a shutdown that waits a grace
    /// period, then for the rest) and has the failures, which that combinator does not report.
    /// </summary>
    public SpindleTask WaitAsync()
    {
        Close();
        return new SpindleTask(_outcome, 0);
    }

    /// <summary>
    /// Cancels the children still running (if any), waits for every child, and rethrows their failures, unless an awaited
    /// <see cref="WaitAsync"/> already rethrew them (or a read of it that nobody awaits, a <c>Forget()</c> or a WhenAny
    /// that it lost after the scope had finished, already reported them to <see cref="Spindle.UnobservedException"/>; one
    /// that it lost while the scope ran let go of it and reports nothing); failures it rethrows are not reported there
    /// as well. A second call (an <c>await using</c> around an explicit disposal, or
    /// disposal from two places) also waits for every child, and rethrows nothing: the first call has the failures.
    /// </summary>
    public async ValueTask DisposeAsync()
    {
        if (Interlocked.Exchange(ref _disposed, 1) != 0)
        {
            // Disposal already started: wait, as it does, for every child (its failures are the first call's to rethrow).
            Task? pending;
            lock (_outcome)
            {
                pending = _scopeDone ? null : (_laterDisposals ??= new TaskCompletionSource<bool>(TaskCreationOptions.RunContinuationsAsynchronously)).Task;
            }
            if (pending is not null)
            {
                await pending.ConfigureAwait(false);
            }
            return;
        }
        bool finished;
        Promise? completion;
        lock (_outcome)
        {
            finished = _closed && _running == 0;
            // Made only when this call has to wait: a scope whose children had all finished (after an awaited WaitAsync,
            // the usual `await using`) never allocates it. CompleteScope reads it under this lock after setting
            // _scopeDone, so either it is seen done here, or the promise made here is completed there.
            completion = _scopeDone ? null : (_completion = new Promise());
        }
        if (!finished)
        {
            Close();
            CancelChildren();
        }
        if (completion is not null)
        {
            await completion.Task;
        }
        _cts.Dispose();
        bool delivered;
        lock (_outcome)
        {
            delivered = _failuresDelivered;
        }
        if (!delivered)
        {
            // Disposal delivers the failures: a later read of the wait that nobody awaits (a WhenAny that it lost, a
            // Forget) must not report them to UnobservedException as well. A read that came first set delivered: it had
            // them, and disposal does not rethrow them.
            _outcome.TakeFaultReport();
            ThrowFailures();
        }
    }

    /// <summary>
    /// Cancels the scope's token. A callback that a child registered on it may throw: that is not a child failure, and it
    /// must not stop disposal from waiting for the children, so it is reported, never swallowed.
    /// </summary>
    private void CancelChildren()
    {
        try
        {
            _cts.Cancel();
        }
        catch (ObjectDisposedException)
        {
            // The scope was already disposed; nothing is left to cancel.
        }
        catch (AggregateException ex)
        {
            UnobservedExceptions.Report(ex);
        }
    }

    /// <summary>
    /// Rethrows the children's failures (once delivered, disposal does not rethrow them). With none, and
    /// <paramref name="canceled"/> (WaitAsync's read), a scope that the token given at creation cancelled throws an
    /// <see cref="OperationCanceledException"/> carrying that token.
    /// </summary>
    [StackTraceHidden]
    private void ThrowFailures(bool canceled = false)
    {
        List<ExceptionHolder>? errors;
        bool canceledFromOutside;
        lock (_outcome)
        {
            errors = _errors;
            canceledFromOutside = _outerCanceledWhenIdle == true;
            _failuresDelivered = true;
        }
        for (int i = 0; errors is not null && i < errors.Count; i++)
        {
            errors[i].MarkObserved(); // delivered: to this reader, or reported by a Forget() or a WhenAny's loser that read it
        }
        if (errors is null)
        {
            if (canceled && canceledFromOutside)
            {
                throw new OperationCanceledException("The token the TaskScope was created with was cancelled before its children had all finished.", _outer);
            }
            return;
        }
        if (errors.Count == 1)
        {
            errors[0].Info.Throw();
        }
        var all = new Exception[errors.Count];
        for (int i = 0; i < all.Length; i++)
        {
            all[i] = errors[i].Info.SourceException;
        }
        throw new AggregateException(all);
    }

    /// <summary>Completes both waits: disposal's, and WaitAsync's.</summary>
    private void CompleteScope()
    {
        TaskCompletionSource<bool>? later;
        Promise? completion;
        lock (_outcome)
        {
            _scopeDone = true;
            _outerCanceledWhenIdle ??= _outer.IsCancellationRequested; // no child ever ran: now
            later = _laterDisposals;
            completion = _completion;
        }
        later?.TrySetResult(true);
        completion?.TrySetResult();
        _outcome.Complete();
    }

    /// <summary>
    /// Counts a new child in. Open until the scope has finished: before <see cref="WaitAsync"/>, and after it while a
    /// child still runs (a child may start more, as in a Trio nursery or Kotlin's <c>coroutineScope</c>, and the scope
    /// waits for them too). Under the lock, the count that reached zero after the close is the scope's end: no child
    /// enters after it, so <see cref="CompleteScope"/> runs once, and nothing enters once disposal has begun.
    /// </summary>
    private void Enter()
    {
        lock (_outcome)
        {
            if (_closed && (_running == 0 || Volatile.Read(ref _disposed) != 0))
            {
                ThrowHelper.ThrowInvalidOperation(
                    "The scope no longer accepts children: every child had finished after WaitAsync(), or the scope is being disposed. " +
                    "Start children before the last one finishes (from a running child, for instance), or create a new scope.");
            }
            _running++;
        }
    }

    private void Close()
    {
        bool complete;
        lock (_outcome)
        {
            if (_closed)
            {
                return;
            }
            _closed = true;
            complete = _running == 0;
        }
        if (complete)
        {
            CompleteScope();
        }
    }

    private void ObserveChild(SpindleTask task)
    {
        if (task._source is not { } source)
        {
            ChildFinished(null);
            return;
        }
        var observer = ChildObserver.Rent(this, source, task._token);
        try
        {
            source.OnCompleted(s_childDone, observer, task._token);
        }
        catch (Exception ex) when (!observer.HasRun)
        {
            // The child returned a task that cannot be awaited here (already awaited, or stale): it counts as a child
            // that failed with that error, or the count it was entered with would never come down. Only then: once the
            // observer has run (the child had finished, so it ran inline), the child is counted out, and an exception is
            // a continuation's that the scope's completion ran inline (a raw awaiter callback of WaitAsync that throws):
            // it goes to this caller, as from any completer, and the child is not counted out twice. (The filter reads
            // the observer while this call still holds it, so it is not yet back in its pool.)
            observer.Release(); // Done never runs: its hold is dropped here
            ChildFinished(ExceptionDispatchInfo.Capture(ex));
        }
        finally
        {
            observer.Release();
        }
    }

    private void ChildFinished(ExceptionDispatchInfo? error) => ChildFinished(error, null);

    /// <summary>
    /// A child has finished, with <paramref name="error"/> (null: it succeeded), or, for a faulted BCL task,
    /// <paramref name="more"/>: every exception it holds (a Task.WhenAll's may hold several), each a failure of its own,
    /// in its order, as Task.WhenAll keeps them. Each is judged alone: an <see cref="OperationCanceledException"/> while
    /// the scope is cancelled is not a failure.
    /// </summary>
    /// <remarks>
    /// Invariant: a failure cancels <see cref="Token"/> before this child stops counting as running, so before the scope
    /// can complete (and disposal dispose the token's source). The failure is kept under the lock, the token cancelled
    /// outside it (cancellation runs callbacks), and only then is the child counted out. Counted out first, a
    /// <see cref="WaitAsync"/> on another thread could close and complete the scope in between, and its disposal dispose
    /// the source, so that the cancel found it disposed and the token was never cancelled though a child had failed
    /// (<c>CancellationModelTests</c>, once in a fresh-clone CI run; docs/decisions.md section 55).
    /// </remarks>
    private void ChildFinished(ExceptionDispatchInfo? error, IReadOnlyList<Exception>? more)
    {
        if (error is not null || more is not null)
        {
            bool cancel = false;
            lock (_outcome)
            {
                if (error is not null)
                {
                    cancel = Keep(error);
                }
                for (int i = 0; more is not null && i < more.Count; i++)
                {
                    cancel |= Keep(ExceptionDispatchInfo.Capture(more[i]));
                }
            }
            if (cancel)
            {
                CancelChildren(); // the first failure cancels the siblings; outside the lock, as cancellation runs callbacks
            }
#if DEBUG
            TestHookFailureCancelled?.Invoke(this);
#endif
        }
        bool complete;
        lock (_outcome)
        {
            if (--_running == 0)
            {
                // Sampled here, not when the scope completes: children that had all finished before the outer token was
                // cancelled did their work, even if WaitAsync is called after the cancellation.
                _outerCanceledWhenIdle = _outer.IsCancellationRequested;
            }
            complete = _closed && _running == 0;
        }
        if (complete)
        {
            CompleteScope();
        }
    }

#if DEBUG
    /// <summary>
    /// Tests only: runs on a failing child's thread once its failure is kept and the token cancelled, before the child is
    /// counted out (<c>TaskScopeFailureCancelRaceTests</c>).
    /// </summary>
    internal static Action<TaskScope>? TestHookFailureCancelled;
#endif

    /// <summary>
    /// The source behind <see cref="WaitAsync"/>: completes when every child has, and throws the children's failures when
    /// its result is read, which is when they count as delivered. Not pooled (one per scope), never reset. A combinator
    /// that no longer waits for it (a WhenAny it lost, a WhenAll's timeout, WithTimeout, WithCancellation) takes its
    /// waiter back and leaves the wait as if never awaited, so the next <see cref="WaitAsync"/> can be awaited (one awaiter
    /// at a time) and gets the failures; nothing is reported for the waiter that left.
    /// </summary>
    [StackTraceHidden]
    private sealed class ScopeOutcome : ISpindleSource, IRereadableSource, IDetachableSource, IStatusShownWithoutLock
    {
        private readonly TaskScope _scope;
        private SourceCore<VoidResult> _core;
        private ReportOnce _faultReport; // taken once a Forget() or a WhenAny's loser reported the failures, or disposal rethrew them (IRereadableSource: read again, never consumed)

        public ScopeOutcome(TaskScope scope) => _scope = scope;

        public void Complete() => _core.TrySetResult(default);

        public SpindleTaskStatus GetStatus(short token)
        {
            SpindleTaskStatus status = _core.GetStatus(token);
            if (status == SpindleTaskStatus.Succeeded && _scope.HasFailures)
            {
                return SpindleTaskStatus.Faulted;
            }
            if (status == SpindleTaskStatus.Succeeded && _scope.CanceledFromOutside)
            {
                return SpindleTaskStatus.Canceled;
            }
            return status;
        }

        /// <summary>
        /// <see cref="GetStatus"/> without the scope's lock, for a debugger's display (<see cref="DebuggerText"/>): at worst
        /// stale, as a debugger reads it with every other thread frozen.
        /// </summary>
        SpindleTaskStatus? IStatusShownWithoutLock.StatusWithoutLock(short token)
        {
            if (!_core.TryGetStatusRacy(token, out SpindleTaskStatus status))
            {
                return null;
            }
            return status != SpindleTaskStatus.Succeeded ? status
                : Volatile.Read(ref _scope._errors) is not null ? SpindleTaskStatus.Faulted
                : _scope._outerCanceledWhenIdle == true ? SpindleTaskStatus.Canceled
                : SpindleTaskStatus.Succeeded;
        }

        System.Threading.Tasks.Sources.ValueTaskSourceStatus System.Threading.Tasks.Sources.IValueTaskSource.GetStatus(short token)
            => (System.Threading.Tasks.Sources.ValueTaskSourceStatus)GetStatus(token);

        public void GetResult(short token)
        {
            _core.GetResult(token, this);
            _scope.ThrowFailures(canceled: true);
        }

        public void OnCompleted(Action<object?> continuation, object? state, short token) => _core.OnCompleted(continuation, state, token);

        public void OnCompleted(Action<object?> continuation, object? state, short token, System.Threading.Tasks.Sources.ValueTaskSourceOnCompletedFlags flags)
            => _core.OnCompleted(continuation, state, token, flags);

        bool IRereadableSource.TryClaimFaultReport(short token) => _faultReport.TryTake();

        DetachOutcome IDetachableSource.TryDetach(DirectWaiter waiter) => _core.TryWithdrawWaiter(waiter);

        /// <summary>A combinator settled at the call never registered here: nothing to take back while the wait is pending.</summary>
        bool IDetachableSource.TryAbandon(short token) => _core.IsPendingWithoutWaiter(token);

        /// <summary>Disposal rethrows the failures: no report of this completion may follow (see <see cref="DisposeAsync"/>).</summary>
        public void TakeFaultReport() => _faultReport.TryTake();
    }

    private bool CanceledFromOutside
    {
        get
        {
            lock (_outcome)
            {
                return _outerCanceledWhenIdle == true;
            }
        }
    }

    private bool HasFailures
    {
        get
        {
            lock (_outcome)
            {
                return _errors is not null;
            }
        }
    }

    /// <summary>
    /// Called under the lock: keeps <paramref name="error"/> if it is a child failure (not the answer to the scope's
    /// cancellation), and returns whether it was. The token given at creation counts on its own: it cancels the scope's
    /// through a callback registered when the scope was created, and a token runs its callbacks last registered, first
    /// run, so a child that answers that token itself (a <c>Task.Delay(..., ct)</c> registered later) may end, inline,
    /// before the scope's token reads as cancelled.
    /// </summary>
    private bool Keep(ExceptionDispatchInfo error)
    {
        if (error.SourceException is OperationCanceledException && (_cts.IsCancellationRequested || _outer.IsCancellationRequested))
        {
            return false;
        }
        (_errors ??= new List<ExceptionHolder>()).Add(new ExceptionHolder(error));
        return true;
    }

    /// <summary>
    /// A BCL child has finished: a canceled task fails with a <see cref="TaskCanceledException"/> (as its await would
    /// throw), a faulted one with every exception it holds, not only the first that its await would throw.
    /// </summary>
    private void TaskChildFinished(Task task)
    {
        if (task.IsFaulted)
        {
            ChildFinished(null, task.Exception!.InnerExceptions);
        }
        else
        {
            ChildFinished(task.IsCanceled ? ExceptionDispatchInfo.Capture(new TaskCanceledException(task)) : null);
        }
    }

    /// <summary>Reads a finished child exactly once and reports its outcome to the scope.</summary>
    /// <remarks>
    /// Pooled (one per running child, so a server starting many scopes reuses them). Two holds, as
    /// <see cref="SignalTimeout"/> keeps: <see cref="ObserveChild"/>'s, until it has registered the observer (and, if the
    /// registration threw, read <see cref="HasRun"/>), and the continuation's, until <see cref="Done"/> has run (dropped
    /// by <see cref="ObserveChild"/> instead when the registration failed, since it will never run). Invariant: each
    /// holder drops its hold exactly once, and only the last drop touches the object afterwards: it clears every field
    /// and returns it to its pool, unless the child's source is a user's (<see cref="DirectWaiter.IsUsersSource"/>), which
    /// may run the continuation again later: that observer is left to the GC, so the late run meets it and is refused.
    /// </remarks>
    [StackTraceHidden]
    private sealed class ChildObserver : IPoolNode<ChildObserver>
    {
        private TaskScope? _scope;
        private ISpindleSource? _source;
        private short _token;
        private int _holds;
        private int _ran; // 1 once Done has claimed the one run (see HasRun)
        private bool _onUsersSource; // registered on a user's source: never pooled (see Release)
        private ChildObserver? _poolNext;

        ref ChildObserver? IPoolNode<ChildObserver>.Next => ref _poolNext;

        public static ChildObserver Rent(TaskScope scope, ISpindleSource source, short token)
        {
            bool onUsersSource = DirectWaiter.IsUsersSource(source);
            ChildObserver observer = (onUsersSource ? null : ObjectPool<ChildObserver>.TryRent()) ?? new ChildObserver();
            observer._scope = scope;
            observer._source = source;
            observer._token = token;
            observer._ran = 0;
            observer._onUsersSource = onUsersSource;
            observer._holds = 2;
            return observer;
        }

        /// <summary>True once <see cref="Done"/> has started: the child is counted out (see <see cref="ObserveChild"/>).</summary>
        public bool HasRun => Volatile.Read(ref _ran) != 0;

        public void Done()
        {
            // A user's source that ran this continuation again (misuse its OnCompleted contract forbids) is refused instead
            // of counting the child out twice. The exchange is the claim, so two runs racing are caught as two in turn are
            // (a plain flag let both through: review49). An observer registered on a user's source never goes back to its
            // pool (Release), so a late run meets this observer, not another child's that rented it from the pool: that
            // run counted the other child out while it still ran, and the other child's own completion was then refused
            // (review49, ContinuationRunTwiceTests.ASecondRun_OfAScopesChild_AfterItsObserverWasRentedForTheNextChild_...).
            if (Interlocked.Exchange(ref _ran, 1) != 0 || _scope is not { } scope)
            {
                ThrowHelper.ThrowContinuationRunTwice();
                return;
            }
            ExceptionDispatchInfo? error = QuietRead.Read(_source!, _token); // the child's own failure, with the trace it saved
            try
            {
                scope.ChildFinished(error);
            }
            finally
            {
                Release();
            }
        }

        public void Release()
        {
#if DEBUG
            TestHookBeforeObserverRelease?.Invoke();
#endif
            if (Interlocked.Decrement(ref _holds) == 0)
            {
                _scope = null;
                _source = null;
                _token = 0;
                if (!_onUsersSource)
                {
                    _ran = 0; // only a user's source runs a continuation late, and its observer is never pooled
                    ObjectPool<ChildObserver>.Return(this);
                }
                // Else left to the GC, claimed or with no scope: a user's source may still run the continuation it was
                // handed (again, or after its OnCompleted threw), and Done refuses that run here.
            }
        }
    }
}

using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Runtime.ExceptionServices;
using System.Threading;
using System.Threading.Tasks;
using System.Threading.Tasks.Sources;

namespace SpindleLib;

/// <summary>
/// A source that completed with an exception when it was made (FromException), or as canceled (FromCanceled). Not pooled;
/// awaitable any number of times.
/// </summary>
/// <remarks>
/// A cancellation is kept as its token, and its exception built by the first reader that throws it
/// (<see cref="LazyCancellation"/>), then kept, so every later reader gets that one object: a suppressed await
/// (<c>SuppressCancellationThrow()</c>) builds none. Before, <c>FromCanceled</c> built a
/// <see cref="TaskCanceledException"/> and its dispatch info at once, 224 bytes with the source, against the source alone.
/// </remarks>
[StackTraceHidden]
internal sealed class CompletedSource<T> : ISpindleSource<T>, IQuietSource<T>, IRereadableSource, ILazyCanceledSource
{
    // Null only for a cancellation not yet built (then _canceledBy is its token); written once, with a CAS, after.
    private ExceptionDispatchInfo? _error;
    private readonly CancellationToken _canceledBy;
    private ReportOnce _faultReport; // a Forget() reported the fault (IRereadableSource)

    /// <summary>A source failed with <paramref name="error"/>, rethrown with the trace it saved.</summary>
    public CompletedSource(ExceptionDispatchInfo error) => _error = error;

    /// <summary>A source canceled by <paramref name="cancellationToken"/>, whose exception is built when first thrown.</summary>
    public CompletedSource(CancellationToken cancellationToken) => _canceledBy = cancellationToken;

    CancellationToken ILazyCanceledSource.CanceledBy => _canceledBy;

    /// <summary>The failure; a cancellation's is built by the first reader that needs it and kept (the shared value for a reader that asked for none).</summary>
    private ExceptionDispatchInfo Error
    {
        get
        {
            if (Volatile.Read(ref _error) is { } error)
            {
                return error;
            }
            ExceptionDispatchInfo built = LazyCancellation.Build(this);
            return built == LazyCancellation.CanceledValue ? built : Interlocked.CompareExchange(ref _error, built, null) ?? built;
        }
    }

    public SpindleTaskStatus GetStatus(short token)
        => Volatile.Read(ref _error) is { } error ? SourceCore<VoidResult>.StatusOf(error) : SpindleTaskStatus.Canceled;

    ValueTaskSourceStatus IValueTaskSource.GetStatus(short token) => (ValueTaskSourceStatus)GetStatus(token);

    ValueTaskSourceStatus IValueTaskSource<T>.GetStatus(short token) => (ValueTaskSourceStatus)GetStatus(token);

    public T GetResult(short token)
    {
        ThrowFailure(token);
        return default!;
    }

    void IValueTaskSource.GetResult(short token) => ThrowFailure(token);

    /// <summary>Names this source for a combinator reading it through a ValueTask (<see cref="ValueTaskOrigin"/>), then throws.</summary>
    private void ThrowFailure(short token)
    {
        ValueTaskOrigin.Note(this, token);
        throw LazyCancellation.ToThrow(Error);
    }

    public T ReadQuietly(short token, out ExceptionDispatchInfo? error)
    {
        error = Error;
        return default!;
    }

    ExceptionDispatchInfo? IQuietSource.ReadQuietly(short token) => Error;

    bool IRereadableSource.TryClaimFaultReport(short token) => _faultReport.TryTake();

    // ContextContinuation.Apply refuses a null continuation (and, with no flags, wraps nothing).
    public void OnCompleted(Action<object?> continuation, object? state, short token)
        => OnCompleted(continuation, state, token, ValueTaskSourceOnCompletedFlags.None);

    public void OnCompleted(Action<object?> continuation, object? state, short token, ValueTaskSourceOnCompletedFlags flags)
    {
        ContextContinuation.Apply(ref continuation, ref state, flags);
        Continuations.Invoke(continuation, state);
    }
}

/// <summary>
/// The source behind <c>Preserve()</c>: it awaits the original task once, keeps the outcome, and lets any number of
/// awaiters read it. Continuations registered before completion are kept under a lock (this is not a hot path): the first
/// in two fields of its own, any more in a list, so that a preserved task awaited by one waiter at a time (an async lazy
/// value, a task raced turn after turn) is the one object <c>Preserve()</c> documents. It used to be four (the source, its
/// lock object, a list and the list's array: 175 B for a pending task awaited once, measured by a library author's
/// review, docs/decisions.md section 44).
/// A combinator that lost a race takes its waiter back out of the list (<see cref="IDetachableSource"/>), so a preserved
/// task raced in every turn of a loop holds nothing per turn; a fault that completes it with nobody waiting, after a
/// combinator let go of it, is reported once (as a promise's abandoned use's is), since that combinator's caller will not
/// read it.
/// </summary>
[StackTraceHidden]
internal sealed class PreservedSource<T> : ISpindleSource<T>, IQuietSource<T>, IRereadableSource, IDetachableSource, IStatusShownWithoutLock
{
    private static readonly Action<object?> s_onSourceCompleted = static o => ((PreservedSource<T>)o!).OnSourceCompleted();

    private ISpindleSource? _source;
    private readonly short _token;
    private bool _completed;
    private T _result = default!;
    private ExceptionDispatchInfo? _error;
    // The waiters registered before completion, in order: the first (oldest) here, the rest in _more. Under the lock,
    // which is this object itself, since a lock object of its own was a second allocation per Preserve(). A task and a
    // ValueTask made from it keep it out of reach, but it is the state of its registration on the task it preserves, so a
    // user's own ISpindleSource is handed it (as an opaque state to pass back). The lock is held only for a few field
    // stores, never while a continuation or any other code runs, so such code that locked on it could delay this source's
    // registrations and completion, never make them wait on each other; it could deadlock only by blocking, while it
    // holds that lock, on something that waits for this source (as locking on any object it was not given to lock would).
    private Action<object?>? _firstContinuation;
    private object? _firstState;
    private List<(Action<object?> Continuation, object? State)>? _more;
    private ReportOnce _faultReport; // a Forget() reported the fault (IRereadableSource)
    private bool _letGo; // a combinator let go of this task before it completed (under the lock)

    public PreservedSource(ISpindleSource source, short token)
    {
        _source = source;
        _token = token;
        source.OnCompleted(s_onSourceCompleted, this, token);
    }

    private void OnSourceCompleted()
    {
        // The claim of the one run: a user's source that ran this continuation again (misuse its OnCompleted contract
        // forbids) finds the source taken and is refused, instead of reading the use twice and running the waiters
        // again (it met a null source and threw NullReferenceException before).
        ISpindleSource? source = Interlocked.Exchange(ref _source, null);
        if (source is null)
        {
            ThrowHelper.ThrowContinuationRunTwice();
        }
        ExceptionDispatchInfo? error;
        T result = default!;
        if (source is ISpindleSource<T> typed)
        {
            result = QuietRead.Read(typed, _token, out error);
        }
        else
        {
            error = QuietRead.Read(source, _token);
        }
        Action<object?>? first;
        object? firstState;
        List<(Action<object?>, object?)>? more;
        bool unread;
        lock (this)
        {
            _result = result;
            _error = error;
            _completed = true;
            first = _firstContinuation;
            firstState = _firstState;
            more = _more;
            _firstContinuation = null;
            _firstState = null;
            _more = null;
            unread = _letGo && first is null; // the first slot is refilled from the list whenever it empties
        }
        if (unread && FaultReport.IsFault(error) && _faultReport.TryTake())
        {
            UnobservedExceptions.Report(error.SourceException);
        }
        if (first is not null)
        {
            RunAll(first, firstState, more);
        }
    }

    DetachOutcome IDetachableSource.TryDetach(DirectWaiter waiter)
    {
        lock (this)
        {
            if (_completed)
            {
                return DetachOutcome.Completed; // taken with the waiters by the completion: it runs, or ran
            }
            List<(Action<object?> Continuation, object? State)>? more = _more;
            if (more is not null)
            {
                // From the end: in a loop, the waiter leaving is usually the latest one. A linear search, as Task's removal
                // of a continuation is.
                for (int i = more.Count - 1; i >= 0; i--)
                {
                    if (more[i].State == waiter && (object)more[i].Continuation == DirectWaiter.s_moveNext)
                    {
                        more.RemoveAt(i);
                        _letGo = true;
                        return DetachOutcome.Detached;
                    }
                }
            }
            if (_firstState == waiter && (object?)_firstContinuation == DirectWaiter.s_moveNext)
            {
                // The oldest waiter leaves: the next oldest takes its slot, so the first slot is empty only when no
                // waiter is left, and the waiters still run in the order they came.
                if (more is { Count: > 0 })
                {
                    (_firstContinuation, _firstState) = more[0];
                    more.RemoveAt(0);
                }
                else
                {
                    _firstContinuation = null;
                    _firstState = null;
                }
                _letGo = true;
                return DetachOutcome.Detached;
            }
            return DetachOutcome.NotWaiting;
        }
    }

    bool IDetachableSource.TryAbandon(short token)
    {
        lock (this)
        {
            if (_completed)
            {
                return false; // the caller reads it, as any finished loser
            }
            _letGo = true; // nothing of the caller's is registered: letting go is remembering that a race dropped it
            return true;
        }
    }

    /// <summary>
    /// Runs every waiter, each exactly once: a waiter that throws (a continuation may) must not keep the ones after it
    /// from running (a thread blocked in GetResult among them would never wake). The first exception is rethrown to the
    /// completer once the rest have run, as a single waiter's would be.
    /// </summary>
    private static void RunAll(Action<object?> first, object? firstState, List<(Action<object?> Continuation, object? State)>? more)
    {
        if (more is null)
        {
            Continuations.Invoke(first, firstState); // one waiter: its exception goes to the completer as it is
            return;
        }
        ExceptionDispatchInfo? thrown = null;
        for (int i = -1; i < more.Count; i++) // -1: the first waiter, then the list's
        {
            (Action<object?> continuation, object? state) = i < 0 ? (first, firstState) : more[i];
            try
            {
                Continuations.Invoke(continuation, state);
            }
            catch (Exception ex)
            {
                thrown ??= ExceptionDispatchInfo.Capture(ex);
            }
        }
        thrown?.Throw();
    }

    public SpindleTaskStatus GetStatus(short token)
    {
        lock (this)
        {
            if (!_completed)
            {
                return SpindleTaskStatus.Pending;
            }
        }
        return SourceCore<VoidResult>.StatusOf(_error);
    }

    /// <summary>
    /// <see cref="GetStatus"/> without the lock, for a debugger's display (<see cref="DebuggerText"/>). A read racing the
    /// completion may see it completed before its failure; a debugger reads it with the completing thread frozen.
    /// </summary>
    SpindleTaskStatus? IStatusShownWithoutLock.StatusWithoutLock(short token)
        => Volatile.Read(ref _completed) ? SourceCore<VoidResult>.StatusOf(Volatile.Read(ref _error)) : SpindleTaskStatus.Pending;

    ValueTaskSourceStatus IValueTaskSource.GetStatus(short token) => (ValueTaskSourceStatus)GetStatus(token);

    ValueTaskSourceStatus IValueTaskSource<T>.GetStatus(short token) => (ValueTaskSourceStatus)GetStatus(token);

    public T GetResult(short token)
    {
        T result = ReadQuietly(token, out ExceptionDispatchInfo? error);
        if (error is not null)
        {
            ValueTaskOrigin.Note(this, token); // for a combinator reading it through a ValueTask
            throw LazyCancellation.ToThrow(error);
        }
        return result;
    }

    public T ReadQuietly(short token, out ExceptionDispatchInfo? error)
    {
        bool completed;
        lock (this)
        {
            completed = _completed;
        }
        if (!completed)
        {
            BlockingWait.Wait(this, token);
        }
        error = _error;
        return _result;
    }

    ExceptionDispatchInfo? IQuietSource.ReadQuietly(short token)
    {
        ReadQuietly(token, out ExceptionDispatchInfo? error);
        return error;
    }

    void IValueTaskSource.GetResult(short token) => GetResult(token);

    bool IRereadableSource.TryClaimFaultReport(short token) => _faultReport.TryTake();

    /// <summary>Tests only: the waiters registered before completion that have not run.</summary>
    internal int WaiterCountForTests
    {
        get
        {
            lock (this)
            {
                return (_firstContinuation is null ? 0 : 1) + (_more?.Count ?? 0);
            }
        }
    }

    public void OnCompleted(Action<object?> continuation, object? state, short token)
    {
        if (continuation is null)
        {
            ThrowHelper.ThrowArgumentNull(nameof(continuation));
        }
        lock (this)
        {
            if (!_completed)
            {
                if (_firstContinuation is null)
                {
                    _firstContinuation = continuation;
                    _firstState = state;
                }
                else
                {
                    (_more ??= new List<(Action<object?>, object?)>(2)).Add((continuation, state));
                }
                return;
            }
        }
        Continuations.Invoke(continuation, state);
    }

    public void OnCompleted(Action<object?> continuation, object? state, short token, ValueTaskSourceOnCompletedFlags flags)
    {
        ContextContinuation.Apply(ref continuation, ref state, flags);
        OnCompleted(continuation, state, token);
    }
}

/// <summary>Observes a forgotten task: reads its result when it completes, reporting a fault. Pooled.</summary>
internal sealed class ForgetObserver : IPoolNode<ForgetObserver>
{
    /// <summary>The observer's continuation: run inline even by a source that dispatches its continuations (see SourceCore.RunWaiter).</summary>
    internal static readonly Action<object?> s_onCompleted = static o => ((ForgetObserver)o!).OnCompleted();


    private ISpindleSource? _source;
    private short _token;
    private ForgetObserver? _next;

    // Who reads the task, Observe or the observer's run (OnCompleted): Registering until the registration in Observe has
    // returned. A run before then (the registration found the task finished and ran the observer at once, on the
    // forgetting thread, or it finished on another thread meanwhile) reads nothing and leaves the read to Observe, which
    // reads at the call, where misuse is thrown to the caller (ReadAndReport, atCall); a run after it reads, as the
    // forgotten task's only reader. Invariant: exactly one of the two reads the task and returns the observer to its pool,
    // the one whose atomic step on this field comes second. (The observer run by the registration used to read as if
    // Forget() had returned: a read of the task elsewhere at that instant, the caller's misuse, was reported as the task's
    // fault and Forget() returned; found by the review of stop 32's changes.)
    private const int Registering = 0;
    private const int Registered = 1;
    private const int Ran = 2;
    private int _phase;

    ref ForgetObserver? IPoolNode<ForgetObserver>.Next => ref _next;

    public static void Observe(ISpindleSource source, short token)
    {
        if (source.GetStatus(token) != SpindleTaskStatus.Pending)
        {
#if DEBUG
            TestHookBeforeReadAtCall?.Invoke(source);
#endif
            ReadAndReport(source, token, atCall: true);
            return;
        }
        if (source is StateMachineBoxBase box)
        {
            // An async method's box observes itself: no observer object held for as long as the method runs (a
            // forgotten endless loop would otherwise keep one for ever).
            if (!box.TryObserveWhenCompleted(token))
            {
                ReadAndReport(source, token, atCall: true); // it completed since the look above
            }
            return;
        }
        ForgetObserver observer = ObjectPool<ForgetObserver>.TryRent() ?? new ForgetObserver();
        observer._source = source;
        observer._token = token;
        observer._phase = Registering; // published to the observer's run by the registration itself
#if DEBUG
        TestHookBeforeRegister?.Invoke(source);
#endif
        try
        {
            source.OnCompleted(s_onCompleted, observer, token);
        }
        catch (Exception ex) when (ThrowHelper.IsRefusedRegistration(ex))
        {
            // Refused before anything was registered (the task already has an awaiter): the observer can never run, so
            // it goes back to its pool, cleared. Any other exception (a foreign source's) may follow a registration that
            // will still call it back: that observer is left to the GC, never pooled under a live registration.
            observer._source = null;
            ObjectPool<ForgetObserver>.Return(observer);
            throw;
        }
        catch
        {
            // A foreign source's: a run that comes later reads the task; one that came already left the read to this
            // call, which has only the source's exception to throw, so it reports what it reads, as a later run would.
            if (Interlocked.CompareExchange(ref observer._phase, Registered, Registering) != Registering)
            {
                ReadAndReport(source, token, atCall: false);
            }
            throw;
        }
        if (Interlocked.CompareExchange(ref observer._phase, Registered, Registering) == Registering)
        {
            return; // the observer reads the task when it finishes
        }
        // It finished during the registration, and the observer's run left the read to this call (see _phase).
        observer._source = null;
        ObjectPool<ForgetObserver>.Return(observer);
        ReadAndReport(source, token, atCall: true);
    }

#if DEBUG
    /// <summary>
    /// Tests only (a Debug build): runs on the forgetting thread when <see cref="Observe"/> has found the task finished,
    /// before it reads it: the instant at which another thread's read of the task (the caller's misuse) meets the read.
    /// </summary>
    internal static Action<ISpindleSource>? TestHookBeforeReadAtCall;

    /// <summary>
    /// Tests only (a Debug build): runs on the forgetting thread when <see cref="Observe"/> has found the task pending (and
    /// not an async method's), before it registers its observer: the instant at which the task may finish, so that the
    /// registration finds it finished.
    /// </summary>
    internal static Action<ISpindleSource>? TestHookBeforeRegister;
#endif

    private void OnCompleted()
    {
        if (Interlocked.Exchange(ref _phase, Ran) == Registering)
        {
            return; // Observe is still registering: it reads the task at the call (see _phase)
        }
        ISpindleSource source = _source!;
        short token = _token;
        _source = null;
        ObjectPool<ForgetObserver>.Return(this);
        if (source is Signal signal)
        {
            signal.EndForgottenWait(token); // reads nothing: see there
            return;
        }
        ReadAndReport(source, token, atCall: false);
    }

    /// <summary>
    /// Reads a forgotten task's completed use and reports its fault; for a source a read does not consume (a promise), only
    /// if no report of the same completion came first (a second Forget, or the report of an abandoned use).
    /// <paramref name="atCall"/>: read by <see cref="Observe"/> on the caller's thread (the task had finished at its look, or
    /// finished while its observer registered), where misuse (another read consumed the use first, since the status check
    /// or the registration that would have thrown for a read before it) throws the await-once error to
    /// the caller, as that check does, instead of being reported as the task's fault. Spindle's own sources tell misuse
    /// from a failure (<see cref="IQuietSource"/>); a user's source is read with a catch, and whatever it throws reported.
    /// The observer's own read, after the call returned, has nobody to throw to: it reports whatever the read meets.
    /// </summary>
    private static void ReadAndReport(ISpindleSource source, short token, bool atCall)
    {
        // A cancellation is no fault: both reads ask for it as a value, so a source that kept it lazily (a promise cancelled
        // by a token, a delay) builds no exception for it; and both let go of this thread's record of any they built
        // (LazyCancellation.PassedOn): the failure is reported, if at all, not thrown here.
        ExceptionDispatchInfo? failure = atCall && source is IQuietSource ? QuietRead.ReadFaultOrThrow(source, token) : QuietRead.ReadFault(source, token);
        if (FaultReport.IsFault(failure) && FaultReport.Claim(source, token))
        {
            UnobservedExceptions.Report(failure.SourceException);
        }
    }

    /// <summary>Reports a forgotten task's fault, read by its observer (a cancellation is an outcome, not a fault).</summary>
    internal static void Report(ExceptionDispatchInfo? failure)
    {
        if (FaultReport.IsFault(failure))
        {
            UnobservedExceptions.Report(failure.SourceException);
        }
    }
}

/// <summary>Bridges a Spindle source to a <see cref="Task"/> (allocates: a Task is an object).</summary>
/// <remarks>
/// <para>An async Task method awaits the source, so that its outcome crosses exactly as an await of it would in BCL code: a
/// cancellation stays the very <see cref="OperationCanceledException"/> thrown, with its token (the BCL's builder keeps
/// it), and a fault its exception, whether the source had completed already or not.</para>
/// <para>A pending source is registered on here, at the call, by a <see cref="PreservedSource{T}"/> that the async method
/// then awaits: a source that already has an awaiter (the caller's misuse) throws the await-once error to the caller.
/// Registered on by the async method itself, it threw inside the BCL's builder, which rethrows such an exception on the
/// thread pool (it cannot fault the method at that point): the process crashed, and the Task never completed.</para>
/// </remarks>
[StackTraceHidden]
internal static class TaskBridge
{
    public static Task ToTask(ISpindleSource source, short token)
    {
        SpindleTaskStatus status = source.GetStatus(token);
        if (status == SpindleTaskStatus.Succeeded)
        {
            source.GetResult(token);
            return Task.CompletedTask;
        }
        return Await(status == SpindleTaskStatus.Pending
            ? new SpindleTask(new PreservedSource<VoidResult>(source, token), 0) // registers now: may throw
            : new SpindleTask(source, token));
    }

    public static Task<T> ToTask<T>(ISpindleSource<T> source, short token)
    {
        SpindleTaskStatus status = source.GetStatus(token);
        if (status == SpindleTaskStatus.Succeeded)
        {
            return Task.FromResult(source.GetResult(token));
        }
        return Await(status == SpindleTaskStatus.Pending
            ? new SpindleTask<T>(new PreservedSource<T>(source, token), 0) // registers now: may throw
            : new SpindleTask<T>(source, token));
    }

    private static async Task Await(SpindleTask task) => await task;

    private static async Task<T> Await<T>(SpindleTask<T> task) => await task;
}

/// <summary>
/// Blocks a thread until a source completes (awaiter.GetResult on a pending task). The waiting thread helps: it runs
/// queued Spindle work while it waits, so a worker that blocks cannot strand the work it is waiting for.
/// </summary>
internal sealed class BlockingWait : IPoolNode<BlockingWait>
{
    /// <summary>The waiter a blocked thread registers: it only sets the event, so a source runs it inline even when it dispatches continuations.</summary>
    internal static readonly Action<object?> s_set = static o => ((BlockingWait)o!).Set();

    // The event, made whole with the waiter: a monitor on an object of its own, and a flag. A ManualResetEventSlim made
    // its lazy parts at its first real wait (its lock, 24 B an event, and 64 B more once in the process), so a thread's
    // first block allocated whenever it came (docs/decisions.md section 40); a monitor wait allocates nothing.
    // Invariant: the flag turns true only under the lock, in the same hold as the pulse (Set), and false only on the
    // waiting thread as it pools the waiter, after it has seen it true; a wait checks it under the lock before it parks,
    // so a set is never missed, and a later use's wait, which takes the lock after that hold, never meets its pulse.
    private readonly object _gate = new();
    private volatile bool _set;
    private BlockingWait? _next;

    ref BlockingWait? IPoolNode<BlockingWait>.Next => ref _next;

    private bool IsSet => _set;

    /// <summary>Wakes the waiting thread: once per registration (the lock costs the waker nothing measurable next to a block).</summary>
    private void Set()
    {
        lock (_gate)
        {
            _set = true;
            Monitor.PulseAll(_gate);
        }
    }

    /// <summary>Parks until set, or until <paramref name="milliseconds"/> have passed (<see cref="Timeout.Infinite"/>: until set). The callers loop on <see cref="IsSet"/>.</summary>
    private void Wait(int milliseconds)
    {
        lock (_gate)
        {
            if (!_set)
            {
                Monitor.Wait(_gate, milliseconds);
            }
        }
    }

    /// <summary>
    /// Back to the calling thread's pool, cleared. A waiter is rented and returned by the thread that blocks, so its
    /// pool stack is that thread's own.
    /// </summary>
    private void Return()
    {
        _set = false;
        ObjectPool<BlockingWait>.Return(this);
    }

    /// <summary>
    /// Makes sure the calling thread's pool holds a waiter, so that its first real block allocates nothing: called when
    /// it starts waiting for a pending job, long before it may block (the first frames of a frame program, where such a
    /// program is not yet measured). The first call on a thread makes the waiter, and this type's and the waiter pool's
    /// statics and the thread's slot for it if they are new; later ones cost a read of the thread's slot.
    /// <see cref="SpindlePool.Trim"/> takes the waiter like any pooled object, and the thread's next wait for a pending
    /// job makes another, still before it can block.
    /// </summary>
    private static void EnsureAWaiter()
    {
        if (ObjectPool<BlockingWait>.LocalCount == 0)
        {
            ObjectPool<BlockingWait>.Return(new BlockingWait());
            // And this type's statics: s_set's delegate (88 B with its closure class) was made at the first block in the
            // process, when the waiter registered it. A use the JIT cannot drop, so the initializer runs here.
            GC.KeepAlive(s_set);
        }
    }

    /// <summary>
    /// Blocks until a job finishes, running jobs on the calling thread while it waits: first the job's own batches (a
    /// parallel-for), then any job it can take. When there is nothing to run it registers as a waiter on the job and
    /// sleeps, waking now and then to help again; it returns only after its waiter has been signalled, so the pooled
    /// waiter can never be signalled late by this job after it is reused.
    /// </summary>
    /// <exception cref="InvalidOperationException">Called inside a job, on a handle that can finish only after that job.</exception>
    public static void WaitForJob(JobNode node, int version)
    {
        JobNode.ThrowIfWaitsForARunningJob(node, version);
        EnsureAWaiter();
        using (ThreadCounters.EnterHelpingWait())
        {
            HelpUntilJobCompletes(node, version);
        }
    }

    private static void HelpUntilJobCompletes(JobNode node, int version)
    {
        WorkerPool pool = WorkerPool.Shared;
        int idleRounds = 0;
        while (!node.IsCompleted(version))
        {
            if (node.TryHelp(version) || pool.TryRunHelpable())
            {
                idleRounds = 0;
                continue;
            }
            if (++idleRounds < 64)
            {
                if (idleRounds < 16)
                {
                    Spinning.Pause(30);
                }
                else
                {
                    Thread.Yield();
                }
                continue;
            }
            BlockingWait waiter = ObjectPool<BlockingWait>.TryRent() ?? new BlockingWait();
            if (!node.TryAddWaiter(version, s_set, waiter))
            {
                waiter.Return();
                return; // finished meanwhile
            }
            while (!waiter.IsSet)
            {
                if (node.TryHelp(version) || pool.TryRunHelpable())
                {
                    continue;
                }
                waiter.Wait(1);
            }
            waiter.Return();
            return;
        }
    }

    /// <summary>Blocks until the source's current use completes. The caller has seen it pending.</summary>
    /// <exception cref="InvalidOperationException">
    /// Called inside a job, on a source that awaits a job that can finish only after that job (see
    /// <see cref="JobNode.ThrowIfAwaitsARunningJob"/>): refused before anything is registered.
    /// </exception>
    public static void Wait(ISpindleSource source, short token)
    {
        JobNode.ThrowIfAwaitsARunningJob(source);
        BlockingWait waiter = ObjectPool<BlockingWait>.TryRent() ?? new BlockingWait();
#if DEBUG
        TestHookBeforeRegister?.Invoke();
#endif
        try
        {
            source.OnCompleted(s_set, waiter, token);
        }
        catch (Exception ex) when (ThrowHelper.IsRefusedRegistration(ex))
        {
            // Refused before anything was registered (the use already has an awaiter, or the token is stale): nothing
            // will set the event, so the waiter goes back to its pool as it came. A waiter that may still be set by a
            // registration that did happen is never pooled (its next use would wake early).
            waiter.Return();
            throw;
        }
#if DEBUG
        TestHookRegistered?.Invoke();
#endif
        using (ThreadCounters.EnterHelpingWait())
        {
            HelpUntilSet(waiter);
        }
#if DEBUG
        TestHookWoke?.Invoke();
#endif
    }

    private static void HelpUntilSet(BlockingWait waiter)
    {
        Scheduler scheduler = Scheduler.Default;
        int idleRounds = 0;
        while (!waiter.IsSet)
        {
            if (TryRunNestedOfThisLoop() || scheduler.TryRunOne())
            {
                idleRounds = 0;
                continue;
            }
            if (Spinning.Helps && ++idleRounds < 50)
            {
                Thread.SpinWait(30);
                continue;
            }
            // Nothing to help with: sleep until completion. A worker wakes now and then to help again, since only it
            // can run what lands in its own run-next slot; any other thread can leave the queues to the workers.
            waiter.Wait(scheduler.IsWorkerThread ? 1 : Timeout.Infinite);
        }
        waiter.Return();
    }

    /// <summary>
    /// On a thread inside a frame loop's step, runs one continuation that a chain of completions queued to the loop past
    /// the nesting bound (<see cref="FrameLoop.DeferNested"/>): loop code blocked in GetResult on a task that such a chain
    /// completes would otherwise wait for ever, since the queue runs only once the blocked item returns (the chain used to
    /// go on on the workers). Its exception, if it throws, is reported, as a phase reports it.
    /// </summary>
    private static bool TryRunNestedOfThisLoop()
    {
        if (FrameLoop.InStepOnThisThread is not { HasNested: true } loop)
        {
            return false;
        }
        try
        {
            loop.TakeNested().Execute();
        }
        catch (Exception ex)
        {
            UnobservedExceptions.Report(ex);
        }
        return true;
    }

#if DEBUG
    /// <summary>
    /// Tests only (a Debug build): runs on the thread about to block, which has seen the use pending, before it registers
    /// its waiter: standing in for other threads that act on the use (forget it, complete it) in that window.
    /// </summary>
    [ThreadStatic]
    internal static Action? TestHookBeforeRegister;

    /// <summary>Tests only (a Debug build): runs on the blocked thread once its waiter is registered on the source.</summary>
    [ThreadStatic]
    internal static Action? TestHookRegistered;

    /// <summary>
    /// Tests only (a Debug build): runs on the blocked thread after it woke and before its caller reads the source,
    /// standing in for the owner that resets the source at that moment.
    /// </summary>
    [ThreadStatic]
    internal static Action? TestHookWoke;
#endif
}

using System;
using System.Diagnostics;
using System.Runtime.ExceptionServices;
using System.Threading;
using System.Threading.Tasks.Sources;

namespace SpindleLib;

/// <summary>
/// A resettable completion source for a <see cref="SpindleTask"/>: the Spindle counterpart of
/// <c>TaskCompletionSource</c>, reusable with <see cref="Reset"/> so that a cycle of
/// complete-await-reset allocates nothing.
/// </summary>
/// <remarks>
/// <para>Thread-safety: the <c>TrySet*</c>/<c>Set*</c> methods may race from any threads; exactly one wins.
/// <see cref="Reset"/> must not race with them or with an await.</para>
/// <para>The task supports one awaiter at a time. Reading its result does not consume the promise, so a completed
/// promise's task may be read again until <see cref="Reset"/>, after which the old task's token is stale (for the next
/// 65,535 resets: the 16-bit token then comes round again; see <see cref="SpindleTask"/>). Passing it to
/// <see cref="SpindleTask.Forget"/> again reports a fault no second time: a fault is reported once per completion.</para>
/// <para>A combinator that stops waiting on the task (a WhenAny it lost, a <c>WithTimeout</c> that timed out, a
/// <c>WithCancellation</c> whose token won) lets go of it: the use is left pending with no awaiter, so the task can be
/// awaited again, and the same promise raced in every turn of a loop (<c>await SpindleTask.WhenAny(next, stop.Task)</c>,
/// or <c>reply.Task.WithTimeout(t)</c> until it answers), as a <c>Task</c> can. A fault that completes such a use while
/// nobody awaits it (between two turns, say) is reported to <see cref="Spindle.UnobservedException"/>, once, and is
/// still thrown to any later read of the use, as a completed promise's outcome is.</para>
/// </remarks>
[DebuggerDisplay("{DebuggerDisplay,nq}")]
public sealed class Promise : ISpindleSource, IDetachableSource, IQuietSource, IRereadableSource, ILazyCanceledSource
{
    private SourceCore<VoidResult> _core;

    /// <summary>The token of the current use's cancellation (<see cref="ILazyCanceledSource"/>), cleared by <see cref="Reset"/>.</summary>
    private CancellationToken _canceledBy;

    /// <summary>Creates a promise whose continuations run on the thread that completes it (as far as a bounded nesting depth).</summary>
    public Promise()
    {
        _core.AllowAwaitAfterLetGo();
    }

    /// <summary>Creates a promise.</summary>
    /// <param name="runContinuationsAsynchronously">
    /// True to queue the awaiting code to Spindle's workers when the promise completes, instead of running it on the
    /// completing thread (the BCL's <c>TaskCreationOptions.RunContinuationsAsynchronously</c>): a completer that holds a
    /// lock, or must not be held up, then returns at once. Still allocates nothing.
    /// </param>
    /// <exception cref="InvalidOperationException"><paramref name="runContinuationsAsynchronously"/> is true, the workers had not started (this starts them), and the SPINDLE_WORKERS environment variable is invalid (see <see cref="Spindle.WorkerCount"/>).</exception>
    public Promise(bool runContinuationsAsynchronously)
    {
        _core.AllowAwaitAfterLetGo();
        if (runContinuationsAsynchronously)
        {
            _core.RunContinuationsAsynchronously();
        }
    }

    /// <summary>True if the awaiting code is queued to the workers on completion, not run on the completing thread.</summary>
    public bool RunsContinuationsAsynchronously => _core.DispatchesContinuations;

    /// <summary>The task for the promise's current use.</summary>
    public SpindleTask Task => new(this, _core.Version);

    /// <summary>
    /// The token of the promise's current use (the one <see cref="Task"/> carries). A completer that may come late (the
    /// reply to an ask whose asker may time out and reset the promise for its next ask) is given this token with the
    /// promise and completes through <see cref="TrySetResult(short)"/> or
    /// <see cref="TrySetException(short, Exception)"/> (or <see cref="TrySetCanceled(short, CancellationToken)"/>), which complete
    /// that use only, not a later one.
    /// </summary>
    /// <remarks>
    /// The token is 16 bits, as a <see cref="System.Threading.Tasks.ValueTask"/>'s is, and each <see cref="Reset"/> steps it,
    /// so it wraps: a completer is told apart from the next 65,535 uses, and one that comes 65,536 resets (or a multiple)
    /// late completes the use then current. Where a reply may lag that far behind its ask (a fast asker that resets tens of
    /// thousands of times a second, a replier stalled for seconds), carry an ask number of your own in the reply as well,
    /// or use a new promise per ask.
    /// </remarks>
    public short Token => _core.Version;

    /// <summary>True once the current use has been completed.</summary>
    public bool IsCompleted => _core.IsCompleted;

    /// <summary>What a debugger shows: the current use's status and token (a task with another token is stale).</summary>
    private string DebuggerDisplay => $"{DebuggerText.TryStatus(_core.GetStatus, _core.Version)?.ToString() ?? "Resetting"}, Token = {_core.Version}";

    /// <summary>Completes the task successfully. Returns false if it was already completed.</summary>
    public bool TrySetResult() => _core.TrySetResult(default);

    /// <summary>
    /// Completes use <paramref name="token"/> (a <see cref="Token"/> read when the use began) successfully, if it is still
    /// the promise's current use and not yet completed. Returns false otherwise: once the owner has called
    /// <see cref="Reset"/>, a late completer of the earlier use completes nothing, where <see cref="TrySetResult()"/> would
    /// complete the new use.
    /// </summary>
    public bool TrySetResult(short token) => _core.TrySetResultOfUse(token, default);

    /// <summary>Completes the task with an exception. Returns false if it was already completed.</summary>
    /// <remarks>
    /// An <see cref="OperationCanceledException"/> makes the task Canceled, not Faulted, as it does for the BCL's
    /// <c>ManualResetValueTaskSourceCore</c> (a pooled ValueTask) and for an async method that throws one; a
    /// <c>TaskCompletionSource</c> would make it Faulted. To forward a cancellation-type exception as a failure (an
    /// HTTP timeout, say), wrap it in an exception of another type.
    /// </remarks>
    /// <exception cref="ArgumentNullException"><paramref name="exception"/> is null.</exception>
    public bool TrySetException(Exception exception)
    {
        if (exception is null)
        {
            ThrowHelper.ThrowArgumentNull(nameof(exception));
        }
        return _core.TrySetException(exception);
    }

    /// <summary>
    /// Fails use <paramref name="token"/> (a <see cref="Token"/> read when the use began) with
    /// <paramref name="exception"/>, if it is still the promise's current use and not yet completed; false otherwise (see
    /// <see cref="TrySetResult(short)"/>). An <see cref="OperationCanceledException"/> makes it Canceled, as
    /// <see cref="TrySetException(Exception)"/> does.
    /// </summary>
    /// <exception cref="ArgumentNullException"><paramref name="exception"/> is null.</exception>
    public bool TrySetException(short token, Exception exception)
    {
        if (exception is null)
        {
            ThrowHelper.ThrowArgumentNull(nameof(exception));
        }
        return _core.TrySetExceptionOfUse(token, exception);
    }

    /// <summary>Cancels the task. Returns false if it was already completed.</summary>
    /// <remarks>
    /// The exception is built only for a reader that throws it (each such read builds its own, with the token, as a BCL
    /// Task does for a cancellation it stored no exception for); a reader that takes the cancellation as a value
    /// (<c>SuppressCancellationThrow()</c>) gets none built.
    /// </remarks>
    public bool TrySetCanceled(CancellationToken cancellationToken = default) => _core.TrySetCanceledKeepingToken(ref _canceledBy, cancellationToken);

    /// <summary>
    /// Cancels use <paramref name="token"/> (a <see cref="Token"/> read when the use began) as canceled by
    /// <paramref name="cancellationToken"/>, if it is still the promise's current use and not yet completed; false
    /// otherwise (see <see cref="TrySetResult(short)"/>). An awaiter of that use gets an <see cref="OperationCanceledException"/> whose
    /// <see cref="OperationCanceledException.CancellationToken"/> is <paramref name="cancellationToken"/>.
    /// </summary>
    /// <remarks>
    /// For a cancellation callback that may run late: a primitive registers <c>cancellationToken.Register(...)</c> for an
    /// ask and completes the promise by token from it, so a callback that runs after the ask was answered and the promise
    /// reset for the next ask cancels nothing (<see cref="TrySetCanceled(CancellationToken)"/> would cancel the next ask).
    /// As <see cref="TrySetCanceled(CancellationToken)"/>, it builds no exception: each reader that throws builds its own.
    /// </remarks>
    public bool TrySetCanceled(short token, CancellationToken cancellationToken) => _core.TrySetCanceledKeepingTokenOfUse(token, ref _canceledBy, cancellationToken);

    /// <summary>Completes the task successfully.</summary>
    /// <exception cref="InvalidOperationException">The promise was already completed; call <see cref="Reset"/> first, or use <see cref="TrySetResult()"/>.</exception>
    public void SetResult()
    {
        if (!TrySetResult())
        {
            ThrowAlreadyCompleted();
        }
    }

    /// <summary>Completes the task with an exception.</summary>
    /// <remarks>
    /// An <see cref="OperationCanceledException"/> makes the task Canceled, not Faulted, as it does for the BCL's
    /// <c>ManualResetValueTaskSourceCore</c> (a pooled ValueTask) and for an async method that throws one; a
    /// <c>TaskCompletionSource</c> would make it Faulted. To forward a cancellation-type exception as a failure (an
    /// HTTP timeout, say), wrap it in an exception of another type.
    /// </remarks>
    /// <exception cref="ArgumentNullException"><paramref name="exception"/> is null.</exception>
    /// <exception cref="InvalidOperationException">The promise was already completed.</exception>
    public void SetException(Exception exception)
    {
        if (!TrySetException(exception))
        {
            ThrowAlreadyCompleted();
        }
    }

    /// <summary>Cancels the task.</summary>
    /// <exception cref="InvalidOperationException">The promise was already completed.</exception>
    public void SetCanceled(CancellationToken cancellationToken = default)
    {
        if (!TrySetCanceled(cancellationToken))
        {
            ThrowAlreadyCompleted();
        }
    }

    /// <summary>Starts a new use: the promise becomes pending again and tasks from earlier uses become stale.</summary>
    /// <remarks>
    /// A use that a WhenAny gave up on (another input won, or the wait was cancelled) may be reset while pending: the
    /// combinator no longer waits on it (its task may also be awaited again: see the class remarks). As for any reset, nothing may complete the old use at the same time: a late
    /// TrySet* racing the reset may land on either use, and one after it completes the new use. A completer that may come
    /// late (an actor's reply after its asker timed out) completes by token instead (<see cref="Token"/>,
    /// <c>TrySetResult(token, ...)</c>): after the reset it completes nothing. Should it claim the old use at the very
    /// instant of the reset, the reset waits for it to finish (a few stores: nobody awaits that use any more) and then
    /// resets; a completion that is resuming an awaiter at that instant makes the reset throw instead.
    /// <para>Reset a completed use only once the code awaiting it has read it. Usually that code runs inside the Set*
    /// call, so it has. It has not yet when the promise runs its continuations asynchronously, nor when Set* is called
    /// from more than 32 continuations deep (Spindle then queues the next continuation to bound the stack), nor when it
    /// is a thread blocked in <c>GetAwaiter().GetResult()</c>, which Set* only wakes: that code, or a WhenAll still
    /// waiting for its other inputs, reads the use later, and after a reset it meets the next use and
    /// gets the await-once <see cref="InvalidOperationException"/> instead of the outcome (a read that is under way at
    /// the instant of the reset races it: it reads the old use's outcome or gets the same error, never a cleared one). Reset it when the awaiting
    /// code says it has finished, or use a new promise.</para>
    /// </remarks>
    /// <exception cref="InvalidOperationException">An await on the current use is still pending or registering, or a Set* call on another thread is completing it at this instant while an awaiter waits on it (a completion racing the reset), or another thread is resetting the promise at this instant.</exception>
    public void Reset() => _core.ResetClearingToken(ref _canceledBy);

    CancellationToken ILazyCanceledSource.CanceledBy => _canceledBy;

    DetachOutcome IDetachableSource.TryDetach(DirectWaiter waiter) => _core.TryReplaceWaiter(waiter, null, null);

    bool IDetachableSource.TryAbandon(short token) => _core.TryAbandon(token);

    bool IRereadableSource.TryClaimFaultReport(short token) => _core.TryClaimFaultReport(token);

    internal static void ThrowAlreadyCompleted() => ThrowHelper.ThrowInvalidOperation(
        "The promise was already completed. Call Reset() to start a new use, or use the TrySet* methods, which return false instead of throwing.");

    /// <inheritdoc/>
    [StackTraceHidden]
    public SpindleTaskStatus GetStatus(short token) => _core.GetStatus(token);

    [StackTraceHidden]
    ValueTaskSourceStatus IValueTaskSource.GetStatus(short token) => (ValueTaskSourceStatus)_core.GetStatus(token);

    /// <inheritdoc/>
    [StackTraceHidden]
    public void GetResult(short token) => _core.GetResult(token, this);

    ExceptionDispatchInfo? IQuietSource.ReadQuietly(short token)
    {
        _core.ReadQuietly(token, this, out ExceptionDispatchInfo? error);
        return error;
    }

    /// <inheritdoc/>
    [StackTraceHidden]
    public void OnCompleted(Action<object?> continuation, object? state, short token) => _core.OnCompleted(continuation, state, token);

    [StackTraceHidden]
    void IValueTaskSource.OnCompleted(Action<object?> continuation, object? state, short token, ValueTaskSourceOnCompletedFlags flags)
        => _core.OnCompleted(continuation, state, token, flags);
}

using System;
using System.Diagnostics;
using System.Runtime.CompilerServices;
using System.Runtime.ExceptionServices;
using System.Runtime.InteropServices;
using System.Threading;
using System.Threading.Tasks.Sources;

namespace SpindleLib;

/// <summary>Placeholder result for sources that produce no value.</summary>
internal readonly struct VoidResult
{
}

/// <summary>
/// The completion core embedded (as a mutable field) in every Spindle source: one result, one continuation,
/// one version token. It plays the role <c>ManualResetValueTaskSourceCore</c> plays in the BCL, with two
/// differences that Spindle's semantics need: exactly-once completion is decided by a CAS, and a second
/// continuation is rejected without touching the first.
/// </summary>
/// <remarks>
/// <para><b>Completion</b>: <see cref="_gate"/> is a one-shot CAS (0 → 1) that picks the single completer. The completer
/// writes the result, then publishes completion and takes the continuation in one atomic step: an Exchange of
/// <see cref="_continuation"/> to <see cref="s_completed"/>. Completion is read from that field, never from a separate
/// flag, and the completer touches nothing in the core after the Exchange except the state of the continuation it
/// took (which no one else may consume before that continuation runs). This closes the race in which a consumer that
/// saw "completed" recycles a pooled source while its completer is still inside the core.</para>
/// <para><b>Continuation handshake</b> (after the BCL's ManualResetValueTaskSourceCore, extended with a
/// registration marker): <see cref="_continuation"/> is null, <see cref="s_registering"/>, a continuation, or
/// <see cref="s_completed"/>.
/// A registrant CASes null → s_registering, writes the state, then CASes s_registering → continuation. The completer
/// Exchanges the field to s_completed. Whoever sees the other's mark runs the continuation: the completer if it
/// took a continuation, the registrant if its second CAS found s_completed. So a continuation runs exactly once, and
/// a second registrant finds a non-null field and throws without overwriting the first one's state.</para>
/// </remarks>
[StructLayout(LayoutKind.Auto)]
internal struct SourceCore<TResult>
{
    internal static readonly Action<object?> s_completed = static _ => Debug.Fail("completion sentinel invoked");
    internal static readonly Action<object?> s_registering = static _ => Debug.Fail("registration sentinel invoked");

    private Action<object?>? _continuation;
    private object? _continuationState;
    private ExceptionDispatchInfo? _error;
    private TResult _result;
    private int _gate;
    private int _version; // only the low 16 bits are the token; an int so that consumption can be a CAS


    /// <summary>The token of the current use.</summary>
    public readonly short Version => (short)_version;

    /// <summary>True once the result has been published.</summary>
    public bool IsCompleted => (object?)Volatile.Read(ref _continuation) == s_completed;

    /// <summary>Starts a new use: clears the result, error and continuation, and advances the version.</summary>
    /// <exception cref="InvalidOperationException">A continuation is still waiting on the current use.</exception>
    public void Reset()
    {
        Action<object?>? c = _continuation;
        if (c is not null && c != s_completed)
        {
            ThrowHelper.ThrowInvalidOperation("The source cannot be reset while an await on it is still pending.");
        }
        unchecked { _version++; }
        _gate = 0;
        _continuation = null;
        _continuationState = null;
        _error = null;
        _result = default!;
    }

    /// <summary>Clears every reference the core holds, after <see cref="Consume"/> advanced the version (used before pooling).</summary>
    public void ClearForPool()
    {
        _gate = 0;
        _continuation = null;
        _continuationState = null;
        _error = null;
        _result = default!;
    }

    public readonly void ValidateToken(short token)
    {
        if (token != (short)_version)
        {
            ThrowHelper.ThrowStaleToken();
        }
    }

    public SpindleTaskStatus GetStatus(short token)
    {
        ValidateToken(token);
        return StatusUnchecked;
    }

    public SpindleTaskStatus StatusUnchecked
    {
        get
        {
            if (!IsCompleted)
            {
                return SpindleTaskStatus.Pending;
            }
            ExceptionDispatchInfo? e = _error;
            return e is null ? SpindleTaskStatus.Succeeded
                : e.SourceException is OperationCanceledException ? SpindleTaskStatus.Canceled
                : SpindleTaskStatus.Faulted;
        }
    }

    /// <summary>Reads the outcome. Throws the stored exception on fault or cancellation.</summary>
    public TResult GetResult(short token)
    {
        ValidateToken(token);
        if (!IsCompleted)
        {
            ThrowHelper.ThrowNotCompleted();
        }
        _error?.Throw();
        return _result;
    }

    /// <summary>
    /// Reads the outcome and consumes this use in one step: the CAS on the version guarantees that of two threads
    /// racing to read the same pooled result, exactly one succeeds and the other gets the await-once error.
    /// The caller must then clear the core (<see cref="ClearForPool"/>) and return its object to the pool.
    /// </summary>
    public TResult Consume(short token, out ExceptionDispatchInfo? error)
    {
        int v = Volatile.Read(ref _version);
        if (token != (short)v)
        {
            ThrowHelper.ThrowStaleToken();
        }
        if (!IsCompleted)
        {
            ThrowHelper.ThrowNotCompleted();
        }
        error = _error;
        TResult result = _result;
        if (Interlocked.CompareExchange(ref _version, unchecked(v + 1), v) != v)
        {
            ThrowHelper.ThrowStaleToken();
        }
        return result;
    }

    /// <summary>The stored exception, if the operation failed (for observers that must not throw).</summary>
    public readonly Exception? Error => _error?.SourceException;

    public bool TrySetResult(TResult result)
    {
        if (Interlocked.CompareExchange(ref _gate, 1, 0) != 0)
        {
            return false;
        }
        _result = result;
        Publish();
        return true;
    }

    public bool TrySetException(Exception exception)
    {
        if (Interlocked.CompareExchange(ref _gate, 1, 0) != 0)
        {
            return false;
        }
        _error = ExceptionDispatchInfo.Capture(exception);
        Publish();
        return true;
    }

    public bool TrySetCanceled(CancellationToken cancellationToken)
    {
        if (Interlocked.CompareExchange(ref _gate, 1, 0) != 0)
        {
            return false;
        }
        _error = ExceptionDispatchInfo.Capture(new OperationCanceledException(cancellationToken));
        Publish();
        return true;
    }

    private void Publish()
    {
        // The one publication point: after this Exchange the operation is complete to every reader.
        Action<object?>? c = Interlocked.Exchange(ref _continuation, s_completed);
        if (c is not null && c != s_registering)
        {
            object? s = _continuationState;
            _continuationState = null;
            Continuations.Invoke(c, s);
        }
    }

    public void OnCompleted(Action<object?> continuation, object? state, short token)
    {
        if (continuation is null)
        {
            ThrowHelper.ThrowArgumentNull(nameof(continuation));
        }
        ValidateToken(token);

        Action<object?>? prev = Interlocked.CompareExchange(ref _continuation, s_registering, null);
        if (prev is not null)
        {
            if (prev == s_completed)
            {
                // Completed before we registered: run it now. This is the same thread the caller is on, which is
                // what an awaiter that raced with completion expects.
                Continuations.Invoke(continuation, state);
                return;
            }
            ThrowHelper.ThrowAlreadyAwaited();
        }

        _continuationState = state;
        prev = Interlocked.CompareExchange(ref _continuation, continuation, s_registering);
        if (prev != s_registering)
        {
            // The completer ran between our two CASes and left the running of the continuation to us.
            Debug.Assert(prev == s_completed);
            _continuationState = null;
            Continuations.Invoke(continuation, state);
        }
    }

    /// <summary>
    /// The <see cref="IValueTaskSource"/> form. Honors <see cref="ValueTaskSourceOnCompletedFlags.FlowExecutionContext"/>
    /// (rare: only non-"unsafe" awaiters ask for it, and only then does it allocate). Scheduling contexts are not
    /// captured: Spindle continuations run where the source completes.
    /// </summary>
    public void OnCompleted(Action<object?> continuation, object? state, short token, ValueTaskSourceOnCompletedFlags flags)
    {
        if ((flags & ValueTaskSourceOnCompletedFlags.FlowExecutionContext) != 0)
        {
            ExecutionContext? ec = ExecutionContext.Capture();
            if (ec is not null)
            {
                OnCompleted(ContextContinuation.s_run, new ContextContinuation(continuation, state, ec), token);
                return;
            }
        }
        OnCompleted(continuation, state, token);
    }
}

/// <summary>A continuation bound to a captured ExecutionContext (the rare path that must flow it; allocates).</summary>
internal sealed class ContextContinuation
{
    private static readonly ContextCallback s_invoke = static o =>
    {
        var cc = (ContextContinuation)o!;
        cc._continuation(cc._state);
    };

    public static readonly Action<object?> s_run = static o =>
    {
        var cc = (ContextContinuation)o!;
        ExecutionContext.Run(cc._context, s_invoke, cc);
    };

    private readonly Action<object?> _continuation;
    private readonly object? _state;
    private readonly ExecutionContext _context;

    public ContextContinuation(Action<object?> continuation, object? state, ExecutionContext context)
    {
        _continuation = continuation;
        _state = state;
        _context = context;
    }
}

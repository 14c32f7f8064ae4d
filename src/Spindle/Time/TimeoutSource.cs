using System;
using System.Runtime.CompilerServices;
using System.Runtime.ExceptionServices;
using System.Threading;
using System.Threading.Tasks.Sources;

namespace SpindleLib;

/// <summary>
/// The source behind <c>WithTimeout</c>: it consumes one input task and owns one timer, and completes with the input's
/// outcome or with a <see cref="TimeoutException"/>, whichever comes first. Pooled, so a timeout allocates nothing in
/// steady state, whether the input wins (the usual case: the timer is cancelled quietly) or the timer does (then only
/// the exception is allocated).
/// </summary>
/// <remarks>
/// <para><b>One outcome.</b> The input's continuation reads the input, cancels the timer, and completes the core; the
/// timer's continuation completes the core with the timeout. The core's single CAS picks one. An input that loses is
/// still read (so a pooled input goes back to its pool), and a fault of it goes to
/// <see cref="Spindle.UnobservedException"/>, as a combinator's losers do.</para>
/// <para><b>Lifetime.</b> Three holds: the consumer's (dropped when the result is read), the input's (dropped when its
/// continuation has run) and the timer's (dropped when its continuation has run, or by whoever cancelled it, since its
/// continuation then never runs). The last to let go returns the object to its pool. Nothing else can call back later:
/// there is no cancellation registration.</para>
/// </remarks>
internal sealed class TimeoutSource<T> : ISpindleSource<T>, IPoolNode<TimeoutSource<T>>
{
    private static readonly Action<object?> s_onInputCompleted = static o => ((TimeoutSource<T>)o!).OnInputCompleted();
    private static readonly Action<object?> s_onTimerFired = static o => ((TimeoutSource<T>)o!).OnTimerFired();

    private SourceCore<T> _core;
    private TimeoutTimer _timer;
    private ISpindleSource? _input;
    private short _inputToken;
    private TimeSpan _timeout;
    private int _holds; // invariant: holders not yet let go (consumer, input, timer); the one that reaches 0 pools the object
    private TimeoutSource<T>? _poolNext;

    ref TimeoutSource<T>? IPoolNode<TimeoutSource<T>>.Next => ref _poolNext;

    /// <summary>
    /// Starts a timeout of <paramref name="timeout"/> (positive, at most <see cref="TimerWheel.MaxDelay"/>) on
    /// <paramref name="wheel"/> over a pending input, and returns the source and its token. For a typed source
    /// (<typeparamref name="T"/> other than <see cref="VoidResult"/>), <paramref name="input"/> must be an
    /// <see cref="ISpindleSource{T}"/>.
    /// </summary>
    /// <exception cref="InvalidOperationException">The input already has an awaiter (it is being awaited elsewhere).</exception>
    public static TimeoutSource<T> Start(ISpindleSource input, short inputToken, TimeSpan timeout, TimerWheel wheel, out short token)
    {
        TimeoutSource<T> source = ObjectPool<TimeoutSource<T>>.TryRent() ?? new TimeoutSource<T>();
        source._input = input;
        source._inputToken = inputToken;
        source._timeout = timeout;
        source._holds = 3;
        token = source._core.Version;
        // The timer first, so that the input's continuation, which may run at once, always finds it armed.
        source._timer.Arm(wheel, wheel.DeadlineAfter(timeout), s_onTimerFired, source);
        try
        {
            input.OnCompleted(s_onInputCompleted, source, inputToken);
        }
        catch
        {
            // Misuse (the input is awaited elsewhere): take the timer back and abandon this object to the GC, since the
            // timer's continuation may still be running. The caller gets the exception and never sees a task.
            source._timer.TryCancel();
            throw;
        }
        return source;
    }

    private void OnInputCompleted()
    {
        ISpindleSource input = _input!;
        _input = null;
        T value = default!;
        Exception? error = null;
        try
        {
            if (typeof(T) == typeof(VoidResult))
            {
                ((IValueTaskSource)input).GetResult(_inputToken);
            }
            else
            {
                value = Unsafe.As<ISpindleSource<T>>(input).GetResult(_inputToken);
            }
        }
        catch (Exception ex)
        {
            error = ex;
        }
        // Cancel the timer before completing, so that nothing is left in the wheel by the time the consumer resumes.
        if (_timer.TryCancel() == TimerCancel.Cancelled)
        {
            Release(); // its continuation will never run; this input's own hold keeps the object alive
        }
        bool set = error is null ? _core.TrySetResult(value) : _core.TrySetException(error);
        if (!set && error is not null)
        {
            CombinatorCore.ReportLoser(error); // timed out first: the fault is reported, not lost
        }
        Release();
    }

    private void OnTimerFired()
    {
        // The IsCompleted check only saves allocating an exception that would lose; the core's CAS still decides.
        if (_timer.OnFired(out Exception? stopped) && !_core.IsCompleted)
        {
            // stopped: the wheel was disposed, and the wait completes as canceled, as the wheel's pending delays do.
            _core.TrySetException(stopped ?? TimerWheel.NewTimeoutException(_timeout));
        }
        Release();
    }

    private void Release()
    {
        if (Interlocked.Decrement(ref _holds) == 0)
        {
            _timer = default;
            _input = null;
            _core.ClearForPool();
            ObjectPool<TimeoutSource<T>>.Return(this);
        }
    }

    public T GetResult(short token)
    {
        T result = _core.Consume(token, this, out ExceptionDispatchInfo? error);
        Release();
        error?.Throw();
        return result;
    }

    void IValueTaskSource.GetResult(short token) => GetResult(token);

    public SpindleTaskStatus GetStatus(short token) => _core.GetStatus(token);

    ValueTaskSourceStatus IValueTaskSource.GetStatus(short token) => (ValueTaskSourceStatus)_core.GetStatus(token);

    ValueTaskSourceStatus IValueTaskSource<T>.GetStatus(short token) => (ValueTaskSourceStatus)_core.GetStatus(token);

    public void OnCompleted(Action<object?> continuation, object? state, short token) => _core.OnCompleted(continuation, state, token);

    public void OnCompleted(Action<object?> continuation, object? state, short token, ValueTaskSourceOnCompletedFlags flags)
        => _core.OnCompleted(continuation, state, token, flags);
}

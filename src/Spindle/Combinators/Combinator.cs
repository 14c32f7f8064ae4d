using System;
using System.Collections.Generic;
using System.Runtime.ExceptionServices;
using System.Threading;
using System.Threading.Tasks;
using System.Threading.Tasks.Sources;

namespace SpindleLib;

/// <summary>
/// What every combinator shares: one pooled slot per input (the state each input's continuation carries, kept across
/// uses), registration on Spindle and BCL inputs, and the reference count that decides when the combinator may return
/// to its pool. See <see cref="Combinator{TResult}"/> for the protocol.
/// </summary>
internal abstract class CombinatorCore
{
    private Slot[] _slots = Array.Empty<Slot>();
    protected int _references;
    protected int _count;

    protected Slot[] Slots => _slots;

    /// <summary>Prepares for <paramref name="count"/> inputs: one reference per input, plus the consumer's.</summary>
    protected void Prepare(int count)
    {
        _references = count + 1;
        _count = count;
        if (_slots.Length < count)
        {
            var slots = new Slot[Math.Max(count, _slots.Length * 2)];
            Array.Copy(_slots, slots, _slots.Length);
            for (int i = _slots.Length; i < slots.Length; i++)
            {
                slots[i] = new Slot(this, i);
            }
            _slots = slots;
        }
    }

    /// <summary>Registers input <paramref name="index"/>, a Spindle task.</summary>
    public void Add(int index, ISpindleSource source, short token)
    {
        Slot slot = _slots[index];
        slot.Error = null;
        slot.Source = source;
        slot.Token = token;
        source.OnCompleted(Slot.s_onSpindleCompleted, slot, token);
    }

    /// <summary>Registers input <paramref name="index"/>, a BCL task.</summary>
    public void Add(int index, Task task)
    {
        Slot slot = _slots[index];
        slot.Error = null;
        slot.Task = task;
        // An Action cached in the slot for its whole pooled life: the BCL stores it as the task's continuation, no allocation.
        task.ConfigureAwait(false).GetAwaiter().UnsafeOnCompleted(slot.TaskContinuation);
    }

    /// <summary>An input finished: read it (exactly once) and account for it.</summary>
    protected abstract void OnInputCompleted(Slot slot);

    /// <summary>Called when the last reference is dropped: clear and return to the pool.</summary>
    protected abstract void Recycle();

    protected void Release()
    {
        if (Interlocked.Decrement(ref _references) == 0)
        {
            Recycle();
        }
    }

    /// <summary>Reads an untyped input (a void Spindle task or a BCL task); returns its failure, if any.</summary>
    protected static ExceptionDispatchInfo? ReadUntyped(Slot slot)
    {
        try
        {
            if (slot.Task is { } task)
            {
                task.GetAwaiter().GetResult();
            }
            else
            {
                slot.Source!.GetResult(slot.Token);
            }
            return null;
        }
        catch (Exception ex)
        {
            return ExceptionDispatchInfo.Capture(ex);
        }
        finally
        {
            slot.Source = null;
            slot.Task = null;
        }
    }

    /// <summary>A losing input's failure is not rethrown, but it is never lost either.</summary>
    protected static void ReportLoser(ExceptionDispatchInfo? error)
    {
        if (error is not null && error.SourceException is not OperationCanceledException)
        {
            UnobservedExceptions.Report(error.SourceException);
        }
    }

    /// <summary>One input's registration: the state every input's continuation carries, kept with the combinator.</summary>
    internal sealed class Slot
    {
        public static readonly Action<object?> s_onSpindleCompleted = static o => ((Slot)o!).Complete();

        public readonly CombinatorCore Owner;
        public readonly int Index;
        public readonly Action TaskContinuation;
        public ISpindleSource? Source;
        public short Token;
        public Task? Task;
        public ExceptionDispatchInfo? Error;

        public Slot(CombinatorCore owner, int index)
        {
            Owner = owner;
            Index = index;
            TaskContinuation = Complete;
        }

        private void Complete() => Owner.OnInputCompleted(this);
    }
}

/// <summary>
/// The one mechanism behind every WhenAll and WhenAny, for any number of inputs: a pooled object that is the source of
/// the combined task and registers one pooled slot per input. Nothing is allocated per call in steady state, whatever
/// the count.
/// </summary>
/// <remarks>
/// <para><b>Lifetime.</b> The reference count (<c>_references</c>, in <see cref="CombinatorCore"/>) counts the inputs still running plus one for the consumer of the
/// combined task. Each input's completion drops one; reading the combined result drops the consumer's. The object
/// returns to its pool only at zero, so a WhenAny whose losers finish late is recycled only after the last of them.</para>
/// <para><b>Outcome.</b> For WhenAny, the first input to finish wins a CAS on <see cref="_winner"/> (a later input reads
/// it first and skips the CAS once the race is decided); its result (or exception) becomes the combined outcome. For
/// WhenAll, the same counter decides: the input whose completion brings it down to 1 (only the consumer's reference
/// left) is the last one, and completes the combined task. If inputs failed, it rethrows the failure of the lowest
/// index, as the BCL's <c>await Task.WhenAll(...)</c> does: deterministic, whatever order the inputs finished in. Every input is read exactly once, by its slot, so
/// pooled inputs go back to their pools. A losing input's fault is reported to <see cref="Spindle.UnobservedException"/>:
/// it is not lost, and it is not rethrown.</para>
/// </remarks>
internal sealed class Combinator<TResult> : CombinatorCore, ISpindleSource<TResult>, IPoolNode<Combinator<TResult>>
{
    private SourceCore<TResult> _core;
    private int _winner;
    private bool _isAny;
    private CancellationTokenRegistration _registration;
    private CancellationToken _cancelToken;

#if NET
    private static readonly Action<object?, CancellationToken> s_cancel = static (o, ct) => ((Combinator<TResult>)o!).Cancel(ct);
#else
    private static readonly Action<object?> s_cancel = static o => ((Combinator<TResult>)o!).Cancel(default);
#endif
    private Combinator<TResult>? _poolNext;

    ref Combinator<TResult>? IPoolNode<Combinator<TResult>>.Next => ref _poolNext;

    public short Version => _core.Version;

    public static Combinator<TResult> Rent(bool isAny, int count)
    {
        Combinator<TResult> c = ObjectPool<Combinator<TResult>>.TryRent() ?? new Combinator<TResult>();
        c._isAny = isAny;
        c._winner = -1;
        c.Prepare(count);
        return c;
    }

    /// <summary>
    /// Lets <paramref name="cancellationToken"/> cancel the combined task (not the inputs, which are still read when they
    /// finish). Called after the inputs are registered; the registration is removed when the combined task completes.
    /// </summary>
    public void CancelWith(CancellationToken cancellationToken)
    {
        if (!cancellationToken.CanBeCanceled)
        {
            return;
        }
        _cancelToken = cancellationToken;
#if NET
        _registration = cancellationToken.UnsafeRegister(s_cancel, this);
#else
        _registration = cancellationToken.Register(s_cancel, this);
#endif
    }

    private void Cancel(CancellationToken cancellationToken)
    {
#if NET
        // A callback still running from an earlier use of this pooled object must not cancel this use.
        if (cancellationToken != _cancelToken)
        {
            return;
        }
#endif
        _core.TrySetCanceled(cancellationToken);
    }

    private void DropRegistration() => CancellationRegistrations.Drop(ref _registration);

    /// <summary>Completes the combined task, unless cancellation got there first; then a failure is reported, not lost.</summary>
    private void Complete(ExceptionDispatchInfo? error, TResult result)
    {
        bool set = error is null ? _core.TrySetResult(result) : _core.TrySetException(error.SourceException);
        if (!set)
        {
            ReportLoser(error);
        }
    }

    protected override void OnInputCompleted(Slot slot)
    {
        // Read the input exactly once: this returns a pooled input to its pool and observes its exception.
        ExceptionDispatchInfo? error = ReadUntyped(slot);
        int index = slot.Index;

        if (_isAny)
        {
            if (Volatile.Read(ref _winner) == -1 && Interlocked.CompareExchange(ref _winner, index, -1) == -1)
            {
                // TResult is int for WhenAny: the JIT removes this box/unbox pair in the specialised code.
                Complete(error, error is null ? (TResult)(object)index : default!);
            }
            else
            {
                ReportLoser(error);
            }
        }
        else
        {
            slot.Error = error; // published to the last input by the interlocked decrement below
            int remaining = Interlocked.Decrement(ref _references);
            if (remaining > 1)
            {
                return;
            }
            // The last input. Normally the consumer's reference is still held (1); after a cancellation the consumer
            // may already have read the result and dropped it (0). Either way nothing else touches this object now.
            Slot[] slots = Slots;
            ExceptionDispatchInfo? first = null;
            for (int i = 0; i < _count && first is null; i++)
            {
                first = slots[i].Error;
            }
            bool set = first is null ? _core.TrySetResult(default!) : _core.TrySetException(first.SourceException);
            for (int i = 0; i < _count; i++)
            {
                if (!set)
                {
                    ReportLoser(slots[i].Error); // cancelled first: the failures are reported, not lost
                }
                slots[i].Error = null;
            }
            if (remaining == 0)
            {
                Recycle();
            }
            return;
        }
        Release();
    }

    protected override void Recycle()
    {
        // The registration must go before the object is reused; Unregister does not wait for a callback in flight,
        // which Cancel's token check makes harmless.
        DropRegistration();
        _cancelToken = default;
        _core.ClearForPool();
        ObjectPool<Combinator<TResult>>.Return(this);
    }

    public TResult GetResult(short token)
    {
        TResult result = _core.Consume(token, this, out ExceptionDispatchInfo? error);
        DropRegistration(); // the wait is over: nothing stays registered behind it, even while losers still run
        Release();
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

/// <summary>
/// WhenAny over typed Spindle tasks: as <see cref="Combinator{TResult}"/> for WhenAny, but the winner's result is read
/// and returned with its index.
/// </summary>
internal sealed class ValueAnyCombinator<T> : CombinatorCore, ISpindleSource<(int Index, T Result)>, IPoolNode<ValueAnyCombinator<T>>
{
    private SourceCore<(int Index, T Result)> _core;
    private int _winner;
    private ValueAnyCombinator<T>? _poolNext;

    ref ValueAnyCombinator<T>? IPoolNode<ValueAnyCombinator<T>>.Next => ref _poolNext;

    public short Version => _core.Version;

    public static ValueAnyCombinator<T> Rent(int count)
    {
        ValueAnyCombinator<T> c = ObjectPool<ValueAnyCombinator<T>>.TryRent() ?? new ValueAnyCombinator<T>();
        c._winner = -1;
        c.Prepare(count);
        return c;
    }

    protected override void OnInputCompleted(Slot slot)
    {
        T value = default!;
        ExceptionDispatchInfo? error = null;
        try
        {
            value = ((ISpindleSource<T>)slot.Source!).GetResult(slot.Token);
        }
        catch (Exception ex)
        {
            error = ExceptionDispatchInfo.Capture(ex);
        }
        slot.Source = null;
        int index = slot.Index;
        if (Volatile.Read(ref _winner) == -1 && Interlocked.CompareExchange(ref _winner, index, -1) == -1)
        {
            if (error is not null)
            {
                _core.TrySetException(error.SourceException);
            }
            else
            {
                _core.TrySetResult((index, value));
            }
        }
        else
        {
            ReportLoser(error);
        }
        Release();
    }

    protected override void Recycle()
    {
        _core.ClearForPool();
        ObjectPool<ValueAnyCombinator<T>>.Return(this);
    }

    public (int Index, T Result) GetResult(short token)
    {
        (int, T) result = _core.Consume(token, this, out ExceptionDispatchInfo? error);
        Release();
        error?.Throw();
        return result;
    }

    void IValueTaskSource.GetResult(short token) => GetResult(token);

    public SpindleTaskStatus GetStatus(short token) => _core.GetStatus(token);

    ValueTaskSourceStatus IValueTaskSource.GetStatus(short token) => (ValueTaskSourceStatus)_core.GetStatus(token);

    ValueTaskSourceStatus IValueTaskSource<(int Index, T Result)>.GetStatus(short token) => (ValueTaskSourceStatus)_core.GetStatus(token);

    public void OnCompleted(Action<object?> continuation, object? state, short token) => _core.OnCompleted(continuation, state, token);

    public void OnCompleted(Action<object?> continuation, object? state, short token, ValueTaskSourceOnCompletedFlags flags)
        => _core.OnCompleted(continuation, state, token, flags);
}

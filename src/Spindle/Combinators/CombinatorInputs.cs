using System;
using System.Collections.Generic;
using System.Collections.ObjectModel;
using System.Diagnostics;
using System.Runtime.CompilerServices;
using System.Runtime.ExceptionServices;
using System.Threading.Tasks;
using System.Threading.Tasks.Sources;

namespace SpindleLib;

/// <summary>
/// What the shared combinator code (<see cref="Combine"/>) needs to know about one kind of input. Implemented by empty
/// structs, so that the JIT compiles the shared code once per kind, with these calls inlined.
/// </summary>
/// <typeparam name="TInput">The input: a Spindle task, a BCL task or a ValueTask.</typeparam>
/// <typeparam name="TValue">What reading it gives: its result, or <see cref="VoidResult"/>.</typeparam>
internal interface IInputKind<TInput, TValue>
{
    /// <summary>True for a null reference (a BCL task): rejected, naming its index.</summary>
    bool IsNull(TInput input);

    /// <summary>True once the input has finished. Never consumes it (a stale Spindle task throws the await-once error).</summary>
    bool IsCompleted(TInput input);

    /// <summary>
    /// Reads a completed input, consuming it; its failure goes to <paramref name="error"/>, read quietly from a Spindle
    /// source (<see cref="IQuietSource"/>), caught from a BCL task's awaiter (the only way to read it as an await would).
    /// </summary>
    TValue Read(TInput input, out ExceptionDispatchInfo? error);

    /// <summary>True when a pending input can be left to finish with nobody waiting (a fault then reported) without a combinator.</summary>
    bool ForgetsPending { get; }

    /// <summary>
    /// Observes a losing input, in the cheapest way its kind allows: its result is dropped, and a fault (not a
    /// cancellation) is reported to <see cref="Spindle.UnobservedException"/>, now or when it finishes. The input must have
    /// finished unless the kind <see cref="ForgetsPending"/>. A pending Spindle input whose source allows it is abandoned
    /// instead, as a WhenAny detaches from its losers: a promise can then be reset, a signal waited on again.
    /// </summary>
    void Forget(TInput input);

    /// <summary>Registers the input as input <paramref name="index"/> of <paramref name="combinator"/>.</summary>
    void Add(CombinatorCore combinator, int index, TInput input);

    /// <summary>True for the kinds whose inputs may have a Spindle source (<see cref="SourceOf"/>): a constant, so the repeat check costs other kinds nothing.</summary>
    bool HasSources { get; }

    /// <summary>The input's Spindle source and token, by which a repeated input is recognised; null for an input without one (a task finished without a source, a BCL task).</summary>
    ISpindleSource? SourceOf(TInput input, out short token);

    /// <summary>
    /// True when <paramref name="input"/> and <paramref name="other"/> are the same completion, passed twice (a task a read
    /// does not consume: a promise's, a preserved one, a BCL task): a WhenAny settled by one copy has no other loser to
    /// report in the second. False for inputs a read consumes, which are never the same completion twice (a ValueTask).
    /// </summary>
    bool IsSameCompletion(TInput input, TInput other);
}

/// <summary>
/// Reads a finished BCL task or ValueTask through its awaiter, as an await would (the same exception object, a canceled
/// task's <see cref="TaskCanceledException"/> included), catching what it throws.
/// </summary>
[StackTraceHidden]
internal static class BclRead
{
    /// <summary>
    /// The exceptions of faulted BCL tasks that hold several (a <c>Task.WhenAll</c>'s), keyed by the failure a read
    /// captured, which is the first of them, as the task's await throws it. A WhenAll that aggregates gives every one,
    /// as <c>Task.WhenAll</c> does, and a losing input's are all reported: none is lost. Weak: an entry goes with its
    /// failure. Only tasks with several exceptions are entered, so the usual failure costs no lookup entry.
    /// </summary>
    private static readonly ConditionalWeakTable<ExceptionDispatchInfo, ReadOnlyCollection<Exception>> s_several = new();

    /// <summary>
    /// The failure of finished task <paramref name="task"/> (null: not a BCL task), whose await threw
    /// <paramref name="thrown"/>, with the rest of its exceptions kept for <see cref="AllOf"/>.
    /// </summary>
    public static ExceptionDispatchInfo Failure(Task? task, Exception thrown)
    {
        var error = ExceptionDispatchInfo.Capture(thrown);
        if (task is { IsFaulted: true } && task.Exception!.InnerExceptions is { Count: > 1 } all && ReferenceEquals(all[0], thrown))
        {
            s_several.AddOrUpdate(error, all);
        }
        return error;
    }

    /// <summary>Every exception of the BCL task behind <paramref name="error"/>, if it held several; else null.</summary>
    public static IReadOnlyList<Exception>? AllOf(ExceptionDispatchInfo error)
        => s_several.TryGetValue(error, out ReadOnlyCollection<Exception>? all) ? all : null;

    public static ExceptionDispatchInfo? Read(Task input) => Read(new ValueTask(input), input);

    public static T Read<T>(Task<T> input, out ExceptionDispatchInfo? error) => Read(new ValueTask<T>(input), input, out error);

    /// <summary>Reads <paramref name="input"/>, which wraps <paramref name="task"/> if it is a task's (null otherwise).</summary>
    public static ExceptionDispatchInfo? Read(ValueTask input, Task? task = null)
    {
        try
        {
            input.GetAwaiter().GetResult();
            return null;
        }
        catch (Exception ex)
        {
            return Failure(task, ex);
        }
    }

    /// <summary>As <see cref="Read(ValueTask, Task?)"/>, keeping the result.</summary>
    public static T Read<T>(ValueTask<T> input, Task? task, out ExceptionDispatchInfo? error)
    {
        try
        {
            error = null;
            return input.GetAwaiter().GetResult();
        }
        catch (Exception ex)
        {
            error = Failure(task, ex);
            return default!;
        }
    }
}

/// <summary>
/// Finds the Spindle source behind a ValueTask input whose read failed, so that the report of its fault is claimed as
/// the same completion's is through its Spindle task (<see cref="FaultReport.Claim"/>): a promise's task passed as a
/// ValueTask (<c>promise.Task</c> converts implicitly, or <c>AsValueTask()</c>) is the promise's completion, which a
/// <c>Forget()</c> of the task, or another combinator over it, may report too.
/// </summary>
/// <remarks>
/// A ValueTask exposes its source and token only through its internals, but its awaiter's read calls the source's
/// <c>IValueTaskSource.GetResult</c>. So, while a combinator reads a ValueTask here, a source a read does not consume
/// (<see cref="IRereadableSource"/>) that throws its failure names itself and its token (<see cref="Note"/>, on the
/// failure path only, and only while asked). The name is taken only if the ValueTask is exactly one made from that
/// source and token (a ValueTask's equality compares its source object and token, never its internals otherwise), so
/// a name left by any other read (a nested one, or a user's IValueTaskSource that reads a promise inside its own
/// GetResult) is never taken for another input's. A ValueTask made from a BCL Task, or from a source a read consumes
/// (an async method's, read once), has no origin: its fault is reported as it was.
/// </remarks>
internal static class ValueTaskOrigin
{
    [ThreadStatic]
    private static Asked? t_asked;

    /// <summary>One per thread: whether a combinator's read is asking, and the source named by the read's failure.</summary>
    private sealed class Asked
    {
        public bool Asking;
        public IRereadableSource? Source;
        public short Token;
    }

    /// <summary>
    /// A source a read does not consume is about to throw the failure of use <paramref name="token"/> to its reader: if
    /// that reader is a combinator reading a ValueTask (<see cref="Read"/>), it names the source. Failure path only.
    /// </summary>
    public static void Note(IRereadableSource source, short token)
    {
        if (t_asked is { Asking: true } asked)
        {
            asked.Source = source;
            asked.Token = token;
        }
    }

    /// <summary>
    /// Reads finished <paramref name="input"/> as <see cref="BclRead.Read(ValueTask, Task?)"/> does; a failure comes with
    /// its <paramref name="origin"/> (the Spindle source behind the ValueTask, use <paramref name="token"/>) when the
    /// source is one a read does not consume; else null.
    /// </summary>
    public static ExceptionDispatchInfo? Read(ValueTask input, out object? origin, out short token)
    {
        Asked asked = Begin(out bool outer);
        try
        {
            input.GetAwaiter().GetResult();
            origin = null;
            token = 0;
            return null;
        }
        catch (Exception ex)
        {
            origin = asked.Source is IValueTaskSource named && input.Equals(new ValueTask(named, asked.Token)) ? named : null;
            token = origin is null ? (short)0 : asked.Token;
            return BclRead.Failure(null, ex);
        }
        finally
        {
            End(asked, outer);
        }
    }

    /// <summary>As <see cref="Read(ValueTask, out object?, out short)"/>, keeping the result.</summary>
    public static T Read<T>(ValueTask<T> input, out ExceptionDispatchInfo? error, out object? origin, out short token)
    {
        Asked asked = Begin(out bool outer);
        try
        {
            T result = input.GetAwaiter().GetResult();
            error = null;
            origin = null;
            token = 0;
            return result;
        }
        catch (Exception ex)
        {
            origin = asked.Source is IValueTaskSource<T> named && input.Equals(new ValueTask<T>(named, asked.Token)) ? named : null;
            token = origin is null ? (short)0 : asked.Token;
            error = BclRead.Failure(null, ex);
            return default!;
        }
        finally
        {
            End(asked, outer);
        }
    }

    private static Asked Begin(out bool outer)
    {
        Asked asked = t_asked ??= new Asked();
        outer = asked.Asking; // a read nested in this one's (a source that helps while it blocks) restores it
        asked.Asking = true;
        asked.Source = null;
        return asked;
    }

    private static void End(Asked asked, bool outer)
    {
        asked.Asking = outer;
        asked.Source = null; // holds nothing once the read is over
    }
}

/// <summary>What the two Spindle input kinds share.</summary>
internal static class SpindleInputs
{
    /// <summary>
    /// Both kinds' <c>Forget</c>: a loser that finished without a source (a result, a completed task) has nothing to let
    /// go of or to observe; any other is let go of (<see cref="TryLetGo"/>) or, failing that, forgotten (read, and a fault
    /// reported, when it finishes).
    /// </summary>
    public static void LetGoOrForget(ISpindleSource? source, short token)
    {
        if (source is not null && !TryLetGo(source, token))
        {
            ForgetObserver.Observe(source, token);
        }
    }

    /// <summary>
    /// Lets go of a losing input of a WhenAny settled without a combinator: abandons it if it is pending and its source
    /// allows (<see cref="IDetachableSource.TryAbandon"/>). A signal's wait that completed since the inputs were scanned (a
    /// set landed as the race was settled) is read now, and a set it took is given back to the signal, as a combinator
    /// gives back the sets its losers took (<see cref="CombinatorCore.GiveBackSet"/>): a set reaches the caller or is kept, never lost.
    /// False for any other input, which the caller forgets (it is read, and a fault reported, when it finishes).
    /// </summary>
    public static bool TryLetGo(ISpindleSource? source, short token)
    {
        if (source is not IDetachableSource detachable)
        {
            return false;
        }
        if (detachable.TryAbandon(token))
        {
            return true;
        }
#if DEBUG
        TestHookAfterAbandonFailed?.Invoke(source);
#endif
        if (source is not Signal signal)
        {
            return false;
        }
        // The wait has completed, or is completing (a set, its timeout or its token won the core's CAS): the read waits for
        // a completion in progress, a few stores away. WhenAny holds the wait (its caller handed it over), so the signal
        // cannot have moved on to another. The read tells what ended the wait: a set (true), or its timeout (false). Or it
        // is still pending and already awaited elsewhere (the caller's error): the read's registration is refused with the
        // await-once error, which goes to the caller, as for any other input awaited elsewhere, and the wait stays its
        // awaiter's. (A read that caught it returned the finished input as the winner, and reported the caller's error.)
        bool tookSet = signal.ReadLosingWait(token, out ExceptionDispatchInfo? error);
        if (error is not null)
        {
            CombinatorCore.ReportLoser(error); // a cancellation, which is not reported
        }
        else if (tookSet)
        {
            // Nothing is held here, and the combined task is not published yet: kept before the caller sees it. The wait's
            // version moves on with it, so a second copy of the wait among the inputs (the caller's misuse) cannot be read
            // as the winner that took the same set. Unless the set has reached somebody already: a waiter elsewhere that
            // it resumed (the caller's misuse), or a read of the wait (the caller's, before the call, or another thread's
            // at this instant). The set is theirs then, and is not given back a second time.
            signal.GiveBackSet(token, readByCaller: false);
        }
        return true;
    }

#if DEBUG
    /// <summary>
    /// Tests only: runs on the letting-go thread when a losing input of a WhenAny settled at the call could not be
    /// abandoned (it had an awaiter, or had finished), before it is read or forgotten: the window in which a set or a
    /// misused read from elsewhere meets the let-go.
    /// </summary>
    internal static Action<ISpindleSource>? TestHookAfterAbandonFailed;
#endif
}

internal readonly struct SpindleInput : IInputKind<SpindleTask, VoidResult>
{
    public bool IsNull(SpindleTask input) => false;

    public bool IsCompleted(SpindleTask input) => input.IsCompleted;

    public VoidResult Read(SpindleTask input, out ExceptionDispatchInfo? error)
    {
        error = input._source is { } source ? QuietRead.Read(source, input._token) : null;
        return default;
    }

    public bool ForgetsPending => true;

    public void Forget(SpindleTask input) => SpindleInputs.LetGoOrForget(input._source, input._token);

    public void Add(CombinatorCore combinator, int index, SpindleTask input) => combinator.Add(index, input);

    public bool HasSources => true;

    public ISpindleSource? SourceOf(SpindleTask input, out short token)
    {
        token = input._token;
        return input._source;
    }

    public bool IsSameCompletion(SpindleTask input, SpindleTask other)
        => input._source is { } source && source == other._source && input._token == other._token;
}

internal readonly struct SpindleInput<T> : IInputKind<SpindleTask<T>, T>
{
    public bool IsNull(SpindleTask<T> input) => false;

    public bool IsCompleted(SpindleTask<T> input) => input.IsCompleted;

    public T Read(SpindleTask<T> input, out ExceptionDispatchInfo? error)
    {
        if (input._source is { } source)
        {
            return QuietRead.Read(source, input._token, out error);
        }
        error = null;
        return input._result;
    }

    public bool ForgetsPending => true;

    public void Forget(SpindleTask<T> input) => SpindleInputs.LetGoOrForget(input._source, input._token);

    public void Add(CombinatorCore combinator, int index, SpindleTask<T> input) => combinator.Add(index, input);

    public bool HasSources => true;

    public ISpindleSource? SourceOf(SpindleTask<T> input, out short token)
    {
        token = input._token;
        return input._source;
    }

    public bool IsSameCompletion(SpindleTask<T> input, SpindleTask<T> other)
        => input._source is { } source && source == other._source && input._token == other._token;
}

internal readonly struct TaskInput : IInputKind<Task, VoidResult>
{
    public bool IsNull(Task input) => input is null;

    public bool IsCompleted(Task input) => input.IsCompleted;

    public VoidResult Read(Task input, out ExceptionDispatchInfo? error)
    {
        error = input.IsCompletedSuccessfully ? null : BclRead.Read(input);
        return default;
    }

    /// <summary>A pending BCL task could only be observed with an allocated continuation: the combinator does it instead.</summary>
    public bool ForgetsPending => false;

    public void Forget(Task input) => ForgetTask(input);

    /// <summary>A finished BCL task is read only if it failed (reading its Exception marks it observed); it stays readable.</summary>
    internal static void ForgetTask(Task input)
    {
        Debug.Assert(input.IsCompleted, "a pending BCL task goes to a combinator");
        if (input.IsFaulted && FaultReport.Claim(input, 0)) // once per task: it may be passed twice, or lost by another combinator
        {
            foreach (Exception e in input.Exception!.InnerExceptions)
            {
                CombinatorCore.ReportLoser(e); // every one: a Task.WhenAll's may hold several
            }
        }
    }

    public void Add(CombinatorCore combinator, int index, Task input) => combinator.Add(index, input);

    public bool HasSources => false;

    public ISpindleSource? SourceOf(Task input, out short token)
    {
        token = 0;
        return null;
    }

    public bool IsSameCompletion(Task input, Task other) => input == other;
}

internal readonly struct TaskInput<T> : IInputKind<Task<T>, T>
{
    public bool IsNull(Task<T> input) => input is null;

    public bool IsCompleted(Task<T> input) => input.IsCompleted;

    public T Read(Task<T> input, out ExceptionDispatchInfo? error)
    {
        if (input.IsCompletedSuccessfully)
        {
            error = null;
            return input.Result; // does not block or throw once completed successfully
        }
        return BclRead.Read(input, out error);
    }

    public bool ForgetsPending => false;

    public void Forget(Task<T> input) => TaskInput.ForgetTask(input);

    public void Add(CombinatorCore combinator, int index, Task<T> input) => combinator.Add(index, input);

    public bool HasSources => false;

    public ISpindleSource? SourceOf(Task<T> input, out short token)
    {
        token = 0;
        return null;
    }

    public bool IsSameCompletion(Task<T> input, Task<T> other) => input == other;
}

internal readonly struct ValueTaskInput : IInputKind<ValueTask, VoidResult>
{
    public bool IsNull(ValueTask input) => false;

    public bool IsCompleted(ValueTask input) => input.IsCompleted;

    public VoidResult Read(ValueTask input, out ExceptionDispatchInfo? error)
    {
        error = BclRead.Read(input);
        return default;
    }

    /// <summary>A pending ValueTask must be read exactly once when it finishes: only a combinator's slot can do that without allocating.</summary>
    public bool ForgetsPending => false;

    /// <summary>
    /// Reads a finished losing input exactly once, even on success: that is what releases a pooled source. A fault is
    /// reported, a cancellation is not; once per completion when the ValueTask was made from a source a read does not
    /// consume (a promise's task: <see cref="ValueTaskOrigin"/>), which a Forget() of that task may report too.
    /// </summary>
    public void Forget(ValueTask input)
    {
        Debug.Assert(input.IsCompleted, "a pending input goes to a combinator");
        ExceptionDispatchInfo? error = ValueTaskOrigin.Read(input, out object? origin, out short token);
        CombinatorCore.ReportLoserOnce(error, origin, token);
    }

    public void Add(CombinatorCore combinator, int index, ValueTask input) => combinator.Add(index, input);

    public bool HasSources => false;

    public ISpindleSource? SourceOf(ValueTask input, out short token)
    {
        token = 0;
        return null;
    }

    public bool IsSameCompletion(ValueTask input, ValueTask other) => false; // read once: a second copy is the caller's misuse, read as before
}

internal readonly struct ValueTaskInput<T> : IInputKind<ValueTask<T>, T>
{
    public bool IsNull(ValueTask<T> input) => false;

    public bool IsCompleted(ValueTask<T> input) => input.IsCompleted;

    public T Read(ValueTask<T> input, out ExceptionDispatchInfo? error) => BclRead.Read(input, null, out error);

    public bool ForgetsPending => false;

    /// <summary>As <see cref="ValueTaskInput.Forget"/>.</summary>
    public void Forget(ValueTask<T> input)
    {
        Debug.Assert(input.IsCompleted, "a pending input goes to a combinator");
        ValueTaskOrigin.Read(input, out ExceptionDispatchInfo? error, out object? origin, out short token);
        CombinatorCore.ReportLoserOnce(error, origin, token);
    }

    public void Add(CombinatorCore combinator, int index, ValueTask<T> input) => combinator.Add(index, input);

    public bool HasSources => false;

    public ISpindleSource? SourceOf(ValueTask<T> input, out short token)
    {
        token = 0;
        return null;
    }

    public bool IsSameCompletion(ValueTask<T> input, ValueTask<T> other) => false; // read once: a second copy is the caller's misuse, read as before
}

using System;
using System.Buffers;
using System.Collections.Generic;
using System.Runtime.CompilerServices;
using System.Runtime.ExceptionServices;
using System.Runtime.InteropServices;
using System.Threading;

namespace SpindleLib;

/// <summary>
/// The shared code behind every public WhenAll and WhenAny: validation, the fast paths for inputs that have already
/// finished, and registration with a pooled <see cref="Combinator{TResult}"/>. Generic over the kind of input
/// (<see cref="IInputKind{TInput, TValue}"/>), so each public overload is one line.
/// </summary>
internal static class Combine
{
    private const string NoInputMessage = "WhenAny needs at least one task: with none, nothing could ever complete it.";

    /// <summary>WhenAll with no result.</summary>
    public static SpindleTask All<TInput, TKind>(ReadOnlySpan<TInput> tasks, WhenAllOptions options, CancellationToken cancellationToken)
        where TKind : struct, IInputKind<TInput, VoidResult>
    {
        if (AllCompleted<TInput, VoidResult, TKind>(tasks, cancellationToken, out int withSource))
        {
            RejectRepeats<TInput, VoidResult, TKind>(tasks, withSource);
            ExceptionDispatchInfo? failure = ReadAll<TInput, VoidResult, TKind>(tasks, Span<VoidResult>.Empty, options.AggregateExceptions);
            return failure is null ? default : SpindleTask.FromFailure(failure);
        }
        var c = Combinator<VoidResult>.RentAll(tasks.Length, options, compose: null);
        return c.ToVoidTask(AddAll<TInput, VoidResult, TKind, VoidResult>(c, tasks, cancellationToken));
    }

    /// <summary>WhenAll whose result is a new array of the inputs' results.</summary>
    public static SpindleTask<T[]> AllValues<TInput, T, TKind>(ReadOnlySpan<TInput> tasks, WhenAllOptions options, CancellationToken cancellationToken)
        where TKind : struct, IInputKind<TInput, T>
    {
        if (AllCompleted<TInput, T, TKind>(tasks, cancellationToken, out int withSource))
        {
            RejectRepeats<TInput, T, TKind>(tasks, withSource);
            T[] values = tasks.IsEmpty ? Array.Empty<T>() : new T[tasks.Length];
            ExceptionDispatchInfo? failure = ReadAll<TInput, T, TKind>(tasks, values, options.AggregateExceptions);
            return failure is null ? new SpindleTask<T[]>(values) : SpindleTask.FromFailure<T[]>(failure);
        }
        var c = Combinator<T[]>.RentAll(tasks.Length, options, CombinedResults<T>.Array);
        return c.ToTask(AddAll<TInput, T, TKind, T[]>(c, tasks, cancellationToken));
    }

    /// <summary>WhenAll that writes the inputs' results into the caller's buffer.</summary>
    public static SpindleTask AllInto<TInput, T, TKind>(ReadOnlySpan<TInput> tasks, Memory<T> destination, WhenAllOptions options, CancellationToken cancellationToken)
        where TKind : struct, IInputKind<TInput, T>
    {
        if (destination.Length < tasks.Length)
        {
            throw new ArgumentException(
                $"The destination has room for {destination.Length} results, but there are {tasks.Length} tasks. " +
                "Pass a destination at least as long as the input: result i is written to element i.",
                nameof(destination));
        }
        if (AllCompleted<TInput, T, TKind>(tasks, cancellationToken, out int withSource))
        {
            RejectRepeats<TInput, T, TKind>(tasks, withSource);
            ExceptionDispatchInfo? failure = ReadAll<TInput, T, TKind>(tasks, destination.Span, options.AggregateExceptions);
            return failure is null ? default : SpindleTask.FromFailure(failure);
        }
        var c = Combinator<Memory<T>>.RentAll(tasks.Length, options, CombinedResults<T>.Into, destination);
        return c.ToVoidTask(AddAll<TInput, T, TKind, Memory<T>>(c, tasks, cancellationToken));
    }

    /// <summary>
    /// <c>TryWithTimeout</c>: a WhenAll of the one input <paramref name="task"/> on a combinator whose timeout is an outcome,
    /// not a failure (<see cref="Combinator{TResult}.RentTimeoutAsResult"/>), its result built by <paramref name="compose"/>.
    /// A pending input is bounded by the timeout in <paramref name="options"/> (none: no timer) and by the token; one that
    /// has already finished is read with neither, so its own outcome is the result whatever the token, as
    /// <c>WithTimeout</c> returns such a task as it is.
    /// </summary>
    /// <exception cref="InvalidOperationException">The input was already awaited (the await-once error: before anything is rented), or is being awaited elsewhere.</exception>
    public static SpindleTask<TResult> OneTimeoutAsResult<TInput, TValue, TKind, TResult>(
        TInput task,
        WhenAllOptions options,
        CancellationToken cancellationToken,
        Func<Combinator<TResult>, TResult> compose)
        where TKind : struct, IInputKind<TInput, TValue>
    {
        bool pending = !default(TKind).IsCompleted(task);
        var c = Combinator<TResult>.RentTimeoutAsResult(pending ? options : default, compose);
        return c.ToTask(AddAll<TInput, TValue, TKind, TResult>(c, MemoryMarshal.CreateReadOnlySpan(ref task, 1), pending ? cancellationToken : default));
    }

    /// <summary>WhenAny whose result is the winner's index.</summary>
    public static SpindleTask<int> Any<TInput, TKind>(ReadOnlySpan<TInput> tasks, CancellationToken cancellationToken)
        where TKind : struct, IInputKind<TInput, VoidResult>
        => Any<TInput, VoidResult, TKind, int>(tasks, cancellationToken, CombinedResults.WinnerOnly, CombinedResults.Winner);

    /// <summary>WhenAny whose result is the winner's index and result.</summary>
    public static SpindleTask<(int Index, T Result)> AnyValue<TInput, T, TKind>(ReadOnlySpan<TInput> tasks, CancellationToken cancellationToken)
        where TKind : struct, IInputKind<TInput, T>
        => Any<TInput, T, TKind, (int, T)>(tasks, cancellationToken, CombinedResults<T>.FromWinner, CombinedResults<T>.WinnerAndValue);

    private static SpindleTask<TResult> Any<TInput, TValue, TKind, TResult>(
        ReadOnlySpan<TInput> tasks,
        CancellationToken cancellationToken,
        Func<int, TValue, TResult> fromWinner,
        Func<Combinator<TResult>, TResult> compose)
        where TKind : struct, IInputKind<TInput, TValue>
    {
        if (tasks.IsEmpty)
        {
            throw new ArgumentException(NoInputMessage, nameof(tasks));
        }
        // A losing Spindle task can be left to finish on its own (Forget), so the first finished input settles the race at
        // once: seed 002's fast path. Other kinds settle without a combinator only when all have finished, so that a
        // pending loser is still read exactly once, by a slot. Either way every input is validated first: settling lets go
        // of the losers (an async method is forgotten, a signal's wait ends, a delay leaves its wheel), so a stale input
        // found while letting go would throw with the inputs before it already taken from the caller.
        bool settleAtFirst = default(TKind).ForgetsPending && !cancellationToken.IsCancellationRequested;
        int completed = Scan<TInput, TValue, TKind>(tasks, out int first, out int withSource);
        if (first >= 0 && !cancellationToken.IsCancellationRequested && (settleAtFirst || completed == tasks.Length))
        {
            RejectRepeats<TInput, TValue, TKind>(tasks, withSource);
            return SettleNow<TInput, TValue, TKind, TResult>(tasks, first, fromWinner);
        }
        var c = Combinator<TResult>.RentAny(tasks.Length, compose);
        return c.ToTask(AddAll<TInput, TValue, TKind, TResult>(c, tasks, cancellationToken));
    }

    /// <summary>
    /// WhenAny over producers: the combinator owns the token it hands them, and cancels it as soon as one finishes.
    /// Producers are started in order; once the race is decided the rest are not started. A producer that throws is an
    /// input that failed at once.
    /// </summary>
    public static SpindleTask<TResult> AnyOfProducers<TInput, TValue, TKind, TResult>(
        ReadOnlySpan<Func<CancellationToken, TInput>> producers,
        CancellationToken cancellationToken,
        Func<Combinator<TResult>, TResult> compose)
        where TKind : struct, IInputKind<TInput, TValue>
    {
        if (producers.IsEmpty)
        {
            throw new ArgumentException("WhenAny needs at least one producer: with none, nothing could ever complete it.", nameof(producers));
        }
        for (int i = 0; i < producers.Length; i++)
        {
            if (producers[i] is null)
            {
                throw new ArgumentException(
                    $"The producer at index {i} is null. Every producer must be a delegate that starts a task with the token it is given.",
                    nameof(producers));
            }
        }
        if (cancellationToken.IsCancellationRequested)
        {
            return SpindleTask.FromCanceled<TResult>(cancellationToken); // nothing started, so nothing to cancel or observe
        }
        var c = Combinator<TResult>.RentAny(producers.Length, compose);
        CancellationToken producerToken = c.StartProducers();
        short token = c.Start(cancellationToken);
        int started = 0;
        while (started < producers.Length && c.TryStartProducer())
        {
            int index = started++;
            try
            {
                default(TKind).Add(c, index, producers[index](producerToken));
            }
            catch (Exception ex)
            {
                // The producer threw (or returned a task that was already consumed): this input failed at once.
                c.AddFailed(index, ex);
            }
        }
        c.ReleaseKept(producers.Length - started); // the producers never started (the race was decided first)
        return c.ToTask(token);
    }

    /// <summary>Validates every input and tells whether all have finished (and the wait is not already cancelled).</summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)] // BCL task inputs make the callers shared generic code: a call would need a dictionary lookup
    private static bool AllCompleted<TInput, TValue, TKind>(ReadOnlySpan<TInput> tasks, CancellationToken cancellationToken, out int withSource)
        where TKind : struct, IInputKind<TInput, TValue>
        => Scan<TInput, TValue, TKind>(tasks, out _, out withSource) == tasks.Length && !cancellationToken.IsCancellationRequested;

    /// <summary>
    /// Validates every input before any is consumed or let go of (a null one is rejected, naming its index; a Spindle task
    /// already consumed throws the await-once error), counts the finished ones, finds the first of them, and counts the
    /// inputs that have a Spindle source (for <see cref="RejectRepeats"/>, in the same pass).
    /// </summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)] // BCL task inputs make the callers shared generic code: a call would need a dictionary lookup
    private static int Scan<TInput, TValue, TKind>(ReadOnlySpan<TInput> tasks, out int firstCompleted, out int withSource)
        where TKind : struct, IInputKind<TInput, TValue>
    {
        firstCompleted = -1;
        withSource = 0;
        int completed = 0;
        for (int i = 0; i < tasks.Length; i++)
        {
            if (default(TKind).IsNull(tasks[i]))
            {
                throw NullInput(i);
            }
            if (default(TKind).HasSources && default(TKind).SourceOf(tasks[i], out _) is not null)
            {
                withSource++;
            }
            if (default(TKind).IsCompleted(tasks[i]) && completed++ == 0)
            {
                firstCompleted = i;
            }
        }
        return completed;
    }

    /// <summary>
    /// Before a path with no combinator reads or lets go of any input (every input finished, for a WhenAll; a WhenAny
    /// settled at once), rejects a Spindle task passed twice: its first read would consume it (a pooled source goes back
    /// to its pool) and the second read fail, so the misuse became the combined task's failure, or hid behind an earlier
    /// input's, with the inputs read meanwhile consumed. A task that a read does not consume (a promise's, a preserved
    /// one: <see cref="IRereadableSource"/>), and a task of a user's own source, may be passed twice, as before
    /// (<see cref="IsConsumedByARead"/>). The cost: a null test per input, in the
    /// scan that validates them (<see cref="Scan"/>: <paramref name="withSource"/>), and a search only when two or more
    /// inputs have a source (<see cref="FindRepeat"/>). The paths with a combinator need
    /// none: a repeated pending input's second registration is refused, and the combinator undoes what it took.
    /// </summary>
    /// <exception cref="InvalidOperationException">A Spindle task that a read consumes is passed more than once (the message names both indices); see <see cref="IsConsumedByARead"/>.</exception>
    [MethodImpl(MethodImplOptions.AggressiveInlining)] // BCL task inputs make the callers shared generic code: a call would need a dictionary lookup
    private static void RejectRepeats<TInput, TValue, TKind>(ReadOnlySpan<TInput> tasks, int withSource)
        where TKind : struct, IInputKind<TInput, TValue>
    {
        if (withSource > 1)
        {
            FindRepeat<TInput, TValue, TKind>(tasks);
        }
    }

    /// <summary>Up to this many inputs, a repeat is looked for pair by pair (at most 120 reference compares); past it, with a hash table.</summary>
    private const int PairwiseLimit = 16;

    /// <summary>
    /// Finds an input whose source and token are an earlier input's, and throws naming both. Pair by pair for a few
    /// inputs; past <see cref="PairwiseLimit"/>, through an open-addressing table of input indices (rented from the
    /// shared array pool and returned, so nothing is allocated in steady state), keyed by the source's identity hash
    /// and the token: linear in the input count. Only inputs a read consumes (<see cref="IsConsumedByARead"/>) are looked
    /// at or entered: copies of a task that may be passed many times never meet in the table.
    /// </summary>
    [MethodImpl(MethodImplOptions.NoInlining)]
    private static void FindRepeat<TInput, TValue, TKind>(ReadOnlySpan<TInput> tasks)
        where TKind : struct, IInputKind<TInput, TValue>
    {
        if (tasks.Length <= PairwiseLimit)
        {
            for (int i = 1; i < tasks.Length; i++)
            {
                ISpindleSource? source = default(TKind).SourceOf(tasks[i], out short token);
                if (source is null || !IsConsumedByARead(source))
                {
                    continue; // may be passed any number of times
                }
                for (int j = 0; j < i; j++)
                {
                    if (ReferenceEquals(default(TKind).SourceOf(tasks[j], out short other), source) && other == token)
                    {
                        throw RepeatedInput(i, j);
                    }
                }
            }
            return;
        }
        int bits = 5;
        while ((1 << bits) < 2 * tasks.Length)
        {
            bits++;
        }
        int mask = (1 << bits) - 1;
        int[] table = ArrayPool<int>.Shared.Rent(1 << bits); // entries: input index + 1; 0 is empty
        try
        {
            Array.Clear(table, 0, 1 << bits);
            for (int i = 0; i < tasks.Length; i++)
            {
                ISpindleSource? source = default(TKind).SourceOf(tasks[i], out short token);
                if (source is null || !IsConsumedByARead(source))
                {
                    // Not in the table: copies of one source that may be passed many times (a promise's task fanned out)
                    // share one key, and each would probe past all the copies before it (quadratic in their number).
                    continue;
                }
                int h = (int)(unchecked((uint)(RuntimeHelpers.GetHashCode(source) ^ (token << 16)) * 0x9E3779B1u) >> (32 - bits));
                while (true)
                {
                    int entry = table[h];
                    if (entry == 0)
                    {
                        table[h] = i + 1;
                        break;
                    }
#if DEBUG
                    TestHookRepeatProbe?.Invoke();
#endif
                    if (ReferenceEquals(default(TKind).SourceOf(tasks[entry - 1], out short other), source) && other == token)
                    {
                        throw RepeatedInput(i, entry - 1);
                    }
                    h = (h + 1) & mask;
                }
            }
        }
        finally
        {
            ArrayPool<int>.Shared.Return(table);
        }
    }

#if DEBUG
    /// <summary>Tests only: runs on the calling thread for every occupied entry the repeat check's table compares against.</summary>
    internal static Action? TestHookRepeatProbe;
#endif

#if DEBUG
    /// <summary>
    /// Tests only: runs on the calling thread of a WhenAny settled at the call, with the loser's index, after the winner
    /// was read and before that loser is let go of: the instant at which a misused await of an input from elsewhere meets
    /// the settling.
    /// </summary>
    internal static Action<int>? TestHookBeforeLetGo;
#endif

    /// <summary>
    /// True for a source the repeat check refuses twice: one of Spindle's own (every one reads through
    /// <see cref="IQuietSource"/>) whose read consumes the use, so not a promise, a preserved task or a failed one
    /// (<see cref="IRereadableSource"/>). A user's <see cref="ISpindleSource"/> is never refused: the interface lets a
    /// source that is not pooled be read any number of times, and one that refuses a second read says so itself, as any
    /// second read of it did before the check.
    /// </summary>
    private static bool IsConsumedByARead(ISpindleSource source) => source is IQuietSource and not IRereadableSource;

    /// <summary>
    /// For the generated tuple forms (2 to 8 typed tasks), which register every input with a combinator: refuses the
    /// input at <paramref name="index"/> if it is the task at <paramref name="earlier"/> (the same source and token, of a
    /// kind a read consumes: <see cref="IsConsumedByARead"/>), naming both indices, before any input is read or
    /// registered, as the span forms refuse it. Without it a finished repeat was read (consumed) at its first index and
    /// refused at its second with the await-once error, which names neither the repeat nor the indices, and the inputs
    /// between were consumed as well. A generated form calls it once per pair of inputs, at most 28 reference compares.
    /// </summary>
    /// <exception cref="InvalidOperationException">The two inputs are one Spindle task that a read consumes.</exception>
    internal static void RejectRepeat(ISpindleSource? earlierSource, short earlierToken, int earlier, ISpindleSource? source, short token, int index)
    {
        if (source is not null && ReferenceEquals(earlierSource, source) && earlierToken == token && IsConsumedByARead(source))
        {
            throw RepeatedInput(index, earlier);
        }
    }

    private static InvalidOperationException RepeatedInput(int index, int earlier)
        => new($"The task at index {index} is the same task as the one at index {earlier}. A Spindle task is read once (a pooled " +
            "one goes back to its pool when it is read), so a combinator cannot take it twice: pass it once, or call Preserve() " +
            "on it and pass the preserved task as many times as needed.");

    /// <summary>Reads every (finished) input, in order, into <paramref name="values"/> if it has room; returns the combined failure.</summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)] // BCL task inputs make the callers shared generic code: a call would need a dictionary lookup
    private static ExceptionDispatchInfo? ReadAll<TInput, TValue, TKind>(ReadOnlySpan<TInput> tasks, Span<TValue> values, bool aggregate)
        where TKind : struct, IInputKind<TInput, TValue>
    {
        var failures = new WhenAllFailures(aggregate);
        for (int i = 0; i < tasks.Length; i++)
        {
            TValue value = default(TKind).Read(tasks[i], out ExceptionDispatchInfo? error);
            if (error is not null)
            {
                failures.Add(error);
            }
            else if (i < values.Length)
            {
                values[i] = value;
            }
        }
        return failures.Result;
    }

    /// <summary>
    /// Input <paramref name="winner"/> has finished: it wins with no combinator. The others are observed now if they have
    /// finished, or left to finish (Spindle tasks only); either way a fault among them is reported, not lost. A copy of the
    /// winner itself (a task a read does not consume, passed twice) is not a loser: its completion is the winner's, whose
    /// failure goes to the combined task, so reporting it too would report one completion twice, or one the awaiter gets.
    /// </summary>
    private static SpindleTask<TResult> SettleNow<TInput, TValue, TKind, TResult>(ReadOnlySpan<TInput> tasks, int winner, Func<int, TValue, TResult> fromWinner)
        where TKind : struct, IInputKind<TInput, TValue>
    {
        // Every input was validated (Scan, RejectRepeats), so reading the winner first throws nothing; only a failed
        // winner's copies need the compare (a success reports nothing), which keeps it off the hot completed path (a
        // compare per loser there measured about 2 ns of a 9 ns WhenAny at n = 3). Letting go of a loser can still throw,
        // for a loser that is awaited elsewhere (the caller's error, found only as it registers): the winner has been read
        // by then, so what it took is handed back on the way out, not dropped (see HandBackTakenWinner).
        TValue value = default(TKind).Read(tasks[winner], out ExceptionDispatchInfo? error);
        try
        {
            for (int j = 0; j < tasks.Length; j++)
            {
                if (j != winner && (error is null || !default(TKind).IsSameCompletion(tasks[j], tasks[winner])))
                {
#if DEBUG
                    TestHookBeforeLetGo?.Invoke(j);
#endif
                    default(TKind).Forget(tasks[j]);
                }
            }
        }
        catch
        {
            HandBackTakenWinner<TInput, TValue, TKind>(tasks[winner], error);
            throw;
        }
        return error is null ? new SpindleTask<TResult>(fromWinner(winner, value)) : SpindleTask.FromFailure<TResult>(error);
    }

    /// <summary>
    /// Letting go of a loser threw (the caller's error: it is awaited elsewhere, the await-once error) after the winner was
    /// read: the caller gets that exception, not the combined task, so nothing the read took may be dropped with it. The
    /// winner's failure (the read consumed it: a pooled box went back to its pool) is reported, as a combinator whose
    /// registration failed reports an input it had taken, once per completion as a loser's; a set a signal's wait took
    /// is given back to the signal, as a combinator gives back its losers' (<see cref="CombinatorCore.GiveBackSet"/>), unless it had reached
    /// somebody else too (a signal's wait may be read again: see <see cref="Signal.GiveBackSet"/>).
    /// </summary>
    [MethodImpl(MethodImplOptions.NoInlining)]
    private static void HandBackTakenWinner<TInput, TValue, TKind>(TInput winner, ExceptionDispatchInfo? error)
        where TKind : struct, IInputKind<TInput, TValue>
    {
        ISpindleSource? source = default(TKind).SourceOf(winner, out short token);
        if (error is not null)
        {
            CombinatorCore.ReportLoserOnce(error, (object?)source ?? (winner as System.Threading.Tasks.Task), token);
        }
        else if (source is Signal signal && signal.TookSet(token))
        {
            // The read left the wait current: its token goes stale with the set given back. Unless the set had reached
            // somebody before this call's read (a waiter it resumed, a read of the caller's), or since: then it is theirs.
            signal.GiveBackSet(token, readByCaller: true);
        }
    }

    /// <summary>
    /// Starts the combinator's use and registers every input; a registration that throws (an input already awaited
    /// elsewhere, or passed twice) undoes what was taken (<see cref="Combinator{TResult}.AbandonAfterFailedRegistration"/>)
    /// before the exception goes on. Returns the use's token.
    /// </summary>
    internal static short AddAll<TInput, TValue, TKind, TResult>(Combinator<TResult> c, ReadOnlySpan<TInput> tasks, CancellationToken cancellationToken)
        where TKind : struct, IInputKind<TInput, TValue>
    {
        short token = c.Start(cancellationToken);
        int i = 0;
        try
        {
            for (; i < tasks.Length; i++)
            {
                default(TKind).Add(c, i, tasks[i]);
            }
        }
        catch (Exception ex)
        {
            c.AbandonAfterFailedRegistration(i, ex); // an input already awaited: undo what was taken, then rethrow
            throw;
        }
        return token;
    }

    private static ArgumentException NullInput(int index)
        => new($"The task at index {index} is null. Every input to a combinator must be a task: pass a completed task where there is nothing to wait for.", "tasks");

    /// <summary>A sequence as a span: an array as it is, anything else copied once.</summary>
    /// <exception cref="ArgumentNullException"><paramref name="tasks"/> is null.</exception>
    public static ReadOnlySpan<T> ToSpan<T>(IEnumerable<T> tasks)
    {
        if (tasks is null)
        {
            ThrowHelper.ThrowArgumentNull(nameof(tasks));
        }
        return tasks is T[] array ? array : new List<T>(tasks).ToArray();
    }
}

/// <summary>How the combined results are built from a combinator's slots (cached delegates: no allocation per call).</summary>
internal static class CombinedResults
{
    public static readonly Func<int, VoidResult, int> WinnerOnly = static (index, _) => index;

    public static readonly Func<Combinator<int>, int> Winner = static c => c.Winner;

    /// <summary><c>TryWithTimeout</c> of an untyped task: true when the input finished in time.</summary>
    public static readonly Func<Combinator<bool>, bool> InTime = static c => !c.TimedOut;
}

/// <summary>As <see cref="CombinedResults"/>, for inputs with a <typeparamref name="T"/> result.</summary>
internal static class CombinedResults<T>
{
    public static readonly Func<int, T, (int, T)> FromWinner = static (index, value) => (index, value);

    public static readonly Func<Combinator<(int, T)>, (int, T)> WinnerAndValue = static c => (c.Winner, c.Value<T>(c.Winner));

    /// <summary><c>TryWithTimeout</c> of a typed task: (true, its result) when it finished in time; (false, default) when the timeout won.</summary>
    public static readonly Func<Combinator<(bool, T)>, (bool, T)> InTimeWithValue = static c => c.TimedOut ? default : (true, c.Value<T>(0));

    /// <summary>The BCL's shape: a new array (the one allocation of a typed WhenAll).</summary>
    public static readonly Func<Combinator<T[]>, T[]> Array = static c => c.ValuesToArray<T>();

    public static readonly Func<Combinator<Memory<T>>, Memory<T>> Into = static c =>
    {
        c.CopyValuesTo(c.Destination.Span);
        return c.Destination;
    };
}

using System;
using System.Diagnostics;
using System.Diagnostics.CodeAnalysis;
using System.Runtime.CompilerServices;
using System.Runtime.ExceptionServices;
using System.Threading;

namespace SpindleLib;

/// <summary>
/// A source whose outcome can be read without throwing its failure: the read does all that <c>GetResult</c> does (it
/// checks the token, blocks while the operation is pending, consumes the use, returns a pooled source to its pool) and
/// hands the failure back instead of throwing it. Each such source's <c>GetResult</c> is this read plus the throw.
/// </summary>
/// <remarks>
/// Combinators, <c>Preserve()</c>, task scopes and the observer of forgotten tasks read an outcome to pass it on, not to
/// throw it. Read with a throw and a catch, every failure cost a throw (about 2 µs per faulted input of a WhenAll, against
/// 0.2 µs now, <c>docs/decisions.md</c> section 20), and the catching reader's own frame became the last line of the
/// failure's stack trace, a line the runtime shows whatever attribute hides it. Misuse (a stale token) still throws.
/// </remarks>
internal interface IQuietSource
{
    /// <summary>Reads the use of <paramref name="token"/> once, as <c>GetResult</c> does; returns its failure, or null.</summary>
    ExceptionDispatchInfo? ReadQuietly(short token);
}

/// <summary>As <see cref="IQuietSource"/>, for a source with a result.</summary>
/// <typeparam name="T">The result type.</typeparam>
internal interface IQuietSource<T> : IQuietSource
{
    /// <summary>Reads the use of <paramref name="token"/> once, as <c>GetResult</c> does; its failure goes to <paramref name="error"/>.</summary>
    T ReadQuietly(short token, out ExceptionDispatchInfo? error);
}

/// <summary>Reads any source's outcome once, without throwing it: quietly where the source allows, else with a catch.</summary>
[StackTraceHidden]
internal static class QuietRead
{
    /// <summary>Reads <paramref name="source"/>'s use <paramref name="token"/> once; returns its failure (or misuse), or null.</summary>
    public static ExceptionDispatchInfo? Read(ISpindleSource source, short token)
    {
        try
        {
            return ReadOrThrow(source, token);
        }
        catch (Exception ex)
        {
            return ExceptionDispatchInfo.Capture(ex);
        }
    }

    /// <summary>As <see cref="Read(ISpindleSource, short)"/>, keeping the result (default on failure).</summary>
    public static T Read<T>(ISpindleSource<T> source, short token, out ExceptionDispatchInfo? error)
    {
        try
        {
            return ReadOrThrow(source, token, out error);
        }
        catch (Exception ex)
        {
            error = ExceptionDispatchInfo.Capture(ex);
            return default!;
        }
    }

    /// <summary>
    /// As <see cref="Read(ISpindleSource, short)"/> for a caller that catches already: misuse, and the failure of a
    /// source that cannot be read quietly, are thrown. Inlined, with no handler of its own, into such a caller.
    /// </summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public static ExceptionDispatchInfo? ReadOrThrow(ISpindleSource source, short token)
    {
        if (source is IQuietSource quiet)
        {
            ExceptionDispatchInfo? error = quiet.ReadQuietly(token);
            LazyCancellation.PassedOn(error);
            return error;
        }
        source.GetResult(token);
        return null;
    }

    /// <summary>As <see cref="ReadOrThrow(ISpindleSource, short)"/>, keeping the result.</summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public static T ReadOrThrow<T>(ISpindleSource<T> source, short token, out ExceptionDispatchInfo? error)
    {
        if (source is IQuietSource<T> quiet)
        {
            T result = quiet.ReadQuietly(token, out error);
            LazyCancellation.PassedOn(error);
            return result;
        }
        error = null;
        return source.GetResult(token);
    }

    /// <summary>
    /// As <see cref="ReadOrThrow(ISpindleSource, short)"/> for a reader that only tells a fault from a cancellation (the
    /// observer of a forgotten task): a cancellation comes back as <see cref="LazyCancellation.CanceledValue"/> when the
    /// source kept it lazily, its exception never built.
    /// </summary>
    public static ExceptionDispatchInfo? ReadFaultOrThrow(ISpindleSource source, short token)
    {
        if (source is IQuietSource quiet)
        {
            ExceptionDispatchInfo? error = ReadAsValue(quiet, source, token);
            LazyCancellation.PassedOn(error);
            return error;
        }
        source.GetResult(token);
        return null;
    }

    /// <summary>As <see cref="ReadFaultOrThrow"/>, with misuse (and a user's source's failure) caught and returned.</summary>
    public static ExceptionDispatchInfo? ReadFault(ISpindleSource source, short token)
    {
        try
        {
            return ReadFaultOrThrow(source, token);
        }
        catch (Exception ex)
        {
            return ExceptionDispatchInfo.Capture(ex);
        }
    }

    /// <summary>
    /// Reads <paramref name="source"/>'s use <paramref name="token"/> once, as an await does, and returns true if it was
    /// canceled (its failure is an <see cref="OperationCanceledException"/>), without throwing or building the exception:
    /// <c>SuppressCancellationThrow()</c>'s read, and the frame waiter's read of its cancelled timer. Misuse and any
    /// other failure are thrown, as <c>GetResult</c> throws them.
    /// </summary>
    public static bool ReadCanceled(ISpindleSource source, short token)
    {
        return source is IQuietSource quiet
            ? IsCancellationOrThrow(ReadAsValue(quiet, source, token))
            : ReadCanceledWithCatch(source, token);
    }

    /// <summary>
    /// <paramref name="quiet"/>'s read of <paramref name="source"/>'s use <paramref name="token"/>, asking for a lazily
    /// kept cancellation as a value (<see cref="LazyCancellation.AskForValue"/>).
    /// </summary>
    private static ExceptionDispatchInfo? ReadAsValue(IQuietSource quiet, ISpindleSource source, short token)
    {
        bool asked = LazyCancellation.AskForValue(source, token);
        try
        {
            return quiet.ReadQuietly(token);
        }
        finally
        {
            if (asked)
            {
                LazyCancellation.EndAsking();
            }
        }
    }

    /// <summary>As <see cref="ReadCanceled(ISpindleSource, short)"/>, keeping the result (default when canceled).</summary>
    public static T ReadCanceled<T>(ISpindleSource<T> source, short token, out bool canceled)
    {
        if (source is not IQuietSource<T> quiet)
        {
            return ReadCanceledWithCatch(source, token, out canceled);
        }
        ExceptionDispatchInfo? failure;
        T result;
        bool asked = LazyCancellation.AskForValue(source, token);
        try
        {
            result = quiet.ReadQuietly(token, out failure);
        }
        finally
        {
            if (asked)
            {
                LazyCancellation.EndAsking();
            }
        }
        canceled = IsCancellationOrThrow(failure);
        return canceled ? default! : result;
    }

    private static bool IsCancellationOrThrow(ExceptionDispatchInfo? failure)
    {
        if (failure is null)
        {
            return false;
        }
        if (failure.SourceException is not OperationCanceledException)
        {
            failure.Throw();
        }
        return true;
    }

    /// <summary>A user's own source, which cannot be read quietly: its cancellation is caught.</summary>
    private static bool ReadCanceledWithCatch(ISpindleSource source, short token)
    {
        try
        {
            source.GetResult(token);
            return false;
        }
        catch (OperationCanceledException)
        {
            return true;
        }
    }

    private static T ReadCanceledWithCatch<T>(ISpindleSource<T> source, short token, out bool canceled)
    {
        try
        {
            canceled = false;
            return source.GetResult(token);
        }
        catch (OperationCanceledException)
        {
            canceled = true;
            return default!;
        }
    }
}

/// <summary>
/// A source that completes as canceled with <see cref="SourceCore{TResult}.TrySetCanceledLazily"/>: it keeps the
/// token that canceled it until its use is read.
/// </summary>
internal interface ILazyCanceledSource
{
    /// <summary>The token that canceled the current use; read only while the use is completed and not yet consumed.</summary>
    CancellationToken CanceledBy { get; }
}

/// <summary>
/// A cancellation stored without its exception: the completion core keeps <see cref="Marker"/> in its failure slot, and
/// the exception (a <see cref="System.Threading.Tasks.TaskCanceledException"/> with the owner's token, as
/// <c>TrySetCanceled</c> builds it) is made only when a reader needs one, as the BCL's Task makes its cancellation's
/// exception only when it is observed.
/// </summary>
/// <remarks>
/// A scene unload that cancels 10,000 pending waits built 10,000 exceptions and their dispatch infos at the cancellation
/// (about 250 bytes each, <c>docs/decisions.md</c> section 34 left it), even when the awaiting code reads the
/// cancellation as a value. A delay's timer node, a frame wait, a run cancelled while queued, a combinator's token and
/// a periodic timer's wait are read once, and build it for that read. A signal's wait may be read again: each read that
/// throws builds its own (as the BCL's Task does for a cancellation it stored no exception for), from the token the
/// signal keeps until its next wait; a promise's <c>TrySetCanceled</c> likewise, from the token it keeps until its
/// <c>Reset</c> (<c>docs/decisions.md</c> section 43; a <c>TrySetException</c> of an <see cref="OperationCanceledException"/>
/// the caller made is kept as made, and every reader gets that one). A task from <c>FromCanceled</c> builds it at its
/// first throwing read and keeps it, so its readers share one object. A throwing read throws the exception it has just
/// built as built (<see cref="ToThrow"/>).
/// <para>The reader that asks for the cancellation as a value (<see cref="QuietRead.ReadCanceled(ISpindleSource, short)"/>)
/// sets a thread-static flag around its own read of a completed, canceled use; the core's read takes it and hands back
/// <see cref="CanceledValue"/>, a shared dispatch info that stands for "canceled" and is never thrown. The flag is set
/// only when the use is completed, so the read neither blocks nor helps run other work, and only around a Spindle
/// source's quiet read, which runs no user code before its own core's read (the only read that can take it).</para>
/// </remarks>
internal static class LazyCancellation
{
    /// <summary>What a lazily canceled core keeps in its failure slot.</summary>
    internal static readonly object Marker = new MarkerObject();

    /// <summary>"Canceled", handed to a reader that asked for the value, and to internal readers that only test for null.</summary>
    internal static readonly ExceptionDispatchInfo CanceledValue = ExceptionDispatchInfo.Capture(ThrowHelper.Canceled(default));

    [ThreadStatic]
    private static bool t_asValue;

    /// <summary>The cancellation this thread's last <see cref="Build"/> made, until a read's failure is thrown (<see cref="ToThrow"/>).</summary>
    [ThreadStatic]
    private static ExceptionDispatchInfo? t_built;

    /// <summary>Builds the cancellation's exception from the owner's token (<see cref="ILazyCanceledSource"/>), or the shared value.</summary>
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static ExceptionDispatchInfo Build(ISpindleSource? owner)
    {
        if (t_asValue || owner is not ILazyCanceledSource lazy)
        {
            t_asValue = false;
            return CanceledValue;
        }
        CancellationToken canceledBy = lazy.CanceledBy;
        ExceptionDispatchInfo built = ExceptionDispatchInfo.Capture(canceledBy == TimerWheel.DisposalToken
            ? TimerWheel.NewDisposedCancellation()
            : ThrowHelper.Canceled(canceledBy));
        t_built = built;
        return built;
    }

    /// <summary>
    /// The failure a read of a source has just handed to its reader, to throw: every <c>GetResult</c> that throws a read's
    /// failure throws what this returns (<c>throw LazyCancellation.ToThrow(error);</c>). A cancellation this thread has
    /// just built (<see cref="Build"/>) is returned as it is, for the caller to throw at its own frame; any other failure is
    /// thrown here, through its dispatch info.
    /// </summary>
    /// <remarks>
    /// The cancellation just built was captured before any throw, so its dispatch info holds no trace and would restore
    /// nothing: thrown as it is, it gets the trace that <see cref="ExceptionDispatchInfo.Throw()"/> would give it, without
    /// the restore (536 → 368 B a throw for 1,000,000 loops that each catch their cancellation, <c>docs/decisions.md</c>
    /// sections 42 and 43). It is thrown by the caller's own <c>throw</c>, not here: a throw here crossed this helper's frame
    /// too whenever the JIT did not inline it, which its inlining budget decided, not the attribute (a combinator read as an
    /// untyped task: 536 B, section 44). The test is by identity with this thread's last build, so it holds whatever the
    /// source did with its node during the read (a delay's timer node, a frame wait and a run recycle theirs in it). A
    /// failure kept and read again (a promise's, a task from <c>FromCanceled</c> read by a second reader, an exception a
    /// user gave, a disposed wheel's) is not this thread's last build and keeps its dispatch info; the shared
    /// <see cref="CanceledValue"/> is never recorded. Between a build and this call no other failure is thrown on the
    /// thread (a read runs no user code after its core's read), and the record is cleared at every such call, at the
    /// await-once error (<see cref="Drop"/>) and by a reader that passes a failure on (<see cref="PassedOn"/>): no thread
    /// keeps a cancellation it handed to another.
    /// </remarks>
    [StackTraceHidden]
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public static Exception ToThrow(ExceptionDispatchInfo error)
    {
        if (error == t_built)
        {
            t_built = null;
            return error.SourceException;
        }
        t_built = null;
        error.Throw();
        return error.SourceException; // not reached
    }

    /// <summary>
    /// A reader that passes a read's failure on instead of throwing it (a combinator's input, a scope's child, a forgotten
    /// task's observer, <see cref="QuietRead"/>) lets go of this thread's record of its last build: the record held the
    /// exception, its token and the token's source (with every callback registered on it) until the thread's next build or
    /// throw, for ever on a thread that then idles (<c>LazyCancellationReviewTests</c>). The exception passed on is thrown,
    /// if at all, through its dispatch info, as any failure kept and read again is.
    /// </summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public static void PassedOn(ExceptionDispatchInfo? error)
    {
        if (error is not null)
        {
            t_built = null;
        }
    }

    /// <summary>
    /// Lets go of this thread's record of its last build without a failure to pass on: the await-once error thrown instead
    /// of a cancellation just built, by a read that then found its token stale (<see cref="ThrowHelper"/>'s refusals). The
    /// record would hold that exception, its token and the token's source until the thread's next build or throw.
    /// </summary>
    public static void Drop() => t_built = null;

    /// <summary>This thread's record of its last build, saved and put back by a display that must change nothing (<see cref="ThrowHelper.SaveRefusalMarks"/>).</summary>
    internal static ExceptionDispatchInfo? LastBuilt
    {
        get => t_built;
        set => t_built = value;
    }

    /// <summary>
    /// Sets the flag for the read of <paramref name="source"/>'s use <paramref name="token"/> if that use has completed as
    /// canceled (so only then): true if set, and the caller must call <see cref="EndAsking"/> after the read.
    /// </summary>
    public static bool AskForValue(ISpindleSource source, short token)
    {
        if (source.GetStatus(token) != SpindleTaskStatus.Canceled)
        {
            return false;
        }
        t_asValue = true;
        return true;
    }

    /// <summary>Clears the flag after the read (a source whose cancellation was built at once leaves it set).</summary>
    public static void EndAsking() => t_asValue = false;

    private sealed class MarkerObject
    {
        public override string ToString() => "canceled (lazily)";
    }
}

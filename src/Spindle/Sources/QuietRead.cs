using System;
using System.Diagnostics;
using System.Runtime.CompilerServices;
using System.Runtime.ExceptionServices;

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
            return quiet.ReadQuietly(token);
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
            return quiet.ReadQuietly(token, out error);
        }
        error = null;
        return source.GetResult(token);
    }
}

using System;
using System.Runtime.ExceptionServices;

namespace SpindleLib;

/// <summary>
/// The text debuggers show for Spindle's types (their <see cref="System.Diagnostics.DebuggerDisplayAttribute"/>), so a
/// user stopped at a breakpoint sees a task's status and the async method behind it without evaluating anything by hand.
/// </summary>
/// <remarks>
/// A debugger evaluates these with every other thread frozen, so they take no lock, wait for nothing, change nothing
/// (no flush, no read that consumes a use, no mark left on the thread) and never throw: a stale task says so instead of throwing the await-once error.
/// </remarks>
internal static class DebuggerText
{
    /// <summary>What a stale task (its use read, forgotten, or its promise reset) shows.</summary>
    internal const string Stale = "Stale: already awaited, passed to Forget(), or its source reset (awaiting it throws)";

    /// <summary>
    /// A task over use <paramref name="token"/> of <paramref name="source"/>: the status, and the async method behind it or
    /// the source's type; <see cref="Stale"/> if that use is over.
    /// </summary>
    public static string OfTask(ISpindleSource? source, short token)
    {
        if (source is null)
        {
            return "Succeeded";
        }
        if (StatusOf(source, token) is not { } known)
        {
            return Stale;
        }
        return source is StateMachineBoxBase box
            ? $"{known}, Method = {box.MethodName}"
            : $"{known}, Source = {source.GetType().Name}";
    }

    /// <summary>
    /// The status of use <paramref name="token"/> of <paramref name="source"/>, null if that use is over. An async method's
    /// box is read as the task tracker reads it (no throw), and a source whose GetStatus takes a lock (a preserved task's, a
    /// scope's wait) without it (<see cref="IStatusShownWithoutLock"/>); any other source's GetStatus through
    /// <see cref="TryStatus"/>.
    /// </summary>
    private static SpindleTaskStatus? StatusOf(ISpindleSource source, short token)
        => source switch
        {
            StateMachineBoxBase box => box.TryGetStatusForDiagnostics(token, out SpindleTaskStatus status) ? status : null,
            IStatusShownWithoutLock unlocked => unlocked.StatusWithoutLock(token),
            _ => TryStatus(source.GetStatus, token),
        };

    /// <summary>
    /// Reads a status for display: null if the token is stale (or the source refuses the read). The await-once error that a
    /// stale token throws marks the thread (<see cref="ThrowHelper.SaveRefusalMarks"/>); the marks are put back, so a
    /// debugger stopped at the first-chance throw of such an error, showing a stale task, leaves the refusal being thrown
    /// marked as the builder that catches it expects (<c>DebuggerDisplayReviewTests</c>).
    /// </summary>
    public static SpindleTaskStatus? TryStatus(Func<short, SpindleTaskStatus> getStatus, short token)
    {
        (Exception? LastRefusal, ExceptionDispatchInfo? Built) marks = ThrowHelper.SaveRefusalMarks();
        try
        {
            return getStatus(token);
        }
        catch (InvalidOperationException)
        {
            return null;
        }
        finally
        {
            ThrowHelper.RestoreRefusalMarks(marks);
        }
    }
}

/// <summary>
/// A source whose GetStatus takes a lock, read for a debugger's display without it (<see cref="DebuggerText"/>): the
/// debugger evaluates the display with every other thread frozen, and one of them may hold that lock.
/// </summary>
internal interface IStatusShownWithoutLock
{
    /// <summary>The status of use <paramref name="token"/>, read without a lock (at worst stale); null if that use is over.</summary>
    SpindleTaskStatus? StatusWithoutLock(short token);
}

using System;

namespace SpindleLib;

/// <summary>
/// The text debuggers show for Spindle's types (their <see cref="System.Diagnostics.DebuggerDisplayAttribute"/>), so a
/// user stopped at a breakpoint sees a task's status and the async method behind it without evaluating anything by hand.
/// </summary>
/// <remarks>
/// A debugger evaluates these with every other thread frozen, so they take no lock, wait for nothing, change nothing
/// (no flush, no read that consumes a use) and never throw: a stale task says so instead of throwing the await-once error.
/// </remarks>
internal static class DebuggerText
{
    /// <summary>What a stale task (its use read, forgotten, or its promise reset) shows.</summary>
    internal const string Stale = "Stale: already awaited, passed to Forget(), or its source reset (awaiting it throws)";

    /// <summary>
    /// A task over <paramref name="source"/>, whose status is <paramref name="status"/> (null if its token is stale): the
    /// status, and the async method behind it or the source's type.
    /// </summary>
    public static string OfTask(object? source, SpindleTaskStatus? status)
    {
        if (source is null)
        {
            return "Succeeded";
        }
        if (status is not { } known)
        {
            return Stale;
        }
        return source is StateMachineBoxBase box
            ? $"{known}, Method = {box.MethodName}"
            : $"{known}, Source = {source.GetType().Name}";
    }

    /// <summary>Reads a status for display: null if the token is stale (or the source refuses the read).</summary>
    public static SpindleTaskStatus? TryStatus(Func<short, SpindleTaskStatus> getStatus, short token)
    {
        try
        {
            return getStatus(token);
        }
        catch (InvalidOperationException)
        {
            return null;
        }
    }
}

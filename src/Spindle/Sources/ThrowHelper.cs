using System;
using System.Diagnostics;
using System.Diagnostics.CodeAnalysis;

namespace SpindleLib;

/// <summary>Throw sites kept out of hot methods so those stay small enough to inline.</summary>
[StackTraceHidden]
internal static class ThrowHelper
{
    internal const string AwaitOnceMessage =
        "This Spindle task was already awaited, or was passed to Forget(). A pooled Spindle task can be awaited exactly once, " +
        "because its source returns to the pool when its result is read. Call Preserve() on the task to get one that can be awaited many times.";

    [DoesNotReturn]
    public static void ThrowStaleToken() => throw new InvalidOperationException(AwaitOnceMessage);

    [DoesNotReturn]
    public static void ThrowAlreadyAwaited() => throw new InvalidOperationException(
        "This Spindle task already has an awaiter. A Spindle task supports one await at a time; call Preserve() on the task to await it from several places.");

    [DoesNotReturn]
    public static void ThrowNotCompleted() => throw new InvalidOperationException(
        "The Spindle task has not completed yet. Await it (or call GetAwaiter().GetResult(), which blocks) instead of reading its result directly.");

    [DoesNotReturn]
    public static void ThrowInvalidOperation(string message) => throw new InvalidOperationException(message);

    [DoesNotReturn]
    public static void ThrowArgumentNull(string paramName) => throw new ArgumentNullException(paramName);

    [DoesNotReturn]
    public static void ThrowArgumentOutOfRange(string paramName, string message) => throw new ArgumentOutOfRangeException(paramName, message);
}

using System.Diagnostics.CodeAnalysis;
using System.Threading;

namespace SpindleLib;

/// <summary>
/// Runs code under a captured <see cref="ExecutionContext"/>, with a fast path for the default context: when both the
/// captured context and the thread's current one are the default (no AsyncLocal values anywhere), the callback runs
/// directly, and the default is put back only if the callback changed it.
/// </summary>
internal static class ContextFlow
{
    /// <summary>The runtime's default context instance, as <see cref="ExecutionContext.Capture"/> returns it on a thread with no values.</summary>
    internal static readonly ExecutionContext? s_default = CaptureDefault();

    private static ExecutionContext? CaptureDefault()
    {
        ExecutionContext? captured = null;
        // A thread started while flow is suppressed begins with no context, so Capture there returns the default instance.
        // The first thread to touch this class may already be suppressing flow (a frame host, a completing thread): then
        // it starts the probe as it is. Giving up there instead would leave the default null, and every "put the default
        // back" (RestoreDefaultIfChanged) a no-op, for the life of the process.
        var thread = new Thread(() => captured = ExecutionContext.Capture()) { IsBackground = true, Name = "Spindle context probe" };
        if (ExecutionContext.IsFlowSuppressed())
        {
            thread.Start();
        }
        else
        {
            using (ExecutionContext.SuppressFlow())
            {
                thread.Start();
            }
        }
        thread.Join();
        return captured;
    }

    /// <summary>
    /// True when the thread is in the default context now, so that work can run with
    /// <see cref="WorkItem.ExecuteOnDefaultContext"/> followed by <see cref="RestoreDefaultIfChanged"/>. Always false on
    /// netstandard2.1, which cannot restore a context.
    /// </summary>
    public static bool IsDefaultNow()
    {
#if NET
        return s_default is not null && ExecutionContext.Capture() == s_default;
#else
        return false;
#endif
    }

    /// <summary>
    /// True when work that captured <paramref name="context"/> can run as it is on a thread in the default context: it
    /// captured the default, or nothing (flow was suppressed). For <see cref="WorkItem.ExecuteOnDefaultContext"/>.
    /// </summary>
    public static bool RunsAsIsOnDefault([NotNullWhen(false)] ExecutionContext? context) => context is null || context == s_default;

    /// <summary>True when <paramref name="context"/> is the default and the thread is in the default context now.</summary>
    public static bool CanRunInline(ExecutionContext? context)
    {
#if NET
        return context is not null && context == s_default && ExecutionContext.Capture() == context;
#else
        return false;
#endif
    }

    /// <summary>
    /// After running code inside some other code's context (a worker helping while it waits, an item run inline by the
    /// code awaiting it): put that context back if the code that ran changed it.
    /// </summary>
    public static void RestoreIfChanged(ExecutionContext? before)
    {
#if NET
        if (before is not null && ExecutionContext.Capture() != before)
        {
            ExecutionContext.Restore(before);
        }
#endif
    }

#if !NET
    /// <summary>
    /// netstandard2.1 has no <c>ExecutionContext.Restore</c>, so code that must leave the thread's context as it found
    /// it runs inside <see cref="ExecutionContext.Run"/> of the context the thread is in now: leaving Run puts that
    /// context back, whatever <paramref name="body"/> changed. Loops (a worker's, a frame phase's) call this again and
    /// again, and their body returns as soon as something it ran changed the context (<see cref="HasChanged"/>), so
    /// that each item starts in the loop's own context. With flow suppressed on this thread there is no context to run
    /// in, and <paramref name="body"/> runs as it is.
    /// </summary>
    public static void RunRestoring(ContextCallback body, object state)
    {
        // A fresh capture each time: .NET Framework's and Mono's Run accept a captured context only once.
        ExecutionContext? now = ExecutionContext.Capture();
        if (now is null)
        {
            body(state);
        }
        else
        {
            ExecutionContext.Run(now, body, state);
        }
    }

    /// <summary>True when the thread's context is no longer <paramref name="entered"/> (see <see cref="RunRestoring"/>).</summary>
    public static bool HasChanged(ExecutionContext? entered) => ExecutionContext.Capture() != entered;
#endif

    /// <summary>After an inline run: put the default context back if the code that ran changed it.</summary>
    public static void RestoreDefaultIfChanged()
    {
#if NET
        ExecutionContext? now = ExecutionContext.Capture();
        if (now != s_default && s_default is not null)
        {
            ExecutionContext.Restore(s_default);
        }
#endif
    }
}

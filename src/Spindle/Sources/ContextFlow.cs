using System;
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
    /// <summary>Two captures on a thread started with no context of ours (see <see cref="ProbeCaptures"/>).</summary>
    private static readonly (ExecutionContext? First, ExecutionContext? Second) s_probe = ProbeCaptures();

    /// <summary>The runtime's default context instance, as <see cref="ExecutionContext.Capture"/> returns it on a thread with no values.</summary>
    internal static readonly ExecutionContext? s_default = s_probe.First;

#if !NET
    /// <summary>
    /// True when <see cref="ExecutionContext.Capture"/> returns the same object while the context does not change, as
    /// on .NET Core. Mono (Unity) returns a new object from every capture (its ExecutionContext is the .NET Framework's),
    /// so "did the code that ran change the context?" cannot be told by comparing captures there, and the loops that
    /// would re-enter <see cref="ExecutionContext.Run"/> after such a change (<see cref="RunRestoring"/>) run as they
    /// are instead: a new context per item would allocate on every frame. Settable by tests, to run that path on .NET.
    /// </summary>
    internal static bool CaptureIsStable = s_probe.First is not null && s_probe.First == s_probe.Second;
#endif

    private static ExecutionContext? CaptureDefault() => ProbeCaptures().First;

    /// <summary>
    /// Captures twice on a new thread started with no context of ours: the first capture is the runtime's default
    /// instance, and whether the second is the same object tells whether captures are stable. The first thread to
    /// touch this class may already be suppressing flow (a frame host, a completing thread): <see cref="StartWithoutContext"/>
    /// copes. Giving up there instead would leave the default null, and every "put the default back"
    /// (<see cref="RestoreDefaultIfChanged"/>) a no-op, for the life of the process.
    /// </summary>
    private static (ExecutionContext? First, ExecutionContext? Second) ProbeCaptures()
    {
        ExecutionContext? first = null;
        ExecutionContext? second = null;
        try
        {
            var thread = new Thread(() =>
            {
                first = ExecutionContext.Capture();
                second = ExecutionContext.Capture();
            })
            { IsBackground = true, Name = "Spindle context probe" };
            StartWithoutContext(thread);
            thread.Join();
        }
        catch (Exception ex) when (ex is PlatformNotSupportedException or NotSupportedException or ThreadStartException)
        {
            return (null, null); // no threads here (a browser build): no default to compare with, captures not stable
        }
        return (first, second);
    }

    /// <summary>
    /// Starts <paramref name="thread"/> with none of the caller's context (its AsyncLocal values, and on Mono its
    /// SynchronizationContext), as <c>Thread.UnsafeStart</c> does on .NET. On netstandard2.1 it starts the thread under
    /// <see cref="ExecutionContext.SuppressFlow"/>, unless flow is already suppressed: suppressing it twice throws on Mono
    /// and before .NET 8.
    /// </summary>
    public static void StartWithoutContext(Thread thread, object? state = null)
    {
#if NET
        if (state is null)
        {
            thread.UnsafeStart();
        }
        else
        {
            thread.UnsafeStart(state);
        }
#else
        if (ExecutionContext.IsFlowSuppressed())
        {
            Start(thread, state);
            return;
        }
        using (ExecutionContext.SuppressFlow())
        {
            Start(thread, state);
        }

        static void Start(Thread thread, object? state)
        {
            if (state is null)
            {
                thread.Start();
            }
            else
            {
                thread.Start(state);
            }
        }
#endif
    }

    /// <summary>
    /// Creates a timer of <paramref name="provider"/> that captures none of the caller's context, as the BCL's own timers
    /// (Task.Delay's, CancelAfter's) and ASP.NET Core's NonCapturingTimer do: a <see cref="TimeProvider"/>'s timer (the
    /// base class's, and any provider that wraps <see cref="TimeProvider.System"/>) runs its callback in the
    /// <see cref="ExecutionContext"/> of the code that created it, so a wheel's driver created inside a request would run
    /// every pass for the wheel's life in that request's context (its AsyncLocal values, its Activity), shown to the
    /// continuations the pass runs and kept alive as long as the wheel. Created under
    /// <see cref="ExecutionContext.SuppressFlow"/>, unless flow is already suppressed (suppressing it twice throws).
    /// </summary>
    public static ITimer CreateTimerWithoutContext(TimeProvider provider, TimerCallback callback, object state)
    {
        if (ExecutionContext.IsFlowSuppressed())
        {
            return provider.CreateTimer(callback, state, Timeout.InfiniteTimeSpan, Timeout.InfiniteTimeSpan);
        }
        using (ExecutionContext.SuppressFlow())
        {
            return provider.CreateTimer(callback, state, Timeout.InfiniteTimeSpan, Timeout.InfiniteTimeSpan);
        }
    }

#if NET
    /// <summary><see cref="ExecutionContext.Run"/> (on netstandard2.1 it also keeps the running thread's SynchronizationContext).</summary>
    [System.Runtime.CompilerServices.MethodImpl(System.Runtime.CompilerServices.MethodImplOptions.AggressiveInlining)]
    public static void Run(ExecutionContext context, ContextCallback callback, object? state) => ExecutionContext.Run(context, callback, state);
#else
    /// <summary>
    /// <see cref="ExecutionContext.Run"/>, keeping the running thread's SynchronizationContext, as the BCL's own
    /// internal Run does for tasks. On Mono and the .NET Framework a captured context carries the SynchronizationContext
    /// of the thread that captured it, and the public Run installs it: code resumed on a worker would otherwise run
    /// under Unity's main-thread context, and a BCL await there would post back to the main thread. (On .NET Core a
    /// context carries none, and this costs two thread-static reads.)
    /// </summary>
    public static void Run(ExecutionContext context, ContextCallback callback, object? state)
    {
        // The arguments travel in thread-statics (a state object would allocate). Switching contexts can run user code
        // before the callback reads them (AsyncLocal change handlers), and that code may itself Run: so each Run saves
        // the values it replaces and puts them back, and a nested Run leaves ours as it found them.
        SynchronizationContext? savedOuter = t_outerSyncContext;
        ContextCallback? savedCallback = t_callback;
        object? savedState = t_state;
        t_outerSyncContext = SynchronizationContext.Current;
        t_callback = callback;
        t_state = state;
        try
        {
            ExecutionContext.Run(context, s_runKeepingSyncContext, null);
        }
        finally
        {
            t_outerSyncContext = savedOuter;
            t_callback = savedCallback;
            t_state = savedState;
        }
    }

    [ThreadStatic]
    private static SynchronizationContext? t_outerSyncContext;
    [ThreadStatic]
    private static ContextCallback? t_callback;
    [ThreadStatic]
    private static object? t_state;

    private static readonly ContextCallback s_runKeepingSyncContext = static _ =>
    {
        SynchronizationContext? outer = t_outerSyncContext;
        ContextCallback callback = t_callback!;
        object? state = t_state;
        if (SynchronizationContext.Current != outer)
        {
            SynchronizationContext.SetSynchronizationContext(outer); // leaving Run puts the captured one back
        }
        callback(state);
    };
#endif

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

#if NET
    /// <summary>
    /// For a thread that runs work inside some other code's context and then restores it (a helping waiter): captures that
    /// context into <paramref name="before"/>; unless it is the default, runs <paramref name="callback"/> inside Run of the
    /// default context instead, whose exit puts the thread's own context back whatever the work did (the
    /// SynchronizationContext too), and returns true. So work that carries no context of its own (a bare continuation,
    /// a timer batch, a job) runs in the default context, as on a worker's loop, and never sees the waiting code's
    /// values; nor, where the thread suppresses flow, can it leave its own there. False (the thread is in the default
    /// context, or there is none): the caller runs the work itself, then <see cref="RestoreIfChanged"/>.
    /// </summary>
    public static bool TryRunInDefaultContext(ContextCallback callback, object state, out ExecutionContext? before)
    {
        before = ExecutionContext.Capture();
        if (before != s_default && s_default is { } defaultContext)
        {
            ExecutionContext.Run(defaultContext, callback, state);
            return true;
        }
        return false;
    }
#else
    /// <summary>
    /// As the .NET build's <c>TryRunInDefaultContext</c>, for a helping waiter on netstandard2.1: unless the thread is in
    /// the default context (or captures are not stable, where it cannot tell), runs <paramref name="callback"/> inside
    /// Run of the default context, whose exit puts the thread's own context back, and returns true.
    /// </summary>
    public static bool TryRunInDefaultContext(ContextCallback callback, object state)
    {
        if (HasChanged(s_default) && ForContextFree() is { } context)
        {
            Run(context, callback, state);
            return true;
        }
        return false;
    }
#endif

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
    /// that each item starts in the loop's own context. <paramref name="body"/> runs as it is, with nothing to put
    /// back, when flow is suppressed on this thread, and where captures are not stable (<see cref="CaptureIsStable"/>:
    /// Mono), where a capture per call would allocate.
    /// </summary>
    public static void RunRestoring(ContextCallback body, object state)
    {
        // A fresh capture each time: Mono's Run accepts a captured context only once.
        ExecutionContext? now = CaptureIsStable ? ExecutionContext.Capture() : null;
        if (now is null && ExecutionContext.IsFlowSuppressed() && ForContextFree() is { } context)
        {
            // The thread suppresses flow: there is no context of its own to enter, and what the body changed would stay.
            // Run it in the default context, as context-free work runs, whose exit puts the thread's back.
            Run(context, body, state);
        }
        else if (now is null)
        {
            body(state);
        }
        else
        {
            Run(now, body, state);
        }
    }

    /// <summary>
    /// True when the thread's context is no longer <paramref name="entered"/> (see <see cref="RunRestoring"/>); always
    /// false where captures are not stable, since there every capture is a new object.
    /// </summary>
    public static bool HasChanged(ExecutionContext? entered) => CaptureIsStable && ExecutionContext.Capture() != entered;
#endif

    /// <summary>
    /// The context to run work in that captured none (flow was suppressed when it was queued or suspended), when it is
    /// not run by a loop that is on the default context and restores it: the default, as a worker would run it, so that
    /// what it sets stays inside the Run that runs it and never reaches the thread that runs it. Null where there is no
    /// default (no threads): the work then runs as it is. (A copy on netstandard2.1: Mono's Run takes a context once.)
    /// </summary>
    public static ExecutionContext? ForContextFree()
    {
#if NET
        return s_default;
#else
        return s_default?.CreateCopy();
#endif
    }

    /// <summary>
    /// Puts back the SynchronizationContext the thread had before some code ran (null on a worker), if that code installed
    /// another and left it: as the BCL's ExecutionContext.Run does for a task it runs inline, and its thread pool after
    /// each item. Code that runs next on the thread (the next item, or the code that awaited it) must not find it, or its
    /// BCL awaits would post their continuations there.
    /// </summary>
    public static void RestoreSynchronizationContext(SynchronizationContext? before)
    {
        if (SynchronizationContext.Current != before)
        {
            SynchronizationContext.SetSynchronizationContext(before);
        }
    }

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

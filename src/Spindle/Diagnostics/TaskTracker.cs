using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Diagnostics;
using System.Runtime.CompilerServices;
using System.Threading;

namespace SpindleLib;

/// <summary>
/// The task tracker behind <see cref="SpindleDiagnostics.TrackTasks"/>: while it is on, every async method's
/// state-machine box is recorded when it is rented (the method's first real suspension) and forgotten when it goes
/// back to its pool (its result was read). What is left is what is running, waiting, or finished and never read: a leak.
/// </summary>
/// <remarks>
/// <para>The list is a <see cref="ConcurrentDictionary{TKey,TValue}"/> keyed by the box, and it exists only while
/// tracking is on: <see cref="s_live"/> is null otherwise. Off, the tracker therefore costs one static read (inlined)
/// when a box is rented and one when it is returned. On, it allocates an entry per suspended method (and a stack trace
/// if asked), which is what a diagnostic mode is for.</para>
/// <para>Turning it off swaps the list out rather than clearing it, so an entry that a racing rent adds afterwards lands
/// in the old list, which nothing references any more: it cannot keep a box alive, and turning tracking on again starts
/// a new, empty list. A returning box removes itself from whatever list is current (a no-op if it is not in it). An
/// entry never refers to a later use of its box: it is added before the box is visible to other threads, and removed
/// before the box goes back to its pool. A snapshot that found an entry just before its removal reads the box's
/// status for the entry's own use (its token, kept in the entry) and skips it if that use is over, so it never reports
/// a later use's state as the entry's (up to a 16-bit token wrap: 65,536 uses of one box during one snapshot).</para>
/// </remarks>
internal static class TaskTracker
{
    private static volatile bool s_captureStackTraces;
    private static ConcurrentDictionary<StateMachineBoxBase, Entry>? s_live; // read with Volatile.Read: see Enabled

    /// <summary>What is recorded about a box when it is rented.</summary>
    private sealed class Entry
    {
        public Entry(short version) => Version = version;

        /// <summary>The token of the use this entry records: the box's later uses have others.</summary>
        public readonly short Version;
        public readonly long StartedAt = Stopwatch.GetTimestamp();
        public readonly int ThreadId = Environment.CurrentManagedThreadId;
        public readonly FrameLoop? Loop = FrameLoop.InStepOnThisThread;
        public StackTrace? Stack;
    }

    public static bool Enabled
    {
        get => Volatile.Read(ref s_live) is not null;
        set
        {
            if (value)
            {
                // Turning it on again keeps the list it has: "on" is idempotent.
                Interlocked.CompareExchange(ref s_live, new ConcurrentDictionary<StateMachineBoxBase, Entry>(), null);
            }
            else
            {
                Volatile.Write(ref s_live, null);
            }
        }
    }

    public static bool CaptureStackTraces
    {
        get => s_captureStackTraces;
        set => s_captureStackTraces = value;
    }

    /// <summary>Called by the builder when it rents a box for a method's first real suspension.</summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public static void OnRented(StateMachineBoxBase box)
    {
        if (Volatile.Read(ref s_live) is { } live)
        {
            Track(live, box);
        }
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    private static void Track(ConcurrentDictionary<StateMachineBoxBase, Entry> live, StateMachineBoxBase box)
    {
        var entry = new Entry(box.VersionForDiagnostics);
        if (s_captureStackTraces)
        {
            // Every frame: which of this tracker's and the builder's frames exist depends on what the JIT inlined, so the
            // snapshot drops them by name (StartAtAsyncMethod), not by a count taken here.
            entry.Stack = new StackTrace(0, fNeedFileInfo: true);
        }
        live[box] = entry;
    }

    /// <summary>Called when a box goes back to its pool: its task's result has been read.</summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public static void OnReturned(StateMachineBoxBase box)
    {
        if (Volatile.Read(ref s_live) is { } live)
        {
            live.TryRemove(box, out _);
        }
    }

    /// <summary>A snapshot of the tracked tasks, oldest first; empty while tracking is off.</summary>
    public static IReadOnlyList<TrackedTask> Snapshot()
    {
        if (Volatile.Read(ref s_live) is not { } live)
        {
            return Array.Empty<TrackedTask>();
        }
#if DEBUG
        TestHookInSnapshot?.Invoke(null);
#endif
        var seen = new List<(Entry Entry, string Method, SpindleTaskStatus Status)>();
        foreach (KeyValuePair<StateMachineBoxBase, Entry> pair in live)
        {
#if DEBUG
            TestHookInSnapshot?.Invoke(pair.Key);
#endif
            // The pair may be stale by now: the use it records may have been read, and the box pooled or rented again
            // for another call (its entry removed, and maybe a new one added). The box's status is read for the entry's
            // own use only; a use that is over is not listed, rather than reported with a later use's state.
            if (pair.Key.TryGetStatusForDiagnostics(pair.Value.Version, out SpindleTaskStatus status))
            {
                seen.Add((pair.Value, pair.Key.MethodName, status));
            }
        }
        // The clock is read after the walk: an entry added during it started before now, so no age is negative.
        long now = Stopwatch.GetTimestamp();
        var list = new List<TrackedTask>(seen.Count);
        foreach ((Entry e, string method, SpindleTaskStatus status) in seen)
        {
            TimeSpan age = TimeSpan.FromSeconds(Math.Max(0, now - e.StartedAt) / (double)Stopwatch.Frequency);
            list.Add(new TrackedTask(method, status, age, e.ThreadId, e.Loop, e.Stack));
        }
        list.Sort(static (a, b) => b.Age.CompareTo(a.Age));
        return list;
    }

#if DEBUG
    /// <summary>
    /// Tests only (a Debug build): runs in <see cref="Snapshot"/> with null before it enumerates the list, and with each
    /// listed box before its status is read, standing in for other threads that start, finish or read tracked methods
    /// at those moments.
    /// </summary>
    internal static Action<StateMachineBoxBase?>? TestHookInSnapshot;
#endif

    /// <summary>The frames a captured stack starts with that are Spindle's plumbing, not the async method's.</summary>
    private static readonly string[] s_plumbing = { "SpindleLib.TaskTracker.", "SpindleLib.BuilderCore.", "SpindleLib.SpindleTaskMethodBuilder" };

    /// <summary>
    /// A stack captured in <see cref="OnRented"/>, from the suspending async method's own frame (its MoveNext, at the
    /// await) down. The leading frames are this tracker's and the builder's, as many as the JIT did not inline into the
    /// MoveNext (none to three): no fixed count fits both optimized and unoptimized code, so they are dropped by name.
    /// </summary>
    internal static string StartAtAsyncMethod(string stackTrace)
    {
        int start = 0;
        while (start < stackTrace.Length)
        {
            int end = stackTrace.IndexOf('\n', start);
            if (end < 0 || !IsPlumbing(stackTrace, start, end))
            {
                break;
            }
            start = end + 1;
        }
        return stackTrace.Substring(start);
    }

    /// <summary>True if the line from <paramref name="start"/> to <paramref name="end"/> is a frame of <see cref="s_plumbing"/>.</summary>
    private static bool IsPlumbing(string s, int start, int end)
    {
        // "   at SpindleLib.BuilderCore.GetBox[...](...)": the word before the method is localized, so skip it whatever it is.
        int i = start;
        while (i < end && s[i] == ' ')
        {
            i++;
        }
        i = s.IndexOf(' ', i, end - i) + 1;
        if (i <= 0)
        {
            return false;
        }
        foreach (string prefix in s_plumbing)
        {
            if (end - i >= prefix.Length && string.CompareOrdinal(s, i, prefix, 0, prefix.Length) == 0)
            {
                return true;
            }
        }
        return false;
    }

    /// <summary>
    /// "Namespace.Type.Method" for a compiler-generated state machine (a nested type named <c>&lt;Method&gt;d__N</c>),
    /// or the state machine's own name for anything else.
    /// </summary>
    public static string MethodNameOf(Type stateMachine)
    {
        string method = MethodNameOf(stateMachine.Name);
        Type? declaring = stateMachine.DeclaringType;
        return declaring is null ? method : (declaring.FullName ?? declaring.Name).Replace('+', '.') + "." + method;
    }

    /// <summary>
    /// The method a state machine's type name stands for: <c>&lt;Load&gt;d__4</c> is <c>Load</c>; an async local function's
    /// <c>&lt;&lt;Outer&gt;g__Local|3_0&gt;d</c> is <c>Outer.Local</c>; an async lambda's keeps its compiler name
    /// (<c>&lt;Outer&gt;b__3_0</c>); any other name is itself.
    /// </summary>
    internal static string MethodNameOf(string name)
    {
        // The method's name is what lies between the first '<' and the last '>': a local function's or a lambda's holds
        // its own brackets.
        int close = name.LastIndexOf('>');
        if (name.Length == 0 || name[0] != '<' || close < 2)
        {
            return name;
        }
        string method = name.Substring(1, close - 1);
        const string LocalFunction = ">g__";
        int local = method.IndexOf(LocalFunction, StringComparison.Ordinal);
        if (method[0] == '<' && local > 1)
        {
            int start = local + LocalFunction.Length;
            int bar = method.IndexOf('|', start);
            method = method.Substring(1, local - 1) + "." + (bar < 0 ? method.Substring(start) : method.Substring(start, bar - start));
        }
        return method;
    }
}

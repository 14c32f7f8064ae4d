using System;

namespace SpindleLib;

/// <summary>One async method seen by the task tracker (<see cref="SpindleDiagnostics.GetTrackedTasks"/>).</summary>
public sealed class TrackedTask
{
    /// <summary>
    /// The stack captured at the first suspension, formatted into <see cref="_stackTrace"/> on the first read of
    /// <see cref="StackTrace"/>: formatting (symbols, file and line) costs tens of microseconds a stack, so a snapshot of
    /// 100,000 sessions that formatted them all took tens of seconds to find the one a user was looking for.
    /// </summary>
    private readonly System.Diagnostics.StackTrace? _captured;
    private string? _stackTrace;

    internal TrackedTask(string method, SpindleTaskStatus status, TimeSpan age, int threadId, FrameLoop? loop, System.Diagnostics.StackTrace? captured)
    {
        Method = method;
        Status = status;
        Age = age;
        ThreadId = threadId;
        Loop = loop;
        _captured = captured;
    }

    /// <summary>The async method, as <c>Namespace.Type.Method</c>.</summary>
    public string Method { get; }

    /// <summary>
    /// Its task's status when the snapshot was taken: <see cref="SpindleTaskStatus.Pending"/> while it runs or waits;
    /// any other status means it finished and nobody has read its result yet.
    /// </summary>
    public SpindleTaskStatus Status { get; }

    /// <summary>How long ago the method first suspended.</summary>
    public TimeSpan Age { get; }

    /// <summary>The managed thread on which it first suspended.</summary>
    public int ThreadId { get; }

    /// <summary>
    /// The frame loop inside whose frame (or <c>BeginFrame</c>, <c>RunPhase</c>) it first suspended, or null if it first
    /// suspended elsewhere. A host of many loops tells them apart by <see cref="FrameLoop.Name"/>, or by the loop itself.
    /// </summary>
    public FrameLoop? Loop { get; }

    /// <summary>
    /// The stack at its first suspension (the method and its callers) when <see cref="SpindleDiagnostics.CaptureStackTraces"/>
    /// was on; otherwise null. Formatted when first read (a snapshot formats none), so read it for the tasks you look at.
    /// </summary>
    public string? StackTrace
    {
        get
        {
            // Two threads reading it first may both format it: the same text, and either store is a whole reference.
            if (_stackTrace is null && _captured is not null)
            {
                _stackTrace = TaskTracker.StartAtAsyncMethod(_captured.ToString());
            }
            return _stackTrace;
        }
    }

    /// <summary>The method, its status and its age, and the name of its loop if it has one, for logs.</summary>
    public override string ToString()
        => Loop?.Name is { } loop
            ? $"{Method} ({Status}, {Age.TotalMilliseconds:F0} ms, loop '{loop}')"
            : $"{Method} ({Status}, {Age.TotalMilliseconds:F0} ms)";
}

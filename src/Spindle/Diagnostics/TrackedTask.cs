using System;

namespace SpindleLib;

/// <summary>One async method seen by the task tracker (<see cref="SpindleDiagnostics.GetTrackedTasks"/>).</summary>
public sealed class TrackedTask
{
    internal TrackedTask(string method, SpindleTaskStatus status, TimeSpan age, int threadId, FrameLoop? loop, string? stackTrace)
    {
        Method = method;
        Status = status;
        Age = age;
        ThreadId = threadId;
        Loop = loop;
        StackTrace = stackTrace;
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
    /// was on; otherwise null.
    /// </summary>
    public string? StackTrace { get; }

    /// <summary>The method, its status and its age, and the name of its loop if it has one, for logs.</summary>
    public override string ToString()
        => Loop?.Name is { } loop
            ? $"{Method} ({Status}, {Age.TotalMilliseconds:F0} ms, loop '{loop}')"
            : $"{Method} ({Status}, {Age.TotalMilliseconds:F0} ms)";
}

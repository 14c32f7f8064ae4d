using System.Collections.Generic;

namespace SpindleLib;

/// <summary>
/// Spindle's diagnostics: the name of the <c>Meter</c> it publishes its metrics on, and the task tracker, which lists
/// the async methods that are suspended or finished but never awaited (leaks), with where they started.
/// </summary>
/// <remarks>
/// <para><b>Metrics</b> (on .NET 8 and later; netstandard2.1 has no <c>System.Diagnostics.Metrics</c> without an extra
/// package, so Spindle publishes none there). Read them with <c>dotnet-counters monitor --counters Spindle</c>, an
/// OpenTelemetry <c>AddMeter("Spindle")</c>, or a <c>MeterListener</c>. Every instrument but the last two is observed
/// only when a listener asks, so an unobserved process pays nothing for it:</para>
/// <list type="bullet">
/// <item><c>spindle.worker.count</c> (gauge): Spindle's worker threads, tagged <c>spindle.worker.state</c> = <c>idle</c>
/// (parked or looking for work) or <c>busy</c>.</item>
/// <item><c>spindle.queue.length</c> (gauge): work items waiting, tagged <c>spindle.queue</c> = <c>global</c> (the
/// injection and job queues) or <c>local</c> (the workers' own deques and run-next slots).</item>
/// <item><c>spindle.timer.count</c> (gauge): timers waiting in <see cref="TimerWheel.Default"/> (every shard).</item>
/// <item><c>spindle.pool.object.count</c> (gauge): objects held by the shared pools, tagged <c>spindle.pool</c> with the
/// pooled kind (for example <c>StateMachineBox</c>, <c>JobNode</c>, <c>Combinator</c>).</item>
/// <item><c>spindle.job.count</c> (counter): jobs completed, successfully or not (combined handles are not jobs).</item>
/// <item><c>spindle.frame.duration</c> (histogram, seconds): how long each <see cref="FrameLoop.RunFrame()"/> took,
/// measured only while a listener is enabled for it, tagged <c>spindle.loop</c> with the loop's
/// <see cref="FrameLoop.Name"/> if it has one.</item>
/// <item><c>spindle.unobserved_exception.count</c> (counter): faults reported to <see cref="Spindle.UnobservedException"/>.</item>
/// </list>
/// <para><b>The task tracker</b> is off by default. Off, it costs a static read when an async method first suspends
/// and when its result is read. On, it allocates an entry per suspended method, and a stack trace each if
/// <see cref="CaptureStackTraces"/> is set: turn it on to find a leak or a stuck task, not in production.</para>
/// <para>All members are thread-safe.</para>
/// </remarks>
public static class SpindleDiagnostics
{
    /// <summary>The name of the <c>System.Diagnostics.Metrics.Meter</c> Spindle publishes its metrics on: <c>"Spindle"</c>.</summary>
    public const string MeterName = "Spindle";

    /// <summary>
    /// Turns the task tracker on or off. While on, every <c>async SpindleTask</c> method that suspends is tracked from its
    /// first suspension until its result is read. Turning it on starts an empty list (setting it on again while on keeps
    /// the list); turning it off drops the list, and what it kept.
    /// </summary>
    public static bool TrackTasks
    {
        get => TaskTracker.Enabled;
        set => TaskTracker.Enabled = value;
    }

    /// <summary>
    /// When the tracker is on, also records where each tracked method was when it first suspended, with its callers
    /// (<see cref="TrackedTask.StackTrace"/>). Costs a stack walk per tracked method.
    /// </summary>
    public static bool CaptureStackTraces
    {
        get => TaskTracker.CaptureStackTraces;
        set => TaskTracker.CaptureStackTraces = value;
    }

    /// <summary>
    /// The tracked tasks, oldest first: async methods that are running or waiting, and those that finished but whose
    /// result nobody has read (a task neither awaited nor <c>Forget()</c>-ten keeps its pooled box for ever: a leak).
    /// Empty while the tracker is off. A snapshot: tasks move on while it is taken.
    /// </summary>
    public static IReadOnlyList<TrackedTask> GetTrackedTasks() => TaskTracker.Snapshot();
}

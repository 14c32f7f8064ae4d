#if NET
using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Diagnostics.Metrics;

namespace SpindleLib;

/// <summary>
/// The instruments of the <c>Spindle</c> meter (listed on <see cref="SpindleDiagnostics"/>). The gauges and the jobs
/// counter are observable: their callbacks read state Spindle keeps anyway (queue counts, pool counts, the wheel's
/// published count, per-thread job counts) only when a listener collects, so nothing on a hot path changes for them.
/// The frame histogram and the unobserved-exception counter are recorded where the event happens, and only while a
/// listener is enabled for them.
/// </summary>
internal static class SpindleMetrics
{
    private static readonly Meter s_meter = new(SpindleDiagnostics.MeterName, typeof(SpindleMetrics).Assembly.GetName().Version?.ToString());

    /// <summary>How long each <see cref="FrameLoop.RunFrame()"/> took, in seconds.</summary>
    public static readonly Histogram<double> FrameDuration = s_meter.CreateHistogram<double>(
        "spindle.frame.duration", "s", "How long each FrameLoop.RunFrame took.");

    /// <summary>Faults reported to <see cref="Spindle.UnobservedException"/>.</summary>
    public static readonly Counter<long> UnobservedExceptions = s_meter.CreateCounter<long>(
        "spindle.unobserved_exception.count", "{exception}", "Faults reported to Spindle.UnobservedException.");

    static SpindleMetrics()
    {
        // The meter is a root of Spindle's context (the runtime's list of meters holds it, and its callbacks are Spindle
        // code): if that context is collectible, its Unloading event disposes it (CollectibleContext).
        CollectibleContext.EnsureSubscribed();
        // Names follow the OpenTelemetry conventions the runtime's own meters use (dotnet.thread_pool.thread.count,
        // dotnet.thread_pool.queue.length, dotnet.timer.count): lowercase, dotted, singular, split by attributes.
        s_meter.CreateObservableGauge("spindle.worker.count", static () => WorkerCounts(),
            "{thread}", "Spindle's worker threads, by state: idle (parked or looking for work) or busy.");
        s_meter.CreateObservableGauge("spindle.queue.length", static () => QueueLengths(),
            "{item}", "Work items waiting: global (injection and job queues) or local (the workers' own queues).");
        s_meter.CreateObservableGauge("spindle.timer.count", static () => TimerWheel.DefaultIfCreated?.PendingCount ?? 0L,
            "{timer}", "Timers waiting in TimerWheel.Default.");
        s_meter.CreateObservableGauge("spindle.pool.object.count", static () => PoolMeasurements(),
            "{object}", "Objects held by Spindle's shared pools, by pooled kind.");
        s_meter.CreateObservableCounter("spindle.job.count", static () => ThreadCounters.TotalJobsCompleted,
            "{job}", "Jobs completed, successfully or not.");
    }

    /// <summary>Creates the meter and its instruments (once), so that listeners see them; called by the components they describe.</summary>
    public static void EnsureCreated()
    {
        // Reading a static field runs the static constructor, once, before the first read.
        _ = s_meter;
    }

    /// <summary>
    /// Spindle's collectible context is unloading (<see cref="CollectibleContext.StopForUnload"/>): disposes the meter, so
    /// the runtime's list of meters lets go of it and of its callbacks. Recording on its instruments afterwards does nothing.
    /// </summary>
    public static void DisposeForUnload() => s_meter.Dispose();

    private static Measurement<int>[] WorkerCounts()
    {
        if (WorkerPool.SharedIfCreated is not { } pool)
        {
            return System.Array.Empty<Measurement<int>>();
        }
        // Idle is parked or looking for work (spinning before it parks): a spinning worker has nothing to run, and
        // counting it busy showed busy workers in a pool with nothing to do after every burst. The two counts are
        // disjoint (a worker stops spinning before it announces itself parked) but read at different moments, so the
        // sum is clamped to the pool's size.
        int idle = System.Math.Min(pool.IdleWorkers + pool.SpinningWorkers, pool.WorkerCount);
        return Split("spindle.worker.state", "idle", idle, "busy", pool.WorkerCount - idle);
    }

    private static Measurement<long>[] QueueLengths() => WorkerPool.SharedIfCreated is { } pool
        ? Split("spindle.queue", "global", pool.GlobalQueueLength, "local", pool.LocalQueueLength)
        : System.Array.Empty<Measurement<long>>();

    /// <summary>One value split two ways by one attribute.</summary>
    private static Measurement<T>[] Split<T>(string key, string first, T firstValue, string second, T secondValue)
        where T : struct => new[]
        {
            new Measurement<T>(firstValue, new KeyValuePair<string, object?>(key, first)),
            new Measurement<T>(secondValue, new KeyValuePair<string, object?>(key, second)),
        };

    private static IEnumerable<Measurement<int>> PoolMeasurements()
    {
        foreach (KeyValuePair<string, int> kind in SpindlePool.RetainedByKind())
        {
            yield return new Measurement<int>(kind.Value, new KeyValuePair<string, object?>("spindle.pool", kind.Key));
        }
    }

    /// <summary>Starts timing a frame if a listener wants frame durations; 0 if none does.</summary>
    public static long FrameStarted() => FrameDuration.Enabled ? Stopwatch.GetTimestamp() : 0;

    /// <summary>
    /// Records a frame started with <see cref="FrameStarted"/> (nothing if it returned 0), tagged <c>spindle.loop</c>
    /// with the loop's name if it has one (<see cref="FrameLoop.Name"/>): a host of many loops can tell which one is slow.
    /// One tag is passed by value: nothing is allocated.
    /// </summary>
    public static void FrameEnded(long started, string? loopName)
    {
        if (started != 0)
        {
            try
            {
                double seconds = (Stopwatch.GetTimestamp() - started) / (double)Stopwatch.Frequency;
                if (loopName is null)
                {
                    FrameDuration.Record(seconds);
                }
                else
                {
                    FrameDuration.Record(seconds, new KeyValuePair<string, object?>("spindle.loop", loopName));
                }
            }
            catch (Exception)
            {
                // A listener that throws must not break the frame loop (RunFrame records this before it marks the loop idle).
            }
        }
    }

    /// <summary>Counts a fault reported to <see cref="Spindle.UnobservedException"/>.</summary>
    public static void ExceptionReported()
    {
        try
        {
            UnobservedExceptions.Add(1);
        }
        catch (Exception)
        {
            // A listener that throws must not lose the report (the handlers run after this), nor throw into the reporting
            // thread: a worker's loop or the finalizer thread, where an escaping exception ends the process.
        }
    }
}
#else
namespace SpindleLib;

/// <summary>
/// netstandard2.1 has no <c>System.Diagnostics.Metrics</c> (it would take a package dependency that Unity projects would
/// have to carry), so Spindle publishes no metrics there and these calls do nothing.
/// </summary>
internal static class SpindleMetrics
{
    public static void EnsureCreated()
    {
    }

    public static long FrameStarted() => 0;

    public static void FrameEnded(long started, string? loopName)
    {
    }

    public static void ExceptionReported()
    {
    }

    public static void DisposeForUnload()
    {
    }
}
#endif

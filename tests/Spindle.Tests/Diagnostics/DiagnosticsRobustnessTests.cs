using System;
using System.Diagnostics;
using System.Diagnostics.Metrics;
using System.Threading;

namespace SpindleLib.Tests.Diagnostics;

/// <summary>
/// The diagnostics must never break what they watch: a task-tracker snapshot racing pooled boxes being reused, a metrics
/// listener that throws, and a manual clock advanced by an enormous span. Each failed before its fix (found by a review).
/// Sequential: they switch process-wide tracking and listen to the process-wide meter.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class DiagnosticsRobustnessTests : IDisposable
{
    public void Dispose() => SpindleDiagnostics.TrackTasks = false;

    private static async SpindleTask Work(Promise p) => await p.Task;

    /// <summary>
    /// GetTrackedTasks reads each tracked box's status without a token while its owner may recycle and reuse it: the
    /// status check (completed?) and the read of the error slot are two reads, and between them the slot may come to
    /// hold the next use's waiter state (a forgotten box's state is the box itself), which is then cast to
    /// ExceptionDispatchInfo.
    /// </summary>
    [Fact]
    public void GetTrackedTasks_WhileTrackedBoxesAreRecycledAndForgotten_NeverThrows()
    {
        SpindleDiagnostics.TrackTasks = true;
        var stop = 0;
        var churners = new Thread[2];
        for (int i = 0; i < churners.Length; i++)
        {
            churners[i] = new Thread(() =>
            {
                var p = new Promise();
                while (Volatile.Read(ref stop) == 0)
                {
                    SpindleTask t = Work(p);
                    t.Forget();
                    p.SetResult();
                    p.Reset();
                }
            });
            churners[i].Start();
        }
        Exception? failure = null;
        long snapshots = 0;
        var sw = Stopwatch.StartNew();
        try
        {
            while (sw.Elapsed < TimeSpan.FromSeconds(TestUtil.IsStress ? 60 : 4) && failure is null)
            {
                try
                {
                    SpindleDiagnostics.GetTrackedTasks();
                    snapshots++;
                }
                catch (Exception ex)
                {
                    failure = ex;
                }
            }
        }
        finally
        {
            Volatile.Write(ref stop, 1);
            foreach (Thread t in churners)
            {
                t.Join();
            }
        }
        Assert.True(failure is null, $"after {sw.Elapsed.TotalSeconds:F1} s and {snapshots} snapshots: {failure}");
    }

    /// <summary>
    /// Report counts the fault on the meter before it reaches the handlers, outside their try: a metrics listener that
    /// throws loses the report and throws into the reporting thread (Forget's caller here; a worker or the finalizer
    /// thread elsewhere, which kills the process).
    /// </summary>
    [Fact]
    public void Report_AMeterListenerThatThrows_DoesNotLoseTheReportOrThrowIntoTheReporter()
    {
        var fault = new TimeZoneNotFoundException("fault");
        var watch = UnobservedReports.Start(UnobservedReports.Own.Instances(fault)); // this test's fault only
        using var listener = new MeterListener();
        listener.InstrumentPublished = (instrument, l) =>
        {
            if (instrument.Meter.Name == SpindleDiagnostics.MeterName && instrument.Name == "spindle.unobserved_exception.count")
            {
                l.EnableMeasurementEvents(instrument);
            }
        };
        listener.SetMeasurementEventCallback<long>((_, _, _, _) => throw new InvalidOperationException("a buggy metrics listener"));
        listener.Start();
        try
        {
            Exception? thrown = Record.Exception(() => SpindleTask.FromException(fault).Forget());
            Assert.Null(thrown);
            Assert.Single(watch.Reports);
        }
        finally
        {
            watch.Dispose();
        }
    }

    /// <summary>
    /// RunFrame records the frame's duration in its finally, before it marks the loop idle: a histogram listener that
    /// throws skips Exit, and the loop stays busy for ever (every later RunFrame throws "another thread is running").
    /// </summary>
    [Fact]
    public void RunFrame_AFrameDurationListenerThatThrows_DoesNotLeaveTheLoopBusy()
    {
        var loop = new FrameLoop { FixedDeltaTime = TimeSpan.FromMilliseconds(10) };
        using (var listener = new MeterListener())
        {
            listener.InstrumentPublished = (instrument, l) =>
            {
                if (instrument.Meter.Name == SpindleDiagnostics.MeterName && instrument.Name == "spindle.frame.duration")
                {
                    l.EnableMeasurementEvents(instrument);
                }
            };
            listener.SetMeasurementEventCallback<double>((_, _, _, _) => throw new InvalidOperationException("a buggy metrics listener"));
            listener.Start();
            Record.Exception(() => loop.RunFrame());
        }
        Exception? later = Record.Exception(() => loop.RunFrame()); // the listener is gone
        Assert.Null(later);
    }

    private struct NoOpJob : IJob
    {
        public readonly void Execute()
        {
        }
    }

    /// <summary>
    /// The jobs count is summed from per-thread counts, and a thread's count moves to a retired total when the thread
    /// ends: with threads that finish jobs and end all the time, and a reader summing meanwhile, the sum never goes down
    /// and none is lost.
    /// </summary>
    [Fact]
    public void JobsCompleted_WhileThreadsThatCountComeAndGo_NeverGoesDownAndLosesNothing()
    {
        _ = WorkerPool.Shared;
        long before = ThreadCounters.TotalJobsCompleted;
        int rounds = TestUtil.Stress(40);
        const int ThreadsPerRound = 4;
        const int JobsPerThread = 50;
        int stop = 0;
        long lastSeen = before;
        bool wentDown = false;
        var reader = new Thread(() =>
        {
            while (Volatile.Read(ref stop) == 0)
            {
                long total = ThreadCounters.TotalJobsCompleted;
                if (total < lastSeen)
                {
                    wentDown = true;
                }
                lastSeen = total;
            }
        });
        reader.Start();
        for (int r = 0; r < rounds; r++)
        {
            var threads = new Thread[ThreadsPerRound];
            for (int i = 0; i < threads.Length; i++)
            {
                threads[i] = new Thread(() =>
                {
                    for (int j = 0; j < JobsPerThread; j++)
                    {
                        new NoOpJob().Schedule().Complete();
                    }
                });
                threads[i].Start();
            }
            foreach (Thread t in threads)
            {
                t.Join();
            }
        }
        Volatile.Write(ref stop, 1);
        reader.Join();

        Assert.False(wentDown);
        TestUtil.SpinUntil(() => ThreadCounters.TotalJobsCompleted >= before + (long)rounds * ThreadsPerRound * JobsPerThread);
        Assert.Equal(before + (long)rounds * ThreadsPerRound * JobsPerThread, ThreadCounters.TotalJobsCompleted);
    }

    /// <summary>
    /// ManualClock.Advance(TimeSpan.MaxValue) once the clock has moved: the target used to wrap to the past, so nothing
    /// fired and time stood still. It saturates: what is due fires once, and time reaches the end of the range.
    /// </summary>
    [Fact]
    public void ManualClock_AdvanceByMaxValue_FiresWhatIsDue()
    {
        var clock = new ManualClock();
        clock.Advance(TimeSpan.FromTicks(1));
        int fired = 0;
        using ITimer timer = clock.CreateTimer(_ => Interlocked.Increment(ref fired), null, TimeSpan.FromMilliseconds(1), Timeout.InfiniteTimeSpan);
        clock.Advance(TimeSpan.MaxValue);
        Assert.Equal(1, fired);
        Assert.Equal(TimeSpan.MaxValue, clock.Elapsed);
    }
}

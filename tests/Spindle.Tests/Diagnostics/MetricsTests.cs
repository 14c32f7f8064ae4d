using System;
using System.Collections.Generic;
using System.Diagnostics.Metrics;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Diagnostics;

/// <summary>
/// The "Spindle" meter, read the way dotnet-counters and OpenTelemetry read it: through a MeterListener. Run alone, so
/// that the counts and gauges move only with what each test does.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class MetricsTests
{
    private const string NoMeter = "no Meter: System.Diagnostics.Metrics is not part of netstandard2.1, and Unity projects would have to carry the package";

    private static readonly string[] s_instruments =
    {
        "spindle.worker.count", "spindle.queue.length", "spindle.timer.count", "spindle.pool.object.count", "spindle.job.count",
        "spindle.frame.duration", "spindle.unobserved_exception.count",
    };

    private struct NoOpJob : IJob
    {
        public readonly void Execute()
        {
        }
    }

    private struct ThrowingJob : IJob
    {
        public readonly void Execute() => throw new InvalidOperationException("job failed on purpose");
    }

    private struct NoOpForJob : IJobParallelFor
    {
        public readonly void Execute(int index)
        {
        }
    }

    /// <summary>A listener on the Spindle meter that keeps every measurement, by instrument name.</summary>
    private sealed class Recorder : IDisposable
    {
        private readonly MeterListener _listener = new();
        private readonly object _lock = new();
        private readonly List<(string Name, double Value, KeyValuePair<string, object?>[] Tags)> _measurements = new();
        private readonly List<int> _threads = new(); // the thread of each measurement, in the same order

        public Recorder(params string[] only)
        {
            _listener.InstrumentPublished = (instrument, listener) =>
            {
                if (instrument.Meter.Name == SpindleDiagnostics.MeterName && (only.Length == 0 || only.Contains(instrument.Name)))
                {
                    Published.Add(instrument.Name);
                    listener.EnableMeasurementEvents(instrument);
                }
            };
            _listener.SetMeasurementEventCallback<int>((i, v, tags, _) => Add(i.Name, v, tags));
            _listener.SetMeasurementEventCallback<long>((i, v, tags, _) => Add(i.Name, v, tags));
            _listener.SetMeasurementEventCallback<double>((i, v, tags, _) => Add(i.Name, v, tags));
            _listener.Start();
        }

        public HashSet<string> Published { get; } = new();

        private void Add(string name, double value, ReadOnlySpan<KeyValuePair<string, object?>> tags)
        {
            lock (_lock)
            {
                _measurements.Add((name, value, tags.ToArray()));
                _threads.Add(Environment.CurrentManagedThreadId);
            }
        }

        /// <summary>Collects the observable instruments once and returns what they reported.</summary>
        public List<(string Name, double Value, KeyValuePair<string, object?>[] Tags)> Observe(string name)
        {
            Clear();
            _listener.RecordObservableInstruments();
            return Recorded(name);
        }

        public double ObserveOne(string name) => Observe(name).Single().Value;

        /// <summary>What <paramref name="name"/> recorded on the thread <paramref name="threadId"/> (a counter added to inline there).</summary>
        public List<double> RecordedOn(string name, int threadId)
        {
            lock (_lock)
            {
                return _measurements.Where((m, i) => m.Name == name && _threads[i] == threadId).Select(m => m.Value).ToList();
            }
        }

        public List<(string Name, double Value, KeyValuePair<string, object?>[] Tags)> Recorded(string name)
        {
            lock (_lock)
            {
                return _measurements.Where(m => m.Name == name).ToList();
            }
        }

        public void Clear()
        {
            lock (_lock)
            {
                _measurements.Clear();
                _threads.Clear();
            }
        }

        public void Dispose() => _listener.Dispose();
    }

    /// <summary>Each measurement's value of the attribute <paramref name="key"/> (every measurement must carry it once).</summary>
    private static IEnumerable<string> TagValues(IEnumerable<(string Name, double Value, KeyValuePair<string, object?>[] Tags)> measurements, string key)
        => measurements.Select(m => (string)m.Tags.Single(t => t.Key == key).Value!);

    private static void CreateEverything()
    {
        _ = WorkerPool.Shared;
        _ = TimerWheel.Default;
        _ = new FrameLoop();
    }

    [NetBuildFact(NoMeter)]
    public void Meter_PublishesEveryInstrumentUnderItsName()
    {
        CreateEverything();
        using var recorder = new Recorder();

        Assert.Equal(s_instruments.OrderBy(n => n), recorder.Published.OrderBy(n => n));
    }

    [NetBuildFact(NoMeter)]
    public void WorkerCount_ReportsTheSharedPoolsWorkersSplitIntoIdleAndBusy()
    {
        CreateEverything();
        using var recorder = new Recorder("spindle.worker.count");

        var measurements = recorder.Observe("spindle.worker.count");
        Assert.Equal(new[] { "busy", "idle" }, TagValues(measurements, "spindle.worker.state").OrderBy(k => k));
        Assert.Equal(WorkerPool.Shared.WorkerCount, measurements.Sum(m => m.Value));
        Assert.All(measurements, m => Assert.InRange(m.Value, 0, WorkerPool.Shared.WorkerCount));
    }

#if DEBUG
    /// <summary>
    /// "idle (parked or looking for work)": a worker that ran out of work and spins, looking for more before it parks,
    /// was counted busy, so a pool with nothing to do showed busy workers after every burst. (Found by a review.)
    /// </summary>
    [NetBuildFact(NoMeter)]
    public void WorkerCount_AWorkerLookingForWork_IsIdleNotBusy()
    {
        CreateEverything();
        using var recorder = new Recorder("spindle.worker.count");
        var seen = new System.Collections.Concurrent.ConcurrentQueue<(double Idle, double Busy)>();
        int taken = 0;
        WorkerPool.TestHookStartedSpinning = () =>
        {
            if (Interlocked.Increment(ref taken) <= 10)
            {
                var m = recorder.Observe("spindle.worker.count");
                seen.Enqueue((m.Single(x => x.Tags.Any(t => (string?)t.Value == "idle")).Value, m.Single(x => x.Tags.Any(t => (string?)t.Value == "busy")).Value));
            }
        };
        try
        {
            for (int i = 0; i < 10 && seen.Count < 10; i++)
            {
                Thread.Sleep(50); // let every worker park
                var ran = new ManualResetEventSlim();
                Spindle.Run(ran.Set).Forget();
                Assert.True(ran.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)));
            }
            TestUtil.SpinUntil(() => !seen.IsEmpty);
        }
        finally
        {
            WorkerPool.TestHookStartedSpinning = null;
        }

        // Each observation is taken by a worker that spins, with nothing else to run (whatever another test left may
        // still run now and then, hence several tries): that worker counts as idle, so some observation has no busy
        // worker. Counted busy, it made every observation show at least one.
        Assert.Contains(seen, o => o.Busy == 0 && o.Idle == WorkerPool.Shared.WorkerCount);
    }
#endif

    [NetBuildFact(NoMeter)]
    public void JobCount_CountsEveryFinishedJobWhateverItsOutcomeButNotCombinedHandles()
    {
        CreateEverything();
        using var recorder = new Recorder("spindle.job.count");
        double before = recorder.ObserveOne("spindle.job.count");

        JobHandle chain = default;
        for (int i = 0; i < 50; i++)
        {
            chain = new NoOpJob().Schedule(chain);
        }
        JobHandle failed = new ThrowingJob().Schedule();
        JobHandle failedByDependency = new NoOpJob().Schedule(failed); // finishes with its dependency's fault, unrun
        JobHandle parallel = new NoOpForJob().Schedule(1000, 64);
        JobHandle all = JobHandle.CombineDependencies(chain, failedByDependency, parallel);
        Assert.Throws<InvalidOperationException>(() => all.Complete());
        Assert.Throws<InvalidOperationException>(() => failed.Complete());

        // 50 + the failing job + its dependent + the parallel-for; the combined handle is not a job.
        TestUtil.SpinUntil(() => recorder.ObserveOne("spindle.job.count") >= before + 53);
        Thread.Sleep(50);
        Assert.Equal(before + 53, recorder.ObserveOne("spindle.job.count"));
    }

    [NetBuildFact(NoMeter)]
    public void JobCount_KeepsTheCountsOfThreadsThatHaveEnded()
    {
        CreateEverything();
        using var recorder = new Recorder("spindle.job.count");
        double before = recorder.ObserveOne("spindle.job.count");

        // A thread that is not a worker runs a job itself when it helps in Complete(). With every worker held, it runs
        // all 20: their counts are its own, and must stay in the total after it has ended.
        var thread = new Thread(() =>
        {
            for (int i = 0; i < 20; i++)
            {
                new NoOpJob().Schedule().Complete();
            }
        });
        using (var hold = new HoldWorkers())
        {
            thread.Start();
            Assert.True(thread.Join(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)));
            Assert.True(hold.StillHolding); // so no worker ran any of them
        }

        Assert.Equal(before + 20, recorder.ObserveOne("spindle.job.count"));
        Assert.Equal(before + 20, recorder.ObserveOne("spindle.job.count")); // never goes down once folded in
    }

    [NetBuildFact(NoMeter)]
    public async Task TimerCount_CountsTheDefaultWheelsTimersUntilTheyAreCancelled()
    {
        CreateEverything();
        using var recorder = new Recorder("spindle.timer.count");
        double before = recorder.ObserveOne("spindle.timer.count");
        using var cts = new CancellationTokenSource();

        var delays = new List<Task>();
        await Task.Run(() =>
        {
            for (int i = 0; i < 100; i++)
            {
                delays.Add(TestUtil.AwaitAsync(Spindle.Delay(TimeSpan.FromHours(1), cts.Token)));
            }
        });
        TestUtil.SpinUntil(() => recorder.ObserveOne("spindle.timer.count") >= before + 100);

        cts.Cancel();
        foreach (Task d in delays)
        {
            await Assert.ThrowsAnyAsync<OperationCanceledException>(() => TestUtil.WithTimeout(d));
        }
        TestUtil.SpinUntil(() => recorder.ObserveOne("spindle.timer.count") <= before);
    }

    [NetBuildFact(NoMeter)]
    public void PoolObjectCount_ReportsEachPooledKindOnceWithoutItsGenericArguments()
    {
        CreateEverything();
        for (int i = 0; i < 100; i++)
        {
            new NoOpJob().Schedule().Complete();
        }
        using var recorder = new Recorder("spindle.pool.object.count");

        var measurements = recorder.Observe("spindle.pool.object.count");
        var kinds = TagValues(measurements, "spindle.pool").ToList();
        Assert.Contains("JobNode", kinds);
        Assert.Equal(kinds.Count, kinds.Distinct().Count());
        Assert.DoesNotContain(kinds, k => k.Contains('`'));
        Assert.All(measurements, m => Assert.True(m.Value >= 0));
    }

    [NetBuildFact(NoMeter)]
    public void QueueLength_ReportsTheGlobalAndTheLocalQueues()
    {
        CreateEverything();
        using var recorder = new Recorder("spindle.queue.length");

        var measurements = recorder.Observe("spindle.queue.length");
        Assert.Equal(new[] { "global", "local" }, TagValues(measurements, "spindle.queue").OrderBy(k => k));
        Assert.All(measurements, m => Assert.True(m.Value >= 0));
    }

    [NetBuildFact(NoMeter)]
    public void FrameDuration_RecordsEachRunFrameOnlyWhileListenedTo()
    {
        var loop = new FrameLoop();
        loop.RunFrame(); // nobody listens yet: nothing to record, and nothing measured

        using (var recorder = new Recorder("spindle.frame.duration"))
        {
            loop.RunFrame();
            loop.RunFrame();
            loop.RunFrame();
            var frames = recorder.Recorded("spindle.frame.duration");
            Assert.Equal(3, frames.Count);
            Assert.All(frames, f => Assert.InRange(f.Value, 0, 10));
        }

        Assert.Equal(0, SpindleMetrics.FrameStarted()); // the listener is gone: frames are not timed
    }

    /// <summary>A host of many loops tells them apart: a named loop's frames carry its name, an unnamed loop's carry no tag.</summary>
    [NetBuildFact(NoMeter)]
    public void FrameDuration_OfANamedLoop_IsTaggedWithItsName()
    {
        var named = new FrameLoop("match-7");
        var unnamed = new FrameLoop();
        using var recorder = new Recorder("spindle.frame.duration");
        named.RunFrame();
        unnamed.RunFrame();
        named.RunFrame();
        var frames = recorder.Recorded("spindle.frame.duration");
        Assert.Equal(3, frames.Count);
        Assert.Equal(new object?[] { "match-7", null, "match-7" },
            frames.Select(f => f.Tags.SingleOrDefault(t => t.Key == "spindle.loop").Value).ToArray());
        Assert.Empty(frames[1].Tags);
    }

    [System.Runtime.CompilerServices.MethodImpl(System.Runtime.CompilerServices.MethodImplOptions.NoInlining)]
    private static WeakReference RunFramesAndDropTheLoop()
    {
        var loop = new FrameLoop();
        loop.RunFrame();
        loop.RunFrame();
        return new WeakReference(loop);
    }

    /// <summary>The meter holds no reference to what it measures: a frame loop timed under a listener is collected once dropped.</summary>
    [NetBuildFact(NoMeter)]
    public void FrameDuration_TheMeterKeepsNoLoopAlive()
    {
        using var recorder = new Recorder();
        WeakReference loop = RunFramesAndDropTheLoop();
        Assert.Equal(2, recorder.Recorded("spindle.frame.duration").Count);
        recorder.Observe("spindle.worker.count");

        GC.Collect();
        GC.WaitForPendingFinalizers();
        GC.Collect();

        Assert.False(loop.IsAlive);
    }

    [NetBuildFact(NoMeter)]
    public void UnobservedExceptionCount_CountsEachReportedFault()
    {
        using var recorder = new Recorder("spindle.unobserved_exception.count");
        var a = new InvalidOperationException("nobody awaits this");
        var b = new InvalidOperationException("nor this");
        System.Collections.Concurrent.ConcurrentQueue<Exception> reported = UnobservedReports.Observe(UnobservedReports.Own.Instances(a, b), () =>
        {
            SpindleTask.FromException(a).Forget();
            SpindleTask.FromException(b).Forget();
        });

        Assert.Equal(2, reported.Count);
        // The count is added to on the reporting thread, before the handlers run: this thread's, for these two inline
        // reports. Another test's late report, on another thread, is counted too, but not here.
        Assert.Equal(2, recorder.RecordedOn("spindle.unobserved_exception.count", Environment.CurrentManagedThreadId).Sum());
    }
}

using System;
using System.Collections.Generic;
using System.Diagnostics.Metrics;
using System.Threading;
using System.Threading.Tasks;
using SpindleLib;

namespace SpindleLib.AotSmoke;

/// <summary>
/// Uses every layer of Spindle once and checks each result: published with NativeAOT by the test suite
/// (Api/NativeAotTests.cs), it shows that the library runs without a JIT and trimmed. Prints one line per check and
/// exits with 0 only if every check passed.
/// </summary>
internal static class Program
{
    private static readonly AsyncLocal<string?> s_local = new();
    private static int s_failures;

    private static int Main()
    {
        Check("tasks: an async method suspends, resumes on a worker and returns", () => AddAfterYield(20, 22).GetAwaiter().GetResult() == 42);
        Check("tasks: Promise<T> completed from another thread, then reset and reused", PromiseRoundTrips);
        Check("tasks: a pooled task awaited twice throws, naming Preserve()", AwaitTwiceThrows);
        Check("tasks: Preserve() is awaitable twice; AsTask and AsValueTask; Task and ValueTask awaited inside", Bridges);
        Check("tasks: Forget() reports a fault to Spindle.UnobservedException", ForgottenFaultIsReported);
        Check("tasks: AsyncLocal flows across awaits and into Spindle.Run", ContextFlows);
        Check("signal: set releases the waiter; a cancelled wait throws with the caller's token", SignalWorks);
        Check("workers: Spindle.Run, SwitchToWorker and Yield run on workers", RunsOnWorkers);
        Check("combinators: WhenAll and WhenAny over spans, tuples and BCL tasks", Combinators);
        Check("jobs: struct jobs with dependencies, a parallel-for, await and Complete", Jobs);
        Check("jobs: a job's exception is raised by Complete", JobFaultSurfaces);
        Check("time: Spindle.Delay waits at least its delay", RealDelay);
        Check("time: a TimerWheel on a ManualClock; WithTimeout; a periodic timer", ManualTime);
        Check("scopes: children finish before the scope; the first failure cancels the siblings", Scope);
        Check("frames: NextFrame, DelayFrame and WaitUntil resume in their frames", Frames);
        Check("diagnostics: the task tracker lists a suspended method; the meter counts jobs", Diagnostics);

        Console.WriteLine(s_failures == 0 ? "all checks passed" : $"{s_failures} check(s) failed");
        return s_failures == 0 ? 0 : 1;
    }

    private static void Check(string name, Func<bool> check)
    {
        bool ok;
        string detail = "";
        try
        {
            ok = check();
        }
        catch (Exception ex)
        {
            ok = false;
            detail = " (" + ex.GetType().Name + ": " + ex.Message + ")";
        }
        if (!ok)
        {
            s_failures++;
        }
        Console.WriteLine((ok ? "pass  " : "FAIL  ") + name + detail);
    }

    private static async SpindleTask<int> AddAfterYield(int a, int b)
    {
        await Spindle.Yield();
        return a + b;
    }

    private static bool PromiseRoundTrips()
    {
        var promise = new Promise<int>();
        int sum = 0;
        for (int i = 1; i <= 3; i++)
        {
            promise.Reset();
            SpindleTask<int> task = promise.Task;
            int value = i;
            Task.Run(() => promise.SetResult(value * 10));
            sum += task.GetAwaiter().GetResult();
        }
        return sum == 60;
    }

    private static bool AwaitTwiceThrows()
    {
        SpindleTask<int> task = AddAfterYield(1, 2);
        if (task.GetAwaiter().GetResult() != 3)
        {
            return false;
        }
        try
        {
            task.GetAwaiter().GetResult();
            return false;
        }
        catch (InvalidOperationException ex)
        {
            return ex.Message.Contains("Preserve()", StringComparison.Ordinal);
        }
    }

    private static bool Bridges()
    {
        SpindleTask<int> preserved = AddAfterYield(2, 3).Preserve();
        bool twice = preserved.GetAwaiter().GetResult() == 5 && preserved.GetAwaiter().GetResult() == 5;
        int fromTask = AddAfterYield(3, 4).AsTask().GetAwaiter().GetResult();
        int fromValueTask = AddAfterYield(4, 5).AsValueTask().AsTask().GetAwaiter().GetResult();
        int inside = AwaitBclInside().GetAwaiter().GetResult();
        return twice && fromTask == 7 && fromValueTask == 9 && inside == 3;
    }

    private static async SpindleTask<int> AwaitBclInside()
    {
        await Task.Delay(1);
        int a = await Task.Run(() => 1);
        int b = await new ValueTask<int>(2);
        return a + b;
    }

    private static bool ForgottenFaultIsReported()
    {
        using var reported = new ManualResetEventSlim();
        Exception? seen = null;
        Action<Exception> handler = ex =>
        {
            seen = ex;
            reported.Set();
        };
        Spindle.UnobservedException += handler;
        try
        {
            FailAfterYield().Forget();
            return reported.Wait(TimeSpan.FromSeconds(10)) && seen is TimeZoneNotFoundException;
        }
        finally
        {
            Spindle.UnobservedException -= handler;
        }
    }

    private static async SpindleTask FailAfterYield()
    {
        await Spindle.Yield();
        throw new TimeZoneNotFoundException("forgotten");
    }

    private static bool ContextFlows()
    {
        s_local.Value = "caller";
        try
        {
            string? afterAwait = ReadAfterYield().GetAwaiter().GetResult();
            string? inRun = Spindle.Run(() => s_local.Value).GetAwaiter().GetResult();
            return afterAwait == "caller" && inRun == "caller";
        }
        finally
        {
            s_local.Value = null;
        }
    }

    private static async SpindleTask<string?> ReadAfterYield()
    {
        await Spindle.Yield();
        return s_local.Value;
    }

    private static bool SignalWorks()
    {
        var signal = new Signal();
        SpindleTask wait = signal.WaitAsync();
        Task.Run(signal.Set);
        wait.GetAwaiter().GetResult();

        using var cts = new CancellationTokenSource();
        SpindleTask cancelled = signal.WaitAsync(cts.Token);
        cts.Cancel();
        try
        {
            cancelled.GetAwaiter().GetResult();
            return false;
        }
        catch (OperationCanceledException ex)
        {
            return ex.CancellationToken == cts.Token && !signal.HasWaiter;
        }
    }

    private static bool RunsOnWorkers()
    {
        bool ran = Spindle.Run(() => Thread.CurrentThread.Name).GetAwaiter().GetResult()?.StartsWith("Spindle", StringComparison.Ordinal) == true;
        bool switched = SwitchAndName().GetAwaiter().GetResult()?.StartsWith("Spindle", StringComparison.Ordinal) == true;
        return ran && switched;
    }

    private static async SpindleTask<string?> SwitchAndName()
    {
        await Spindle.SwitchToWorker();
        await Spindle.Yield();
        return Thread.CurrentThread.Name;
    }

    private static bool Combinators()
    {
        SpindleTask[] all = [Spindle.Delay(5), AddAfterYield(1, 1).AsSpindleTaskOfVoid(), SpindleTask.CompletedTask];
        SpindleTask.WhenAll(all).GetAwaiter().GetResult();

        var slow = new Promise<int>();
        SpindleTask<int>[] race = [slow.Task, AddAfterYield(5, 5)];
        (int index, int value) = SpindleTask.WhenAny(race).GetAwaiter().GetResult();
        slow.SetResult(0);

        (int a, string b) = SpindleTask.WhenAll(AddAfterYield(1, 2), Spindle.Run(() => "b"), CancellationToken.None).GetAwaiter().GetResult();
        Task[] bcl = [Task.Delay(2), Task.Run(() => { })];
        SpindleTask.WhenAll(bcl).GetAwaiter().GetResult();
        return index == 1 && value == 10 && a == 3 && b == "b";
    }

    private static async SpindleTask AsSpindleTaskOfVoid(this SpindleTask<int> task) => await task;

    private struct AddJob : IJob
    {
        public int[] Cells;
        public int From;
        public int To;

        public void Execute() => Cells[To] = Cells[From] + 1;
    }

    private struct SquareJob : IJobParallelFor
    {
        public int[] Values;

        public void Execute(int index) => Values[index] = index * index;
    }

    private struct FailingJob : IJob
    {
        public void Execute() => throw new DivideByZeroException("job");
    }

    private static bool Jobs()
    {
        var cells = new int[4];
        JobHandle handle = default;
        for (int i = 1; i < cells.Length; i++)
        {
            handle = new AddJob { Cells = cells, From = i - 1, To = i }.Schedule(handle);
        }
        var squares = new int[10_000];
        JobHandle parallel = new SquareJob { Values = squares }.Schedule(squares.Length, 64, default);
        JobHandle.ScheduleBatchedJobs();
        AwaitHandle(JobHandle.CombineDependencies(handle, parallel)).GetAwaiter().GetResult();
        handle.Complete();
        long sum = 0;
        foreach (int s in squares)
        {
            sum += s;
        }
        long n = squares.Length;
        return cells[3] == 3 && sum == (n - 1) * n * (2 * n - 1) / 6;
    }

    private static async SpindleTask AwaitHandle(JobHandle handle) => await handle;

    private static bool JobFaultSurfaces()
    {
        JobHandle handle = new FailingJob().Schedule(default);
        try
        {
            handle.Complete();
            return false;
        }
        catch (DivideByZeroException)
        {
            return true;
        }
    }

    private static bool RealDelay()
    {
        var watch = System.Diagnostics.Stopwatch.StartNew();
        Spindle.Delay(TimeSpan.FromMilliseconds(30)).GetAwaiter().GetResult();
        return watch.Elapsed >= TimeSpan.FromMilliseconds(30) ? true : throw new InvalidOperationException($"fired after {watch.Elapsed.TotalMilliseconds} ms");
    }

    private static bool ManualTime()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        SpindleTask delay = wheel.Delay(TimeSpan.FromMilliseconds(50));
        bool earlyDone = delay.GetAwaiter().IsCompleted;
        clock.Advance(TimeSpan.FromMilliseconds(50));
        TestUtilWaitUntil(() => delay.GetAwaiter().IsCompleted);
        delay.GetAwaiter().GetResult();

        var never = new Promise();
        SpindleTask timed = never.Task.WithTimeout(TimeSpan.FromMilliseconds(10), wheel);
        clock.Advance(TimeSpan.FromMilliseconds(10));
        bool timedOut;
        try
        {
            timed.GetAwaiter().GetResult();
            timedOut = false;
        }
        catch (TimeoutException)
        {
            timedOut = true;
        }

        using var periodic = new SpindlePeriodicTimer(TimeSpan.FromMilliseconds(5), wheel);
        SpindleTask<bool> tick = periodic.WaitForNextTickAsync();
        clock.Advance(TimeSpan.FromMilliseconds(5));
        bool ticked = tick.GetAwaiter().GetResult();
        return !earlyDone && timedOut && ticked;
    }

    private static void TestUtilWaitUntil(Func<bool> condition)
    {
        long deadline = Environment.TickCount64 + 10_000;
        while (!condition())
        {
            if (Environment.TickCount64 > deadline)
            {
                throw new TimeoutException("condition not reached in 10 s");
            }
            Thread.Yield();
        }
    }

    private static bool Scope()
    {
        int finished = 0;
        bool siblingCancelled = false;
        var scope = new TaskScope(CancellationToken.None);
        scope.Run(async ct =>
        {
            await Spindle.Delay(5, ct);
            Interlocked.Increment(ref finished);
        });
        scope.Run(async ct =>
        {
            try
            {
                await Spindle.Delay(TimeSpan.FromSeconds(30), ct);
            }
            catch (OperationCanceledException)
            {
                siblingCancelled = true;
                throw;
            }
        });
        scope.Run(async ct =>
        {
            await Spindle.Delay(20, ct);
            throw new InvalidTimeZoneException("child failed");
        });
        try
        {
            scope.WaitAsync().GetAwaiter().GetResult();
            return false;
        }
        catch (InvalidTimeZoneException)
        {
            scope.DisposeAsync().AsTask().GetAwaiter().GetResult();
            return finished == 1 && siblingCancelled && scope.RunningChildren == 0;
        }
    }

    private static bool Frames()
    {
        var loop = new FrameLoop();
        var log = new List<string>();
        bool flag = false;
        SpindleTask all = SpindleTask.WhenAll(
            Track(log, "next", async () => await loop.NextFrame()),
            Track(log, "delay3", async () => await loop.DelayFrame(3)),
            Track(log, "until", async () => await loop.WaitUntil(() => flag)));
        for (int frame = 1; frame <= 5; frame++)
        {
            if (frame == 4)
            {
                flag = true;
            }
            loop.RunFrame(TimeSpan.FromMilliseconds(16));
            log.Add("frame" + frame);
        }
        all.GetAwaiter().GetResult();
        string order = string.Join(",", log);
        // Started before frame 1: NextFrame resumes in frame 1, DelayFrame(3) in frame 3, WaitUntil in the first frame
        // that finds its predicate true (4); each entry is logged before its frame's "frameN".
        const string Expected = "next,frame1,frame2,delay3,frame3,until,frame4,frame5";
        return order == Expected ? true : throw new InvalidOperationException("frame order was " + order);
    }

    private static async SpindleTask Track(List<string> log, string name, Func<SpindleTask> body)
    {
        await body();
        log.Add(name);
    }

    private static bool Diagnostics()
    {
        SpindleDiagnostics.TrackTasks = true;
        SpindleDiagnostics.CaptureStackTraces = true;
        var gate = new Promise();
        SpindleTask waiting = WaitFor(gate);
        bool listed = false;
        foreach (TrackedTask tracked in SpindleDiagnostics.GetTrackedTasks())
        {
            listed |= tracked.Method.Contains(nameof(WaitFor), StringComparison.Ordinal);
        }
        gate.SetResult();
        waiting.GetAwaiter().GetResult();
        SpindleDiagnostics.TrackTasks = false;

        long jobs = 0;
        using var listener = new MeterListener();
        listener.InstrumentPublished = (instrument, l) =>
        {
            if (instrument.Meter.Name == SpindleDiagnostics.MeterName && instrument.Name == "spindle.job.count")
            {
                l.EnableMeasurementEvents(instrument);
            }
        };
        listener.SetMeasurementEventCallback<long>((_, value, _, _) => jobs += value);
        listener.Start();
        listener.RecordObservableInstruments();
        long before = jobs;
        new FailingJob().Schedule(default).AsSpindleTask().AsTask().ContinueWith(_ => { }, TaskScheduler.Default).GetAwaiter().GetResult();
        jobs = 0;
        listener.RecordObservableInstruments();
        return listed && jobs >= before + 1;
    }

    private static async SpindleTask WaitFor(Promise gate) => await gate.Task;
}

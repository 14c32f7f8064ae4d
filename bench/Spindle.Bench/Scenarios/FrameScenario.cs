using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Threading;
using System.Threading.Tasks;
using SpindleLib.Bench.Harness;

namespace SpindleLib.Bench.Scenarios;

/// <summary>
/// Seed 004: N background tasks on a frame loop, each resuming once per frame and doing trivial work (a counter), for a
/// fixed number of frames. The BCL's way is <c>await Task.Yield()</c> under a single-threaded SynchronizationContext that
/// runs the callbacks posted to it once per frame, as Unity's player loop does; Spindle's is <see cref="FrameLoop"/>.
/// </summary>
public sealed class FrameScenario : Scenario
{
    private const int WarmFrames = 3;

    public override string Id => "frame";

    public override string Title => "N background tasks on a frame loop, each resuming once per frame";

    public override string Seed => "004";

    public override string Baseline => "Task";

    public override string Notes =>
        "Each task loops: await, then count (trivial work), for a fixed number of frames; one thread runs the frames. Task: an async Task " +
        "method awaiting Task.Yield() under a SynchronizationContext that, as Unity's UnitySynchronizationContext, appends each Post to a list " +
        "under a lock and runs the list once per frame (posts made while it runs wait for the next frame), walking it in order. " +
        "TaskUnityContext: the same, but draining as Unity's context does, taking each request off the head of the list (RemoveAt(0)), " +
        "which is quadratic in N: this is most of seed 004's 883 ms at 50,000 tasks (at 50,000, one round of one measured frame, as each " +
        "takes about half a second). Spindle: an async SpindleTask method awaiting FrameLoop.NextFrame() (its state-machine box goes straight " +
        "into the Update queue). Every system builds a fresh context or loop per round. startup_bytes: all threads' allocations while the N " +
        "tasks start and reach their first await, Spindle's pools emptied first (a cold start; a warm start reuses pooled boxes). " +
        "bytes_per_frame and ms_per_frame: over the measured frames, after " + WarmFrames + " warm frames. UniTask is not a system here: its " +
        "player loop runs only inside Unity.";

    public override void Run(BenchContext context)
    {
        foreach (int n in new[] { 100, 500, 50_000 })
        {
            string caseName = "tasks=" + n;
            // Enough frames per round for a stable time: many cheap frames for few tasks, fewer for 50,000.
            int measured = context.Pick(2, Math.Clamp(100_000 / n, 10, 1_000), Math.Clamp(1_000_000 / n, 50, 5_000));
            Measure(context, caseName, "Task", n, measured, TaskRound);
            if (n <= 1_000)
            {
                Measure(context, caseName, "TaskUnityContext", n, measured, UnityRound);
            }
            else
            {
                // Quadratic: about half a second per frame at 50,000 tasks. One round of one frame (two in full mode) says enough.
                MeasureOnce(context, caseName, "TaskUnityContext", n, context.Size == BenchSize.Full ? 2 : 1, UnityRound);
            }
            Measure(context, caseName, "Spindle", n, measured, SpindleRound);
        }
    }

    private readonly record struct RoundResult(double StartupBytes, double BytesPerFrame, double MsPerFrame);

    private static void Measure(BenchContext context, string caseName, string system, int tasks, int measuredFrames,
        Func<int, int, RoundResult> round)
    {
        context.Progress($"{caseName} › {system}: warm-up");
        context.Warmup(() => round(tasks, measuredFrames));
        int rounds = context.Rounds;
        var startup = new double[rounds];
        var bytes = new double[rounds];
        var ms = new double[rounds];
        for (int r = 0; r < rounds; r++)
        {
            context.Progress($"{caseName} › {system}: round {r + 1}/{rounds}");
            BenchContext.Settle();
            RoundResult result = round(tasks, measuredFrames);
            startup[r] = result.StartupBytes;
            bytes[r] = result.BytesPerFrame;
            ms[r] = result.MsPerFrame;
        }
        context.Add(caseName, system, "startup_bytes", startup);
        context.Add(caseName, system, "bytes_per_frame", bytes);
        context.Add(caseName, system, "ms_per_frame", ms);
    }

    /// <summary>One unwarmed round, for a system too slow to warm up and repeat at this size.</summary>
    private static void MeasureOnce(BenchContext context, string caseName, string system, int tasks, int measuredFrames,
        Func<int, int, RoundResult> round)
    {
        context.Progress($"{caseName} › {system}: one round");
        BenchContext.Settle();
        RoundResult result = round(tasks, -measuredFrames);
        context.Add(caseName, system, "startup_bytes", result.StartupBytes);
        context.Add(caseName, system, "bytes_per_frame", result.BytesPerFrame);
        context.Add(caseName, system, "ms_per_frame", result.MsPerFrame);
    }

    private sealed class Counter
    {
        public int Value;
    }

    /// <summary>
    /// Runs one round: start the tasks (measuring their allocations), run the warm frames, measure the measured frames,
    /// then run the last frame, in which every task finishes, and check every task counted every frame. A negative
    /// <paramref name="measuredFrames"/> asks for a short round: that many frames measured with no warm frames, after
    /// which the tasks are abandoned with their context.
    /// </summary>
    private static RoundResult Round(int tasks, int measuredFrames, Action<Counter, int> start, Action runFrame)
    {
        bool shortRound = measuredFrames < 0;
        int warmFrames = shortRound ? 0 : WarmFrames;
        measuredFrames = Math.Abs(measuredFrames);
        int frames = warmFrames + measuredFrames + 1;
        var counters = new Counter[tasks];
        for (int i = 0; i < tasks; i++)
        {
            counters[i] = new Counter();
        }

        long a0 = GC.GetTotalAllocatedBytes(true);
        for (int i = 0; i < tasks; i++)
        {
            start(counters[i], frames);
        }
        long a1 = GC.GetTotalAllocatedBytes(true);

        for (int f = 0; f < warmFrames; f++)
        {
            runFrame();
        }
        long a2 = GC.GetTotalAllocatedBytes(true);
        long t0 = Stopwatch.GetTimestamp();
        for (int f = 0; f < measuredFrames; f++)
        {
            runFrame();
        }
        long t1 = Stopwatch.GetTimestamp();
        long a3 = GC.GetTotalAllocatedBytes(true);
        var result = new RoundResult(a1 - a0, (double)(a3 - a2) / measuredFrames, (t1 - t0) * 1000.0 / Stopwatch.Frequency / measuredFrames);
        if (shortRound)
        {
            return result;
        }
        runFrame();

        foreach (Counter c in counters)
        {
            if (c.Value != frames)
            {
                throw new InvalidOperationException($"A task counted {c.Value} frames instead of {frames}.");
            }
        }
        return result;
    }

    // ---- Task: Task.Yield under a once-per-frame SynchronizationContext ----

    /// <summary>
    /// A single-threaded context in the manner of Unity's UnitySynchronizationContext: Post appends the callback to a list
    /// under a lock; once per frame the loop swaps the list out and runs it. Callbacks posted while it runs go to the
    /// next frame. (Unity's drain takes each request with RemoveAt(0); this one walks the list, see the scenario notes.)
    /// </summary>
    private sealed class FrameSynchronizationContext : SynchronizationContext
    {
        private readonly object _lock = new();
        private List<WorkRequest> _queue = new();
        private List<WorkRequest> _running = new();

        private readonly record struct WorkRequest(SendOrPostCallback Callback, object? State);

        public override void Post(SendOrPostCallback d, object? state)
        {
            lock (_lock)
            {
                _queue.Add(new WorkRequest(d, state));
            }
        }

        public override void Send(SendOrPostCallback d, object? state) => d(state);

        public override SynchronizationContext CreateCopy() => this;

        public void RunFrame()
        {
            List<WorkRequest> work;
            lock (_lock)
            {
                work = _queue;
                _queue = _running;
            }
            foreach (WorkRequest w in work)
            {
                w.Callback(w.State);
            }
            work.Clear();
            _running = work;
        }
    }

    /// <summary>
    /// Unity's UnitySynchronizationContext as it drains: requests (callback, state, wait handle) are appended under a lock;
    /// once per frame they are moved to a second list, and each is taken off that list's head before it runs.
    /// </summary>
    private sealed class UnitySynchronizationContextModel : SynchronizationContext
    {
        private readonly List<WorkRequest> _asyncWorkQueue = new(20);
        private readonly List<WorkRequest> _currentFrameWork = new(20);

        private readonly record struct WorkRequest(SendOrPostCallback Callback, object? State, ManualResetEvent? WaitHandle);

        public override void Post(SendOrPostCallback d, object? state)
        {
            lock (_asyncWorkQueue)
            {
                _asyncWorkQueue.Add(new WorkRequest(d, state, null));
            }
        }

        public override void Send(SendOrPostCallback d, object? state) => d(state);

        public override SynchronizationContext CreateCopy() => this;

        public void RunFrame()
        {
            lock (_asyncWorkQueue)
            {
                _currentFrameWork.AddRange(_asyncWorkQueue);
                _asyncWorkQueue.Clear();
            }
            while (_currentFrameWork.Count > 0)
            {
                WorkRequest work = _currentFrameWork[0];
                _currentFrameWork.RemoveAt(0);
                work.Callback(work.State);
                work.WaitHandle?.Set();
            }
        }
    }

    private static async Task TaskLoop(Counter counter, int frames)
    {
        for (int i = 0; i < frames; i++)
        {
            await Task.Yield();
            counter.Value++;
        }
    }

    private static RoundResult TaskRound(int tasks, int measuredFrames)
    {
        SynchronizationContext? previous = SynchronizationContext.Current;
        var context = new FrameSynchronizationContext();
        SynchronizationContext.SetSynchronizationContext(context);
        try
        {
            return Round(tasks, measuredFrames, static (c, frames) => _ = TaskLoop(c, frames), context.RunFrame);
        }
        finally
        {
            SynchronizationContext.SetSynchronizationContext(previous);
        }
    }

    private static RoundResult UnityRound(int tasks, int measuredFrames)
    {
        SynchronizationContext? previous = SynchronizationContext.Current;
        var context = new UnitySynchronizationContextModel();
        SynchronizationContext.SetSynchronizationContext(context);
        try
        {
            return Round(tasks, measuredFrames, static (c, frames) => _ = TaskLoop(c, frames), context.RunFrame);
        }
        finally
        {
            SynchronizationContext.SetSynchronizationContext(previous);
        }
    }

    // ---- Spindle: FrameLoop.NextFrame ----

    private static async SpindleTask SpindleLoop(FrameLoop loop, Counter counter, int frames)
    {
        for (int i = 0; i < frames; i++)
        {
            await loop.NextFrame();
            counter.Value++;
        }
    }

    private static RoundResult SpindleRound(int tasks, int measuredFrames)
    {
        var loop = new FrameLoop();
        loop.RunFrame(); // this thread becomes the loop thread: the tasks start on it, as they would in a game
        SpindlePool.Trim();
        return Round(tasks, measuredFrames, (c, frames) => SpindleLoop(loop, c, frames).Forget(), loop.RunFrame);
    }
}

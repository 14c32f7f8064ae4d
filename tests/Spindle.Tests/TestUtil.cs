using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests;

/// <summary>Helpers shared by the whole suite: timeouts, the stress tier, dedicated threads.</summary>
internal static class TestUtil
{
    /// <summary>The default bound, in seconds, on anything that could hang.</summary>
    public const int DefaultTimeoutSeconds = 30;

    /// <summary>True when SPINDLE_STRESS=1: the stress tests then run 20 times longer.</summary>
    public static bool IsStress { get; } = Environment.GetEnvironmentVariable("SPINDLE_STRESS") == "1";

    /// <summary>Scales an iteration count for the stress tier.</summary>
    public static int Stress(int iterations) => IsStress ? checked(iterations * 20) : iterations;

    /// <summary>The timeout, in seconds, for a stress test: scaled with the stress tier.</summary>
    public static int StressTimeout(int seconds) => IsStress ? seconds * 20 : seconds;

    /// <summary>Runs <paramref name="faulting"/>, which must throw, and returns what it threw (its trace as the awaiting code saw it).</summary>
    public static async Task<Exception> Catch(Func<Task> faulting)
    {
        try
        {
            await faulting();
        }
        catch (Exception e)
        {
            return e;
        }
        throw new InvalidOperationException("expected a fault");
    }

    /// <summary>Awaits <paramref name="task"/>, failing with <see cref="TimeoutException"/> after <paramref name="seconds"/>.</summary>
    public static async Task WithTimeout(Task task, int seconds = DefaultTimeoutSeconds)
        => await task.WaitAsync(TimeSpan.FromSeconds(seconds));

    /// <summary>Awaits <paramref name="task"/>, failing with <see cref="TimeoutException"/> after <paramref name="seconds"/>.</summary>
    public static async Task<T> WithTimeout<T>(Task<T> task, int seconds = DefaultTimeoutSeconds)
        => await task.WaitAsync(TimeSpan.FromSeconds(seconds));

    /// <summary>
    /// Awaits <paramref name="task"/>, failing with <see cref="TimeoutException"/> only when <paramref name="progress"/> has
    /// not moved for <paramref name="seconds"/>: for a fixed amount of work (rounds, hand-offs) whose whole time a loaded
    /// machine stretches without bound, while a lost wake-up stops its progress for good. The message adds what
    /// <paramref name="describe"/> returns then.
    /// </summary>
    public static async Task WithStallTimeout(Task task, Func<long> progress, Func<string> describe, int seconds = DefaultTimeoutSeconds)
    {
        long seen = progress();
        while (!task.IsCompleted)
        {
            await Task.WhenAny(task, Task.Delay(TimeSpan.FromSeconds(seconds)));
            long now = progress();
            if (!task.IsCompleted && now == seen)
            {
                throw new TimeoutException("No progress in " + seconds + " s: " + describe());
            }
            seen = now;
        }
        await task;
    }

    /// <summary>Awaits a Spindle task from a BCL async method (the bridge every await-based test uses).</summary>
    public static async Task AwaitAsync(SpindleTask task) => await task;

    /// <summary>Awaits a Spindle task from a BCL async method.</summary>
    public static async Task<T> AwaitAsync<T>(SpindleTask<T> task) => await task;

    /// <summary>Awaits a Spindle task with a timeout.</summary>
    public static Task WithTimeout(SpindleTask task, int seconds = DefaultTimeoutSeconds) => WithTimeout(AwaitAsync(task), seconds);

    /// <summary>Awaits a Spindle task with a timeout.</summary>
    public static Task<T> WithTimeout<T>(SpindleTask<T> task, int seconds = DefaultTimeoutSeconds) => WithTimeout(AwaitAsync(task), seconds);

    /// <summary>
    /// Runs <paramref name="action"/> (a clock's advance, a pass, a frame: something that must return) on a pool thread,
    /// failing with <paramref name="message"/> if it has not returned within the default timeout.
    /// </summary>
    public static void AssertReturns(Action action, string message)
        => Assert.True(Task.Run(action).Wait(TimeSpan.FromSeconds(DefaultTimeoutSeconds)), message);

    /// <summary>
    /// Runs <paramref name="body"/> on a new dedicated thread (never a Spindle worker or a pool thread), and returns a
    /// task that completes when it returns, faulted if it threw.
    /// </summary>
    public static Task RunOnThread(Action body, string name = "spindle-test", int maxStackSize = 0)
    {
        var done = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        object? mark = UnobservedReports.Own.ThreadMark; // the starting test's thread is its own: so is this one
        var thread = new Thread(() =>
        {
            UnobservedReports.Own.ThreadMark = mark;
            try
            {
                body();
                done.SetResult();
            }
            catch (Exception ex)
            {
                done.SetException(ex);
            }
        }, maxStackSize)
        {
            IsBackground = true,
            Name = name,
        };
        thread.Start();
        return done.Task;
    }

    /// <summary>
    /// Runs <paramref name="leave"/> on a new thread, which then idles (no later build, throw or read clears anything it
    /// keeps), collects garbage, and says whether the object the returned reference names is still alive. Rethrows what
    /// <paramref name="leave"/> threw, on the test's thread.
    /// </summary>
    public static bool StaysAliveWhileItsThreadIdles(Func<WeakReference> leave)
    {
        WeakReference? weak = null;
        Exception? failed = null;
        using var done = new ManualResetEventSlim();
        using var release = new ManualResetEventSlim();
        var thread = new Thread(() =>
        {
            try
            {
                weak = leave();
            }
            catch (Exception ex)
            {
                failed = ex; // rethrown on the test's thread, not left to crash the host
            }
            done.Set();
            release.Wait();
        })
        {
            IsBackground = true,
        };
        thread.Start();
        done.Wait();
        try
        {
            if (failed is not null)
            {
                System.Runtime.ExceptionServices.ExceptionDispatchInfo.Throw(failed);
            }
            GC.Collect();
            GC.WaitForPendingFinalizers();
            GC.Collect();
            return weak!.IsAlive;
        }
        finally
        {
            release.Set();
            thread.Join();
        }
    }

    /// <summary>Collects garbage (finalizers included) and counts the references whose objects are still alive.</summary>
    public static int CountAliveAfterCollection(IEnumerable<WeakReference> references)
    {
        GC.Collect();
        GC.WaitForPendingFinalizers();
        GC.Collect();
        int alive = 0;
        foreach (WeakReference reference in references)
        {
            alive += reference.IsAlive ? 1 : 0;
        }
        return alive;
    }

    /// <summary>Spins (yielding) until <paramref name="condition"/> holds; throws <see cref="TimeoutException"/> after <paramref name="seconds"/>.</summary>
    /// <remarks>
    /// On one of the default pool's workers (a test's code after an await may run on one) it helps while it waits
    /// (<see cref="PollHelping"/>): a plain spin there blocks the one thread that runs that worker's run-next item and its
    /// own timers, which the condition may be waiting for (a timer stopped in its shard leaves the count only when it
    /// looks; the scenario test that spun so failed in two CI runs, SystemClockServerScenarioTests).
    /// </remarks>
    public static void SpinUntil(Func<bool> condition, int seconds = DefaultTimeoutSeconds)
        => SpinUntil(condition, static () => "", seconds);

    /// <summary>
    /// As <see cref="SpinUntil(Func{bool}, int)"/>; on timeout the exception's message adds what
    /// <paramref name="describe"/> returns then (the state that kept the condition false: counts, <c>Describe()</c>s).
    /// </summary>
    public static void SpinUntil(Func<bool> condition, Func<string> describe, int seconds = DefaultTimeoutSeconds)
    {
        TimeSpan timeout = TimeSpan.FromSeconds(seconds);
        bool held = WorkerPool.Shared.IsWorkerThread ? PollHelping(condition, timeout) : SpinWait.SpinUntil(condition, timeout);
        if (!held)
        {
            string state = describe();
            throw new TimeoutException("The condition did not hold within " + seconds + " s." + (state.Length == 0 ? "" : " " + state));
        }
    }

    /// <summary>
    /// Waits until <paramref name="read"/> returns one value for <paramref name="quietMs"/> milliseconds running (sampled
    /// every 10 ms), for up to <paramref name="seconds"/>; false if it was still changing then. For a count of callbacks
    /// that a system-clock wheel took before a test stopped arming it: they run on workers, which a loaded machine may hold
    /// off for longer than any fixed sleep (two stress tests' 20-100 ms sleeps were outrun so), so the count is read once it
    /// has stopped moving rather than after a set time.
    /// </summary>
    public static bool WaitUntilUnchanged(Func<long> read, int quietMs = 250, int seconds = DefaultTimeoutSeconds)
    {
        var clock = Stopwatch.StartNew();
        var quiet = Stopwatch.StartNew();
        long last = read();
        while (quiet.ElapsedMilliseconds < quietMs)
        {
            if (clock.Elapsed > TimeSpan.FromSeconds(seconds))
            {
                return false;
            }
            Thread.Sleep(10);
            long now = read();
            if (now != last)
            {
                last = now;
                quiet.Restart();
            }
        }
        return true;
    }

    /// <summary>
    /// Polls <paramref name="condition"/> for up to <paramref name="timeout"/>, running queued work between polls as a
    /// thread blocked in a job's Complete() does (a worker runs any of its work, another thread only jobs): work that is
    /// visible gets done even when the polling thread is the only worker (a test's code after an await may run on one),
    /// and work that is not visible yet cannot be.
    /// </summary>
    public static bool PollHelping(Func<bool> condition, TimeSpan timeout)
    {
        var clock = Stopwatch.StartNew();
        while (!condition())
        {
            if (clock.Elapsed > timeout)
            {
                return false;
            }
            if (!WorkerPool.Shared.TryRunHelpable())
            {
                Thread.Yield();
            }
        }
        return true;
    }

    /// <summary>True when the calling thread is one of the default worker pool's threads.</summary>
    public static bool OnSpindleWorker => Thread.CurrentThread.Name?.StartsWith("Spindle worker", StringComparison.Ordinal) == true;

    /// <summary>
    /// Moves the caller off the Spindle workers: a test that runs a frame loop, or blocks, must not run on one (a test can
    /// start on a worker when the previous one ended there, and a worker that runs a loop's frames cannot also run the
    /// work those frames wait for when it is the only one, on one processor).
    /// </summary>
    /// <remarks>
    /// Where the caller goes on is decided when its await looks, not when something elsewhere finishes: it was an async
    /// method that awaited Task.Yield until off the workers, and a thread-pool thread that finished it before the caller's
    /// await looked let the caller go on synchronously, on its worker (TestUtilTests).
    /// </remarks>
    public static LeaveWorkersAwaitable LeaveSpindleWorkers() => default;

    /// <summary>
    /// Runs <paramref name="onEachWorker"/> once on every Spindle worker, all at once: one item per worker, held together
    /// by a barrier so that no worker takes two. Waits, within the suite's bound, for every one to return.
    /// </summary>
    public static async Task RunOnEveryWorkerAtOnce(Action onEachWorker)
    {
        int n = Spindle.WorkerCount;
        using var together = new Barrier(n);
        var items = new Task[n];
        for (int i = 0; i < n; i++)
        {
            items[i] = AwaitAsync(Spindle.Run(() =>
            {
                Assert.True(together.SignalAndWait(TimeSpan.FromSeconds(DefaultTimeoutSeconds)), "every worker should take one of the items");
                onEachWorker();
            }));
        }
        await WithTimeout(Task.WhenAll(items));
    }

    /// <summary>
    /// What <see cref="LeaveSpindleWorkers"/> returns: complete off the Spindle workers; on one, it resumes the caller on
    /// a thread-pool thread (never a worker), whenever the caller awaits it.
    /// </summary>
    public readonly struct LeaveWorkersAwaitable : System.Runtime.CompilerServices.INotifyCompletion
    {
        /// <summary>Itself: the awaitable is its own awaiter.</summary>
        public LeaveWorkersAwaitable GetAwaiter() => this;

        /// <summary>True off the workers, read when the caller's await looks: the caller goes on where it is.</summary>
        public bool IsCompleted => !OnSpindleWorker && !WorkerPool.Shared.IsWorkerThread;

        /// <summary>Resumes the caller on a thread-pool thread.</summary>
        public void OnCompleted(Action continuation)
            => ThreadPool.QueueUserWorkItem(static state => ((Action)state!)(), continuation);

        /// <summary>Nothing to return.</summary>
        public void GetResult()
        {
        }
    }

    /// <summary>An async method that completes without suspending (it would only suspend for a negative input).</summary>
    internal static async SpindleTask CompletesSynchronously(int x)
    {
        if (x < 0)
        {
            await Spindle.Yield();
        }
    }

    /// <summary>As <see cref="CompletesSynchronously"/>, returning x + 1.</summary>
    internal static async SpindleTask<int> CompletesSynchronouslyWithValue(int x)
    {
        if (x < 0)
        {
            await Spindle.Yield();
        }
        return x + 1;
    }

    /// <summary>
    /// Asserts that <paramref name="iteration"/> allocates nothing on this thread in steady state: warms up, then measures
    /// runs of <paramref name="iterations"/> until one allocates nothing, within a bound. A run or two may still include
    /// tier-0 code (which can box where optimized code does not), but a per-operation allocation shows in every run.
    /// </summary>
    internal static void AssertSteadyStateAllocatesNothing(Action<int> iteration, int iterations)
    {
        for (int i = 0; i < 2 * iterations; i++)
        {
            iteration(i);
        }
        long fewest = long.MaxValue;
        int runs = 0;
        System.Diagnostics.Stopwatch bound = System.Diagnostics.Stopwatch.StartNew();
        while (fewest != 0 && (runs < 20 || bound.Elapsed < TimeSpan.FromSeconds(10)))
        {
            long before = GC.GetAllocatedBytesForCurrentThread();
            for (int i = 0; i < iterations; i++)
            {
                iteration(i);
            }
            fewest = Math.Min(fewest, GC.GetAllocatedBytesForCurrentThread() - before);
            runs++;
        }
        Assert.True(fewest == 0, $"{iterations} iterations allocated at least {fewest} bytes in every one of {runs} measured runs");
    }
}

/// <summary>
/// Occupies workers with blocking Spindle.Run items until disposed: every worker (so only the test thread runs jobs), or
/// <c>count</c> of them. Only for tests that run alone (SequentialCollection), and never on a Spindle worker: an async
/// test starts on one when the test before it ended there, so it leaves them first (<see cref="TestUtil.LeaveSpindleWorkers"/>).
/// </summary>
internal sealed class HoldWorkers : IDisposable
{
    private readonly ManualResetEventSlim _release = new(false);
    private readonly SpindleTask[] _items;

    public HoldWorkers()
        : this(WorkerPool.Shared.WorkerCount)
    {
    }

    public HoldWorkers(int count)
    {
        if (count < 0 || count > WorkerPool.Shared.WorkerCount)
        {
            throw new ArgumentOutOfRangeException(nameof(count), count, $"between 0 and the {WorkerPool.Shared.WorkerCount} workers");
        }
        if (WorkerPool.Shared.IsWorkerThread)
        {
            // The caller would be a worker it cannot hold (holding every worker stalled until the items' 30 s bound), or
            // the one left free, blocked in the test's own waits: JobCompleteConcurrencyTests stalled so in a full run.
            throw new InvalidOperationException(
                "HoldWorkers was created on a Spindle worker: await TestUtil.LeaveSpindleWorkers() first (a test starts on a worker when the one before it ended there), or create it inside Task.Run (thread: "
                + Thread.CurrentThread.Name + ").");
        }
        using var started = new CountdownEvent(count);
        _items = new SpindleTask[count];
        for (int i = 0; i < count; i++)
        {
            _items[i] = Spindle.Run(() =>
            {
                started.Signal();
                _release.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds));
            });
        }
        if (!started.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)))
        {
            _release.Set();
            throw new TimeoutException("not every worker picked up a holding item");
        }
    }

    /// <summary>False once a holding item has let its worker go without being released (its 30 s bound ran out).</summary>
    public bool StillHolding
    {
        get
        {
            foreach (SpindleTask item in _items)
            {
                if (item.IsCompleted)
                {
                    return false;
                }
            }
            return true;
        }
    }

    public void Dispose()
    {
        _release.Set();
        foreach (SpindleTask item in _items)
        {
            TestUtil.WithTimeout(item).GetAwaiter().GetResult();
        }
    }
}

/// <summary>
/// Forces races: in each round every racer starts at the same moment (a <see cref="Barrier"/>), each on its own
/// dedicated thread; <c>before</c> and <c>after</c> run on racer 0's thread while the others wait at the barrier.
/// </summary>
/// <remarks>
/// No round starts after <see cref="Budget"/>: on an oversubscribed machine a round (two barrier phases, and often a
/// worker to wake) can take milliseconds instead of microseconds, and a fixed count of rounds then outran the callers'
/// timeouts (seen: 20,000 rounds taking 0.5 s alone, 40 s beside one CPU burner, over 120 s beside two test processes).
/// Under load a race test runs fewer rounds instead of failing; a hang is still caught by the barrier's own bound.
/// </remarks>
internal static class Race
{
    /// <summary>
    /// How long rounds keep starting: well inside the callers' own timeouts (30 s and up), under SPINDLE_STRESS too (which
    /// asks for 20 times the rounds, as many as fit). It was 20 times longer there, past those timeouts: a stress run
    /// whose rounds were slow (a loaded machine) failed with a TimeoutException while it was still making progress.
    /// </summary>
    public static TimeSpan Budget { get; } = TimeSpan.FromSeconds(20);

    /// <summary>Runs up to <paramref name="rounds"/> rounds (fewer past <see cref="Budget"/>) and returns how many ran.</summary>
    public static Task<int> Run(int rounds, Action<int> before, Action<int> after, params Action<int>[] racers)
        => Run(rounds, 1, before, after, racers);

    /// <summary>
    /// Runs up to <paramref name="rounds"/> rounds, and returns how many ran: fewer past <see cref="Budget"/>, but never
    /// fewer than <paramref name="minRounds"/>, however long they take (for a test whose check needs that many: a count
    /// asked of the budget instead depended on the machine's load). The caller's timeout bounds them.
    /// </summary>
    public static Task<int> Run(int rounds, int minRounds, Action<int> before, Action<int> after, params Action<int>[] racers)
    {
        int n = racers.Length;
        var barrier = new Barrier(n);
        Exception? failure = null;
        var threads = new Task[n];
        TimeSpan stuck = TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds);
        var elapsed = Stopwatch.StartNew();
        bool stop = false; // written by racer 0 before a barrier, read by all after it: they all leave at the same round
        int ran = 0; // counted by racer 0 after each round's `after`

        void Step(Action<int> action, int round)
        {
            if (Volatile.Read(ref failure) is not null)
            {
                return;
            }
            try
            {
                action(round);
            }
            catch (Exception ex)
            {
                Interlocked.CompareExchange(ref failure, new InvalidOperationException("Round " + round + " failed: " + ex.Message, ex), null);
            }
        }

        void Arrive()
        {
            if (!barrier.SignalAndWait(stuck))
            {
                throw new TimeoutException("A racer did not reach the barrier: something hung.");
            }
        }

        for (int k = 0; k < n; k++)
        {
            int me = k;
            threads[k] = TestUtil.RunOnThread(() =>
            {
                for (int round = 0; round < rounds; round++)
                {
                    if (me == 0)
                    {
                        if (round >= minRounds && elapsed.Elapsed > Budget)
                        {
                            Volatile.Write(ref stop, true);
                        }
                        else
                        {
                            Step(before, round);
                        }
                    }
                    Arrive();
                    if (Volatile.Read(ref stop))
                    {
                        break;
                    }
                    Step(racers[me], round);
                    Arrive();
                    if (me == 0)
                    {
                        Step(after, round);
                        ran = round + 1;
                    }
                }
            }, "racer " + k);
        }
        return Task.WhenAll(threads).ContinueWith(
            t =>
            {
                barrier.Dispose();
                t.GetAwaiter().GetResult();
                if (failure is not null)
                {
                    throw failure;
                }
                return ran;
            },
            CancellationToken.None,
            TaskContinuationOptions.ExecuteSynchronously,
            TaskScheduler.Default);
    }
}

/// <summary>
/// A test of something only the net10.0 build does (its meter, its inline runs, its allocation-free reuse of what
/// netstandard2.1 lacks the API to reset). The whole suite also runs against the netstandard2.1 build
/// (tests/Spindle.NetStandard.Tests compiles these files with SPINDLE_NETSTANDARD_BUILD): there the test is reported
/// as skipped, with the reason.
/// </summary>
public sealed class NetBuildFactAttribute : FactAttribute
{
    /// <param name="notOnNetStandard">Why the netstandard2.1 build behaves differently.</param>
    public NetBuildFactAttribute(string notOnNetStandard)
    {
#if SPINDLE_NETSTANDARD_BUILD
        Skip = "netstandard2.1 build: " + notOnNetStandard;
#else
        _ = notOnNetStandard;
#endif
    }
}

/// <summary>
/// Tests that touch process-wide state (the UnobservedException event, the default scheduler, the pool cap and
/// counts) or that need the machine to themselves (the long races). xUnit runs these collections after all the
/// parallel ones, one test at a time.
/// </summary>
[CollectionDefinition(Name, DisableParallelization = true)]
public sealed class SequentialCollection
{
    public const string Name = "Sequential (global state and long races)";

}

/// <summary>Helpers for frame-loop tests: loops bound to the test's thread, running frames, and where a loop is.</summary>
internal static class FrameUtil
{
    /// <summary>The step the loops of these tests advance by: round numbers make delays' frames easy to work out.</summary>
    public static readonly TimeSpan Step = TimeSpan.FromMilliseconds(10);

    /// <summary>
    /// A loop whose loop thread is the calling thread: it has run frame 1 (empty), so loop time is one
    /// <see cref="Step"/> and awaits made now, between frames 1 and 2, go straight to the phases.
    /// </summary>
    public static FrameLoop NewBoundLoop()
    {
        var loop = new FrameLoop { FixedDeltaTime = Step };
        loop.RunFrame();
        return loop;
    }

    /// <summary>Runs <paramref name="frames"/> frames of <see cref="FrameLoop.FixedDeltaTime"/>.</summary>
    public static void RunFrames(this FrameLoop loop, int frames)
    {
        for (int i = 0; i < frames; i++)
        {
            loop.RunFrame();
        }
    }

    /// <summary>Runs frames until <paramref name="done"/> holds; fails after <paramref name="maxFrames"/>.</summary>
    public static void RunUntil(this FrameLoop loop, Func<bool> done, int maxFrames = 100_000)
    {
        for (int i = 0; i < maxFrames && !done(); i++)
        {
            loop.RunFrame();
        }
        Assert.True(done(), "The condition did not hold within " + maxFrames + " frames.");
    }

    /// <summary>
    /// Runs frames until <paramref name="done"/> holds, for work that reaches the loop from other threads (a thread-pool
    /// thread or a worker that has to start first): bounded by time, not by a count of frames, which an idle loop runs
    /// through in a few hundred milliseconds. Fails after <paramref name="within"/>.
    /// </summary>
    public static void RunUntil(this FrameLoop loop, Func<bool> done, TimeSpan within)
    {
        var clock = Stopwatch.StartNew();
        while (!done() && clock.Elapsed < within)
        {
            loop.RunFrame();
            Thread.Yield(); // let the other thread run on a busy machine
        }
        Assert.True(done(), "The condition did not hold within " + within.TotalSeconds + " s of frames.");
    }

    /// <summary>Where the loop is now, as "frame/phase" (for example "3/Update"; the phase is "-" outside one).</summary>
    public static string Where(this FrameLoop loop) => loop.FrameCount + "/" + (loop.CurrentPhase?.Name ?? "-");

    /// <summary>The phase of <paramref name="loop"/> named <paramref name="name"/>.</summary>
    public static FramePhase Phase(this FrameLoop loop, string name)
    {
        foreach (FramePhase p in loop.Phases)
        {
            if (p.Name == name)
            {
                return p;
            }
        }
        throw new ArgumentException("No phase named " + name, nameof(name));
    }

    /// <summary>
    /// Runs a frame loop on a dedicated thread, frame after frame with zero delta, until the returned stopper is disposed;
    /// <paramref name="running"/> completes when the thread has stopped.
    /// </summary>
    public static IDisposable RunOnThread(FrameLoop loop, out Task running)
    {
        var stop = new StopFlag();
        running = TestUtil.RunOnThread(() =>
        {
            while (!Volatile.Read(ref stop.Stopped))
            {
                loop.RunFrame(TimeSpan.Zero);
                Thread.Yield(); // frames back to back, but never starving the workers of parallel tests on a small machine
            }
        }, "frame loop");
        return stop;
    }

    private sealed class StopFlag : IDisposable
    {
        public bool Stopped;

        public void Dispose() => Volatile.Write(ref Stopped, true);
    }
}

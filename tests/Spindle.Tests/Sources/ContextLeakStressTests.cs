using System;
using System.Collections.Concurrent;
using System.Diagnostics;
using System.Threading;
using System.Threading.Tasks;
using Xunit.Abstractions;

namespace SpindleLib.Tests.Sources;

/// <summary>
/// Stress on "a continuation never sees another task's AsyncLocal values or SynchronizationContext, and a thread gets its
/// own back after running foreign code". Rounds of 64 async methods started on the workers, resumed by every kind of
/// completion Spindle has: delays (their worker's wheel, or the timer thread's), delays cancelled by another thread or
/// by a thread-pool timer, signal waits with a timeout, promises set from another thread or by another task's code,
/// Spindle.Yield, Spindle.Run, WhenAny of a delay and a signal, periodic timer ticks, jobs, and async methods that
/// complete with a SynchronizationContext and an AsyncLocal value of their own installed. Half the methods are setters
/// (they install a SynchronizationContext of their own and set an AsyncLocal value before awaiting, some under
/// <see cref="ExecutionContext.SuppressFlow"/>), the other half checkers. After each await, a method must see its own
/// AsyncLocal value (the default under SuppressFlow, and for a checker) and no SynchronizationContext another task
/// installed; the thread that completed sources (the completer, with a SynchronizationContext and an AsyncLocal value of
/// its own) must find both as they were after each completion it ran. Each broken expectation is reported with the
/// kind of wait, the role and the thread it was seen on. A few seconds; more under SPINDLE_STRESS=1.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class ContextLeakStressTests(ITestOutputHelper output)
{
    private const int PerRound = 64;
    private const int CompleterValue = -77;

    private static readonly AsyncLocal<int> s_local = new();

    private enum Kind
    {
        Delay,
        DelayCancelledByThread,
        DelayCancelledByThreadPool,
        SignalWithTimeout,
        PromiseSetByThread,
        PromiseSetByTask,
        Yield,
        Run,
        WhenAnyDelaySignal,
        PeriodicTick,
        Job,
        MethodCompletingWithContext,
    }

    private static readonly int s_kinds = Enum.GetValues<Kind>().Length;

    /// <summary>A SynchronizationContext a task installed, naming it.</summary>
    private sealed class OwnedContext(int owner) : SynchronizationContext
    {
        public int Owner { get; } = owner;
    }

    /// <summary>The completer thread's own SynchronizationContext: code it resumes inline runs on its thread, under it.</summary>
    private sealed class CompleterContext : SynchronizationContext
    {
    }

    private struct InstallingJob(int id) : IJob
    {
        public readonly void Execute()
        {
            SynchronizationContext.SetSynchronizationContext(new OwnedContext(id));
            s_local.Value = id;
        }
    }

    private sealed class Log
    {
        public readonly ConcurrentQueue<string> Failures = new();
        public long Checks;
        public int FailureCount;

        public void Check(bool ok, Func<string> what)
        {
            Interlocked.Increment(ref Checks);
            if (!ok && Interlocked.Increment(ref FailureCount) <= 40)
            {
                Failures.Enqueue(what());
            }
        }
    }

    /// <summary>One round's sources, one of each per method (most are used by some kinds only).</summary>
    private sealed class Round
    {
        public readonly int Number;
        public readonly Log Log;
        public readonly Thread Completer;
        public readonly Promise[] Promises = new Promise[PerRound];
        public readonly Signal[] Signals = new Signal[PerRound];
        public readonly CancellationTokenSource[] Sources = new CancellationTokenSource[PerRound];

        public Round(int number, Log log, Thread completer)
        {
            Number = number;
            Log = log;
            Completer = completer;
            for (int i = 0; i < PerRound; i++)
            {
                Promises[i] = new Promise();
                Signals[i] = new Signal(initiallySet: false);
                Sources[i] = new CancellationTokenSource();
            }
        }

        public int IdOf(int i) => Number * 1000 + i + 1;

        public Kind KindOf(int i) => (Kind)((i / 2 + Number) % s_kinds);
    }

    private static string ThreadKind()
    {
        Thread t = Thread.CurrentThread;
        string name = t.Name ?? "";
        if (name.StartsWith("Spindle worker", StringComparison.Ordinal))
        {
            return "a worker";
        }
        if (name == "Spindle Timer")
        {
            return "the timer thread";
        }
        return t.IsThreadPoolThread ? "a thread-pool thread" : "thread '" + name + "'";
    }

    /// <summary>
    /// After an await: the AsyncLocal value is <paramref name="expectedLocal"/> (or <paramref name="orLocal"/>), and the
    /// SynchronizationContext is none, the method's own (a setter's: the await completed inline, in its frame), or the
    /// completer's when this runs on the completer's thread (code resumed inline runs under its thread's own).
    /// </summary>
    private static void CheckAfterAwait(Round round, string role, Kind kind, int own, int expectedLocal, int orLocal, bool setter)
    {
        int local = s_local.Value;
        round.Log.Check(local == expectedLocal || local == orLocal, () =>
            $"round {round.Number}: {role} {own} after {kind} saw AsyncLocal {local} (expected {expectedLocal}) on {ThreadKind()}");
        SynchronizationContext? sync = SynchronizationContext.Current;
        bool ok = sync is null
            || (sync is OwnedContext o && o.Owner == own && setter)
            || (sync is CompleterContext && Thread.CurrentThread == round.Completer);
        round.Log.Check(ok, () =>
            $"round {round.Number}: {role} {own} after {kind} saw SynchronizationContext {Describe(sync)} on {ThreadKind()}");
    }

    private static string Describe(SynchronizationContext? sync) => sync switch
    {
        null => "none",
        OwnedContext o => "installed by " + o.Owner,
        _ => sync.GetType().Name,
    };

    private static async SpindleTask Participant(Round round, int i)
    {
        int id = round.IdOf(i);
        bool setter = (i & 1) == 0;
        bool suppress = setter && (i & 2) == 0 && (round.Number & 1) == 0;
        Kind kind = round.KindOf(i);
        string role = setter ? (suppress ? "setter (flow suppressed)" : "setter") : "checker";
        if (setter)
        {
            SynchronizationContext.SetSynchronizationContext(new OwnedContext(id));
            s_local.Value = id;
        }
        if (suppress)
        {
            SpindleTask inner;
            AsyncFlowControl flow = ExecutionContext.SuppressFlow();
            try
            {
                inner = Wait(round, i, kind, role, id, setter);
            }
            finally
            {
                flow.Undo();
            }
            await inner;
        }
        else
        {
            await Wait(round, i, kind, role, id, setter);
        }
        CheckAfterAwait(round, role + " (outer)", kind, id, setter ? id : 0, setter ? id : 0, setter);
        if (setter)
        {
            // Complete with a SynchronizationContext and an AsyncLocal value of its own installed: the code that awaits
            // this method (the round's WhenAll, a checker) must see neither.
            SynchronizationContext.SetSynchronizationContext(new OwnedContext(id));
            s_local.Value = id;
        }
    }

    /// <summary>The await itself, of kind <paramref name="kind"/>; checks what the method sees after it.</summary>
    private static async SpindleTask Wait(Round round, int i, Kind kind, string role, int id, bool setter)
    {
        int before = s_local.Value;
        bool suppressed = ExecutionContext.IsFlowSuppressed();
        bool pending;
        switch (kind)
        {
            case Kind.Delay:
            {
                SpindleTask t = Spindle.Delay(i % 4);
                pending = !t.IsCompleted;
                await t;
                break;
            }
            case Kind.DelayCancelledByThread:
            case Kind.DelayCancelledByThreadPool:
            {
                CancellationTokenSource cts = round.Sources[i];
                SpindleTask t = Spindle.Delay(kind == Kind.DelayCancelledByThread ? Timeout.Infinite : 200, cts.Token);
                if (kind == Kind.DelayCancelledByThreadPool)
                {
                    cts.CancelAfter(1);
                }
                pending = !t.IsCompleted;
                try
                {
                    await t;
                }
                catch (OperationCanceledException)
                {
                }
                break;
            }
            case Kind.SignalWithTimeout:
            {
                SpindleTask<bool> t = round.Signals[i].WaitAsync(TimeSpan.FromMilliseconds(i % 3), default);
                pending = !t.IsCompleted;
                await t;
                break;
            }
            case Kind.PromiseSetByThread:
            case Kind.PromiseSetByTask:
            {
                if (kind == Kind.PromiseSetByTask && (i & 1) == 0)
                {
                    // A setter completes its checker partner's promise from its own code, under its own AsyncLocal value,
                    // which the partner resumed inline must not see. Not under its SynchronizationContext: code resumed
                    // inline runs under the completing thread's one, by design (the README: "the awaiting code runs on the thread that completes the source").
                    SynchronizationContext? mine = SynchronizationContext.Current;
                    SynchronizationContext.SetSynchronizationContext(null);
                    round.Promises[i + 1].TrySetResult();
                    SynchronizationContext.SetSynchronizationContext(mine);
                }
                SpindleTask t = round.Promises[i].Task;
                pending = !t.IsCompleted;
                await t;
                break;
            }
            case Kind.Yield:
                pending = true;
                await Spindle.Yield();
                break;
            case Kind.Run:
            {
                int other = id + 500;
                SpindleTask t = Spindle.Run(() =>
                {
                    SynchronizationContext.SetSynchronizationContext(new OwnedContext(other));
                    s_local.Value = other;
                });
                pending = !t.IsCompleted;
                await t;
                break;
            }
            case Kind.WhenAnyDelaySignal:
            {
                SpindleTask<int> t = SpindleTask.WhenAny([Spindle.Delay(1 + i % 3), round.Signals[i].WaitAsync(default)]);
                pending = !t.IsCompleted;
                await t;
                break;
            }
            case Kind.PeriodicTick:
            {
                using var timer = new SpindlePeriodicTimer(TimeSpan.FromMilliseconds(1), TimerWheel.Default);
                SpindleTask<bool> t = timer.WaitForNextTickAsync(default);
                pending = !t.IsCompleted;
                await t;
                break;
            }
            case Kind.Job:
            {
                JobHandle handle = new InstallingJob(id + 500).Schedule();
                JobHandle.ScheduleBatchedJobs();
                pending = !handle.IsCompleted;
                await handle;
                break;
            }
            case Kind.MethodCompletingWithContext:
            {
                SpindleTask t = CompletesWithContext(id + 500, i % 3);
                pending = !t.IsCompleted;
                await t;
                break;
            }
            default:
                throw new InvalidOperationException(kind.ToString());
        }
        // Resumed from a capture made under SuppressFlow: the default context. Completed at once, or run inline in this
        // frame (a Spindle.Run taken back): still the caller's.
        int expected = suppressed && pending ? 0 : before;
        CheckAfterAwait(round, role, kind, id, expected, suppressed ? before : expected, setter);
    }

    /// <summary>
    /// An async method that completes with a SynchronizationContext and an AsyncLocal value of its own installed, after a
    /// delay (so on a worker's timers, or the timer thread's batch) or after a yield.
    /// </summary>
    private static async SpindleTask CompletesWithContext(int id, int how)
    {
        if (how == 0)
        {
            await Spindle.Yield();
        }
        else
        {
            await Spindle.Delay(how);
        }
        SynchronizationContext.SetSynchronizationContext(new OwnedContext(id));
        s_local.Value = id;
    }

    /// <summary>Runs the round's completions that another thread makes, checking the thread's own state after each.</summary>
    private static void Complete(Round round, int i, CompleterContext own)
    {
        Kind kind = round.KindOf(i);
        switch (kind)
        {
            case Kind.DelayCancelledByThread:
                round.Sources[i].Cancel();
                break;
            case Kind.SignalWithTimeout:
            case Kind.WhenAnyDelaySignal:
                round.Signals[i].Set();
                break;
            case Kind.PromiseSetByThread:
                round.Promises[i].TrySetResult();
                break;
            case Kind.PromiseSetByTask when (i & 1) == 0:
                round.Promises[i].TrySetResult(); // the odd ones are set by their setter partner's code
                break;
            default:
                return;
        }
        int local = s_local.Value;
        round.Log.Check(local == CompleterValue, () =>
            $"round {round.Number}: the completer thread had AsyncLocal {local} after completing {kind} ({round.IdOf(i)})");
        SynchronizationContext? sync = SynchronizationContext.Current;
        round.Log.Check(sync == own, () =>
            $"round {round.Number}: the completer thread had SynchronizationContext {Describe(sync)} after completing {kind} ({round.IdOf(i)})");
        if (sync != own)
        {
            SynchronizationContext.SetSynchronizationContext(own);
        }
        if (local != CompleterValue)
        {
            s_local.Value = CompleterValue;
        }
    }

    private static async Task<int> RunRounds(int rounds, TimeSpan budget, Log log)
    {
        var work = new BlockingCollection<Round>();
        var completerOwn = new CompleterContext();
        Thread? completer = null;
        var completerStarted = new ManualResetEventSlim(false);
        Task completerDone = TestUtil.RunOnThread(() =>
        {
            completer = Thread.CurrentThread;
            SynchronizationContext.SetSynchronizationContext(completerOwn);
            s_local.Value = CompleterValue;
            completerStarted.Set();
            var rng = new Random(7);
            foreach (Round round in work.GetConsumingEnumerable())
            {
                for (int i = 0; i < PerRound; i++)
                {
                    if (rng.Next(4) == 0)
                    {
                        Thread.Yield();
                    }
                    Complete(round, i, completerOwn);
                }
            }
        }, "context completer");
        completerStarted.Wait();
        var clock = Stopwatch.StartNew();
        int ran = 0;
        try
        {
            for (int r = 0; r < rounds && (r == 0 || clock.Elapsed < budget); r++, ran++)
            {
                var round = new Round(r, log, completer!);
                var tasks = new SpindleTask[PerRound];
                for (int i = 0; i < PerRound; i++)
                {
                    int index = i;
                    tasks[i] = Spindle.Run(() => Participant(round, index));
                }
                work.Add(round);
                await TestUtil.WithTimeout(SpindleTask.WhenAll(tasks));
                foreach (CancellationTokenSource cts in round.Sources)
                {
                    cts.Dispose();
                }
            }
        }
        finally
        {
            work.CompleteAdding();
            await TestUtil.WithTimeout(completerDone);
        }
        return ran;
    }

    [Fact]
    public async Task NoContinuationSeesAnotherTasksContextAndNoCompleterLosesItsOwn()
    {
        var log = new Log();
        int rounds = await RunRounds(TestUtil.Stress(400), TimeSpan.FromSeconds(TestUtil.IsStress ? 60 : 4), log);
        output.WriteLine($"{rounds} rounds of {PerRound} methods on {Spindle.WorkerCount} workers: {log.Checks} checks, {log.FailureCount} failed");
        Assert.True(log.FailureCount == 0,
            $"{log.FailureCount} of {log.Checks} checks failed:\n" + string.Join("\n", log.Failures));
        Assert.True(log.Checks > 0);
    }
}

using System;
using System.Collections.Generic;
using System.Threading;

namespace SpindleLib.Tests.Api;

/// <summary>
/// The test assembly's entry point (the test SDK's generated one does nothing, and the test host never calls either):
/// runs one probe of the process-wide worker start in a process of its own, since the shared workers start once per
/// process (<see cref="WorkerStartProcessTests"/> starts it with an invalid SPINDLE_WORKERS). Prints one line per check,
/// "FAIL ..." for a failed one, and "probe done" at the end; exits 0 only if every check passed.
/// </summary>
internal static class WorkerStartProbe
{
    public static int Main(string[] args)
    {
        if (args.Length != 2 || args[0] != "--probe")
        {
            Console.WriteLine("usage: Spindle.Tests --probe <" + string.Join("|", Probes.Keys) + ">");
            return 2;
        }
        var reports = new List<Exception>();
        Spindle.UnobservedException += ex =>
        {
            lock (reports)
            {
                reports.Add(ex);
            }
        };
        int failures = 0;
        void Check(bool ok, string what)
        {
            Console.WriteLine((ok ? "ok   " : "FAIL ") + what);
            failures += ok ? 0 : 1;
        }
        Probes[args[1]](Check, reports);
        // Whatever ran before, the workers still cannot start, and say why at a call that needs them.
        Check(Refused(() => Spindle.Run(static () => { })), "Spindle.Run still refuses, naming SPINDLE_WORKERS");
        Console.WriteLine("probe done");
        return failures == 0 ? 0 : 1;
    }

    private static readonly Dictionary<string, Action<Action<bool, string>, List<Exception>>> Probes = new()
    {
        ["timers"] = Timers,
        ["dispatching-sources"] = DispatchingSources,
        ["deep-chain"] = DeepChain,
    };

    /// <summary>True if <paramref name="call"/> throws the worker start's InvalidOperationException (naming SPINDLE_WORKERS).</summary>
    private static bool Refused(Action call)
    {
        try
        {
            call();
            return false;
        }
        catch (InvalidOperationException ex) when (ex.Message.Contains("SPINDLE_WORKERS", StringComparison.Ordinal))
        {
            return true;
        }
    }

    /// <summary>
    /// A wheel of the system clock other than Default: its timer thread hands fired continuations to the workers. Every
    /// call that arms a timer on it refuses at once, before it changes anything, instead of the timer thread failing
    /// later with the awaiting code never resumed.
    /// </summary>
    private static void Timers(Action<bool, string> check, List<Exception> reports)
    {
        using var wheel = new TimerWheel(TimeProvider.System);
        check(Refused(() => wheel.Delay(TimeSpan.FromMilliseconds(5))), "TimerWheel.Delay refuses at the call");
        check(Refused(() => wheel.Delay(Timeout.InfiniteTimeSpan, new CancellationTokenSource().Token)), "an infinite delay with a token refuses at the call");
        check(wheel.Delay(TimeSpan.Zero).IsCompleted, "a zero delay arms nothing and completes");
        check(Refused(() => _ = new SpindlePeriodicTimer(TimeSpan.FromMilliseconds(5), wheel)), "a periodic timer refuses at construction");

        var promise = new Promise<int>();
        SpindleTask<int> pending = promise.Task;
        check(Refused(() => pending.WithTimeout(TimeSpan.FromMilliseconds(5), wheel)), "WithTimeout refuses at the call");
        check(Refused(() => pending.TryWithTimeout(TimeSpan.FromMilliseconds(5), wheel)), "TryWithTimeout refuses at the call");
        check(Refused(() => SpindleTask.WhenAll([pending.AsSpindleTask()], new WhenAllOptions { Timeout = TimeSpan.FromMilliseconds(5), Timers = wheel })),
            "WhenAll with a timeout refuses at the call");
        promise.SetResult(42);
        check(pending.GetAwaiter().GetResult() == 42, "the task the refused calls were given is not consumed: awaited after, it has its result");

        var signal = new Signal();
        check(Refused(() => signal.WaitAsync(TimeSpan.FromMilliseconds(5), wheel)), "Signal.WaitAsync with a timeout refuses at the call");
        SpindleTask<bool> next = signal.WaitAsync(Timeout.InfiniteTimeSpan, wheel); // no timer: allowed
        signal.Set();
        check(next.GetAwaiter().GetResult(), "the signal was left without a wait: the next one takes the set");
        check(wheel.PendingCount == 0, "nothing left in the wheel (" + wheel.PendingCount + " pending)");
        check(reports.Count == 0, reports.Count + " unobserved reports (none expected: every refusal was at a call)");
    }

    /// <summary>A promise or signal that queues its continuations to the workers refuses at construction.</summary>
    private static void DispatchingSources(Action<bool, string> check, List<Exception> reports)
    {
        check(Refused(() => _ = new Promise(runContinuationsAsynchronously: true)), "Promise(runContinuationsAsynchronously: true) refuses");
        check(Refused(() => _ = new Promise<int>(runContinuationsAsynchronously: true)), "Promise<T>(runContinuationsAsynchronously: true) refuses");
        check(Refused(() => _ = new Signal(false, runContinuationsAsynchronously: true)), "Signal(false, runContinuationsAsynchronously: true) refuses");
        var inline = new Promise(runContinuationsAsynchronously: false);
        SpindleTask task = inline.Task;
        inline.SetResult();
        task.GetAwaiter().GetResult();
        check(true, "a promise that runs its continuations inline needs no workers");
        check(reports.Count == 0, reports.Count + " unobserved reports (none expected)");
    }

    private const int ChainLength = Continuations.MaxInlineDepth * 3;

    /// <summary>
    /// A chain of async methods, each resumed by the one before it completing its promise, inline on this thread: past
    /// the nesting bound a continuation is queued to the workers, which cannot start here. It runs inline instead of
    /// being lost, and the reason is reported to UnobservedException once.
    /// </summary>
    private static void DeepChain(Action<bool, string> check, List<Exception> reports)
    {
        var promises = new Promise[ChainLength + 1];
        for (int i = 0; i < promises.Length; i++)
        {
            promises[i] = new Promise();
        }
        int resumed = 0;
        var links = new SpindleTask[ChainLength];
        for (int i = 0; i < ChainLength; i++)
        {
            links[i] = Link(promises[i], promises[i + 1], () => resumed++);
        }
        promises[0].SetResult();
        check(resumed == ChainLength, resumed + " of " + ChainLength + " links resumed");
        int faulted = 0;
        foreach (SpindleTask link in links)
        {
            try
            {
                link.GetAwaiter().GetResult();
            }
            catch (InvalidOperationException)
            {
                faulted++;
            }
        }
        check(faulted == 0, faulted + " links failed");
        check(promises[ChainLength].Task.IsCompleted, "the last promise was completed");
        check(reports.Count == 1 && reports[0].Message.Contains("SPINDLE_WORKERS", StringComparison.Ordinal),
            reports.Count + " unobserved reports (one naming SPINDLE_WORKERS expected)");
    }

    private static async SpindleTask Link(Promise wait, Promise next, Action onResumed)
    {
        await wait.Task;
        onResumed();
        next.SetResult();
    }
}

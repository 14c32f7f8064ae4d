using System;
using System.Collections.Generic;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// The ExecutionContext contract (the BCL's) across every awaitable kind, awaited from a Spindle async method, a BCL
/// async method, and a BCL async method through <c>AsValueTask()</c>; each resumed by the thread that awaited (completed
/// inline) and by another thread, with the awaiting code's and the completer's AsyncLocal values each set or the
/// default (the default-context fast path must be taken only when both are the default), and with flow suppressed:
/// <list type="bullet">
/// <item>the value the awaiting code set before the await is what it sees after it (the default under SuppressFlow);</item>
/// <item>what it sets after resuming, and a SynchronizationContext it installs, never reach the completing thread;</item>
/// <item>what its synchronous part set never reaches its caller.</item>
/// </list>
/// Each case runs on a fresh thread that starts in the default context, and reports every broken expectation at once.
/// </summary>
public sealed class ContextFlowMatrixTests
{
    private static readonly AsyncLocal<string?> s_local = new();

    private sealed class MarkerSyncContext : SynchronizationContext
    {
    }

    /// <summary>
    /// One wait: <see cref="Start"/> makes the awaitable (called by the awaiting code, after it set its value), and
    /// <see cref="Complete"/> ends it on the calling thread, unless <see cref="Elsewhere"/> (a worker ends it).
    /// </summary>
    private sealed class Gate : IDisposable
    {
        public required Func<object> Start { get; init; }

        public Action Complete { get; init; } = static () => { };

        public bool Elsewhere { get; init; }

        public IDisposable? Owned { get; init; }

        public void Dispose() => Owned?.Dispose();
    }

    private sealed class Disposables(params IDisposable[] items) : IDisposable
    {
        public void Dispose()
        {
            foreach (IDisposable item in items)
            {
                item.Dispose();
            }
        }
    }

    private struct SetLocalJob : IJob
    {
        public void Execute() => s_local.Value = "set by a job";
    }

    public static readonly string[] Kinds =
    [
        "Promise", "Promise<T>", "Promise async", "Signal", "Signal async", "Signal.WaitAsync(timeout) set",
        "Signal.WaitAsync(timeout) timed out", "Signal.WaitAsync(token) cancelled", "async method",
        "TimerWheel.Delay (ManualClock)", "WithTimeout completed", "WithTimeout timed out", "WithCancellation completed",
        "WithCancellation cancelled", "WhenAll SpindleTask", "WhenAll Task", "WhenAll ValueTask", "WhenAll mixed tuple",
        "WhenAll cancelled", "WhenAny SpindleTask", "WhenAny Task", "WhenAny ValueTask", "Preserve", "TaskScope.WaitAsync",
        "PeriodicTimer (ManualClock)", "Spindle.Delay cancelled", "AsTask", "Task (TaskCompletionSource)",
        "FrameLoop.NextFrame", "FrameLoop.SwitchTo", "FrameLoop.Yield as SpindleTask", "FrameLoop.DelayFrame",
        "FrameLoop.Delay", "FrameLoop.WaitUntil", "Spindle.Delay", "Spindle.Yield", "Spindle.SwitchToWorker",
        "Spindle.Run Action", "Spindle.Run Func<T>", "Spindle.Run Func<SpindleTask>", "Spindle.Run Func<SpindleTask<T>>",
        "Spindle.Run Action token", "Spindle.Run Func<SpindleTask> token", "JobHandle",
    ];

    public static TheoryData<string, string> Cases()
    {
        var data = new TheoryData<string, string>();
        foreach (string kind in Kinds)
        {
            foreach (string style in new[] { "spindle", "bcl", "valuetask" })
            {
                data.Add(kind, style);
            }
        }
        return data;
    }

    private static Gate Make(string kind)
    {
        switch (kind)
        {
            case "Promise":
            {
                var p = new Promise();
                return new Gate { Start = () => p.Task, Complete = p.SetResult };
            }
            case "Promise<T>":
            {
                var p = new Promise<int>();
                return new Gate { Start = () => (SpindleTask)p.Task, Complete = () => p.SetResult(1) };
            }
            case "Promise async":
            {
                var p = new Promise(runContinuationsAsynchronously: true);
                return new Gate { Start = () => p.Task, Complete = p.SetResult };
            }
            case "Signal":
            {
                var s = new Signal();
                return new Gate { Start = () => s.WaitAsync(), Complete = s.Set };
            }
            case "Signal async":
            {
                var s = new Signal(initiallySet: false, runContinuationsAsynchronously: true);
                return new Gate { Start = () => s.WaitAsync(), Complete = s.Set };
            }
            case "Signal.WaitAsync(timeout) set":
            {
                var s = new Signal();
                var clock = new ManualClock();
                var wheel = new TimerWheel(clock);
                return new Gate { Start = () => (SpindleTask)s.WaitAsync(TimeSpan.FromSeconds(10), wheel), Complete = s.Set, Owned = wheel };
            }
            case "Signal.WaitAsync(timeout) timed out":
            {
                var s = new Signal();
                var clock = new ManualClock();
                var wheel = new TimerWheel(clock);
                return new Gate
                {
                    Start = () => (SpindleTask)s.WaitAsync(TimeSpan.FromSeconds(10), wheel),
                    Complete = () => clock.Advance(TimeSpan.FromSeconds(11)),
                    Owned = wheel,
                };
            }
            case "Signal.WaitAsync(token) cancelled":
            {
                var s = new Signal();
                var cts = new CancellationTokenSource();
                return new Gate { Start = () => s.WaitAsync(cts.Token), Complete = cts.Cancel, Owned = cts };
            }
            case "async method":
            {
                var p = new Promise();
                return new Gate { Start = () => Inner(p), Complete = p.SetResult };

                static async SpindleTask Inner(Promise p)
                {
                    s_local.Value = "set by the awaited method";
                    await p.Task;
                    s_local.Value = "set by the awaited method after resuming";
                }
            }
            case "TimerWheel.Delay (ManualClock)":
            {
                var clock = new ManualClock();
                var wheel = new TimerWheel(clock);
                return new Gate { Start = () => wheel.Delay(TimeSpan.FromSeconds(1)), Complete = () => clock.Advance(TimeSpan.FromSeconds(2)), Owned = wheel };
            }
            case "WithTimeout completed":
            case "WithTimeout timed out":
            {
                var p = new Promise();
                var clock = new ManualClock();
                var wheel = new TimerWheel(clock);
                Action complete = kind == "WithTimeout completed" ? p.SetResult : () => clock.Advance(TimeSpan.FromSeconds(11));
                return new Gate { Start = () => p.Task.WithTimeout(TimeSpan.FromSeconds(10), wheel), Complete = complete, Owned = wheel };
            }
            case "WithCancellation completed":
            case "WithCancellation cancelled":
            {
                var p = new Promise();
                var cts = new CancellationTokenSource();
                Action complete = kind == "WithCancellation completed" ? p.SetResult : cts.Cancel;
                return new Gate { Start = () => p.Task.WithCancellation(cts.Token), Complete = complete, Owned = cts };
            }
            case "WhenAll SpindleTask":
            {
                var a = new Promise();
                var b = new Promise<int>();
                return new Gate { Start = () => SpindleTask.WhenAll(a.Task, b.Task), Complete = () => { a.SetResult(); b.SetResult(2); } };
            }
            case "WhenAll Task":
            {
                var a = new TaskCompletionSource();
                var b = new TaskCompletionSource();
                return new Gate { Start = () => SpindleTask.WhenAll(a.Task, b.Task), Complete = () => { a.SetResult(); b.SetResult(); } };
            }
            case "WhenAll ValueTask":
            {
                var a = new TaskCompletionSource();
                var b = new Promise();
                return new Gate { Start = () => SpindleTask.WhenAll(new ValueTask(a.Task), b.Task.AsValueTask()), Complete = () => { a.SetResult(); b.SetResult(); } };
            }
            case "WhenAll mixed tuple":
            {
                var a = new Promise<int>();
                var b = new Promise<string>();
                return new Gate { Start = () => (SpindleTask)SpindleTask.WhenAll(a.Task, b.Task), Complete = () => { a.SetResult(1); b.SetResult("b"); } };
            }
            case "WhenAll cancelled":
            {
                var a = new Promise();
                var cts = new CancellationTokenSource();
                return new Gate { Start = () => SpindleTask.WhenAll([a.Task], cts.Token), Complete = cts.Cancel, Owned = cts };
            }
            case "WhenAny SpindleTask":
            {
                var a = new Promise();
                var b = new Promise();
                return new Gate { Start = () => (SpindleTask)SpindleTask.WhenAny(a.Task, b.Task), Complete = a.SetResult };
            }
            case "WhenAny Task":
            {
                var a = new TaskCompletionSource();
                var b = new TaskCompletionSource();
                return new Gate { Start = () => (SpindleTask)SpindleTask.WhenAny(a.Task, b.Task), Complete = a.SetResult };
            }
            case "WhenAny ValueTask":
            {
                var a = new TaskCompletionSource();
                var b = new Promise();
                return new Gate { Start = () => (SpindleTask)SpindleTask.WhenAny(new ValueTask(a.Task), b.Task.AsValueTask()), Complete = a.SetResult };
            }
            case "Preserve":
            {
                var p = new Promise();
                return new Gate { Start = () => p.Task.Preserve(), Complete = p.SetResult };
            }
            case "TaskScope.WaitAsync":
            {
                var p = new Promise();
                var scope = new TaskScope();
                return new Gate
                {
                    Start = () =>
                    {
                        scope.Run(async _ =>
                        {
                            await p.Task;
                            s_local.Value = "set by a child";
                        });
                        return scope.WaitAsync();
                    },
                    Complete = p.SetResult,
                };
            }
            case "PeriodicTimer (ManualClock)":
            {
                var clock = new ManualClock();
                var wheel = new TimerWheel(clock);
                var timer = new SpindlePeriodicTimer(TimeSpan.FromSeconds(1), wheel);
                return new Gate
                {
                    Start = () => (SpindleTask)timer.WaitForNextTickAsync(),
                    Complete = () => clock.Advance(TimeSpan.FromSeconds(1)),
                    Owned = new Disposables(timer, wheel),
                };
            }
            case "Spindle.Delay cancelled":
            {
                var cts = new CancellationTokenSource();
                return new Gate { Start = () => Spindle.Delay(TimeSpan.FromHours(1), cts.Token), Complete = cts.Cancel, Owned = cts };
            }
            case "AsTask":
            {
                var p = new Promise();
                return new Gate { Start = () => p.Task.AsTask(), Complete = p.SetResult };
            }
            case "Task (TaskCompletionSource)":
            {
                var t = new TaskCompletionSource();
                return new Gate { Start = () => t.Task, Complete = t.SetResult };
            }
            case "FrameLoop.NextFrame":
            case "FrameLoop.SwitchTo":
            case "FrameLoop.Yield as SpindleTask":
            case "FrameLoop.DelayFrame":
            case "FrameLoop.Delay":
            case "FrameLoop.WaitUntil":
            {
                var loop = new FrameLoop();
                bool ready = false;
                return new Gate
                {
                    Start = () => kind switch
                    {
                        "FrameLoop.NextFrame" => loop.NextFrame(),
                        "FrameLoop.SwitchTo" => loop.SwitchTo(),
                        "FrameLoop.Yield as SpindleTask" => (SpindleTask)loop.NextFrame(),
                        "FrameLoop.DelayFrame" => loop.DelayFrame(2),
                        "FrameLoop.Delay" => loop.Delay(TimeSpan.FromSeconds(1)),
                        _ => loop.WaitUntil(() => Volatile.Read(ref ready)),
                    },
                    Complete = () =>
                    {
                        // The completing thread becomes the loop thread: enough frames for any of these waits.
                        Volatile.Write(ref ready, true);
                        for (int i = 0; i < 4; i++)
                        {
                            loop.RunFrame(TimeSpan.FromSeconds(1));
                        }
                    },
                };
            }
            case "Spindle.Delay":
                return new Gate { Start = () => Spindle.Delay(1), Elsewhere = true };
            case "Spindle.Yield":
                return new Gate { Start = () => Spindle.Yield(), Elsewhere = true };
            case "Spindle.SwitchToWorker":
                return new Gate { Start = () => Spindle.SwitchToWorker(), Elsewhere = true };
            case "Spindle.Run Action":
                return new Gate { Start = () => Spindle.Run(() => { s_local.Value = "set by the delegate"; }), Elsewhere = true };
            case "Spindle.Run Func<T>":
                return new Gate { Start = () => (SpindleTask)Spindle.Run(() => s_local.Value = "set by the delegate"), Elsewhere = true };
            case "Spindle.Run Func<SpindleTask>":
                return new Gate { Start = () => Spindle.Run(SetAcrossAYield), Elsewhere = true };
            case "Spindle.Run Func<SpindleTask<T>>":
                return new Gate { Start = () => (SpindleTask)Spindle.Run(async () => { await SetAcrossAYield(); return 1; }), Elsewhere = true };
            case "Spindle.Run Action token":
            {
                var cts = new CancellationTokenSource();
                return new Gate { Start = () => Spindle.Run(() => { s_local.Value = "set by the delegate"; }, cts.Token), Elsewhere = true, Owned = cts };
            }
            case "Spindle.Run Func<SpindleTask> token":
            {
                var cts = new CancellationTokenSource();
                return new Gate { Start = () => Spindle.Run(SetAcrossAYield, cts.Token), Elsewhere = true, Owned = cts };
            }
            case "JobHandle":
                return new Gate { Start = () => new SetLocalJob().Schedule(), Elsewhere = true };
            default:
                throw new ArgumentOutOfRangeException(nameof(kind), kind, null);
        }

        static async SpindleTask SetAcrossAYield()
        {
            s_local.Value = "set by the delegate";
            await Spindle.Yield();
            s_local.Value = "set by the delegate after resuming";
        }
    }

    /// <summary>After the await: what the awaiting code sees, then what it sets and installs (which must stay with it).</summary>
    private static string? Resumed()
    {
        string? seen = s_local.Value;
        s_local.Value = "set after resuming";
        SynchronizationContext.SetSynchronizationContext(new MarkerSyncContext());
        return seen;
    }

    private static async SpindleTask<string?> AwaitInSpindle(string? value, Gate gate)
    {
        s_local.Value = value;
        try
        {
            switch (gate.Start())
            {
                case SpindleTask t: await t; break;
                case FrameAwaitable f: await f; break;
                case WorkerAwaitable w: await w; break;
                case JobHandle j: await j; break;
                case Task t: await t; break;
            }
        }
        catch (Exception ex) when (ex is TimeoutException or OperationCanceledException)
        {
        }
        return Resumed();
    }

    private static async Task<string?> AwaitInBcl(string? value, Gate gate, bool asValueTask)
    {
        s_local.Value = value;
        try
        {
            switch (gate.Start())
            {
                case SpindleTask t when asValueTask: await t.AsValueTask(); break;
                case SpindleTask t: await t; break;
                case FrameAwaitable f when asValueTask: await f.AsSpindleTask().AsValueTask(); break;
                case FrameAwaitable f: await f; break;
                case WorkerAwaitable w: await w; break;
                case JobHandle j: await j; break;
                case Task t: await t; break;
            }
        }
        catch (Exception ex) when (ex is TimeoutException or OperationCanceledException)
        {
        }
        return Resumed();
    }

    [Theory]
    [MemberData(nameof(Cases))]
    public async Task AsyncLocalsFlowInAndNothingLeaksOut(string kind, string style)
    {
        List<string> failures = await Run(kind, style);

        Assert.True(failures.Count == 0, string.Join(Environment.NewLine, failures));
    }

    /// <summary>Runs every case of one kind and style, and returns what broke (for the ThreadPool scheduler's run too).</summary>
    internal static async Task<List<string>> Run(string kind, string style)
    {
        var failures = new List<string>();
        foreach (string? methodValue in new[] { null, "method", "suppressed" })
        {
            // Under SuppressFlow a BCL async method resumes in whatever context the completer has (the BCL's choice, not
            // Spindle's), so only a Spindle method's flow-suppressed await is checked.
            if (methodValue == "suppressed" && style != "spindle")
            {
                continue;
            }
            foreach (string? completerValue in new[] { null, "completer" })
            {
                foreach (bool inline in new[] { true, false })
                {
                    if (kind.StartsWith("Spindle.", StringComparison.Ordinal) || kind == "JobHandle")
                    {
                        if (completerValue is not null || !inline)
                        {
                            continue; // completed by a worker: one case per value of the awaiting code
                        }
                    }
                    string name = $"[{methodValue ?? "default"}, completer {completerValue ?? "default"}, {(inline ? "inline" : "other thread")}]";
                    await TestUtil.WithTimeout(OnDefaultContextThread(() => RunCase(kind, style, methodValue, completerValue, inline, name, failures)));
                }
            }
        }
        return failures;
    }

    private static Task OnDefaultContextThread(Action body)
    {
        using (ExecutionContext.SuppressFlow())
        {
            return TestUtil.RunOnThread(body, "context matrix");
        }
    }

    private static void RunCase(string kind, string style, string? methodValue, string? completerValue, bool inline, string name, List<string> failures)
    {
        using Gate gate = Make(kind);
        string? mine = inline ? completerValue : "caller";
        s_local.Value = mine;
        bool suppressed = methodValue == "suppressed";
        string? value = suppressed ? "method" : methodValue;
        SpindleTask<string?> spindle = default;
        Task<string?>? bcl = null;
        AsyncFlowControl? flow = suppressed ? ExecutionContext.SuppressFlow() : null;
        if (style == "spindle")
        {
            spindle = AwaitInSpindle(value, gate);
        }
        else
        {
            bcl = AwaitInBcl(value, gate, asValueTask: style == "valuetask");
        }
        flow?.Undo();
        Check("the caller after the synchronous part", mine, s_local.Value);

        if (!gate.Elsewhere)
        {
            if (inline)
            {
                gate.Complete();
                Check("the completer (the caller) afterwards", mine, s_local.Value);
                CheckSync("the completer (the caller) afterwards", SynchronizationContext.Current);
            }
            else
            {
                string? completerSaw = null;
                SynchronizationContext? completerSync = null;
                OnDefaultContextThread(() =>
                {
                    s_local.Value = completerValue;
                    gate.Complete();
                    completerSaw = s_local.Value;
                    completerSync = SynchronizationContext.Current;
                }).Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds));
                Check("the completing thread afterwards", completerValue, completerSaw);
                CheckSync("the completing thread afterwards", completerSync);
            }
        }

        string? seen = bcl is null ? TestUtil.WithTimeout(spindle).GetAwaiter().GetResult() : TestUtil.WithTimeout(bcl).GetAwaiter().GetResult();
        // Under SuppressFlow the await resumes in the default context, unless a worker finished the wait before the await
        // looked (Elsewhere): the method then went on without suspending, in its own context, as a BCL method does.
        Check("the awaiting code after the await", suppressed ? (gate.Elsewhere && seen == value ? value : null) : methodValue, seen);
        Check("the caller at the end", mine, s_local.Value);
        CheckSync("the caller at the end", SynchronizationContext.Current);

        void Check(string what, string? expected, string? actual)
        {
            if (expected != actual)
            {
                lock (failures)
                {
                    failures.Add($"{name} {what}: expected '{expected ?? "null"}', saw '{actual ?? "null"}'");
                }
            }
        }

        void CheckSync(string what, SynchronizationContext? actual)
        {
            if (actual is not null)
            {
                lock (failures)
                {
                    failures.Add($"{name} {what}: left under {actual.GetType().Name}");
                }
            }
        }
    }
}

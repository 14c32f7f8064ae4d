using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Linq;
using System.Runtime.ExceptionServices;
using System.Text;
using System.Threading;
using System.Threading.Tasks;
using CsCheck;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// Random programs of async <see cref="SpindleTask"/> / <see cref="SpindleTask{T}"/> methods (CsCheck, shrinking to a
/// smallest program), checked against a model of the documented contract:
/// <list type="bullet">
/// <item>A method is a tree: each method runs steps (await a promise completed before, by the driver thread, by another
/// thread or by a worker, with a value, a fault or a cancellation; Spindle.Yield; Spindle.Run; a BCL Task.Yield; an
/// already-completed Spindle task; a nested method consumed in one of the documented ways) and then returns, throws, or
/// throws an OperationCanceledException (with or without a token).</item>
/// <item>Every outcome reaches its consumer exactly once: the value, or the very exception object (a fault, or a
/// cancellation: Status Canceled, with or without a token), whatever the consumer: await from a BCL or a Spindle
/// method, AsValueTask, AsTask, blocking GetResult on a plain thread or a worker, Preserve with several awaiters, Forget
/// (a fault goes to UnobservedException once, a cancellation never), WhenAll mixing Spindle and BCL tasks, WhenAny as
/// winner or loser.</item>
/// <item>After a consuming read, a second read is the await-once error naming Preserve, never another use's outcome,
/// even after the box went back to the pool and served other methods (every method here shares two state-machine
/// types, so boxes are reused constantly).</item>
/// <item>AsyncLocal values: a method sees its own value after every await; a callee's value never leaks to its caller;
/// nothing a method sets leaks into the driver thread that resumed it inline, nor into later work on a worker.</item>
/// <item>No step of a method runs twice (a box resumed twice would).</item>
/// </list>
/// The UnobservedException event is process-wide, so this runs alone.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class AsyncMethodModelTests
{
    // ---------------------------------------------------------------- the program

    internal enum GateMode { PreCompleted, Driver, OtherThread, Worker }

    internal enum GateOutcome { Value, Fault, Cancel, CancelWithToken }

    internal enum EndKind { Return, Throw, ThrowOce, ThrowOceWithToken }

    internal enum ChildForm { Await, AsValueTask, AsTask, PreserveTwice, WhenAllWithBcl, WhenAnyWithPending, Blocking, Forget, ViaRun }

    internal enum TopForm { BclAwait, SpindleAwait, ValueTask, AsTask, BlockThread, BlockWorker, PreserveThree, Forget, StatusThenRead, WhenAllWithBcl, WhenAnyWinner, WhenAnyLoser }

    internal abstract class StepSpec
    {
    }

    internal sealed class GateStep(GateMode mode, GateOutcome outcome, int value) : StepSpec
    {
        public GateMode Mode => mode;
        public GateOutcome Outcome => outcome;
        public int Value => value;
        public Exception? Error; // created per run (Prepare)

        public override string ToString() => "gate(" + mode + ", " + (outcome == GateOutcome.Value ? "value " + value : outcome.ToString()) + ")";
    }

    internal sealed class SimpleStep(int kind, int value) : StepSpec
    {
        // 0: Spindle.Yield, 1: Spindle.Run(() => value), 2: BCL Task.Yield, 3: await SpindleTask.FromResult(value)
        public int Kind => kind;
        public int Value => value;

        public override string ToString() => kind switch
        {
            0 => "yield",
            1 => "run(" + value + ")",
            2 => "bclYield",
            _ => "fromResult(" + value + ")",
        };
    }

    internal sealed class ChildStep(Node child, ChildForm form, bool catches) : StepSpec
    {
        public Node Child => child;
        public ChildForm Form => form;
        public bool Catches => catches;

        public override string ToString() => (catches ? "try " : "") + form + " " + child;
    }

    internal sealed class Node(StepSpec[] steps, EndKind end, int value, bool typed)
    {
        public StepSpec[] Steps => steps;
        public EndKind End => end;
        public int Value => value;
        public bool Typed => typed;
        public Exception? Error;

        public void Prepare()
        {
            Error = Made(end switch
            {
                EndKind.Throw => new InvalidTimeZoneException("method throws " + value),
                EndKind.ThrowOce => new OperationCanceledException("method cancels " + value),
                EndKind.ThrowOceWithToken => new OperationCanceledException("method cancels " + value, CanceledToken),
                _ => null,
            });
            foreach (StepSpec s in steps)
            {
                if (s is GateStep g)
                {
                    g.Error = Made(g.Outcome switch
                    {
                        GateOutcome.Fault => new InvalidTimeZoneException("gate faults " + g.Value),
                        GateOutcome.Cancel => new OperationCanceledException("gate cancels " + g.Value),
                        GateOutcome.CancelWithToken => new OperationCanceledException("gate cancels " + g.Value, CanceledToken),
                        _ => null,
                    });
                }
                else if (s is ChildStep c)
                {
                    c.Child.Prepare();
                }
            }
        }

        public override string ToString()
        {
            var sb = new StringBuilder(typed ? "int{" : "void{");
            sb.Append(string.Join("; ", steps.Select(s => s.ToString())));
            if (steps.Length > 0)
            {
                sb.Append("; ");
            }
            sb.Append(end switch
            {
                EndKind.Return => "return " + value,
                EndKind.Throw => "throw",
                EndKind.ThrowOce => "throw OCE",
                _ => "throw OCE(token)",
            });
            return sb.Append('}').ToString();
        }
    }

    internal sealed record Case(Node Root, TopForm Form)
    {
        public override string ToString() => Form + ": " + Root;
    }

    private static readonly CancellationToken CanceledToken = new(canceled: true);

    private static readonly Gen<StepSpec> LeafSteps = Gen.Frequency(
        (5, Gen.Select(Gen.Enum<GateMode>(), Gen.Frequency((4, Gen.Const(GateOutcome.Value)), (1, Gen.Const(GateOutcome.Fault)), (1, Gen.Const(GateOutcome.Cancel)), (1, Gen.Const(GateOutcome.CancelWithToken))), Gen.Int[1, 9],
            (m, o, v) => (StepSpec)new GateStep(m, o, v))),
        (2, Gen.Select(Gen.Int[0, 3], Gen.Int[1, 9], (k, v) => (StepSpec)new SimpleStep(k, v))));

    private static readonly Gen<EndKind> Ends = Gen.Frequency(
        (5, Gen.Const(EndKind.Return)), (1, Gen.Const(EndKind.Throw)), (1, Gen.Const(EndKind.ThrowOce)), (1, Gen.Const(EndKind.ThrowOceWithToken)));

    private static Gen<Node> Nodes(int depth) => Gen.Select(Steps(depth).Array[0, 4], Ends, Gen.Int[10, 99], Gen.Frequency((3, Gen.Const(true)), (1, Gen.Const(false))),
        (steps, end, value, typed) => new Node(steps, end, value, typed));

    private static Gen<StepSpec> Steps(int depth) => depth == 0 ? LeafSteps : Gen.Frequency(
        (3, LeafSteps),
        (2, Gen.Select(Nodes(depth - 1), Gen.Enum<ChildForm>(), Gen.Frequency((2, Gen.Const(false)), (1, Gen.Const(true))),
            (n, f, c) => (StepSpec)new ChildStep(n, f, c))));

    private static readonly Gen<Case> Cases = Gen.Select(Nodes(3), Gen.Enum<TopForm>(), (n, f) => new Case(n, f));

    // ---------------------------------------------------------------- the model

    /// <summary>What a method produces: a value, or an exception object (a fault or a cancellation).</summary>
    internal readonly record struct Outcome(int Value, Exception? Error)
    {
        public bool IsCanceled => Error is OperationCanceledException;

        public SpindleTaskStatus Status => Error is null ? SpindleTaskStatus.Succeeded : IsCanceled ? SpindleTaskStatus.Canceled : SpindleTaskStatus.Faulted;

        public override string ToString() => Error is null ? "value " + Value : Error.GetType().Name + " '" + Error.Message + "'";
    }

    /// <summary>Evaluates a method as the contract says it runs; faults nobody reads (forgotten children) go to <paramref name="reports"/>.</summary>
    private static Outcome Eval(Node node, List<Exception> reports)
    {
        int acc = 0;
        foreach (StepSpec step in node.Steps)
        {
            switch (step)
            {
                case GateStep g:
                    if (g.Error is not null)
                    {
                        return new Outcome(0, g.Error);
                    }
                    acc += g.Value;
                    break;
                case SimpleStep s:
                    acc += s.Kind is 1 or 3 ? s.Value : 0;
                    break;
                case ChildStep c:
                {
                    Outcome child = Eval(c.Child, reports);
                    if (c.Form == ChildForm.Forget)
                    {
                        if (child.Error is not null && !child.IsCanceled)
                        {
                            reports.Add(child.Error);
                        }
                        break;
                    }
                    if (child.Error is not null)
                    {
                        if (!c.Catches)
                        {
                            return new Outcome(0, child.Error);
                        }
                        acc += child.IsCanceled ? 2000 : 1000;
                        break;
                    }
                    int v = c.Child.Typed ? child.Value : 0;
                    acc += c.Form switch
                    {
                        ChildForm.PreserveTwice => 2 * v,
                        ChildForm.WhenAllWithBcl => v + 5,
                        _ => v,
                    };
                    break;
                }
            }
        }
        return node.End == EndKind.Return ? new Outcome(acc + node.Value, null) : new Outcome(0, node.Error);
    }

    // ---------------------------------------------------------------- the run's shared state

    /// <summary>Records <paramref name="error"/> as one of the current run's own exceptions (see <see cref="RunState.Made"/>).</summary>
    private static Exception? Made(Exception? error)
    {
        if (error is not null)
        {
            s_run.Made.Enqueue(error);
        }
        return error;
    }

    private sealed class RunState
    {
        /// <summary>The exceptions this run's program throws: the reports it may claim, with what its own flow reports.</summary>
        public readonly ConcurrentQueue<Exception> Made = new();
        public readonly ConcurrentQueue<(Promise<int> Promise, GateStep Gate)> Gates = new();
        public readonly ConcurrentQueue<string> Errors = new();
        public readonly ConcurrentQueue<Exception> Reports = new();
        public readonly List<Thread> Threads = new();
        public int Live;
        public int NextInvocation;

        public void Error(string message) => Errors.Enqueue(message);
    }

    private static RunState s_run = new();
    private static readonly AsyncLocal<int> s_local = new();

    /// <summary>A promise for a gate: completed now (PreCompleted) or handed to the driver.</summary>
    private static SpindleTask<int> GateTask(GateStep g)
    {
        var p = new Promise<int>();
        if (g.Mode == GateMode.PreCompleted)
        {
            Complete(p, g);
        }
        else
        {
            s_run.Gates.Enqueue((p, g));
        }
        return p.Task;
    }

    private static void Complete(Promise<int> p, GateStep g)
    {
        if (g.Error is null)
        {
            p.SetResult(g.Value);
        }
        else
        {
            p.SetException(g.Error);
        }
    }

    /// <summary>Tracks one invocation: its AsyncLocal value and that its steps run once each, in order.</summary>
    private sealed class Invocation
    {
        public readonly int Id = Interlocked.Increment(ref s_run.NextInvocation);
        public int Progress;

        public Invocation() => Interlocked.Increment(ref s_run.Live);

        public void Check(int step, string where)
        {
            if (s_local.Value != Id)
            {
                s_run.Error($"invocation {Id}: AsyncLocal is {s_local.Value} {where} (step {step})");
            }
            if (Interlocked.Increment(ref Progress) != step + 1)
            {
                s_run.Error($"invocation {Id}: step {step} ran out of order or twice ({where})");
            }
        }

        public void Leave() => Interlocked.Decrement(ref s_run.Live);
    }

    // ---------------------------------------------------------------- the interpreter (one typed, one void builder)

    private static async SpindleTask<int> ExecTyped(Node node)
    {
        var inv = new Invocation();
        try
        {
            s_local.Value = inv.Id;
            int acc = 0;
            for (int i = 0; i < node.Steps.Length; i++)
            {
                switch (node.Steps[i])
                {
                    case GateStep g:
                        acc += await GateTask(g);
                        break;
                    case SimpleStep { Kind: 0 }:
                        await Spindle.Yield();
                        break;
                    case SimpleStep { Kind: 1 } s:
                        acc += await Spindle.Run(() => s.Value);
                        break;
                    case SimpleStep { Kind: 2 }:
                        await Task.Yield();
                        break;
                    case SimpleStep s:
                        acc += await SpindleTask.FromResult(s.Value);
                        break;
                    case ChildStep c:
                        acc += await Consume(c);
                        break;
                }
                inv.Check(i, "after an await");
            }
            return node.End switch
            {
                EndKind.Return => acc + node.Value,
                _ => throw node.Error!,
            };
        }
        finally
        {
            inv.Leave();
        }
    }

    private static async SpindleTask ExecVoid(Node node)
    {
        var inv = new Invocation();
        try
        {
            s_local.Value = inv.Id;
            for (int i = 0; i < node.Steps.Length; i++)
            {
                switch (node.Steps[i])
                {
                    case GateStep g:
                        await GateTask(g).AsSpindleTask();
                        break;
                    case SimpleStep { Kind: 0 }:
                        await Spindle.Yield();
                        break;
                    case SimpleStep { Kind: 1 } s:
                        await Spindle.Run(() => { _ = s.Value; });
                        break;
                    case SimpleStep { Kind: 2 }:
                        await Task.Yield();
                        break;
                    case SimpleStep:
                        await SpindleTask.CompletedTask;
                        break;
                    case ChildStep c:
                        await Consume(c);
                        break;
                }
                inv.Check(i, "after an await");
            }
            if (node.End != EndKind.Return)
            {
                throw node.Error!;
            }
        }
        finally
        {
            inv.Leave();
        }
    }

    /// <summary>Starts a child and consumes it in its form; returns its contribution, as the model's.</summary>
    private static async SpindleTask<int> Consume(ChildStep c)
    {
        int mine = s_local.Value;
        try
        {
            int v = c.Child.Typed ? await ConsumeTyped(c) : await ConsumeVoid(c);
            if (s_local.Value != mine)
            {
                s_run.Error($"a callee's AsyncLocal {s_local.Value} leaked into its caller {mine}");
            }
            return v;
        }
        catch (Exception e) when (c.Catches)
        {
            Outcome expected = Eval(c.Child, new List<Exception>());
            if (!ReferenceEquals(e, expected.Error))
            {
                s_run.Error($"caught {e.GetType().Name} '{e.Message}' from {c}, expected {expected}");
            }
            if (s_local.Value != mine)
            {
                s_run.Error($"a callee's AsyncLocal {s_local.Value} leaked into its caller {mine} (catch)");
            }
            return e is OperationCanceledException ? 2000 : 1000;
        }
    }

    private static async SpindleTask<int> ConsumeTyped(ChildStep c)
    {
        switch (c.Form)
        {
            case ChildForm.Await:
                return await ExecTyped(c.Child);
            case ChildForm.AsValueTask:
                return await ExecTyped(c.Child).AsValueTask();
            case ChildForm.AsTask:
                return await ExecTyped(c.Child).AsTask();
            case ChildForm.PreserveTwice:
            {
                SpindleTask<int> p = ExecTyped(c.Child).Preserve();
                (int a, Exception? ea) = await Capture(p);
                (int b, Exception? eb) = await Capture(p);
                if (!ReferenceEquals(ea, eb) || a != b)
                {
                    s_run.Error($"Preserve: two awaits saw {a}/{ea?.Message} and {b}/{eb?.Message}");
                }
                if (ea is not null)
                {
                    ExceptionDispatchInfo.Throw(ea);
                }
                return a + b;
            }
            case ChildForm.WhenAllWithBcl:
            {
                int[] r = await SpindleTask.WhenAll(ExecTyped(c.Child).AsValueTask(), new ValueTask<int>(Task.Run(() => 5)));
                return r[0] + r[1];
            }
            case ChildForm.WhenAnyWithPending:
            {
                var never = new Promise<int>();
                (int index, int result, _) = await SpindleTask.WhenAny(ExecTyped(c.Child), never.Task);
                if (index != 0)
                {
                    s_run.Error("WhenAny: a promise nobody completes won");
                }
                never.Reset(); // the loser was let go of: resettable at once
                return result;
            }
            case ChildForm.Blocking:
                await Spindle.SwitchToWorker();
                return ExecTyped(c.Child).GetAwaiter().GetResult();
            case ChildForm.Forget:
                ExecTyped(c.Child).Forget();
                return 0;
            default:
            {
                Node child = c.Child;
                return await Spindle.Run(() => ExecTyped(child));
            }
        }
    }

    private static async SpindleTask<int> ConsumeVoid(ChildStep c)
    {
        switch (c.Form)
        {
            case ChildForm.Await:
                await ExecVoid(c.Child);
                return 0;
            case ChildForm.AsValueTask:
                await ExecVoid(c.Child).AsValueTask();
                return 0;
            case ChildForm.AsTask:
                await ExecVoid(c.Child).AsTask();
                return 0;
            case ChildForm.PreserveTwice:
            {
                SpindleTask p = ExecVoid(c.Child).Preserve();
                (_, Exception? ea) = await Capture(p);
                (_, Exception? eb) = await Capture(p);
                if (!ReferenceEquals(ea, eb))
                {
                    s_run.Error($"Preserve (void): two awaits saw {ea?.Message} and {eb?.Message}");
                }
                if (ea is not null)
                {
                    ExceptionDispatchInfo.Throw(ea);
                }
                return 0;
            }
            case ChildForm.WhenAllWithBcl:
                await SpindleTask.WhenAll(ExecVoid(c.Child).AsValueTask(), new ValueTask(Task.Run(() => { })));
                return 5;
            case ChildForm.WhenAnyWithPending:
            {
                var never = new Promise();
                int index = await SpindleTask.WhenAny(ExecVoid(c.Child), never.Task);
                if (index != 0)
                {
                    s_run.Error("WhenAny (void): a promise nobody completes won");
                }
                never.Reset();
                return 0;
            }
            case ChildForm.Blocking:
                await Spindle.SwitchToWorker();
                ExecVoid(c.Child).GetAwaiter().GetResult();
                return 0;
            case ChildForm.Forget:
                ExecVoid(c.Child).Forget();
                return 0;
            default:
            {
                Node child = c.Child;
                await Spindle.Run(() => ExecVoid(child));
                return 0;
            }
        }
    }

    private static async SpindleTask<(int, Exception?)> Capture(SpindleTask<int> t)
    {
        try
        {
            return (await t, null);
        }
        catch (Exception e)
        {
            return (0, e);
        }
    }

    private static async SpindleTask<(int, Exception?)> Capture(SpindleTask t)
    {
        try
        {
            await t;
            return (0, null);
        }
        catch (Exception e)
        {
            return (0, e);
        }
    }

    // ---------------------------------------------------------------- consumers of the root

    /// <summary>One consumer of the root's outcome: how many times it ran and what it saw.</summary>
    private sealed class Record
    {
        public readonly string What;
        public int Runs;
        public Outcome Seen;
        public readonly ManualResetEventSlim Done = new(false);

        public Record(string what) => What = what;

        public void Finish(Func<int> read)
        {
            Outcome o;
            try
            {
                o = new Outcome(read(), null);
            }
            catch (Exception e)
            {
                o = new Outcome(0, e);
            }
            Seen = o;
            Interlocked.Increment(ref Runs);
            Done.Set();
        }
    }

    /// <summary>The root under one handle, typed or not (the void root reads as 0).</summary>
    private readonly struct Root(SpindleTask<int> typed, SpindleTask untyped, bool isTyped)
    {
        public bool IsTyped => isTyped;
        public SpindleTask<int> Typed => typed;
        public SpindleTask Untyped => isTyped ? typed : untyped;
        public bool HasSource => isTyped ? typed._source is not null : untyped._source is not null;

        public int Read()
        {
            if (isTyped)
            {
                return typed.GetAwaiter().GetResult();
            }
            untyped.GetAwaiter().GetResult();
            return 0;
        }

        public SpindleTaskStatus Status => isTyped ? typed.Status : untyped.Status;
    }

    private static async Task<int> BclAwait(Root r)
    {
        if (r.IsTyped)
        {
            return await r.Typed;
        }
        await r.Untyped;
        return 0;
    }

    private static async SpindleTask SpindleAwait(Root r, Record rec)
    {
        int mine = s_local.Value;
        Outcome o;
        try
        {
            o = new Outcome(r.IsTyped ? await r.Typed : await AwaitVoid(r.Untyped), null);
        }
        catch (Exception e)
        {
            o = new Outcome(0, e);
        }
        if (s_local.Value != mine)
        {
            s_run.Error($"the awaiting Spindle method sees AsyncLocal {s_local.Value} instead of its own {mine}");
        }
        rec.Finish(() => o.Error is null ? o.Value : throw o.Error);

        static async SpindleTask<int> AwaitVoid(SpindleTask t)
        {
            await t;
            return 0;
        }
    }

    private static void FinishFromTask(Task<int> task, Record rec)
        => task.ContinueWith(t => rec.Finish(() => t.GetAwaiter().GetResult()), CancellationToken.None, TaskContinuationOptions.ExecuteSynchronously, TaskScheduler.Default);

    [Fact]
    public void RandomPrograms_MatchTheModel()
    {
        // Each run keeps the reports of its program's exceptions and whatever is reported on the test's thread ("nothing
        // else reported" is checked against them), never another test's late report.
        var watch = UnobservedReports.Start(
            UnobservedReports.Own.Any(e => s_run.Made.Any(m => ReferenceEquals(m, e)), UnobservedReports.Own.ReportedOnTestThreads()),
            onOwn: e => s_run.Reports.Enqueue(e));
        try
        {
            Cases.Sample(c =>
            {
                SynchronizationContext? outer = SynchronizationContext.Current;
                SynchronizationContext.SetSynchronizationContext(null); // the driver is a plain thread (not xUnit's context)
                try
                {
                    Run(c);
                }
                finally
                {
                    SynchronizationContext.SetSynchronizationContext(outer);
                }
            }, iter: TestUtil.Stress(300), threads: 1, print: c => c.ToString());
        }
        finally
        {
            watch.Dispose();
        }
    }

    private static bool HasBlockingChild(Node n)
        => n.Steps.OfType<ChildStep>().Any(c => c.Form == ChildForm.Blocking || HasBlockingChild(c.Child));

    private static void Run(Case c)
    {
        // A worker blocked on the root helps run queued work; if it picks up a descendant that blocks in turn on something
        // only the root's own remainder can bring about, that wait sits above the root's on one stack and can never end:
        // the limit of helping that SpindleTask's GetResult documents (docs/decisions.md section 4). Not combined here.
        if (c.Form == TopForm.BlockWorker && HasBlockingChild(c.Root))
        {
            c = c with { Form = TopForm.BlockThread };
        }
        var run = new RunState();
        s_run = run;
        c.Root.Prepare();
        var expectedReports = new List<Exception>();
        Outcome expected = Eval(c.Root, expectedReports);

        s_local.Value = -1; // the driver's own value: nothing a method sets may reach it
        var records = new List<Record>();
        Root root = c.Root.Typed ? new Root(ExecTyped(c.Root), default, true) : new Root(default, ExecVoid(c.Root), false);
        CheckDriver(run, "after the root's synchronous part");
        bool consumed = true; // the consumer reads the root itself (not Preserve, Forget or a combinator's loser)
        Promise<int>? other = null;

        switch (c.Form)
        {
            case TopForm.BclAwait:
            {
                var rec = new Record("await from a BCL method");
                records.Add(rec);
                FinishFromTask(BclAwait(root), rec);
                break;
            }
            case TopForm.SpindleAwait:
            {
                var rec = new Record("await from a Spindle method");
                records.Add(rec);
                SpindleAwait(root, rec).Forget();
                break;
            }
            case TopForm.ValueTask:
            {
                var rec = new Record("await AsValueTask()");
                records.Add(rec);
                FinishFromTask(root.IsTyped ? AwaitVt(root.Typed.AsValueTask()) : AwaitVtVoid(root.Untyped.AsValueTask()), rec);
                break;
            }
            case TopForm.AsTask:
            {
                var rec = new Record("AsTask()");
                records.Add(rec);
                Task<int> t = root.IsTyped ? root.Typed.AsTask() : root.Untyped.AsTask().ContinueWith(t => { t.GetAwaiter().GetResult(); return 0; }, TaskScheduler.Default);
                if (root.IsTyped)
                {
                    CheckTaskShape(run, t, expected);
                }
                FinishFromTask(t, rec);
                break;
            }
            case TopForm.BlockThread:
            {
                var rec = new Record("GetResult blocking a plain thread");
                records.Add(rec);
                Root r = root;
                _ = TestUtil.RunOnThread(() => rec.Finish(r.Read));
                break;
            }
            case TopForm.BlockWorker:
            {
                var rec = new Record("GetResult blocking a worker");
                records.Add(rec);
                Root r = root;
                Spindle.Run(() => rec.Finish(r.Read)).Forget();
                break;
            }
            case TopForm.PreserveThree:
            {
                consumed = false;
                var a = new Record("Preserve: await from BCL");
                var b = new Record("Preserve: GetResult blocking a thread");
                var d = new Record("Preserve: AsTask");
                records.AddRange([a, b, d]);
                Root p = root.IsTyped ? new Root(root.Typed.Preserve(), default, true) : new Root(default, root.Untyped.Preserve(), false);
                FinishFromTask(BclAwait(p), a);
                _ = TestUtil.RunOnThread(() => b.Finish(p.Read));
                FinishFromTask(p.IsTyped ? p.Typed.AsTask() : p.Untyped.AsTask().ContinueWith(t => { t.GetAwaiter().GetResult(); return 0; }, TaskScheduler.Default), d);
                break;
            }
            case TopForm.Forget:
                consumed = false;
                root.Untyped.Forget();
                if (expected.Error is not null && !expected.IsCanceled)
                {
                    expectedReports.Add(expected.Error);
                }
                break;
            case TopForm.StatusThenRead:
                break; // read after the drive
            case TopForm.WhenAllWithBcl:
            {
                var rec = new Record("WhenAll(AsValueTask(), BCL ValueTask)");
                records.Add(rec);
                FinishFromTask(root.IsTyped
                    ? TestUtil.AwaitAsync(SpindleTask.WhenAll(root.Typed.AsValueTask(), new ValueTask<int>(Task.Run(() => 5)))).ContinueWith(t => t.GetAwaiter().GetResult()[0], TaskScheduler.Default)
                    : TestUtil.AwaitAsync(SpindleTask.WhenAll(root.Untyped.AsValueTask(), new ValueTask(Task.Run(() => { })))).ContinueWith(t => { t.GetAwaiter().GetResult(); return 0; }, TaskScheduler.Default), rec);
                break;
            }
            case TopForm.WhenAnyWinner:
            {
                var rec = new Record("WhenAny(root, pending promise)");
                records.Add(rec);
                other = new Promise<int>();
                FinishFromTask(root.IsTyped
                    ? TestUtil.AwaitAsync(SpindleTask.WhenAny(root.Typed, other.Task)).ContinueWith(t => { var (i, v, _) = t.GetAwaiter().GetResult(); return i == 0 ? v : -12345; }, TaskScheduler.Default)
                    : TestUtil.AwaitAsync(SpindleTask.WhenAny(root.Untyped, other.Task.AsSpindleTask())).ContinueWith(t => t.GetAwaiter().GetResult() == 0 ? 0 : -12345, TaskScheduler.Default), rec);
                break;
            }
            case TopForm.WhenAnyLoser:
            {
                consumed = false;
                var rec = new Record("WhenAny(completed promise, root): the root loses");
                records.Add(rec);
                other = new Promise<int>();
                other.SetResult(7);
                int index = root.IsTyped
                    ? SpindleTask.WhenAny(other.Task, root.Typed).GetAwaiter().GetResult().Index
                    : SpindleTask.WhenAny(other.Task.AsSpindleTask(), root.Untyped).GetAwaiter().GetResult();
                rec.Finish(() => index);
                if (expected.Error is not null && !expected.IsCanceled)
                {
                    expectedReports.Add(expected.Error);
                }
                break;
            }
        }

        Drive(run, c);

        if (c.Form == TopForm.StatusThenRead)
        {
            var rec = new Record("Status, then GetResult");
            records.Add(rec);
            TestUtil.SpinUntil(() => root.Status != SpindleTaskStatus.Pending, 10);
            SpindleTaskStatus status = root.Status;
            if (status != expected.Status)
            {
                run.Error($"Status is {status}, expected {expected.Status}");
            }
            rec.Finish(root.Read);
        }

        foreach (Record rec in records)
        {
            if (!rec.Done.Wait(TimeSpan.FromSeconds(20)))
            {
                run.Error($"{rec.What}: never ran");
                continue;
            }
            Thread.Sleep(0);
            if (Volatile.Read(ref rec.Runs) != 1)
            {
                run.Error($"{rec.What}: ran {rec.Runs} times");
            }
            Outcome want = c.Form == TopForm.WhenAnyLoser ? new Outcome(0, null) : expected;
            if (c.Form == TopForm.WhenAllWithBcl && want.Error is null)
            {
                want = want with { Value = root.IsTyped ? want.Value : 0 };
            }
            if (!root.IsTyped && want.Error is null)
            {
                want = want with { Value = 0 };
            }
            if (!Same(want, rec.Seen))
            {
                run.Error($"{rec.What}: saw {rec.Seen}, expected {want}");
            }
        }

        // Faults nobody reads: each reported once, nothing else reported (a cancellation never).
        WaitFor(() => run.Reports.Count >= expectedReports.Count && Volatile.Read(ref run.Live) == 0, 20);
        Thread.Sleep(1);
        List<Exception> reports = run.Reports.ToList();
        foreach (Exception e in expectedReports)
        {
            int n = reports.Count(r => ReferenceEquals(r, e));
            if (n != 1)
            {
                run.Error($"fault '{e.Message}' reported {n} times, expected once");
            }
        }
        foreach (Exception r in reports.Where(r => !expectedReports.Contains(r)))
        {
            run.Error($"unexpected report: {r.GetType().Name} '{r.Message}'");
        }

        // A consumed root is stale: a second read is the await-once error, never another use's outcome (the box has
        // been back to the pool and served other methods meanwhile: run a few more to make sure).
        bool stale = consumed || (c.Form is TopForm.Forget or TopForm.WhenAnyLoser && expected.Error is not null && !expected.IsCanceled);
        if (stale && root.HasSource)
        {
            for (int i = 0; i < 3; i++)
            {
                SpindleTask<int> reuse = ExecTyped(new Node([new GateStep(GateMode.Driver, GateOutcome.Value, 1)], EndKind.Return, 1, true));
                SpindleTask reuseVoid = ExecVoid(new Node([new SimpleStep(0, 0)], EndKind.Return, 1, false));
                while (run.Gates.TryDequeue(out var g))
                {
                    Complete(g.Promise, g.Gate);
                }
                reuse.GetAwaiter().GetResult();
                reuseVoid.GetAwaiter().GetResult();
            }
            ExpectAwaitOnce(run, "second GetResult", () => root.Read());
            ExpectAwaitOnce(run, "Status after consumption", () => _ = root.Status);
        }
        else if (!root.HasSource && consumed && expected.Error is null && root.IsTyped)
        {
            // A method that completed without suspending has no source: its task reads as often as you like.
            if (root.Read() != expected.Value)
            {
                run.Error("a synchronously completed task read twice gave another value");
            }
        }

        if (other is not null && c.Form == TopForm.WhenAnyWinner)
        {
            other.Reset(); // the losing promise was let go of
        }

        CheckWorkerDoesNotLeak(run);

        if (!run.Errors.IsEmpty)
        {
            throw new Xunit.Sdk.XunitException("expected " + expected + "\n" + string.Join("\n", run.Errors));
        }
    }

    private static async Task<int> AwaitVt(ValueTask<int> vt) => await vt;

    private static async Task<int> AwaitVtVoid(ValueTask vt)
    {
        await vt;
        return 0;
    }

    private static void CheckTaskShape(RunState run, Task<int> t, Outcome expected) => t.ContinueWith(done =>
    {
        bool ok = expected.Error is null ? done.Status == TaskStatus.RanToCompletion
            : expected.IsCanceled ? done.Status == TaskStatus.Canceled
            : done.Status == TaskStatus.Faulted && ReferenceEquals(done.Exception!.InnerException, expected.Error);
        if (!ok)
        {
            run.Error($"AsTask: the Task is {done.Status}, expected {expected}");
        }
    }, TaskScheduler.Default);

    private static bool Same(Outcome want, Outcome seen) => want.Error is null ? seen.Error is null && seen.Value == want.Value : ReferenceEquals(want.Error, seen.Error);

    private static void ExpectAwaitOnce(RunState run, string what, Action read)
    {
        try
        {
            read();
            run.Error(what + ": did not throw");
        }
        catch (InvalidOperationException e) when (e.Message.Contains("Preserve()", StringComparison.Ordinal))
        {
        }
        catch (Exception e)
        {
            run.Error($"{what}: threw {e.GetType().Name} '{e.Message}' instead of the await-once error");
        }
    }

    private static void CheckDriver(RunState run, string where)
    {
        if (s_local.Value != -1)
        {
            run.Error($"the driver's AsyncLocal is {s_local.Value} {where}");
        }
        if (SynchronizationContext.Current is not null)
        {
            run.Error($"the driver has a SynchronizationContext {where}");
        }
    }

    /// <summary>Completes the gates the methods hand over, each in its mode, until every method has finished.</summary>
    private static void Drive(RunState run, Case c)
    {
        var sw = System.Diagnostics.Stopwatch.StartNew();
        int idle = 0;
        while (true)
        {
            if (run.Gates.TryDequeue(out var g))
            {
                idle = 0;
                switch (g.Gate.Mode)
                {
                    case GateMode.Driver:
                        Complete(g.Promise, g.Gate);
                        CheckDriver(run, "after completing a gate inline");
                        break;
                    case GateMode.OtherThread:
                    {
                        var t = new Thread(() => Complete(g.Promise, g.Gate)) { IsBackground = true };
                        run.Threads.Add(t);
                        t.Start();
                        break;
                    }
                    default:
                        Spindle.Run(() => Complete(g.Promise, g.Gate)).Forget();
                        break;
                }
                continue;
            }
            if (Volatile.Read(ref run.Live) == 0 && run.Gates.IsEmpty)
            {
                break;
            }
            if (sw.Elapsed > TimeSpan.FromSeconds(20))
            {
                throw new TimeoutException($"the program did not finish ({run.Live} methods still running): {c}");
            }
            if (++idle > 20)
            {
                Thread.Sleep(0);
            }
        }
        foreach (Thread t in run.Threads)
        {
            t.Join();
        }
    }

    private static void WaitFor(Func<bool> condition, int seconds) => SpinWait.SpinUntil(condition, TimeSpan.FromSeconds(seconds));

    /// <summary>Work queued with no context of its own sees the default: nothing a method set stayed on a worker.</summary>
    private static void CheckWorkerDoesNotLeak(RunState run)
    {
        using (ExecutionContext.SuppressFlow())
        {
            for (int i = 0; i < 4; i++)
            {
                int seen = Spindle.Run(() => s_local.Value + (SynchronizationContext.Current is null ? 0 : 1_000_000)).GetAwaiter().GetResult();
                if (seen != 0)
                {
                    run.Error($"work queued with no context saw AsyncLocal/SynchronizationContext {seen} on a worker");
                }
            }
        }
    }
}

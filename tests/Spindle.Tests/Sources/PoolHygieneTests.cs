using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Linq;
using System.Reflection;
using System.Runtime.CompilerServices;
using System.Text;
using System.Threading;
using System.Threading.Tasks;

#if DEBUG // the pools' return hook exists only in a Debug build of the library (PoolTestHooks)
namespace SpindleLib.Tests.Sources;

/// <summary>
/// The pools' hygiene rule, checked on every object as it goes back to its pool: "a pooled object is cleared when it goes
/// back to its pool: its result, exception, continuation and ExecutionContext". A Debug-only hook in
/// <see cref="ObjectPool{T}.Return"/> hands each returned object to a checker that walks every instance field by
/// reflection (base classes included, and into struct fields such as <c>SourceCore&lt;T&gt;</c>) and records any field that
/// still holds a reference or a non-default value, except the fields of <see cref="Allowlist"/>, each kept on purpose for
/// the reason given there. Each test drives one area through the public API only, with payloads that would leak if kept
/// (reference results, exceptions, cancellable and cancelled tokens, AsyncLocal values, a SynchronizationContext,
/// closures, predicate states), and asserts that the checker saw each pooled type it exercised and recorded no violation.
/// The hook is process-wide: the class runs in the sequential collection.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class PoolHygieneTests
{
    private enum Keep
    {
        /// <summary>Kept as is: not inspected.</summary>
        AsIs,

        /// <summary>Kept, but what it refers to (an object, or an array's elements) must itself be cleared: walked.</summary>
        Inspect,
    }

    /// <summary>
    /// Fields kept across uses on purpose, by kind (a type's name without its generic arity; "*" for any) and field path;
    /// each with the reason, which the library's own code and comments give. A <c>When</c> narrows an entry to the values
    /// it is meant for.
    /// </summary>
    private static readonly Dictionary<(string Kind, string Path), (Keep Keep, string Reason, Func<object, object?, bool>? When)> Allowlist = BuildAllowlist();

    private static Dictionary<(string Kind, string Path), (Keep Keep, string Reason, Func<object, object?, bool>? When)> BuildAllowlist()
    {
        var list = new Dictionary<(string Kind, string Path), (Keep Keep, string Reason, Func<object, object?, bool>? When)>();
        void Add(string kinds, string path, string reason, Keep keep = Keep.AsIs, Func<object, object?, bool>? when = null)
        {
            foreach (string kind in kinds.Split(','))
            {
                list.Add((kind, path), (keep, reason, when));
            }
        }

        // Every source's core (SourceCore): ClearForPool keeps the version token (low 16 bits) so that a stale token of
        // the previous use is rejected by the next one, and the flags its constructor set once (dispatch, await after
        // let-go); no mark of a use (SourceCore.PooledWord), and the Pending state.
        Add("*", "_core._word", "version token and the constructor's flags, kept by SourceCore.ClearForPool on purpose",
            when: static (_, value) => value is int word && SourceCore<VoidResult>.PooledWord(word) == word);

        // Async-method boxes.
        Add("StateMachineBox", "_moveNextAction", "delegate to the box's own MoveNext, made on first need and kept with the pooled box (StateMachineBoxBase.MoveNextAction)");

        // Spindle.Run's work item: the cancellation bookkeeping is written by Rent for every cancellable use, and read
        // only while _cancelable is set (Rent, TryStart, Recycle): scalars, no reference.
        Add("RunItem", "_claim", "scalar claim of a cancellable use; set by Rent whenever it is read (only while _cancelable)");
        Add("RunItem", "_holds", "scalar hold count of a cancellable use; set by Rent whenever it is read (only while _cancelable)");

        // Forget's observer: the token is written by Observe for every use, and read only by that use's OnCompleted.
        Add("ForgetObserver", "_token", "scalar, written by Observe for every use");
        Add("ForgetObserver", "_phase", "scalar, written by Observe for every use (Registering) before the observer is registered");

        // Blocking waiter: the monitor object its event waits on is readonly, made once per pooled waiter (its flag, _set,
        // is cleared before the waiter is returned, and checked clean here).
        Add("BlockingWait", "_gate", "readonly lock object made once per pooled waiter, holds nothing of a use");

        // Combinators (Combinator.cs): the slot array and each slot's Owner/Index are kept with the pooled combinator; each
        // slot is walked, and its per-slot cell cache too. Scalars are rewritten by Prepare/Rent/Add before any read.
        Add("Combinator", "_slots", "slot array kept with the pooled combinator (CombinatorCore.Prepare grows it); each slot is walked", Keep.Inspect);
        Add("Combinator", "_references", "scalar, set by Prepare for every use");
        Add("Combinator", "_count", "scalar, set by Prepare for every use");
        Add("Combinator", "_winner", "scalar, set to -1 by Rent for every use");
        Add("Combinator", "_setup", "flags: IsAny and Aggregate set by Rent for every use; the others cleared by RecycleNow", when: (_, v) => (System.Convert.ToInt32(v) & ~(2 | 4)) == 0);
        Add("Combinator", "_timeout", "scalar, set by Rent for every use (read only when Timed)");
        Add("Combinator", "_inputsLeft", "scalar, set when CountsInputs is set (read only then)");
        // Kept on purpose and tested (CancelLosersTests.TokenSource_KeptWhenNothingWasCancelled, zero allocations). Not a
        // leak (TryReset unregisters every callback), but a token that a producer kept past its own use is the next use's
        // token too, and is cancelled when that use cancels its losers: the documented contract of WhenAny over producers ("the
        // token is valid for this call only"), the price of allocating nothing when every producer finished at once.
        Add("Combinator", "_producerSource", "an uncancelled token source is TryReset (which unregisters every callback) and kept for the next use (ReleaseProducerSource); a cancelled one is dropped");
        Add("Slot", "Owner", "readonly back-reference to the combinator that owns the slot");
        Add("Slot", "Index", "readonly position of the slot in its combinator");
        Add("Slot", "_taskContinuation", "delegate to the slot's own Complete, made on the slot's first BCL input and kept (Slot.TaskContinuation)");
        Add("Slot", "_cellCache", "per-slot cell cache kept across uses (Slot.UseCell); the cell itself is walked", Keep.Inspect);
        Add("Slot", "Kind", "scalar, set by Add for every input");
        Add("Slot", "Token", "scalar, set by Add for a Spindle input, read only for one");
        Add("Slot", "ReadState", "scalar, set to Unread by Add for a Spindle input, read only for one (TryClaimRead)");

        // Jobs (JobNode.cs, JobNodes.cs; see JobNode's remarks).
        const string Nodes = "JobNode,CombineNode,ParallelForNode,ParallelForBatchNode";
        Add(Nodes, "_refState", "the node's version (high 32 bits) is kept and bumped so that old handles are stale; the reference count (low bits) is 0", when: (_, v) => (int)(long)v! == 0);
        Add(Nodes, "_edges", "the sealed sentinel (a static object) until Initialize resets the list: a late pusher must find it sealed", when: IsStaticOf);
        Add(Nodes, "_ownEdge", "the job's own edge, kept with its node (JobNode._ownEdge); the edge is walked", Keep.Inspect);
        Add(Nodes, "_state", "scalar outcome of the finished use (Succeeded); reset by Initialize, and a stale handle reads its version first");
        Add(Nodes, "_singleDependency", "scalar, reset by Initialize");
        Add(Nodes, "_countsAsJob", "readonly, set by the constructor");
        Add(Nodes, "_sharesReferences", "readonly, set by the constructor");
        const string Parallel = "ParallelForNode,ParallelForBatchNode";
        Add(Parallel, "_runner", "readonly runner made once per node and kept with it (ParallelNode.Runner's remarks)");
        Add(Parallel, "_cursor", "scalar, reset by InitializeRange; read only under a reference taken for the current version");
        Add(Parallel, "_ready", "scalar, reset by InitializeRange; read only under a reference taken for the current version");
        Add(Parallel, "_runners", "scalar, reset by InitializeRange; read only under a reference taken for the current version");
        Add(Parallel, "Length", "scalar, set by InitializeRange");
        Add(Parallel, "BatchSize", "scalar, set by InitializeRange");
        Add("Edge", "_owner", "readonly: a job's own edge names its job");
        Add("Edge", "Dependent", "a job's own edge always names its job (Edge(JobNode owner))", when: (edge, v) => v is not null && ReferenceEquals(v, edge.GetType().GetField("_owner", BindingFlags.Instance | BindingFlags.NonPublic)!.GetValue(edge)));
        Add("Edge", "_ticket", "per-edge ticket counter: never reset, so a ticket never comes round again (Edge.NewTicket)");
        Add("Edge", "Claim", "scalar settled claim (Delivered/Revoked or the last ticket); NewTicket writes it before every push");
        Add("Edge", "ExpectedVersion", "scalar, written before every push");

        Add("JobWait", "_pooledForTests", "Debug-only bookkeeping: true while the wait is in its pool, so that a second return is counted");

        // Timers.
        Add("TimerNode", "Slot", "-1, the rest value that Recycle sets (not in a wheel slot)", when: (_, v) => (int)v! == -1);
        Add("TimerNode", "_depthAndReleases", "scalar: its releases count is set by Rent for every use; its inbox depth is written when the node is pushed onto a shard's inbox, read only for the inbox head");
        Add("TimerBatch", "_waiters", "readonly array made once per pooled batch; its elements are walked", Keep.Inspect);
        Add("TimerBatch", "_states", "readonly array made once per pooled batch; its elements are walked", Keep.Inspect);

        // Frame waiters.
        Add("PredicateWaiter", "_until", "scalar, set by Rent for every use");
        return list;
    }

    private static bool IsStaticOf(object target, object? value)
    {
        for (Type? t = target.GetType(); t is not null; t = t.BaseType)
        {
            foreach (FieldInfo f in t.GetFields(BindingFlags.Static | BindingFlags.Public | BindingFlags.NonPublic | BindingFlags.DeclaredOnly))
            {
                if (!f.FieldType.IsValueType && ReferenceEquals(f.GetValue(null), value))
                {
                    return true;
                }
            }
        }
        return false;
    }

    private sealed class Checker : IDisposable
    {
        public readonly ConcurrentDictionary<string, int> Seen = new();
        public readonly ConcurrentQueue<string> Violations = new();

        public Checker()
        {
            PoolTestHooks.Returning = Check;
        }

        public void Dispose() => PoolTestHooks.Returning = null;

        private void Check(object item)
        {
            string kind = KindOf(item.GetType());
            Seen.AddOrUpdate(kind, 1, static (_, n) => n + 1);
            try
            {
                Walk(item, item.GetType(), kind, "", item.GetType().Name, 0);
            }
            catch (Exception e)
            {
                Violations.Enqueue(item.GetType().Name + ": the checker failed: " + e);
            }
        }

        private void Walk(object target, Type type, string kind, string prefix, string owner, int depth)
        {
            for (Type? t = type; t is not null && t != typeof(object); t = t.BaseType)
            {
                foreach (FieldInfo f in t.GetFields(BindingFlags.Instance | BindingFlags.Public | BindingFlags.NonPublic | BindingFlags.DeclaredOnly))
                {
                    string path = prefix + f.Name;
                    object? value = f.GetValue(target);
                    if ((Allowlist.TryGetValue((kind, path), out var allowed) || Allowlist.TryGetValue(("*", path), out allowed))
                        && (allowed.When is null || allowed.When(target, value)))
                    {
                        if (allowed.Keep == Keep.Inspect && value is not null)
                        {
                            Inspect(value, owner + "." + path, depth);
                        }
                        continue;
                    }
                    Type ft = f.FieldType;
                    if (!ft.IsValueType)
                    {
                        if (value is not null)
                        {
                            Violations.Enqueue($"{owner}.{path} ({ft.Name}) kept {Describe(value)}");
                        }
                    }
                    else if (ft.IsPrimitive || ft.IsEnum || ft.IsPointer || depth > 8)
                    {
                        if (!Equals(value, RuntimeHelpers.GetUninitializedObject(ft)))
                        {
                            Violations.Enqueue($"{owner}.{path} ({ft.Name}) kept the value {value}");
                        }
                    }
                    else
                    {
                        Walk(value!, ft, kind, path + ".", owner, depth + 1);
                    }
                }
            }
        }

        private void Inspect(object value, string where, int depth)
        {
            if (value is Array array)
            {
                for (int i = 0; i < array.Length; i++)
                {
                    object? element = array.GetValue(i);
                    if (element is null)
                    {
                        continue;
                    }
                    string kind = KindOf(element.GetType());
                    if (Allowlist.Keys.Any(k => k.Kind == kind))
                    {
                        Walk(element, element.GetType(), kind, "", where + "[" + i + "]", depth + 1);
                    }
                    else
                    {
                        Violations.Enqueue($"{where}[{i}] kept {Describe(element)}");
                    }
                }
                return;
            }
            Walk(value, value.GetType(), KindOf(value.GetType()), "", where + "(" + value.GetType().Name + ")", depth + 1);
        }
    }

    private static string KindOf(Type type)
    {
        string name = type.Name;
        int tick = name.IndexOf('`', StringComparison.Ordinal);
        return tick < 0 ? name : name.Substring(0, tick);
    }

    private static string Describe(object value)
    {
        string text;
        try
        {
            text = value.ToString() ?? "";
        }
        catch (Exception)
        {
            text = "";
        }
        if (text.Length > 80)
        {
            text = text.Substring(0, 80) + "...";
        }
        return value.GetType().Name + " \"" + text + "\"";
    }

    private static void AssertClean(Checker checker, params string[] kinds)
    {
        var failures = new StringBuilder();
        foreach (string kind in kinds)
        {
            if (!checker.Seen.ContainsKey(kind))
            {
                failures.AppendLine("no " + kind + " went back to its pool: the test did not exercise it");
            }
        }
        foreach (string v in checker.Violations.Distinct())
        {
            failures.AppendLine("leak: " + v);
        }
        Assert.True(failures.Length == 0, "seen: " + string.Join(", ", checker.Seen.OrderBy(p => p.Key).Select(p => p.Key + "=" + p.Value)) + "\n" + failures);
    }

    // ---- payloads ----

    private sealed class Payload(string name)
    {
        public string Name { get; } = name;

        public override string ToString() => "payload " + Name;
    }

    private sealed class PayloadException(string message) : Exception(message);

    private static readonly AsyncLocal<Payload?> s_flowed = new();

    /// <summary>A SynchronizationContext that runs posts inline: installed around the awaits, it must not stay in a pooled object.</summary>
    private sealed class InlineSyncContext : SynchronizationContext
    {
        public override void Post(SendOrPostCallback d, object? state) => d(state);
    }

    private static async SpindleTask<Payload> SuspendOn(SpindleTask<Payload> input, string tag)
    {
        s_flowed.Value = new Payload("flowed " + tag);
        Payload p = await input;
        return new Payload(p.Name + " " + tag);
    }

    private static async SpindleTask SuspendOnVoid(SpindleTask input, string tag)
    {
        s_flowed.Value = new Payload("flowed " + tag);
        await input;
    }

    private static async SpindleTask<Payload> Faulting(SpindleTask input, string tag)
    {
        s_flowed.Value = new Payload("flowed " + tag);
        await input;
        throw new PayloadException("fault " + tag);
    }

    private static void Swallow(Action read)
    {
        try
        {
            read();
        }
        catch (Exception)
        {
        }
    }

    private static async Task SwallowAsync(Func<Task> read)
    {
        try
        {
            await read();
        }
        catch (Exception)
        {
        }
    }

    /// <summary>Waits, helping, until <paramref name="condition"/> holds (work queued to workers finishes).</summary>
    private static void Eventually(Func<bool> condition) => TestUtil.SpinUntil(condition);

    [Fact]
    public void Checker_ReportsAKeptReference_AndAKeptScalar()
    {
        // The checker itself, on an object handed to the hook but never pooled: a work item that still holds its
        // delegate and state (the delegate's closure and the state are a user's objects) must be reported by field.
        var state = new Payload("kept state");
        ContinuationWorkItem kept = ContinuationWorkItem.Rent(o => _ = state, state);
        using var checker = new Checker();
        PoolTestHooks.Returning!(kept);
        string all = string.Join("\n", checker.Violations);
        Assert.Contains("ContinuationWorkItem._continuation", all, StringComparison.Ordinal);
        Assert.Contains("ContinuationWorkItem._state (Object) kept Payload \"payload kept state\"", all, StringComparison.Ordinal);
    }

    /// <summary>
    /// What a pooled core keeps of its word (SourceCore.ClearForPool): its token, and exactly the flags a version step
    /// keeps (the constructor's), in the Pending state; no mark of a use survives, whichever were set.
    /// </summary>
    [Fact]
    public void APooledCoresWord_KeepsItsTokenAndWhatAVersionStepKeeps_AndNoMark()
    {
        const int token = 0xFFFF;
        const int state = 7 << 16;
        int pooled = SourceCore<VoidResult>.PooledWord(-1); // every bit set: every state bit, every mark, every flag
        Assert.Equal(token, pooled & token);
        Assert.Equal(0, pooled & state); // Pending
        Assert.Equal(SourceCore<VoidResult>.NextVersion(-1) & ~token, pooled & ~token);
        Assert.Equal(0, SourceCore<VoidResult>.PooledWord(0x5A5A_0000 & ~int.MinValue & ~(1 << 25)) & ~token); // marks alone: nothing kept
        Assert.Equal(pooled, SourceCore<VoidResult>.PooledWord(pooled));
    }

    // ---- tasks: async-method boxes, Forget, blocking reads, dispatched continuations, Spindle.Run ----

    [Fact]
    public async Task AsyncMethods_Forget_BlockingReads_Run_ReturnCleared()
    {
        using var checker = new Checker();
        Action<Exception> swallow = static _ => { };
        Spindle.UnobservedException += swallow;
        try
        {
            // Boxes: a reference result, a fault, a void method; AsyncLocal set inside and outside.
            s_flowed.Value = new Payload("outer");
            var captured0 = new Payload("captured by a Run");
            var p1 = new Promise<Payload>();
            SpindleTask<Payload> t1 = SuspendOn(p1.Task, "a");
            p1.SetResult(new Payload("result"));
            Assert.Equal("result a", (await t1).Name);

            var p2 = new Promise();
            SpindleTask<Payload> t2 = Faulting(p2.Task, "b");
            p2.SetResult();
            await SwallowAsync(async () => await t2);

            var p3 = new Promise();
            SpindleTask t3 = SuspendOnVoid(p3.Task, "c");
            var cts = new CancellationTokenSource();
            p3.SetCanceled(cts.Token);
            await SwallowAsync(async () => await t3);

            // Forget of a faulting pending async method (the box observes itself) and of a pending promise (an observer).
            var p4 = new Promise();
            Faulting(p4.Task, "d").Forget();
            p4.SetResult();
            var p5 = new Promise<Payload>();
            p5.Task.Forget();
            p5.SetException(new PayloadException("forgotten promise"));
            p5.Reset();
            var p5c = new Promise<Payload>();
            p5c.Reset(); // a token other than 0
            p5c.Task.Forget();
            p5c.SetResult(new Payload("forgotten at token 1"));
            var p5d = new Promise<Payload>();
            SpindleTask.WhenAll(new[] { p5d.Task }.AsSpan()).Forget();
            p5d.SetException(new PayloadException("forgotten WhenAll"));
            using (var wc = new CancellationTokenSource())
            {
                var p5e = new Promise<Payload>();
                SpindleTask<Payload> withCancellation = p5e.Task.WithCancellation(wc.Token);
                p5e.SetResult(new Payload("not cancelled"));
                Assert.Equal("not cancelled", (await withCancellation).Name);
                var p5f = new Promise<Payload>();
                SpindleTask<Payload> cancelledWith = p5f.Task.WithCancellation(wc.Token);
                wc.Cancel();
                await SwallowAsync(async () => await cancelledWith);
                p5f.SetResult(new Payload("after the cancellation"));
                var p5g = new Promise();
                SpindleTask voidWith = SuspendOnVoid(p5g.Task, "wc").WithCancellation(new CancellationTokenSource().Token);
                p5g.SetException(new PayloadException("fault through WithCancellation"));
                await SwallowAsync(async () => await voidWith);
            }
            var p5b = new Promise<Payload>();
            SuspendOn(p5b.Task, "e").Forget();
            p5b.SetResult(new Payload("forgotten result"));

            // Blocking GetResult on a pending task: the blocking waiter.
            var p6 = new Promise<Payload>();
            SpindleTask<Payload> t6 = SuspendOn(p6.Task, "f");
            var completer = new Thread(() =>
            {
                Thread.Sleep(50);
                p6.SetResult(new Payload("late"));
            });
            completer.Start();
            Assert.Equal("late f", t6.GetAwaiter().GetResult().Name);
            completer.Join();
            var p6b = new Promise<Payload>();
            var faulter = new Thread(() =>
            {
                Thread.Sleep(50);
                p6b.SetException(new PayloadException("late fault"));
            });
            faulter.Start();
            Swallow(() => p6b.Task.GetAwaiter().GetResult());
            faulter.Join();

            // A continuation dispatched by a promise that runs continuations asynchronously: a pooled work item carrying
            // a delegate and its state (a BCL await of the promise's ValueTask).
            var p7 = new Promise<Payload>(runContinuationsAsynchronously: true);
            Task<Payload> bcl = WithInlineContext(() => AwaitAsBcl(p7.Task.AsValueTask()));
            p7.SetResult(new Payload("dispatched"));
            Assert.Equal("dispatched", (await bcl.WaitAsync(TimeSpan.FromSeconds(30))).Name);
            var p7b = new Promise(runContinuationsAsynchronously: true);
            var closure = new Payload("closure");
            var ran = new TaskCompletionSource();
            p7b.Task.GetAwaiter().OnCompleted(() =>
            {
                _ = closure.Name;
                ran.TrySetResult();
            });
            p7b.SetResult();
            await ran.Task.WaitAsync(TimeSpan.FromSeconds(30));

            // BCL awaits of pooled sources with the SynchronizationContext installed: the awaiter's continuation is bound
            // to that context (and the ExecutionContext) in the source's core while it waits.
            var p8 = new Promise<Payload>();
            Task<Payload> bclOfBox = WithInlineContext(() => AwaitAsBcl(SuspendOn(p8.Task, "sc").AsValueTask()));
            p8.SetResult(new Payload("through a box"));
            Assert.Equal("through a box sc", (await bclOfBox.WaitAsync(TimeSpan.FromSeconds(30))).Name);
            var p9 = new Promise<Payload>();
            Task<Payload[]> bclOfCombinator = WithInlineContext(() => AwaitAsBcl(SpindleTask.WhenAll(new[] { p9.Task }.AsSpan()).AsValueTask()));
            p9.SetResult(new Payload("through a combinator"));
            await bclOfCombinator.WaitAsync(TimeSpan.FromSeconds(30));
            await WithInlineContext(() => AwaitAsBcl(Spindle.Delay(1).AsValueTask())).WaitAsync(TimeSpan.FromSeconds(30));
            await WithInlineContext(() => AwaitAsBcl(Spindle.Run(() => captured0).AsValueTask())).WaitAsync(TimeSpan.FromSeconds(30));
            await WithInlineContext(BclYield).WaitAsync(TimeSpan.FromSeconds(30));

            // Spindle.Run, every form: reference results, faults, cancellable tokens, cancelled tokens.
            var captured = new Payload("captured");
            await Spindle.Run(() => { _ = captured.Name; });
            Assert.Equal("captured", (await Spindle.Run(() => captured)).Name);
            await Spindle.Run(() => SuspendOnVoid(SpindleTask.CompletedTask, "run"));
            Assert.Equal("r run", (await Spindle.Run(() => SuspendOn(SpindleTask.FromResult(new Payload("r")), "run"))).Name);
            await SwallowAsync(async () => await Spindle.Run(() => throw new PayloadException("run fault")));
            await SwallowAsync(async () => await Spindle.Run(new Func<Payload>(() => throw new PayloadException("run fault"))));
            // The forms given a state: the item holds the state until the work starts.
            await Spindle.Run(static s => { _ = ((Payload)s!).Name; }, new Payload("state"));
            Assert.Equal("state", (await Spindle.Run(static s => (Payload)s!, new Payload("state"))).Name);
            await SwallowAsync(async () => await Spindle.Run(new Func<object?, Payload>(static s => throw new PayloadException(((Payload)s!).Name)), new Payload("state fault")));
            using (var live = new CancellationTokenSource())
            {
                await Spindle.Run(static s => { _ = ((Payload)s!).Name; }, new Payload("state"), live.Token);
                Assert.Equal("state", (await Spindle.Run(static s => (Payload)s!, new Payload("state"), live.Token)).Name);
            }
            using (var live = new CancellationTokenSource())
            {
                await Spindle.Run(() => { _ = captured.Name; }, live.Token);
                Assert.Equal("captured", (await Spindle.Run(() => captured, live.Token)).Name);
                await Spindle.Run(() => SuspendOnVoid(SpindleTask.CompletedTask, "runct"), live.Token);
                await Spindle.Run(() => SuspendOn(SpindleTask.FromResult(new Payload("r")), "runct"), live.Token);
                await SwallowAsync(async () => await Spindle.Run(new Func<Payload>(() => throw new PayloadException("run fault")), live.Token));
            }
            using (var cancelled = new CancellationTokenSource())
            {
                cancelled.Cancel();
                await SwallowAsync(async () => await Spindle.Run(() => { _ = captured.Name; }, cancelled.Token));
                await SwallowAsync(async () => await Spindle.Run(() => captured, cancelled.Token));
            }
            using (var later = new CancellationTokenSource())
            {
                // Cancelled while queued: the workers are kept busy so the item is still queued when the token fires.
                var gate = new ManualResetEventSlim();
                var blockers = Enumerable.Range(0, Spindle.WorkerCount).Select(_ => Spindle.Run(() => gate.Wait(TimeSpan.FromSeconds(30)))).ToArray();
                SpindleTask<Payload> queued = Spindle.Run(() => captured, later.Token);
                later.Cancel();
                gate.Set();
                await SwallowAsync(async () => await queued);
                foreach (SpindleTask b in blockers)
                {
                    await b;
                }
            }
            Eventually(() => checker.Seen.ContainsKey("ForgetObserver") && checker.Seen.ContainsKey("ContinuationWorkItem"));
        }
        finally
        {
            Spindle.UnobservedException -= swallow;
            s_flowed.Value = null;
        }
        AssertClean(checker, "StateMachineBox", "ForgetObserver", "BlockingWait", "ContinuationWorkItem", "RunItem");
    }

    /// <summary>
    /// A registration the source refuses (the task already has its one awaiter) throws to the caller of Forget() or of a
    /// blocking GetResult(); the observer or waiter rented for it goes back to its pool, cleared, instead of being left to
    /// the GC. Each is put on top of this thread's stack first, so the rent takes it, and the next rent must hand it out
    /// again. The task's real awaiter is untouched.
    /// </summary>
    [Fact]
    public void RefusedRegistration_ForgetAndBlockingRead_ReturnTheirObjectCleared()
    {
        var promise = new Promise<Payload>();
        SpindleTask<Payload> task = promise.Task;
        bool resumed = false;
        task.GetAwaiter().OnCompleted(() => resumed = true); // the task's one awaiter
        var observer = new ForgetObserver();
        ObjectPool<ForgetObserver>.Return(observer); // on top of this thread's stack: Forget rents it
        var waiter = new BlockingWait();
        ObjectPool<BlockingWait>.Return(waiter);
        using (var checker = new Checker())
        {
            Assert.Throws<InvalidOperationException>(() => task.Forget());
            Assert.Throws<InvalidOperationException>(() => task.GetAwaiter().GetResult());
            Assert.Same(observer, ObjectPool<ForgetObserver>.TryRent());
            Assert.Same(waiter, ObjectPool<BlockingWait>.TryRent());
            AssertClean(checker, "ForgetObserver", "BlockingWait");
        }
        promise.SetResult(new Payload("for the one awaiter"));
        Assert.True(resumed);
    }

    /// <summary>
    /// Starts a BCL async method with <see cref="InlineSyncContext"/> installed, so that its awaits capture it, and puts
    /// the caller's context back on the same thread before anything is awaited: installed for the whole test, it stayed
    /// on the xunit thread (the test ends on another thread after its awaits) and ran the next tests' continuations inline
    /// on whatever thread completed them, a Spindle worker included.
    /// </summary>
    private static T WithInlineContext<T>(Func<T> start)
    {
        SynchronizationContext? before = SynchronizationContext.Current;
        SynchronizationContext.SetSynchronizationContext(new InlineSyncContext());
        try
        {
            return start();
        }
        finally
        {
            SynchronizationContext.SetSynchronizationContext(before);
        }
    }

    private static async Task<T> AwaitAsBcl<T>(ValueTask<T> task) => await task;

    private static async Task AwaitAsBcl(ValueTask task) => await task;

    private static async Task BclYield()
    {
        s_flowed.Value = new Payload("bcl yield");
        await Spindle.Yield();
        await Spindle.SwitchToWorker();
    }

    // ---- combinators: WhenAll / WhenAny over every input kind, with options, tokens, timeouts and producers ----

    private static readonly TimeSpan Long = TimeSpan.FromSeconds(30);

    private static Task<T> Wait<T>(SpindleTask<T> task) => TestUtil.WithTimeout(task);

    private static Task Wait(SpindleTask task) => TestUtil.WithTimeout(task);

    private static async Task Fails(SpindleTask task) => Assert.True(await TestUtil.WithTimeout(CatchAsync(task)), "expected a failure");

    private static async Task<bool> CatchAsync(SpindleTask task)
    {
        try
        {
            await task;
            return false;
        }
        catch (Exception)
        {
            return true;
        }
    }

    private static async Task Fails<T>(SpindleTask<T> task) => await Fails((SpindleTask)task);

    [Fact]
    public async Task Combinators_ReturnCleared()
    {
        using var checker = new Checker();
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        Action<Exception> swallow = static _ => { };
        Spindle.UnobservedException += swallow;
        try
        {
            s_flowed.Value = new Payload("outer");
            Payload R(string name) => new(name);

            // WhenAll over Spindle tasks: typed (array, tuple, destination), untyped, faults, aggregate, token, timeout.
            {
                var a = new Promise<Payload>();
                var b = new Promise<Payload>();
                var all = SpindleTask.WhenAll(SuspendOn(a.Task, "x"), b.Task);
                a.SetResult(R("a"));
                b.SetResult(R("b"));
                await Wait(all);
                var a2 = new Promise<Payload>();
                SpindleTask<Payload[]> array = SpindleTask.WhenAll(new[] { SuspendOn(a2.Task, "y"), SpindleTask.FromResult(R("done")) }.AsSpan());
                a2.SetResult(R("a2"));
                Assert.Equal(2, (await Wait(array)).Length);

                var c = new Promise<Payload>();
                var d = new Promise<Payload>();
                SpindleTask<(Payload, Payload)> tuple = SpindleTask.WhenAll(c.Task, d.Task);
                c.SetResult(R("c"));
                d.SetResult(R("d"));
                await Wait(tuple);

                var e = new Promise<Payload>();
                var dest = new Payload[1];
                SpindleTask into = SpindleTask.WhenAll(new[] { e.Task }.AsSpan(), dest.AsMemory());
                e.SetResult(R("e"));
                await Wait(into);

                var f = new Promise();
                var g = new Promise();
                SpindleTask faulted = SpindleTask.WhenAll(f.Task, g.Task);
                f.SetException(new PayloadException("f"));
                g.SetException(new PayloadException("g"));
                await Fails(faulted);

                var h = new Promise<Payload>();
                var i = new Promise<Payload>();
                SpindleTask<Payload[]> aggregated = SpindleTask.WhenAll(new[] { h.Task, i.Task }.AsSpan(), new WhenAllOptions { AggregateExceptions = true });
                h.SetException(new PayloadException("h"));
                i.SetException(new PayloadException("i"));
                await Fails(aggregated);

                using var live = new CancellationTokenSource();
                var j = new Promise<Payload>();
                SpindleTask<Payload[]> withToken = SpindleTask.WhenAll(new[] { j.Task }.AsSpan(), live.Token);
                j.SetResult(R("j"));
                await Wait(withToken);

                using var cancel = new CancellationTokenSource();
                var k = new Promise<Payload>();
                SpindleTask<Payload[]> cancelled = SpindleTask.WhenAll(new[] { k.Task }.AsSpan(), cancel.Token);
                cancel.Cancel();
                await Fails(cancelled);
                k.SetResult(R("k, after the cancellation"));

                using var cancelledBefore = new CancellationTokenSource();
                cancelledBefore.Cancel();
                var k2 = new Promise<Payload>();
                await Fails(SpindleTask.WhenAll(new[] { k2.Task }.AsSpan(), cancelledBefore.Token));
                k2.SetResult(R("k2"));

                var l = new Promise<Payload>();
                SpindleTask<Payload[]> timedOut = SpindleTask.WhenAll(new[] { l.Task }.AsSpan(), new WhenAllOptions { Timeout = TimeSpan.FromSeconds(1), Timers = wheel });
                clock.Advance(TimeSpan.FromSeconds(2));
                await Fails(timedOut);
                l.SetException(new PayloadException("l, after the timeout"));

                var m = new Promise<Payload>();
                SpindleTask<Payload[]> inTime = SpindleTask.WhenAll(new[] { m.Task }.AsSpan(), new WhenAllOptions { Timeout = TimeSpan.FromSeconds(1), Timers = wheel }, live.Token);
                m.SetResult(R("m"));
                await Wait(inTime);

                // Signals and delays as inputs, with a timeout (a signal's set is taken, or given back).
                var s1 = new Signal(false);
                var s2 = new Signal(false);
                SpindleTask signals = SpindleTask.WhenAll(new[] { s1.WaitAsync(live.Token), s2.WaitAsync(live.Token), wheel.Delay(TimeSpan.FromSeconds(1), live.Token) }.AsSpan(), new WhenAllOptions { Timeout = TimeSpan.FromSeconds(5), Timers = wheel });
                s1.Set();
                s2.Set();
                clock.Advance(TimeSpan.FromSeconds(1));
                await Wait(signals);
                var s3 = new Signal(false);
                SpindleTask signalTimedOut = SpindleTask.WhenAll(new[] { s3.WaitAsync(live.Token) }.AsSpan(), new WhenAllOptions { Timeout = TimeSpan.FromSeconds(1), Timers = wheel });
                clock.Advance(TimeSpan.FromSeconds(2));
                await Fails(signalTimedOut);
                SpindleTask<bool[]> timedWaits = SpindleTask.WhenAll(s3.WaitAsync(TimeSpan.FromSeconds(1), wheel, live.Token));
                s3.Set();
                await Wait(timedWaits);
            }

            // WhenAll over BCL tasks and value tasks: typed and untyped, results and faults.
            {
                var t1 = new TaskCompletionSource<Payload>(TaskCreationOptions.RunContinuationsAsynchronously);
                var t2 = new TaskCompletionSource<Payload>();
                SpindleTask<Payload[]> tasks = SpindleTask.WhenAll(t1.Task, t2.Task);
                t1.SetResult(R("t1"));
                t2.SetResult(R("t2"));
                await Wait(tasks);

                var t3 = new TaskCompletionSource();
                var t4 = new TaskCompletionSource();
                SpindleTask untyped = SpindleTask.WhenAll(new[] { (Task)t3.Task, t4.Task }.AsSpan(), new WhenAllOptions { AggregateExceptions = true });
                t3.SetException(new PayloadException("t3"));
                t4.SetException(new PayloadException("t4"));
                await Fails(untyped);

                var v1 = new TaskCompletionSource<Payload>();
                var v2 = new Promise<Payload>();
                SpindleTask<Payload[]> valueTasks = SpindleTask.WhenAll(new ValueTask<Payload>(v1.Task), v2.Task.AsValueTask());
                v1.SetResult(R("v1"));
                v2.SetResult(R("v2"));
                await Wait(valueTasks);

                var v3 = new TaskCompletionSource();
                var v4 = new Promise();
                SpindleTask untypedValues = SpindleTask.WhenAll(new ValueTask(v3.Task), v4.Task.AsValueTask());
                v3.SetResult();
                v4.SetException(new PayloadException("v4"));
                await Fails(untypedValues);

                using var cancel = new CancellationTokenSource();
                var t5 = new TaskCompletionSource<Payload>();
                SpindleTask<Payload[]> bclCancelled = SpindleTask.WhenAll(new[] { t5.Task }.AsSpan(), cancel.Token);
                cancel.Cancel();
                await Fails(bclCancelled);
                t5.SetResult(R("t5, after the cancellation"));
            }

            // WhenAny over every kind, with and without a token; the losers are let go of.
            {
                var a = new Promise<Payload>();
                var b = new Promise<Payload>();
                var any = SpindleTask.WhenAny(SuspendOn(a.Task, "any"), b.Task);
                b.SetResult(R("b wins"));
                await Wait(any);
                a.SetResult(R("a loses"));

                var c = new Promise();
                var d = new Promise();
                SpindleTask<int> untyped = SpindleTask.WhenAny(c.Task, d.Task);
                c.SetException(new PayloadException("c"));
                await Fails(untyped); // the winner's fault is the result's
                d.SetException(new PayloadException("d loses"));

                using var live = new CancellationTokenSource();
                var e = new Promise<Payload>();
                var s = new Signal(false);
                SpindleTask<int> mixed = SpindleTask.WhenAny(new[] { e.Task.AsSpindleTask(), s.WaitAsync(live.Token), wheel.Delay(TimeSpan.FromSeconds(10), live.Token) }.AsSpan(), live.Token);
                s.Set();
                await Wait(mixed);
                e.SetResult(R("e loses"));

                var s2 = new Signal(false);
                SpindleTask<(int, bool)> delays = SpindleTask.WhenAny(new[] { s2.WaitAsync(TimeSpan.FromSeconds(1), wheel, live.Token) }.AsSpan(), live.Token);
                clock.Advance(TimeSpan.FromSeconds(2));
                await Wait(delays);

                var s3 = new Signal(false);
                SpindleTask<int> delayWins = SpindleTask.WhenAny(s3.WaitAsync(live.Token), wheel.Delay(TimeSpan.FromSeconds(1), live.Token));
                clock.Advance(TimeSpan.FromSeconds(2));
                await Wait(delayWins);

                using var cancel = new CancellationTokenSource();
                var f = new Promise<Payload>();
                SpindleTask<(int, Payload)> cancelled = SpindleTask.WhenAny(new[] { f.Task }.AsSpan(), cancel.Token);
                cancel.Cancel();
                await Fails(cancelled);
                f.SetResult(R("f, after the cancellation"));

                var t1 = new TaskCompletionSource<Payload>();
                var t2 = new TaskCompletionSource<Payload>();
                SpindleTask<(int, Payload)> tasks = SpindleTask.WhenAny(new[] { t1.Task, t2.Task }.AsSpan(), live.Token);
                t1.SetResult(R("t1"));
                await Wait(tasks);
                t2.SetException(new PayloadException("t2 loses"));

                var t3 = new TaskCompletionSource();
                SpindleTask<int> untypedTasks = SpindleTask.WhenAny(t3.Task, Task.Delay(Timeout.Infinite, live.Token));
                t3.SetException(new PayloadException("t3"));
                await Fails(untypedTasks);

                var v1 = new TaskCompletionSource<Payload>();
                var v2 = new Promise<Payload>();
                SpindleTask<(int, Payload)> values = SpindleTask.WhenAny(new ValueTask<Payload>(v1.Task), v2.Task.AsValueTask());
                v2.SetResult(R("v2"));
                await Wait(values);
                v1.SetResult(R("v1 loses"));

                var v3 = new Promise();
                SpindleTask<int> untypedValues = SpindleTask.WhenAny(v3.Task.AsValueTask(), new ValueTask(Task.Delay(Timeout.Infinite, live.Token)));
                v3.SetResult();
                await Wait(untypedValues);

                // Producers: the winner's token source cancels the losers.
                var closure = new Payload("producer closure");
                SpindleTask<(int, Payload)> produced = SpindleTask.WhenAny(
                    new Func<CancellationToken, SpindleTask<Payload>>[]
                    {
                        ct => SuspendOn(SpindleTask.FromResult(closure), "p1"),
                        ct => ProduceSlow(wheel, closure, ct),
                    }.AsSpan(),
                    live.Token);
                await Wait(produced);
                SpindleTask<int> producedVoid = SpindleTask.WhenAny(
                    new Func<CancellationToken, SpindleTask>[]
                    {
                        ct => wheel.Delay(TimeSpan.FromSeconds(10), ct),
                        ct => Faulting(SpindleTask.CompletedTask, closure.Name).AsSpindleTask(),
                    }.AsSpan(),
                    live.Token);
                await Fails(producedVoid); // the faulting producer wins
                live.Cancel(); // the Task.Delay losers above
            }
            // Decided while async methods, delays and signal waits are pending: they are let go of (detached, forgotten).
            {
                using var cancel = new CancellationTokenSource();
                var a = new Promise<Payload>();
                var sig = new Signal(false);
                SpindleTask all = SpindleTask.WhenAll(new[] { SuspendOn(a.Task, "detached").AsSpindleTask(), wheel.Delay(TimeSpan.FromSeconds(10)), sig.WaitAsync() }.AsSpan(), cancel.Token);
                cancel.Cancel();
                await Fails(all);
                a.SetResult(R("after the WhenAll was cancelled"));
                sig.Set();

                var b = new Promise<Payload>();
                var sig2 = new Signal(false);
                SpindleTask<int> any = SpindleTask.WhenAny(new[] { SuspendOn(b.Task, "loser").AsSpindleTask(), wheel.Delay(TimeSpan.FromSeconds(10)), sig2.WaitAsync(TimeSpan.FromSeconds(10), wheel).AsSpindleTask() }.AsSpan());
                sig2.Set();
                await Wait(any);
                b.SetException(new PayloadException("loser's fault after the race"));

                using var cancelAny = new CancellationTokenSource();
                var c = new Promise<Payload>();
                SpindleTask<int> anyCancelled = SpindleTask.WhenAny(new[] { SuspendOn(c.Task, "cancelled race").AsSpindleTask(), wheel.Delay(TimeSpan.FromSeconds(10)) }.AsSpan(), cancelAny.Token);
                cancelAny.Cancel();
                await Fails(anyCancelled);
                c.SetResult(R("after the race was cancelled"));

                var d = new Promise<Payload>();
                SpindleTask<Payload> timedOut = SuspendOn(d.Task, "timed out").WithTimeout(TimeSpan.FromSeconds(1), wheel);
                clock.Advance(TimeSpan.FromSeconds(2));
                await Fails(timedOut);
                d.SetException(new PayloadException("after the timeout"));
            }

            // A task scope: children that succeed, fail, and are cancelled by a sibling's failure.
            {
                var scopeState = new Payload("scope state");
                var scope = new TaskScope();
                scope.Run(ct => SuspendOnVoid(wheel.Delay(TimeSpan.FromSeconds(5), ct), scopeState.Name));
                scope.Run(_ => Faulting(SpindleTask.CompletedTask, "scope child").AsSpindleTask());
                scope.RunTask(ct => Task.Delay(Timeout.Infinite, ct));
                await Fails(scope.WaitAsync());
                await SwallowAsync(async () => await scope.DisposeAsync());
            }
            Eventually(() => wheel.PendingCount == 0);
        }
        finally
        {
            Spindle.UnobservedException -= swallow;
            s_flowed.Value = null;
        }
        AssertClean(checker, "Combinator", "StateMachineBox", "TimerNode", "SignalTimeout");
    }

    private static async SpindleTask<Payload> ProduceSlow(TimerWheel wheel, Payload payload, CancellationToken ct)
    {
        await wheel.Delay(TimeSpan.FromSeconds(10), ct);
        return payload;
    }

    // ---- jobs ----

    private struct RefJob : IJob
    {
        public Payload Payload;
        public int[] Out;

        public readonly void Execute() => Out[0] += Payload.Name.Length;
    }

    private struct WaitingJob : IJob
    {
        public Payload Payload;
        public ManualResetEventSlim Started;
        public ManualResetEventSlim Release;

        public readonly void Execute()
        {
            Started.Set();
            Release.Wait(TimeSpan.FromSeconds(30));
        }
    }

    private static async SpindleTask<int> AwaitJob(JobHandle handle)
    {
        s_flowed.Value = new Payload("awaiting a job");
        await handle;
        return 1;
    }

    private struct FaultingJob : IJob
    {
        public Payload Payload;

        public readonly void Execute() => throw new PayloadException(Payload.Name);
    }

    private struct ForJob : IJobParallelFor
    {
        public Payload Payload;
        public int[] Out;

        public readonly void Execute(int index) => Out[index] = Payload.Name.Length;
    }

    private struct BatchJob : IJobParallelForBatch
    {
        public Payload Payload;
        public int[] Out;

        public readonly void Execute(int startIndex, int count)
        {
            for (int i = startIndex; i < startIndex + count; i++)
            {
                Out[i] = Payload.Name.Length;
            }
        }
    }

    [Fact]
    public async Task Jobs_ReturnCleared()
    {
        using var checker = new Checker();
        Action<Exception> swallow = static _ => { };
        Spindle.UnobservedException += swallow;
        try
        {
            s_flowed.Value = new Payload("outer");
            var payload = new Payload("job payload");
            var out1 = new int[256];
            JobHandle a = new RefJob { Payload = payload, Out = out1 }.Schedule();
            JobHandle b = new ForJob { Payload = payload, Out = out1 }.Schedule(out1.Length, 16, a);
            JobHandle c = new BatchJob { Payload = payload, Out = new int[256] }.ScheduleBatch(256, 16);
            JobHandle d = JobHandle.CombineDependencies(b, c);
            JobHandle e = new RefJob { Payload = payload, Out = new int[1] }.Schedule(d);
            JobHandle f = JobHandle.CombineDependencies(a, c, e);
            JobHandle g = JobHandle.CombineDependencies(new[] { a, b, c, d, e, f }.AsSpan());
            JobHandle.ScheduleBatchedJobs();
            g.Complete();
            await new RefJob { Payload = payload, Out = new int[1] }.Schedule(g);

            JobHandle faulting = new FaultingJob { Payload = payload }.Schedule();
            JobHandle afterFault = new RefJob { Payload = payload, Out = new int[1] }.Schedule(faulting);
            JobHandle.ScheduleBatchedJobs();
            Swallow(afterFault.Complete);
            Swallow(faulting.Complete);
            await SwallowAsync(async () => await new FaultingJob { Payload = payload }.Schedule());
            await SwallowAsync(async () => await new ForJob { Payload = payload, Out = null! }.Schedule(64, 8));
            await SwallowAsync(async () => await new BatchJob { Payload = payload, Out = null! }.ScheduleBatch(64, 8));
            await SwallowAsync(async () => await TestUtil.WithTimeout(new FaultingJob { Payload = payload }.Schedule().AsSpindleTask()));

            // Awaited by an async Spindle method (an edge carrying the box), and as a SpindleTask. The first job waits behind
            // a gate until the method has suspended: a job that finished before its await completed the method at once, with
            // no box, on warm workers (after another test), and the check below then failed ("no StateMachineBox went back").
            using (var gateStarted = new ManualResetEventSlim())
            using (var gateRelease = new ManualResetEventSlim())
            {
                JobHandle gate = new WaitingJob { Payload = payload, Started = gateStarted, Release = gateRelease }.Schedule(g);
                SpindleTask<int> awaiting = AwaitJob(new RefJob { Payload = payload, Out = new int[1] }.Schedule(gate));
                Assert.False(awaiting.IsCompleted, "the method did not suspend on its pending job");
                gateRelease.Set();
                Assert.Equal(1, await awaiting);
            }
            await TestUtil.WithTimeout(new RefJob { Payload = payload, Out = new int[1] }.Schedule().AsSpindleTask());
            await SwallowAsync(async () => await AwaitJob(new FaultingJob { Payload = payload }.Schedule()));

            // A job's wait taken while the job is pending (JobWait): read on the job's success and on its fault, let go of by
            // a timeout, and revived by the next call and read.
            var jobStarted = new ManualResetEventSlim();
            var jobRelease = new ManualResetEventSlim();
            JobHandle pending = new WaitingJob { Payload = payload, Started = jobStarted, Release = jobRelease }.Schedule();
            JobHandle failsAfter = new FaultingJob { Payload = payload }.Schedule(pending);
            JobHandle.ScheduleBatchedJobs();
            SpindleTask readOnSuccess = pending.AsSpindleTask();
            SpindleTask readOnFault = failsAfter.AsSpindleTask();
            var jobClock = new ManualClock();
            using (var jobWheel = new TimerWheel(jobClock))
            {
                SpindleTask letGo = failsAfter.AsSpindleTask().WithTimeout(TimeSpan.FromMilliseconds(1), jobWheel);
                jobClock.Advance(TimeSpan.FromMilliseconds(1));
                Swallow(() => letGo.GetAwaiter().GetResult());
            }
            // The let-go wait revived by the next call on the same job (a chained JobWait: its link is cleared in its pool).
            SpindleTask revived = failsAfter.AsSpindleTask();
            jobRelease.Set();
            await TestUtil.WithTimeout(readOnSuccess);
            await SwallowAsync(() => TestUtil.WithTimeout(readOnFault));
            await SwallowAsync(() => TestUtil.WithTimeout(revived));
            Eventually(() => checker.Seen.TryGetValue("JobWait", out int waits) && waits >= 3);

            // The blocking waits run on a thread of their own: after the awaits above the test may be running on a Spindle
            // worker (a job's completion resumes its awaiter inline), and a worker blocked in a plain wait for a job that
            // only a worker can start waits for ever when it is the only one (one processor).
            await TestUtil.RunOnThread(() =>
            {
                // A blocking Complete on a job that runs until the waiter has registered on it.
                var started = new ManualResetEventSlim();
                var release = new ManualResetEventSlim();
                JobHandle longJob = new WaitingJob { Payload = payload, Started = started, Release = release }.Schedule();
                JobHandle.ScheduleBatchedJobs();
                CompleteOnceItsWaiterHasRegistered(checker, longJob, started, release);

                // A blocking Complete on a job that is still waiting for a dependency, which runs until the waiter has
                // registered on the dependent job (with a quick dependency, as before, the jobs could be done before the
                // Complete, which then only helped, and nothing showed a blocking wait on a pending dependent going back clean).
                var depStarted = new ManualResetEventSlim();
                var depRelease = new ManualResetEventSlim();
                JobHandle dependency = new WaitingJob { Payload = payload, Started = depStarted, Release = depRelease }.Schedule();
                JobHandle dependent = new RefJob { Payload = payload, Out = new int[1] }.Schedule(dependency);
                JobHandle.ScheduleBatchedJobs();
                CompleteOnceItsWaiterHasRegistered(checker, dependent, depStarted, depRelease);
            });
        }
        finally
        {
            Spindle.UnobservedException -= swallow;
            s_flowed.Value = null;
        }
        AssertClean(checker, "JobNode", "ParallelForNode", "ParallelForBatchNode", "CombineNode", "Edge", "BlockingWait", "StateMachineBox", "JobWait");
    }

    /// <summary>
    /// A blocking <see cref="JobHandle.Complete"/> of <paramref name="waited"/> that reaches its blocking wait: the
    /// <see cref="WaitingJob"/> that <paramref name="waited"/> is or depends on goes on, once it has
    /// <paramref name="started"/>, until a waiter has registered on <paramref name="waited"/>. A fixed sleep before the
    /// release let a loaded machine's helping rounds outlast it, and the job finished before any blocking wait was rented.
    /// Checks that the Complete gave a blocking wait back to its pool (the checker then walked it).
    /// </summary>
    private static void CompleteOnceItsWaiterHasRegistered(Checker checker, JobHandle waited, ManualResetEventSlim started, ManualResetEventSlim release)
    {
        int waitsBefore = checker.Seen.GetValueOrDefault("BlockingWait");
        Assert.True(started.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "the job did not start on a worker");
        Task releaser = TestUtil.RunOnThread(() =>
        {
            TestUtil.SpinUntil(() => waited.Node!.WaiterCountForTests(waited.Version) > 0);
            release.Set();
        }, "releaser");
        waited.Complete();
        releaser.GetAwaiter().GetResult();
        Assert.True(checker.Seen.GetValueOrDefault("BlockingWait") > waitsBefore, "the Complete gave no blocking wait back to its pool");
    }

    // ---- timers ----

    [Fact]
    public async Task Timers_ReturnCleared()
    {
        using var checker = new Checker();
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        Action<Exception> swallow = static _ => { };
        Spindle.UnobservedException += swallow;
        try
        {
            s_flowed.Value = new Payload("outer");
            using var live = new CancellationTokenSource();

            // Delays on the default wheel (real time) and on a manual clock's.
            await Wait(Spindle.Delay(1));
            await Wait(Spindle.Delay(TimeSpan.FromMilliseconds(2), live.Token));
            var many = Enumerable.Range(0, 100).Select(i => Spindle.Delay(1 + (i % 3), live.Token)).ToArray();
            foreach (SpindleTask t in many)
            {
                await Wait(t);
            }
            SpindleTask manual = wheel.Delay(TimeSpan.FromSeconds(1), live.Token);
            clock.Advance(TimeSpan.FromSeconds(1));
            await Wait(manual);

            // Cancelled delays: while pending, and with a token cancelled before.
            using (var cancel = new CancellationTokenSource())
            {
                SpindleTask pending = wheel.Delay(TimeSpan.FromSeconds(10), cancel.Token);
                SpindleTask pendingDefault = Spindle.Delay(TimeSpan.FromSeconds(10), cancel.Token);
                cancel.Cancel();
                await Fails(pending);
                await Fails(pendingDefault);
                await Fails(wheel.Delay(TimeSpan.FromSeconds(10), cancel.Token));
            }
            using (var cancel = new CancellationTokenSource())
            {
                SpindleTask infinite = Spindle.Delay(Timeout.InfiniteTimeSpan, cancel.Token);
                SpindleTask infiniteOnWheel = wheel.Delay(Timeout.InfiniteTimeSpan, cancel.Token);
                cancel.Cancel();
                await Fails(infinite);
                await Fails(infiniteOnWheel);
            }

            // WithTimeout: times out, and does not (a reference result; a fault).
            var never = new Promise<Payload>();
            SpindleTask<Payload> timesOut = SuspendOn(never.Task, "timeout").WithTimeout(TimeSpan.FromSeconds(1), wheel, live.Token);
            clock.Advance(TimeSpan.FromSeconds(2));
            await Fails(timesOut);
            never.SetResult(new Payload("after the timeout"));
            var inTime = new Promise<Payload>();
            SpindleTask<Payload> completes = inTime.Task.WithTimeout(TimeSpan.FromSeconds(1), wheel, live.Token);
            inTime.SetResult(new Payload("in time"));
            Assert.Equal("in time", (await Wait(completes)).Name);
            var faults = new Promise();
            SpindleTask faulted = faults.Task.WithTimeout(TimeSpan.FromSeconds(1), wheel, live.Token);
            faults.SetException(new PayloadException("fault in time"));
            await Fails(faulted);
            using (var cancel = new CancellationTokenSource())
            {
                var p = new Promise<Payload>();
                SpindleTask<Payload> cancelled = p.Task.WithTimeout(TimeSpan.FromSeconds(1), wheel, cancel.Token);
                cancel.Cancel();
                await Fails(cancelled);
                p.SetResult(new Payload("after the cancellation"));
            }

            // A periodic timer: ticks, and a cancelled tick wait.
            using (var periodic = new SpindlePeriodicTimer(TimeSpan.FromSeconds(1), wheel))
            {
                SpindleTask<bool> tick = periodic.WaitForNextTickAsync(live.Token);
                clock.Advance(TimeSpan.FromSeconds(1));
                Assert.True(await Wait(tick));
                using var cancel = new CancellationTokenSource();
                SpindleTask<bool> cancelledTick = periodic.WaitForNextTickAsync(cancel.Token);
                cancel.Cancel();
                await Fails(cancelledTick);
                SpindleTask<bool> last = periodic.WaitForNextTickAsync(live.Token);
                clock.Advance(TimeSpan.FromSeconds(1));
                await Wait(last);
            }

            // Signal waits with a timeout: set in time, timed out, cancelled, on a manual wheel and the default one.
            var signal = new Signal(false);
            SpindleTask<bool> setInTime = signal.WaitAsync(TimeSpan.FromSeconds(1), wheel, live.Token);
            signal.Set();
            Assert.True(await Wait(setInTime));
            SpindleTask<bool> timedOut = signal.WaitAsync(TimeSpan.FromSeconds(1), wheel, live.Token);
            clock.Advance(TimeSpan.FromSeconds(2));
            Assert.False(await Wait(timedOut));
            using (var cancel = new CancellationTokenSource())
            {
                SpindleTask<bool> cancelledWait = signal.WaitAsync(TimeSpan.FromSeconds(1), wheel, cancel.Token);
                cancel.Cancel();
                await Fails(cancelledWait);
            }
            Assert.False(await Wait(signal.WaitAsync(TimeSpan.FromMilliseconds(5), live.Token)));
            Eventually(() => wheel.PendingCount == 0);
        }
        finally
        {
            Spindle.UnobservedException -= swallow;
            s_flowed.Value = null;
        }
        AssertClean(checker, "TimerNode", "SignalTimeout", "StateMachineBox");
    }

    // ---- scopes ----

    private static async SpindleTask ScopeChild(SpindleTask wait, Payload kept)
    {
        s_flowed.Value = kept;
        await wait;
        GC.KeepAlive(kept);
    }

    [Fact]
    public async Task Scopes_ReturnTheirChildObserversCleared()
    {
        using var checker = new Checker();
        Action<Exception> swallow = static _ => { };
        Spindle.UnobservedException += swallow;
        try
        {
            s_flowed.Value = new Payload("scopes");
            int observed = 0; // children whose task was pending when the scope observed it: each rents an observer

            // Children that succeed, fail and end with the scope's cancellation, each suspended when observed.
            var gate = new Promise();
            await using (var scope = new TaskScope())
            {
                scope.Run(_ => ScopeChild(gate.Task.Preserve(), new Payload("succeeds")));
                scope.Run(async _ => { await ScopeChild(gate.Task.Preserve(), new Payload("fails")); throw new InvalidTimeZoneException("a child's failure"); });
                scope.Run(ct => ScopeChild(Spindle.Delay(Timeout.Infinite, ct), new Payload("cancelled")));
                observed += 3;
                gate.SetResult();
                await Fails(scope.WaitAsync());
            }

            // A child on a worker, and a disposal that waits for a child still running.
            var late = new Promise();
            var waiting = new TaskScope();
            waiting.Run(async _ => { await Spindle.SwitchToWorker(); await late.Task; });
            observed++;
            ValueTask disposal = waiting.DisposeAsync();
            late.SetResult();
            await TestUtil.WithTimeout(disposal.AsTask());

            // A child whose task cannot be awaited (already awaited): the registration throws, and the observer goes back.
            var misuse = new Promise();
            SpindleTask once = misuse.Task;
            once.Forget();
            var refused = new TaskScope();
            refused.Run(_ => once);
            observed++;
            misuse.SetResult();
            await Fails(refused.WaitAsync());
            await refused.DisposeAsync();

            Eventually(() => checker.Seen.GetValueOrDefault("ChildObserver") >= observed);
        }
        finally
        {
            Spindle.UnobservedException -= swallow;
            s_flowed.Value = null;
        }
        AssertClean(checker, "ChildObserver", "StateMachineBox");
    }

    // ---- waits asked for with a token already cancelled ----

    /// <summary>
    /// A delay or a frame wait asked for with a token already cancelled is a pooled timer node in no wheel, its consumer
    /// its only holder (<c>TimerNode.CanceledAtOnce</c>, stop 40): whatever reads it (an await, AsTask, AsValueTask,
    /// Preserve, WhenAll, WhenAny, a status look first, a suppressed await, Forget, a frame awaitable or its conversion),
    /// the node goes back to its pool exactly once, cleared (the token dropped), and a second read of the same task is the
    /// await-once error, never a second cancellation or a read of the node's next use. (A review of stop 40's changes.)
    /// </summary>
    [Fact]
    public async Task WaitsAskedForWithACancelledToken_GoBackToTheirPoolOnce_WhateverReadsThem()
    {
        using var checker = new Checker();
        var returns = new ConcurrentDictionary<object, int>(ReferenceEqualityComparer.Instance);
        Action<object> check = PoolTestHooks.Returning!;
        PoolTestHooks.Returning = o =>
        {
            check(o);
            if (o is TimerNode)
            {
                returns.AddOrUpdate(o, 1, static (_, n) => n + 1);
            }
        };
        Action<Exception> reported = _ => Assert.Fail("a cancellation was reported as unobserved");
        Spindle.UnobservedException += reported;
        var loop = new FrameLoop();
        loop.RunFrame();
        using var cts = new CancellationTokenSource();
        cts.Cancel();
        CancellationToken token = cts.Token;
        var never = new Promise();
        try
        {
            Func<SpindleTask>[] starts =
            [
                () => Spindle.Delay(60_000, token),
                () => loop.Delay(TimeSpan.FromSeconds(60), token),
                () => loop.DelayFrame(3, token),
                () => loop.NextFrame(token),
                () => loop.Yield(token),
                () => loop.SwitchTo(token),
                () => loop.WaitUntil(() => false, token),
                () => loop.WaitWhile(() => true, token),
            ];
            Func<SpindleTask, Task>[] readers =
            [
                t => Canceled(() => t.GetAwaiter().GetResult()),
                t => CanceledAsync(t.AsTask()),
                t => CanceledAsync(t.AsValueTask().AsTask()),
                async t =>
                {
                    SpindleTask kept = t.Preserve();
                    await CanceledAsync(kept.AsTask());
                    await Canceled(() => kept.GetAwaiter().GetResult()); // a preserved task is read any number of times
                },
                t => Canceled(() => SpindleTask.WhenAll([t, SpindleTask.CompletedTask]).GetAwaiter().GetResult()),
                t => Canceled(() => SpindleTask.WhenAny([t, never.Task]).GetAwaiter().GetResult()),
                t =>
                {
                    Assert.Equal(SpindleTaskStatus.Canceled, t.Status);
                    Assert.True(t.IsCompleted);
                    return Canceled(() => t.GetAwaiter().GetResult());
                },
                t =>
                {
                    Assert.True(t.SuppressCancellationThrow().GetAwaiter().GetResult());
                    return Task.CompletedTask;
                },
                t =>
                {
                    t.Forget();
                    return Task.CompletedTask;
                },
                async t => await Assert.ThrowsAsync<TaskCanceledException>(async () => await t),
            ];
            for (int s = 0; s < starts.Length; s++)
            {
                for (int r = 0; r < readers.Length; r++)
                {
                    SpindleTask task = starts[s]();
                    object node = task._source!;
                    Assert.IsType<TimerNode>(node);
                    returns.Clear();
                    await readers[r](task);
                    Assert.True(returns.TryGetValue(node, out int n) && n == 1, $"start {s}, reader {r}: the node went back to its pool {n} times");
                    // The await-once error for a second read (Forget's, too: it read the task at the call), and no second return.
                    var again = Assert.Throws<InvalidOperationException>(() => task.GetAwaiter().GetResult());
                    Assert.Contains("Preserve()", again.Message, StringComparison.Ordinal);
                    Assert.Equal(1, returns[node]);
                }
            }

            // A frame awaitable canceled at once, awaited twice (as one with a cancelable token that was not cancelled:
            // each is a started wait, read once), and converted twice.
            FrameAwaitable[] frames = [loop.Yield(token), loop.NextFrame(token), loop.SwitchTo(token)];
            foreach (FrameAwaitable frame in frames)
            {
                FrameAwaitable.Awaiter awaiter = frame.GetAwaiter();
                Assert.True(awaiter.IsCompleted);
                Assert.Equal(token, Assert.Throws<TaskCanceledException>(() => awaiter.GetResult()).CancellationToken);
                Assert.Throws<InvalidOperationException>(() => frame.GetAwaiter().GetResult());
            }
            returns.Clear();
            FrameAwaitable twice = loop.NextFrame(token);
            SpindleTask first = twice.AsSpindleTask(), second = twice;
            Assert.True(twice.SuppressCancellationThrow().GetAwaiter().GetResult());
            Assert.Throws<InvalidOperationException>(() => first.GetAwaiter().GetResult());
            Assert.Throws<InvalidOperationException>(() => second.GetAwaiter().GetResult());
            Assert.Equal(1, returns[second._source!]);
        }
        finally
        {
            Spindle.UnobservedException -= reported;
            loop.RunFrame();
        }
        AssertClean(checker, "TimerNode");

        Task Canceled(Action read)
        {
            Assert.Equal(token, Assert.Throws<TaskCanceledException>(read).CancellationToken);
            return Task.CompletedTask;
        }

        async Task CanceledAsync(Task read)
        {
            Assert.True(read.IsCanceled);
            Assert.Equal(token, (await Assert.ThrowsAsync<TaskCanceledException>(() => read)).CancellationToken);
        }
    }

    // ---- frame loops ----

    private static async SpindleTask FrameUser(FrameLoop loop, CancellationToken ct)
    {
        s_flowed.Value = new Payload("frames");
        await loop.Yield(ct);
        await loop.Yield(loop.LateUpdate, ct);
        await loop.NextFrame(ct);
        await loop.NextFrame(loop.EarlyUpdate, ct);
        await loop.DelayFrame(2, ct);
        await loop.Delay(TimeSpan.FromMilliseconds(30), ct);
        await loop.Delay(TimeSpan.FromMilliseconds(30), FrameTimeKind.Unscaled, ct);
        var state = new Payload("predicate state");
        int n = 0;
        await loop.WaitUntil(state, s => ++n > 2 && s.Name.Length > 0, ct);
        await loop.WaitWhile(state, s => n++ < 5 && s.Name.Length > 0, ct);
        var closure = new Payload("predicate closure");
        await loop.WaitUntil(() => closure.Name.Length > 0 && n++ > 6, ct);
        await loop.WaitWhile(() => closure.Name.Length > 0 && n++ < 9, ct);
        await loop.SwitchTo(loop.LateUpdate, ct);
        await loop.SwitchTo(ct);
    }

    private static async Task BclFrameUser(FrameLoop loop, CancellationToken ct)
    {
        s_flowed.Value = new Payload("bcl frames");
        await loop.Yield(ct);
        await loop.NextFrame(loop.LateUpdate, ct);
        await loop.SwitchTo(loop.EarlyUpdate, ct);
        await loop.DelayFrame(1, ct);
        var state = new Payload("bcl predicate state");
        int n = 0;
        await loop.WaitUntil(state, s => n++ > 1 && s.Name.Length > 0, ct);
        await Spindle.SwitchTo(loop, ct);
    }

    private static async SpindleTask FromWorker(FrameLoop loop, CancellationToken ct)
    {
        s_flowed.Value = new Payload("from a worker");
        await Spindle.SwitchToWorker();
        await Spindle.SwitchTo(loop, ct);
        await loop.Yield(ct);
    }

    [Fact]
    public async Task FrameLoop_ReturnCleared()
    {
        await TestUtil.LeaveSpindleWorkers(); // this test runs a frame loop: see LeaveSpindleWorkers
        using var checker = new Checker();
        Action<Exception> swallow = static _ => { };
        Spindle.UnobservedException += swallow;
        try
        {
            s_flowed.Value = new Payload("outer");
            FrameLoop loop = FrameUtil.NewBoundLoop();
            using var live = new CancellationTokenSource();
            SpindleTask user = FrameUser(loop, live.Token);
            loop.RunUntil(() => user.IsCompleted, 1000);
            await user;
            SpindleTask noToken = FrameUser(loop, default);
            loop.RunUntil(() => noToken.IsCompleted, 1000);
            await noToken;

            SpindleTask crossing = FromWorker(loop, live.Token);
            loop.RunUntil(() => crossing.IsCompleted, TimeSpan.FromSeconds(30));
            await crossing;

            // Cancelled while pending: every kind of wait.
            using (var cancel = new CancellationTokenSource())
            {
                var state = new Payload("cancelled state");
                SpindleTask[] waits =
                [
                    loop.Yield(cancel.Token),
                    loop.NextFrame(cancel.Token),
                    loop.DelayFrame(5, cancel.Token),
                    loop.Delay(TimeSpan.FromSeconds(10), cancel.Token),
                    loop.WaitUntil(state, s => s.Name.Length == 0, cancel.Token),
                    loop.WaitWhile(() => state.Name.Length > 0, cancel.Token),
                    loop.SwitchTo(loop.LateUpdate, cancel.Token),
                    FrameUser(loop, cancel.Token),
                ];
                cancel.Cancel();
                loop.RunFrames(3);
                // Every wait ends before it is awaited (a cancellation may resume its waiter on a worker): an await that
                // suspended here would carry the rest of the test, the loop's frames included, onto a worker, and a loop
                // run by the only worker (one processor) could never let a worker run the work it waits for.
                loop.RunUntil(() => waits.All(w => w.IsCompleted), TimeSpan.FromSeconds(30));
                foreach (SpindleTask w in waits)
                {
                    await SwallowAsync(async () => await w);
                }
            }

            // BCL async methods awaiting the frame awaitables (their awaiters take an Action), on and off the loop thread.
            Task bclOnLoop = BclFrameUser(loop, live.Token);
            loop.RunUntil(() => bclOnLoop.IsCompleted, 1000);
            await bclOnLoop;
            Task bclNoToken = BclFrameUser(loop, default); // token-free awaits: the awaiter queues the Action in a work item
            loop.RunUntil(() => bclNoToken.IsCompleted, 1000);
            await bclNoToken;
            Task bclOffLoop = Task.Run(() => BclFrameUser(loop, default));
            loop.RunUntil(() => bclOffLoop.IsCompleted, TimeSpan.FromSeconds(30));
            await bclOffLoop;
            SpindleTask offLoop = Spindle.Run(() => FrameUser(loop, live.Token));
            loop.RunUntil(() => offLoop.IsCompleted, TimeSpan.FromSeconds(30));
            await offLoop;

            // A predicate that throws.
            SpindleTask throwing = loop.WaitUntil(new Payload("thrower"), static s => throw new PayloadException(s.Name), live.Token);
            loop.RunFrames(2);
            await SwallowAsync(async () => await throwing);

            // Already cancelled.
            using (var cancelled = new CancellationTokenSource())
            {
                cancelled.Cancel();
                await SwallowAsync(async () => await loop.WaitUntil(new Payload("x"), static s => false, cancelled.Token));
                await SwallowAsync(async () => await loop.Yield(cancelled.Token));
            }
            loop.RunFrames(3);
        }
        finally
        {
            Spindle.UnobservedException -= swallow;
            s_flowed.Value = null;
        }
        AssertClean(checker, "PhaseWaiter", "PredicateWaiter", "StateMachineBox", "ContinuationWorkItem", "TimerNode");
    }
}
#endif

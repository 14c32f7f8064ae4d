using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using CsCheck;

namespace SpindleLib.Tests.Scopes;

/// <summary>
/// TaskScope with random trees of children running concurrently on Spindle's workers (CsCheck, shrunk on failure):
/// children that succeed, fail (at once, synchronously, or after some work), wait cooperatively until cancelled, run
/// slowly, spawn grandchildren through the same scope, start a nested scope on the scope's token, or run as BCL tasks;
/// and a root that closes the scope by WaitAsync, by an early DisposeAsync, or after cancelling the outer token, at a
/// random moment. Checked against the contract: no child outlives the scope (every child has ended when the wait or
/// disposal completes); every child failure is rethrown, once, as itself or in an AggregateException, and nothing else
/// is (but the outer token's cancellation, reported by WaitAsync when no child failed); a cancellation by the scope is no failure; a failure cancels the token; RunningChildren is zero at the end;
/// nothing is left registered on the outer token; nothing is reported as unobserved.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class CancellationModelTests
{
    private enum Kind
    {
        Succeed,
        FailAtOnce,
        FailSync,
        FailLater,
        WaitForCancel,
        Slow,
        Spawn,
        SpawnLater,
        Nested,
        BclTask,
    }

    private sealed record Node(Kind Kind, int Work, Node[] Children)
    {
        public override string ToString() => Children.Length == 0 ? $"{Kind}:{Work}" : $"{Kind}:{Work}({string.Join(", ", Children.Select(static c => c.ToString()))})";
    }

    private enum Close
    {
        WaitAsync,
        DisposeEarly,
        CancelOuterThenWait,
        WaitThenDisposeEarly,
    }

    private sealed record Tree(Node[] Top, Close Close, int CloseAfter)
    {
        public override string ToString() => $"[{string.Join(", ", Top.Select(static c => c.ToString()))}] close={Close} after {CloseAfter} yields";
    }

    private static readonly Gen<Kind> Leaves = Gen.Frequency(
        (3, Gen.Const(Kind.Succeed)),
        (1, Gen.Const(Kind.FailAtOnce)),
        (1, Gen.Const(Kind.FailSync)),
        (2, Gen.Const(Kind.FailLater)),
        (2, Gen.Const(Kind.WaitForCancel)),
        (2, Gen.Const(Kind.Slow)),
        (1, Gen.Const(Kind.BclTask)));

    private static Gen<Node> NodeGen(int depth)
    {
        Gen<Node> leaf = Gen.Select(Leaves, Gen.Int[0, 3], static (k, w) => new Node(k, w, Array.Empty<Node>()));
        if (depth == 0)
        {
            return leaf;
        }
        Gen<Node> parent = Gen.Select(
            Gen.Int[0, 2].Select(static i => i == 0 ? Kind.Spawn : i == 1 ? Kind.SpawnLater : Kind.Nested),
            Gen.Int[0, 3],
            NodeGen(depth - 1).Array[1, 3],
            static (k, w, c) => new Node(k, w, c));
        return Gen.Frequency((3, leaf), (1, parent));
    }

    private static readonly Gen<Tree> Trees = Gen.Select(
        NodeGen(2).Array[1, 5],
        Gen.Enum<Close>(),
        Gen.Int[0, 4],
        static (t, c, a) => new Tree(t, c, a));

    [Fact]
    public void RandomTrees_OnWorkers_MatchTheContract()
        => Trees.Sample(t => TestUtil.WithTimeout(RunTree(t), 20).GetAwaiter().GetResult(), iter: TestUtil.Stress(400), threads: 1, print: static t => t.ToString());

    /// <summary>What a tree's failing children throw: a type of this test's own, so that its reports are told from others'.</summary>
    private sealed class TreeFault(string message) : InvalidOperationException(message);

    /// <summary>What one run of a tree records.</summary>
    private sealed class Run
    {
        public int Started;
        public int Ended;
        public readonly ConcurrentDictionary<Exception, byte> OuterFailures = new(ReferenceEqualityComparer.Instance);
        public readonly ConcurrentQueue<string> Violations = new();
        public volatile bool ClosingOuter;
        public int RefusedSpawns;
    }

    private static async Task RunTree(Tree tree)
    {
        var run = new Run();
        using var outer = new CancellationTokenSource();
        // The tree's own failures, what is reported on the test's thread, and the outer token's cancellation.
        var watch = UnobservedReports.Start(UnobservedReports.Own.Any(
            UnobservedReports.Own.Type<TreeFault>(), UnobservedReports.Own.ReportedOnTestThreads(), UnobservedReports.Own.CanceledBy(() => outer.Token)));
        ConcurrentQueue<Exception> reported = watch.Reports;
        Exception? thrown = null;
        var scope = new TaskScope(outer.Token);
        bool tokenCancelledAtEnd;
        bool earlyDispose = false;
        bool cancelledByRoot = false;
        try
        {
            foreach (Node node in tree.Top)
            {
                Start(scope, node, run, outer: true);
            }
            for (int i = 0; i < tree.CloseAfter; i++)
            {
                await Spindle.Yield();
            }
            switch (tree.Close)
            {
                case Close.WaitAsync:
                {
                    run.ClosingOuter = true;
                    Task<Exception?> waiting = Outcome(scope.WaitAsync());
                    if (await Task.WhenAny(waiting, Task.Delay(30)) != waiting)
                    {
                        // A child waits for a cancellation that nothing else will make: the caller cancels, as one would.
                        cancelledByRoot = true;
                        outer.Cancel();
                    }
                    thrown = await waiting;
                    CheckAllEnded(run, "WaitAsync completed");
                    tokenCancelledAtEnd = scope.Token.IsCancellationRequested;
                    await scope.DisposeAsync(); // delivered by WaitAsync: must not rethrow
                    break;
                }
                case Close.DisposeEarly:
                    run.ClosingOuter = true;
                    earlyDispose = true;
                    CancellationToken token = scope.Token;
                    thrown = await RecordDisposal(scope);
                    CheckAllEnded(run, "DisposeAsync completed");
                    tokenCancelledAtEnd = token.IsCancellationRequested;
                    break;
                case Close.CancelOuterThenWait:
                    outer.Cancel();
                    run.ClosingOuter = true;
                    thrown = await Outcome(scope.WaitAsync());
                    CheckAllEnded(run, "WaitAsync completed after the outer token");
                    tokenCancelledAtEnd = scope.Token.IsCancellationRequested;
                    Assert.True(tokenCancelledAtEnd, "the outer token did not cancel the scope's");
                    await scope.DisposeAsync();
                    break;
                default:
                {
                    run.ClosingOuter = true;
                    SpindleTask wait = scope.WaitAsync();
                    earlyDispose = true;
                    CancellationToken token2 = scope.Token;
                    Exception? fromDisposal = await RecordDisposal(scope);
                    CheckAllEnded(run, "DisposeAsync completed (with a WaitAsync pending)");
                    Exception? fromWait = await Outcome(wait);
                    // Failures are delivered by whichever reads them; both may (disposal ran before the wait was read).
                    thrown = fromWait ?? fromDisposal;
                    if (fromWait is not null && fromDisposal is not null)
                    {
                        Assert.True(SameFailures(fromWait, fromDisposal), "WaitAsync and disposal threw different failures");
                    }
                    tokenCancelledAtEnd = token2.IsCancellationRequested;
                    break;
                }
            }
        }
        finally
        {
            watch.Dispose();
        }

        Assert.True(run.Violations.IsEmpty, string.Join("\n", run.Violations));
        Assert.Equal(0, scope.RunningChildren);
        Assert.True(run.Started == run.Ended, $"{run.Started} children started, {run.Ended} ended");

        // Every failure of a direct child is rethrown, exactly once each, and nothing else; with none, a scope the outer
        // token cancelled before its children had finished may report that cancellation, with the outer token.
        List<Exception> expected = run.OuterFailures.Keys.ToList();
        if (expected.Count == 0 && (tree.Close == Close.CancelOuterThenWait || cancelledByRoot))
        {
            if (thrown is OperationCanceledException canceled)
            {
                Assert.True(canceled.CancellationToken == outer.Token, "WaitAsync's cancellation carries another token than the outer one");
                thrown = null;
            }
            // Otherwise the children had all finished before the outer token was cancelled (they run on workers, so the
            // model cannot tell), and WaitAsync succeeded: the single-threaded TaskScopeModelTests pin that rule down.
        }
        List<Exception> got = thrown is null ? new() : thrown is AggregateException agg && expected.Count != 1 ? agg.InnerExceptions.ToList() : new() { thrown };
        Assert.True(got.Count == expected.Count && got.ToHashSet(ReferenceEqualityComparer.Instance).SetEquals(expected),
            $"the scope rethrew [{string.Join("; ", got.Select(static e => e.GetType().Name + ": " + e.Message))}], its children failed with [{string.Join("; ", expected.Select(static e => e.GetType().Name + ": " + e.Message))}]");
        if (expected.Count > 0)
        {
            Assert.True(tokenCancelledAtEnd, "a child failed, but the scope's token was not cancelled");
        }
        else if (tree.Close == Close.WaitAsync && !cancelledByRoot)
        {
            Assert.False(tokenCancelledAtEnd, "no child failed and nothing cancelled the scope, but its token is cancelled");
        }
        if (earlyDispose && run.Started != 0)
        {
            // Early disposal cancels unless the children had all finished already; either way nothing is left running.
        }
        Assert.True(TokenRegistrationLeakTests.RegistrationCount(outer) == 0, "the scope left a registration on the outer token");
        Assert.True(reported.IsEmpty, $"unobserved: {string.Join("; ", reported)}");
    }

    private static bool SameFailures(Exception a, Exception b)
    {
        if (ReferenceEquals(a, b))
        {
            return true;
        }
        return a is AggregateException x && b is AggregateException y && x.InnerExceptions.SequenceEqual(y.InnerExceptions);
    }

    private static void CheckAllEnded(Run run, string at)
    {
        int started = Volatile.Read(ref run.Started), ended = Volatile.Read(ref run.Ended);
        Assert.True(started == ended, $"{at} with {started - ended} of {started} children still running");
    }

    private static async Task<Exception?> Outcome(SpindleTask task)
    {
        try
        {
            await task;
            return null;
        }
        catch (Exception e)
        {
            return e;
        }
    }

    private static async Task<Exception?> RecordDisposal(TaskScope scope)
    {
        try
        {
            await scope.DisposeAsync();
            return null;
        }
        catch (Exception e)
        {
            return e;
        }
    }

    /// <summary>Starts <paramref name="node"/> as a child of <paramref name="scope"/>; records its failure if it is a direct child of the outer scope.</summary>
    private static void Start(TaskScope scope, Node node, Run run, bool outer)
    {
        Interlocked.Increment(ref run.Started);
        bool started = false;
        try
        {
            if (node.Kind == Kind.BclTask)
            {
                scope.RunTask(async ct =>
                {
                    try
                    {
                        await Task.Yield();
                        await Task.Delay(node.Work, ct);
                    }
                    catch (Exception e)
                    {
                        Classify(e, ct, run, outer);
                        throw;
                    }
                    finally
                    {
                        Interlocked.Increment(ref run.Ended);
                    }
                });
            }
            else
            {
                scope.Run(ct => Body(scope, node, run, outer, ct));
            }
            started = true;
        }
        finally
        {
            if (!started)
            {
                Interlocked.Increment(ref run.Ended); // refused: it never ran
            }
        }
    }

    private static void Classify(Exception e, CancellationToken ct, Run run, bool outer)
    {
        if (e is OperationCanceledException && ct.IsCancellationRequested)
        {
            return; // the scope cancelled it: no failure
        }
        if (e is OperationCanceledException)
        {
            run.Violations.Enqueue($"a child saw an OperationCanceledException with its token not cancelled: {e}");
        }
        if (outer)
        {
            run.OuterFailures.TryAdd(e, 0);
        }
    }

    private static SpindleTask Body(TaskScope scope, Node node, Run run, bool outer, CancellationToken ct)
    {
        if (node.Kind == Kind.FailSync)
        {
            Interlocked.Increment(ref run.Ended);
            var e = new TreeFault("failed synchronously");
            Classify(e, ct, run, outer);
            throw e;
        }
        return BodyAsync(scope, node, run, outer, ct);
    }

    private static async SpindleTask BodyAsync(TaskScope scope, Node node, Run run, bool outer, CancellationToken ct)
    {
        try
        {
            switch (node.Kind)
            {
                case Kind.Succeed:
                    await Spindle.Yield();
                    break;
                case Kind.FailAtOnce:
                    throw new TreeFault("failed at once");
                case Kind.FailLater:
                    await Spindle.Yield();
                    await Spindle.Delay(node.Work, ct);
                    throw new TreeFault("failed later");
                case Kind.WaitForCancel:
                    await Spindle.Delay(Timeout.Infinite, ct);
                    run.Violations.Enqueue("an infinite delay completed without cancellation");
                    break;
                case Kind.Slow:
                    await Spindle.SwitchToWorker();
                    Thread.SpinWait(2000 * (node.Work + 1));
                    await Spindle.Delay(node.Work + 1, ct);
                    break;
                case Kind.Spawn:
                case Kind.SpawnLater:
                    if (node.Kind == Kind.SpawnLater)
                    {
                        await Spindle.Yield();
                    }
                    foreach (Node child in node.Children)
                    {
                        try
                        {
                            Start(scope, child, run, outer);
                        }
                        catch (InvalidOperationException) when (node.Kind == Kind.SpawnLater)
                        {
                            // Documented: the scope takes no child once closed (a nested scope closes at once, by its WaitAsync; the
                            // outer one only once the root began closing it).
                            if (outer && !run.ClosingOuter)
                            {
                                run.Violations.Enqueue("a spawn was refused although nobody had closed the scope");
                            }
                            Interlocked.Increment(ref run.RefusedSpawns);
                        }
                    }
                    break;
                case Kind.Nested:
                {
                    await using var inner = new TaskScope(ct);
                    foreach (Node child in node.Children)
                    {
                        Start(inner, child, run, outer: false);
                    }
                    await inner.WaitAsync();
                    break;
                }
            }
        }
        catch (Exception e)
        {
            Classify(e, ct, run, outer);
            throw;
        }
        finally
        {
            Interlocked.Increment(ref run.Ended);
        }
    }

    // ---- Targeted: disposal, bad input ---------------------------------------------------------------------------

    [Fact]
    public async Task RunAfterDisposal_ThrowsInvalidOperation_NeverCallsTheChild_AndLeavesNothingRegistered()
    {
        using var outer = new CancellationTokenSource();
        var scope = new TaskScope(outer.Token);
        await scope.DisposeAsync();
        bool called = false;
        var e1 = Assert.Throws<InvalidOperationException>(() => scope.Run(_ => { called = true; return default; }));
        var e2 = Assert.Throws<InvalidOperationException>(() => scope.RunTask(_ => { called = true; return Task.CompletedTask; }));
        Assert.Contains("no longer accepts children", e1.Message);
        Assert.Contains("no longer accepts children", e2.Message);
        Assert.Throws<ArgumentNullException>(() => scope.Run(null!));
        Assert.False(called);
        Assert.Equal(0, scope.RunningChildren);
        Assert.Equal(0, TokenRegistrationLeakTests.RegistrationCount(outer));
        await scope.DisposeAsync(); // idempotent
    }

    /// <summary>
    /// DisposeAsync's contract: "waits for every child". A second DisposeAsync, while the first is still waiting for a
    /// child that has not answered the cancellation yet, must not report the scope disposed while that child runs (an
    /// <c>await using</c> around an explicit disposal, or disposal from two places, would otherwise leave the block with
    /// a child still running).
    /// </summary>
    [Fact]
    public async Task SecondDisposeAsync_WhileTheFirstWaits_DoesNotCompleteBeforeTheChildren()
    {
        var scope = new TaskScope();
        var release = new Promise();
        scope.Run(async _ => await release.Task); // ignores the token: ends only when released
        ValueTask first = scope.DisposeAsync();
        Assert.False(first.IsCompleted);
        ValueTask second = scope.DisposeAsync();
        bool secondDoneEarly = second.IsCompleted;
        int running = scope.RunningChildren;
        release.SetResult();
        await first;
        await second;
        Assert.False(secondDoneEarly, $"the second DisposeAsync completed with {running} child still running");
    }

    /// <summary>The scope's token, read after disposal: the docs do not say it throws.</summary>
    [Fact]
    public async Task Token_ReadAfterDisposal_DoesNotThrow()
    {
        var scope = new TaskScope();
        await scope.DisposeAsync();
        Exception? e = Xunit.Record.Exception(() => _ = scope.Token);
        Assert.True(e is null, $"reading Token after disposal threw {e?.GetType().Name}: {e?.Message}");
    }

    /// <summary>
    /// A scope closed by WaitAsync alone (never disposed): its link to the outer token stays registered. Documented as
    /// "use it with await using"; this test records how much is left, as a measure, and asserts the disposed case.
    /// </summary>
    [Fact]
    public async Task WaitAsyncWithoutDisposal_KeepsTheLinkToTheOuterToken_DisposalRemovesIt()
    {
        using var outer = new CancellationTokenSource();
        var scopes = new List<TaskScope>();
        for (int i = 0; i < 100; i++)
        {
            var scope = new TaskScope(outer.Token);
            scope.Run(static _ => default);
            await scope.WaitAsync();
            scopes.Add(scope);
        }
        int leftBeforeDisposal = TokenRegistrationLeakTests.RegistrationCount(outer);
        foreach (TaskScope scope in scopes)
        {
            await scope.DisposeAsync();
        }
        Assert.Equal(0, TokenRegistrationLeakTests.RegistrationCount(outer));
        Assert.True(leftBeforeDisposal is 0 or 100, $"{leftBeforeDisposal} of 100 links left");
    }
}

using System;
using System.Collections.Generic;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// A fault's stack trace reads like the BCL's: the user's own frames, from the throw up through each await, and none of
/// Spindle's machinery (awaiters, sources, boxes, combinators, work items, job runners, throw helpers). UniTask users ask
/// for this (its issue 291); the BCL hides its own such frames with <c>[StackTraceHidden]</c>, as Spindle does.
/// </summary>
public sealed class StackTraceTests
{
    private const string NotOnNetStandard = "StackTraceHiddenAttribute is .NET 6+; netstandard2.1 has no such attribute for the runtime to honour";

    /// <summary>
    /// Spindle's own async methods: their frame is a compiler-generated state machine's MoveNext, which no attribute can
    /// reach (the runtime checks the MoveNext and its generated type), so they show as the BCL's own async methods do.
    /// </summary>
    private static readonly string[] s_asyncMethods =
        ["at SpindleLib.Spindle.RunAsync", "at SpindleLib.Spindle.Unwrap", "at SpindleLib.TaskScope.DisposeAsync", "at SpindleLib.TaskBridge.Await"];

    /// <summary>The frames of <paramref name="e"/>'s trace (and its inner exceptions') that are Spindle's, not the test's.</summary>
    private static List<string> SpindleFrames(Exception e)
    {
        var frames = new List<string>();
        for (Exception? x = e; x is not null; x = x.InnerException)
        {
            frames.AddRange((x.StackTrace ?? "").Split('\n')
                .Select(l => l.Trim())
                .Where(l => l.StartsWith("at SpindleLib.", StringComparison.Ordinal) && !l.StartsWith("at SpindleLib.Tests.", StringComparison.Ordinal))
                .Where(l => !s_asyncMethods.Any(m => l.StartsWith(m, StringComparison.Ordinal))));
            if (x is AggregateException a)
            {
                foreach (Exception inner in a.InnerExceptions.Skip(1))
                {
                    frames.AddRange(SpindleFrames(inner));
                }
            }
        }
        return frames;
    }


    private static void AssertOnlyUserFrames(Exception e, string userFrame)
    {
        List<string> frames = SpindleFrames(e);
        Assert.True(frames.Count == 0, "Spindle's own frames in the trace:\n" + string.Join("\n", frames) + "\n\nwhole:\n" + e);
        Assert.Contains(userFrame, e.ToString(), StringComparison.Ordinal);
    }

    /// <summary>
    /// A failure of work run elsewhere (a <see cref="Spindle.Run(Action)"/> delegate, a job) rethrown where it is awaited
    /// or completed reads as the BCL's <c>Task.Run</c> does: the work's frames, the one frame that caught it
    /// (<c>UserWork</c>: the runtime prints its marker only after a frame it shows), "--- End of stack trace from previous
    /// location ---", then the code that awaited it. Without the marker (the catch in a hidden runner, before user15's
    /// review) the work read as called by the awaiting method, at its await.
    /// </summary>
    private static void AssertRanElsewhere(Exception e, string workFrame, string awaitingFrame)
    {
        string[] lines = e.StackTrace!.Split('\n').Select(l => l.Trim()).ToArray();
        int caught = Array.FindIndex(lines, l => l.StartsWith("at SpindleLib.UserWork.", StringComparison.Ordinal));
        int marker = Array.FindIndex(lines, l => l.StartsWith("--- End of stack trace from previous location", StringComparison.Ordinal));
        int awaiting = Array.FindLastIndex(lines, l => l.Contains(awaitingFrame, StringComparison.Ordinal));
        Assert.True(
            lines[0].Contains(workFrame, StringComparison.Ordinal) && caught > 0 && marker == caught + 1 && awaiting > marker,
            $"expected {workFrame}, UserWork, the marker, then {awaitingFrame}:\n{e}");
        Assert.Equal([lines[caught]], SpindleFrames(e));
    }

    private static async SpindleTask ThrowAfter(Promise promise)
    {
        await promise.Task;
        throw new InvalidOperationException("boom");
    }

    private static async SpindleTask<int> Middle(Promise promise)
    {
        await ThrowAfter(promise);
        return 1;
    }

    private static async SpindleTask Outer(Promise promise) => await Middle(promise);

    private static async SpindleTask ThrowAtOnce()
    {
        await SpindleTask.CompletedTask;
        throw new InvalidOperationException("at once");
    }

    private struct ThrowingJob : IJob
    {
        public void Execute() => throw new InvalidOperationException("job");
    }

    [NetBuildFact(NotOnNetStandard)]
    public async Task NestedAsyncMethods_PendingThenFaulted_ShowOnlyTheMethods()
    {
        var promise = new Promise();
        SpindleTask outer = Outer(promise);
        promise.SetResult();
        Exception e = await TestUtil.Catch(async () => await outer);
        AssertOnlyUserFrames(e, nameof(ThrowAfter));
        Assert.Contains(nameof(Middle), e.StackTrace, StringComparison.Ordinal);
    }

    [NetBuildFact(NotOnNetStandard)]
    public void BlockingRead_OfAFaultedMethod_ShowsOnlyTheMethod()
    {
        Exception e = Assert.Throws<InvalidOperationException>(() => ThrowAtOnce().GetAwaiter().GetResult());
        AssertOnlyUserFrames(e, nameof(ThrowAtOnce));
    }

    [NetBuildFact(NotOnNetStandard)]
    public async Task Promises_Preserve_AndTheBridges_ShowNoMachinery()
    {
        var promise = new Promise();
        promise.SetException(new InvalidOperationException("promise"));
        AssertOnlyUserFrames(await TestUtil.Catch(async () => await promise.Task), nameof(TestUtil.Catch));

        var typed = new Promise<int>();
        typed.SetException(new InvalidOperationException("typed"));
        AssertOnlyUserFrames(await TestUtil.Catch(async () => await typed.Task), nameof(TestUtil.Catch));

        var p2 = new Promise();
        SpindleTask preserved = Outer(p2).Preserve();
        p2.SetResult();
        AssertOnlyUserFrames(await TestUtil.Catch(async () => await preserved), nameof(ThrowAfter));
        AssertOnlyUserFrames(await TestUtil.Catch(async () => await preserved), nameof(ThrowAfter));

        var p3 = new Promise();
        Task asTask = Outer(p3).AsTask();
        p3.SetResult();
        AssertOnlyUserFrames(await TestUtil.Catch(() => asTask), nameof(ThrowAfter));

        var p4 = new Promise();
        ValueTask asValueTask = Outer(p4).AsValueTask();
        p4.SetResult();
        AssertOnlyUserFrames(await TestUtil.Catch(async () => await asValueTask), nameof(ThrowAfter));
    }

    [NetBuildFact(NotOnNetStandard)]
    public async Task WorkerRuns_ShowTheDelegateAndTheAwait_NotTheWorkItem()
    {
        const string Test = nameof(WorkerRuns_ShowTheDelegateAndTheAwait_NotTheWorkItem);
        AssertOnlyUserFrames(await TestUtil.Catch(async () => await Spindle.Run(() => throw new InvalidOperationException("run"))), Test); // the async form (Func<SpindleTask>)
        AssertRanElsewhere(await TestUtil.Catch(async () => await Spindle.Run(new Action(() => throw new InvalidOperationException("run")))), Test, Test);
        AssertRanElsewhere(await TestUtil.Catch(async () => await Spindle.Run(new Func<int>(() => throw new InvalidOperationException("run")))), Test, Test);
        AssertOnlyUserFrames(await TestUtil.Catch(async () => await Spindle.Run(ThrowAtOnce)), nameof(ThrowAtOnce));
        using var cts = new CancellationTokenSource();
        // The async form with a token starts the function as a work item (then unwraps its task): a function that throws
        // before returning a task failed in that item.
        AssertRanElsewhere(await TestUtil.Catch(async () => await Spindle.Run(() => throw new InvalidOperationException("run"), cts.Token)), Test, Test);
        AssertRanElsewhere(await TestUtil.Catch(async () => await Spindle.Run(new Action(() => throw new InvalidOperationException("run")), cts.Token)), Test, Test);
        AssertRanElsewhere(Assert.Throws<InvalidOperationException>(() => Spindle.Run(new Action(() => throw new InvalidOperationException("run"))).GetAwaiter().GetResult()), Test, Test);
    }

    private static async Task AwaitInABclMethod(SpindleTask ready) => await ready;

    /// <summary>A second pending await from a BCL method throws at its await (docs/decisions.md section 55): the trace starts there.</summary>
    [NetBuildFact(NotOnNetStandard)]
    public async Task RefusedSecondAwait_FromABclMethod_ShowsOnlyTheMethod()
    {
        var ready = new Promise();
        Task first = AwaitInABclMethod(ready.Task);
        Exception e = await TestUtil.Catch(() => AwaitInABclMethod(ready.Task));
        Assert.IsType<InvalidOperationException>(e);
        AssertOnlyUserFrames(e, nameof(AwaitInABclMethod));
        ready.SetResult();
        await TestUtil.WithTimeout(first);
    }

    [NetBuildFact(NotOnNetStandard)]
    public async Task Combinators_ShowTheInputsFrames_NotTheCombinators()
    {
        var a = new Promise();
        var b = new Promise();
        SpindleTask all = SpindleTask.WhenAll(Outer(a), Outer(b));
        a.SetResult();
        b.SetResult();
        AssertOnlyUserFrames(await TestUtil.Catch(async () => await all), nameof(ThrowAfter));

        var c = new Promise();
        var d = new Promise();
        SpindleTask aggregated = SpindleTask.WhenAll([Outer(c), Outer(d)], new WhenAllOptions { AggregateExceptions = true }, CancellationToken.None);
        c.SetResult();
        d.SetResult();
        Exception e = await TestUtil.Catch(async () => await aggregated);
        Assert.IsType<AggregateException>(e);
        AssertOnlyUserFrames(e, nameof(ThrowAfter));

        var f = new Promise();
        SpindleTask<(int, int)> any = SpindleTask.WhenAny([Middle(f), Middle(new Promise())]);
        f.SetResult();
        AssertOnlyUserFrames(await TestUtil.Catch(async () => await any), nameof(ThrowAfter));
    }

    [NetBuildFact(NotOnNetStandard)]
    public async Task Jobs_ShowTheJobsExecute_NotTheRunner()
    {
        JobHandle handle = new ThrowingJob().Schedule();
        JobHandle.ScheduleBatchedJobs();
        Exception completed = Assert.Throws<InvalidOperationException>(() => handle.Complete());
        AssertRanElsewhere(completed, nameof(ThrowingJob) + "." + nameof(ThrowingJob.Execute), nameof(Jobs_ShowTheJobsExecute_NotTheRunner));

        JobHandle awaited = new ThrowingJob().Schedule();
        AssertRanElsewhere(await TestUtil.Catch(async () => await awaited), nameof(ThrowingJob) + "." + nameof(ThrowingJob.Execute), nameof(Jobs_ShowTheJobsExecute_NotTheRunner));
    }

    [NetBuildFact(NotOnNetStandard)]
    public async Task Cancellation_OfDelaysSignalsAndFrames_ShowsNoMachinery()
    {
        using var cts = new CancellationTokenSource();
        cts.Cancel();
        AssertOnlyUserFrames(await TestUtil.Catch(async () => await Spindle.Delay(1000, cts.Token)), nameof(TestUtil.Catch));
        AssertOnlyUserFrames(await TestUtil.Catch(async () => await new Signal().WaitAsync(cts.Token)), nameof(TestUtil.Catch));

        using var later = new CancellationTokenSource();
        SpindleTask delay = Spindle.Delay(60_000, later.Token);
        SpindleTask wait = new Signal().WaitAsync(later.Token);
        later.Cancel();
        AssertOnlyUserFrames(await TestUtil.Catch(async () => await delay), nameof(TestUtil.Catch));
        AssertOnlyUserFrames(await TestUtil.Catch(async () => await wait), nameof(TestUtil.Catch));

        var loop = new FrameLoop();
        SpindleTask frame = loop.NextFrame(later.Token).AsSpindleTask();
        AssertOnlyUserFrames(await TestUtil.Catch(async () => await frame), nameof(TestUtil.Catch));
    }

    [NetBuildFact(NotOnNetStandard)]
    public async Task Scopes_ShowTheChildsFrames()
    {
        var promise = new Promise();
        Exception e = await TestUtil.Catch(async () =>
        {
            await using var scope = new TaskScope();
            scope.Run(_ => Outer(promise));
            promise.SetResult();
        });
        AssertOnlyUserFrames(e, nameof(ThrowAfter));
    }

    [NetBuildFact(NotOnNetStandard)]
    public async Task Misuse_PointsAtTheAwait_NotAtAThrowHelper()
    {
        var promise = new Promise();
        SpindleTask once = Outer(promise);
        promise.SetResult();
        await TestUtil.Catch(async () => await once); // the first read consumes the task
        Exception e = await TestUtil.Catch(async () => await once);
        Assert.IsType<InvalidOperationException>(e);
        Assert.Contains("Preserve", e.Message, StringComparison.Ordinal);
        AssertOnlyUserFrames(e, nameof(TestUtil.Catch));
    }

    private static async SpindleTask SecondAwaiter(SpindleTask task) => await task;

    private static async SpindleTask AwaitAfterTheReset(SpindleTask taken) => await taken;

    [NetBuildFact(NotOnNetStandard)]
    public async Task Misuse_ASecondAwaiterOrAnAwaitAfterAReset_PointsAtTheAwait()
    {
        // A second await while the first is pending is refused in OnCompleted, through the builder: before user15's
        // review the trace showed the builder's AwaitUnsafeOnCompleted (and Promise.OnCompleted for a promise's task).
        var promise = new Promise();
        SpindleTask first = Outer(promise);
        SpindleTask waiting = SecondAwaiter(first);
        Exception e = await TestUtil.Catch(async () => await SecondAwaiter(first));
        Assert.IsType<InvalidOperationException>(e);
        AssertOnlyUserFrames(e, nameof(SecondAwaiter));

        var direct = new Promise();
        SpindleTask directWait = SecondAwaiter(direct.Task);
        AssertOnlyUserFrames(await TestUtil.Catch(async () => await SecondAwaiter(direct.Task)), nameof(SecondAwaiter));

        // A promise's task taken before a Reset(): the message names the reset and the fix; the trace shows no GetStatus.
        var reused = new Promise();
        SpindleTask taken = reused.Task;
        reused.SetResult();
        reused.Reset();
        Exception stale = await TestUtil.Catch(async () => await AwaitAfterTheReset(taken));
        Assert.Contains("the promise was Reset() since the task was taken", stale.Message, StringComparison.Ordinal);
        Assert.Contains("take promise.Task again after each Reset()", stale.Message, StringComparison.Ordinal);
        AssertOnlyUserFrames(stale, nameof(AwaitAfterTheReset));

        promise.SetResult();
        await TestUtil.Catch(async () => await waiting);
        direct.SetResult();
        await directWait;
    }
}

using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Threading;
using System.Threading.Tasks;
using SpindleLib.Tests.Jobs;
using static SpindleLib.Tests.Combinators.CombinatorTestSupport;
using static SpindleLib.Tests.UnobservedReports;

namespace SpindleLib.Tests.Api;

/// <summary>
/// Misuse of the public API found by a review of every member in PublicAPI.Unshipped.txt: each gets an immediate,
/// clear exception at the call (and an input the API accepts brings no exception later), and leaves the object it was
/// made on working for a correct use afterwards. Sequential: some tests watch Spindle.UnobservedException.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class ApiMisuseReviewTests
{
    // AsTask of a pending task bridged through an async Task method, which registered on the source itself: a source that
    // already had an awaiter threw inside the BCL's builder, which rethrows on the thread pool (Task.ThrowAsync), so the
    // process crashed, and the returned Task never completed.
    [Fact]
    public async Task AsTask_OfAPendingTaskThatAlreadyHasAnAwaiter_ThrowsAtTheCall_AndTheAwaiterStillGetsTheOutcome()
    {
        var typed = new Promise<int>();
        SpindleTask<int> t = typed.Task;
        Task<int> first = t.AsTask();
        InvalidOperationException e1 = Assert.Throws<InvalidOperationException>(() => { _ = t.AsTask(); });
        Assert.Contains("Preserve()", e1.Message, StringComparison.Ordinal);

        var untyped = new Promise();
        SpindleTask u = untyped.Task;
        Task firstUntyped = u.AsTask();
        InvalidOperationException e2 = Assert.Throws<InvalidOperationException>(() => { _ = u.AsTask(); });
        Assert.Contains("Preserve()", e2.Message, StringComparison.Ordinal);

        // A task awaited by a Spindle async method first: AsTask is the second awaiter, and is refused the same way.
        var gate = new Promise<int>();
        SpindleTask<int> g = gate.Task;
        SpindleTask<int> awaiting = Echo(g);
        Assert.Throws<InvalidOperationException>(() => { _ = g.AsTask(); });

        typed.SetResult(7);
        untyped.SetResult();
        gate.SetResult(9);
        Assert.Equal(7, await TestUtil.WithTimeout(first));
        await TestUtil.WithTimeout(firstUntyped);
        Assert.Equal(9, await TestUtil.WithTimeout(awaiting));

        // The promises are intact: a new use bridges as before.
        typed.Reset();
        Task<int> next = typed.Task.AsTask();
        typed.SetResult(8);
        Assert.Equal(8, await TestUtil.WithTimeout(next));
    }

    private static async SpindleTask<int> Echo(SpindleTask<int> task) => await task;

    // A null continuation given to a task's awaiter was registered as the task's one awaiter: the real await was then
    // refused ("already has an awaiter"), and the completion invoked null, so Promise.SetResult threw a
    // NullReferenceException to whoever completed it (on a job, one was reported from the finishing thread).
    [Fact]
    public void TaskAwaiters_NullContinuation_ThrowArgumentNullAtTheCall_AndTheRealAwaiterStillRuns()
    {
        var untyped = new Promise();
        SpindleTask.Awaiter a = untyped.Task.GetAwaiter();
        Assert.Equal("continuation", Assert.Throws<ArgumentNullException>(() => a.OnCompleted(null!)).ParamName);
        Assert.Equal("continuation", Assert.Throws<ArgumentNullException>(() => a.UnsafeOnCompleted(null!)).ParamName);
        bool ran = false;
        a.UnsafeOnCompleted(() => ran = true);
        untyped.SetResult();
        Assert.True(ran);

        var typed = new Promise<int>();
        SpindleTask<int>.Awaiter b = typed.Task.GetAwaiter();
        Assert.Equal("continuation", Assert.Throws<ArgumentNullException>(() => b.OnCompleted(null!)).ParamName);
        Assert.Equal("continuation", Assert.Throws<ArgumentNullException>(() => b.UnsafeOnCompleted(null!)).ParamName);
        int seen = 0;
        b.OnCompleted(() => seen = b.GetResult());
        typed.SetResult(5);
        Assert.Equal(5, seen);

        // Completed tasks too (default, and a result carried inline), which ran the continuation at once.
        Assert.Throws<ArgumentNullException>(() => default(SpindleTask).GetAwaiter().OnCompleted(null!));
        Assert.Throws<ArgumentNullException>(() => default(SpindleTask).GetAwaiter().UnsafeOnCompleted(null!));
        Assert.Throws<ArgumentNullException>(() => SpindleTask.FromResult(1).GetAwaiter().OnCompleted(null!));
        Assert.Throws<ArgumentNullException>(() => SpindleTask.FromResult(1).GetAwaiter().UnsafeOnCompleted(null!));
    }

    [Fact]
    public void JobHandleAwaiter_NullContinuation_ThrowsArgumentNullAtTheCall_AndNothingIsReportedLater()
    {
        var release = new Flag();
        var done = new Flag();
        JobHandle pending = new HeldJob { Release = release, Done = done }.Schedule();
        // Claimed: what this test's calls report inline, and a NullReferenceException (what invoking the refused null
        // continuation later would throw, on whichever thread finishes the job; no test throws one on purpose).
        ConcurrentQueue<Exception> reported = Observe(Own.Any(Own.ReportedOnTestThreads(), Own.Type<NullReferenceException>()), () =>
        {
            try
            {
                Assert.Equal("continuation", Assert.Throws<ArgumentNullException>(() => pending.GetAwaiter().OnCompleted(null!)).ParamName);
                Assert.Equal("continuation", Assert.Throws<ArgumentNullException>(() => pending.GetAwaiter().UnsafeOnCompleted(null!)).ParamName);
            }
            finally
            {
                release.Set();
            }
            pending.Complete();
        });
        Assert.True(reported.IsEmpty, "reported: " + string.Join(" | ", reported));
        JobHandle finished = new CountJob(new Counter()).Schedule();
        finished.Complete();
        Assert.Throws<ArgumentNullException>(() => finished.GetAwaiter().OnCompleted(null!));
        Assert.Throws<ArgumentNullException>(() => default(JobHandle).GetAwaiter().OnCompleted(null!));
    }

    // FrameLoop.Phases handed out the loop's own array as an IReadOnlyList: a cast to IList (or to the array) rewrote the
    // order the loop runs its phases in, silently (here LateUpdate ran twice a frame and EarlyUpdate never).
    [Fact]
    public void FrameLoopPhases_ACastCannotChangeThem_AndTheLoopKeepsItsOrder()
    {
        var loop = new FrameLoop();
        FramePhase render = loop.AddPhase("Render");
        IReadOnlyList<FramePhase> phases = loop.Phases;
        Assert.False(phases is FramePhase[], "the loop's own array is handed out");
        if (phases is IList<FramePhase> list)
        {
            Assert.Throws<NotSupportedException>(() => list[0] = loop.LateUpdate);
        }
        FramePhase[] expected = { loop.EarlyUpdate, loop.FixedUpdate, loop.Update, loop.LateUpdate, render };
        Assert.Equal(expected, loop.Phases);

        var ran = new List<string>();
        foreach (FramePhase phase in expected)
        {
            Record(loop, phase, ran);
        }
        loop.RunFrame();
        Assert.Equal(new[] { "EarlyUpdate", "FixedUpdate", "Update", "LateUpdate", "Render" }, ran);
    }

    private static async SpindleTask RecordAsync(FrameLoop loop, FramePhase phase, List<string> ran)
    {
        await loop.Yield(phase);
        ran.Add(phase.Name);
    }

    private static void Record(FrameLoop loop, FramePhase phase, List<string> ran) => RecordAsync(loop, phase, ran).Forget();

    // The builders' SetException passed null on to ExceptionDispatchInfo.Capture, whose ArgumentNullException named its
    // own parameter, 'source', which the caller never saw (the BCL's builders name 'exception').
    [Fact]
    public void BuilderSetException_Null_ThrowsArgumentNullNamingException_AndTheBuilderStillWorks()
        => AssertBuildersRefuseNull("exception", (ref SpindleTaskMethodBuilder b) => b.SetException(null!), (ref SpindleTaskMethodBuilder<int> b) => b.SetException(null!));

    // The builders' SetStateMachine ignored null silently; the BCL's builders throw ArgumentNullException naming it.
    [Fact]
    public void BuilderSetStateMachine_Null_ThrowsArgumentNullNamingStateMachine_AndTheBuilderStillWorks()
        => AssertBuildersRefuseNull("stateMachine", (ref SpindleTaskMethodBuilder b) => b.SetStateMachine(null!), (ref SpindleTaskMethodBuilder<int> b) => b.SetStateMachine(null!));

    private delegate void OnBuilder<TBuilder>(ref TBuilder builder);

    /// <summary>Each builder refuses a null argument naming <paramref name="paramName"/>, and then completes as usual.</summary>
    private static void AssertBuildersRefuseNull(string paramName, OnBuilder<SpindleTaskMethodBuilder> untypedCall, OnBuilder<SpindleTaskMethodBuilder<int>> typedCall)
    {
        SpindleTaskMethodBuilder untyped = SpindleTaskMethodBuilder.Create();
        Assert.Equal(paramName, Assert.Throws<ArgumentNullException>(() => untypedCall(ref untyped)).ParamName);
        untyped.SetResult();
        untyped.Task.GetAwaiter().GetResult();

        SpindleTaskMethodBuilder<int> typed = SpindleTaskMethodBuilder<int>.Create();
        Assert.Equal(paramName, Assert.Throws<ArgumentNullException>(() => typedCall(ref typed)).ParamName);
        typed.SetResult(3);
        Assert.Equal(3, typed.Task.GetAwaiter().GetResult());
    }

    // ManualClock.Advance accepts any forward delta, TimeSpan.MaxValue included (its timestamp saturates: "advance past
    // everything"), but GetUtcNow then added the elapsed time to the start date unchecked: every later call threw an
    // ArgumentOutOfRangeException from DateTimeOffset's arithmetic ("un-representable DateTime", parameter 't'), far from
    // the Advance that caused it. So did any Advance past year 9999 from a late start.
    [Fact]
    public void ManualClock_AdvancedPastTheLastDate_GetUtcNowStaysAtTheLastDate_AndTimersStillFire()
    {
        var clock = new ManualClock();
        int fired = 0;
        using ITimer timer = clock.CreateTimer(_ => fired++, null, TimeSpan.FromDays(1), Timeout.InfiniteTimeSpan);
        clock.Advance(TimeSpan.MaxValue);
        Assert.Equal(1, fired);
        Assert.Equal(DateTimeOffset.MaxValue, clock.GetUtcNow());
        Assert.Equal(DateTimeOffset.MaxValue, clock.GetLocalNow());
        clock.Advance(TimeSpan.FromDays(1));
        Assert.Equal(DateTimeOffset.MaxValue, clock.GetUtcNow());

        var late = new ManualClock(DateTimeOffset.MaxValue - TimeSpan.FromSeconds(1));
        late.Advance(TimeSpan.FromSeconds(2));
        Assert.Equal(DateTimeOffset.MaxValue, late.GetUtcNow());
        Assert.Equal(TimeSpan.FromSeconds(2), late.Elapsed);

        // A start with an offset ahead of UTC runs out of clock time first.
        var ahead = new ManualClock(new DateTimeOffset(9999, 12, 31, 23, 0, 0, TimeSpan.FromHours(14)));
        ahead.Advance(TimeSpan.FromMinutes(59));
        Assert.Equal(new DateTimeOffset(9999, 12, 31, 23, 59, 0, TimeSpan.FromHours(14)), ahead.GetUtcNow());
        ahead.Advance(TimeSpan.FromHours(2));
        Assert.Equal(DateTimeOffset.MaxValue, ahead.GetUtcNow());
    }
}

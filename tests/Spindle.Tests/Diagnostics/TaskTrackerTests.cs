using System;
using System.Diagnostics;
using System.Linq;
using System.Runtime.CompilerServices;
using System.Threading;

namespace SpindleLib.Tests.Diagnostics;

/// <summary>
/// The task tracker: which async methods are suspended, or finished and never read, and where they started. Run
/// alone: the tracker is process-wide, and while it is on, suspending allocates (which the allocation tests forbid).
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class TaskTrackerTests : IDisposable
{
    private const string Prefix = "SpindleLib.Tests.Diagnostics.TaskTrackerTests.";

    public void Dispose()
    {
#if DEBUG
        TaskTracker.TestHookInSnapshot = null;
#endif
        SpindleDiagnostics.CaptureStackTraces = false;
        SpindleDiagnostics.TrackTasks = false;
    }

    private static async SpindleTask WaitFor(Promise promise) => await promise.Task;

    private static async SpindleTask<int> OuterWaitingForInner(Promise promise) => await Inner(promise) + 1;

    private static async SpindleTask<int> Inner(Promise promise)
    {
        await promise.Task;
        return 41;
    }

    private static async SpindleTask<int> FailAfter(Promise promise, Exception error)
    {
        await promise.Task;
        throw error;
    }

    private static TrackedTask[] Tracked(string method)
        => SpindleDiagnostics.GetTrackedTasks().Where(t => t.Method == Prefix + method).ToArray();

    [Fact]
    public void Off_ByDefault_ListsNothing()
    {
        Assert.False(SpindleDiagnostics.TrackTasks);
        var promise = new Promise();
        SpindleTask task = WaitFor(promise);

        Assert.Empty(SpindleDiagnostics.GetTrackedTasks());

        promise.SetResult();
        task.GetAwaiter().GetResult();
    }

    [Fact]
    public void On_ListsASuspendedMethodUntilItsResultIsRead()
    {
        SpindleDiagnostics.TrackTasks = true;
        var promise = new Promise();
        SpindleTask task = WaitFor(promise);

        TrackedTask tracked = Assert.Single(Tracked(nameof(WaitFor)));
        Assert.Equal(SpindleTaskStatus.Pending, tracked.Status);
        Assert.Equal(Environment.CurrentManagedThreadId, tracked.ThreadId);
        Assert.Null(tracked.StackTrace);
        Assert.True(tracked.Age >= TimeSpan.Zero);
        Assert.Contains(nameof(WaitFor), tracked.ToString());

        promise.SetResult();
        task.GetAwaiter().GetResult();
        Assert.Empty(Tracked(nameof(WaitFor)));
    }

    [Fact]
    public void On_AMethodThatNeverSuspendsIsNeverTracked()
    {
        SpindleDiagnostics.TrackTasks = true;
        var promise = new Promise();
        promise.SetResult();

        WaitFor(promise).GetAwaiter().GetResult();

        Assert.Empty(Tracked(nameof(WaitFor)));
    }

    [Fact]
    public void On_AFinishedTaskNobodyReadsStaysListedAsALeak()
    {
        SpindleDiagnostics.TrackTasks = true;
        var promise = new Promise();
        SpindleTask leaked = WaitFor(promise);
        promise.SetResult();

        TrackedTask tracked = Assert.Single(Tracked(nameof(WaitFor)));
        Assert.Equal(SpindleTaskStatus.Succeeded, tracked.Status);

        leaked.GetAwaiter().GetResult(); // reading it releases the box
        Assert.Empty(Tracked(nameof(WaitFor)));
    }

    [Fact]
    public void On_NestedMethodsAreEachListedOldestFirst()
    {
        SpindleDiagnostics.TrackTasks = true;
        var promise = new Promise();
        SpindleTask<int> task = OuterWaitingForInner(promise);

        var ours = SpindleDiagnostics.GetTrackedTasks().Where(t => t.Method.StartsWith(Prefix, StringComparison.Ordinal)).ToList();
        Assert.Equal(new[] { Prefix + nameof(Inner), Prefix + nameof(OuterWaitingForInner) }.OrderBy(n => n), ours.Select(t => t.Method).OrderBy(n => n));
        Assert.True(ours[0].Age >= ours[1].Age);

        promise.SetResult();
        Assert.Equal(42, task.GetAwaiter().GetResult());
        Assert.DoesNotContain(SpindleDiagnostics.GetTrackedTasks(), t => t.Method.StartsWith(Prefix, StringComparison.Ordinal));
    }

    [Fact]
    [MethodImpl(MethodImplOptions.NoInlining)]
    public void CaptureStackTraces_RecordsWhereTheMethodFirstSuspendedWithItsCallers()
    {
        SpindleDiagnostics.TrackTasks = true;
        SpindleDiagnostics.CaptureStackTraces = true;
        var promise = new Promise();
        SpindleTask task = WaitFor(promise);

        TrackedTask tracked = Assert.Single(Tracked(nameof(WaitFor)));
        Assert.NotNull(tracked.StackTrace);
        Assert.Contains(nameof(CaptureStackTraces_RecordsWhereTheMethodFirstSuspendedWithItsCallers), tracked.StackTrace);
        Assert.DoesNotContain("TaskTracker.OnRented", tracked.StackTrace);

        promise.SetResult();
        task.GetAwaiter().GetResult();
    }

    [Fact]
    public void CaptureStackTraces_StartsAtTheMethodsOwnFrameWhereverTheJitInlinedTheBuilder()
    {
        // The builder's frames are Spindle's own: unoptimized they sit between the tracker and the method, optimized
        // they are inlined into the method's MoveNext. Either way the trace starts at the method, at its await.
        SpindleDiagnostics.TrackTasks = true;
        SpindleDiagnostics.CaptureStackTraces = true;
        var promise = new Promise();
        SpindleTask task = WaitFor(promise);

        TrackedTask tracked = Assert.Single(Tracked(nameof(WaitFor)));
        string first = tracked.StackTrace!.Split('\n')[0];
        Assert.Contains("TaskTrackerTests." + nameof(WaitFor) + "(", first);
        Assert.DoesNotContain("TaskTracker.OnRented", tracked.StackTrace);
        Assert.DoesNotContain("BuilderCore.GetBox", tracked.StackTrace);
        Assert.DoesNotContain("AwaitUnsafeOnCompleted", tracked.StackTrace);

        promise.SetResult();
        task.GetAwaiter().GetResult();
    }

    /// <summary>The two shapes a capture takes (the builder's frames present, or inlined away), in any language.</summary>
    [Theory]
    [InlineData(
        "   at SpindleLib.TaskTracker.OnRented(StateMachineBoxBase box)\n   at SpindleLib.BuilderCore.GetBox[T,R](SpindleBox`1& b, T& s)\n" +
        "   at SpindleLib.SpindleTaskMethodBuilder`1.AwaitUnsafeOnCompleted[A,T](A& a, T& s)\n   at App.Load() in a.cs:line 3\n   at App.Main()\n",
        "   at App.Load() in a.cs:line 3\n   at App.Main()\n")]
    [InlineData(
        "   bei SpindleLib.TaskTracker.OnRented(StateMachineBoxBase box)\n   bei App.Load() in a.cs:Zeile 3\n" +
        "   bei SpindleLib.SpindleTaskMethodBuilder.Start[T](T& s)\n   bei App.Main()\n",
        "   bei App.Load() in a.cs:Zeile 3\n   bei SpindleLib.SpindleTaskMethodBuilder.Start[T](T& s)\n   bei App.Main()\n")]
    public void CapturedStack_DropsOnlyTheLeadingTrackerAndBuilderFrames(string captured, string shown)
    {
        Assert.Equal(shown, TaskTracker.StartAtAsyncMethod(captured));
    }

    [Fact]
    public void TurningItOff_DropsTheListAndAReturnLaterIsHarmless()
    {
        SpindleDiagnostics.TrackTasks = true;
        var promise = new Promise();
        SpindleTask task = WaitFor(promise);
        Assert.Single(Tracked(nameof(WaitFor)));

        SpindleDiagnostics.TrackTasks = false;
        Assert.Empty(SpindleDiagnostics.GetTrackedTasks());

        promise.SetResult();
        task.GetAwaiter().GetResult();
        SpindleDiagnostics.TrackTasks = true;
        Assert.Empty(Tracked(nameof(WaitFor))); // turning it on again starts an empty list
    }

    [Fact]
    public void On_ForgottenTasksLeaveTheListWhenTheyFinish()
    {
        SpindleDiagnostics.TrackTasks = true;
        var promise = new Promise();
        WaitFor(promise).Forget();
        Assert.Single(Tracked(nameof(WaitFor)));

        promise.SetResult();
        Assert.Empty(Tracked(nameof(WaitFor)));
    }

    [Fact]
    public void On_ManyThreadsSuspendingAndFinishingAtOnce_LeaveNothingListed()
    {
        SpindleDiagnostics.TrackTasks = true;
        const int PerThread = 2000;
        var threads = Enumerable.Range(0, 4).Select(_ => new Thread(() =>
        {
            for (int i = 0; i < PerThread; i++)
            {
                var promise = new Promise();
                SpindleTask task = WaitFor(promise);
                ThreadPool.UnsafeQueueUserWorkItem(static p => ((Promise)p!).SetResult(), promise);
                task.GetAwaiter().GetResult();
            }
        })).ToList();
        threads.ForEach(t => t.Start());
        threads.ForEach(t => t.Join());

        Assert.Empty(Tracked(nameof(WaitFor)));
    }

    [Fact]
    public void On_AnAsyncLocalFunctionIsListedByItsOwnNameNotACutOffOne()
    {
        static async SpindleTask LocalWaiter(Promise promise) => await promise.Task;

        SpindleDiagnostics.TrackTasks = true;
        var promise = new Promise();
        SpindleTask task = LocalWaiter(promise);

        TrackedTask tracked = Assert.Single(SpindleDiagnostics.GetTrackedTasks(), t => t.Method.StartsWith(Prefix, StringComparison.Ordinal));
        Assert.Equal(Prefix + nameof(On_AnAsyncLocalFunctionIsListedByItsOwnNameNotACutOffOne) + "." + nameof(LocalWaiter), tracked.Method);

        promise.SetResult();
        task.GetAwaiter().GetResult();
    }

#if DEBUG
    /// <summary>
    /// A snapshot that reaches a listed box after its use was read (the box back in its pool) read the box's status
    /// without knowing which use it looked at: a finished and read task was listed as Pending, with its old age. A use
    /// that is over is not listed. (Found by a review.)
    /// </summary>
    [Fact]
    public void GetTrackedTasks_AUseReadWhileTheSnapshotReachesIt_IsNotListed()
    {
        SpindleDiagnostics.TrackTasks = true;
        var promise = new Promise();
        SpindleTask task = WaitFor(promise);
        bool read = false;
        TaskTracker.TestHookInSnapshot = box =>
        {
            if (box is not null && !read && box.MethodName == Prefix + nameof(WaitFor))
            {
                read = true;
                promise.SetResult();
                task.GetAwaiter().GetResult(); // the box goes back to its pool
            }
        };

        TrackedTask[] tracked = Tracked(nameof(WaitFor));

        Assert.True(read);
        Assert.Empty(tracked);
    }

    /// <summary>
    /// As above, and the box is rented again at once for a new call: the snapshot must not report the new use's state
    /// under the old use's entry (its age, its thread, its stack).
    /// </summary>
    [Fact]
    public void GetTrackedTasks_ABoxReusedWhileTheSnapshotReachesIt_DoesNotReportTheNewUseAsTheOld()
    {
        SpindleDiagnostics.TrackTasks = true;
        var first = new Promise();
        SpindleTask task = WaitFor(first);
        Thread.Sleep(300); // the first use is now clearly older than anything started in the hook
        var second = new Promise();
        SpindleTask next = default;
        bool reused = false;
        Stopwatch? sinceSecondStarted = null;
        TaskTracker.TestHookInSnapshot = box =>
        {
            if (box is not null && !reused && box.MethodName == Prefix + nameof(WaitFor))
            {
                reused = true;
                first.SetResult();
                task.GetAwaiter().GetResult();
                sinceSecondStarted = Stopwatch.StartNew();
                next = WaitFor(second); // rents from the pool: the same box, on this thread
            }
        };

        TrackedTask[] tracked = Tracked(nameof(WaitFor));
        TimeSpan secondAtMost = sinceSecondStarted?.Elapsed ?? TimeSpan.Zero;
        TaskTracker.TestHookInSnapshot = null;

        Assert.True(reused);
        // The second use can be no older than the time since just before it started, however slowly the snapshot ran (a
        // fixed 200 ms bound failed whenever a loaded machine held the snapshot that long after the hook); the first use,
        // 300 ms older, would exceed it. A millisecond of slack covers the two clocks' rounding.
        Assert.DoesNotContain(tracked, t => t.Age > secondAtMost + TimeSpan.FromMilliseconds(1));
        Assert.Single(Tracked(nameof(WaitFor))); // the second use, seen by a later snapshot
        second.SetResult();
        next.GetAwaiter().GetResult();
    }

    /// <summary>
    /// The snapshot read the clock before it walked the list, so a method that first suspended meanwhile had a negative
    /// age ("how long ago it first suspended"). (Found by a review.)
    /// </summary>
    [Fact]
    public void GetTrackedTasks_AMethodThatSuspendsWhileTheSnapshotIsTaken_HasNoNegativeAge()
    {
        SpindleDiagnostics.TrackTasks = true;
        var promise = new Promise();
        SpindleTask task = default;
        bool started = false;
        TaskTracker.TestHookInSnapshot = box =>
        {
            if (box is null && !started)
            {
                started = true;
                task = WaitFor(promise);
            }
        };

        TrackedTask[] tracked = SpindleDiagnostics.GetTrackedTasks().ToArray();
        TaskTracker.TestHookInSnapshot = null;

        Assert.True(started);
        Assert.All(tracked, t => Assert.True(t.Age >= TimeSpan.Zero, t.ToString()));
        promise.SetResult();
        task.GetAwaiter().GetResult();
    }
#endif

    [Fact]
    public void On_AFinishedTaskNobodyReadsIsListedAsFaultedOrCanceled()
    {
        SpindleDiagnostics.TrackTasks = true;
        var first = new Promise();
        var second = new Promise();
        SpindleTask<int> faulted = FailAfter(first, new InvalidTimeZoneException("leaked fault"));
        SpindleTask<int> canceled = FailAfter(second, new OperationCanceledException("leaked cancellation"));
        first.SetResult();
        second.SetResult();

        Assert.Equal(
            new[] { SpindleTaskStatus.Canceled, SpindleTaskStatus.Faulted }.OrderBy(s => s),
            Tracked(nameof(FailAfter)).Select(t => t.Status).OrderBy(s => s));

        Assert.Throws<InvalidTimeZoneException>(() => faulted.GetAwaiter().GetResult());
        Assert.ThrowsAny<OperationCanceledException>(() => canceled.GetAwaiter().GetResult());
        Assert.Empty(Tracked(nameof(FailAfter)));
    }

    /// <summary>"Setting it on again while on keeps the list."</summary>
    [Fact]
    public void TurningItOnWhileOn_KeepsTheList()
    {
        SpindleDiagnostics.TrackTasks = true;
        var promise = new Promise();
        SpindleTask task = WaitFor(promise);

        SpindleDiagnostics.TrackTasks = true;

        Assert.Single(Tracked(nameof(WaitFor)));
        promise.SetResult();
        task.GetAwaiter().GetResult();
        Assert.Empty(Tracked(nameof(WaitFor)));
    }

    /// <summary>A forgotten method that never finishes is a leak the tracker shows: listed, pending, for as long as it waits.</summary>
    [Fact]
    public void On_AForgottenMethodThatNeverFinishes_StaysListedAsPending()
    {
        SpindleDiagnostics.TrackTasks = true;
        var promise = new Promise();
        WaitFor(promise).Forget();
        Thread.Sleep(20);

        TrackedTask tracked = Assert.Single(Tracked(nameof(WaitFor)));
        Assert.Equal(SpindleTaskStatus.Pending, tracked.Status);
        Assert.True(tracked.Age >= TimeSpan.FromMilliseconds(15), tracked.ToString());

        promise.SetResult(); // the forgotten task reads itself and leaves the list
        Assert.Empty(Tracked(nameof(WaitFor)));
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    private static WeakReference LeakATrackedTask()
    {
        var promise = new Promise();
        _ = WaitFor(promise); // never completed, never read: only its box (and the tracker) refer to the promise
        return new WeakReference(promise);
    }

    /// <summary>The tracker keeps what it lists alive while it is on, and "turning it off drops the list, and what it kept".</summary>
    [Fact]
    public void TurningItOff_LetsTheCollectorTakeALeakedTaskItKept()
    {
        SpindleDiagnostics.TrackTasks = true;
        WeakReference leaked = LeakATrackedTask();
        GC.Collect();
        GC.WaitForPendingFinalizers();
        GC.Collect();
        Assert.True(leaked.IsAlive);
        Assert.Single(Tracked(nameof(WaitFor)));

        SpindleDiagnostics.TrackTasks = false;
        GC.Collect();
        GC.WaitForPendingFinalizers();
        GC.Collect();
        Assert.False(leaked.IsAlive);
    }

    /// <summary>
    /// Tracking switched on and off over and over while threads suspend and finish methods: whichever list an entry
    /// lands in, once every method has been read, the list in force is empty, and no snapshot throws.
    /// </summary>
    [Fact]
    public void TurningItOnAndOffWhileMethodsSuspendAndFinish_LeavesNoEntryInTheFinalList()
    {
        int stop = 0;
        Exception? failure = null;
        var threads = Enumerable.Range(0, 2).Select(_ => new Thread(() =>
        {
            try
            {
                while (Volatile.Read(ref stop) == 0)
                {
                    var promise = new Promise();
                    SpindleTask task = WaitFor(promise);
                    promise.SetResult();
                    task.GetAwaiter().GetResult();
                    var forgotten = new Promise();
                    WaitFor(forgotten).Forget();
                    forgotten.SetResult();
                }
            }
            catch (Exception ex)
            {
                failure = ex;
            }
        })).ToList();
        threads.ForEach(t => t.Start());
        var sw = System.Diagnostics.Stopwatch.StartNew();
        while (sw.Elapsed < TimeSpan.FromSeconds(TestUtil.IsStress ? 30 : 2))
        {
            SpindleDiagnostics.TrackTasks = true;
            SpindleDiagnostics.GetTrackedTasks();
            SpindleDiagnostics.TrackTasks = false;
            SpindleDiagnostics.TrackTasks = true;
        }
        Volatile.Write(ref stop, 1);
        threads.ForEach(t => t.Join());

        Assert.Null(failure);
        Assert.True(SpindleDiagnostics.TrackTasks);
        Assert.Empty(Tracked(nameof(WaitFor)));
    }

    [Theory]
    [InlineData("<Load>d__4", "Load")]
    [InlineData("<<Outer>g__Local|3_0>d", "Outer.Local")]
    [InlineData("<<Outer>g__Local|3_0>d`1", "Outer.Local")]
    [InlineData("<<Outer>b__3_0>d", "<Outer>b__3_0")]
    [InlineData("HandWritten", "HandWritten")]
    public void MethodName_OfEachKindOfStateMachineName(string stateMachineName, string method)
    {
        Assert.Equal(method, TaskTracker.MethodNameOf(stateMachineName));
    }
    private static async SpindleTask WaitForTheNextFrame(FrameLoop loop) => await loop.NextFrame();

    private static async SpindleTask WaitForOnLoop(Promise promise) => await promise.Task;

    [Fact]
    public void On_AMethodThatFirstSuspendsInsideALoopsFrame_NamesThatLoop_AndOneOutsideAnyNamesNone()
    {
        SpindleDiagnostics.TrackTasks = true;
        var matchA = new FrameLoop("match-a");
        var matchB = new FrameLoop("match-b");
        var outside = new Promise();
        var inB = new Promise();
        var afterB = new Promise();
        SpindleTask outsideTask = WaitForOnLoop(outside);
        SpindleTask inFrameOfA = default, inFrameOfB = default, inAAfterB = default;
        matchA.SynchronizationContext.Post(_ =>
        {
            inFrameOfA = WaitForTheNextFrame(matchA);
            // A frame of another loop run from inside this one's: inside it, the method is B's; after it, A's again.
            matchB.SynchronizationContext.Post(_ => inFrameOfB = WaitForOnLoop(inB), null);
            matchB.RunFrame(TimeSpan.FromMilliseconds(16));
            inAAfterB = WaitForOnLoop(afterB);
        }, null);
        matchA.RunFrame(TimeSpan.FromMilliseconds(16));

        Assert.Null(Assert.Single(Tracked(nameof(WaitForOnLoop)), t => t.Loop is null).Loop);
        TrackedTask a = Assert.Single(Tracked(nameof(WaitForTheNextFrame)));
        Assert.Same(matchA, a.Loop);
        Assert.Contains("loop 'match-a'", a.ToString());
        Assert.Single(Tracked(nameof(WaitForOnLoop)), t => t.Loop == matchB);
        Assert.Single(Tracked(nameof(WaitForOnLoop)), t => t.Loop == matchA);
        Assert.Equal(3, Tracked(nameof(WaitForOnLoop)).Length);
        Assert.DoesNotContain("loop", Assert.Single(Tracked(nameof(WaitForOnLoop)), t => t.Loop is null).ToString());

        outside.SetResult();
        inB.SetResult();
        afterB.SetResult();
        matchA.RunFrame(TimeSpan.FromMilliseconds(16));
        outsideTask.GetAwaiter().GetResult();
        inFrameOfA.GetAwaiter().GetResult();
        inFrameOfB.GetAwaiter().GetResult();
        inAAfterB.GetAwaiter().GetResult();
        Assert.Empty(Tracked(nameof(WaitForOnLoop)));
    }

    [Fact]
    public void Snapshot_FormatsNoStack_UntilATasksStackTraceIsRead()
    {
        // A user looking for the one stuck session among 100,000 takes a snapshot of them all: formatting every captured
        // stack (file and line of each frame) in the snapshot took 43.8 s for 100,000 sessions (user15's review). The
        // snapshot now keeps the captured stacks and a task's text is made when its StackTrace is read.
        const int Count = 200;
        SpindleDiagnostics.TrackTasks = true;
        SpindleDiagnostics.CaptureStackTraces = true;
        var promises = new Promise[Count];
        var tasks = new SpindleTask[Count];
        for (int i = 0; i < Count; i++)
        {
            promises[i] = new Promise();
            tasks[i] = WaitFor(promises[i]);
        }
        _ = SpindleDiagnostics.GetTrackedTasks(); // warm-up: the snapshot's own code, and the first stacks' symbols

        long before = GC.GetAllocatedBytesForCurrentThread();
        TrackedTask[] tracked = Tracked(nameof(WaitFor));
        long perTask = (GC.GetAllocatedBytesForCurrentThread() - before) / Count;

        Assert.Equal(Count, tracked.Length);
        Assert.True(perTask < 400, $"the snapshot allocated {perTask} B per tracked task: it formatted their stacks");
        string first = tracked[0].StackTrace!;
        Assert.Contains("TaskTrackerTests." + nameof(WaitFor) + "(", first.Split('\n')[0]);
        Assert.Same(first, tracked[0].StackTrace); // formatted once

        for (int i = 0; i < Count; i++)
        {
            promises[i].SetResult();
            tasks[i].GetAwaiter().GetResult();
        }
    }
}

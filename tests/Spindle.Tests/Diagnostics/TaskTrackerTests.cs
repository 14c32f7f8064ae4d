using System;
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
}

using System;
using System.Collections.Generic;
using System.Reflection;
using System.Runtime.Versioning;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.NetStandard.Tests;

/// <summary>
/// Every public API of the netstandard2.1 build, exercised on this runtime. The main suite (tests/Spindle.Tests) covers
/// the net10.0 build in depth; this one proves the portable paths work too.
/// </summary>
public sealed class NetStandardBuildTests
{
    private static readonly AsyncLocal<string?> s_local = new();

    [Fact]
    public void Assembly_IsTheNetStandardBuild()
    {
        var target = typeof(SpindleTask).Assembly.GetCustomAttribute<TargetFrameworkAttribute>();
        Assert.Equal(".NETStandard,Version=v2.1", target?.FrameworkName);
    }

    private static async SpindleTask<int> AddOne(SpindleTask<int> task) => await task + 1;

    private static async SpindleTask Nothing() => await SpindleTask.CompletedTask;

    [Fact]
    public async Task Promise_AwaitedFromAsyncMethod_CompletesAndResets()
    {
        var promise = new Promise<int>();
        for (int i = 0; i < 100; i++)
        {
            SpindleTask<int> pending = AddOne(promise.Task);
            Assert.False(pending.IsCompleted);
            promise.SetResult(i);
            Assert.Equal(i + 1, await pending);
            promise.Reset();
        }
        await Nothing();
    }

    [Fact]
    public void AwaitTwice_ThrowsNamingPreserve()
    {
        var promise = new Promise<int>();
        SpindleTask<int> task = AddOne(promise.Task);
        promise.SetResult(1);
        Assert.Equal(2, task.GetAwaiter().GetResult());
        var e = Assert.Throws<InvalidOperationException>(() => task.GetAwaiter().GetResult());
        Assert.Contains("Preserve()", e.Message, StringComparison.Ordinal);
    }

    [Fact]
    public async Task Run_Yield_SwitchToWorker_RunOnWorkers()
    {
        string? name = await Spindle.Run(() => Thread.CurrentThread.Name);
        Assert.StartsWith("Spindle worker", name, StringComparison.Ordinal);
        int sum = 0;
        for (int i = 0; i < 1000; i++)
        {
            await Spindle.Run(() => { sum++; });
        }
        Assert.Equal(1000, sum);
        Assert.Equal(7, await Spindle.Run(async () => { await Spindle.Yield(); return 7; }));
        await Spindle.Run(async () =>
        {
            await Spindle.SwitchToWorker();
            Assert.StartsWith("Spindle worker", Thread.CurrentThread.Name, StringComparison.Ordinal);
        });
    }

    [Fact]
    public async Task ExecutionContext_Flows_AndDoesNotLeak()
    {
        s_local.Value = "caller";
        string? seen = await Spindle.Run(() => s_local.Value);
        Assert.Equal("caller", seen);
        var promise = new Promise();
        SpindleTask t = SetsLocal(promise.Task);
        promise.SetResult();
        await t;
        Assert.Equal("caller", s_local.Value);
        s_local.Value = null;
    }

    private static async SpindleTask SetsLocal(SpindleTask wait)
    {
        await wait;
        s_local.Value = "inner";
    }

    [Fact]
    public async Task Signal_SetWaitCancel()
    {
        var signal = new Signal();
        signal.Set();
        await signal.WaitAsync();
        using var cts = new CancellationTokenSource();
        SpindleTask wait = signal.WaitAsync(cts.Token);
        cts.Cancel();
        Assert.Equal(SpindleTaskStatus.Canceled, wait.Status);
        await Assert.ThrowsAnyAsync<OperationCanceledException>(async () => await wait);
        SpindleTask next = signal.WaitAsync();
        signal.Set();
        await next;
    }

    [Fact]
    public async Task Factories_Preserve_Forget_Bridges()
    {
        Assert.Equal(5, await SpindleTask.FromResult(5));
        await Assert.ThrowsAsync<FormatException>(async () => await SpindleTask.FromException(new FormatException()));
        await Assert.ThrowsAnyAsync<OperationCanceledException>(async () => await SpindleTask.FromCanceled<int>());

        var promise = new Promise<int>();
        SpindleTask<int> preserved = AddOne(promise.Task).Preserve();
        promise.SetResult(1);
        Assert.Equal(2, await preserved);
        Assert.Equal(2, await preserved);

        var p2 = new Promise<int>();
        var p2b = new Promise<int>();
        Task<int> asTask = AddOne(p2.Task).AsTask();
        ValueTask<int> asValueTask = AddOne(p2b.Task).AsValueTask();
        p2.SetResult(10);
        p2b.SetResult(10);
        Assert.Equal(11, await asTask);
        Assert.Equal(11, await asValueTask);

        var reported = new List<Exception>();
        Action<Exception> handler = e => { lock (reported) { reported.Add(e); } };
        Spindle.UnobservedException += handler;
        try
        {
            var p3 = new Promise<int>();
            AddOne(p3.Task).Forget();
            p3.SetException(new TimeoutException());
            Assert.Single(reported);
            Assert.IsType<TimeoutException>(reported[0]);
        }
        finally
        {
            Spindle.UnobservedException -= handler;
        }
    }

    [Fact]
    public async Task AwaitingTaskAndValueTask_InsideSpindleMethod_Works()
    {
        Assert.Equal(3, await Mixed());
    }

    private static async SpindleTask<int> Mixed()
    {
        await Task.Yield();
        int a = await Task.Run(() => 1);
        int b = await new ValueTask<int>(2);
        return a + b;
    }

    [Fact]
    public void Pool_CapAndTrim()
    {
        int cap = SpindlePool.MaxRetainedPerType;
        try
        {
            Assert.Throws<ArgumentOutOfRangeException>(() => SpindlePool.MaxRetainedPerType = -1);
            SpindlePool.Trim();
            Assert.True(SpindlePool.RetainedCount >= 0);
        }
        finally
        {
            SpindlePool.MaxRetainedPerType = cap;
        }
    }

    [Fact]
    public async Task Combinators_NewInputsOptionsAndTupleForms()
    {
        var promise = new Promise<int>();
        SpindleTask<(int, string)> tuple = SpindleTask.WhenAll(AddOne(promise.Task), SpindleTask.FromResult("b"));
        promise.SetResult(1);
        Assert.Equal((2, "b"), await tuple);

        var source = new TaskCompletionSource<int>();
        var buffer = new int[3];
        SpindleTask into = SpindleTask.WhenAll([new ValueTask<int>(1), new ValueTask<int>(source.Task), new ValueTask<int>(3)], buffer);
        source.SetResult(2);
        await into;
        Assert.Equal(new[] { 1, 2, 3 }, buffer);

        var a = new FormatException("a");
        var b = new TimeoutException("b");
        SpindleTask failing = SpindleTask.WhenAll([Task.FromException(a), Task.FromException(b)], new WhenAllOptions { AggregateExceptions = true });
        AggregateException all = await Assert.ThrowsAsync<AggregateException>(async () => await failing);
        Assert.Equal(new Exception[] { a, b }, all.InnerExceptions);

        using var cts = new CancellationTokenSource();
        SpindleTask<int> waiting = SpindleTask.WhenAny([new TaskCompletionSource().Task], cts.Token);
        cts.Cancel();
        await Assert.ThrowsAnyAsync<OperationCanceledException>(async () => await waiting);
    }

    [Fact]
    public void WhenAny_OverProducers_CancelsTheLosers()
    {
        var winner = new Promise<string>();
        var loser = new Signal();
        CancellationToken loserToken = default;
        for (int round = 0; round < 3; round++)
        {
            SpindleTask<(int Index, string Result)> any = SpindleTask.WhenAny<string>(
            [
                ct => { loserToken = ct; return Wait(loser, ct); },
                ct => AwaitString(winner.Task),
            ]);
            winner.SetResult("won");
            Assert.Equal((1, "won"), any.GetAwaiter().GetResult());
            Assert.True(loserToken.IsCancellationRequested);
            Assert.False(loser.HasWaiter);
            winner.Reset();
        }
    }

    [Fact]
    public void Timeouts_WithTimeoutPeriodicTimerAndWhenAllTimeout_OnAManualClock()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);

        var input = new Promise<int>();
        SpindleTask<int> won = input.Task.WithTimeout(TimeSpan.FromMilliseconds(10), wheel);
        input.SetResult(5);
        Assert.Equal(5, won.GetAwaiter().GetResult());
        Assert.Equal(0, wheel.PendingCount);
        SpindleTask lost = new Promise().Task.WithTimeout(TimeSpan.FromMilliseconds(10), wheel);
        clock.Advance(TimeSpan.FromMilliseconds(10));
        Assert.Throws<TimeoutException>(() => lost.GetAwaiter().GetResult());

        var timer = new SpindlePeriodicTimer(TimeSpan.FromMilliseconds(5), wheel);
        SpindleTask<bool> tick = timer.WaitForNextTickAsync();
        clock.Advance(TimeSpan.FromMilliseconds(5));
        Assert.True(tick.GetAwaiter().GetResult());
        using (var cts = new CancellationTokenSource())
        {
            SpindleTask<bool> canceled = timer.WaitForNextTickAsync(cts.Token); // CancellationToken.Register on this build
            cts.Cancel();
            Assert.ThrowsAny<OperationCanceledException>(() => canceled.GetAwaiter().GetResult());
        }
        SpindleTask<bool> pending = timer.WaitForNextTickAsync();
        timer.Dispose();
        Assert.False(pending.GetAwaiter().GetResult());
        SpindleTask<bool> afterDispose = timer.WaitForNextTickAsync(); // false at once, as PeriodicTimer's
        Assert.True(afterDispose.IsCompleted);
        Assert.False(afterDispose.GetAwaiter().GetResult());

        SpindleTask all = SpindleTask.WhenAll([new Promise().Task], new WhenAllOptions { Timeout = TimeSpan.FromMilliseconds(3), Timers = wheel });
        clock.Advance(TimeSpan.FromMilliseconds(3));
        Assert.Throws<TimeoutException>(() => all.GetAwaiter().GetResult());
        Assert.Equal(0, wheel.PendingCount);
    }

    [Fact]
    public async Task FrameLoop_AwaitsResumeInTheirFrames_HandOffsAndCancellationWork()
    {
        var loop = new FrameLoop { FixedDeltaTime = TimeSpan.FromMilliseconds(10) };
        loop.RunFrame(); // frame 1: the test's thread is the loop thread
        var seen = new List<string>();
        async SpindleTask Behave()
        {
            await loop.NextFrame();
            seen.Add("next " + loop.FrameCount);
            await loop.Yield(loop.LateUpdate);
            seen.Add("late " + loop.FrameCount + " " + loop.CurrentPhase!.Name);
            await loop.DelayFrame(3);
            seen.Add("frames " + loop.FrameCount);
            await loop.Delay(TimeSpan.FromMilliseconds(25));
            seen.Add("delay " + loop.FrameCount);
            await loop.WaitUntil(loop, static l => l.FrameCount >= 10);
            seen.Add("until " + loop.FrameCount);
        }

        SpindleTask behaviour = Behave();
        for (int i = 0; i < 10; i++)
        {
            loop.RunFrame();
        }
        Assert.True(behaviour.IsCompleted);
        Assert.Equal(new[] { "next 2", "late 2 LateUpdate", "frames 5", "delay 8", "until 10" }, seen);

        // A hand-off from another thread, and a cancelled wait (CancellationToken.Register on this build).
        Task handOff = Task.Run(async () =>
        {
            await loop.SwitchTo();
            Assert.True(loop.IsLoopThread);
        });
        using var cts = new CancellationTokenSource();
        SpindleTask cancelled = loop.DelayFrame(100, cts.Token);
        cts.Cancel();
        Assert.Equal(SpindleTaskStatus.Canceled, cancelled.Status);
        while (!handOff.IsCompleted)
        {
            loop.RunFrame();
            await Task.Yield();
        }
        await handOff;
    }

    [Fact]
    public async Task Promise_RunContinuationsAsynchronously_ResumesTheAwaiterAfterTheCompleterReturns()
    {
        var promise = new Promise<int>(runContinuationsAsynchronously: true);
        var returned = new ManualResetEventSlim();
        bool completerHadReturned = false;

        async SpindleTask<int> Waiter()
        {
            int value = await promise.Task;
            completerHadReturned = returned.Wait(TimeSpan.FromSeconds(10));
            return value;
        }

        SpindleTask<int> waiting = Waiter();
        promise.SetResult(9);
        returned.Set();

        Assert.Equal(9, await waiting);
        Assert.True(completerHadReturned);
        Assert.True(promise.RunsContinuationsAsynchronously);
    }

    [Fact]
    public async Task Workers_CountIsFixedOnceStarted()
    {
        await Spindle.Run(() => { });
        int count = Spindle.WorkerCount;
        Assert.True(count >= 1);
        Spindle.ConfigureWorkers(count);
        Assert.Throws<InvalidOperationException>(() => Spindle.ConfigureWorkers(count + 1));
        Assert.Throws<ArgumentOutOfRangeException>(() => Spindle.ConfigureWorkers(0));
    }

    [Fact]
    public void TaskTracker_ListsASuspendedMethodWithWhereItStarted()
    {
        SpindleDiagnostics.TrackTasks = true;
        SpindleDiagnostics.CaptureStackTraces = true;
        try
        {
            var promise = new Promise<int>();
            SpindleTask<int> pending = AddOne(promise.Task);
            TrackedTask tracked = Assert.Single(SpindleDiagnostics.GetTrackedTasks(), t => t.Method.EndsWith("." + nameof(AddOne), StringComparison.Ordinal));
            Assert.Equal(SpindleTaskStatus.Pending, tracked.Status);
            Assert.Contains(nameof(TaskTracker_ListsASuspendedMethodWithWhereItStarted), tracked.StackTrace);
            promise.SetResult(1);
            Assert.Equal(2, pending.GetAwaiter().GetResult());
            Assert.DoesNotContain(SpindleDiagnostics.GetTrackedTasks(), t => t.Method.EndsWith("." + nameof(AddOne), StringComparison.Ordinal));
        }
        finally
        {
            SpindleDiagnostics.CaptureStackTraces = false;
            SpindleDiagnostics.TrackTasks = false;
        }
    }

    private static async SpindleTask<string> Wait(Signal signal, CancellationToken token)
    {
        await signal.WaitAsync(token);
        return "never";
    }

    private static async SpindleTask<string> AwaitString(SpindleTask<string> task) => await task;
}

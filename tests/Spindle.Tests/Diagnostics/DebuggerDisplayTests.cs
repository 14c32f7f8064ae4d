using System;
using System.Diagnostics;
using System.Reflection;
using System.Text.RegularExpressions;
using System.Threading;

namespace SpindleLib.Tests.Diagnostics;

/// <summary>
/// What a debugger shows for Spindle's types when a user stops at a breakpoint: a task's status and the async method
/// behind it, a promise's use, a signal's state, a job's, a loop's frame and phase, a scope's children and faults. Before
/// user15's review a debugger showed <c>{SpindleLib.SpindleTask}</c> and its raw fields, and reading <c>Status</c> of a
/// stale task threw. The text is evaluated here as a debugger does: the attribute's members read by reflection.
/// </summary>
public sealed class DebuggerDisplayTests
{
    /// <summary>The attribute's text with each <c>{Member}</c> or <c>{Member,nq}</c> replaced by that member's value.</summary>
    internal static string Shown(object value)
    {
        Type type = value.GetType();
        DebuggerDisplayAttribute? attribute = type.GetCustomAttribute<DebuggerDisplayAttribute>();
        Assert.True(attribute is not null, $"{type.Name} has no [DebuggerDisplay]: a debugger shows its raw fields");
        return Regex.Replace(attribute!.Value, @"\{([A-Za-z_][A-Za-z0-9_]*)(,nq)?\}", m =>
        {
            const BindingFlags Any = BindingFlags.Instance | BindingFlags.Public | BindingFlags.NonPublic;
            string name = m.Groups[1].Value;
            object? member = type.GetProperty(name, Any) is { } p ? p.GetValue(value) : type.GetField(name, Any)!.GetValue(value);
            return member?.ToString() ?? "null";
        });
    }

    private static async SpindleTask<int> WaitForAnswer(Promise promise)
    {
        await promise.Task;
        return 42;
    }

    [Fact]
    public void AnAsyncMethodsTask_ShowsItsStatusAndMethod_AndAStaleOneSaysSoWithoutThrowing()
    {
        var promise = new Promise();
        SpindleTask<int> task = WaitForAnswer(promise);
        Assert.Equal("Pending, Method = SpindleLib.Tests.Diagnostics.DebuggerDisplayTests.WaitForAnswer", Shown(task));

        promise.SetResult();
        Assert.Equal("Succeeded, Method = SpindleLib.Tests.Diagnostics.DebuggerDisplayTests.WaitForAnswer", Shown(task));
        Assert.Equal(42, task.GetAwaiter().GetResult()); // showing it read nothing: the one await still has its result

        Assert.Throws<InvalidOperationException>(() => task.Status);
        Assert.Equal(DebuggerText.Stale, Shown(task));
        Assert.Equal(DebuggerText.Stale, Shown(task.AsSpindleTask()));
    }

    [Fact]
    public void OtherTasks_ShowTheirStatusAndSource()
    {
        var promise = new Promise<int>();
        SpindleTask<int> task = promise.Task;
        Assert.Equal("Pending, Source = Promise`1", Shown(task));
        promise.SetException(new InvalidOperationException("planted"));
        Assert.Equal("Faulted, Source = Promise`1", Shown(task));
        Assert.Equal("Faulted, Token = " + promise.Token, Shown(promise));
        promise.Reset();
        Assert.Equal("Pending, Token = " + promise.Token, Shown(promise));
        Assert.Equal(DebuggerText.Stale, Shown(task));

        Assert.Equal("Succeeded, Result = 7", Shown(SpindleTask.FromResult(7)));
        Assert.Equal("Succeeded", Shown(SpindleTask.CompletedTask));
        Assert.StartsWith("Canceled, Source = ", Shown(SpindleTask.FromCanceled(new CancellationToken(true))), StringComparison.Ordinal);
    }

    private struct Nothing : IJob
    {
        public readonly void Execute()
        {
        }
    }

    [Fact]
    public void SignalsJobsLoopsScopesAndPeriodicTimers_ShowTheirState()
    {
        var signal = new Signal(false);
        Assert.Equal("IsSet = False, HasWaiter = False", Shown(signal));
        signal.Set();
        Assert.Equal("IsSet = True, HasWaiter = False", Shown(signal));

        Assert.Equal("Completed (default handle)", Shown(default(JobHandle)));
        JobHandle handle = new Nothing().Schedule(default);
        Assert.Matches("^(Pending|Completed)$", Shown(handle));
        handle.Complete();
        Assert.Equal("Completed", Shown(handle));

        var loop = new FrameLoop("arena-7");
        loop.RunFrame(TimeSpan.FromMilliseconds(16));
        Assert.Equal("'arena-7', Frame = 1, Phase = none, Time = 00:00:00.0160000", Shown(loop));
        Assert.Equal("Frame = 0, Phase = none, Time = 00:00:00", Shown(new FrameLoop()));

        var scope = new TaskScope(default);
        var hold = new Promise();
        scope.Run(async _ => await hold.Task);
        scope.Run(async _ =>
        {
            await SpindleTask.CompletedTask;
            throw new InvalidOperationException("planted");
        });
        Assert.Equal("RunningChildren = 1, Canceled = True, Faults = 1", Shown(scope));
        hold.SetResult();
        Assert.Throws<InvalidOperationException>(() => scope.DisposeAsync().AsTask().GetAwaiter().GetResult());

        using var timer = new SpindlePeriodicTimer(TimeSpan.FromSeconds(2), TimerWheel.Default);
        Assert.Equal("Period = 00:00:02", Shown(timer));
    }
}

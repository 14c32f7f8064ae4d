using System;
using System.Threading;

namespace SpindleLib.Tests.Diagnostics;

/// <summary>
/// What showing a task in a debugger must not do (review48 of user15's [DebuggerDisplay]): change the state of the thread
/// it is evaluated on, or wait for a lock. A debugger evaluates the display on the thread stopped at the breakpoint, with
/// every other thread frozen. Reading a stale task's status threw the await-once error there, and that throw marks the
/// thread's last refusal (<see cref="ThrowHelper.IsRefusedRegistration"/>): a user stopped at the first-chance throw of an
/// await-once error, looking at the stale task in the Locals window, replaced the mark of the refusal being thrown, and
/// once resumed the builder took Spindle's own refusal for a foreign awaiter's failure (the method stayed suspended, the
/// error went to UnobservedException, instead of faulting the method). A preserved task's source and a scope's wait lock
/// to read their status: a frozen thread holding that lock made the evaluation wait until the debugger gave up.
/// </summary>
public sealed class DebuggerDisplayReviewTests
{
    private static async SpindleTask<int> WaitFor(Promise promise)
    {
        await promise.Task;
        return 1;
    }

    [Fact]
    public void ShowingAStaleTask_LeavesTheThreadsLastRefusalAlone()
    {
        var promise = new Promise();
        SpindleTask<int> task = WaitFor(promise);
        promise.SetResult();
        Assert.Equal(1, task.GetAwaiter().GetResult()); // the async method's task is stale now (its box is back in its pool)

        InvalidOperationException refusal = Assert.Throws<InvalidOperationException>(() => task.Status);
        Assert.Equal(DebuggerText.Stale, DebuggerDisplayTests.Shown(task)); // the debugger shows the stale task meanwhile
        Assert.True(ThrowHelper.IsRefusedRegistration(refusal), "showing the stale async method's task replaced the thread's mark of the refusal being thrown");

        var reset = new Promise<int>();
        SpindleTask<int> old = reset.Task;
        reset.Reset();
        refusal = Assert.Throws<InvalidOperationException>(() => old.Status);
        Assert.Equal(DebuggerText.Stale, DebuggerDisplayTests.Shown(old));
        Assert.True(ThrowHelper.IsRefusedRegistration(refusal), "showing the reset promise's stale task replaced the thread's mark of the refusal being thrown");
    }

    /// <summary>Shows <paramref name="value"/> on a thread of its own while another thread holds <paramref name="held"/>'s lock.</summary>
    private static string ShownWhileLocked(object held, object value)
    {
        using var taken = new ManualResetEventSlim();
        using var release = new ManualResetEventSlim();
        var holder = new Thread(() =>
        {
            lock (held)
            {
                taken.Set();
                release.Wait();
            }
        });
        holder.Start();
        taken.Wait();
        try
        {
            string? shown = null;
            var viewer = new Thread(() => shown = DebuggerDisplayTests.Shown(value));
            viewer.Start();
            Assert.True(
                viewer.Join(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)),
                "the display waited for a lock another thread held: a debugger that froze that thread would time out");
            return shown!;
        }
        finally
        {
            release.Set();
            holder.Join();
        }
    }

    [Fact]
    public void ShowingAPreservedTask_WaitsForNoLock()
    {
        var promise = new Promise<int>();
        SpindleTask<int> preserved = promise.Task.Preserve();
        Assert.Equal("Pending, Source = PreservedSource`1", ShownWhileLocked(preserved._source!, preserved));
        promise.SetException(new InvalidOperationException("planted"));
        Assert.Equal("Faulted, Source = PreservedSource`1", ShownWhileLocked(preserved._source!, preserved));
        Assert.Throws<InvalidOperationException>(() => preserved.GetAwaiter().GetResult());
    }

    [Fact]
    public void ShowingAScopesWait_WaitsForNoLock()
    {
        var scope = new TaskScope(default);
        scope.Run(async _ =>
        {
            await SpindleTask.CompletedTask;
            throw new InvalidOperationException("planted");
        });
        SpindleTask wait = scope.WaitAsync();
        Assert.Equal("Faulted, Source = ScopeOutcome", ShownWhileLocked(wait._source!, wait));
        Assert.Throws<InvalidOperationException>(() => wait.GetAwaiter().GetResult());
    }
}

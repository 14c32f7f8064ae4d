using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// A SynchronizationContext that an async method installs and leaves behind when it completes is not shown to the code
/// that awaits it, which its completion may run inline on the same thread: the completion puts back the one the thread
/// had when the method resumed (none, or the completing thread's own), as a <c>Spindle.Run</c> delegate's leftover is
/// taken down before its completion. Deterministic: the whole chain runs inline on one thread, resumed by one
/// <see cref="Promise.SetResult"/>. (Found by Sources/ContextLeakStressTests.)
/// </summary>
public sealed class ContextLeftBehindTests
{
    private sealed class LeftBehindContext : SynchronizationContext
    {
    }

    private sealed class HostContext : SynchronizationContext
    {
    }

    private sealed class Seen
    {
        public bool Resumed;
        public SynchronizationContext? Sync;
        public Thread? Thread;
    }

    private static async SpindleTask InstallsAndCompletes(Promise gate, bool fault)
    {
        await gate.Task;
        SynchronizationContext.SetSynchronizationContext(new LeftBehindContext());
        if (fault)
        {
            throw new InvalidOperationException("after installing a context");
        }
    }

    private static async SpindleTask<int> InstallsAndReturns(Promise gate)
    {
        await gate.Task;
        SynchronizationContext.SetSynchronizationContext(new LeftBehindContext());
        return 42;
    }

    private static async SpindleTask Awaits(SpindleTask inner, Seen seen)
    {
        try
        {
            await inner;
        }
        catch (InvalidOperationException)
        {
        }
        seen.Sync = SynchronizationContext.Current;
        seen.Thread = Thread.CurrentThread;
        seen.Resumed = true;
    }

    private static async SpindleTask Awaits(SpindleTask<int> inner, Seen seen)
    {
        Assert.Equal(42, await inner);
        seen.Sync = SynchronizationContext.Current;
        seen.Thread = Thread.CurrentThread;
        seen.Resumed = true;
    }

    [Theory]
    [InlineData("completes", false)]
    [InlineData("completes", true)]
    [InlineData("faults", false)]
    [InlineData("faults", true)]
    [InlineData("returns a value", false)]
    [InlineData("returns a value", true)]
    public async Task AsyncMethodThatCompletesWithAContextInstalled_TheAwaitingCodeResumedInlineDoesNotFindIt(string how, bool completerHasOne)
    {
        var seen = new Seen();
        SynchronizationContext? completerOwn = completerHasOne ? new HostContext() : null;
        SynchronizationContext? completerAfter = null;
        Thread? completer = null;
        await TestUtil.WithTimeout(TestUtil.RunOnThread(() =>
        {
            completer = Thread.CurrentThread;
            SynchronizationContext.SetSynchronizationContext(completerOwn);
            var gate = new Promise();
            SpindleTask awaiting = how == "returns a value"
                ? Awaits(InstallsAndReturns(gate), seen)
                : Awaits(InstallsAndCompletes(gate, fault: how == "faults"), seen);
            Assert.False(seen.Resumed);
            gate.SetResult(); // resumes the inner method here, whose completion resumes the awaiting one here
            completerAfter = SynchronizationContext.Current;
            SynchronizationContext.SetSynchronizationContext(null);
            Assert.True(awaiting.IsCompleted);
            awaiting.GetAwaiter().GetResult();
        }));
        Assert.True(seen.Resumed);
        Assert.Same(completer, seen.Thread); // inline, as the test means
        Assert.True(seen.Sync == completerOwn,
            $"the awaiting code ran under {seen.Sync?.GetType().Name ?? "none"}, expected the completing thread's own ({completerOwn?.GetType().Name ?? "none"})");
        Assert.True(completerAfter == completerOwn,
            $"the completing thread had {completerAfter?.GetType().Name ?? "none"} afterwards, expected its own ({completerOwn?.GetType().Name ?? "none"})");
    }

    private sealed class OuterOwnContext : SynchronizationContext
    {
    }

    /// <summary>
    /// Resumed under the completing thread's context, takes it down, completes <paramref name="inner"/> (which resumes
    /// the inner chain inline under none), then installs a context of its own and completes.
    /// </summary>
    private static async SpindleTask OuterResumesInnerUnderNone(Promise gate, Promise inner)
    {
        await gate.Task;
        SynchronizationContext.SetSynchronizationContext(null);
        inner.SetResult();
        SynchronizationContext.SetSynchronizationContext(new OuterOwnContext());
    }

    /// <summary>
    /// Nested inline resumptions each put back the context their own method resumed under: the completing thread's for
    /// the outer method, none for the inner one, which resumed inside the outer's code after it took the context down.
    /// (The resumed-under context is kept per thread while a method runs, and the outer value put back after it.)
    /// </summary>
    [Fact]
    public async Task NestedInlineResumptions_EachCompletionPutsBackTheContextItsOwnMethodResumedUnder()
    {
        var innerSeen = new Seen();
        var outerSeen = new Seen();
        var host = new HostContext();
        SynchronizationContext? completerAfter = null;
        await TestUtil.WithTimeout(TestUtil.RunOnThread(() =>
        {
            SynchronizationContext.SetSynchronizationContext(host);
            var gate = new Promise();
            var innerGate = new Promise();
            SpindleTask innerAwaiting = Awaits(InstallsAndCompletes(innerGate, fault: false), innerSeen);
            SpindleTask outerAwaiting = Awaits(OuterResumesInnerUnderNone(gate, innerGate), outerSeen);
            gate.SetResult(); // the whole chain runs here, inline
            completerAfter = SynchronizationContext.Current;
            SynchronizationContext.SetSynchronizationContext(null);
            innerAwaiting.GetAwaiter().GetResult();
            outerAwaiting.GetAwaiter().GetResult();
        }));
        Assert.True(innerSeen.Resumed && outerSeen.Resumed);
        Assert.True(innerSeen.Sync is null, $"the inner method's awaiter ran under {innerSeen.Sync?.GetType().Name}, expected none");
        Assert.True(outerSeen.Sync == host, $"the outer method's awaiter ran under {outerSeen.Sync?.GetType().Name ?? "none"}, expected the host's");
        Assert.True(completerAfter == host, $"the completing thread had {completerAfter?.GetType().Name ?? "none"} afterwards");
    }

    /// <summary>
    /// A worker that blocks helps: the items it runs meanwhile (here the one it just queued, in its run-next slot) run
    /// with no SynchronizationContext, as on its loop, not under the one the blocked code installed.
    /// </summary>
    [Fact]
    public async Task WorkerBlockedUnderAContext_TheItemsItRunsWhileHelpingDoNotFindIt()
    {
        (SynchronizationContext? seen, SynchronizationContext? after, bool onWorker) = await TestUtil.WithTimeout(Spindle.Run(() =>
        {
            var mine = new LeftBehindContext();
            SynchronizationContext.SetSynchronizationContext(mine);
            SynchronizationContext? inner = mine;
            var done = new Promise();
            _ = Spindle.Run(() =>
            {
                inner = SynchronizationContext.Current;
                done.SetResult();
            });
            done.Task.GetAwaiter().GetResult(); // helps: runs the item above, most often itself
            SynchronizationContext? kept = SynchronizationContext.Current;
            SynchronizationContext.SetSynchronizationContext(null);
            return (inner, kept == mine ? null : kept, TestUtil.OnSpindleWorker);
        }));
        Assert.True(onWorker);
        Assert.True(seen is null, $"an item run by a helping worker saw {seen?.GetType().Name}");
        Assert.True(after is null, "the blocked code did not get its own SynchronizationContext back");
    }
}

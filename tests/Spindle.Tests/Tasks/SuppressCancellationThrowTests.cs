using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// <c>SuppressCancellationThrow()</c> on <see cref="SpindleTask"/>, <see cref="SpindleTask{T}"/> and
/// <see cref="FrameAwaitable"/>: a cancellation comes back as a value, anything else is a normal await (a fault that is
/// not a cancellation and misuse still throw, the task is consumed, the resumption thread and the ExecutionContext are
/// those of a plain await), and a cancelled await reads no exception and allocates nothing.
/// </summary>
public sealed class SuppressCancellationThrowTests
{
    private static async SpindleTask<bool> Suppressed(SpindleTask task) => await task.SuppressCancellationThrow();

    private static async SpindleTask<(bool, T)> Suppressed<T>(SpindleTask<T> task) => await task.SuppressCancellationThrow();

    [Fact]
    public async Task Delay_NotCancelled_IsFalse_CancelledBeforeOrDuringTheAwait_IsTrue()
    {
        Assert.False(await TestUtil.WithTimeout(Suppressed(Spindle.Delay(1))));

        using var before = new CancellationTokenSource();
        before.Cancel();
        Assert.True(await TestUtil.WithTimeout(Suppressed(Spindle.Delay(60_000, before.Token))));

        using var during = new CancellationTokenSource();
        SpindleTask<bool> pending = Suppressed(Spindle.Delay(60_000, during.Token));
        Assert.False(pending.IsCompleted);
        during.Cancel();
        Assert.True(await TestUtil.WithTimeout(pending));

        // Cancelled before the await begins, but after the delay started: the await finds it complete.
        using var between = new CancellationTokenSource();
        SpindleTask delay = Spindle.Delay(60_000, between.Token);
        between.Cancel();
        Assert.True(await TestUtil.WithTimeout(Suppressed(delay)));
    }

    [Fact]
    public async Task Promise_CancelledSucceededFaulted()
    {
        var p = new Promise();
        SpindleTask<bool> waiting = Suppressed(p.Task);
        p.SetCanceled();
        Assert.True(await TestUtil.WithTimeout(waiting));

        var ok = new Promise();
        ok.SetResult();
        Assert.False(await Suppressed(ok.Task));

        var faulted = new Promise();
        var boom = new InvalidOperationException("boom");
        faulted.SetException(boom);
        Assert.Same(boom, await Assert.ThrowsAsync<InvalidOperationException>(() => Suppressed(faulted.Task).AsTask()));
    }

    [Fact]
    public async Task ResultPassesThrough_AndACancellationGivesDefault()
    {
        var p = new Promise<int>();
        SpindleTask<(bool, int)> waiting = Suppressed(p.Task);
        p.SetResult(42);
        Assert.Equal((false, 42), await TestUtil.WithTimeout(waiting));

        var c = new Promise<string>();
        using var cts = new CancellationTokenSource();
        cts.Cancel();
        c.SetCanceled(cts.Token);
        Assert.Equal((true, (string?)null), await Suppressed(c.Task)!);

        // The named tuple elements, as UniTask's users write them.
        var named = new Promise<int>();
        named.SetResult(7);
        var (isCanceled, result) = await named.Task.SuppressCancellationThrow();
        Assert.False(isCanceled);
        Assert.Equal(7, result);

        Assert.Equal((false, 5), await Suppressed(SpindleTask.FromResult(5)));
        Assert.Equal((true, 0), await Suppressed(SpindleTask.FromCanceled<int>()));
        var fault = new TimeoutException();
        Assert.Same(fault, await Assert.ThrowsAsync<TimeoutException>(() => Suppressed(SpindleTask.FromException<int>(fault)).AsTask()));
    }

    [Fact]
    public async Task SignalWaits_CancelledAndTimedOut()
    {
        var signal = new Signal();
        using var cts = new CancellationTokenSource();
        SpindleTask<bool> waiting = Suppressed(signal.WaitAsync(cts.Token));
        cts.Cancel();
        Assert.True(await TestUtil.WithTimeout(waiting));

        using var cts2 = new CancellationTokenSource();
        SpindleTask<(bool, bool)> timed = Suppressed(signal.WaitAsync(TimeSpan.FromMinutes(1), cts2.Token));
        cts2.Cancel();
        Assert.Equal((true, false), await TestUtil.WithTimeout(timed));

        Assert.Equal((false, false), await TestUtil.WithTimeout(Suppressed(signal.WaitAsync(TimeSpan.FromMilliseconds(1)))));
        signal.Set();
        Assert.Equal((false, true), await TestUtil.WithTimeout(Suppressed(signal.WaitAsync(TimeSpan.FromMinutes(1)))));
    }

    private static async SpindleTask ThrowsCancellation(Promise gate, CancellationToken token)
    {
        await gate.Task;
        token.ThrowIfCancellationRequested();
    }

    private static async SpindleTask<int> ThrowsAfterAwait(Promise gate)
    {
        await gate.Task;
        throw new ArgumentException("not a cancellation");
    }

    [Fact]
    public async Task AsyncMethods_ThatThrowACancellation_AreCancelled_OtherFaultsThrow()
    {
        using var cts = new CancellationTokenSource();
        cts.Cancel();
        var gate = new Promise();
        SpindleTask<bool> read = Suppressed(ThrowsCancellation(gate, cts.Token));
        gate.SetResult();
        Assert.True(await TestUtil.WithTimeout(read));

        var gate2 = new Promise();
        SpindleTask<(bool, int)> faulted = Suppressed(ThrowsAfterAwait(gate2));
        gate2.SetResult();
        await Assert.ThrowsAsync<ArgumentException>(() => TestUtil.WithTimeout(faulted));
    }

    private static async SpindleTask AwaitsGate(Promise gate) => await gate.Task;

    [Fact]
    public void ConsumesTheTask_ItsBoxGoesBackToThePool_AndASecondAwaitIsTheAwaitOnceError()
    {
        var gate = new Promise();
        SpindleTask first = AwaitsGate(gate);
        gate.SetCanceled();
        Assert.True(first.SuppressCancellationThrow().GetAwaiter().GetResult());
        Assert.Throws<InvalidOperationException>(() => first.SuppressCancellationThrow().GetAwaiter().GetResult());
        Assert.Throws<InvalidOperationException>(() => first.GetAwaiter().GetResult());

        // The box went back to this thread's pool slot when it was read: the next call of the method rents it again.
        gate.Reset();
        SpindleTask second = AwaitsGate(gate);
        Assert.Same(first._source, second._source);
        gate.SetResult();
        Assert.False(second.SuppressCancellationThrow().GetAwaiter().GetResult());

        // The same for a result, and the awaiter's blocking read of a stale token.
        var p = new Promise<int>();
        SpindleTask<int> t = p.Task;
        p.SetResult(1);
        p.Reset();
        Assert.Throws<InvalidOperationException>(() => t.SuppressCancellationThrow().GetAwaiter().GetResult());
    }

    [Fact]
    public async Task AwaitedTwiceAtOnce_TheSecondRegistrationThrows()
    {
        var p = new Promise();
        var awaiter = p.Task.SuppressCancellationThrow().GetAwaiter();
        awaiter.OnCompleted(static () => { });
        Assert.Throws<InvalidOperationException>(() => p.Task.SuppressCancellationThrow().GetAwaiter().OnCompleted(static () => { }));
        p.SetCanceled();
        await Task.Yield();
        Assert.True(awaiter.GetResult());
    }

    private static readonly AsyncLocal<string?> s_local = new();

    private static async SpindleTask<(bool Canceled, string? Local, int Thread)> AwaitWithLocal(SpindleTask task)
    {
        s_local.Value = "flows";
        bool canceled = await task.SuppressCancellationThrow();
        return (canceled, s_local.Value, Environment.CurrentManagedThreadId);
    }

    [Fact]
    public async Task ExecutionContextFlows_AndTheContinuationRunsWhereAPlainAwaitRuns()
    {
        // Cancelled: the awaiting code runs inline in Cancel(), as a plain await's would.
        using var cts = new CancellationTokenSource();
        int me = Environment.CurrentManagedThreadId;
        SpindleTask<(bool, string?, int)> cancelled = AwaitWithLocal(Spindle.Delay(60_000, cts.Token));
        s_local.Value = null;
        cts.Cancel();
        Assert.Equal((true, "flows", me), await TestUtil.WithTimeout(cancelled));

        // Completed by a timer: the local flows to the timer's thread.
        var (wasCanceled, local, _) = await TestUtil.WithTimeout(AwaitWithLocal(Spindle.Delay(5)));
        Assert.False(wasCanceled);
        Assert.Equal("flows", local);
    }

    [Fact]
    public void ThroughTheBclAwaitPath_NotOnlyTheSpindleBuilder()
    {
        // An async Task method registers through OnCompleted/UnsafeOnCompleted, not OnCompletedForBox.
        static async Task<bool> Bcl(SpindleTask t) => await t.SuppressCancellationThrow();
        static async Task<(bool, int)> BclT(SpindleTask<int> t) => await t.SuppressCancellationThrow();
        static async Task<bool> BclFrame(FrameAwaitable t) => await t.SuppressCancellationThrow();

        using var cts = new CancellationTokenSource();
        Task<bool> a = Bcl(Spindle.Delay(60_000, cts.Token));
        var p = new Promise<int>();
        Task<(bool, int)> b = BclT(p.Task);
        var loop = new FrameLoop();
        Task<bool> c = BclFrame(loop.NextFrame(cts.Token));
        cts.Cancel();
        p.SetCanceled();
        Assert.True(a.Wait(TimeSpan.FromSeconds(30)) && a.Result);
        Assert.True(b.Wait(TimeSpan.FromSeconds(30)) && b.Result.Item1);
        Assert.True(c.Wait(TimeSpan.FromSeconds(30)) && c.Result);
    }

    private sealed class Entity
    {
        public int Steps;
        public bool OffLoop;
        public bool Ended;
        public bool Canceled;
    }

    private static async SpindleTask RunEntity(FrameLoop loop, Entity e, bool delay, CancellationToken token)
    {
        while (true)
        {
            bool canceled = delay
                ? await loop.Delay(TimeSpan.FromMilliseconds(10), token).SuppressCancellationThrow()
                : await loop.NextFrame(token).SuppressCancellationThrow();
            if (canceled)
            {
                e.Canceled = true;
                break;
            }
            e.OffLoop |= !loop.IsLoopThread;
            e.Steps++;
        }
        e.Ended = true;
    }

    [Fact]
    public void LoopAwaits_ResumeOnTheLoopThread_AndACancellationEndsEachLoopOnce()
    {
        var loop = new FrameLoop();
        loop.RunFrame();
        using var cts = new CancellationTokenSource();
        var entities = new Entity[200];
        for (int i = 0; i < entities.Length; i++)
        {
            entities[i] = new Entity();
            RunEntity(loop, entities[i], delay: i % 2 == 1, cts.Token).Forget();
        }
        for (int f = 0; f < 30; f++)
        {
            loop.RunFrame(TimeSpan.FromMilliseconds(16));
        }
        // Cancelled from another thread, as an unload on a loading thread: the loops end inline in Cancel(), on that thread.
        Task.Run(cts.Cancel).Wait();
        for (int f = 0; f < 3; f++)
        {
            loop.RunFrame(TimeSpan.FromMilliseconds(16));
        }
        foreach (Entity e in entities)
        {
            Assert.True(e.Steps > 0, "every entity stepped");
            Assert.False(e.OffLoop, "a normal resume ran off the loop thread");
            Assert.True(e.Ended && e.Canceled);
        }
    }

    [Fact]
    public void FrameAwaitables_WithoutAToken_AndAlreadyCancelled()
    {
        var loop = new FrameLoop();
        loop.RunFrame();
        var awaiter = loop.NextFrame().SuppressCancellationThrow().GetAwaiter();
        Assert.False(awaiter.IsCompleted);
        bool? resumed = null;
        awaiter.OnCompleted(() => resumed = awaiter.GetResult());
        loop.RunFrame();
        Assert.False(resumed);

        using var cts = new CancellationTokenSource();
        cts.Cancel();
        var cancelled = loop.NextFrame(cts.Token).SuppressCancellationThrow().GetAwaiter();
        Assert.True(cancelled.IsCompleted);
        Assert.True(cancelled.GetResult());

        // SwitchTo on the loop thread is complete at once.
        var here = loop.SwitchTo().SuppressCancellationThrow().GetAwaiter();
        Assert.True(here.IsCompleted);
        Assert.False(here.GetResult());
    }

    [Fact]
    public void SteadyState_FramesOfSuppressedLoopAwaits_AllocateNothing()
    {
        var loop = new FrameLoop();
        loop.RunFrame();
        using var cts = new CancellationTokenSource();
        var entities = new Entity[300];
        for (int i = 0; i < entities.Length; i++)
        {
            entities[i] = new Entity();
            RunEntity(loop, entities[i], delay: i % 2 == 1, cts.Token).Forget();
        }
        for (int f = 0; f < 50; f++)
        {
            loop.RunFrame(TimeSpan.FromMilliseconds(5));
        }
        long fewest = long.MaxValue;
        for (int run = 0; run < 20 && fewest != 0; run++)
        {
            long before = GC.GetAllocatedBytesForCurrentThread();
            for (int f = 0; f < 20; f++)
            {
                loop.RunFrame(TimeSpan.FromMilliseconds(5));
            }
            fewest = Math.Min(fewest, GC.GetAllocatedBytesForCurrentThread() - before);
        }
        Assert.Equal(0, fewest);
        cts.Cancel();
        foreach (Entity e in entities)
        {
            Assert.True(e.Ended && e.Canceled && !e.OffLoop);
        }
    }

    private static async SpindleTask<int> CountCancelled(SpindleTask[] tasks)
    {
        int n = 0;
        foreach (SpindleTask t in tasks)
        {
            if (await t.SuppressCancellationThrow())
            {
                n++;
            }
        }
        return n;
    }

    /// <summary>
    /// The reads of many cancelled waits, each already complete, in a Spindle async method that never suspends: the
    /// awaits allocate nothing (no exception is built for the cancellation, the sources go back to their pools).
    /// </summary>
    [Fact]
    public void SteadyState_SuppressedCancelledAwaits_AllocateNothing()
    {
        const int N = 256;
        var loop = new FrameLoop();
        loop.RunFrame();
        var tasks = new SpindleTask[N];
        long fewest = long.MaxValue;
        for (int round = 0; round < 40 && fewest != 0; round++)
        {
            using var cts = new CancellationTokenSource();
            for (int i = 0; i < N; i++)
            {
                tasks[i] = (i % 3) switch
                {
                    0 => Spindle.Delay(60_000, cts.Token),
                    1 => loop.Delay(TimeSpan.FromSeconds(60), cts.Token),
                    _ => loop.NextFrame(cts.Token),
                };
            }
            cts.Cancel();
            long before = GC.GetAllocatedBytesForCurrentThread();
            int cancelled = CountCancelled(tasks).GetAwaiter().GetResult();
            long bytes = GC.GetAllocatedBytesForCurrentThread() - before;
            Assert.Equal(N, cancelled);
            if (round >= 4)
            {
                fewest = Math.Min(fewest, bytes);
            }
            loop.RunFrame(); // the frame lets go of its cancelled waits, which go back to their pools
        }
        Assert.Equal(0, fewest);
    }
}

using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// Interop at the edges: the run-inline shortcut's context and exceptions, and AsTask keeping a cancellation's own
/// exception and token, whether the task had completed or not (found by a review: both were replaced).
/// </summary>
public sealed class TaskBridgeTests
{
    private static readonly AsyncLocal<string?> s_local = new();

    private sealed class MyCanceled : OperationCanceledException
    {
        public MyCanceled(CancellationToken t) : base("mine", t) { }
    }

    private static async SpindleTask<(string? Seen, string? After, string? Seen2, string? After2)> InlineContexts()
    {
        await Spindle.SwitchToWorker();
        s_local.Value = "a";
        string? seen = null;
        SpindleTask t = Spindle.Run(() => { seen = s_local.Value; s_local.Value = "x"; });
        await t;
        string? after = s_local.Value;
        string? seen2 = null;
        SpindleTask t2 = Spindle.Run(() => { seen2 = s_local.Value; s_local.Value = "y"; });
        s_local.Value = "b";
        await t2;
        return (seen, after, seen2, s_local.Value);
    }

    [Fact]
    public async Task InlineRun_ContextOfTheActionAndOfTheAwaiter()
    {
        var r = await TestUtil.WithTimeout(InlineContexts());
        Assert.Equal(("a", "a", "a", "b"), r);
    }

    private static async SpindleTask InlineThrows(Exception ex)
    {
        await Spindle.SwitchToWorker();
        for (int i = 0; i < 200; i++)
        {
            try
            {
                await Spindle.Run(() => throw ex);
                throw new InvalidOperationException("no throw");
            }
            catch (Exception caught) when (ReferenceEquals(caught, ex))
            {
            }
        }
    }

    [Fact]
    public async Task InlineRun_Throws_TheSameExceptionReachesTheAwaiter()
        => await TestUtil.WithTimeout(InlineThrows(new ArithmeticException("x")));

    private static async SpindleTask<int> DeepInline(int depth)
    {
        if (depth == 0)
        {
            return 0;
        }
        int r = 0;
        await Spindle.Run(() => { r = DeepInline(depth - 1).GetAwaiter().GetResult(); });
        return r + 1;
    }

    private static async SpindleTask<int> LongLoop()
    {
        await Spindle.SwitchToWorker();
        int n = 0;
        for (int i = 0; i < 200_000; i++)
        {
            await Spindle.Run(() => n++);
        }
        return n;
    }

    [Fact]
    public async Task InlineRun_LongLoop_NoStackGrowth()
        => Assert.Equal(200_000, await TestUtil.WithTimeout(LongLoop()));

    private static async SpindleTask FailsCanceled(Promise gate, Exception ex)
    {
        await gate.Task;
        throw ex;
    }

    [Fact]
    public async Task AsTask_CanceledPendingAndCompleted_SameShape()
    {
        using var cts = new CancellationTokenSource();
        cts.Cancel();
        var gate = new Promise();
        Task pending = FailsCanceled(gate, new MyCanceled(cts.Token)).AsTask();
        gate.SetResult();
        var e1 = await Assert.ThrowsAnyAsync<OperationCanceledException>(() => pending);
        var gate2 = new Promise();
        gate2.SetResult();
        Task done = FailsCanceled(gate2, new MyCanceled(cts.Token)).AsTask();
        var e2 = await Assert.ThrowsAnyAsync<OperationCanceledException>(() => done);
        Assert.True(pending.IsCanceled && done.IsCanceled);
        Assert.Equal(cts.Token, e1.CancellationToken);
        Assert.Equal(cts.Token, e2.CancellationToken);
        // The original exception object (its type, message) does not cross: a BCL ValueTask.AsTask keeps it.
        Assert.IsType<MyCanceled>(e1);
    }

    [Fact]
    public async Task AsTask_CanceledWithUncanceledToken_PendingAndCompletedAgree()
    {
        var gate = new Promise();
        Task pending = FailsCanceled(gate, new OperationCanceledException()).AsTask();
        gate.SetResult();
        var e1 = await Assert.ThrowsAnyAsync<OperationCanceledException>(() => pending);
        var gate2 = new Promise();
        gate2.SetResult();
        Task done = FailsCanceled(gate2, new OperationCanceledException()).AsTask();
        var e2 = await Assert.ThrowsAnyAsync<OperationCanceledException>(() => done);
        Assert.Equal(e1.CancellationToken.IsCancellationRequested, e2.CancellationToken.IsCancellationRequested);
    }

    [Fact]
    public async Task AsyncTaskAwaitingSpindleTask_GetsTheOriginalOce()
    {
        using var cts = new CancellationTokenSource();
        cts.Cancel();
        var ex = new MyCanceled(cts.Token);
        var gate = new Promise();
        SpindleTask t = FailsCanceled(gate, ex);
        _ = Task.Run(async () => { await Task.Delay(10); gate.SetResult(); });
        var caught = await Assert.ThrowsAsync<MyCanceled>(async () => await t);
        Assert.Same(ex, caught);
    }

    [Fact]
    public async Task PreserveAsTask_TwiceAndAwait()
    {
        var gate = new Promise();
        SpindleTask p = FailsCanceled(gate, new ArithmeticException("p")).Preserve();
        Task a = p.AsTask();
        Task b = p.AsTask();
        gate.SetResult();
        await Assert.ThrowsAsync<ArithmeticException>(() => a);
        await Assert.ThrowsAsync<ArithmeticException>(() => b);
        await Assert.ThrowsAsync<ArithmeticException>(async () => await p);
        await Assert.ThrowsAsync<ArithmeticException>(async () => await p.AsValueTask());
    }
}

using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// Differential tests of README's "BCL → Spindle" table for cancellation: the same program with the BCL's API and with
/// Spindle's, compared on what the await throws. The BCL's canceled tasks throw a <see cref="TaskCanceledException"/>
/// (an <see cref="OperationCanceledException"/>) carrying the caller's token; code ported by the table keeps its
/// <c>catch (TaskCanceledException)</c> around <c>Task.Delay</c>, <c>WaitAsync</c> and the rest, so Spindle throws the same
/// type, with the same token.
/// </summary>
public sealed class CancellationExceptionParityTests
{
    private static async Task<Exception> Bcl(Func<Task> program) => await TestUtil.Catch(() => TestUtil.WithTimeout(program()));

    private static async Task<Exception> Spn(Func<SpindleTask> program) => await TestUtil.Catch(() => TestUtil.WithTimeout(program()));

    private static void Same(Exception bcl, Exception spindle, CancellationToken token)
    {
        Assert.Equal(bcl.GetType(), spindle.GetType());
        Assert.Equal(token, ((OperationCanceledException)bcl).CancellationToken);
        Assert.Equal(token, ((OperationCanceledException)spindle).CancellationToken);
    }

    private static CancellationToken Canceled()
    {
        var cts = new CancellationTokenSource();
        cts.Cancel();
        return cts.Token;
    }

    /// <summary>Starts both waits, each on a token of its own, cancels both tokens, and compares what the awaits throw.</summary>
    private static async Task CancelledWhileWaiting(Func<CancellationToken, Task> bclWait, Func<CancellationToken, SpindleTask> spindleWait)
    {
        using var bclCts = new CancellationTokenSource();
        using var spnCts = new CancellationTokenSource();
        Task bcl = bclWait(bclCts.Token);
        SpindleTask spindle = spindleWait(spnCts.Token);
        bclCts.Cancel();
        spnCts.Cancel();
        Exception b = await Bcl(() => bcl);
        Exception s = await Spn(() => spindle);
        Assert.Equal(b.GetType(), s.GetType());
        Assert.Equal(bclCts.Token, ((OperationCanceledException)b).CancellationToken);
        Assert.Equal(spnCts.Token, ((OperationCanceledException)s).CancellationToken);
    }

    [Fact]
    public async Task Delay_TokenAlreadyCancelled()
    {
        CancellationToken token = Canceled();
        Same(await Bcl(() => Task.Delay(10_000, token)), await Spn(() => Spindle.Delay(10_000, token)), token);
        Same(await Bcl(() => Task.Delay(TimeSpan.FromSeconds(10), token)), await Spn(() => Spindle.Delay(TimeSpan.FromSeconds(10), token)), token);
    }

    [Fact]
    public Task Delay_TokenCancelledWhileWaiting()
        => CancelledWhileWaiting(token => Task.Delay(Timeout.Infinite, token), token => Spindle.Delay(Timeout.Infinite, token));

    [Fact]
    public async Task Run_TokenAlreadyCancelled_TheWorkNeverRuns()
    {
        CancellationToken token = Canceled();
        int ran = 0;
        Same(await Bcl(() => Task.Run(() => { ran++; }, token)), await Spn(() => Spindle.Run(() => { ran++; }, token)), token);
        Same(await Bcl(() => Task.Run(() => ran++, token)), await Spn(() => Spindle.Run(() => ran++, token)), token);
        Assert.Equal(0, ran);
    }

    [Fact]
    public async Task PromiseSetCanceled_AsTaskCompletionSource()
    {
        CancellationToken token = Canceled();
        var tcs = new TaskCompletionSource();
        var promise = new Promise();
        tcs.SetCanceled(token);
        promise.SetCanceled(token);
        Same(await Bcl(() => tcs.Task), await Spn(() => promise.Task), token);

        var typedTcs = new TaskCompletionSource<int>();
        var typed = new Promise<int>();
        Task<int> typedBcl = typedTcs.Task;
        SpindleTask<int> typedSpindle = typed.Task;
        Assert.True(typedTcs.TrySetCanceled(token));
        Assert.True(typed.TrySetCanceled(token));
        Same(await Bcl(() => typedBcl), await Spn(() => typedSpindle), token);
    }

    [Fact]
    public async Task FromCanceled()
    {
        CancellationToken token = Canceled();
        Same(await Bcl(() => Task.FromCanceled(token)), await Spn(() => SpindleTask.FromCanceled(token)), token);
        Same(await Bcl(() => Task.FromCanceled<int>(token)), await Spn(() => SpindleTask.FromCanceled<int>(token)), token);
    }

    [Fact]
    public async Task SignalWait_AsSemaphoreSlimWait_TokenAlreadyCancelled()
    {
        CancellationToken token = Canceled();
        Same(await Bcl(() => new SemaphoreSlim(0, 1).WaitAsync(token)), await Spn(() => new Signal(false).WaitAsync(token)), token);
        Same(await Bcl(() => new SemaphoreSlim(0, 1).WaitAsync(TimeSpan.FromSeconds(10), token)),
            await Spn(() => new Signal(false).WaitAsync(TimeSpan.FromSeconds(10), token)), token);
    }

    [Fact]
    public async Task WithCancellation_AsWaitAsync()
    {
        CancellationToken token = Canceled();
        Same(await Bcl(() => new TaskCompletionSource().Task.WaitAsync(token)), await Spn(() => new Promise().Task.WithCancellation(token)), token);
        Same(await Bcl(() => new TaskCompletionSource().Task.WaitAsync(TimeSpan.FromSeconds(10), token)),
            await Spn(() => new Promise().Task.WithTimeout(TimeSpan.FromSeconds(10), null, token)), token);

        await CancelledWhileWaiting(t => new TaskCompletionSource().Task.WaitAsync(t), t => new Promise().Task.WithCancellation(t));
    }

    [Fact]
    public async Task PeriodicTimer_TokenAlreadyCancelled()
    {
        CancellationToken token = Canceled();
        using var bclTimer = new PeriodicTimer(TimeSpan.FromSeconds(10));
        using var spindleTimer = new SpindlePeriodicTimer(TimeSpan.FromSeconds(10));
        Same(await Bcl(() => bclTimer.WaitForNextTickAsync(token).AsTask()), await Spn(() => spindleTimer.WaitForNextTickAsync(token)), token);
    }

    [Fact]
    public async Task AsTask_OfACanceledTask_IsCanceled_AndThrowsAsTheBclTaskDoes()
    {
        CancellationToken token = Canceled();
        var promise = new Promise();
        Task bridged = promise.Task.AsTask();
        promise.SetCanceled(token);
        Exception s = await Bcl(() => bridged);
        Assert.True(bridged.IsCanceled);
        Same(await Bcl(() => Task.FromCanceled(token)), s, token);
    }
}

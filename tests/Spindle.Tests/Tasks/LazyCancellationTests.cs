using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// A delay's and a frame wait's cancellation by their token builds no exception when it happens: the exception is built
/// by the reader that throws it (a plain await), with the type and token it had, and never by one that reads the
/// cancellation as a value. Before, <c>TrySetCanceled</c> built a <see cref="TaskCanceledException"/> and captured an
/// <see cref="System.Runtime.ExceptionServices.ExceptionDispatchInfo"/> per cancelled wait.
/// </summary>
public sealed class LazyCancellationTests
{
    private static SpindleTask Start(int kind, FrameLoop loop, CancellationToken token) => kind switch
    {
        0 => Spindle.Delay(60_000, token),
        1 => loop.Delay(TimeSpan.FromSeconds(60), token),
        _ => loop.NextFrame(token),
    };

    [Theory]
    [InlineData(0)]
    [InlineData(1)]
    [InlineData(2)]
    public void CancellingPendingWaits_BuildsNoExceptionPerWait(int kind)
    {
        const int N = 512;
        var loop = new FrameLoop();
        loop.RunFrame();
        var tasks = new SpindleTask[N];
        long fewest = long.MaxValue;
        for (int round = 0; round < 6; round++)
        {
            var cts = new CancellationTokenSource();
            for (int i = 0; i < N; i++)
            {
                tasks[i] = Start(kind, loop, cts.Token);
            }
            long before = GC.GetAllocatedBytesForCurrentThread();
            cts.Cancel();
            fewest = Math.Min(fewest, GC.GetAllocatedBytesForCurrentThread() - before);
            foreach (SpindleTask t in tasks)
            {
                Assert.Equal(SpindleTaskStatus.Canceled, t.Status);
                Assert.Throws<TaskCanceledException>(() => t.GetAwaiter().GetResult());
            }
            loop.RunFrame();
            cts.Dispose();
        }
        // An exception and its dispatch info are about 250 bytes; what Cancel() itself allocates does not grow per wait.
        Assert.True(fewest < N * 16, $"cancelling {N} waits allocated {fewest} bytes ({fewest / N} per wait)");
    }

    [Theory]
    [InlineData(0)]
    [InlineData(1)]
    [InlineData(2)]
    public async Task TheThrowingAwait_StillGetsATaskCanceledException_WithTheToken_AndItsAwaitInTheTrace(int kind)
    {
        var loop = new FrameLoop();
        loop.RunFrame();
        using var cts = new CancellationTokenSource();
        SpindleTask pending = Awaits(Start(kind, loop, cts.Token));
        cts.Cancel();
        var ex = await Assert.ThrowsAsync<TaskCanceledException>(() => TestUtil.WithTimeout(pending));
        Assert.Equal(cts.Token, ex.CancellationToken);
        Assert.Contains(nameof(Awaits), ex.StackTrace, StringComparison.Ordinal);
        Assert.DoesNotContain("SourceCore", ex.StackTrace, StringComparison.Ordinal);

        // Two waits on one token: each await throws an exception of its own.
        using var both = new CancellationTokenSource();
        SpindleTask a = Start(kind, loop, both.Token);
        SpindleTask b = Start(kind, loop, both.Token);
        both.Cancel();
        var ea = Assert.Throws<TaskCanceledException>(() => a.GetAwaiter().GetResult());
        var eb = Assert.Throws<TaskCanceledException>(() => b.GetAwaiter().GetResult());
        Assert.NotSame(ea, eb);
        Assert.Equal(both.Token, ea.CancellationToken);
        Assert.Equal(both.Token, eb.CancellationToken);
    }

    private static async SpindleTask Awaits(SpindleTask task) => await task;

    /// <summary>
    /// A suppressed read asks for the cancellation as a value with a thread-static flag; a read of a source that built its
    /// cancellation at once (a promise) takes no flag, and the next throwing read on the thread must still build the real
    /// exception, with its token, not the shared "canceled" value.
    /// </summary>
    [Fact]
    public void TheValueFlag_DoesNotOutliveTheSuppressedRead()
    {
        var loop = new FrameLoop();
        loop.RunFrame();
        for (int kind = 0; kind < 3; kind++)
        {
            var p = new Promise();
            p.SetCanceled();
            Assert.True(p.Task.SuppressCancellationThrow().GetAwaiter().GetResult());
            Assert.True(SpindleTask.FromCanceled().SuppressCancellationThrow().GetAwaiter().GetResult());
            using var cts = new CancellationTokenSource();
            SpindleTask t = Start(kind, loop, cts.Token);
            cts.Cancel();
            var ex = Assert.Throws<TaskCanceledException>(() => t.GetAwaiter().GetResult());
            Assert.Equal(cts.Token, ex.CancellationToken);
        }
    }

    [Fact]
    public async Task Combinators_PassTheCancellationOn_WithItsToken()
    {
        var loop = new FrameLoop();
        loop.RunFrame();
        using var cts = new CancellationTokenSource();
        SpindleTask all = SpindleTask.WhenAll(Spindle.Delay(60_000, cts.Token), loop.Delay(TimeSpan.FromSeconds(60), cts.Token));
        SpindleTask preserved = Spindle.Delay(60_000, cts.Token).Preserve();
        cts.Cancel();
        var ex = await Assert.ThrowsAsync<TaskCanceledException>(() => TestUtil.WithTimeout(all));
        Assert.Equal(cts.Token, ex.CancellationToken);
        Assert.Equal(SpindleTaskStatus.Canceled, preserved.Status);
        var e1 = await Assert.ThrowsAsync<TaskCanceledException>(() => preserved.AsTask());
        var e2 = await Assert.ThrowsAsync<TaskCanceledException>(() => preserved.AsTask());
        Assert.Same(e1, e2); // a preserved task keeps the outcome it read: one exception
        Assert.Equal(cts.Token, e1.CancellationToken);
    }

    /// <summary>
    /// The review of stop 39: every other way to read a lazily cancelled wait gives the cancellation with its token, whether
    /// it is read after the cancellation or waited on before it: a ValueTask, a Task, the winner of a WhenAny, and the status (a WhenAny rethrows its winner's failure).
    /// </summary>
    [Theory]
    [InlineData(0)]
    [InlineData(1)]
    [InlineData(2)]
    public async Task EveryReader_GetsTheTokenThatCanceledTheWait(int kind)
    {
        var loop = new FrameLoop();
        loop.RunFrame();
        using var cts = new CancellationTokenSource();
        // Waited on before the cancellation: the readers' continuations run from it.
        Task pendingTask = Start(kind, loop, cts.Token).AsTask();
        ValueTask pendingValueTask = Start(kind, loop, cts.Token).AsValueTask();
        SpindleTask<int> any = SpindleTask.WhenAny(Start(kind, loop, cts.Token), Spindle.Delay(60_000));
        SpindleTask read = Start(kind, loop, cts.Token);
        SpindleTask suppressedFirst = Start(kind, loop, cts.Token);
        SpindleTask readAfter = Start(kind, loop, cts.Token);
        cts.Cancel();

        Assert.Equal(SpindleTaskStatus.Canceled, read.Status);
        Assert.True(pendingTask.IsCanceled);
        var e1 = await Assert.ThrowsAsync<TaskCanceledException>(() => pendingTask);
        Assert.Equal(cts.Token, e1.CancellationToken);
        var e2 = await Assert.ThrowsAsync<TaskCanceledException>(async () => await pendingValueTask);
        Assert.Equal(cts.Token, e2.CancellationToken);
        // A WhenAny whose first input to finish failed rethrows that input's exception.
        var e5 = await Assert.ThrowsAsync<TaskCanceledException>(() => TestUtil.WithTimeout(any));
        Assert.Equal(cts.Token, e5.CancellationToken);
        // Read after the cancellation: a Task made then, and, on one thread, a suppressed read then a throwing one.
        var e3 = await Assert.ThrowsAsync<TaskCanceledException>(() => read.AsTask());
        Assert.Equal(cts.Token, e3.CancellationToken);
        Assert.True(suppressedFirst.SuppressCancellationThrow().GetAwaiter().GetResult());
        var e4 = Assert.Throws<TaskCanceledException>(() => readAfter.GetAwaiter().GetResult());
        Assert.Equal(cts.Token, e4.CancellationToken);
        Assert.NotSame(e3, e4); // built for each reader, never the shared value
        loop.RunFrame();
    }

    /// <summary>
    /// A delay or a frame wait asked for with a token already cancelled (a scene's entities starting their next wait after the unload
    /// cancelled them) is canceled at once, lazily like one cancelled while it waits: a suppressed await builds no
    /// exception and, once the pool is warm, allocates nothing; a throwing await still gets a
    /// <see cref="TaskCanceledException"/> with the token. Before, each built one at once (SpindleTask.FromCanceled).
    /// </summary>
    [Theory]
    [InlineData(0)]
    [InlineData(1)]
    [InlineData(2)]
    public void AWaitWithATokenAlreadyCancelled_IsCanceledAtOnce_AndBuildsNoExceptionForASuppressedAwait(int kind)
    {
        const int N = 512;
        var loop = new FrameLoop();
        loop.RunFrame();
        using var cts = new CancellationTokenSource();
        cts.Cancel();
        Assert.Equal(SpindleTaskStatus.Canceled, Start(kind, loop, cts.Token).Status); // (the use is left unread)
        long fewest = long.MaxValue;
        int canceled = 0;
        for (int round = 0; round < 6; round++)
        {
            long before = GC.GetAllocatedBytesForCurrentThread();
            for (int i = 0; i < N; i++)
            {
                if (Start(kind, loop, cts.Token).SuppressCancellationThrow().GetAwaiter().GetResult())
                {
                    canceled++;
                }
            }
            fewest = Math.Min(fewest, GC.GetAllocatedBytesForCurrentThread() - before);
        }
        Assert.Equal(6 * N, canceled);
        Assert.True(fewest < N * 16, $"{N} suppressed awaits of waits started with a cancelled token allocated {fewest} bytes ({fewest / N} per wait)");

        SpindleTask thrown = Start(kind, loop, cts.Token);
        var e = Assert.Throws<TaskCanceledException>(() => thrown.GetAwaiter().GetResult());
        Assert.Equal(cts.Token, e.CancellationToken);
        // Read once, as every pooled delay: the node went back to its pool with the read.
        var again = Assert.Throws<InvalidOperationException>(() => thrown.GetAwaiter().GetResult());
        Assert.Contains("Preserve()", again.Message, StringComparison.Ordinal);
        loop.RunFrame();
    }
}

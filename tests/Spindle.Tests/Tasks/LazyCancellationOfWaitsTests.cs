using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// Section 36's lazy cancellation, extended to the waits that still built their exception at once: a signal's wait (both
/// overloads), a WhenAny and a WhenAll with a token, a periodic timer's tick wait, and the waits asked for with a token
/// already cancelled (<see cref="SpindleTask.FromCanceled(CancellationToken)"/> and the paths that return it: a signal's
/// wait, <c>Spindle.Run</c>). A server holding many sessions that each wait on a signal with a shutdown token paid a
/// <see cref="TaskCanceledException"/> and its dispatch info (192 bytes) per wait when it cancelled them all, even for a
/// suppressed await. Every reader that throws still gets a <see cref="TaskCanceledException"/> with the token.
/// </summary>
public sealed class LazyCancellationOfWaitsTests
{
    private const int Kinds = 5;

    /// <summary>Starts a pending wait of <paramref name="kind"/> on token <paramref name="token"/>, with the objects it needs kept in <paramref name="keep"/>.</summary>
    private static SpindleTask Start(int kind, CancellationToken token, out object keep)
    {
        switch (kind)
        {
            case 0:
                var signal = new Signal();
                keep = signal;
                return signal.WaitAsync(token);
            case 1:
                var timed = new Signal();
                keep = timed;
                return timed.WaitAsync(TimeSpan.FromSeconds(60), token);
            case 2:
                var raced = new Signal();
                var promise = new Promise();
                keep = (raced, promise);
                return SpindleTask.WhenAny([promise.Task, raced.WaitAsync()], token);
            case 3:
                var all = new Promise();
                keep = all;
                return SpindleTask.WhenAll([all.Task], token);
            default:
                var timer = new SpindlePeriodicTimer(TimeSpan.FromSeconds(60));
                keep = timer;
                return timer.WaitForNextTickAsync(token);
        }
    }

    public static TheoryData<int> AllKinds()
    {
        var data = new TheoryData<int>();
        for (int kind = 0; kind < Kinds; kind++)
        {
            data.Add(kind);
        }
        return data;
    }

    [Theory]
    [MemberData(nameof(AllKinds))]
    public void CancellingPendingWaits_BuildsNoExceptionPerWait_AndEachThrowingReadGetsTheToken(int kind)
    {
        const int N = 512;
        var tasks = new SpindleTask[N];
        var keep = new object[N];
        long fewest = long.MaxValue;
        for (int round = 0; round < 6; round++)
        {
            using var cts = new CancellationTokenSource();
            for (int i = 0; i < N; i++)
            {
                tasks[i] = Start(kind, cts.Token, out keep[i]);
            }
            long before = GC.GetAllocatedBytesForCurrentThread();
            cts.Cancel();
            fewest = Math.Min(fewest, GC.GetAllocatedBytesForCurrentThread() - before);
            for (int i = 0; i < N; i++)
            {
                Assert.Equal(SpindleTaskStatus.Canceled, tasks[i].Status);
                if (i % 2 == 0)
                {
                    Assert.True(tasks[i].SuppressCancellationThrow().GetAwaiter().GetResult());
                }
                else
                {
                    var e = Assert.Throws<TaskCanceledException>(() => tasks[i].GetAwaiter().GetResult());
                    Assert.Equal(cts.Token, e.CancellationToken);
                }
            }
        }
        // An exception and its dispatch info are about 190 bytes a wait; what Cancel() itself allocates does not grow per wait.
        Assert.True(fewest < N * 16, $"cancelling {N} waits allocated {fewest} bytes ({fewest / N} per wait)");
    }

    [Theory]
    [MemberData(nameof(AllKinds))]
    public async Task EveryReader_GetsTheTokenThatCanceledTheWait(int kind)
    {
        using var cts = new CancellationTokenSource();
        // Waited on before the cancellation: the readers' continuations run from it.
        SpindleTask awaited = Awaits(Start(kind, cts.Token, out object k1));
        Task pendingTask = Start(kind, cts.Token, out object k2).AsTask();
        ValueTask pendingValueTask = Start(kind, cts.Token, out object k3).AsValueTask();
        SpindleTask preserved = Start(kind, cts.Token, out object k4).Preserve();
        SpindleTask all = SpindleTask.WhenAll(Start(kind, cts.Token, out object k5), Spindle.Delay(60_000, cts.Token));
        SpindleTask<int> any = SpindleTask.WhenAny(Start(kind, cts.Token, out object k6), Spindle.Delay(60_000));
        SpindleTask readAfter = Start(kind, cts.Token, out object k7);
        SpindleTask suppressedFirst = Start(kind, cts.Token, out object k8);
        SpindleTask readTwice = Start(kind, cts.Token, out object k9);
        cts.Cancel();

        var e1 = await Assert.ThrowsAsync<TaskCanceledException>(() => TestUtil.WithTimeout(awaited));
        Assert.Equal(cts.Token, e1.CancellationToken);
        Assert.Contains(nameof(Awaits), e1.StackTrace, StringComparison.Ordinal);
        Assert.Equal(cts.Token, (await Assert.ThrowsAsync<TaskCanceledException>(() => pendingTask)).CancellationToken);
        Assert.Equal(cts.Token, (await Assert.ThrowsAsync<TaskCanceledException>(async () => await pendingValueTask)).CancellationToken);
        var p1 = await Assert.ThrowsAsync<TaskCanceledException>(() => preserved.AsTask());
        var p2 = await Assert.ThrowsAsync<TaskCanceledException>(() => preserved.AsTask());
        Assert.Same(p1, p2); // a preserved task keeps the outcome it read: one exception
        Assert.Equal(cts.Token, p1.CancellationToken);
        Assert.Equal(cts.Token, (await Assert.ThrowsAsync<TaskCanceledException>(() => TestUtil.WithTimeout(all))).CancellationToken);
        Assert.Equal(cts.Token, (await Assert.ThrowsAsync<TaskCanceledException>(() => TestUtil.WithTimeout(any))).CancellationToken);

        // The status, then a read; a suppressed read, then a throwing one on the same thread (never the shared value).
        Assert.Equal(SpindleTaskStatus.Canceled, readAfter.Status);
        Assert.True(suppressedFirst.SuppressCancellationThrow().GetAwaiter().GetResult());
        var e2 = Assert.Throws<TaskCanceledException>(() => readAfter.GetAwaiter().GetResult());
        Assert.Equal(cts.Token, e2.CancellationToken);
        Assert.NotSame(e1, e2);

        // A second read: a signal's wait may be read again (each throwing read gets the token); a pooled combinator's or a
        // tick wait's use is read once, and the second read is the await-once error.
        Assert.Equal(cts.Token, Assert.Throws<TaskCanceledException>(() => readTwice.GetAwaiter().GetResult()).CancellationToken);
        if (kind <= 1)
        {
            Assert.Equal(cts.Token, Assert.Throws<TaskCanceledException>(() => readTwice.GetAwaiter().GetResult()).CancellationToken);
        }
        else
        {
            Assert.Throws<InvalidOperationException>(() => readTwice.GetAwaiter().GetResult());
        }
        GC.KeepAlive((k1, k2, k3, k4, k5, k6, k7, k8, k9));
    }

    private static async SpindleTask Awaits(SpindleTask task) => await task;

    /// <summary>A forgotten wait that is cancelled lazily is not reported as an unobserved exception, as before.</summary>
    [Theory]
    [MemberData(nameof(AllKinds))]
    public void AForgottenCanceledWait_IsNotReported(int kind)
    {
        var reports = UnobservedReports.Observe(static e => e is OperationCanceledException, () =>
        {
            using var cts = new CancellationTokenSource();
            Start(kind, cts.Token, out object before).Forget();
            cts.Cancel();
            using var cts2 = new CancellationTokenSource();
            SpindleTask after = Start(kind, cts2.Token, out object keep);
            cts2.Cancel();
            after.Forget(); // forgotten once completed
            GC.KeepAlive((before, keep));
        });
        Assert.Empty(reports);
    }

    /// <summary>
    /// A signal's wait keeps the token that cancelled it only until the next wait starts: the signal does not keep the
    /// caller's <see cref="CancellationTokenSource"/> alive after that.
    /// </summary>
    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public void ASignal_LetsGoOfTheCancellingToken_AtItsNextWait(bool timed)
    {
        var signal = new Signal();
        WeakReference source = CancelAWait(signal, timed);
        signal.Set();
        Assert.True(signal.WaitAsync().IsCompleted); // the next wait: takes the set
        GC.Collect();
        GC.WaitForPendingFinalizers();
        GC.Collect();
        Assert.False(source.IsAlive, "the signal still keeps the token source of its cancelled wait");
    }

    [System.Runtime.CompilerServices.MethodImpl(System.Runtime.CompilerServices.MethodImplOptions.NoInlining)]
    private static WeakReference CancelAWait(Signal signal, bool timed)
    {
        var cts = new CancellationTokenSource();
        SpindleTask wait = timed ? signal.WaitAsync(TimeSpan.FromSeconds(60), cts.Token) : signal.WaitAsync(cts.Token);
        cts.Cancel();
        Assert.Equal(cts.Token, Assert.Throws<TaskCanceledException>(() => wait.GetAwaiter().GetResult()).CancellationToken);
        return new WeakReference(cts);
    }

    /// <summary>
    /// A wait asked for with a token already cancelled (<c>FromCanceled</c>, and the signal's and <c>Spindle.Run</c>'s paths
    /// that return it): a suppressed await builds no exception (224 bytes a wait before, now the completed source alone);
    /// a throwing read gets a <see cref="TaskCanceledException"/> with the token, and every read of the task the same one.
    /// </summary>
    [Theory]
    [InlineData(0)]
    [InlineData(1)]
    [InlineData(2)]
    [InlineData(3)]
    [InlineData(4)]
    public void AWaitWithATokenAlreadyCancelled_BuildsNoExceptionForASuppressedAwait(int kind)
    {
        const int N = 512;
        var signal = new Signal();
        using var cts = new CancellationTokenSource();
        cts.Cancel();
        SpindleTask Make() => kind switch
        {
            0 => SpindleTask.FromCanceled(cts.Token),
            1 => SpindleTask.FromCanceled<int>(cts.Token),
            2 => signal.WaitAsync(cts.Token),
            3 => signal.WaitAsync(TimeSpan.FromSeconds(60), cts.Token),
            _ => Spindle.Run(static () => { }, cts.Token),
        };
        long fewest = long.MaxValue;
        int canceled = 0;
        for (int round = 0; round < 6; round++)
        {
            long before = GC.GetAllocatedBytesForCurrentThread();
            for (int i = 0; i < N; i++)
            {
                if (Make().SuppressCancellationThrow().GetAwaiter().GetResult())
                {
                    canceled++;
                }
            }
            fewest = Math.Min(fewest, GC.GetAllocatedBytesForCurrentThread() - before);
        }
        Assert.Equal(6 * N, canceled);
        Assert.True(fewest < N * 64, $"{N} suppressed awaits of waits started with a cancelled token allocated {fewest} bytes ({fewest / N} per wait)");

        SpindleTask thrown = Make();
        Assert.Equal(SpindleTaskStatus.Canceled, thrown.Status);
        var e1 = Assert.Throws<TaskCanceledException>(() => thrown.GetAwaiter().GetResult());
        Assert.Equal(cts.Token, e1.CancellationToken);
        Assert.Same(e1, Assert.Throws<TaskCanceledException>(() => thrown.GetAwaiter().GetResult())); // read again: the same one
        Assert.True(thrown.SuppressCancellationThrow().GetAwaiter().GetResult());
        Assert.False(signal.HasWaiter);
    }
}

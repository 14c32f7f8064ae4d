using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Linq;
using System.Runtime.CompilerServices;
using System.Runtime.ExceptionServices;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// The throw of a lazily built cancellation, decided in one place (<c>LazyCancellation.ToThrow</c>, <c>docs/decisions.md</c>
/// section 43): every kind of source a token cancels lazily throws the exception its read has just built as it is, not
/// through the dispatch info captured for it (which restores nothing, and costs a restore and a frame of trace), with the
/// token and a trace that shows the reader; a read of the cancellation as a value never throws; and an
/// <see cref="OperationCanceledException"/> a user gave is thrown through its dispatch info, the same object each time,
/// with the trace it had. A promise's <c>TrySetCanceled</c> is lazy too, and its <c>Reset</c> lets go of the token.
/// </summary>
[Collection(SequentialCollection.Name)] // holds the workers (a run cancelled while queued) and measures allocations
public sealed class LazyCancellationThrowTests
{
    private const int Kinds = 9;

    private static readonly string[] s_names = ["Delay", "frame wait", "Run", "WhenAll", "WhenAny", "periodic timer", "FromCanceled", "Signal", "Promise"];

    public static TheoryData<int> AllKinds()
    {
        var data = new TheoryData<int>();
        for (int kind = 0; kind < Kinds; kind++)
        {
            data.Add(kind);
        }
        return data;
    }

    /// <summary>Starts <paramref name="count"/> waits of <paramref name="kind"/> on <paramref name="cts"/>'s token and cancels them.</summary>
    private static SpindleTask[] StartAndCancel(int kind, int count, CancellationTokenSource cts, List<IDisposable> dispose)
    {
        var tasks = new SpindleTask[count];
        CancellationToken token = cts.Token;
        HoldWorkers? held = kind == 2 ? new HoldWorkers() : null; // a run cancelled while it is queued
        var promises = kind == 8 ? new Promise[count] : null;
        var loop = kind == 1 ? new FrameLoop() : null;
        loop?.RunFrame();
        for (int i = 0; i < count; i++)
        {
            switch (kind)
            {
                case 0: tasks[i] = Spindle.Delay(60_000, token); break;
                case 1: tasks[i] = loop!.NextFrame(token); break;
                case 2: tasks[i] = Spindle.Run(static () => { }, token); break;
                case 3: tasks[i] = SpindleTask.WhenAll([new Promise().Task], token); break;
                case 4: tasks[i] = SpindleTask.WhenAny([new Promise().Task], token); break;
                case 5:
                    var timer = new SpindlePeriodicTimer(TimeSpan.FromSeconds(60));
                    dispose.Add(timer);
                    tasks[i] = timer.WaitForNextTickAsync(token);
                    break;
                case 6: break; // made after the cancellation
                case 7: tasks[i] = new Signal().WaitAsync(token); break;
                default:
                    promises![i] = new Promise();
                    tasks[i] = promises[i].Task;
                    break;
            }
        }
        cts.Cancel();
        for (int i = 0; i < count; i++)
        {
            if (kind == 6)
            {
                tasks[i] = SpindleTask.FromCanceled(token);
            }
            else if (kind == 8)
            {
                Assert.True(promises![i].TrySetCanceled(token));
            }
        }
        held?.Dispose();
        return tasks;
    }

    [Theory]
    [MemberData(nameof(AllKinds))]
    public async Task AThrowingRead_OfALazyCancellation_AllocatesNoMoreThanAFreshExceptionThrownOnce(int kind)
    {
        await TestUtil.LeaveSpindleWorkers(); // HoldWorkers must be created off them
        const int N = 256;
        long fewestReads = long.MaxValue;
        long fewestFresh = long.MaxValue;
        int frames = 0;
        var dispose = new List<IDisposable>();
        try
        {
            for (int round = 0; round < 6; round++)
            {
                using var cts = new CancellationTokenSource();
                SpindleTask[] tasks = StartAndCancel(kind, N, cts, dispose);
                CancellationToken token = cts.Token;
                if (frames == 0)
                {
                    // The frames from the reader down to the source's throw (hidden ones too): the fresh exception below
                    // crosses as many, since an exception's trace grows, and allocates, with each frame it passes.
                    frames = ReadersFrames(ReadAndCatch(tasks[0], token));
                    // One when the JIT inlined the whole read into the reader (the throw is the source's read's own,
                    // LazyCancellation.ToThrow, section 44), which a warm Run's may be.
                    Assert.True(frames >= 1, $"{s_names[kind]}: the read's throw crossed {frames} frames");
                    tasks[0] = default;
                }

                long before = GC.GetAllocatedBytesForCurrentThread();
                for (int i = round == 0 ? 1 : 0; i < N; i++)
                {
                    ReadAndCatch(tasks[i], token);
                }
                long reads = GC.GetAllocatedBytesForCurrentThread() - before;
                fewestReads = Math.Min(fewestReads, reads / (round == 0 ? N - 1 : N));

                before = GC.GetAllocatedBytesForCurrentThread();
                for (int i = 0; i < N; i++)
                {
                    ThrowFreshAndCatch(frames - 2, token);
                }
                fewestFresh = Math.Min(fewestFresh, (GC.GetAllocatedBytesForCurrentThread() - before) / N);
            }
        }
        finally
        {
            dispose.ForEach(d => d.Dispose());
        }
        // Before, each kind but Signal threw through the dispatch info (a restore and one more frame): 536 B against 480
        // for a fresh exception at the same depth, or 832 against 536, as the depth fell.
        Assert.True(fewestReads <= fewestFresh + 8,
            $"{s_names[kind]}: a throwing read of its lazy cancellation allocated {fewestReads} B, a fresh exception (with its dispatch info) thrown once from as deep {fewestFresh} B ({frames} frames): the read still throws through the dispatch info");
    }

    /// <summary>
    /// The frames <paramref name="e"/>'s throw crossed from the reader down to the source (hidden ones too), bar the one a
    /// rethrow through a dispatch info adds (<see cref="ExceptionDispatchInfo.Throw()"/>'s own), which is what a
    /// read need not cross.
    /// </summary>
    private static int ReadersFrames(Exception e)
    {
        int count = 0;
        foreach (StackFrame frame in new StackTrace(e, false).GetFrames())
        {
            if (frame.GetMethod()?.DeclaringType != typeof(ExceptionDispatchInfo))
            {
                count++;
            }
        }
        return count;
    }

    /// <summary>True if <paramref name="e"/> was thrown through a dispatch info (its <see cref="ExceptionDispatchInfo.Throw()"/> is among the frames it crossed).</summary>
    private static bool ThrownThroughADispatchInfo(Exception e)
        => new StackTrace(e, false).GetFrames().Any(f => f.GetMethod()?.DeclaringType == typeof(ExceptionDispatchInfo));

    /// <summary>Reads <paramref name="wait"/> with a throw, as an await does; returns what it caught (checked for the token). Also <see cref="LazyCancellationLeftoversTests"/>' untyped read.</summary>
    [MethodImpl(MethodImplOptions.NoInlining)]
    internal static Exception ReadAndCatch(SpindleTask wait, CancellationToken token)
    {
        try
        {
            wait.GetAwaiter().GetResult();
        }
        catch (TaskCanceledException ex) when (ex.CancellationToken == token)
        {
            return ex;
        }
        throw new InvalidOperationException("the read did not throw the cancellation with its token");
    }

    /// <summary>What a lazy cancellation's read does at best: builds the exception and its dispatch info, and throws it once, <paramref name="depth"/> calls down (here, for -1).</summary>
    [MethodImpl(MethodImplOptions.NoInlining)]
    private static void ThrowFreshAndCatch(int depth, CancellationToken token)
    {
        try
        {
            if (depth < 0)
            {
                throw ExceptionDispatchInfo.Capture(new TaskCanceledException("A task was canceled.", null, token)).SourceException; // from this frame
            }
            ThrowFresh(depth, token);
        }
        catch (TaskCanceledException ex) when (ex.CancellationToken == token)
        {
        }
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    private static void ThrowFresh(int depth, CancellationToken token)
    {
        if (depth <= 0)
        {
            throw ExceptionDispatchInfo.Capture(new TaskCanceledException("A task was canceled.", null, token)).SourceException;
        }
        ThrowFresh(depth - 1, token);
    }

    [Theory]
    [MemberData(nameof(AllKinds))]
    public async Task TheThrownCancellation_HasTheToken_AndTheReadersTrace_AndEachReadItsOwn(int kind)
    {
        await TestUtil.LeaveSpindleWorkers();
        var dispose = new List<IDisposable>();
        try
        {
            using var cts = new CancellationTokenSource();
            SpindleTask[] tasks = StartAndCancel(kind, 2, cts, dispose);
            Exception first = ReadAndCatch(tasks[0], cts.Token);
            Exception second = ReadAndCatch(tasks[1], cts.Token);
            Assert.NotSame(first, second);
            Assert.IsType<TaskCanceledException>(first);
            // The exception the read has just built is thrown as it is (before, all but a signal's wait rethrew it).
            Assert.False(ThrownThroughADispatchInfo(first), $"{s_names[kind]}: its lazy cancellation was rethrown through a dispatch info");
            Assert.False(ThrownThroughADispatchInfo(second), $"{s_names[kind]}: its lazy cancellation was rethrown through a dispatch info");
            foreach (Exception e in new[] { first, second })
            {
                Assert.Contains(nameof(ReadAndCatch), e.StackTrace, StringComparison.Ordinal);
                Assert.DoesNotContain("End of stack trace from previous location", e.StackTrace, StringComparison.Ordinal);
#if !SPINDLE_NETSTANDARD_BUILD
                // Spindle's frames are hidden (StackTraceHidden, which the runtime honours for the .NET builds only).
                Assert.DoesNotContain("SpindleLib.", e.StackTrace!.Replace("SpindleLib.Tests.", "", StringComparison.Ordinal), StringComparison.Ordinal);
#endif
            }
        }
        finally
        {
            dispose.ForEach(d => d.Dispose());
        }
    }

    [Theory]
    [MemberData(nameof(AllKinds))]
    public async Task AValueRead_NeverThrows_AndATaskFromFromCanceledOrAPromise_IsReadAgainWithATrace(int kind)
    {
        await TestUtil.LeaveSpindleWorkers();
        var dispose = new List<IDisposable>();
        try
        {
            using var cts = new CancellationTokenSource();
            SpindleTask[] tasks = StartAndCancel(kind, 2, cts, dispose);
            Assert.True(await tasks[0].SuppressCancellationThrow());
            if (kind is 6 or 8)
            {
                // Read again (a completed promise's use, a FromCanceled task): still the cancellation, with its token,
                // thrown as its own after the value read; a FromCanceled task's readers share the one it keeps.
                Exception a = ReadAndCatch(tasks[0], cts.Token);
                Exception b = ReadAndCatch(tasks[0], cts.Token);
                Assert.Contains(nameof(ReadAndCatch), a.StackTrace, StringComparison.Ordinal);
                Assert.Contains(nameof(ReadAndCatch), b.StackTrace, StringComparison.Ordinal);
                Assert.DoesNotContain("End of stack trace from previous location", b.StackTrace, StringComparison.Ordinal);
                if (kind == 6)
                {
                    Assert.Same(a, b);
                }
            }
            Assert.True(tasks[1].SuppressCancellationThrow().GetAwaiter().GetResult());
        }
        finally
        {
            dispose.ForEach(d => d.Dispose());
        }
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    private static OperationCanceledException ThrownByTheUser(CancellationToken token)
    {
        try
        {
            throw new OperationCanceledException("the user's", token);
        }
        catch (OperationCanceledException ex)
        {
            return ex;
        }
    }

    [Fact]
    public void AUsersCancellation_IsThrownThroughItsDispatchInfo_TheSameObjectEachTime_WithItsOwnTrace()
    {
        using var cts = new CancellationTokenSource();
        cts.Cancel();
        OperationCanceledException given = ThrownByTheUser(cts.Token);

        var promise = new Promise();
        Assert.True(promise.TrySetException(given));
        var typed = new Promise<int>();
        Assert.True(typed.TrySetException(given));
        SpindleTask fromException = SpindleTask.FromException(given);
        foreach (SpindleTask task in new[] { promise.Task, (SpindleTask)typed.Task, fromException })
        {
            for (int read = 0; read < 3; read++)
            {
                var thrown = Assert.Throws<OperationCanceledException>(() => task.GetAwaiter().GetResult());
                Assert.Same(given, thrown);
                Assert.True(ThrownThroughADispatchInfo(thrown));
                // Through the dispatch info: the user's own throw stays in the trace, the read's is added after it.
                Assert.Contains(nameof(ThrownByTheUser), thrown.StackTrace, StringComparison.Ordinal);
                Assert.Contains("End of stack trace from previous location", thrown.StackTrace, StringComparison.Ordinal);
            }
        }
    }

    [Fact]
    public void AUsersCancellation_ThrownRightAfterALazyOneWasBuilt_KeepsItsDispatchInfo()
    {
        // A quiet read (a combinator's input) builds a cancellation and does not throw it; the next failure this thread
        // throws is a user's, which must not be taken for the one just built.
        using var cts = new CancellationTokenSource();
        SpindleTask delay = Spindle.Delay(60_000, cts.Token);
        SpindleTask all = SpindleTask.WhenAll([delay]);
        cts.Cancel();
        OperationCanceledException given = ThrownByTheUser(cts.Token);
        var promise = new Promise();
        promise.TrySetException(given);
        Assert.Equal(SpindleTaskStatus.Canceled, all.Status);
        var thrown = Assert.Throws<OperationCanceledException>(() => promise.Task.GetAwaiter().GetResult());
        Assert.Same(given, thrown);
        Assert.Contains(nameof(ThrownByTheUser), thrown.StackTrace, StringComparison.Ordinal);
        var ofAll = Assert.Throws<TaskCanceledException>(() => all.GetAwaiter().GetResult());
        Assert.Equal(cts.Token, ofAll.CancellationToken);
    }

    [Fact]
    public void APromisesCancellation_BuildsNoException_UntilAReaderThrows()
    {
        const int N = 512;
        var promises = new Promise[N];
        var typed = new Promise<int>[N];
        for (int i = 0; i < N; i++)
        {
            promises[i] = new Promise();
            typed[i] = new Promise<int>();
        }
        long fewest = long.MaxValue;
        for (int round = 0; round < 4; round++)
        {
            using var cts = new CancellationTokenSource();
            cts.Cancel();
            for (int i = 0; i < N; i++)
            {
                promises[i].Reset();
                typed[i].Reset();
            }
            long before = GC.GetAllocatedBytesForCurrentThread();
            for (int i = 0; i < N; i++)
            {
                promises[i].TrySetCanceled(cts.Token);
                typed[i].TrySetCanceled(cts.Token);
            }
            fewest = Math.Min(fewest, GC.GetAllocatedBytesForCurrentThread() - before);
            for (int i = 0; i < N; i++)
            {
                Assert.Equal(SpindleTaskStatus.Canceled, promises[i].Task.Status);
                Assert.True(promises[i].Task.SuppressCancellationThrow().GetAwaiter().GetResult());
                var ex = Assert.Throws<TaskCanceledException>(() => typed[i].Task.GetAwaiter().GetResult());
                Assert.Equal(cts.Token, ex.CancellationToken);
            }
        }
        // Before, each TrySetCanceled built a TaskCanceledException and its dispatch info: 192 B.
        Assert.True(fewest < 2 * N * 8, $"cancelling {2 * N} promises allocated {fewest} B ({fewest / (2 * N)} per promise)");
    }

    [Fact]
    public void APromisesReset_LetsGoOfTheToken_AndTheNextUseHasItsOwn()
    {
        var promise = new Promise<int>();
        WeakReference first = CancelReadAndReset(promise);
        GC.Collect();
        GC.WaitForPendingFinalizers();
        GC.Collect();
        Assert.False(first.IsAlive, "the promise kept the cancelled use's token (and its source) after Reset");

        using var second = new CancellationTokenSource();
        Assert.True(promise.TrySetCanceled(second.Token));
        Assert.Equal(second.Token, Assert.Throws<TaskCanceledException>(() => promise.Task.GetAwaiter().GetResult()).CancellationToken);
        promise.Reset();
        Assert.True(promise.TrySetCanceled());
        Assert.Equal(CancellationToken.None, Assert.Throws<TaskCanceledException>(() => promise.Task.GetAwaiter().GetResult()).CancellationToken);
        promise.Reset();
        promise.SetResult(7);
        Assert.Equal(7, promise.Task.GetAwaiter().GetResult());

        [MethodImpl(MethodImplOptions.NoInlining)]
        static WeakReference CancelReadAndReset(Promise<int> promise)
        {
            var cts = new CancellationTokenSource();
            cts.Cancel();
            Assert.True(promise.TrySetCanceled(cts.Token));
            Assert.False(promise.TrySetCanceled(cts.Token));
            Assert.Equal(cts.Token, Assert.Throws<TaskCanceledException>(() => promise.Task.GetAwaiter().GetResult()).CancellationToken);
            promise.Reset();
            return new WeakReference(cts);
        }
    }
}

using System;
using System.Diagnostics;
using System.Linq;
using System.Runtime.CompilerServices;
using System.Runtime.ExceptionServices;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// What stop 46 left of the lazily built cancellation (<c>docs/decisions.md</c> sections 43 and 44): a combinator awaited as
/// an untyped task threw its cancellation across one frame more than awaited as a typed one; a forgotten task's observer
/// built a lazily kept cancellation only to learn it was no fault; a periodic timer's wait ended by a late claim or a
/// combinator's let-go was canceled eagerly; and a read that built its cancellation and then met a stale token left it
/// recorded on its thread.
/// </summary>
[Collection(SequentialCollection.Name)] // measures allocations, holds the workers, sets process-wide hooks, forces collections
public sealed class LazyCancellationLeftoversTests
{
    private static readonly string[] s_reads =
    [
        "WhenAll, untyped", "WhenAll<T>", "WhenAny, awaited untyped", "WhenAny", "Run, untyped", "Run<T>",
        "periodic wait, awaited untyped", "periodic wait", "Delay",
    ];

    public static TheoryData<int> Reads()
    {
        var data = new TheoryData<int>();
        for (int read = 0; read < s_reads.Length; read++)
        {
            data.Add(read);
        }
        return data;
    }

    /// <summary>
    /// A lazily built cancellation is thrown at the frame of the source's read that the awaiter calls, and crosses no
    /// other frame of the source's and none of <c>LazyCancellation</c>'s, whatever the JIT inlined (fresh, and after
    /// warm-up). Before, the read called the helper that threw (<c>LazyCancellation.Throw</c>), which relied on being inlined:
    /// a combinator awaited as an untyped task read through <c>IValueTaskSource.GetResult</c>, which called the typed
    /// <c>GetResult</c>; the JIT inlined the read into it and ran out of its inlining budget before the helper, so the
    /// throw crossed the helper's frame too (Release, warm: 3 frames against a delay's 2, 536 B a caught cancellation against
    /// 370); and fresh (not yet optimized) code crossed the helper and the typed read under the untyped one.
    /// </summary>
    [Theory]
    [MemberData(nameof(Reads))]
    public async Task ALazyCancellation_IsThrownAtTheSourcesOwnRead_CrossingNoHelperFrame(int read)
    {
        await TestUtil.LeaveSpindleWorkers(); // HoldWorkers must be created off them
        var timers = new System.Collections.Generic.List<SpindlePeriodicTimer>();
        try
        {
            for (int round = 0; round < 3; round++)
            {
                const int N = 40; // beyond the call count at which the runtime optimizes a method (30)
                using var cts = new CancellationTokenSource();
                CancellationToken token = cts.Token;
                var untyped = new SpindleTask[N];
                var typedInts = new SpindleTask<int>[N];
                var typedArrays = new SpindleTask<int[]>[N];
                var typedBools = new SpindleTask<bool>[N];
                using (read is 4 or 5 ? new HoldWorkers() : null) // a run cancelled while it is queued
                {
                    for (int i = 0; i < N; i++)
                    {
                        switch (read)
                        {
                            case 0: untyped[i] = SpindleTask.WhenAll([new Promise().Task], token); break;
                            case 1: typedArrays[i] = SpindleTask.WhenAll<int>([new Promise<int>().Task], token); break;
                            case 2: untyped[i] = SpindleTask.WhenAny([new Promise().Task], token); break;
                            case 3: typedInts[i] = SpindleTask.WhenAny([new Promise().Task], token); break;
                            case 4: untyped[i] = Spindle.Run(static () => { }, token); break;
                            case 5: typedInts[i] = Spindle.Run(static () => 1, token); break;
                            case 6:
                            case 7:
                                var timer = new SpindlePeriodicTimer(TimeSpan.FromMinutes(10));
                                timers.Add(timer);
                                if (read == 6)
                                {
                                    untyped[i] = timer.WaitForNextTickAsync(token);
                                }
                                else
                                {
                                    typedBools[i] = timer.WaitForNextTickAsync(token);
                                }
                                break;
                            default: untyped[i] = Spindle.Delay(600_000, token); break;
                        }
                    }
                    cts.Cancel();
                }
                for (int i = 0; i < N; i++)
                {
                    Exception thrown = read switch
                    {
                        1 => ReadTyped(typedArrays[i], token),
                        3 or 5 => ReadTyped(typedInts[i], token),
                        7 => ReadTyped(typedBools[i], token),
                        _ => LazyCancellationThrowTests.ReadAndCatch(untyped[i], token),
                    };
                    StackFrame[] frames = new StackTrace(thrown, false).GetFrames();
                    Type source = read switch
                    {
                        < 4 => typeof(Combinator<>),
                        < 6 => typeof(RunItem<>),
                        < 8 => typeof(PeriodicTimerSource),
                        _ => typeof(TimerNode),
                    };
                    int helpers = frames.Count(f => f.GetMethod()?.DeclaringType == typeof(LazyCancellation));
                    int sources = frames.Count(f => f.GetMethod()?.DeclaringType is { } t && (t.IsGenericType ? t.GetGenericTypeDefinition() : t) == source);
                    Assert.True(helpers == 0 && sources <= 1,
                        $"{s_reads[read]} (round {round}, read {i}): its cancellation crossed {helpers} frame(s) of LazyCancellation's and {sources} of the source's:\n{Describe(thrown)}");
                    Assert.Contains(read is 1 or 3 or 5 or 7 ? nameof(ReadTyped) : nameof(LazyCancellationThrowTests.ReadAndCatch), thrown.StackTrace, StringComparison.Ordinal); // the trace a user sees shows the reader
                }
                Thread.Sleep(150); // lets the runtime optimize the reads between rounds
            }
        }
        finally
        {
            timers.ForEach(t => t.Dispose());
        }
    }

    private static string Describe(Exception e)
    {
        var text = new System.Text.StringBuilder();
        foreach (StackFrame frame in new StackTrace(e, false).GetFrames())
        {
            text.Append("  ").Append(frame.GetMethod()?.DeclaringType?.Name).Append("::").Append(frame.GetMethod()?.Name).Append('\n');
        }
        return text.ToString();
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    private static Exception ReadTyped<T>(SpindleTask<T> wait, CancellationToken token)
    {
        try
        {
            wait.GetAwaiter().GetResult();
        }
        catch (TaskCanceledException ex) when (ex.CancellationToken == token)
        {
            return ex;
        }
        throw new InvalidOperationException("the typed read did not throw the cancellation with its token");
    }

    public static TheoryData<bool> BeforeOrAfterTheForget() => new() { true, false };

    /// <summary>
    /// <c>Forget()</c> of a promise's task that a token cancels (after the forget: the observer reads it when it completes;
    /// before: the forget reads it at the call). The observer reports faults only, and a cancellation is none; it read the
    /// promise's cancellation with its exception built (a <see cref="TaskCanceledException"/> and its dispatch info) only to
    /// drop it. It now asks for the cancellation as a value and builds nothing.
    /// </summary>
    [Theory]
    [MemberData(nameof(BeforeOrAfterTheForget))]
    public void AForgottenPromise_CanceledByAToken_BuildsNoException(bool canceledFirst)
    {
        const int N = 1_000;
        using var cts = new CancellationTokenSource();
        cts.Cancel();
        CancellationToken token = cts.Token;
        var promises = new Promise[N];
        for (int i = 0; i < N; i++)
        {
            promises[i] = new Promise(); // made beforehand: only the forget and the cancellation are measured
        }
        using UnobservedReports reports = UnobservedReports.Start(UnobservedReports.Own.CanceledBy(() => token));
        long fewest = long.MaxValue;
        for (int round = 0; round < 3; round++) // the first round may grow the observers' pool
        {
            long before = GC.GetAllocatedBytesForCurrentThread();
            for (int i = 0; i < N; i++)
            {
                Promise promise = promises[i];
                if (canceledFirst)
                {
                    Assert.True(promise.TrySetCanceled(token));
                    promise.Task.Forget();
                }
                else
                {
                    promise.Task.Forget();
                    Assert.True(promise.TrySetCanceled(token)); // the observer runs here, inline
                }
            }
            fewest = Math.Min(fewest, GC.GetAllocatedBytesForCurrentThread() - before);
            foreach (Promise promise in promises)
            {
                promise.Reset();
            }
        }
        Assert.True(fewest < N * 8L, $"{fewest / (double)N:F1} B per forgotten promise canceled by a token: its cancellation was built to be dropped");
        Assert.Empty(reports.Reports); // still no fault
    }

    public static TheoryData<bool> AsAValueOrThrown() => new() { true, false };

    /// <summary>
    /// A periodic timer's wait whose token is cancelled just after its tick fired, while the tick's continuation is still
    /// queued (the workers are held): the wait ends when that continuation arrives (a two-party handshake), and it ended
    /// with an exception built at once. Now it keeps the token as a token's own claim does: a read as a value gets the
    /// shared "canceled" (nothing built), a throwing read the token.
    /// </summary>
    [Theory]
    [MemberData(nameof(AsAValueOrThrown))]
    public async Task APeriodicWait_CanceledJustAfterItsTickFired_KeepsItsCancellationLazily(bool asValue)
    {
        await TestUtil.LeaveSpindleWorkers(); // HoldWorkers must be created off them
        using var wheel = new TimerWheel(TimeProvider.System); // its own thread fires, and dispatches to the workers
        for (int attempt = 0; ; attempt++)
        {
            Assert.True(attempt < 50, "the token's claim never came after the tick fired and before its continuation ran");
            using var timer = new SpindlePeriodicTimer(TimeSpan.FromMilliseconds(2), wheel);
            using var cts = new CancellationTokenSource();
            SpindleTask<bool> wait;
            bool late;
            using (new HoldWorkers())
            {
                wait = timer.WaitForNextTickAsync(cts.Token);
                TestUtil.SpinUntil(() => wheel.PendingCount == 0); // fired: its continuation waits for a worker
                cts.Cancel();
                late = !wait.IsCompleted; // a claim before the firing would have completed the wait here, inline
            }
            if (!late)
            {
                await wait.SuppressCancellationThrow();
                continue;
            }
            TestUtil.SpinUntil(() => wait.IsCompleted);
            Assert.Equal(SpindleTaskStatus.Canceled, wait.Status);
            AssertKeptLazily(wait, asValue, cts.Token);
            return;
        }
    }

    /// <summary>
    /// A combinator lets go of a periodic timer's wait it has published but not yet registered on (as a WhenAny decided
    /// meanwhile does, <c>LetGoDuringRegistrationTests</c>): the wait ends as canceled by no token, for the registrant to
    /// read and drop. It was canceled with its exception built at once; now lazily.
    /// </summary>
    [Theory]
    [MemberData(nameof(AsAValueOrThrown))]
    public void APeriodicWait_LetGoBeforeItsWaiterRegistered_KeepsItsCancellationLazily(bool asValue)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var timer = new SpindlePeriodicTimer(TimeSpan.FromMilliseconds(10), wheel);
        using var cts = new CancellationTokenSource();
        SpindleTask<bool> wait = timer.WaitForNextTickAsync(cts.Token);
        Assert.Equal(DetachOutcome.NotWaiting, ((IDetachableSource)wait._source!).TryDetach(new NeverRegistered()));
        Assert.Equal(SpindleTaskStatus.Canceled, wait.Status);
        AssertKeptLazily(wait, asValue, default);
        Assert.Equal(0, wheel.PendingCount);
    }

    /// <summary>Reads <paramref name="wait"/>'s cancellation as a value (nothing may be built) or with a throw (it must carry <paramref name="token"/>).</summary>
    private static void AssertKeptLazily(SpindleTask<bool> wait, bool asValue, CancellationToken token)
    {
        if (!asValue)
        {
            var thrown = Assert.Throws<TaskCanceledException>(() => wait.GetAwaiter().GetResult());
            Assert.Equal(token, thrown.CancellationToken);
            return;
        }
        ISpindleSource<bool> source = wait._source!;
        Assert.True(LazyCancellation.AskForValue(source, wait._token));
        ExceptionDispatchInfo? failure;
        try
        {
            failure = ((IQuietSource)source).ReadQuietly(wait._token);
        }
        finally
        {
            LazyCancellation.EndAsking();
        }
        Assert.NotNull(failure);
        Assert.True(ReferenceEquals(LazyCancellation.CanceledValue, failure),
            $"the wait's cancellation was built ({failure!.SourceException.GetType().Name}) before anyone asked for it");
    }

    private sealed class NeverRegistered : DirectWaiter
    {
        public override void MoveNext() => throw new InvalidOperationException("a waiter that was never registered was run");

        public override void Execute() => MoveNext();

        private protected override bool ExchangeRunOwed(bool owed) => throw new InvalidOperationException("a waiter that was never registered was registered on a user's source");
    }

#if DEBUG
    /// <summary>
    /// A read that has seen its promise canceled, while (misuse) the owner resets it and cancels its next use with another
    /// token: the read builds that cancellation, finds its token stale, and throws the await-once error instead. The thread
    /// then idles. Before, its record of the last build (kept for the throw that never came) held the exception, its token
    /// and the token's source (with what is registered on it) until the thread's next build or throw.
    /// </summary>
    [Fact]
    public void AReadThatBuildsAndThenMeetsAStaleToken_KeepsNothingAliveOnItsThread()
    {
        Assert.False(TestUtil.StaysAliveWhileItsThreadIdles(BuildThenMeetAStaleToken), "the next use's token source stays alive, held by the reading thread's record of a build it never threw");
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    private static WeakReference BuildThenMeetAStaleToken()
    {
        var first = new CancellationTokenSource();
        var second = new CancellationTokenSource();
        first.Cancel();
        second.Cancel();
        var promise = new Promise();
        LazyCancellationReviewTests.ReadRacingAResetAndTheNextCancellation(promise, first.Token, second.Token);
        promise.Reset(); // the promise lets go of the second token: only the thread's record could still hold it
        return new WeakReference(second);
    }
#endif

    /// <summary>
    /// The review of stop 47: a cancellation built once and kept for every reader (a task from <c>FromCanceled</c>, a
    /// <c>Preserve()</c> of a cancelled delay) is thrown as built only by the read that has just built it on its thread
    /// (<c>LazyCancellation.ToThrow</c>); every later read throws it through its dispatch info. Each reader must see a
    /// trace of its own that ends in its own frame, not one that grows with the readers before it (a kept exception thrown
    /// as built by one reader and rethrown through a dispatch info captured after a throw would carry the earlier trace).
    /// </summary>
    [Fact]
    public async Task AKeptCancellationReadByManyReaders_GivesEachATraceOfItsOwn_ThatDoesNotGrow()
    {
        using var cts = new CancellationTokenSource();
        cts.Cancel();
        var delayed = new CancellationTokenSource();
        SpindleTask preservedDelay = Spindle.Delay(TimeSpan.FromSeconds(30), delayed.Token).Preserve();
        delayed.Cancel();
        TestUtil.SpinUntil(() => preservedDelay.Status == SpindleTaskStatus.Canceled);
        foreach ((string name, SpindleTask task) in new[] { ("FromCanceled", SpindleTask.FromCanceled(cts.Token)), ("Preserve of a delay", preservedDelay) })
        {
            Exception? first = null;
            int firstLines = 0;
            for (int reader = 0; reader < 4; reader++)
            {
                Exception thrown = reader % 2 == 0 ? await ReaderA(task) : await ReaderB(task);
                first ??= thrown;
                Assert.Same(first, thrown); // kept: one object for every reader
                string trace = thrown.StackTrace ?? "";
                int lines = trace.Split('\n').Length;
                if (reader == 0)
                {
                    firstLines = lines;
                }
                Assert.True(lines <= firstLines + 2, $"{name}, reader {reader}: the trace grew from {firstLines} to {lines} lines:\n{trace}");
                Assert.Contains(reader % 2 == 0 ? nameof(ReaderA) : nameof(ReaderB), trace, StringComparison.Ordinal);
                Assert.DoesNotContain(reader % 2 == 0 ? nameof(ReaderB) : nameof(ReaderA), trace, StringComparison.Ordinal);
                Assert.Equal(name == "FromCanceled" ? cts.Token : delayed.Token, ((OperationCanceledException)thrown).CancellationToken);
            }
        }
        delayed.Dispose();

        [MethodImpl(MethodImplOptions.NoInlining)]
        static async Task<Exception> ReaderA(SpindleTask task)
        {
            try
            {
                await task;
            }
            catch (OperationCanceledException e)
            {
                return e;
            }
            throw new InvalidOperationException("no cancellation");
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static async Task<Exception> ReaderB(SpindleTask task)
        {
            try
            {
                await task;
            }
            catch (OperationCanceledException e)
            {
                return e;
            }
            throw new InvalidOperationException("no cancellation");
        }
    }
}

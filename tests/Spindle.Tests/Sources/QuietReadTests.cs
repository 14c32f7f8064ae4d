using System;
using System.Collections.Concurrent;
using System.Linq;
using System.Runtime.CompilerServices;
using System.Runtime.ExceptionServices;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Sources;

/// <summary>
/// Readers that pass an outcome on (combinators, Preserve, task scopes, the observer of forgotten tasks) read a Spindle
/// source's failure without throwing it (<c>IQuietSource</c>): the failure is thrown once, at the await that reports it,
/// not once more inside Spindle for every faulted input. Counted with first-chance notifications of the tests' own
/// exception objects, so other tests' exceptions do not count. The UnobservedException event is process-wide: these
/// tests run alone.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class QuietReadTests
{
    /// <summary>Counts how often each of <paramref name="watched"/> is thrown (first chance) while <paramref name="body"/> runs.</summary>
    private static int Throws(Exception[] watched, Action body)
    {
        var set = new ConditionalWeakTable<Exception, object>();
        foreach (Exception e in watched)
        {
            set.Add(e, e);
        }
        return Throws(e => set.TryGetValue(e, out _), body);
    }

    /// <summary>Counts the exceptions thrown (first chance) while <paramref name="body"/> runs that <paramref name="watched"/> picks.</summary>
    private static int Throws(Func<Exception, bool> watched, Action body)
    {
        int count = 0;
        void OnFirstChance(object? sender, FirstChanceExceptionEventArgs args)
        {
            if (watched(args.Exception))
            {
                System.Threading.Interlocked.Increment(ref count);
            }
        }
        AppDomain.CurrentDomain.FirstChanceException += OnFirstChance;
        try
        {
            body();
        }
        finally
        {
            AppDomain.CurrentDomain.FirstChanceException -= OnFirstChance;
        }
        return count;
    }

    private static Exception[] Faults(int n) => Enumerable.Range(0, n).Select(i => (Exception)new InvalidOperationException("fault " + i)).ToArray();

    private static async SpindleTask<int> FailsAfter(Promise promise, Exception fault)
    {
        await promise.Task;
        ExceptionDispatchInfo.Throw(fault);
        return 0;
    }

    [Fact]
    public void WhenAll_OfPendingInputsThatFail_ThrowsOnlyAtTheAwait()
    {
        Exception[] faults = Faults(50);
        int throws = Throws(faults, () =>
        {
            // Async methods (pooled boxes) and promises, pending when the combinator registers on them.
            var promises = faults.Select(_ => new Promise<int>()).ToArray();
            var gates = faults.Select(_ => new Promise()).ToArray();
            SpindleTask<int>[] inputs = faults.Select((f, i) => i % 2 == 0 ? FailsAfter(gates[i], f) : promises[i].Task).ToArray();
            SpindleTask<int[]> all = SpindleTask.WhenAll(inputs, new WhenAllOptions { AggregateExceptions = true }, default);
            for (int i = 0; i < faults.Length; i++)
            {
                if (i % 2 == 0)
                {
                    gates[i].SetResult();
                }
                else
                {
                    promises[i].SetException(faults[i]);
                }
            }
            var e = Assert.Throws<AggregateException>(() => all.GetAwaiter().GetResult());
            Assert.Equal(faults, e.InnerExceptions); // every fault, in input order
        });
        // Each async method's fault is thrown once by its own body (the Throw above): 25. Nothing else: the promises' faults
        // were never thrown, and the combinator read all 50 without a throw.
        Assert.Equal(faults.Length / 2, throws);
    }

    [Fact]
    public void WhenAll_OfInputsThatFailedAlready_ThrowsOnlyTheFirstAtTheAwait()
    {
        Exception[] faults = Faults(20);
        int throws = Throws(faults, () =>
        {
            SpindleTask[] inputs = faults.Select(SpindleTask.FromException).ToArray();
            SpindleTask all = SpindleTask.WhenAll(inputs);
            Exception e = Assert.Throws<InvalidOperationException>(() => all.GetAwaiter().GetResult());
            Assert.Same(faults[0], e);
        });
        Assert.Equal(1, throws); // the first fault, at the await; the other 19 read quietly, not thrown
    }

    [Fact]
    public void WhenAny_WithAFaultedWinner_ThrowsItOnceAtTheAwait()
    {
        Exception[] faults = Faults(1);
        var winner = new Promise<int>();
        var loser = new Promise<int>();
        int throws = Throws(faults, () =>
        {
            SpindleTask<(int, int)> any = SpindleTask.WhenAny([winner.Task, loser.Task]);
            winner.SetException(faults[0]);
            Assert.Same(faults[0], Assert.Throws<InvalidOperationException>(() => any.GetAwaiter().GetResult()));
        });
        Assert.Equal(1, throws);
    }

    [Fact]
    public async Task Preserve_AndNestedCombinators_PassTheFaultOnWithoutThrowingIt()
    {
        Exception[] faults = Faults(2);
        var a = new Promise();
        var b = new Promise();
        SpindleTask preserved = default;
        int throws = Throws(faults, () =>
        {
            SpindleTask inner = SpindleTask.WhenAll([a.Task, b.Task], new WhenAllOptions { AggregateExceptions = true }, default);
            preserved = SpindleTask.WhenAll(inner).Preserve();
            a.SetException(faults[0]);
            b.SetException(faults[1]);
        });
        Assert.Equal(0, throws);
        // Read twice through the preserved task: the outer WhenAll rethrows the inner one's aggregate as it is.
        for (int i = 0; i < 2; i++)
        {
            var e = await Assert.ThrowsAsync<AggregateException>(async () => await preserved);
            Assert.Equal(faults, e.InnerExceptions);
        }
    }

    [Fact]
    public async Task TaskScope_CollectsAChildsFaultWithoutThrowingIt_AndRethrowsItOnceAtDisposal()
    {
        Exception[] faults = Faults(1);
        var gate = new Promise();
        var scope = new TaskScope();
        int throws = Throws(faults, () =>
        {
            scope.Run(_ => Fail(gate, faults[0]));
            gate.SetResult(); // the child throws here (its own body), and the scope reads its fault quietly
        });
        Assert.Equal(1, throws);
        Assert.Same(faults[0], await Assert.ThrowsAsync<InvalidOperationException>(async () => await scope.DisposeAsync()));

        static async SpindleTask Fail(Promise gate, Exception fault)
        {
            await gate.Task;
            ExceptionDispatchInfo.Throw(fault);
        }
    }

    [Fact]
    public void ForgottenTask_ItsFaultIsReportedWithoutBeingThrown()
    {
        Exception[] faults = Faults(1);
        var reported = new ConcurrentQueue<Exception>();
        void Handler(Exception e) => reported.Enqueue(e);
        var promise = new Promise();
        Spindle.UnobservedException += Handler;
        int throws;
        try
        {
            throws = Throws(faults, () =>
            {
                promise.Task.Forget();
                promise.SetException(faults[0]);
            });
        }
        finally
        {
            Spindle.UnobservedException -= Handler;
        }
        Assert.Equal(0, throws);
        Assert.Contains(faults[0], reported);
    }

    /// <summary>A cancellation of <paramref name="token"/> (its waits' failures are made inside Spindle, so they are picked by their token).</summary>
    private static Func<Exception, bool> CanceledBy(System.Threading.CancellationToken token)
        => e => e is OperationCanceledException oce && oce.CancellationToken == token;

    [Fact]
    public void WhenAll_OfCanceledSignalWaits_ThrowsOnlyAtTheAwait()
    {
        using var cts = new System.Threading.CancellationTokenSource();
        var signals = Enumerable.Range(0, 20).Select(_ => new Signal()).ToArray();
        int throws = Throws(CanceledBy(cts.Token), () =>
        {
            // Plain waits and timed ones (their result says whether they took a set): both are read without a throw.
            SpindleTask[] inputs = signals.Select((s, i) => i % 2 == 0
                ? s.WaitAsync(cts.Token)
                : (SpindleTask)s.WaitAsync(TimeSpan.FromHours(1), cts.Token)).ToArray();
            SpindleTask all = SpindleTask.WhenAll(inputs, new WhenAllOptions { AggregateExceptions = true }, default);
            cts.Cancel();
            Assert.ThrowsAny<OperationCanceledException>(() => all.GetAwaiter().GetResult());
        });
        Assert.Equal(1, throws); // at the await; the 20 canceled waits were read without a throw
        foreach (Signal signal in signals)
        {
            Assert.False(signal.HasWaiter); // each wait was read and is over: the signal can be waited on again
            signal.Set();
            Assert.True(signal.WaitAsync().IsCompleted);
        }
    }

    [Fact]
    public void WhenAny_OfACanceledPeriodicTick_ThrowsOnlyAtTheAwait()
    {
        using var cts = new System.Threading.CancellationTokenSource();
        using var timers = new TimerWheel(new ManualClock());
        using var periodic = new SpindlePeriodicTimer(TimeSpan.FromSeconds(1), timers);
        var other = new Promise<bool>();
        int throws = Throws(CanceledBy(cts.Token), () =>
        {
            SpindleTask<(int, bool)> any = SpindleTask.WhenAny([periodic.WaitForNextTickAsync(cts.Token), other.Task]);
            cts.Cancel();
            Assert.ThrowsAny<OperationCanceledException>(() => any.GetAwaiter().GetResult());
        });
        Assert.Equal(1, throws); // at the await; the tick's cancellation was read without a throw
        Assert.False(periodic.WaitForNextTickAsync().IsCompleted); // its wait was read: the timer takes the next one
    }

    private static async SpindleTask CatchesCancellation(SpindleTask wait, int[] caught)
    {
        try
        {
            await wait;
        }
        catch (OperationCanceledException)
        {
            caught[0]++;
        }
    }

    /// <summary>
    /// A scene unload: many entities, each awaiting a frame-loop delay, cancelled at once on the loop thread. Each
    /// awaiting method's await throws once; the delay's timer node, cancelled through the same token, is read without a
    /// throw. A user's game loop found an unload of 10,000 entities in loop delays cost about twice as much as one in
    /// NextFrame waits (11-14 µs each against 4-8): the waiter read its cancelled timer with GetResult and caught the throw.
    /// </summary>
    [Theory]
    [InlineData("Scaled")]
    [InlineData("Unscaled")]
    [InlineData("Frames")]
    public void FrameLoopDelays_CancelledAtOnce_ThrowOnlyAtTheirAwaits(string kind)
    {
        const int N = 40;
        var loop = new FrameLoop();
        loop.RunFrame(); // this thread is the loop thread: the cancellations run the awaiting code here
        using var cts = new System.Threading.CancellationTokenSource();
        int[] caught = new int[1];
        int throws = Throws(CanceledBy(cts.Token), () =>
        {
            for (int i = 0; i < N; i++)
            {
                SpindleTask wait = kind switch
                {
                    "Scaled" => loop.Delay(TimeSpan.FromSeconds(30), cts.Token),
                    "Unscaled" => loop.Delay(TimeSpan.FromSeconds(30), FrameTimeKind.Unscaled, cts.Token),
                    _ => loop.DelayFrame(1000, cts.Token),
                };
                CatchesCancellation(wait, caught).Forget();
            }
            loop.RunFrame();
            cts.Cancel();
        });
        Assert.Equal(N, caught[0]);
        Assert.Equal(N, throws); // one per awaiting method; the timers' cancellations were read without a throw
    }

    [Fact]
    public void MisuseAndBclInputs_StillComeOutAsBefore()
    {
        // A BCL input's fault is read through its awaiter, as an await would read it (the same exception object).
        Exception[] faults = Faults(1);
        var tcs = new TaskCompletionSource<int>();
        SpindleTask<int[]> all = SpindleTask.WhenAll([tcs.Task]);
        tcs.SetException(faults[0]);
        Assert.Same(faults[0], Assert.Throws<InvalidOperationException>(() => all.GetAwaiter().GetResult()));

        // An input read twice (it was consumed before the combinator met it) is the await-once error, named at the read.
        var promise = new Promise();
        SpindleTask consumed = SpindleTask.WhenAll(promise.Task);
        promise.SetResult();
        consumed.GetAwaiter().GetResult();
        var misuse = Assert.Throws<InvalidOperationException>(() => SpindleTask.WhenAll(consumed).GetAwaiter().GetResult());
        Assert.Contains("Preserve", misuse.Message, StringComparison.Ordinal);
    }
}

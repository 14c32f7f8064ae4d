using System;
using System.Threading;
using System.Threading.Tasks;

#if DEBUG // counts returns with the pools' Debug hook (CombinatorReturns), which a Release build of the library lacks
namespace SpindleLib.Tests.Combinators;

/// <summary>
/// A WhenAny or WhenAll cancelled by its token was left to the GC once its token's callback had started at all, so a
/// burst of cancellations cost one combinator per call. It now goes back to its pool, and never while the callback may
/// still run: a callback that completed the combined task and ran its reader inline recycles it as it returns. Counts
/// the combinators returned on this thread with the pools' Debug hook (process-wide, hence the sequential collection).
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class CancelledCombinatorReuseTests
{
    private const int N = 64;

    private static SpindleTask Start(string kind, Promise a, Promise b, CancellationToken token) => kind switch
    {
        "WhenAny" => SpindleTask.WhenAny([a.Task, b.Task], token),
        "WhenAll" => SpindleTask.WhenAll([a.Task, b.Task], token),
        _ => SpindleTask.WhenAll(Typed(a), Typed(b), token),
    };

    private static async SpindleTask<int> Typed(Promise p)
    {
        await p.Task;
        return 1;
    }

    [Theory]
    [InlineData("WhenAny")]
    [InlineData("WhenAll")]
    [InlineData("WhenAllTyped")]
    public void CancelledByItsToken_ThenRead_GoesBackToItsPool(string kind)
    {
        var tasks = new SpindleTask[N];
        var inputs = new Promise[2 * N];
        using var returns = new CombinatorReturns();
        int me = Environment.CurrentManagedThreadId;
        for (int round = 0; round < 3; round++)
        {
            using var cts = new CancellationTokenSource();
            for (int i = 0; i < N; i++)
            {
                inputs[2 * i] = new Promise();
                inputs[2 * i + 1] = new Promise();
                tasks[i] = Start(kind, inputs[2 * i], inputs[2 * i + 1], cts.Token);
            }
            cts.Cancel(); // every callback runs here, and has returned before any read
            int before = returns.CountOn(me);
            for (int i = 0; i < N; i++)
            {
                Assert.True(tasks[i].SuppressCancellationThrow().GetAwaiter().GetResult());
            }
            int back = returns.CountOn(me) - before;
            for (int i = 0; i < 2 * N; i++)
            {
                inputs[i].SetResult(); // the inputs a WhenAll still held finish: nothing more comes back, nothing breaks
            }
            Assert.Equal(N, back);
        }
    }

    private static async SpindleTask ReadThenStartAnother(SpindleTask cancelled, Promise next, CancellationToken nextToken, StrongBox<SpindleTask> started)
    {
        await cancelled.SuppressCancellationThrow();
        // Runs inline inside the first token's callback: the combinator just read must not be reused under it.
        started.Value = SpindleTask.WhenAny([next.Task, new Promise().Task], nextToken);
    }

    private sealed class StrongBox<T>
    {
        public T Value = default!;
    }

    [Fact]
    public void AReaderRunInsideTheCallback_StartsAnotherUse_WhichTheCallbackDoesNotCancel_AndTheFirstGoesBackAsTheCallbackReturns()
    {
        using var returns = new CombinatorReturns();
        int me = Environment.CurrentManagedThreadId;
        for (int round = 0; round < N; round++)
        {
            using var first = new CancellationTokenSource();
            using var second = new CancellationTokenSource();
            var next = new Promise();
            var started = new StrongBox<SpindleTask>();
            SpindleTask reader = ReadThenStartAnother(SpindleTask.WhenAny([new Promise().Task], first.Token), next, second.Token, started);
            int before = returns.CountOn(me);
            first.Cancel(); // the reader runs inline in the callback, reads, and starts the next WhenAny there
            Assert.Equal(SpindleTaskStatus.Succeeded, reader.Status);
            Assert.Equal(1, returns.CountOn(me) - before); // the first combinator, once its callback returned
            Assert.Equal(SpindleTaskStatus.Pending, started.Value.Status); // not cancelled by the first token's callback
            next.SetResult();
            reader.GetAwaiter().GetResult();
            started.Value.GetAwaiter().GetResult();
        }
    }

    [Fact]
    public async Task CancelRacingCompletion_ThenTheReusedCombinator_IsDecidedOnlyByItsOwnUse()
    {
        int rounds = TestUtil.Stress(3_000);
        int cancelled = 0, won = 0;
        await TestUtil.RunOnThread(() =>
        {
            for (int round = 0; round < rounds; round++)
            {
                using var cts = new CancellationTokenSource();
                var input = new Promise();
                SpindleTask any = SpindleTask.WhenAny([input.Task], cts.Token);
                using var barrier = new Barrier(2);
                Task cancel = Task.Run(() =>
                {
                    barrier.SignalAndWait();
                    cts.Cancel();
                });
                barrier.SignalAndWait();
                input.SetResult();
                Assert.True(cancel.Wait(TimeSpan.FromSeconds(10)), $"round {round}: the cancelling thread hung");
                if (any.SuppressCancellationThrow().GetAwaiter().GetResult())
                {
                    cancelled++;
                }
                else
                {
                    won++;
                }
                // The next uses, on a token that is never cancelled, reuse what the race recycled: only their input decides them.
                using var live = new CancellationTokenSource();
                for (int k = 0; k < 2; k++)
                {
                    var p = new Promise();
                    SpindleTask next = SpindleTask.WhenAny([p.Task], live.Token);
                    Assert.Equal(SpindleTaskStatus.Pending, next.Status);
                    p.SetResult();
                    next.GetAwaiter().GetResult();
                }
            }
        });
        Assert.Equal(rounds, cancelled + won);
    }
}
#endif

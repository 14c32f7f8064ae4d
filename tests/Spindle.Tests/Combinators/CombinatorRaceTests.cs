using System;
using System.Collections.Concurrent;
using System.Threading;
using System.Threading.Tasks;
using static SpindleLib.Tests.Combinators.CombinatorTestSupport;
using static SpindleLib.Tests.UnobservedReports;

namespace SpindleLib.Tests.Combinators;

/// <summary>
/// Barrier-forced races on the combinators: inputs completing at the same moment from several threads, and
/// cancel-vs-complete. Long races: they run alone so their threads get the cores.
/// </summary>
[Collection(SequentialCollection.Name)]
public class CombinatorRaceTests
{
    private static readonly int Rounds = TestUtil.Stress(10_000);

    private static readonly int CancelRounds = TestUtil.Stress(5_000);

    private static readonly int Timeout = TestUtil.StressTimeout(60);

    private static void ResetAll(Promise[] promises, int round)
    {
        if (round > 0)
        {
            foreach (Promise p in promises)
            {
                p.Reset();
            }
        }
    }

    [Theory]
    [InlineData(2)]
    [InlineData(3)]
    [InlineData(4)]
    public async Task WhenAny_InputsCompletingAtOnce_ExactlyOneWinnerAndItIsTheThreadThatResumedTheAwaiter(int n)
    {
        Promise[] promises = Promises(n);
        var racerThreads = new int[n];
        var counter = new ContinuationCounter();
        int resumedOn = 0;
        Action continuation = () =>
        {
            Volatile.Write(ref resumedOn, Environment.CurrentManagedThreadId);
            counter.Action();
        };
        SpindleTask<int> any = default;
        var racers = new Action<int>[n];
        for (int k = 0; k < n; k++)
        {
            int me = k;
            racers[k] = _ =>
            {
                racerThreads[me] = Environment.CurrentManagedThreadId;
                promises[me].SetResult();
            };
        }

        await TestUtil.WithTimeout(Race.Run(
            Rounds,
            before: round =>
            {
                ResetAll(promises, round);
                counter.Reset();
                resumedOn = 0;
                any = SpindleTask.WhenAny(TasksOf(promises));
                Assert.False(any.IsCompleted);
                any.GetAwaiter().UnsafeOnCompleted(continuation);
            },
            after: round =>
            {
                Assert.True(counter.Count == 1, $"round {round}: the awaiter resumed {counter.Count} times");
                int winner = any.GetAwaiter().GetResult();
                Assert.InRange(winner, 0, n - 1);
                // The winning input's completion runs the combinator inline, which resumes the awaiter inline: so the
                // awaiter resumed on the thread of the racer whose input won.
                Assert.True(racerThreads[winner] == resumedOn, $"round {round}: winner {winner} but the awaiter resumed on another racer's thread");
                foreach (Promise p in promises)
                {
                    Assert.True(p.IsCompleted);
                }
            },
            racers), Timeout);
    }

    [Theory]
    [InlineData(2)]
    [InlineData(3)]
    [InlineData(4)]
    public async Task WhenAll_InputsCompletingAtOnce_CompletesExactlyOnceWithoutError(int n)
    {
        Promise[] promises = Promises(n);
        var counter = new ContinuationCounter();
        SpindleTask all = default;
        var racers = new Action<int>[n];
        for (int k = 0; k < n; k++)
        {
            int me = k;
            racers[k] = _ => promises[me].SetResult();
        }

        await TestUtil.WithTimeout(Race.Run(
            Rounds,
            before: round =>
            {
                ResetAll(promises, round);
                counter.Reset();
                all = SpindleTask.WhenAll(TasksOf(promises));
                Assert.False(all.IsCompleted);
                all.GetAwaiter().UnsafeOnCompleted(counter.Action);
            },
            after: round =>
            {
                Assert.True(counter.Count == 1, $"round {round}: the awaiter resumed {counter.Count} times");
                Assert.Equal(SpindleTaskStatus.Succeeded, all.Status);
                all.GetAwaiter().GetResult();
            },
            racers), Timeout);
    }

    [Fact]
    public async Task WhenAny_CancelAndCompleteOfTheSameInputRace_OutcomeMatchesTheWinningCall()
    {
        Promise[] promises = Promises(2); // input 1 stays pending until after the race
        var won = new bool[2];
        var counter = new ContinuationCounter();
        SpindleTask<int> any = default;

        await TestUtil.WithTimeout(Race.Run(
            CancelRounds,
            before: round =>
            {
                ResetAll(promises, round);
                won[0] = won[1] = false;
                counter.Reset();
                any = SpindleTask.WhenAny(TasksOf(promises));
                any.GetAwaiter().UnsafeOnCompleted(counter.Action);
            },
            after: round =>
            {
                Assert.True(won[0] ^ won[1], $"round {round}: {(won[0] ? "both" : "neither")} won");
                Assert.True(counter.Count == 1, $"round {round}: the awaiter resumed {counter.Count} times");
                promises[1].SetResult();
                if (won[0])
                {
                    Assert.Equal(SpindleTaskStatus.Canceled, any.Status);
                    Assert.ThrowsAny<OperationCanceledException>(() => any.GetAwaiter().GetResult());
                }
                else
                {
                    Assert.Equal(0, any.GetAwaiter().GetResult());
                }
            },
            _ => won[0] = promises[0].TrySetCanceled(),
            _ => won[1] = promises[0].TrySetResult()), Timeout);
    }

    [Fact]
    public async Task WhenAny_OneInputCanceledWhileAnotherCompletes_OneOutcomeFromTheResumingThread()
    {
        Promise[] promises = Promises(2);
        var racerThreads = new int[2];
        var counter = new ContinuationCounter();
        int resumedOn = 0;
        Action continuation = () =>
        {
            Volatile.Write(ref resumedOn, Environment.CurrentManagedThreadId);
            counter.Action();
        };
        SpindleTask<int> any = default;
        int canceledWins = 0;

        await TestUtil.WithTimeout(Race.Run(
            CancelRounds,
            before: round =>
            {
                ResetAll(promises, round);
                counter.Reset();
                any = SpindleTask.WhenAny(TasksOf(promises));
                any.GetAwaiter().UnsafeOnCompleted(continuation);
            },
            after: round =>
            {
                Assert.True(counter.Count == 1, $"round {round}: the awaiter resumed {counter.Count} times");
                SpindleTaskStatus status = any.Status;
                Exception? error = null;
                int winner = -1;
                try
                {
                    winner = any.GetAwaiter().GetResult();
                }
                catch (Exception ex)
                {
                    error = ex;
                }
                if (status == SpindleTaskStatus.Canceled)
                {
                    Assert.IsAssignableFrom<OperationCanceledException>(error);
                    Assert.Equal(racerThreads[0], resumedOn);
                    canceledWins++;
                }
                else
                {
                    Assert.Equal(SpindleTaskStatus.Succeeded, status);
                    Assert.Null(error);
                    Assert.Equal(1, winner);
                    Assert.Equal(racerThreads[1], resumedOn);
                }
            },
            _ =>
            {
                racerThreads[0] = Environment.CurrentManagedThreadId;
                promises[0].SetCanceled();
            },
            _ =>
            {
                racerThreads[1] = Environment.CurrentManagedThreadId;
                promises[1].SetResult();
            }), Timeout);
        Assert.InRange(canceledWins, 0, CancelRounds);
    }

    [Fact]
    public async Task WhenAll_CancelAndCompleteOfTheSameInputRace_CanceledExactlyWhenTheCancelWon()
    {
        Promise[] promises = Promises(2);
        var won = new bool[2];
        var counter = new ContinuationCounter();
        SpindleTask all = default;

        await TestUtil.WithTimeout(Race.Run(
            CancelRounds,
            before: round =>
            {
                ResetAll(promises, round);
                won[0] = won[1] = false;
                counter.Reset();
                all = SpindleTask.WhenAll(TasksOf(promises));
                all.GetAwaiter().UnsafeOnCompleted(counter.Action);
            },
            after: round =>
            {
                Assert.True(won[0] ^ won[1], $"round {round}: {(won[0] ? "both" : "neither")} won");
                Assert.True(counter.Count == 1, $"round {round}: the awaiter resumed {counter.Count} times");
                if (won[0])
                {
                    Assert.Equal(SpindleTaskStatus.Canceled, all.Status);
                    Assert.ThrowsAny<OperationCanceledException>(() => all.GetAwaiter().GetResult());
                }
                else
                {
                    Assert.Equal(SpindleTaskStatus.Succeeded, all.Status);
                    all.GetAwaiter().GetResult();
                }
            },
            _ => won[0] = promises[0].TrySetCanceled(),
            _ => won[1] = promises[0].TrySetResult(),
            _ => promises[1].SetResult()), Timeout);
    }

    [Fact]
    public async Task WhenAny_ValueTasksCompletingAtOnce_ExactlyOneWinner_EveryInputReadOnce()
    {
        var sources = new[] { new CountingValueTaskSource<int>(), new CountingValueTaskSource<int>(), new CountingValueTaskSource<int>() };
        var counter = new ContinuationCounter();
        SpindleTask<(int Index, int Result)> any = default;
        var racers = new Action<int>[sources.Length];
        for (int k = 0; k < sources.Length; k++)
        {
            int me = k;
            racers[k] = round => sources[me].SetResult(round * 10 + me);
        }

        await TestUtil.WithTimeout(Race.Run(
            Rounds,
            before: round =>
            {
                foreach (CountingValueTaskSource<int> s in sources)
                {
                    s.Reset();
                }
                counter.Reset();
                any = SpindleTask.WhenAny(sources[0].Task, sources[1].Task, sources[2].Task);
                any.GetAwaiter().UnsafeOnCompleted(counter.Action);
            },
            after: round =>
            {
                Assert.True(counter.Count == 1, $"round {round}: the awaiter resumed {counter.Count} times");
                (int index, int result) = any.GetAwaiter().GetResult();
                Assert.Equal(round * 10 + index, result);
                for (int k = 0; k < sources.Length; k++)
                {
                    Assert.True(sources[k].Reads == 1, $"round {round}: input {k} was read {sources[k].Reads} times");
                }
            },
            racers), Timeout);
    }

    [Fact]
    public async Task WhenAnyOverProducers_OuterCancelRacesTheWinner_OneOutcome_AndTheLoserIsAlwaysCancelled()
    {
        var winner = new Promise();
        var loser = new Signal();
        var counter = new ContinuationCounter();
        CancellationTokenSource? outer = null;
        CancellationToken handedOut = default;
        SpindleTask<int> any = default;
        int cancelledWins = 0;
        var watch = UnobservedReports.Start(Own.Any(Own.ReportedOnTestThreads(), Own.AwaitOnceErrors(), Own.Cancellations()));
        ConcurrentQueue<Exception> reported = watch.Reports;
        using (watch)
        {
            await TestUtil.WithTimeout(Race.Run(
                CancelRounds,
                before: round =>
                {
                    if (round > 0)
                    {
                        winner.Reset();
                    }
                    outer = new CancellationTokenSource();
                    counter.Reset();
                    any = SpindleTask.WhenAny([ct => Await(winner), ct => loser.WaitAsync(handedOut = ct)], outer.Token);
                    any.GetAwaiter().UnsafeOnCompleted(counter.Action);
                },
                after: round =>
                {
                    Assert.True(counter.Count == 1, $"round {round}: the awaiter resumed {counter.Count} times");
                    Assert.True(handedOut.IsCancellationRequested, $"round {round}: the losing producer's token was not cancelled");
                    Assert.False(loser.HasWaiter, $"round {round}: the losing producer is still waiting");
                    try
                    {
                        Assert.Equal(0, any.GetAwaiter().GetResult());
                    }
                    catch (OperationCanceledException oce)
                    {
                        Assert.Equal(outer!.Token, oce.CancellationToken); // the caller's token, not the producers'
                        cancelledWins++;
                    }
                    outer!.Dispose();
                },
                _ => outer!.Cancel(),
                _ => winner.SetResult()), Timeout);
        }
        Assert.Empty(reported);
        Assert.InRange(cancelledWins, 0, CancelRounds);
    }
}

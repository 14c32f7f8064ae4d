using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Sources;

/// <summary>Barrier-forced races on the completion core: exactly-once completion, exactly-once continuations.</summary>
public class SourceCoreRaceTests
{
    private static readonly int Rounds = TestUtil.Stress(10_000);

    private static readonly int Timeout = TestUtil.StressTimeout(60);

    /// <summary>A SourceCore lives in a field of its owner; this is that owner.</summary>
    private sealed class CoreHolder
    {
        public SourceCore<int> Core;
    }

    [Fact]
    public async Task SourceCore_TrySetResultFromTwoThreadsAtOnce_ExactlyOneWins()
    {
        var holder = new CoreHolder();
        var won = new bool[2];

        await TestUtil.WithTimeout(Race.Run(
            Rounds,
            before: _ =>
            {
                holder.Core.Reset();
                won[0] = won[1] = false;
            },
            after: round =>
            {
                Assert.True(won[0] ^ won[1], $"round {round}: {(won[0] ? "both" : "neither")} won");
                Assert.True(holder.Core.IsCompleted);
                Assert.Equal(SpindleTaskStatus.Succeeded, holder.Core.GetStatus(holder.Core.Version));
            },
            _ => won[0] = holder.Core.TrySetResult(1),
            _ => won[1] = holder.Core.TrySetResult(2)), Timeout);
    }

    [Fact]
    public async Task Promise_DifferentOutcomesFromThreeThreadsAtOnce_ExactlyOneWinsAndItsOutcomeIsKept()
    {
        var promise = new Promise<int>();
        var error = new InvalidTimeZoneException("racing fault");
        var won = new bool[3];

        await TestUtil.WithTimeout(Race.Run(
            Rounds,
            before: round =>
            {
                if (round > 0)
                {
                    promise.Reset();
                }
                Array.Clear(won);
            },
            after: round =>
            {
                int winners = (won[0] ? 1 : 0) + (won[1] ? 1 : 0) + (won[2] ? 1 : 0);
                Assert.True(winners == 1, $"round {round}: {winners} winners");
                SpindleTask<int> task = promise.Task;
                if (won[0])
                {
                    Assert.Equal(round, task.GetAwaiter().GetResult());
                }
                else if (won[1])
                {
                    Assert.Equal(SpindleTaskStatus.Faulted, task.Status);
                    Assert.Same(error, Assert.Throws<InvalidTimeZoneException>(() => task.GetAwaiter().GetResult()));
                }
                else
                {
                    Assert.Equal(SpindleTaskStatus.Canceled, task.Status);
                }
            },
            round => won[0] = promise.TrySetResult(round),
            _ => won[1] = promise.TrySetException(error),
            _ => won[2] = promise.TrySetCanceled()), Timeout);
    }

    [Fact]
    public async Task Promise_OnCompletedRacingTrySetResult_ContinuationRunsExactlyOnceAndSeesTheResult()
    {
        var promise = new Promise<int>();
        int runs = 0;
        int seen = -1;
        int registrantRan = 0;
        int completerRan = 0;
        int registrantThread = 0;
        int runThread = 0;

        int ran = await TestUtil.WithTimeout(Race.Run(
            Rounds,
            before: round =>
            {
                if (round > 0)
                {
                    promise.Reset();
                }
                runs = 0;
                seen = -1;
            },
            after: round =>
            {
                // Each side runs the continuation inline if it is the one that sees the other's mark, so once both
                // calls have returned it has run: exactly once.
                Assert.Equal(1, Volatile.Read(ref runs));
                Assert.Equal(round, seen);
                if (runThread == registrantThread)
                {
                    registrantRan++;
                }
                else
                {
                    completerRan++;
                }
            },
            round =>
            {
                registrantThread = Environment.CurrentManagedThreadId;
                SpindleTask<int> task = promise.Task;
                SpindleTask<int>.Awaiter awaiter = task.GetAwaiter();
                awaiter.UnsafeOnCompleted(() =>
                {
                    runThread = Environment.CurrentManagedThreadId;
                    seen = awaiter.GetResult();
                    Interlocked.Increment(ref runs);
                });
            },
            round => Assert.True(promise.TrySetResult(round))), Timeout);

        Assert.Equal(ran, registrantRan + completerRan);
    }

    [Fact]
    public async Task SourceCore_OnCompletedRacingTrySetException_ContinuationRunsExactlyOnce()
    {
        var holder = new CoreHolder();
        var error = new InvalidTimeZoneException("racing");
        int runs = 0;
        Action<object?> continuation = state => Interlocked.Increment(ref runs);

        await TestUtil.WithTimeout(Race.Run(
            Rounds,
            before: _ =>
            {
                holder.Core.Reset();
                runs = 0;
            },
            after: round =>
            {
                Assert.Equal(1, Volatile.Read(ref runs));
                Assert.Equal(SpindleTaskStatus.Faulted, holder.Core.GetStatus(holder.Core.Version));
                Assert.Same(error, holder.Core.Error);
            },
            _ => holder.Core.OnCompleted(continuation, null, holder.Core.Version),
            _ => holder.Core.TrySetException(error)), Timeout);
    }

    private sealed class VoidCoreHolder
    {
        public SourceCore<VoidResult> Core;
    }

    /// <summary>
    /// A delegate waiter's state and the failure share one slot in the core: the completer must hand the waiter its own
    /// state, then leave the slot holding exactly the outcome. Each round races a registration carrying a fresh state
    /// object against one of the three completions, on the void core (whose success skips the s_completing mark when
    /// there is no delegate waiter) and on a typed one.
    /// </summary>
    [Theory]
    [InlineData("result")]
    [InlineData("exception")]
    [InlineData("canceled")]
    public async Task SourceCore_DelegateWaiterWithStateRacingEachCompletion_GetsItsStateAndTheOutcomeIsExact(string outcome)
    {
        var voidHolder = new VoidCoreHolder();
        var holder = new CoreHolder();
        var error = new InvalidTimeZoneException("racing");
        using var cts = new CancellationTokenSource();
        cts.Cancel();
        object? expectedState = null;
        object? voidSeen = null;
        object? typedSeen = null;
        int runs = 0;
        Action<object?> onVoid = state => { voidSeen = state; Interlocked.Increment(ref runs); };
        Action<object?> onTyped = state => { typedSeen = state; Interlocked.Increment(ref runs); };

        await TestUtil.WithTimeout(Race.Run(
            Rounds,
            before: _ =>
            {
                voidHolder.Core.Reset();
                holder.Core.Reset();
                expectedState = new object();
                voidSeen = typedSeen = null;
                runs = 0;
            },
            after: _ =>
            {
                Assert.Equal(2, Volatile.Read(ref runs));
                Assert.Same(expectedState, voidSeen);
                Assert.Same(expectedState, typedSeen);
                SpindleTaskStatus want = outcome switch
                {
                    "result" => SpindleTaskStatus.Succeeded,
                    "exception" => SpindleTaskStatus.Faulted,
                    _ => SpindleTaskStatus.Canceled,
                };
                Assert.Equal(want, voidHolder.Core.GetStatus(voidHolder.Core.Version));
                Assert.Equal(want, holder.Core.GetStatus(holder.Core.Version));
                if (outcome == "result")
                {
                    Assert.Null(voidHolder.Core.Error);
                    Assert.Equal(7, holder.Core.GetResult(holder.Core.Version, null!));
                }
                else if (outcome == "exception")
                {
                    Assert.Same(error, voidHolder.Core.Error);
                    Assert.Same(error, holder.Core.Error);
                }
                else
                {
                    Assert.Equal(cts.Token, Assert.IsAssignableFrom<OperationCanceledException>(voidHolder.Core.Error).CancellationToken);
                }
            },
            _ =>
            {
                voidHolder.Core.OnCompleted(onVoid, expectedState, voidHolder.Core.Version);
                holder.Core.OnCompleted(onTyped, expectedState, holder.Core.Version);
            },
            _ =>
            {
                switch (outcome)
                {
                    case "result":
                        voidHolder.Core.TrySetResult(default);
                        holder.Core.TrySetResult(7);
                        break;
                    case "exception":
                        voidHolder.Core.TrySetException(error);
                        holder.Core.TrySetException(error);
                        break;
                    default:
                        voidHolder.Core.TrySetCanceled(cts.Token);
                        holder.Core.TrySetCanceled(cts.Token);
                        break;
                }
            }), Timeout);
    }

    [Fact]
    public async Task Promise_TwoRegistrantsRacingOnAPendingTask_ExactlyOneRegistersAndTheOtherThrows()
    {
        var promise = new Promise<int>();
        var registered = new bool[2];
        var threw = new bool[2];
        var runs = new int[2];

        await TestUtil.WithTimeout(Race.Run(
            Rounds,
            before: round =>
            {
                if (round > 0)
                {
                    promise.Reset();
                }
                Array.Clear(registered);
                Array.Clear(threw);
                Array.Clear(runs);
            },
            after: round =>
            {
                Assert.True(registered[0] ^ registered[1], $"round {round}: registrations {registered[0]} {registered[1]}");
                Assert.True(threw[0] ^ threw[1]);
                promise.SetResult(round);
                int winner = registered[0] ? 0 : 1;
                Assert.Equal(1, Volatile.Read(ref runs[winner]));
                Assert.Equal(0, Volatile.Read(ref runs[1 - winner]));
            },
            _ => Register(0),
            _ => Register(1)), Timeout);

        void Register(int me)
        {
            try
            {
                promise.Task.GetAwaiter().UnsafeOnCompleted(() => Interlocked.Increment(ref runs[me]));
                registered[me] = true;
            }
            catch (InvalidOperationException ex) when (ex.Message.Contains("Preserve()", StringComparison.Ordinal))
            {
                threw[me] = true;
            }
        }
    }

    private static async SpindleTask<int> Box(Promise<int> promise) => await promise.Task;

    [Fact]
    public async Task Box_GetResultFromTwoThreadsAtOnce_ExactlyOneSucceedsAndTheOtherGetsInvalidOperation()
    {
        SpindleTask<int> task = default;
        var results = new int[2];
        var failures = new Exception?[2];

        await TestUtil.WithTimeout(Race.Run(
            Rounds,
            before: round =>
            {
                var promise = new Promise<int>();
                task = Box(promise);
                promise.SetResult(round + 1);
                Array.Clear(results);
                Array.Clear(failures);
            },
            after: round =>
            {
                int successes = (results[0] != 0 ? 1 : 0) + (results[1] != 0 ? 1 : 0);
                Assert.True(successes == 1, $"round {round}: {successes} reads succeeded");
                Assert.Equal(round + 1, results[0] + results[1]);
                Exception loser = failures[results[0] != 0 ? 1 : 0]!;
                Assert.IsType<InvalidOperationException>(loser);
            },
            _ => Read(0),
            _ => Read(1)), Timeout);

        void Read(int me)
        {
            try
            {
                results[me] = task.GetAwaiter().GetResult();
            }
            catch (Exception ex)
            {
                failures[me] = ex;
            }
        }
    }
}

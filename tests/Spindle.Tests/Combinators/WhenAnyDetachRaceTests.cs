using System;
using System.Collections.Concurrent;
using System.Threading;
using System.Threading.Tasks;
using static SpindleLib.Tests.Combinators.CombinatorTestSupport;
using static SpindleLib.Tests.UnobservedReports;

namespace SpindleLib.Tests.Combinators;

/// <summary>
/// Barrier-forced races between a WhenAny's decision and its losers: a loser that completes while the race is decided is
/// read before the combined task completes, so the winner's consumer may reset a losing promise, or wait on a losing
/// signal again, at once. Long races: they run alone.
/// </summary>
[Collection(SequentialCollection.Name)]
public class WhenAnyDetachRaceTests
{
    private static readonly int Rounds = TestUtil.Stress(20_000);

    [Fact]
    public async Task WhenAny_LoserFailsDuringTheRaceWithItsContinuationDispatched_ResetAtOnce_ItsFaultIsReportedOnceAndNoStaleRead()
    {
        var winner = new Promise();
        // Its completion queues the slot to the workers: without an early read, the slot would read it only after the
        // consumer below has reset it (a stale read: the await-once error reported, the real fault lost).
        var loser = new Promise(runContinuationsAsynchronously: true);
        // A new exception each round: one rethrown in every round the loser wins grows its stack trace with each throw,
        // and formatting it made a stress run slower and slower (quadratic; found by a soak).
        var error = new InvalidTimeZoneException("loser");
        SpindleTask<int> any = default;
        var made = new ConcurrentQueue<Exception>(); // every round's fault: the stale read's await-once error is claimed too
        made.Enqueue(error);
        ConcurrentQueue<Exception> all = await ObserveAsync(Own.Any(Own.InstancesIn(made), Own.ReportedOnTestThreads(), Own.AwaitOnceErrors()), async reported =>
        {
            await TestUtil.WithTimeout(Race.Run(
                Rounds,
                before: round =>
                {
                    winner.Reset();
                    loser.Reset();
                    reported.Clear();
                    error = new InvalidTimeZoneException("loser");
                    made.Enqueue(error);
                    any = SpindleTask.WhenAny(winner.Task, loser.Task);
                },
                after: round =>
                {
                    Exception? thrown = Record.Exception(() => any.GetAwaiter().GetResult());
                    if (thrown is null)
                    {
                        // The winner won: the losing promise may be reset at once, and its fault was reported exactly
                        // once, before this (by the decider's early read, or by the abandoned use when it failed).
                        loser.Reset();
                        if (!(reported.Count == 1 && reported.TryPeek(out Exception? e) && e == error))
                        {
                            Assert.Fail($"round {round}: reported {reported.Count}: {string.Join(", ", reported)}");
                        }
                    }
                    else
                    {
                        Assert.Same(error, thrown);
                        Assert.True(reported.IsEmpty, $"round {round}: the winner's fault was also reported");
                    }
                },
                _ => winner.SetResult(),
                _ => loser.SetException(error)), 120);
            // A slot still queued from the last round finds its input read already: nothing more is reported.
            await Task.Delay(50);
        });
        Assert.True(all.Count <= 1, "a late read reported again");
    }

    [Fact]
    public async Task WhenAny_LosingSignalSetDuringTheRace_WaitingAgainAtOnce_TheNewWaitIsCancellableAndNothingIsReported()
    {
        var signal = new Signal();
        var other = new Promise();
        SpindleTask<int> any = default;
        SpindleTask next = default;
        var cts = new CancellationTokenSource();
        try
        {
            await ObserveAsync(Own.Any(Own.ReportedOnTestThreads(), Own.AwaitOnceErrors()), reported => TestUtil.WithTimeout(Race.Run(
                Rounds,
                before: round =>
                {
                    other.Reset();
                    signal.Reset();
                    next = default;
                    cts.Dispose();
                    cts = new CancellationTokenSource();
                    any = SpindleTask.WhenAny(signal.WaitAsync(), other.Task);
                },
                after: round =>
                {
                    Assert.True(reported.IsEmpty, $"round {round}: reported {(reported.TryPeek(out Exception? e) ? e.Message : "")}");
                    if (!next.IsCompleted)
                    {
                        cts.Cancel();
                        Assert.True(next.IsCompleted, $"round {round}: the new wait ignored its token");
                    }
                    try
                    {
                        next.GetAwaiter().GetResult();
                    }
                    catch (OperationCanceledException)
                    {
                    }
                },
                round =>
                {
                    other.SetResult();
                    if (any.GetAwaiter().GetResult() == 1)
                    {
                        next = signal.WaitAsync(cts.Token); // the losing signal is waited on again at once
                    }
                },
                round => signal.Set()), 120));
        }
        finally
        {
            cts.Dispose();
        }
    }
}

using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Scenarios;

/// <summary>
/// The long-poll broadcast of <c>WebHostScenarioTests</c> (a <c>Preserve()</c>d promise task that every poll awaits
/// with <c>TryWithTimeout</c> and its request's token), with the three ways a poll ends forced to land at the same moment
/// (review57): clients disconnecting (their <c>RequestAborted</c> cancelled), the publish, and the poll's timeout. Each
/// poll ends once, with the publish, its timeout (null) or, for an aborted client only, a cancellation carrying its own
/// request's token; the broadcast holds no waiter and the wheel no timer afterwards, whichever won. 64 polls, so that the
/// publish's run of the waiters overlaps the detaches: a preserved task's detach made without its lock failed here at
/// once (a corrupted waiter list: the next round counted the wrong waiters), where the tests that end the polls one way
/// at a time passed. Long races: they run alone.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class WebHostBroadcastRaceTests
{
    private const int Polls = 64;
    private static readonly TimeSpan s_pollTimeout = TimeSpan.FromSeconds(60);
    private static readonly int Rounds = TestUtil.Stress(5_000);

    private static async Task<long?> Poll(SpindleTask<long> generation, TimerWheel wheel, CancellationToken requestAborted)
    {
        var (published, value) = await generation.TryWithTimeout(s_pollTimeout, wheel, requestAborted);
        return published ? value : null;
    }

    [Fact]
    public async Task AbortPublishAndTimeoutAtOnce_EachPollEndsOnceWithOneOfThem_AndNothingStaysRegistered()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var generation = new Promise<long>();
        SpindleTask<long> shared = default;
        var requests = new CancellationTokenSource[Polls];
        var handlers = new Task<long?>[Polls];
        int published = 0, timedOut = 0, aborted = 0;

        int ran = await TestUtil.WithTimeout(Race.Run(
            Rounds,
            before: round =>
            {
                generation.Reset();
                shared = generation.Task.Preserve();
                for (int i = 0; i < Polls; i++)
                {
                    requests[i] = new CancellationTokenSource();
                    handlers[i] = Poll(shared, wheel, requests[i].Token);
                }
                Assert.Equal(Polls, WaiterCount(shared));
                Assert.Equal(Polls, wheel.PendingCount);
            },
            after: round =>
            {
                for (int i = 0; i < Polls; i++)
                {
                    Task<long?> h = handlers[i];
                    Assert.True(h.IsCompleted, $"round {round}, poll {i}: {h.Status}"); // each racer's path runs the poll's end inline
                    if (h.IsCanceled)
                    {
                        Assert.True(i % 2 == 1, $"round {round}, poll {i}: canceled, but its client never left");
                        var e = Assert.ThrowsAny<OperationCanceledException>(() => h.GetAwaiter().GetResult());
                        Assert.Equal(requests[i].Token, e.CancellationToken);
                        aborted++;
                    }
                    else
                    {
                        Assert.True(h.IsCompletedSuccessfully, $"round {round}, poll {i}: {h.Status} {h.Exception}");
                        long? value = h.Result;
                        if (value is null)
                        {
                            timedOut++;
                        }
                        else
                        {
                            Assert.Equal(round, value.Value);
                            published++;
                        }
                    }
                    requests[i].Dispose();
                }
                Assert.Equal(0, WaiterCount(shared));
                Assert.Equal(0, wheel.PendingCount);
                Assert.Equal(round, shared.GetAwaiter().GetResult()); // the broadcast itself still reads its value
            },
            // Every other client disconnects.
            _ =>
            {
                for (int i = 1; i < Polls; i += 2)
                {
                    requests[i].Cancel();
                }
            },
            // The publisher.
            round => generation.SetResult(round),
            // The polls' timeout.
            _ => clock.Advance(s_pollTimeout)), 120);

        Assert.True(ran > 0);
        Assert.Equal(ran * Polls, published + timedOut + aborted);
    }

    private static int WaiterCount<T>(SpindleTask<T> preserved)
        => ((PreservedSource<T>)preserved._source!).WaiterCountForTests;
}

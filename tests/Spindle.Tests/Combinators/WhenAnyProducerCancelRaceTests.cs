using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Threading;
using SpindleLib.Tests.Sources;

namespace SpindleLib.Tests.Combinators;

#if DEBUG // the combinator's test hook exists only in a Debug build of the library
/// <summary>
/// A WhenAny of producers given a token: its cancellation takes the race as a producer would, by a compare-and-swap on
/// the winner, so a producer finishing on one thread as the token is cancelled on another gives either the cancellation
/// or the producer's index and result, never a success naming no producer. With the cancellation's claim made a read
/// and then a store (mutation testing mut53c, mutant C6), both went through: the producer completed the task and the
/// cancellation overwrote its index with its own mark. The two meet just before their claims through
/// <see cref="HookMeeting"/> (<c>CombinatorCore.TestHookBeforeWinnerClaim</c>). Run alone: its two threads must run at once.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class WhenAnyProducerCancelRaceTests
{
    [Fact]
    public void AProducerFinishing_AsTheTokenIsCancelled_GivesTheCancellationOrTheProducersOutcome()
    {
        int rounds = TestUtil.Stress(20_000);
        var cap = Stopwatch.StartNew();
        var meeting = new HookMeeting();
        object? target = null;
        int current = -1;
        var failures = new List<string>();
        int cancelled = 0;
        int ran = 0;
        CombinatorCore.TestHookBeforeWinnerClaim = (combinator, byCancellation) =>
        {
            if (combinator == Volatile.Read(ref target))
            {
                meeting.Arrive(byCancellation ? 1 : 0, Volatile.Read(ref current));
            }
        };
        try
        {
            using var racer = new ContinuationRacer("WhenAnyProducerCancelRaceTests racer");
            for (int round = 0; round < rounds && failures.Count < 10 && cap.Elapsed < TimeSpan.FromSeconds(5); round++, ran++)
            {
                var producer = new Promise<int>();
                using var cts = new CancellationTokenSource();
                SpindleTask<(int Index, int Result)> any = SpindleTask.WhenAny<int>([_ => producer.Task], cts.Token);
                Volatile.Write(ref current, round);
                Volatile.Write(ref target, any._source);
                (Exception? mine, Exception? theirs) = racer.RunBothAtOnce(round, () => producer.TrySetResult(7), cts.Cancel);
                Volatile.Write(ref target, null);
                Assert.Null(mine);
                Assert.Null(theirs);
                if (!any.IsCompleted)
                {
                    failures.Add($"round {round}: the producer finished and the token was cancelled, and the WhenAny is still pending");
                    continue;
                }
                try
                {
                    (int index, int result) = any.GetAwaiter().GetResult();
                    if (index != 0 || result != 7)
                    {
                        failures.Add($"round {round}: the WhenAny succeeded with ({index}, {result}), not the producer's (0, 7)");
                    }
                }
                catch (OperationCanceledException ex) when (ex.CancellationToken == cts.Token)
                {
                    cancelled++;
                }
                catch (Exception ex)
                {
                    failures.Add($"round {round}: the WhenAny threw {ex.GetType().Name}: {ex.Message}");
                }
            }
        }
        finally
        {
            CombinatorCore.TestHookBeforeWinnerClaim = null;
        }
        Assert.True(meeting.Missed == -1, $"round {meeting.Missed}: the producer and the cancellation did not both reach their claim within 10 s");
        Assert.True(failures.Count == 0, $"a producer finishing as the token was cancelled gave neither outcome ({ran} rounds, {cancelled} cancelled): {string.Join("; ", failures)}");
    }
}
#endif

using System;
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
        var meeting = new HookMeeting();
        object? target = null;
        int current = -1;
        int cancelled = 0;
        var race = new RaceRounds("WhenAnyProducerCancelRaceTests", TestUtil.Stress(20_000))
        {
            TimeCap = TimeSpan.FromSeconds(5),
            ClearHooks = () => CombinatorCore.TestHookBeforeWinnerClaim = null,
        };
        CombinatorCore.TestHookBeforeWinnerClaim = (combinator, byCancellation) =>
        {
            if (combinator == Volatile.Read(ref target))
            {
                meeting.Arrive(byCancellation ? 1 : 0, Volatile.Read(ref current));
            }
        };
        race.Run(round =>
        {
            var producer = new Promise<int>();
            using var cts = new CancellationTokenSource();
            SpindleTask<(int Index, int Result)> any = SpindleTask.WhenAny<int>([_ => producer.Task], cts.Token);
            Volatile.Write(ref current, round);
            Volatile.Write(ref target, any._source);
            (Exception? mine, Exception? theirs) = race.Racer.RunBothAtOnce(round, () => producer.TrySetResult(7), cts.Cancel);
            Volatile.Write(ref target, null);
            Assert.Null(mine);
            Assert.Null(theirs);
            if (!any.IsCompleted)
            {
                race.Fail("the producer finished and the token was cancelled, and the WhenAny is still pending");
                return;
            }
            try
            {
                (int index, int result) = any.GetAwaiter().GetResult();
                if (index != 0 || result != 7)
                {
                    race.Fail($"the WhenAny succeeded with ({index}, {result}), not the producer's (0, 7)");
                }
            }
            catch (OperationCanceledException ex) when (ex.CancellationToken == cts.Token)
            {
                cancelled++;
            }
            catch (Exception ex)
            {
                race.Fail($"the WhenAny threw {ex.GetType().Name}: {ex.Message}");
            }
        });
        Assert.True(meeting.Missed == -1, $"round {meeting.Missed}: the producer and the cancellation did not both reach their claim within 10 s");
        race.AssertNone($"a producer finishing as the token was cancelled gave neither outcome ({race.Ran} rounds, {cancelled} cancelled)");
    }
}
#endif

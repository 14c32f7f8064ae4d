using System;
using System.Threading;

using SpindleLib.Tests.Sources;

namespace SpindleLib.Tests.Combinators;

/// <summary>
/// A WhenAll given a token counts its inputs down as they finish, each with an interlocked decrement, and the input that
/// brings the count to zero completes it. Two inputs finishing on two threads at once must both be counted. A count made
/// of a read and a store lost one of them when the two met, and the WhenAll never completed (only the token could end
/// it); mutation testing (mut52) found no test that failed with such a count. Run alone: its two threads must run at once.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class WhenAllInputCountRaceTests
{
    [Fact]
    public void TwoInputsFinishingAtOnce_OfAWhenAllWithAToken_AreBothCounted()
    {
        using var cts = new CancellationTokenSource(); // never cancelled: it only makes the WhenAll count its inputs
        var race = new RaceRounds("WhenAllInputCountRaceTests", TestUtil.Stress(50_000));
        race.Run(round =>
        {
            var first = new Promise();
            var second = new Promise();
            SpindleTask all = SpindleTask.WhenAll([first.Task, second.Task], cts.Token);
            (Exception? mine, Exception? theirs) = race.Racer.RunBothAtOnce(round, () => first.TrySetResult(), () => second.TrySetResult());
            Assert.Null(mine);
            Assert.Null(theirs);
            if (!all.IsCompleted)
            {
                race.Fail("both inputs finished, and the WhenAll is still pending");
                return;
            }
            all.GetAwaiter().GetResult();
        });
        race.AssertNone("an input finishing at the same moment as another was not counted");
    }
}

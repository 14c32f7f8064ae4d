using System;
using System.Collections.Generic;
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
        int rounds = TestUtil.Stress(50_000);
        var failures = new List<string>();
        using var cts = new CancellationTokenSource(); // never cancelled: it only makes the WhenAll count its inputs
        using (var racer = new ContinuationRacer("WhenAllInputCountRaceTests racer"))
        {
            for (int round = 0; round < rounds && failures.Count < 10; round++)
            {
                var first = new Promise();
                var second = new Promise();
                SpindleTask all = SpindleTask.WhenAll([first.Task, second.Task], cts.Token);
                (Exception? mine, Exception? theirs) = racer.RunBothAtOnce(round, () => first.TrySetResult(), () => second.TrySetResult());
                Assert.Null(mine);
                Assert.Null(theirs);
                if (!all.IsCompleted)
                {
                    failures.Add($"round {round}: both inputs finished, and the WhenAll is still pending");
                    continue;
                }
                all.GetAwaiter().GetResult();
            }
        }
        Assert.True(failures.Count == 0, $"an input finishing at the same moment as another was not counted: {string.Join("; ", failures)}");
    }
}

using System;
using System.Collections.Generic;
using System.Diagnostics;
using SpindleLib.Tests.Sources;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// A promise's reset of a use nobody awaits, racing a late completer of that use by its token (an ask's reply landing as
/// the asker, timed out, resets for its next ask): the reset claims the use with one compare-and-swap, so either the
/// reply completes the old use and the reset then starts the next, or the reset comes first and the reply completes
/// nothing; the next use is pending either way. With that claim made a read and then a store (mutation testing mut53c,
/// mutant A6), the completer's claim was overwritten and its publication landed on the next use. Run alone: its two
/// threads must run at once.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class ResetClaimRaceTests
{
    [Fact]
    public void AResetRacingALateReplyByToken_LeavesTheNextUsePending()
    {
        int rounds = TestUtil.Stress(Spinning.Helps ? 50_000 : 2_000);
        var cap = Stopwatch.StartNew();
        var failures = new List<string>();
        var promise = new Promise<int>();
        using (var racer = new ContinuationRacer("ResetClaimRaceTests racer"))
        {
            for (int round = 0; round < rounds && failures.Count < 10 && cap.Elapsed < TimeSpan.FromSeconds(5); round++)
            {
                short old = promise.Token;
                (Exception? mine, Exception? theirs) = racer.RunBothAtOnce(round, promise.Reset, () => promise.TrySetResult(old, round));
                Assert.Null(mine);
                Assert.Null(theirs);
                if (promise.Token == old || promise.IsCompleted)
                {
                    failures.Add($"round {round}: after the reset the promise is on token {promise.Token} (was {old}), completed: {promise.IsCompleted}");
                    break; // the promise's state is not to be trusted for the next round
                }
            }
        }
        Assert.True(failures.Count == 0, $"a reset racing a late reply by token: {string.Join("; ", failures)}");
    }
}

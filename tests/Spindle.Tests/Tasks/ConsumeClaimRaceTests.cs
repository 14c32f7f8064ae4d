using System;
using System.Collections.Generic;
using System.Diagnostics;
using SpindleLib.Tests.Sources;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// Two threads reading the same completed task of an async method at once (the caller's mistake): the read consumes
/// the use with one compare-and-swap on the core's word, so exactly one gets the result and the other the await-once
/// error, and the pooled box goes back to its pool once. With that claim made a read and then a store (mutation testing
/// mut53c, mutant A3) both reads went through, each returning the box to its pool; <c>AsyncMethodRaceTests</c>' form of
/// this race, whose two threads a barrier releases, never met it. Run alone: its two threads must run at once.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class ConsumeClaimRaceTests
{
    private static async SpindleTask<int> Suspends(Promise<int> p) => await p.Task + 1;

    [Fact]
    public void TwoReadsAtOnce_OfACompletedMethodsTask_OneGetsTheResult_TheOtherTheAwaitOnceError()
    {
        int rounds = TestUtil.Stress(Spinning.Helps ? 50_000 : 2_000);
        var cap = Stopwatch.StartNew();
        var failures = new List<string>();
        using (var racer = new ContinuationRacer("ConsumeClaimRaceTests racer"))
        {
            for (int round = 0; round < rounds && failures.Count < 10 && cap.Elapsed < TimeSpan.FromSeconds(5); round++)
            {
                var p = new Promise<int>();
                SpindleTask<int> task = Suspends(p);
                p.SetResult(41);
                int mine = 0;
                int theirs = 0;
                (Exception? myError, Exception? theirError) = racer.RunBothAtOnce(
                    round, () => mine = task.GetAwaiter().GetResult(), () => theirs = task.GetAwaiter().GetResult());
                int reads = (myError is null ? 1 : 0) + (theirError is null ? 1 : 0);
                foreach (Exception? e in new[] { myError, theirError })
                {
                    if (e is not null and not InvalidOperationException)
                    {
                        failures.Add($"round {round}: a read threw {e.GetType().Name}: {e.Message}");
                    }
                }
                if (reads != 1)
                {
                    failures.Add($"round {round}: {reads} of the two reads got the result ({mine}, {theirs})");
                }
                else if (mine + theirs != 42)
                {
                    failures.Add($"round {round}: the read got {mine + theirs}, not 42");
                }
            }
        }
        Assert.True(failures.Count == 0, $"two reads of one completed task at once: {string.Join("; ", failures)}");
    }
}

using System;
using System.Threading.Tasks;
using SpindleLib.Tests.Sources;

namespace SpindleLib.Tests.Scopes;

/// <summary>
/// Two disposals of one scope at once: one exchange on the disposed flag picks the first, which waits for the children and
/// rethrows their failures; the other waits for the children too and rethrows nothing. With that exchange made a read
/// and then a store (mutation testing mut53c, mutant T1), both calls took the first one's path: each made its own promise
/// to wait on, the later one replaced the earlier, and the disposal whose promise was replaced never completed. Run
/// alone: its two threads must run at once.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class ScopeDisposeClaimRaceTests
{
    [Fact]
    public void TwoDisposalsAtOnce_BothEndOnceTheChildHas_AndOneRethrowsItsFailure()
    {
        var thrown = new InvalidOperationException("the child failed");
        var race = new RaceRounds("ScopeDisposeClaimRaceTests", TestUtil.Stress(Spinning.Helps ? 20_000 : 1_000)) { MaxFailures = 1, TimeCap = TimeSpan.FromSeconds(5) };
        race.Run(round =>
        {
            var scope = new TaskScope();
            var child = new Promise();
            scope.Run(_ => child.Task);
            Task? first = null;
            Task? second = null;
            (Exception? mine, Exception? theirs) = race.Racer.RunBothAtOnce(
                round, () => first = scope.DisposeAsync().AsTask(), () => second = scope.DisposeAsync().AsTask());
            Assert.Null(mine);
            Assert.Null(theirs);
            child.SetException(thrown);
            int rethrown = 0;
            foreach (Task disposal in new[] { first!, second! })
            {
                if (!((IAsyncResult)disposal).AsyncWaitHandle.WaitOne(TimeSpan.FromSeconds(2)))
                {
                    race.Fail("a disposal never ended after the scope's child had");
                }
            }
            foreach (Task disposal in new[] { first!, second! })
            {
                if (disposal.IsFaulted)
                {
                    Exception? e = disposal.Exception!.InnerException;
                    if (e == thrown)
                    {
                        rethrown++;
                    }
                    else
                    {
                        race.Fail($"a disposal threw {e}");
                    }
                }
            }
            if (rethrown != 1 && race.Failures.Count == 0)
            {
                race.Fail($"{rethrown} of the two disposals rethrew the child's failure, not 1");
            }
        });
        race.AssertNone("two disposals of one scope at once");
    }
}

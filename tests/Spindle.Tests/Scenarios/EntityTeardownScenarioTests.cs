using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Scenarios;

/// <summary>
/// Entities destroyed in the middle of a frame by another entity's code, the way a game does (a projectile's predicate or
/// update kills its target). The promise relied on: cancelling an await's token completes it at once and leaves nothing
/// registered, so a destroyed entity's predicate or code never runs again.
/// </summary>
public sealed class EntityTeardownScenarioTests
{
    [Fact]
    public async Task TargetKilledByAnEarlierPredicateInTheSamePhase_IsNotPolledAgain()
    {
        await TestUtil.WithTimeout(TestUtil.RunOnThread(() =>
        {
            FrameLoop loop = FrameUtil.NewBoundLoop();
            using var target = new CancellationTokenSource();
            bool targetDestroyed = false;
            int polledAfterDestroy = 0;
            int killerPolls = 0;

            // The killer's predicate, queued first, destroys the target on its second poll (in frame 2's Update).
            SpindleTask killer = loop.WaitUntil(() =>
            {
                if (++killerPolls == 2)
                {
                    target.Cancel();
                    targetDestroyed = true;
                    return true;
                }
                return false;
            }, CancellationToken.None);
            SpindleTask victim = loop.WaitUntil(() =>
            {
                if (targetDestroyed)
                {
                    polledAfterDestroy++;
                }
                return false;
            }, target.Token);

            loop.RunFrames(3);
            Assert.True(killer.IsCompleted);
            Assert.True(victim.IsCompleted);
            Assert.Throws<TaskCanceledException>(() => victim.GetAwaiter().GetResult());
            Assert.True(polledAfterDestroy == 0, "the destroyed target's predicate was polled " + polledAfterDestroy + " time(s) after its token was cancelled");
        }));
    }
}

using System.Threading.Tasks;

namespace SpindleLib.Tests.Jobs;

/// <summary>
/// Review44's pins of the deadlock check's shared record of the jobs it reached (<see cref="JobNode.DeadlockWalk"/>):
/// the walks from a thread's running jobs, innermost first, share it, so a job reached from an inner job is not looked
/// at again from an outer one. Sound because whether a job (node and version) leads to the target depends on that job
/// alone (its edges of its own version, the one target, the one awaiter), and a walk that returns false has looked at
/// every job it recorded. Driven on the walk itself: the "running" jobs are held pending behind a gated job.
/// </summary>
public class JobDeadlockWalkSharingTests
{
    private struct NoopJob : IJob
    {
        public readonly void Execute()
        {
        }
    }

    [Fact]
    public async Task AJobReachedFromAnInnerJobIsSkippedFromAnOuterOne_WhoseOtherPathsAreStillFollowed()
    {
        await JobTestUtil.Bounded(() =>
        {
            using var gate = new Gate();
            JobHandle held = new GateJob(gate).Schedule();
            JobHandle inner = new NoopJob().Schedule(held);
            JobHandle outer = new NoopJob().Schedule(held);
            JobHandle shared = new NoopJob().Schedule(JobHandle.CombineDependencies(inner, outer));
            JobHandle deadEnd = new NoopJob().Schedule(shared);
            JobHandle target = new NoopJob().Schedule(new NoopJob().Schedule(outer)); // reached from the outer job only
            JobHandle offShared = new NoopJob().Schedule(shared);

            var walk = new JobNode.DeadlockWalk();
            Assert.False(walk.Reaches(inner.Node!, target.Node, target.Version, null)); // records shared, deadEnd, offShared
#if DEBUG
            int innerEdges = walk.EdgesWalkedForTests;
#endif
            Assert.True(walk.Reaches(outer.Node!, target.Node, target.Version, null)); // shared skipped, its own path followed
#if DEBUG
            // The outer walk did not look at shared's edges again (deadEnd's, offShared's): only its own.
            Assert.True(walk.EdgesWalkedForTests - innerEdges <= 4, $"outer walk looked at {walk.EdgesWalkedForTests - innerEdges} edges");
#endif

            // A target behind the shared job is found from the inner job, which reaches it first, whichever order.
            var fresh = new JobNode.DeadlockWalk();
            Assert.True(fresh.Reaches(inner.Node!, offShared.Node, offShared.Version, null));

            // Another version of a reached node is another job: the same node at a stale version is not the target.
            var again = new JobNode.DeadlockWalk();
            Assert.False(again.Reaches(inner.Node!, deadEnd.Node, unchecked(deadEnd.Version - 1), null));

            gate.Release.Set();
            JobHandle.CombineDependencies(target, deadEnd).Complete();
            offShared.Complete();
        });
    }
}

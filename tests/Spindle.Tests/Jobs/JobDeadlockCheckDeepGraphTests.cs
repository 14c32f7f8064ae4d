using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Jobs;

/// <summary>
/// The check that refuses a Complete() inside a job on a handle that can finish only after that job walks the running
/// job's dependents. It walked them once per path, with no record of the jobs it had reached, so a graph with many shared
/// paths (diamonds: each level's two jobs combined and fanned out again, 2^20 paths through 20 levels and about 60 jobs)
/// made it give up after 100,000 edges and let the wait go ahead: a Complete() on a handle whose path from the running job
/// the walk had not reached by then waited for ever. The walk now reaches each job once.
/// </summary>
/// <remarks>
/// The job calls the check itself before it blocks, and blocks (Complete()) only if the check refused the wait: with a
/// check that gives up, the test fails at once instead of leaving a worker blocked for ever.
/// </remarks>
public class JobDeadlockCheckDeepGraphTests
{
    private const int Levels = 20;

    private sealed class Box : HandleSetLater
    {
        public Exception? CheckRefused;
        public Exception? CompleteThrew;
        public int EdgesWalked = -1;
        public bool Ran;
    }

    /// <summary>The running job: checks the wait on its target, then (unless the check let a real deadlock through) completes it.</summary>
    private struct WaitInsideJob : IJob
    {
        public Box Box;
        public bool Deadlocks;

        public readonly void Execute()
        {
            Box.Ran = true;
            JobHandle target = Box.Handle;
            try
            {
                JobNode.ThrowIfWaitsForARunningJob(target.Node!, target.Version);
            }
            catch (InvalidOperationException ex)
            {
                Box.CheckRefused = ex;
            }
#if DEBUG
            Box.EdgesWalked = ThreadCounters.CurrentIfRegistered!.DeadlockWalk!.EdgesWalkedForTests;
#endif
            if (Deadlocks && Box.CheckRefused is null)
            {
                return; // the check gave up: a Complete() here would wait for ever
            }
            try
            {
                target.Complete();
            }
            catch (Exception ex)
            {
                Box.CompleteThrew = ex;
                throw;
            }
        }
    }

    private struct NoopJob : IJob
    {
        public readonly void Execute()
        {
        }
    }

    /// <summary>Where the target hangs in the graph that depends on the running job.</summary>
    public enum Where
    {
        /// <summary>
        /// Off a dependent of the running job scheduled after the diamonds, so that the depth-first walk looks at it last,
        /// after every path through the diamonds (the old walk gave up before).
        /// </summary>
        LookedAtLast,

        /// <summary>After the last diamond: the walk finds it along the first path it follows.</summary>
        AfterTheDiamonds,
    }

    /// <summary>
    /// Schedules <see cref="Levels"/> diamonds after <paramref name="root"/>: at each level two jobs depend on the last
    /// level's combine, and are combined. Returns the last combine; <paramref name="jobs"/> counts the jobs made.
    /// </summary>
    private static JobHandle Diamonds(JobHandle root, out int jobs)
    {
        JobHandle last = root;
        jobs = 0;
        for (int level = 0; level < Levels; level++)
        {
            JobHandle a = new NoopJob().Schedule(last);
            JobHandle b = new NoopJob().Schedule(last);
            last = JobHandle.CombineDependencies(a, b);
            jobs += 3;
        }
        return last;
    }

    [Theory]
    [InlineData(Where.LookedAtLast)]
    [InlineData(Where.AfterTheDiamonds)]
    public async Task CompleteInsideTheJob_OnAHandleDeepInADiamondGraph_Throws(Where where)
    {
        await JobTestUtil.Bounded(() =>
        {
            var box = new Box();
            JobHandle job = new WaitInsideJob { Box = box, Deadlocks = true }.Schedule();
            JobHandle end = Diamonds(job, out _);
            JobHandle target = where == Where.AfterTheDiamonds
                ? new NoopJob().Schedule(end)
                : new NoopJob().Schedule(new NoopJob().Schedule(job));
            box.Handle = target;
            Exception? thrown = JobTestUtil.CompleteCatching(job);
            Assert.True(box.Ran);
            Assert.True(box.CheckRefused is not null, "the check let a wait that could never end go ahead (it gave up on the graph)");
            var refused = Assert.IsType<InvalidOperationException>(box.CompleteThrew);
            Assert.Contains("inside a job", refused.Message);
            Assert.Contains("It would wait for ever", refused.Message);
            Assert.Same(refused, thrown);
            Assert.Same(refused, JobTestUtil.CompleteCatching(target)); // the dependents fail with the job
            Assert.Same(refused, JobTestUtil.CompleteCatching(end));
        });
    }

    /// <summary>
    /// A job with the same graph behind it completes a handle that does not wait for it: no false refusal, and (Debug)
    /// the walk looked at each edge about once, not once per path.
    /// </summary>
    [Fact]
    public async Task CompleteInsideTheJob_OnAnIndependentHandle_WithADiamondGraphBehindIt_Completes()
    {
        await JobTestUtil.Bounded(() =>
        {
            var box = new Box();
            var ran = new Counter();
            JobHandle job = new WaitInsideJob { Box = box }.Schedule();
            JobHandle end = Diamonds(job, out int jobs);
            JobHandle independent = new CountJob(ran).Schedule(new NoopJob().Schedule());
            box.Handle = independent;
            Assert.Null(JobTestUtil.CompleteCatching(job));
            Assert.Null(box.CheckRefused);
            Assert.Null(box.CompleteThrew);
            Assert.Equal(1, ran.Read());
            Assert.Null(JobTestUtil.CompleteCatching(end));
#if DEBUG
            // Each job's list holds its dependents (two, or one from a job to its combine): about 2 edges a job. Walked
            // once per path, 2^20 paths, it was cut off at 100,000.
            Assert.InRange(box.EdgesWalked, jobs, 3 * jobs);
#endif
        });
    }
}

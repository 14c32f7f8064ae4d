using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Jobs;

/// <summary>
/// A wait refused because it could never end (a handle, or a task awaiting one, that finishes only after a job running on
/// this thread) names the situation the caller is really in. The job's own code (or code its Execute ran inline) is told
/// it is inside the job. Code that a blocked job's thread picked up to help (a Spindle.Run item on a worker, another job)
/// was told the same, "inside a job", with the fix "schedule it as a dependent", which fits neither: it is told that the
/// job is blocked further down its stack, and how to get out. Run alone: two cases hold workers, so that the blocked
/// job's thread is the only one that can pick the work up.
/// </summary>
[Collection(SequentialCollection.Name)]
public class JobWaitRefusalMessageTests
{
    private sealed class Box
    {
        public JobHandle Outer;
        public int NestedRuns;
        public Exception? SeenByOuter;
    }

    /// <summary>Blocks on a Spindle.Run item that completes this very job: a worker runs the item inline, nested in it.</summary>
    private struct BlockOnRunItemJob : IJob
    {
        public Box Box;

        public readonly void Execute()
        {
            Box box = Box;
            try
            {
                Spindle.Run(() =>
                {
                    Interlocked.Increment(ref box.NestedRuns);
                    box.Outer.Complete();
                }).GetAwaiter().GetResult();
            }
            catch (Exception ex)
            {
                box.SeenByOuter = ex;
                throw;
            }
        }
    }

    /// <summary>Completes a job it schedules, which completes this one: the waiting thread runs it nested in this one.</summary>
    private struct BlockOnNestedJob : IJob
    {
        public Box Box;

        public readonly void Execute()
        {
            try
            {
                new CompleteOuterJob { Box = Box }.Schedule().Complete();
            }
            catch (Exception ex)
            {
                Box.SeenByOuter = ex;
                throw;
            }
        }
    }

    private struct CompleteOuterJob : IJob
    {
        public Box Box;

        public readonly void Execute()
        {
            Interlocked.Increment(ref Box.NestedRuns);
            Box.Outer.Complete();
        }
    }

    /// <summary>Sets a promise whose awaiting method then runs inline, inside this job, and blocks on this job's task.</summary>
    private struct ResumeInlineJob : IJob
    {
        public Promise Promise;

        public readonly void Execute() => Promise.SetResult();
    }

    private static void AssertNestedMessage(Exception? thrown)
    {
        var refused = Assert.IsType<InvalidOperationException>(thrown);
        Assert.Contains("blocked further down this thread's stack", refused.Message);
        Assert.Contains("picked up", refused.Message);
        Assert.Contains("Await the handle or task here instead of blocking", refused.Message);
        Assert.DoesNotContain("inside a job", refused.Message);
    }

    /// <summary>
    /// The earlier session's case: a job blocked on a Spindle.Run item, which its worker runs nested in the job; the item
    /// completes the job. It is not inside a job: it is a Spindle.Run item under a blocked one.
    /// </summary>
    [Fact]
    public async Task RunItemNestedInABlockedJobOnAWorker_IsToldTheJobIsBlockedBelowIt()
    {
        await TestUtil.LeaveSpindleWorkers(); // HoldWorkers must be created off them (a test can start on one)
        using var others = new HoldWorkers(WorkerPool.Shared.WorkerCount - 1); // the free worker runs the job and the item
        var box = new Box();
        SpindleTask outer = Spindle.Run(() =>
        {
            box.Outer = new BlockOnRunItemJob { Box = box }.Schedule();
            box.Outer.Complete(); // this worker helps: it takes the job, which queues the item to this worker
        });
        Exception thrown = await TestUtil.Catch(() => TestUtil.WithTimeout(outer, 10));
        AssertNestedMessage(thrown);
        Assert.Same(thrown, box.SeenByOuter);
        Assert.Equal(1, box.NestedRuns);
    }

    /// <summary>A job that a thread blocked in another job's Complete() helps with, completing that blocked job.</summary>
    [Fact]
    public async Task JobNestedInABlockedJob_IsToldTheJobIsBlockedBelowIt()
    {
        await TestUtil.LeaveSpindleWorkers(); // HoldWorkers must be created off them (a test can start on one)
        Exception? thrown = null;
        var box = new Box();
        using (new HoldWorkers()) // only the waiting thread can run the jobs
        {
            await TestUtil.WithTimeout(TestUtil.RunOnThread(() =>
            {
                box.Outer = new BlockOnNestedJob { Box = box }.Schedule();
                thrown = JobTestUtil.CompleteCatching(box.Outer);
            }), 10);
        }
        AssertNestedMessage(thrown);
        Assert.Same(thrown, box.SeenByOuter);
        Assert.Equal(1, box.NestedRuns);
    }

    /// <summary>The job's own code, here an awaiting method its SetResult resumed inline, is told it is inside the job.</summary>
    [Fact]
    public async Task MethodResumedInlineInsideAJob_ReadingThatJobsTask_IsToldItIsInsideTheJob()
    {
        var promise = new Promise();
        var box = new Box();
        async SpindleTask ReadTheJobAfter()
        {
            await promise.Task;
            box.Outer.AsSpindleTask().GetAwaiter().GetResult();
        }
        SpindleTask reader = ReadTheJobAfter();
        box.Outer = new ResumeInlineJob { Promise = promise }.Schedule();
        await TestUtil.WithTimeout(TestUtil.RunOnThread(() => Assert.Null(JobTestUtil.CompleteCatching(box.Outer))), 10);
        Exception thrown = await TestUtil.Catch(() => TestUtil.WithTimeout(reader, 10));
        var refused = Assert.IsType<InvalidOperationException>(thrown);
        Assert.Contains("inside a job", refused.Message);
        Assert.Contains("SetResult", refused.Message);
        Assert.DoesNotContain("further down", refused.Message);
    }
}

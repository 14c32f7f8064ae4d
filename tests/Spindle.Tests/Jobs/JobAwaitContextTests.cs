using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Jobs;

/// <summary>
/// An awaiter of a job resumes with the awaiting code's AsyncLocal values, whoever finishes the job, and the thread that
/// finishes it (here a thread waiting in Complete() with values of its own, which leaves the continuations to the
/// workers: JobCompleteRunsNoContinuationsTests) keeps its own. Run alone: it holds every worker, so that the completing
/// thread runs the job.
/// </summary>
[Collection(SequentialCollection.Name)]
public class JobAwaitContextTests
{
    private static readonly AsyncLocal<string?> s_local = new();

    private static async Task<string?> AwaitInTask(JobHandle handle)
    {
        s_local.Value = "task";
        await handle;
        return s_local.Value;
    }

    private static async SpindleTask<string?> AwaitInSpindleTask(JobHandle handle)
    {
        s_local.Value = "spindle task";
        await handle;
        return s_local.Value;
    }

    [Fact]
    public async Task AwaitersResumeWithTheirOwnValues_AndTheCompletingThreadKeepsItsOwn()
    {
        await TestUtil.LeaveSpindleWorkers(); // HoldWorkers must be created off them (a test can start on one)
        string? seenByCallback = "not run";
        string? completerAfter = "not run";
        var callbackRan = new ManualResetEventSlim(false);
        Task<string?> inTask;
        SpindleTask<string?> inSpindleTask;
        using (var hold = new HoldWorkers()) // disposed before the asserts: the workers run the awaiters
        {
            var gate = new Flag();
            JobHandle handle = new HeldJob { Release = gate, Done = new Flag() }.Schedule();
            using (ExecutionContext.SuppressFlow())
            {
                // Started without this test's context, each awaiter sets its own value before it awaits.
                inTask = Task.Run(() => AwaitInTask(handle));
            }
            inSpindleTask = await Task.Run(() => AwaitInSpindleTask(handle));
            await Task.Run(() =>
            {
                s_local.Value = "callback";
                handle.GetAwaiter().OnCompleted(() =>
                {
                    seenByCallback = s_local.Value;
                    callbackRan.Set();
                });
            });
            await TestUtil.WithTimeout(TestUtil.RunOnThread(() =>
            {
                s_local.Value = "completer";
                gate.Set();
                handle.Complete(); // every worker is held: this thread runs the job, and its finish queues the awaiters
                completerAfter = s_local.Value;
            }));
        }
        Assert.True(callbackRan.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)));
        Assert.Equal("task", await TestUtil.WithTimeout(inTask));
        Assert.Equal("spindle task", await TestUtil.WithTimeout(TestUtil.AwaitAsync(inSpindleTask)));
        Assert.Equal("callback", seenByCallback);
        Assert.Equal("completer", completerAfter);
    }
}

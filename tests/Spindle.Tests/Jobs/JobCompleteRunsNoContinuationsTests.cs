using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Jobs;

/// <summary>
/// A thread that is not a worker runs jobs only in Complete(), never other code: when it finishes a job there, the
/// code awaiting that job (an async method, a callback, a wait from AsSpindleTask()) resumes on a worker, not inside the
/// Complete() of a main thread that may hold a lock or owe a frame (docs/decisions.md section 4's rule for user threads).
/// A thread blocked reading the job's wait is still woken at once, by the thread that finished the job. Run alone: it
/// holds every worker, so that the completing thread runs the job.
/// </summary>
[Collection(SequentialCollection.Name)]
public class JobCompleteRunsNoContinuationsTests
{
    private static async SpindleTask<int> AwaitInSpindleTask(JobHandle handle)
    {
        await handle;
        return Environment.CurrentManagedThreadId;
    }

    private static async Task<int> AwaitWaitInTask(JobHandle handle)
    {
        await handle.AsSpindleTask();
        return Environment.CurrentManagedThreadId;
    }

    [Fact]
    public async Task Complete_OnAPlainThread_LeavesTheJobsAwaitersToTheWorkers()
    {
        await TestUtil.LeaveSpindleWorkers(); // HoldWorkers must be created off them
        var gate = new Flag();
        int completer = 0, callbackThread = 0, blockedReaderWoke = 0;
        bool awaitersRanInsideComplete = true;
        SpindleTask<int> inSpindleTask;
        Task<int> inTask;
        var callbackRan = new ManualResetEventSlim(false);
        using (var hold = new HoldWorkers())
        {
            JobHandle handle = new HeldJob { Release = gate, Done = new Flag() }.Schedule();
            // Started here, off the workers, each registers before the job can run.
            inSpindleTask = AwaitInSpindleTask(handle);
            inTask = AwaitWaitInTask(handle);
            handle.GetAwaiter().OnCompleted(() =>
            {
                Volatile.Write(ref callbackThread, Environment.CurrentManagedThreadId);
                callbackRan.Set();
            });
            // A plain thread blocked reading the job's wait: the finish wakes it itself (a queued wake-up would wait
            // for the held workers).
            var blockedReader = new Thread(() =>
            {
                handle.AsSpindleTask().GetAwaiter().GetResult();
                Volatile.Write(ref blockedReaderWoke, 1);
            });
            blockedReader.Start();
            TestUtil.SpinUntil(() => (blockedReader.ThreadState & ThreadState.WaitSleepJoin) != 0, () => "the reader never blocked");
            await TestUtil.WithTimeout(TestUtil.RunOnThread(() =>
            {
                completer = Environment.CurrentManagedThreadId;
                gate.Set();
                handle.Complete(); // every worker is held: this thread runs the job
                awaitersRanInsideComplete = callbackRan.IsSet || inSpindleTask.IsCompleted || inTask.IsCompleted;
            }));
            Assert.True(blockedReader.Join(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "the blocked reader was not woken");
            Assert.Equal(1, Volatile.Read(ref blockedReaderWoke));
            Assert.True(hold.StillHolding);
        }
        Assert.False(awaitersRanInsideComplete, "an awaiter of the job ran inside the plain thread's Complete()");
        Assert.True(callbackRan.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)));
        int spindleTaskThread = await TestUtil.WithTimeout(TestUtil.AwaitAsync(inSpindleTask));
        int taskThread = await TestUtil.WithTimeout(inTask);
        Assert.NotEqual(completer, Volatile.Read(ref callbackThread));
        Assert.NotEqual(completer, spindleTaskThread);
        Assert.NotEqual(completer, taskThread);
    }

    private struct CountJob : IJob
    {
        public int[] Count;

        public readonly void Execute() => Interlocked.Increment(ref Count[0]);
    }

    private static async SpindleTask AwaitThenRecord(JobHandle handle, int[] threads, int slot)
    {
        await handle;
        threads[slot] = Environment.CurrentManagedThreadId;
    }

    /// <summary>
    /// The main thread of a frame waits for its own job and, while the workers are held, runs a job that background code
    /// awaits: that code's continuation is not its to run either.
    /// </summary>
    [Fact]
    public async Task Complete_OnAPlainThread_RunsAnotherJobButNotItsAwaiter()
    {
        await TestUtil.LeaveSpindleWorkers();
        var threads = new int[64];
        var tasks = new SpindleTask[threads.Length];
        var count = new int[1];
        int completer = 0;
        using (var hold = new HoldWorkers())
        {
            await TestUtil.WithTimeout(TestUtil.RunOnThread(() =>
            {
                completer = Environment.CurrentManagedThreadId;
                // Background jobs, each awaited by its own async method, queued ahead of the frame's job.
                for (int i = 0; i < threads.Length; i++)
                {
                    tasks[i] = AwaitThenRecord(new CountJob { Count = count }.Schedule(), threads, i);
                }
                JobHandle frame = new CountJob { Count = count }.Schedule(default);
                JobHandle last = default;
                for (int i = 0; i < 8; i++)
                {
                    last = new CountJob { Count = count }.Schedule(JobHandle.CombineDependencies(frame, last));
                }
                last.Complete();
                // Everything this thread ran came from the jobs' queue; none of the awaiting methods resumed here.
                foreach (SpindleTask t in tasks)
                {
                    Assert.False(t.IsCompleted, "a background job's awaiter resumed inside the frame's Complete()");
                }
            }));
        }
        foreach (SpindleTask t in tasks)
        {
            await TestUtil.WithTimeout(TestUtil.AwaitAsync(t));
        }
        Assert.All(threads, t => Assert.NotEqual(completer, t));
    }
}

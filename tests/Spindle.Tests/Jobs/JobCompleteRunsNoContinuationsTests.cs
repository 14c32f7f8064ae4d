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

    private sealed class AwaiterFailure : Exception
    {
    }

    /// <summary>
    /// The finish puts the thread's continuation depth at its bound around the job's awaiters and puts it back after
    /// them (Continuations.BeginQueueing, EndQueueing), whatever they do: one that throws is queued like the rest (and
    /// reported from the worker that runs it), and the finish of a second job run by the same Complete() nests its own
    /// pair inside. Once Complete() returns, the plain thread runs a continuation it resumes inline again, as before it
    /// waited: a depth left at the bound would have queued it (with every worker held, it would not have run).
    /// </summary>
    [Fact]
    public async Task Complete_OnAPlainThread_PutsTheContinuationDepthBack_AfterAThrowingAwaiterAndANestedFinish()
    {
        await TestUtil.LeaveSpindleWorkers();
        var failure = new AwaiterFailure();
        var gate = new Flag();
        bool ranInline = false;
        bool awaitersRanInsideComplete = true;
        var reports = await UnobservedReports.ObserveAsync(UnobservedReports.Own.Instances(failure), async own =>
        {
            using (var hold = new HoldWorkers())
            {
                JobHandle first = new HeldJob { Release = gate, Done = new Flag() }.Schedule();
                JobHandle second = new CountJob { Count = new int[1] }.Schedule(first);
                first.GetAwaiter().OnCompleted(() => throw failure);
                second.GetAwaiter().OnCompleted(() => throw failure);
                await TestUtil.WithTimeout(TestUtil.RunOnThread(() =>
                {
                    gate.Set();
                    second.Complete(); // every worker is held: this thread runs both jobs and finishes them
                    awaitersRanInsideComplete = !own.IsEmpty;
                    var promise = new Promise();
                    int thread = Environment.CurrentManagedThreadId;
                    promise.Task.GetAwaiter().OnCompleted(() => ranInline = Environment.CurrentManagedThreadId == thread);
                    promise.SetResult(); // resumes inline on this thread, unless the depth was left at the bound
                }));
                Assert.True(hold.StillHolding);
            }
            TestUtil.SpinUntil(() => own.Count == 2, () => $"{own.Count} of the 2 throwing awaiters were reported");
        });
        Assert.False(awaitersRanInsideComplete, "a throwing awaiter ran inside the plain thread's Complete()");
        Assert.True(ranInline, "after Complete() the plain thread queued a continuation it should run inline: its depth was left at the bound");
        Assert.Equal(2, reports.Count);
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

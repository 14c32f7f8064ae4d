using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Jobs;

/// <summary>
/// Handles scheduled and completed from any thread: Spindle workers (inside Spindle.Run), plain threads, pool threads,
/// jobs themselves; and awaited from async SpindleTask and async Task methods.
/// </summary>
public class JobThreadingTests
{
    /// <summary>Schedules a small DAG (chain, combine, parallel-for, batch) and returns its final handle.</summary>
    private static JobHandle ScheduleWork(Counter counter, int[] hits, JobHandle dependsOn = default)
    {
        JobHandle a = new CountJob(counter).Schedule(dependsOn);
        JobHandle b = new CountJob(counter).Schedule(a);
        JobHandle c = new IndexCountJob(hits).Schedule(hits.Length, 16, a);
        JobHandle d = new CountJob(counter).Schedule(JobHandle.CombineDependencies(b, c));
        return d;
    }

    private static void AssertWorkDone(Counter counter, int[] hits, int times = 1)
    {
        Assert.Equal(3 * times, counter.Read());
        Assert.All(hits, h => Assert.Equal(times, h));
    }

    [Fact]
    public async Task ScheduledAndCompletedOnAWorker()
    {
        bool onWorker = await TestUtil.WithTimeout(Spindle.Run(() =>
        {
            for (int i = 0; i < 200; i++)
            {
                var counter = new Counter();
                var hits = new int[500];
                ScheduleWork(counter, hits).Complete();
                AssertWorkDone(counter, hits);
            }
            return TestUtil.OnSpindleWorker;
        }));
        Assert.True(onWorker);
    }

    [Fact]
    public async Task ScheduledOnAWorker_CompletedOnAPlainThread_AndTheOtherWayRound()
    {
        for (int i = 0; i < 50; i++)
        {
            var counter = new Counter();
            var hits = new int[500];
            JobHandle h = await TestUtil.WithTimeout(Spindle.Run(() => ScheduleWork(counter, hits)));
            await TestUtil.WithTimeout(TestUtil.RunOnThread(h.Complete));
            AssertWorkDone(counter, hits);

            counter = new Counter();
            hits = new int[500];
            JobHandle h2 = default;
            await TestUtil.WithTimeout(TestUtil.RunOnThread(() => h2 = ScheduleWork(counter, hits)));
            await TestUtil.WithTimeout(Spindle.Run(h2.Complete));
            AssertWorkDone(counter, hits);
        }
    }

    [Fact]
    public async Task ScheduledWithoutFlushOnOneThread_CompletedOnAnother()
    {
        // The batch is global: another thread's Complete flushes what it needs.
        for (int i = 0; i < 50; i++)
        {
            var counter = new Counter();
            var hits = new int[100];
            JobHandle h = default;
            await TestUtil.WithTimeout(TestUtil.RunOnThread(() => h = ScheduleWork(counter, hits), "scheduler"));
            await TestUtil.WithTimeout(TestUtil.RunOnThread(h.Complete, "completer"));
            AssertWorkDone(counter, hits);
        }
    }

    [Fact]
    public async Task ChainAcrossThreads_EachLinkScheduledOnADifferentKindOfThread()
    {
        var counter = new Counter();
        var hits = new int[300];
        JobHandle h = default;
        for (int i = 0; i < 30; i++)
        {
            JobHandle previous = h;
            switch (i % 3)
            {
                case 0:
                    h = await TestUtil.WithTimeout(Spindle.Run(() => ScheduleWork(counter, hits, previous)));
                    break;
                case 1:
                    await TestUtil.WithTimeout(TestUtil.RunOnThread(() => h = ScheduleWork(counter, hits, previous)));
                    break;
                default:
                    h = await TestUtil.WithTimeout(Task.Run(() => ScheduleWork(counter, hits, previous)));
                    break;
            }
        }
        await JobTestUtil.Bounded(h.Complete);
        AssertWorkDone(counter, hits, 30);
    }

    private struct ScheduleChildrenJob : IJob
    {
        public Counter Counter;
        public int[] Hits;
        public int Depth;

        public readonly void Execute()
        {
            Counter.Increment();
            if (Depth == 0)
            {
                return;
            }
            // A job that schedules children and completes them: on a worker, or on a thread helping in Complete.
            JobHandle left = new ScheduleChildrenJob { Counter = Counter, Hits = Hits, Depth = Depth - 1 }.Schedule();
            JobHandle right = new ScheduleChildrenJob { Counter = Counter, Hits = Hits, Depth = Depth - 1 }.Schedule();
            JobHandle pf = new IndexCountJob(Hits).Schedule(Hits.Length, 4);
            JobHandle.CombineDependencies(left, right, pf).Complete();
        }
    }

    [Fact]
    public async Task JobsThatScheduleAndCompleteJobs_Complete()
    {
        await JobTestUtil.Bounded(() =>
        {
            const int Depth = 7;
            var counter = new Counter();
            var hits = new int[16];
            new ScheduleChildrenJob { Counter = counter, Hits = hits, Depth = Depth }.Schedule().Complete();
            Assert.Equal((1 << (Depth + 1)) - 1, counter.Read());
            int inner = (1 << Depth) - 1; // jobs with Depth > 0, each ran one parallel-for
            Assert.All(hits, h => Assert.Equal(inner, h));
        });
    }

    private static async SpindleTask<int> AwaitInSpindleTask(Counter counter, int[] hits)
    {
        JobHandle first = ScheduleWork(counter, hits);
        await first;
        int seen = counter.Read();
        JobHandle second = new CountJob(counter).Schedule(first); // first is done (maybe stale): no wait
        await second;
        await second; // again, now complete
        await second.AsSpindleTask();
        return seen;
    }

    private static async Task<int> AwaitInTask(Counter counter, int[] hits)
    {
        JobHandle first = ScheduleWork(counter, hits);
        await first;
        int seen = counter.Read();
        await new CountJob(counter).Schedule(first);
        await first.AsSpindleTask();
        return seen;
    }

    [Fact]
    public async Task Await_FromAsyncSpindleTaskAndAsyncTaskMethods_OnAnyThread()
    {
        for (int i = 0; i < 50; i++)
        {
            var c1 = new Counter();
            var h1 = new int[200];
            Assert.Equal(3, await TestUtil.WithTimeout(AwaitInSpindleTask(c1, h1)));
            Assert.Equal(4, c1.Read());

            var c2 = new Counter();
            var h2 = new int[200];
            Assert.Equal(3, await TestUtil.WithTimeout(AwaitInTask(c2, h2)));
            Assert.Equal(4, c2.Read());

            // Started on a worker.
            var c3 = new Counter();
            var h3 = new int[200];
            Assert.Equal(3, await TestUtil.WithTimeout(Spindle.Run(() => AwaitInSpindleTask(c3, h3))));
            Assert.Equal(4, c3.Read());

            // Started on a plain thread (with no synchronization context: resumes where the job finishes).
            var c4 = new Counter();
            var h4 = new int[200];
            Task<int>? started = null;
            await TestUtil.WithTimeout(TestUtil.RunOnThread(() => started = AwaitInTask(c4, h4)));
            Assert.Equal(3, await TestUtil.WithTimeout(started!));
            Assert.Equal(4, c4.Read());
        }
    }

    [Fact]
    public async Task Await_PendingJob_ResumesAfterItRan()
    {
        using var gate = new Gate();
        var ran = new Counter();
        JobHandle h = new GateJob(gate, ran).Schedule();
        Task awaiting = Resume(h, ran);
        SpindleTask asTask = h.AsSpindleTask();
        Assert.False(awaiting.IsCompleted);
        Assert.False(asTask.IsCompleted);
        gate.Release.Set();
        await TestUtil.WithTimeout(awaiting);
        await TestUtil.WithTimeout(asTask);
        Assert.Equal(1, ran.Read());

        static async Task Resume(JobHandle h, Counter ran)
        {
            await h;
            Assert.Equal(1, ran.Read());
        }
    }

    [Fact]
    public async Task Await_FlowsTheExecutionContext()
    {
        var local = new AsyncLocal<string>();
        using var gate = new Gate();
        JobHandle h = new GateJob(gate).Schedule();
        Task<string?> t = Read(h, local);
        gate.Release.Set();
        Assert.Equal("flowed", await TestUtil.WithTimeout(t));

        static async Task<string?> Read(JobHandle h, AsyncLocal<string> local)
        {
            local.Value = "flowed";
            await h;
            return local.Value;
        }
    }

    [Fact]
    public async Task CompleteFromManyKindsOfThreadsAtOnce_OnSeparateHandles()
    {
        const int PerProducer = 300;
        var tasks = new Task[6];
        for (int p = 0; p < tasks.Length; p++)
        {
            Action body = () =>
            {
                for (int i = 0; i < PerProducer; i++)
                {
                    var counter = new Counter();
                    var hits = new int[64];
                    JobHandle h = ScheduleWork(counter, hits);
                    if (i % 2 == 0)
                    {
                        JobHandle.ScheduleBatchedJobs();
                    }
                    h.Complete();
                    AssertWorkDone(counter, hits);
                }
            };
            tasks[p] = (p % 3) switch
            {
                0 => TestUtil.RunOnThread(body),
                1 => Task.Run(body),
                _ => TestUtil.AwaitAsync(Spindle.Run(body)),
            };
        }
        await TestUtil.WithTimeout(Task.WhenAll(tasks), TestUtil.StressTimeout(60));
    }

    private static async Task AwaitThenCompleteDependentTask(JobHandle awaited, JobHandle dependent)
    {
        await awaited;
        dependent.Complete();
    }

    private static async SpindleTask AwaitThenCompleteDependentSpindle(JobHandle awaited, JobHandle dependent)
    {
        await awaited;
        dependent.Complete();
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task AwaitAJob_ThenCompleteAJobThatDependsOnIt_DoesNotDeadlock(bool spindleTask)
    {
        // await a; b.Complete(); where b depends on a. The continuation of "await a" must not run at a point where
        // a's completion has not yet reached b, or b.Complete() waits forever for a notification that can only come
        // after the continuation returns. (Found by this test; fixed in 397dc0d.)
        using var gate = new Gate();
        var ran = new Counter();
        JobHandle a = new GateJob(gate).Schedule();
        JobHandle b = new CountJob(ran).Schedule(a);
        Task awaiting = spindleTask
            ? TestUtil.AwaitAsync(AwaitThenCompleteDependentSpindle(a, b))
            : AwaitThenCompleteDependentTask(a, b);
        Assert.False(awaiting.IsCompleted);
        gate.Release.Set();
        await TestUtil.WithTimeout(awaiting, 10);
        Assert.Equal(1, ran.Read());
    }
}

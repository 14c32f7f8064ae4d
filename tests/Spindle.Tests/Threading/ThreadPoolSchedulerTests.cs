using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using static SpindleLib.Tests.Combinators.CombinatorTestSupport;
using static SpindleLib.Tests.UnobservedReports;

namespace SpindleLib.Tests.Threading;

/// <summary>
/// Spindle on the .NET ThreadPool instead of its own workers. Swapping the default scheduler is process-wide, so
/// these tests run alone and always restore the worker pool.
/// </summary>
[Collection(SequentialCollection.Name)]
public class ThreadPoolSchedulerTests
{
    private static async Task WithThreadPoolScheduler(Func<Task> body)
    {
        Scheduler.Default = ThreadPoolScheduler.Instance;
        try
        {
            await body();
        }
        finally
        {
            Scheduler.Default = WorkerPool.Shared;
        }
    }

    public static TheoryData<string, string> ContextCases()
    {
        var data = new TheoryData<string, string>();
        foreach (string kind in Tasks.ContextFlowMatrixTests.Kinds)
        {
            // The kinds whose wait or resumption goes through the scheduler.
            if (kind.StartsWith("Spindle.", StringComparison.Ordinal) || kind.EndsWith(" async", StringComparison.Ordinal) || kind == "JobHandle")
            {
                foreach (string style in new[] { "spindle", "bcl", "valuetask" })
                {
                    data.Add(kind, style);
                }
            }
        }
        return data;
    }

    [Theory]
    [MemberData(nameof(ContextCases))]
    public async Task AsyncLocals_OnThreadPoolScheduler_FlowInAndNothingLeaksOut(string kind, string style)
    {
        // The ExecutionContext matrix (ContextFlowMatrixTests) for the kinds the scheduler runs, on the .NET ThreadPool.
        List<string> failures = null!;
        await WithThreadPoolScheduler(async () => failures = await Tasks.ContextFlowMatrixTests.Run(kind, style));

        Assert.True(failures.Count == 0, string.Join(Environment.NewLine, failures));
    }

    [Fact]
    public async Task Run_OnThreadPoolScheduler_RunsOnThreadPoolThreadsAndReturnsResults()
    {
        await WithThreadPoolScheduler(async () =>
        {
            (bool onPool, int value) = await TestUtil.WithTimeout(Spindle.Run(() => (Thread.CurrentThread.IsThreadPoolThread, 5)));
            Assert.True(onPool);
            Assert.Equal(5, value);

            var error = new InvalidTimeZoneException("on the pool");
            Assert.Same(error, await Assert.ThrowsAsync<InvalidTimeZoneException>(
                () => TestUtil.WithTimeout(Spindle.Run(new Action(() => throw error)))));
        });
        Assert.Same(WorkerPool.Shared, Scheduler.Default);
    }

    private static async SpindleTask<(bool YieldedToPool, bool SwitchCompletedAtOnce)> YieldAndSwitch()
    {
        await Spindle.Yield();
        bool onPool = Thread.CurrentThread.IsThreadPoolThread;
        bool completedAtOnce = Spindle.SwitchToWorker().GetAwaiter().IsCompleted;
        await Spindle.SwitchToWorker();
        return (onPool, completedAtOnce);
    }

    [Fact]
    public async Task YieldAndSwitchToWorker_OnThreadPoolScheduler_UseThreadPoolThreads()
    {
        await WithThreadPoolScheduler(async () =>
        {
            var (yieldedToPool, switchCompletedAtOnce) = await TestUtil.WithTimeout(YieldAndSwitch());
            Assert.True(yieldedToPool);
            Assert.True(switchCompletedAtOnce);
        });
    }

    private static async SpindleTask Fan(int[] counters, int baseId, int nested)
    {
        Interlocked.Increment(ref counters[baseId]);
        var tasks = new SpindleTask[nested];
        for (int k = 0; k < nested; k++)
        {
            int id = baseId + 1 + k;
            tasks[k] = Spindle.Run(() => { Interlocked.Increment(ref counters[id]); });
        }
        foreach (SpindleTask t in tasks)
        {
            await t;
        }
    }

    [Fact]
    public async Task Run_ManyItemsOnThreadPoolScheduler_EachRunsExactlyOnce()
    {
        const int Nested = 4;
        int topLevel = TestUtil.Stress(10_000);
        var counters = new int[topLevel * (1 + Nested)];

        await WithThreadPoolScheduler(async () =>
        {
            var tasks = new Task[topLevel];
            for (int i = 0; i < topLevel; i++)
            {
                int baseId = i * (1 + Nested);
                tasks[i] = TestUtil.AwaitAsync(Spindle.Run(() => Fan(counters, baseId, Nested)));
            }
            await TestUtil.WithTimeout(Task.WhenAll(tasks), TestUtil.StressTimeout(60));
        });

        Assert.Equal(0, counters.Count(c => c != 1));
    }

    /// <summary>
    /// A continuation that throws, run by a work item: Spindle's workers report the exception to
    /// Spindle.UnobservedException and go on; on the ThreadPool scheduler it escaped the item's
    /// <see cref="IThreadPoolWorkItem.Execute"/> into the ThreadPool, which crashes the process. The item is first run
    /// here as the ThreadPool runs it (its interface method), so that the defect fails an assertion rather than the test
    /// host; then a dispatching promise's throwing continuation goes through the ThreadPool scheduler for real.
    /// </summary>
    [Fact]
    public async Task AContinuationThatThrows_OnThreadPoolScheduler_IsReported_NotLetEscapeIntoTheThreadPool()
    {
        var error = new InvalidTimeZoneException("a continuation's fault on the pool");
        ConcurrentQueue<Exception> reported = Observe(Own.Instances(error), () =>
        {
            IThreadPoolWorkItem item = ContinuationWorkItem.Rent(static o => throw (Exception)o!, error);
            Assert.Null(Record.Exception(() => item.Execute()));
        });
        Assert.Same(error, Assert.Single(reported));

        await WithThreadPoolScheduler(async () => reported = await ObserveAsync(Own.Instances(error), queue =>
        {
            var promise = new Promise(runContinuationsAsynchronously: true);
            promise.Task.GetAwaiter().OnCompleted(() => throw error);
            promise.SetResult(); // queues the continuation to the ThreadPool
            TestUtil.SpinUntil(() => !queue.IsEmpty);
            return Task.CompletedTask;
        }));
        Assert.Same(error, Assert.Single(reported));
    }

    [Fact]
    public async Task GetResult_PendingOnThreadPoolScheduler_BlocksUntilCompleted()
    {
        await WithThreadPoolScheduler(async () =>
        {
            // No helping is possible on the ThreadPool; the blocked (non-pool) thread just waits for a pool thread.
            int result = 0;
            await TestUtil.WithTimeout(TestUtil.RunOnThread(() => result = Spindle.Run(() => 3).GetAwaiter().GetResult()));
            Assert.Equal(3, result);
        });
    }
}

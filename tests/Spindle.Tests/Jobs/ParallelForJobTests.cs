using System;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Jobs;

/// <summary>IJobParallelFor and IJobParallelForBatch: every index runs exactly once, batches cover the range exactly.</summary>
public class ParallelForJobTests
{
    private const int Batch = 64;

    public static TheoryData<int, int> Lengths => new()
    {
        { 0, Batch },
        { 1, Batch },
        { Batch - 1, Batch },
        { Batch, Batch },
        { Batch + 1, Batch },
        { 1_000_000, Batch },
        { 0, 1 },
        { 1, 1 },
        { 2, 1 },
        { 10_000, 1 },
        { 1_000_000, 1_000_000 },
        { 1_000_000, 999_999 },
        { 1_000, int.MaxValue },
    };

    private static void AssertEachIndexOnce(int[] hits)
    {
        int missing = hits.Count(h => h == 0);
        int repeated = hits.Count(h => h > 1);
        Assert.True(missing == 0 && repeated == 0, $"{missing} indices never ran and {repeated} ran more than once, of {hits.Length}");
    }

    [Theory]
    [MemberData(nameof(Lengths))]
    public async Task ParallelFor_EveryIndexRunsExactlyOnce(int length, int batchSize)
    {
        await JobTestUtil.Bounded(() =>
        {
            var hits = new int[length];
            JobHandle h = new IndexCountJob(hits).Schedule(length, batchSize);
            h.Complete();
            Assert.True(h.IsCompleted);
            AssertEachIndexOnce(hits);
        });
    }

    [Theory]
    [MemberData(nameof(Lengths))]
    public async Task ParallelForBatch_BatchesCoverTheRangeExactly_LastOneShorter(int length, int batchSize)
    {
        await JobTestUtil.Bounded(() =>
        {
            int batches = (int)(((long)length + batchSize - 1) / batchSize);
            var job = new BatchRecordJob
            {
                Hits = new int[length],
                BatchHits = new int[batches],
                BatchCounts = new int[batches],
                BatchSize = batchSize,
                Misaligned = new Counter(),
            };
            JobHandle h = job.ScheduleBatch(length, batchSize);
            h.Complete();
            Assert.True(h.IsCompleted);
            Assert.Equal(0, job.Misaligned.Read());
            AssertEachIndexOnce(job.Hits);
            AssertEachIndexOnce(job.BatchHits);
            for (int b = 0; b < batches; b++)
            {
                int expected = b < batches - 1 ? batchSize : length - (b * batchSize);
                Assert.True(expected == job.BatchCounts[b], $"batch {b} of {batches} had count {job.BatchCounts[b]}, expected {expected}");
            }
        });
    }

    [Fact]
    public async Task ParallelFor_ManyConcurrentFromSeveralThreads_EachIndexOnce()
    {
        const int Producers = 4;
        int rounds = TestUtil.Stress(100);
        var tasks = new Task[Producers];
        for (int p = 0; p < Producers; p++)
        {
            int seed = p;
            Action body = () =>
            {
                var rng = new Random(seed);
                for (int r = 0; r < rounds; r++)
                {
                    int length = rng.Next(0, 5_000);
                    int batch = rng.Next(1, 200);
                    var hits = new int[length];
                    var batchHits = new int[length];
                    JobHandle a = new IndexCountJob(hits).Schedule(length, batch);
                    var job = new BatchRecordJob
                    {
                        Hits = batchHits,
                        BatchHits = new int[(length + batch - 1) / batch],
                        BatchCounts = new int[(length + batch - 1) / batch],
                        BatchSize = batch,
                        Misaligned = new Counter(),
                    };
                    JobHandle b = job.ScheduleBatch(length, batch, rng.Next(2) == 0 ? a : default);
                    if (rng.Next(2) == 0)
                    {
                        JobHandle.ScheduleBatchedJobs();
                    }
                    JobHandle.CombineDependencies(a, b).Complete();
                    AssertEachIndexOnce(hits);
                    AssertEachIndexOnce(batchHits);
                    Assert.Equal(0, job.Misaligned.Read());
                }
            };
            tasks[p] = p % 2 == 0 ? TestUtil.RunOnThread(body) : TestUtil.AwaitAsync(Spindle.Run(body));
        }
        await TestUtil.WithTimeout(Task.WhenAll(tasks), TestUtil.StressTimeout(60));
    }

    /// <summary>
    /// A parallel job's runner waits in a queue without a reference on its node, and when it runs it helps whatever use
    /// was last published as ready. Here the caller finishes each small job alone, which leaves its runner queued; the
    /// node goes back to the pool and is rented at once for the next job, which waits on a held dependency while the
    /// workers reach the left-behind runner. No batch may run before the dependency is done, and every index runs once.
    /// </summary>
    [Fact]
    public async Task ParallelFor_RunnerLeftInAQueueByAnEarlierUse_NeverRunsALaterUseBeforeItsDependency()
    {
        await JobTestUtil.Bounded(
            () =>
            {
                const int Length = 64;
                int rounds = TestUtil.Stress(3_000);
                var budget = System.Diagnostics.Stopwatch.StartNew();
                var early = new Counter();
                for (int round = 0; round < rounds && budget.Elapsed < TimeSpan.FromSeconds(20); round++)
                {
                    var first = new int[Length];
                    new IndexCountJob { Hits = first, Early = early }.Schedule(Length, 1).Complete(); // most often alone
                    AssertEachIndexOnce(first);

                    var release = new Flag();
                    var done = new Flag();
                    JobHandle held = new HeldJob { Release = release, Done = done }.Schedule();
                    var second = new int[Length];
                    JobHandle after = new IndexCountJob { Hits = second, Dependency = done, Early = early }.Schedule(Length, 1, held);
                    JobHandle.ScheduleBatchedJobs();
                    SpinWait.SpinUntil(() => false, round % 4); // 0-3 ms for the workers to reach the runner left behind
                    release.Set();
                    after.Complete();
                    AssertEachIndexOnce(second);
                    Assert.True(early.Read() == 0, $"round {round}: {early.Read()} indices ran before their job's dependency finished");
                }
            },
            TestUtil.StressTimeout(60));
    }

    private struct CopyPerBatchJob : IJobParallelFor
    {
        public int[] Seen;
        public int Local;

        public void Execute(int index)
        {
            // Fields written here belong to this batch's copy: Local counts the indices this copy has run so far.
            Local++;
            Seen[index] = Local;
        }
    }

    [Fact]
    public async Task ParallelFor_EachBatchRunsOnItsOwnCopyOfTheJob()
    {
        await JobTestUtil.Bounded(() =>
        {
            const int Length = 10_000;
            const int BatchSize = 100;
            var seen = new int[Length];
            new CopyPerBatchJob { Seen = seen, Local = 0 }.Schedule(Length, BatchSize).Complete();
            for (int i = 0; i < Length; i++)
            {
                Assert.Equal((i % BatchSize) + 1, seen[i]);
            }
        });
    }

    [Theory]
    [InlineData(-1, 1)]
    [InlineData(int.MinValue, 1)]
    [InlineData(10, 0)]
    [InlineData(10, -1)]
    [InlineData(0, 0)]
    [InlineData(-1, 0)]
    public void BadInput_ThrowsArgumentOutOfRange_AndSchedulesNothing(int length, int batchSize)
    {
        var hits = new int[Math.Max(0, length)];
        var ex1 = Assert.Throws<ArgumentOutOfRangeException>(() => new IndexCountJob(hits).Schedule(length, batchSize));
        var ex2 = Assert.Throws<ArgumentOutOfRangeException>(() => new BatchRecordJob
        {
            Hits = hits,
            BatchHits = new int[16],
            BatchCounts = new int[16],
            BatchSize = Math.Max(1, batchSize),
            Misaligned = new Counter(),
        }.ScheduleBatch(length, batchSize));
        // The length is checked first.
        Assert.Equal(length < 0 ? "arrayLength" : "innerloopBatchCount", ex1.ParamName);
        Assert.Equal(length < 0 ? "arrayLength" : "batchSize", ex2.ParamName);
        JobHandle.ScheduleBatchedJobs();
        Thread.Sleep(20);
        Assert.All(hits, h => Assert.Equal(0, h));
    }

    private struct NestedParallelJob : IJob
    {
        public int[] Hits;
        public Counter Done;

        public readonly void Execute()
        {
            // Scheduled and completed from inside a job (on a worker, or on a thread helping in Complete).
            new IndexCountJob(Hits).Schedule(Hits.Length, 16).Complete();
            Done.Increment();
        }
    }

    [Fact]
    public async Task ParallelFor_ScheduledAndCompletedInsideJobs_Completes()
    {
        await JobTestUtil.Bounded(() =>
        {
            const int Outer = 64;
            var all = new int[Outer][];
            var handles = new JobHandle[Outer];
            var done = new Counter();
            for (int i = 0; i < Outer; i++)
            {
                all[i] = new int[1_000];
                handles[i] = new NestedParallelJob { Hits = all[i], Done = done }.Schedule();
            }
            JobHandle.CombineDependencies(handles).Complete();
            Assert.Equal(Outer, done.Read());
            foreach (int[] hits in all)
            {
                AssertEachIndexOnce(hits);
            }
        });
    }
}

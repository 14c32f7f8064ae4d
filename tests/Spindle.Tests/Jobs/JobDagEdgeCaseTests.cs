using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Jobs;

/// <summary>
/// Edge cases found by reading the job system adversarially, beside <see cref="JobDagModelTests"/>: bad input gives an
/// immediate, clear exception and leaves the jobs involved as they were; a job scheduled and never flushed completes
/// when another thread (plain or worker) completes it; an empty parallel-for, or one with a batch size above its
/// length, depends and is depended on like any job; and the documented promise that forgetting to flush never
/// deadlocks holds even for an await continuation that the flush itself runs.
/// </summary>
[Collection(SequentialCollection.Name)] // the flush test reads the global batch's timing: no other test may flush it meanwhile
public class JobDagEdgeCaseTests
{
    private struct NoopFor : IJobParallelFor
    {
        public readonly void Execute(int index)
        {
        }
    }

    private struct SignalJob : IJob
    {
        public ManualResetEventSlim Started;

        public readonly void Execute() => Started.Set();
    }

    [Fact]
    public async Task Schedule_BadInput_ThrowsAtOnceAndLeavesTheDependencyAsItWas()
    {
        await JobTestUtil.Bounded(() =>
        {
            var ran = new Counter();
            var gate = new Gate();
            JobHandle dep;
            try
            {
                dep = new GateJob(gate, ran).Schedule();
                var hits = new int[4];
                Assert.Equal("arrayLength", Assert.Throws<ArgumentOutOfRangeException>(() => new IndexCountJob(hits).Schedule(-1, 1, dep)).ParamName);
                Assert.Equal("innerloopBatchCount", Assert.Throws<ArgumentOutOfRangeException>(() => new IndexCountJob(hits).Schedule(4, 0, dep)).ParamName);
                Assert.Equal("batchSize", Assert.Throws<ArgumentOutOfRangeException>(() => new BatchRecordJob().ScheduleBatch(4, -3, dep)).ParamName);
                Assert.Equal("arrayLength", Assert.Throws<ArgumentOutOfRangeException>(() => new BatchRecordJob().ScheduleBatch(int.MinValue, 1, dep)).ParamName);

                Assert.False(dep.IsCompleted);
                Assert.Equal(0, hits[0] + hits[1] + hits[2] + hits[3]);
            }
            finally
            {
                gate.Dispose();
            }
            dep.Complete();
            Assert.Equal(1, ran.Read());
        });
    }

    /// <summary>
    /// A fan-in of 10,001 jobs, half of them waiting for a gated one, in one combine (there was a cap of 4,096 that made
    /// users combine in groups; there is none now) and in two groups combined, with a dependent after each.
    /// </summary>
    [Fact]
    public async Task CombineDependencies_10001Handles_WaitsForEveryOne_InOneCombineAndInGroups()
    {
        await JobTestUtil.Bounded(() =>
        {
            var ran = new Counter();
            var handles = new JobHandle[10_001];
            var gate = new Gate();
            JobHandle gated = new GateJob(gate, ran).Schedule();
            for (int i = 0; i < handles.Length; i++)
            {
                handles[i] = i % 2 == 0 ? new CountJob(ran).Schedule() : new CountJob(ran).Schedule(gated);
            }
            JobHandle all;
            JobHandle grouped;
            JobHandle afterAll;
            JobHandle afterGrouped;
            var after = new Counter();
            try
            {
                all = JobHandle.CombineDependencies(handles);
                grouped = JobHandle.CombineDependencies(JobHandle.CombineDependencies(handles.AsSpan(0, 5000)), JobHandle.CombineDependencies(handles.AsSpan(5000)));
                JobHandle.ScheduleBatchedJobs();
                Assert.False(all.IsCompleted);
                Assert.False(grouped.IsCompleted);
                afterAll = new CountJob(after).Schedule(all);
                afterGrouped = new CountJob(after).Schedule(grouped);
                Assert.False(afterAll.IsCompleted);
                Assert.False(afterGrouped.IsCompleted);
            }
            finally
            {
                gate.Dispose();
            }
            JobHandle.CompleteAll(afterAll, afterGrouped);
            Assert.Equal(2, after.Read());
            Assert.True(grouped.IsCompleted && all.IsCompleted);
            Assert.Equal(handles.Length + 1, ran.Read());
            foreach (JobHandle h in handles)
            {
                Assert.True(h.IsCompleted);
            }
        });
    }

    [Fact]
    public async Task EmptyAndOversizedParallelFor_InAChainWithAFault_BehaveLikeAnyJob()
    {
        await JobTestUtil.Bounded(() =>
        {
            var error = new InvalidOperationException("boom");
            var ran = new Counter();
            var hits = new int[5];
            JobHandle empty = new IndexCountJob(new int[0]).Schedule(0, 1);
            JobHandle oversized = new IndexCountJob(hits).Schedule(5, int.MaxValue, empty);
            JobHandle emptyBatch = new BatchRecordJob().ScheduleBatch(0, int.MaxValue, oversized);
            JobHandle fails = new ThrowJob(error, ran).Schedule(emptyBatch);
            JobHandle emptyAfterFault = new IndexCountJob(new int[0]).Schedule(0, 7, fails);
            JobHandle last = new CountJob(ran).Schedule(emptyAfterFault);
            Assert.Same(error, JobTestUtil.CompleteCatching(last));
            Assert.Same(error, JobTestUtil.CompleteCatching(emptyAfterFault));
            Assert.Same(error, JobTestUtil.CompleteCatching(fails));
            Assert.Null(JobTestUtil.CompleteCatching(emptyBatch));
            Assert.Equal(1, ran.Read()); // the throwing job ran; the one after the fault did not
            Assert.Equal([1, 1, 1, 1, 1], hits);
        });
    }

    [Fact]
    public async Task NeverFlushedJob_CompletedFromAPlainThreadAndAWorker_Completes()
    {
        await JobTestUtil.Bounded(() =>
        {
            for (int round = 0; round < TestUtil.Stress(50); round++)
            {
                var ran = new Counter();
                JobHandle a = new CountJob(ran).Schedule();
                JobHandle b = new CountJob(ran).Schedule(a);
                JobHandle c = new IndexCountJob(new int[64]).Schedule(64, 3, a);
                TestUtil.RunOnThread(b.Complete).Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds));
                TestUtil.WithTimeout(Spindle.Run(c.Complete)).GetAwaiter().GetResult();
                Assert.True(b.IsCompleted && c.IsCompleted);
                Assert.Equal(2, ran.Read());
            }
        });
    }

    /// <summary>
    /// A thread flushes a batch in which an empty parallel-for is followed by another job. An empty parallel-for
    /// finishes at once when it is made visible, on the flushing thread, and runs its awaiters' continuations there. A
    /// continuation that then waits for the job scheduled after it (the documented "Complete(), IsCompleted and
    /// awaiting a handle flush the batch themselves, so forgetting to flush never deadlocks") must see it complete. The
    /// continuation is registered from another thread while the flush is under way (once the batch's first job has
    /// started), the one moment it can be registered on a job still in a batch. It polls IsCompleted, bounded, rather
    /// than calling Complete(), which would hang for ever if the job never became visible.
    /// </summary>
    [Fact]
    public async Task AwaitContinuationRunByAFlush_WaitsForAJobLaterInTheSameBatch_AndItCompletes()
    {
        await JobTestUtil.Bounded(
            () =>
            {
                int hits = 0;
                for (int round = 0; round < TestUtil.Stress(40) && hits < 3; round++)
                {
                    using var started = new ManualResetEventSlim(false);
                    var ran = new Counter();
                    var before = new JobHandle[20_001];
                    before[0] = new SignalJob { Started = started }.Schedule();
                    for (int i = 1; i < before.Length; i++)
                    {
                        before[i] = new CountJob(ran).Schedule();
                    }
                    JobHandle empty = new NoopFor().Schedule(0, 1);
                    JobHandle later = new CountJob(ran).Schedule();
                    int flusher = Environment.CurrentManagedThreadId;
                    int continuationThread = 0;
                    bool laterCompleted = false;
                    using var continued = new ManualResetEventSlim(false);
                    Task registering = Task.Run(() =>
                    {
                        if (!started.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)))
                        {
                            throw new TimeoutException("the batch's first job never started");
                        }
                        empty.GetAwaiter().UnsafeOnCompleted(() =>
                        {
                            continuationThread = Environment.CurrentManagedThreadId;
                            // Helping: this may be the only worker. A job that never becomes visible, not speed: half the
                            // default (it was 5 s, for 20,000 jobs ahead of it on a possibly loaded machine).
                            laterCompleted = TestUtil.PollHelping(() => later.IsCompleted, TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds / 2));
                            continued.Set();
                        });
                    });
                    JobHandle.ScheduleBatchedJobs();
                    registering.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds));
                    Assert.True(continued.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "the continuation never ran");
                    later.Complete();
                    foreach (JobHandle h in before)
                    {
                        h.Complete();
                    }
                    if (continuationThread == flusher)
                    {
                        hits++; // the flush ran the continuation: the case this test is after
                    }
                    Assert.True(laterCompleted, $"round {round}: an await continuation (run on the flushing thread: {continuationThread == flusher}) waited {TestUtil.DefaultTimeoutSeconds / 2} s for a job later in the same batch, which never became visible (with Complete() it would hang for ever)");
                    Assert.Equal(20_001, ran.Read());
                }
            },
            TestUtil.StressTimeout(120));
    }
    /// <summary>
    /// "Dependents are notified before any awaiter's continuation runs" (docs/decisions.md section 6), so that
    /// <c>await a; b.Complete();</c> with b depending on a cannot deadlock. The same must hold when the awaited handle is
    /// a job that finishes as soon as a finishes, without running anything (a combine of a and a job done meanwhile, or
    /// an empty parallel-for scheduled after a), with or without a's failure: its continuation waits (bounded, polling
    /// IsCompleted, where Complete() would hang for ever) for another dependent of a, scheduled before it: a job, a
    /// combine or an empty parallel-for.
    /// </summary>
    [TwoWorkersTheory]
    [InlineData(Kind.Combine, Kind.Job, false)]
    [InlineData(Kind.Combine, Kind.Job, true)]
    [InlineData(Kind.EmptyFor, Kind.Job, false)]
    [InlineData(Kind.EmptyFor, Kind.Job, true)]
    [InlineData(Kind.Combine, Kind.Combine, false)]
    [InlineData(Kind.Combine, Kind.EmptyFor, true)]
    [InlineData(Kind.EmptyFor, Kind.Combine, true)]
    [InlineData(Kind.EmptyFor, Kind.EmptyFor, false)]
    public async Task AwaitedJobThatFinishesWithItsDependency_Continuation_WaitsForAnotherDependentOfIt_AndItCompletes(Kind awaitedKind, Kind otherKind, bool fails)
    {
        await JobTestUtil.Bounded(
            () =>
            {
                var error = new InvalidOperationException("the dependency failed");
                var gate = new Gate();
                var ran = new Counter();
                bool otherCompleted = false;
                using var continued = new ManualResetEventSlim(false);
                JobHandle other;
                try
                {
                    JobHandle gated = new GateJob(gate).Schedule();
                    JobHandle a = fails ? new ThrowJob(error).Schedule(gated) : new CountJob(ran).Schedule(gated);
                    other = Dependent(a, otherKind, ran); // scheduled first: its edge on a is older
                    JobHandle awaited = Dependent(a, awaitedKind, ran);
                    awaited.GetAwaiter().UnsafeOnCompleted(() =>
                    {
                        // An order defect, not speed: with it, other is made ready only after this returns, so the wait
                        // runs out whatever its bound. Half the default (it was 5 s, which a loaded machine can use up
                        // running other on the second worker), so the wait for `continued` below still sees it end.
                        otherCompleted = SpinWait.SpinUntil(() => other.IsCompleted, TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds / 2));
                        continued.Set();
                    });
                    gate.WaitStarted();
                }
                finally
                {
                    gate.Dispose();
                }
                Assert.True(continued.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "the continuation never ran");
                Assert.True(otherCompleted, $"the continuation of a job that finished with its dependency waited {TestUtil.DefaultTimeoutSeconds / 2} s for another dependent of that dependency, which was not made ready until the continuation returned (with Complete() it would hang for ever)");
                Assert.Equal(fails ? error : null, JobTestUtil.CompleteCatching(other));
                Assert.Equal(fails ? 0 : otherKind == Kind.Job ? 2 : 1, ran.Read());
            },
            TestUtil.StressTimeout(60));
    }

    public enum Kind
    {
        Job,
        Combine,
        EmptyFor,
    }

    /// <summary>A job of the given kind that depends on <paramref name="a"/>, which must not have finished yet.</summary>
    private static JobHandle Dependent(JobHandle a, Kind kind, Counter ran)
    {
        switch (kind)
        {
            case Kind.Job:
                return new CountJob(ran).Schedule(a);
            case Kind.EmptyFor:
                return new NoopFor().Schedule(0, 1, a);
            default:
                var gate = new Gate();
                JobHandle done = new GateJob(gate).Schedule();
                JobHandle combined = JobHandle.CombineDependencies(a, done); // a combine node: done is still pending here
                gate.Dispose();
                JobTestUtil.WaitByPolling(done); // not Complete(): this thread could pick up a's gated dependency
                return combined;
        }
    }
}

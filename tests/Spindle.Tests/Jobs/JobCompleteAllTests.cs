using System;
using System.Collections.Concurrent;
using System.Runtime.CompilerServices;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Jobs;

/// <summary>
/// <see cref="JobHandle.CompleteAll(ReadOnlySpan{JobHandle})"/> and its two- and three-handle forms: pending,
/// completed, default, stale and repeated handles; every job finished when it returns or throws; the first failure in
/// order rethrown and observed, the others left to their own Complete() (or reported when collected). Run alone: the
/// fault tests watch Spindle.UnobservedException and collect.
/// </summary>
[Collection(SequentialCollection.Name)]
public class JobCompleteAllTests
{
    [Fact]
    public async Task CompleteAll_PendingCompletedDefaultStaleAndRepeated_WaitsForEveryJob()
    {
        await JobTestUtil.Bounded(() =>
        {
            var ran = new Counter();
            JobHandle done = new CountJob(ran).Schedule();
            done.Complete();
            // Stale: its slot has gone back to its pool and may already hold another job.
            JobHandle stale = new CountJob(ran).Schedule();
            stale.Complete();
            for (int i = 0; i < 64; i++)
            {
                new CountJob(ran).Schedule().Complete();
            }
            var gate = new Gate();
            var handles = new JobHandle[12];
            var hits = new int[1000];
            try
            {
                JobHandle gated = new GateJob(gate, ran).Schedule();
                handles[0] = default;
                handles[1] = new CountJob(ran).Schedule(gated);
                handles[2] = done;
                handles[3] = stale;
                handles[4] = gated;
                handles[5] = new IndexCountJob(hits).Schedule(hits.Length, 16, gated);
                handles[6] = handles[1];
                handles[7] = JobHandle.CombineDependencies(handles[1], handles[5]);
                handles[8] = new CountJob(ran).Schedule(); // never flushed: CompleteAll flushes
                handles[9] = default;
                handles[10] = new CountJob(ran).Schedule(handles[7]);
                handles[11] = handles[10];
                Assert.False(handles[10].IsCompleted);
            }
            finally
            {
                gate.Dispose();
            }
            JobHandle.CompleteAll(handles);
            foreach (JobHandle h in handles)
            {
                Assert.True(h.IsCompleted);
            }
            Assert.Equal(2 + 64 + 4, ran.Read());
            Assert.All(hits, h => Assert.Equal(1, h));
            JobHandle.CompleteAll(handles); // again: all finished, nothing to rethrow
        });
    }

    [Fact]
    public async Task CompleteAll_EmptyAndTwoAndThreeHandleForms_WaitForEveryJob()
    {
        await JobTestUtil.Bounded(() =>
        {
            JobHandle.CompleteAll(ReadOnlySpan<JobHandle>.Empty);
            JobHandle.CompleteAll(default, default);
            JobHandle.CompleteAll(default, default, default);
            var ran = new Counter();
            JobHandle a = new CountJob(ran).Schedule();
            JobHandle b = new CountJob(ran).Schedule(a);
            JobHandle.CompleteAll(b, a);
            Assert.True(a.IsCompleted && b.IsCompleted);
            Assert.Equal(2, ran.Read());
            JobHandle c = new CountJob(ran).Schedule();
            JobHandle d = new CountJob(ran).Schedule(c);
            JobHandle e = new CountJob(ran).Schedule(d);
            JobHandle.CompleteAll(e, default, c);
            Assert.True(c.IsCompleted && d.IsCompleted && e.IsCompleted);
            Assert.Equal(5, ran.Read());
            JobHandle.CompleteAll(a, b, e); // stale by now, or completed
        });
    }

    public static TheoryData<int> Forms => new() { 0, 2, 3 };

    /// <summary>
    /// The first handle failed at once; the second is held until the calling thread sleeps in the call. CompleteAll still
    /// waits for it before it rethrows, so the caller never gets control back while a job may still be touching its data.
    /// </summary>
    [Theory]
    [MemberData(nameof(Forms))]
    public async Task CompleteAll_AFailedHandleFirst_StillWaitsForTheOthers_ThenRethrowsIt(int form)
    {
        await JobTestUtil.Bounded(() =>
        {
            var error = new InvalidOperationException("first");
            JobHandle failed = new ThrowJob(error).Schedule();
            JobTestUtil.WaitByPolling(failed);
            var release = new Flag();
            var started = new Flag();
            var done = new Flag();
            JobHandle held = new HeldJob { Started = started, Release = release, Done = done }.Schedule();
            JobHandle.ScheduleBatchedJobs();
            // Released from another thread once the held job runs and this thread has gone to sleep in the call below
            // (its helping wait blocks once it finds nothing to run), or after a bound.
            Thread caller = Thread.CurrentThread;
            var releaser = new Thread(() =>
            {
                started.Wait();
                SpinWait.SpinUntil(() => (caller.ThreadState & ThreadState.WaitSleepJoin) != 0, TimeSpan.FromSeconds(5));
                release.Set();
            });
            releaser.Start();
            Exception? thrown = Record.Exception(() =>
            {
                switch (form)
                {
                    case 0:
                        JobHandle.CompleteAll([failed, held]);
                        break;
                    case 2:
                        JobHandle.CompleteAll(failed, held);
                        break;
                    default:
                        JobHandle.CompleteAll(failed, default, held);
                        break;
                }
            });
            Assert.True(done.IsSet, "CompleteAll returned before every job had finished");
            Assert.Same(error, thrown);
            releaser.Join();
        });
    }

    [Fact]
    public async Task CompleteAll_TwoFailures_RethrowsTheFirstInOrder_TheOtherStillThrowsFromItsComplete()
    {
        await JobTestUtil.Bounded(() =>
        {
            var first = new InvalidOperationException("first");
            var second = new InvalidTimeZoneException("second");
            var ran = new Counter();
            JobHandle a = new ThrowJob(second).Schedule();
            JobHandle b = new ThrowJob(first).Schedule();
            JobHandle c = new CountJob(ran).Schedule();
            JobHandle dependent = new CountJob(ran).Schedule(b);
            Assert.Same(first, Record.Exception(() => JobHandle.CompleteAll([c, dependent, a, b])));
            Assert.Same(second, JobTestUtil.CompleteCatching(a));
            Assert.Same(first, JobTestUtil.CompleteCatching(b));
            Assert.Equal(1, ran.Read()); // c ran; the dependent of the failed b did not
        });
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    private static Exception? FailTwiceAndCompleteAll(Exception first, Exception second)
    {
        JobHandle a = new ThrowJob(first).Schedule();
        JobHandle b = new ThrowJob(second).Schedule();
        return Record.Exception(() => JobHandle.CompleteAll(a, b));
    }

    /// <summary>The failure CompleteAll rethrows is observed; the one it does not is reported when collected, once.</summary>
    [Fact]
    public async Task CompleteAll_TheFailureItRethrowsIsObserved_AnotherIsReportedWhenCollected()
    {
        await JobTestUtil.Bounded(() =>
        {
            var first = new InvalidTimeZoneException("rethrown by CompleteAll");
            var second = new InvalidTimeZoneException("left to its own Complete(), which nobody calls");
            Exception? thrown = null;
            ConcurrentQueue<Exception> reported = UnobservedReports.Observe(UnobservedReports.Own.Instances(first, second), r =>
            {
                thrown = FailTwiceAndCompleteAll(first, second);
                Assert.True(JobTestUtil.CollectUntilReported(r, second, 50), "the failure CompleteAll did not rethrow was never reported");
                Assert.False(JobTestUtil.CollectUntilReported(r, first, 5), "the failure CompleteAll rethrew was reported as unobserved");
            });
            Assert.Same(first, thrown);
            Assert.Single(reported, e => ReferenceEquals(e, second));
            Assert.DoesNotContain(reported, e => ReferenceEquals(e, first));
        });
    }

    /// <summary>Inside a job, on a handle that waits for it: refused as Complete() refuses it, not a wait for ever.</summary>
    [Fact]
    public async Task CompleteAll_InsideAJob_OnItsOwnDependent_ThrowsAsCompleteDoes()
    {
        await JobTestUtil.Bounded(() =>
        {
            var box = new StrongBox<JobHandle>();
            var caught = new StrongBox<Exception?>();
            var gate = new Gate();
            JobHandle outer;
            try
            {
                JobHandle dep = new GateJob(gate).Schedule();
                outer = new CompleteAllInsideJob { Dependent = box, Caught = caught }.Schedule(dep);
                box.Value = new CountJob(new Counter()).Schedule(outer);
            }
            finally
            {
                gate.Dispose();
            }
            box.Value.Complete();
            Assert.IsType<InvalidOperationException>(caught.Value);
            Assert.Contains("inside a job", caught.Value!.Message, StringComparison.Ordinal);
        });
    }

    private struct CompleteAllInsideJob : IJob
    {
        public StrongBox<JobHandle> Dependent;
        public StrongBox<Exception?> Caught;

        public readonly void Execute()
        {
            JobHandle dependent = Dependent.Value;
            Caught.Value = Record.Exception(() => JobHandle.CompleteAll([default, dependent]));
        }
    }
}

using System;
using System.Collections.Concurrent;
using System.Threading;
using System.Threading.Tasks;
using Xunit;

namespace SpindleLib.Tests.Jobs;

/// <summary>
/// <see cref="JobHandle.AsSpindleTask"/> on a pending job revives a wait of that job that a combinator let go of (see
/// JobWait's remarks, "Reviving"), instead of leaving one more wait on the job's push-only waiter list each turn. The two
/// races of the revival are forced here with the Debug hook <c>JobWait.TestHookBeforeRevive</c> (between the look at the
/// let-go wait and the CAS that revives it): the job's finish claiming the wait first, and a second caller reviving it
/// first. Run alone: the hook, the count of waits in use and the unobserved-exception event are process-wide.
/// </summary>
[Collection(SequentialCollection.Name)]
public class JobWaitRevivalTests
{
    private sealed class RevivalFault(string message) : Exception(message);

    /// <summary>A job that fails (or succeeds) once its gate opens: it depends on a gated job that holds a worker.</summary>
    private sealed class GatedJob : IDisposable
    {
        private readonly Gate _gate = new();

        public GatedJob(Exception? error)
        {
            Error = error;
            JobHandle gated = new GateJob(_gate).Schedule();
            Handle = error is null ? new CountJob(new Counter()).Schedule(gated) : new ThrowJob(error).Schedule(gated);
            JobHandle.ScheduleBatchedJobs();
            _gate.WaitStarted();
        }

        public Exception? Error { get; }

        public JobHandle Handle { get; }

        /// <summary>Opens the gate and waits (without observing) until the job has finished.</summary>
        public void Finish()
        {
            _gate.Release.Set();
            JobTestUtil.WaitByPolling(Handle);
        }

        public void Dispose() => _gate.Release.Set();
    }

    /// <summary>Lets go of <paramref name="wait"/>: a WhenAny it loses detaches from it.</summary>
    private static void LetGo(SpindleTask wait)
    {
        var winner = new Promise();
        SpindleTask<int> any = SpindleTask.WhenAny(wait, winner.Task);
        winner.SetResult();
        Assert.Equal(1, any.GetAwaiter().GetResult());
    }

    /// <summary>
    /// A job that fails, awaited through its wait (which observes the fault, and goes back to this thread's pool): the
    /// job's handle is kept (returned), the wait is not (only a weak reference to it, in <paramref name="wait"/>).
    /// </summary>
    [System.Runtime.CompilerServices.MethodImpl(System.Runtime.CompilerServices.MethodImplOptions.NoInlining)]
    private static GatedJob FailAndRead(Exception boom, out WeakReference wait)
    {
        var job = new GatedJob(boom);
        SpindleTask read = job.Handle.AsSpindleTask();
        wait = new WeakReference(read._source);
        job.Finish();
        Assert.Same(boom, Record.Exception(() => read.GetAwaiter().GetResult()));
        return job;
    }

    /// <summary>
    /// A job that fails, with a wait on it taken and dropped unread (a wait nobody reads observes nothing: the job's holder
    /// reports the fault when it is collected). True if that wait was the object <paramref name="wait"/> refers to.
    /// </summary>
    [System.Runtime.CompilerServices.MethodImpl(System.Runtime.CompilerServices.MethodImplOptions.NoInlining)]
    private static bool FailWithAWaitDroppedUnread(Exception boom, WeakReference wait)
    {
        using var job = new GatedJob(boom);
        SpindleTask dropped = job.Handle.AsSpindleTask();
        bool same = ReferenceEquals(dropped._source, wait.Target);
        job.Finish();
        // The handle is completed before the finish runs the job's waiters (on the worker that ran it): wait for this one's
        // (seen in CI: an assertion of IsCompleted right after Finish failed under load).
        TestUtil.SpinUntil(() => dropped.IsCompleted, () => "the failed job's finish never ran the dropped wait's waiter");
        return same;
    }

    [Fact]
    public async Task AFailedJobKeptByItsCaller_KeepsNoLinkToAWaitThatWentBackToItsPool_SoALaterJobsUnobservedFaultIsStillReported()
    {
        // A failed node is never recycled, so it is never cleared for a pool: a link it kept to the last wait pushed on it
        // (the chain's head, JobNode.LatestWait) would outlive that wait's read, and hold whatever the pooled wait is
        // rented for next. Here the next use is a wait on another job that fails, taken and dropped unread: that job's
        // fault must still be reported when it is collected, not kept from its finalizer by the first job's handle.
        var kept = new RevivalFault("the failed job whose handle is kept");
        await ALaterJobsDroppedFaultIsReported(
            () =>
            {
                GatedJob first = FailAndRead(kept, out WeakReference wait);
                return (wait, first);
            },
            "a failed job kept by its caller still linked to the wait, pooled and rented for that job");
    }

    /// <summary>
    /// The shared ending of the cases where a link could outlive a wait's read: <paramref name="arrange"/> leaves a wait
    /// read and pooled (referred to weakly) and returns what the caller keeps (the suspected holder of a link to it); a later
    /// job's wait, rented from the pool as that very wait and dropped unread, must still have its fault reported when it is
    /// collected while the kept object lives. A kept object that is disposable is disposed at the end.
    /// </summary>
    private static Task ALaterJobsDroppedFaultIsReported(Func<(WeakReference Pooled, object Kept)> arrange, string whatKeptTheLink)
        => JobTestUtil.Bounded(() =>
        {
            var later = new RevivalFault("a later job's fault, read by nobody");
            ConcurrentQueue<Exception> reports = UnobservedReports.Observe(e => ReferenceEquals(e, later), r =>
            {
                (WeakReference pooled, object kept) = arrange();
                Assert.True(FailWithAWaitDroppedUnread(later, pooled), "the later job's wait was not the pooled one: the case was not forced");
                Assert.True(JobTestUtil.CollectUntilReported(r, later, 50), "a later job's unobserved fault was never reported: " + whatKeptTheLink);
                GC.KeepAlive(kept);
                (kept as IDisposable)?.Dispose();
            });
            Assert.Single(reports);
        });

    /// <summary>
    /// Two waits on one job that then succeeds: the first is read (pooled again; <paramref name="read"/> refers to it
    /// weakly), the second, taken after it (so chained to it), is handed back unread.
    /// </summary>
    [System.Runtime.CompilerServices.MethodImpl(System.Runtime.CompilerServices.MethodImplOptions.NoInlining)]
    private static SpindleTask TwoWaitsOneReadOneKept(out WeakReference read)
    {
        using var job = new GatedJob(null);
        SpindleTask first = job.Handle.AsSpindleTask();
        SpindleTask kept = job.Handle.AsSpindleTask();
        Assert.NotSame(first._source, kept._source);
        read = new WeakReference(first._source);
        job.Finish();
        first.GetAwaiter().GetResult();
        // The finish may run the first wait's waiter before the second's: wait for the second too (the caller asserts it completed).
        TestUtil.SpinUntil(() => kept.IsCompleted, () => "the job's finish never ran the kept wait's waiter");
        return kept;
    }

    [Fact]
    public async Task AFinishedWaitKeptUnread_KeepsNoLinkToAnEarlierWaitOfItsJob_SoALaterJobsUnobservedFaultIsStillReported()
    {
        // A wait nobody reads is legal (it observes nothing), and a caller may keep its task (looking at IsCompleted, say).
        // Its link to the wait chained before it on the same job (JobWait._previous) serves only while that job is pending:
        // kept after the finish, it would hold that earlier wait after its read and pooling, and whatever it is rented for
        // next, here a later failed job's wait, dropped unread, whose fault must still be reported when it is collected.
        await ALaterJobsDroppedFaultIsReported(
            () =>
            {
                SpindleTask kept = TwoWaitsOneReadOneKept(out WeakReference read);
                Assert.True(kept.IsCompleted);
                return (read, kept._source!);
            },
            "a finished wait kept unread still linked to an earlier wait of its job, pooled and rented for that job");
    }

#if DEBUG
    private static void RunWithHook(Action<JobWait> hook, Action body)
    {
        JobWait.TestHookBeforeRevive = w =>
        {
            JobWait.TestHookBeforeRevive = null; // once
            hook(w);
        };
        try
        {
            body();
        }
        finally
        {
            JobWait.TestHookBeforeRevive = null;
        }
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task TheJobsFinishClaimsTheLetGoWaitAsItIsRevived_TheCallerGetsTheJobsOutcome_AndEveryWaitIsPooledOnce(bool fails)
    {
        await JobTestUtil.Bounded(() =>
        {
            JobWaitBaseline pool = JobWaitBaseline.Take();
            var boom = fails ? new RevivalFault("finished as the wait was revived") : null;
            ConcurrentQueue<Exception> reports = UnobservedReports.Observe(e => e is RevivalFault, () =>
            {
                using var job = new GatedJob(boom);
                SpindleTask letGo = job.Handle.AsSpindleTask();
                LetGo(letGo);
                bool hooked = false;
                SpindleTask late = default;
                RunWithHook(
                    w =>
                    {
                        hooked = true;
                        Assert.Same(letGo._source, w);
                        job.Finish(); // its finish claims the let-go wait from Abandoned, ends it unread and pools it
                        pool.WaitUntilAllReturned("the finished job's let-go wait never went back to its pool");
                    },
                    () => late = job.Handle.AsSpindleTask());
                Assert.True(hooked, "the call never found the let-go wait: the race was not forced");
                Assert.True(late.IsCompleted, "the caller was given a wait that the job's finish had already ended (and pooled)");
                Assert.Same(boom, Record.Exception(() => late.GetAwaiter().GetResult()));
                Assert.Throws<InvalidOperationException>(() => letGo.GetAwaiter().GetResult());
            });
            Assert.Empty(reports);
            pool.AssertAllReturnedOnce();
        });
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task ASecondCallerRevivesTheLetGoWaitFirst_TheFirstGetsANewOne_AndEachContinuationRunsOnce(bool fails)
    {
        await JobTestUtil.Bounded(() =>
        {
            JobWaitBaseline pool = JobWaitBaseline.Take();
            var boom = fails ? new RevivalFault("revived by two callers") : null;
            ConcurrentQueue<Exception> reports = UnobservedReports.Observe(e => e is RevivalFault, () =>
            {
                using var job = new GatedJob(boom);
                SpindleTask letGo = job.Handle.AsSpindleTask();
                LetGo(letGo);
                SpindleTask second = default;
                SpindleTask first = default;
                RunWithHook(_ => second = job.Handle.AsSpindleTask(), () => first = job.Handle.AsSpindleTask());
                Assert.Same(letGo._source, second._source); // the second caller revived it
                Assert.IsType<JobWait>(first._source);
                Assert.NotSame(letGo._source, first._source); // the first, whose CAS lost, rented a new wait
                Assert.Throws<InvalidOperationException>(() => letGo.GetAwaiter().GetResult()); // stale: never the new use's read
                Assert.Equal(2, pool.Held);
                Assert.Equal(2, job.Handle.Node!.WaiterCountForTests(job.Handle.Version));
                int ran = 0;
                first.GetAwaiter().UnsafeOnCompleted(() => Interlocked.Increment(ref ran));
                second.GetAwaiter().UnsafeOnCompleted(() => Interlocked.Increment(ref ran));
                job.Finish();
                TestUtil.SpinUntil(() => Volatile.Read(ref ran) == 2, () => $"{Volatile.Read(ref ran)} of the 2 continuations ran");
                Assert.Same(boom, Record.Exception(() => first.GetAwaiter().GetResult()));
                Assert.Same(boom, Record.Exception(() => second.GetAwaiter().GetResult()));
                Assert.Equal(2, Volatile.Read(ref ran));
            });
            Assert.Empty(reports);
            pool.AssertAllReturnedOnce();
        });
    }

    /// <summary>A job type used only here, so that its pool holds only its own nodes, which no other job takes meanwhile.</summary>
    private struct LateChainJob : IJob
    {
        public readonly void Execute()
        {
        }
    }

    /// <summary>
    /// With every worker held, takes a wait on a job whose finish (run on this thread, so its node goes back to this
    /// thread's pool) lands between the wait's push and its link on the node's chain: the push was delivered, so the
    /// call hands back the (completed) wait, and links it after the node was cleared for its pool. The wait is read
    /// (pooled again); hands back the pooled node, and a weak reference to the wait.
    /// </summary>
    /// <summary>
    /// Calls <c>job.AsSpindleTask()</c> with the job completed on this thread between the call's push of its wait's edge
    /// and its link (<see cref="JobNode.TestHookAfterEdgePush"/>); <paramref name="finished"/> tells whether
    /// <paramref name="forced"/> held right after that completion (the race was forced).
    /// </summary>
    private static SpindleTask AsSpindleTaskFinishingAfterThePush(JobHandle job, Func<bool> forced, out bool finished)
    {
        bool held = false;
        JobNode.TestHookAfterEdgePush = _ =>
        {
            JobNode.TestHookAfterEdgePush = null;
            job.Complete();
            held = forced();
        };
        try
        {
            SpindleTask task = job.AsSpindleTask();
            finished = held;
            return task;
        }
        finally
        {
            JobNode.TestHookAfterEdgePush = null;
        }
    }

    [System.Runtime.CompilerServices.MethodImpl(System.Runtime.CompilerServices.MethodImplOptions.NoInlining)]
    private static JobNode ChainAfterTheFinish(out WeakReference wait)
    {
        using var hold = new HoldWorkers();
        JobHandle job = new LateChainJob().Schedule();
        JobNode node = job.Node!;
        // The job runs here: its finish delivers the wait's edge, and the node goes back to this thread's pool.
        SpindleTask late = AsSpindleTaskFinishingAfterThePush(job, () => node.Version != job.Version, out bool finished);
        Assert.True(finished, "the job was not finished and its node pooled between the push and the link: the race was not forced");
        Assert.IsType<JobWait>(late._source); // delivered, not revoked: the caller got the wait
        wait = new WeakReference(late._source);
        Assert.True(late.IsCompleted);
        late.GetAwaiter().GetResult(); // the wait goes back to this thread's pool
        return node;
    }

    [Fact]
    public async Task AWaitWhoseJobFinishesBetweenItsPushAndItsLink_KeepsNoLinkToAnEarlierWaitOfItsJob()
    {
        // The finish runs the second wait's waiter (which drops its link) before that wait's caller links it to the first,
        // still unread: a link written then would be kept by a caller who keeps the second task unread, as in the case
        // above (the first wait, read and pooled, then rented for anything). It holds because the finish drops the node's
        // link before it runs any waiter, so the caller finds no head to link to (and a caller that read the head just
        // before fails its CAS on the node's cleared link and links again, to nothing). A pin, written by the lead while
        // checking the review's fix: it passed on that fix.
        await JobTestUtil.Bounded(() =>
        {
            using var hold = new HoldWorkers();
            JobHandle job = new LateChainJob().Schedule();
            SpindleTask first = job.AsSpindleTask();
            // Both waits' waiters run here, before the second call links its wait.
            SpindleTask second = AsSpindleTaskFinishingAfterThePush(job, () => first.IsCompleted, out bool finished);
            Assert.True(finished, "the job did not finish between the second wait's push and its link: the race was not forced");
            JobWait wait = Assert.IsType<JobWait>(second._source);
            object? link = typeof(JobWait).GetField("_previous", System.Reflection.BindingFlags.NonPublic | System.Reflection.BindingFlags.Instance)!.GetValue(wait);
            Assert.True(link is null, "a finished wait, handed to its caller, still links to an earlier wait of its job (JobWait._previous): linked after the finish had dropped its link");
            first.GetAwaiter().GetResult();
            second.GetAwaiter().GetResult();
        });
    }

    [Fact]
    public async Task AWaitLinkedAfterItsJobFinishedAndItsNodeWasPooled_LeavesNoLinkOnThePooledNode()
    {
        await ALaterJobsDroppedFaultIsReported(
            () =>
            {
                JobNode pooled = ChainAfterTheFinish(out WeakReference wait);
                Assert.True(
                    Volatile.Read(ref pooled.LatestWait) is null,
                    "a node in its pool links to a wait (JobNode.LatestWait): written by a caller whose push raced the job's finish, after the node was cleared");
                // What that link would hold: the pooled wait rented for a later job's wait, dropped unread.
                return (wait, pooled);
            },
            "a node in its pool still linked to the wait, pooled and rented for that job");
    }

    [Fact]
    public async Task TwoLoopsPollingOneJobInTurn_EachTurnRevivesALetGoWait_AndTheJobHoldsTwo()
    {
        // Loop A's wait is pending while loop B calls (B gets a wait of its own), then A lets go and calls again: it finds
        // its let-go wait behind B's on the job's chain. So two loops hold two waits, however many turns they take.
        await JobTestUtil.Bounded(() =>
        {
            JobWaitBaseline pool = JobWaitBaseline.Take();
            var boom = new RevivalFault("polled by two loops");
            ConcurrentQueue<Exception> reports = UnobservedReports.Observe(e => e is RevivalFault, () =>
            {
                using var job = new GatedJob(boom);
                SpindleTask a = job.Handle.AsSpindleTask();
                SpindleTask b = default;
                for (int turn = 0; turn < 1000; turn++)
                {
                    if (turn > 0)
                    {
                        LetGo(b);
                    }
                    b = job.Handle.AsSpindleTask();
                    LetGo(a);
                    a = job.Handle.AsSpindleTask();
                    int held = pool.Held;
                    int edges = job.Handle.Node!.WaiterCountForTests(job.Handle.Version);
                    if (held > 2 || edges > 2)
                    {
                        Assert.Fail($"turn {turn + 1}: the job polled by two loops holds {held} JobWaits and {edges} waiter edges (2 expected)");
                    }
                }
                job.Finish();
                Assert.Same(boom, Record.Exception(() => a.GetAwaiter().GetResult()));
                Assert.Same(boom, Record.Exception(() => b.GetAwaiter().GetResult()));
            });
            Assert.Empty(reports);
            Assert.Equal(0, pool.Held);
        });
    }
#endif
}

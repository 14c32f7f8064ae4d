using System;
using System.Collections.Concurrent;
using System.Runtime.CompilerServices;
using System.Threading;
using System.Threading.Tasks;
using Xunit;

namespace SpindleLib.Tests.Jobs;

/// <summary>
/// <see cref="JobHandle.AsSpindleTask"/> on a pending job is a wait that a combinator can let go of (JobWait): a WhenAny
/// it lost, or a WithTimeout that timed out, reads nothing and reports nothing, and the wait goes back to its pool when the
/// job finishes; the job's fault is reported once, by its holder, only if nothing observes it. Run alone: the counts of
/// waits in use (a Debug build's) and the unobserved-exception event are process-wide.
/// </summary>
[Collection(SequentialCollection.Name)]
public class JobWaitLetGoTests
{
    private sealed class JobWaitFault(string message) : Exception(message);

    /// <summary>Spins (yielding) until its flag is set: a job whose finish another thread can time to the microsecond.</summary>
    private struct SpinJob : IJob
    {
        public StrongBox<bool> Go;
        public Exception? Error;

        public readonly void Execute()
        {
            var spin = new SpinWait();
            var bound = System.Diagnostics.Stopwatch.StartNew();
            while (!Volatile.Read(ref Go.Value))
            {
                if (bound.Elapsed > TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds))
                {
                    throw new TimeoutException("SpinJob was never let go.");
                }
                spin.SpinOnce();
            }
            if (Error is not null)
            {
                throw Error;
            }
        }
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task LosingWhenAny_EveryTurn_ReportsNothing_AndHoldsNoWaitOnceTheJobFinished(bool fails)
    {
        await JobTestUtil.Bounded(() =>
        {
            const int Turns = 100;
            var boom = new JobWaitFault("the raced job's fault");
            var counter = new Counter();
            JobWaitBaseline pool = JobWaitBaseline.Take();
            ConcurrentQueue<Exception> reports = UnobservedReports.Observe(UnobservedReports.Own.Instances(boom), () =>
            {
                for (int i = 0; i < Turns; i++)
                {
                    using var gate = new Gate();
                    JobHandle gated = new GateJob(gate).Schedule();
                    JobHandle job = fails ? new ThrowJob(boom).Schedule(gated) : new CountJob(counter).Schedule(gated);
                    JobHandle.ScheduleBatchedJobs();
                    var winner = new Promise();
                    SpindleTask<int> any = SpindleTask.WhenAny(job.AsSpindleTask(), winner.Task);
                    winner.SetResult();
                    Assert.Equal(1, any.GetAwaiter().GetResult());
                    // The turn's last wait, which observes the job. It registered after the loser's, and a finishing job runs
                    // its awaiters oldest first, on one thread: once it has the outcome, the loser's waiter has run.
                    SpindleTask last = job.AsSpindleTask();
                    gate.Release.Set();
                    Exception? read = Record.Exception(() => last.GetAwaiter().GetResult());
                    Assert.Same(fails ? boom : null, read);
                    Assert.Equal(0, pool.Held);
                }
            });
            Assert.True(reports.IsEmpty, $"the job's fault, which each turn's last wait observed, was also reported {reports.Count} times by the losing waits");
            pool.AssertNoDoubleReturn();
        });
    }

    [Fact]
    public async Task LetGo_ThenTheJobFails_WithNoOtherObserver_TheFaultIsReportedExactlyOnce()
    {
        await JobTestUtil.Bounded(() =>
        {
            var error = new JobWaitFault("nobody read the wait");
            ConcurrentQueue<Exception> reported = UnobservedReports.Observe(UnobservedReports.Own.Instances(error), r =>
            {
                LetGoOfAWaitOnAJobThatFails(error);
                Assert.True(JobTestUtil.CollectUntilReported(r, error, 50), "the fault of a job whose only wait was let go of was never reported");
                JobTestUtil.CollectUntilReported(r, new JobWaitFault("not reported"), 3); // time for a second report, if there were one
            });
            Assert.Single(reported, e => ReferenceEquals(e, error));
        });
    }

    [MethodImpl(MethodImplOptions.NoInlining)] // no local of the caller keeps the handle, and so the failed node, alive
    private static void LetGoOfAWaitOnAJobThatFails(Exception error)
    {
        JobWaitBaseline pool = JobWaitBaseline.Take();
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var gate = new Gate();
        JobHandle failing = new ThrowJob(error).Schedule(new GateJob(gate).Schedule());
        JobHandle.ScheduleBatchedJobs();
        SpindleTask turn = failing.AsSpindleTask().WithTimeout(TimeSpan.FromMilliseconds(1), wheel);
        clock.Advance(TimeSpan.FromMilliseconds(1));
        Assert.Throws<TimeoutException>(() => turn.GetAwaiter().GetResult());
        gate.Release.Set();
        JobTestUtil.WaitByPolling(failing); // IsCompleted only: not an observation
        pool.WaitUntilAllReturned("the let-go wait never went back to its pool");
    }

    [Fact]
    public async Task PendingWait_ReportsTheJobsStatus_AndEachReadOfAFailedJobThrowsItsFault()
    {
        await JobTestUtil.Bounded(() =>
        {
            var boom = new JobWaitFault("status");
            using var gate = new Gate();
            JobHandle failing = new ThrowJob(boom).Schedule(new GateJob(gate).Schedule());
            JobHandle.ScheduleBatchedJobs();
            SpindleTask first = failing.AsSpindleTask();
            SpindleTask second = failing.AsSpindleTask();
            Assert.Equal(SpindleTaskStatus.Pending, first.Status);
            gate.Release.Set();
            JobTestUtil.WaitByPolling(failing);
            TestUtil.SpinUntil(() => first.IsCompleted && second.IsCompleted);
            Assert.Equal(SpindleTaskStatus.Faulted, first.Status);
            Assert.Same(boom, Record.Exception(() => first.GetAwaiter().GetResult()));
            Assert.Same(boom, Record.Exception(() => second.GetAwaiter().GetResult()));
            // Read: the await-once error, as for any Spindle task.
            Assert.Throws<InvalidOperationException>(() => first.GetAwaiter().GetResult());
        });
    }

    [Fact]
    public async Task LetGoRacingTheJobsFinish_EveryWaitGoesBackToItsPoolOnce_AndEveryContinuationRunsOnce()
    {
        // Racer 0 fires the turn's timeout (WithTimeout then lets go of the job's wait: a detach, Waiting to Abandoned);
        // racer 1 lets the job finish (its worker runs the wait's waiter: the claim from Waiting, or from Abandoned). The
        // core's CAS decides; the finish of an abandoned use recycles it, otherwise the reader does.
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var made = new ConcurrentQueue<Exception>();
        var timedOutFaults = new ConcurrentDictionary<Exception, bool>();
        Exception? boom = null;
        int rounds = TestUtil.Stress(1500);
        StrongBox<bool>? go = null;
        JobHandle job = default;
        SpindleTask turn = default;
        int continuations = 0;
        int expected = 0;
        int timedOut = 0;
        int jobWon = 0;
        JobWaitBaseline pool = JobWaitBaseline.Take();
        ConcurrentQueue<Exception> reports = await UnobservedReports.ObserveAsync(UnobservedReports.Own.InstancesIn(made), async _ =>
        {
            int ran = await TestUtil.WithTimeout(Race.Run(
                rounds,
                before: round =>
                {
                    go = new StrongBox<bool>();
                    boom = round % 2 == 0 ? new JobWaitFault("raced in round " + round) : null;
                    if (boom is not null)
                    {
                        made.Enqueue(boom);
                    }
                    job = new SpinJob { Go = go, Error = boom }.Schedule();
                    JobHandle.ScheduleBatchedJobs();
                    turn = job.AsSpindleTask().WithTimeout(TimeSpan.FromMilliseconds(1), wheel);
                    turn.GetAwaiter().UnsafeOnCompleted(() => Interlocked.Increment(ref continuations));
                    expected++;
                },
                after: round =>
                {
                    TestUtil.SpinUntil(() => Volatile.Read(ref continuations) >= expected, () => "round " + round + ": the turn's continuation never ran");
                    Exception? outcome = Record.Exception(() => turn.GetAwaiter().GetResult());
                    if (outcome is TimeoutException)
                    {
                        timedOut++;
                        if (boom is not null)
                        {
                            timedOutFaults[boom] = true;
                        }
                    }
                    else
                    {
                        Assert.Same(boom, outcome);
                        jobWon++;
                    }
                    // Observed here, so that a let-go wait's job reports nothing either.
                    Assert.Same(boom, JobTestUtil.CompleteCatching(job));
                    pool.WaitUntilAllReturned("round " + round + ": a JobWait never went back to its pool");
                    Assert.Equal(expected, Volatile.Read(ref continuations));
                },
                _ => clock.Advance(TimeSpan.FromMilliseconds(1)),
                _ => Volatile.Write(ref go!.Value, true)), TestUtil.StressTimeout(120));
            Assert.True(ran > 0);
        });
        Assert.Equal(expected, Volatile.Read(ref continuations));
        // A job that failed while the timeout was being decided: its wait had completed, so the combinator read it as a
        // loser and reported its fault (once), as it does for any input that completed as the race was decided (a promise's
        // too); the job's own Complete() above observed it as well. Never twice, and only in a round the timeout won.
        foreach (Exception report in reports)
        {
            Assert.True(timedOutFaults.ContainsKey(report), "reported, but its round did not time out: " + report.Message);
        }
        Assert.Equal(reports.Count, new System.Collections.Generic.HashSet<Exception>(reports).Count);
        Assert.Equal(0, wheel.PendingCount);
        pool.AssertAllReturnedOnce();
        Assert.True(timedOut + jobWon == expected, $"{timedOut} timed out and {jobWon} saw the job finish, of {expected}");
    }

    [Fact]
    public async Task RevivalRacingTheJobsFinishAndASecondCaller_EveryWaitGoesBackToItsPoolOnce_AndEveryContinuationRunsOnce()
    {
        // Each round: a wait on a pending job, let go of by its timeout (Abandoned, its edge still on the job's list). Then
        // racers 0 and 1 each call AsSpindleTask() (one may revive the let-go wait, the other rents a new one, or either
        // finds the job finished) and await it; racer 2 lets the job finish (its worker claims the let-go wait from
        // Abandoned, ending it unread, or the revived use from Pending or Waiting). The core's word decides each pair.
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var made = new ConcurrentQueue<Exception>();
        Exception? boom = null;
        int rounds = TestUtil.Stress(1500);
        StrongBox<bool>? go = null;
        JobHandle job = default;
        SpindleTask letGo = default;
        var callers = new SpindleTask[2];
        int continuations = 0;
        int expected = 0;
        int revived = 0;
        JobWaitBaseline pool = JobWaitBaseline.Take();
        void Call(int racer)
        {
            SpindleTask task = job.AsSpindleTask();
            callers[racer] = task;
            task.GetAwaiter().UnsafeOnCompleted(() => Interlocked.Increment(ref continuations));
        }

        ConcurrentQueue<Exception> reports = await UnobservedReports.ObserveAsync(UnobservedReports.Own.InstancesIn(made), async _ =>
        {
            int ran = await TestUtil.WithTimeout(Race.Run(
                rounds,
                before: round =>
                {
                    go = new StrongBox<bool>();
                    boom = round % 2 == 0 ? new JobWaitFault("revival raced in round " + round) : null;
                    if (boom is not null)
                    {
                        made.Enqueue(boom);
                    }
                    job = new SpinJob { Go = go, Error = boom }.Schedule();
                    JobHandle.ScheduleBatchedJobs();
                    letGo = job.AsSpindleTask();
                    SpindleTask turn = letGo.WithTimeout(TimeSpan.FromMilliseconds(1), wheel);
                    clock.Advance(TimeSpan.FromMilliseconds(1));
                    Assert.Throws<TimeoutException>(() => turn.GetAwaiter().GetResult());
                    expected += 2;
                },
                after: round =>
                {
                    TestUtil.SpinUntil(() => Volatile.Read(ref continuations) >= expected, () => "round " + round + ": a caller's continuation never ran");
                    bool first = callers[0]._source == letGo._source;
                    bool second = callers[1]._source == letGo._source;
                    Assert.False(first && second, "round " + round + ": both callers were given the let-go wait");
                    if (first || second)
                    {
                        revived++;
                    }
                    Assert.Same(boom, Record.Exception(() => callers[0].GetAwaiter().GetResult()));
                    Assert.Same(boom, Record.Exception(() => callers[1].GetAwaiter().GetResult()));
                    // The let-go use's token is stale, revived or ended unread: the await-once error, never a read of a later use.
                    Assert.Throws<InvalidOperationException>(() => letGo.GetAwaiter().GetResult());
                    Assert.Same(boom, JobTestUtil.CompleteCatching(job));
                    pool.WaitUntilAllReturned("round " + round + ": a JobWait never went back to its pool");
                    pool.AssertNoDoubleReturn();
                    Assert.Equal(expected, Volatile.Read(ref continuations));
                },
                _ => Call(0),
                _ => Call(1),
                _ => Volatile.Write(ref go!.Value, true)), TestUtil.StressTimeout(120));
            Assert.True(ran > 0);
        });
        Assert.Empty(reports); // every fault was read by both callers
        Assert.Equal(expected, Volatile.Read(ref continuations));
        Assert.Equal(0, wheel.PendingCount);
        pool.AssertAllReturnedOnce();
        Assert.True(revived > 0, "no round revived the let-go wait: the race never reached the revival");
    }
}

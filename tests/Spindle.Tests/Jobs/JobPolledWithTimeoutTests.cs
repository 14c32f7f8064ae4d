using System;
using System.Collections.Concurrent;
using System.Runtime.CompilerServices;
using System.Threading;
using System.Threading.Tasks;
using Xunit;

namespace SpindleLib.Tests.Jobs;

/// <summary>
/// A loop that waits for a job with a timeout, turn after turn, until it finishes (show progress between turns):
/// <c>await handle.AsSpindleTask().WithTimeout(t)</c>. Each call of <see cref="JobHandle.AsSpindleTask"/> started an async
/// method that awaited the job; a timeout that won forgot it, so it stayed on the job's waiter list until the job finished,
/// and then reported the job's fault to <see cref="Spindle.UnobservedException"/>: one failed job, observed by the loop's
/// last await, was reported once per turn that timed out. Found by stop 33's loop idioms (the scope's WaitAsync, made
/// detachable in stop 29, reports nothing in the same loop), and fixed by a wait of its own on the job's waiter list that
/// a combinator can let go of (JobWait: see JobWaitLetGoTests).
/// </summary>
[Collection(SequentialCollection.Name)] // a gated job holds a worker, and the batch is global
public class JobPolledWithTimeoutTests
{
    private const int Turns = 200;

    private sealed class PolledJobFault() : Exception("the polled job's fault");

    /// <summary>
    /// A job that fails once its gate opens (it depends on a gated job that holds a worker), and the loop's timer wheel
    /// on a manual clock: each turn's wait times out after 1 ms of that clock.
    /// </summary>
    private sealed class FailingJobPoll : IDisposable
    {
        private readonly ManualClock _clock = new();
        private readonly Gate _gate = new();

        public FailingJobPoll()
        {
            Wheel = new TimerWheel(_clock);
            JobHandle gated = new GateJob(_gate).Schedule();
            Failing = new ThrowJob(Boom).Schedule(gated);
            JobHandle.ScheduleBatchedJobs();
            _gate.WaitStarted();
        }

        public PolledJobFault Boom { get; } = new();

        public TimerWheel Wheel { get; }

        public JobHandle Failing { get; }

        /// <summary>One turn: waits on <paramref name="wait"/> with a 1 ms timeout, which wins.</summary>
        public void TimeOut(SpindleTask wait)
        {
            SpindleTask turn = wait.WithTimeout(TimeSpan.FromMilliseconds(1), Wheel);
            _clock.Advance(TimeSpan.FromMilliseconds(1));
            Assert.True(turn.IsCompleted, "the turn's timeout did not end it");
            Assert.Throws<TimeoutException>(() => turn.GetAwaiter().GetResult());
        }

        /// <summary>Opens the gate: the job fails.</summary>
        public void Open() => _gate.Release.Set();

        /// <summary>Opens the gate: the job fails, and <paramref name="last"/> (the loop's last wait) gets its fault.</summary>
        public void FailAndRead(SpindleTask last)
        {
            Open();
            Assert.Same(Boom, Record.Exception(() => last.GetAwaiter().GetResult()));
            Assert.Equal(0, Wheel.PendingCount);
        }

        /// <summary>
        /// Polls the job <paramref name="turns"/> times with a new <c>AsSpindleTask()</c> each turn, each timed out, and
        /// checks every turn that what the job holds stays bounded: the JobWaits out of their pool (a Debug build's count,
        /// against <paramref name="pool"/>) and the edges on the job's waiter list.
        /// </summary>
        public void PollBounded(int turns, JobWaitBaseline pool)
        {
            for (int i = 0; i < turns; i++)
            {
                TimeOut(Failing.AsSpindleTask());
#if DEBUG
                int held = pool.Held;
                int edges = Failing.Node!.WaiterCountForTests(Failing.Version);
                if (held > 1 || edges > 1)
                {
                    Assert.Fail($"turn {i + 1}: the pending job holds {held} JobWaits and {edges} waiter edges (at most 1 each expected)");
                }
#endif
            }
        }

        public void Dispose()
        {
            _gate.Dispose();
            Wheel.Dispose();
        }
    }

    // Failed before JobWait with "the job's fault, which the loop's last wait observed, was also reported 200 times (once
    // per timed-out turn)".
    [Fact]
    public void FailingJob_PolledWithATimeoutEveryTurn_ItsFaultIsNotReportedOncePerTurn()
    {
        using var poll = new FailingJobPoll();
        var reports = UnobservedReports.Observe(e => ReferenceEquals(e, poll.Boom), () =>
        {
            for (int i = 0; i < Turns; i++)
            {
                poll.TimeOut(poll.Failing.AsSpindleTask());
            }
            // The loop's last wait, which observes the fault. It registered on the job after every turn's, and a finishing
            // job runs its awaiters oldest first, on one thread: once it has the fault, every earlier turn's wait has run
            // (and reported, if it reports).
            poll.FailAndRead(poll.Failing.AsSpindleTask());
        });
        Assert.True(reports.IsEmpty, $"the job's fault, which the loop's last wait observed, was also reported {reports.Count} times (once per timed-out turn)");
    }

    private const int LongPollTurns = 10_000;

    // Failed before the let-go wait was revived with "turn 2: the pending job holds 2 JobWaits and 2 waiter edges (at most
    // 1 each expected)": each turn's let-go wait stayed on the job's push-only waiter list until the job finished.
    [Fact]
    public async Task FailingJob_PolledWithANewTaskAndATimeoutEveryTurn_HoldsOneWait_AndTheFaultGoesToTheLastRead()
    {
        await JobTestUtil.Bounded(() =>
        {
            JobWaitBaseline pool = JobWaitBaseline.Take();
            using var poll = new FailingJobPoll();
            var reports = UnobservedReports.Observe(e => ReferenceEquals(e, poll.Boom), () =>
            {
                poll.PollBounded(LongPollTurns, pool);
                poll.FailAndRead(poll.Failing.AsSpindleTask());
            });
            Assert.True(reports.IsEmpty, $"the job's fault, which the loop's last wait observed, was also reported {reports.Count} times");
            pool.WaitUntilAllReturned("a JobWait never went back to its pool");
            pool.AssertNoDoubleReturn();
        });
    }

    [Fact]
    public async Task FailingJob_PolledWithANewTaskAndATimeoutEveryTurn_NeverRead_ItsFaultIsReportedExactlyOnce()
    {
        await JobTestUtil.Bounded(() =>
        {
            Exception? boom = null;
            ConcurrentQueue<Exception> reported = UnobservedReports.Observe(e => e is PolledJobFault, r =>
            {
                boom = PollAndFailUnread();
                Assert.True(JobTestUtil.CollectUntilReported(r, boom, 50), "the fault of a polled job nobody read was never reported");
                JobTestUtil.CollectUntilReported(r, new PolledJobFault(), 3); // time for a second report, if there were one
            });
            Assert.Single(reported, e => ReferenceEquals(e, boom));
        });
    }

    [MethodImpl(MethodImplOptions.NoInlining)] // no local of the caller keeps the handle, and so the failed node, alive
    private static PolledJobFault PollAndFailUnread()
    {
        JobWaitBaseline pool = JobWaitBaseline.Take();
        using var poll = new FailingJobPoll();
        poll.PollBounded(LongPollTurns, pool);
        JobHandle failing = poll.Failing;
        poll.Open(); // the job fails, with nobody reading it
        JobTestUtil.WaitByPolling(failing); // IsCompleted only: not an observation
        pool.WaitUntilAllReturned("the let-go wait never went back to its pool");
        return poll.Boom;
    }

    [Fact]
    public void FailingJob_ItsTaskPreservedOnceAndPolledWithATimeoutEveryTurn_HoldsNothingPerTurn_AndTheFaultGoesToTheLastWait()
    {
        // The workaround the docs give for a long job: one wait on the job, preserved before the loop, raced every turn.
        using var poll = new FailingJobPoll();
        var reports = UnobservedReports.Observe(e => ReferenceEquals(e, poll.Boom), () =>
        {
            SpindleTask done = poll.Failing.AsSpindleTask().Preserve();
            for (int i = 0; i < Turns; i++)
            {
                poll.TimeOut(done);
                Assert.Equal(0, ((PreservedSource<VoidResult>)done._source!).WaiterCountForTests);
            }
            poll.FailAndRead(done.WithTimeout(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds), poll.Wheel));
        });
        Assert.Empty(reports);
    }
}

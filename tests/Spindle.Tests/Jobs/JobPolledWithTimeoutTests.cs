using System;
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
    private sealed class PolledJobFault() : Exception("the polled job's fault");

    // Failed before JobWait with "the job's fault, which the loop's last wait observed, was also reported 200 times (once
    // per timed-out turn)".
    [Fact]
    public void FailingJob_PolledWithATimeoutEveryTurn_ItsFaultIsNotReportedOncePerTurn()
    {
        const int Turns = 200;
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var boom = new PolledJobFault();
        var reports = UnobservedReports.Observe(e => ReferenceEquals(e, boom), () =>
        {
            using var gate = new Gate();
            JobHandle gated = new GateJob(gate).Schedule();
            JobHandle failing = new ThrowJob(boom).Schedule(gated);
            JobHandle.ScheduleBatchedJobs();
            gate.WaitStarted();
            int timeouts = 0;
            for (int i = 0; i < Turns; i++)
            {
                SpindleTask turn = failing.AsSpindleTask().WithTimeout(TimeSpan.FromMilliseconds(1), wheel);
                clock.Advance(TimeSpan.FromMilliseconds(1));
                Assert.True(turn.IsCompleted, "the turn's timeout did not end it");
                Assert.Throws<TimeoutException>(() => turn.GetAwaiter().GetResult());
                timeouts++;
            }
            Assert.Equal(Turns, timeouts);
            // The loop's last wait, which observes the fault. Its async method registered on the job after every turn's,
            // and a finishing job runs its awaiters oldest first, on one thread: once it has the fault, every earlier
            // turn's wait has run (and reported, if it reports).
            SpindleTask last = failing.AsSpindleTask();
            gate.Release.Set();
            Assert.Same(boom, Record.Exception(() => last.GetAwaiter().GetResult()));
            Assert.Equal(0, wheel.PendingCount);
        });
        Assert.True(reports.IsEmpty, $"the job's fault, which the loop's last wait observed, was also reported {reports.Count} times (once per timed-out turn)");
    }

    [Fact]
    public void FailingJob_ItsTaskPreservedOnceAndPolledWithATimeoutEveryTurn_HoldsNothingPerTurn_AndTheFaultGoesToTheLastWait()
    {
        // The workaround the docs give: one wait on the job, preserved before the loop, raced every turn.
        const int Turns = 200;
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var boom = new PolledJobFault();
        var reports = UnobservedReports.Observe(e => ReferenceEquals(e, boom), () =>
        {
            using var gate = new Gate();
            JobHandle gated = new GateJob(gate).Schedule();
            JobHandle failing = new ThrowJob(boom).Schedule(gated);
            JobHandle.ScheduleBatchedJobs();
            gate.WaitStarted();
            SpindleTask done = failing.AsSpindleTask().Preserve();
            for (int i = 0; i < Turns; i++)
            {
                SpindleTask turn = done.WithTimeout(TimeSpan.FromMilliseconds(1), wheel);
                clock.Advance(TimeSpan.FromMilliseconds(1));
                Assert.Throws<TimeoutException>(() => turn.GetAwaiter().GetResult());
                Assert.Equal(0, ((PreservedSource<VoidResult>)done._source!).WaiterCountForTests);
            }
            SpindleTask last = done.WithTimeout(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds), wheel);
            gate.Release.Set();
            Assert.Same(boom, Record.Exception(() => last.GetAwaiter().GetResult()));
            Assert.Equal(0, wheel.PendingCount);
        });
        Assert.Empty(reports);
    }
}

using System;
using System.Reflection;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Jobs;

/// <summary>
/// What a job's finish must survive: an awaiter's continuation that throws, the 32-bit version coming round, batches of
/// a parallel-for failing at once, and an edge pushed more times than a 31-bit ticket can count. Each test failed before
/// its fix (found by a review of the job system). Run alone: they hold workers or watch a process-wide event.
/// </summary>
[Collection(SequentialCollection.Name)]
public class JobFinishRobustnessTests
{
    private struct GateJob : IJob
    {
        public Gate Gate;

        public GateJob(Gate gate) => Gate = gate;

        public readonly void Execute()
        {
            Gate.Started.Set();
            if (!Gate.Release.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)))
            {
                throw new TimeoutException("GateJob was never released.");
            }
        }
    }

    [Fact]
    public async Task Finish_AnAwaiterContinuationThrows_LaterAwaitersStillResume_TheFaultIsReported_AndTheNodeIsRecycled()
    {
        var fault = new InvalidProgramException("a continuation that throws");
        var watch = UnobservedReports.Start(UnobservedReports.Own.Instances(fault));
        using (watch)
        {
            await JobTestUtil.Bounded(() =>
            {
                using var gate = new Gate();
                JobHandle h = new GateJob(gate).Schedule();
                JobHandle.ScheduleBatchedJobs();
                gate.WaitStarted(); // a worker runs the job; it will finish it and run the continuations
                int resumed = 0;
                h.GetAwaiter().UnsafeOnCompleted(() => throw fault);
                h.GetAwaiter().UnsafeOnCompleted(() => Interlocked.Increment(ref resumed));
                gate.Release.Set();
                TestUtil.SpinUntil(() => Volatile.Read(ref resumed) == 1, 10);
                TestUtil.SpinUntil(() => h.Node!.Version != h.Version, 10); // its reference was dropped: recycled
                TestUtil.SpinUntil(() => !watch.Reports.IsEmpty, 10);
            });
        }
    }

    [Fact]
    public void Complete_OnAnotherThread_ReturnsEvenWhenAnEarlierAwaiterContinuationThrows()
    {
        Action<Exception> ignore = static _ => { };
        Spindle.UnobservedException += ignore;
        try
        {
            using var gate = new Gate();
            JobHandle h = new GateJob(gate).Schedule();
            JobHandle.ScheduleBatchedJobs();
            gate.WaitStarted();
            h.GetAwaiter().UnsafeOnCompleted(() => throw new InvalidProgramException("a continuation that throws"));
            var waiter = new Thread(() => h.Complete()) { IsBackground = true, Name = "job waiter" };
            waiter.Start();
            Thread.Sleep(300); // usually long enough for Complete() to stop spinning and register its own waiter on the job (if not, the test still checks that it returns)
            gate.Release.Set();
            TestUtil.SpinUntil(() => h.IsCompleted, 10);
            Assert.True(waiter.Join(TimeSpan.FromSeconds(10)), "Complete() on another thread never returned, though the job had finished");
        }
        finally
        {
            Spindle.UnobservedException -= ignore;
        }
    }

    /// <summary>Succeeds, or throws <see cref="Throw"/>. Used only here, so its pool holds only these nodes.</summary>
    private struct MaybeThrowJob : IJob
    {
        public Exception? Throw;

        public readonly void Execute()
        {
            if (Throw is not null)
            {
                throw Throw;
            }
        }
    }

    [Fact]
    public void StaleHandle_AfterTheVersionComesRound_NeverStandsForTheJobThatReusesItsSlot()
    {
        FieldInfo refState = typeof(JobNode).GetField("_refState", BindingFlags.NonPublic | BindingFlags.Instance)!;
        using (new HoldWorkers()) // only this thread runs jobs, so a finished node goes back to this thread's pool
        {
            JobHandle stale = new MaybeThrowJob().Schedule();
            stale.Complete(); // succeeded: its node is recycled, and the handle is stale
            JobNode node = stale.Node!;
            Assert.True(stale.IsCompleted);

            // Stands for 2^32 - 2 further uses of the node (minutes of Schedule() + Complete() in a loop): the 32-bit
            // version is at its last value, and one more use takes it round.
            long rs = (long)refState.GetValue(node)!;
            refState.SetValue(node, ((long)uint.MaxValue << 32) | (rs & 0xFFFFFFFFL));
            JobHandle last = new MaybeThrowJob().Schedule();
            Assert.True(last.Node == node, "the node was not reused: the test's premise failed");
            last.Complete();

            var foreign = new InvalidTimeZoneException("an unrelated later job's failure");
            JobHandle later = new MaybeThrowJob { Throw = foreign }.Schedule(); // not flushed: still pending
            try
            {
                Assert.False(stale == later, "the stale handle equals a later job's handle");
                Assert.True(stale.IsCompleted, "a stale handle of a job that succeeded reads as pending");
                stale.Complete(); // must not wait for, or rethrow, the later job
                Assert.True(last.IsCompleted);
                last.Complete();
            }
            finally
            {
                Assert.Same(foreign, JobTestUtil.CompleteCatching(later));
            }
        }
    }

    private struct ThrowEachIndexJob : IJobParallelFor
    {
        public int[] InFlight;
        public int[] Thrown;

        public readonly void Execute(int index)
        {
            int[] inFlight = InFlight;
            Interlocked.Increment(ref inFlight[0]);
            SpinWait.SpinUntil(() => Volatile.Read(ref inFlight[0]) >= 2, 1000); // let a second batch start meanwhile
            Interlocked.Increment(ref Thrown[0]);
            throw new IndexFault("index " + index);
        }
    }

    /// <summary>What <see cref="ThrowEachIndexJob"/> throws: a type of its own, so that its reports are told from any other test's.</summary>
    private sealed class IndexFault(string message) : ArithmeticException(message);

    [Fact]
    public void ParallelFor_BatchesFailingAtOnce_OneIsRethrownAndEveryOtherIsReported()
    {
        var watch = UnobservedReports.Start(UnobservedReports.Own.Type<IndexFault>());
        using (watch)
        {
            int thrown = 0;
            int rethrown = 0;
            for (int round = 0; round < 10; round++)
            {
                var job = new ThrowEachIndexJob { InFlight = new int[1], Thrown = new int[1] };
                JobHandle h = job.Schedule(64, 1);
                if (JobTestUtil.CompleteCatching(h) is ArithmeticException)
                {
                    rethrown++;
                }
                thrown += Volatile.Read(ref job.Thrown[0]);
            }
            Assert.Equal(10, rethrown);
            Assert.True(thrown > 10, "no two batches failed at once: the race was not forced");
            Assert.Equal(thrown, rethrown + watch.Reports.Count);
        }
    }

    [Fact]
    public void EdgeTicket_PastTheRangeOfAnInt_StillNew()
    {
        // A pusher that looks late revokes its push only if the claim still holds its own ticket: a ticket that came
        // round (31 bits did, after 2^31 pushes of one edge) would let it revoke a later push of the same edge.
        var edge = new JobNode.Edge();
        FieldInfo ticket = typeof(JobNode.Edge).GetField("_ticket", BindingFlags.NonPublic | BindingFlags.Instance)!;
        ticket.SetValue(edge, (long)int.MaxValue - 1);
        long a = edge.NewTicket();
        long b = edge.NewTicket();
        long c = edge.NewTicket();
        Assert.Equal((long)int.MaxValue, a);
        Assert.Equal((long)int.MaxValue + 1, b);
        Assert.Equal((long)int.MaxValue + 2, c);
        Assert.Equal(c, Volatile.Read(ref edge.Claim)); // the unsettled claim holds the newest ticket
        Assert.True(c > 0, "tickets stay positive: the settled claims are negative");
    }
}

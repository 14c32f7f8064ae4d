using System;
using System.Collections.Generic;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Jobs;

/// <summary>
/// A dependent job is pushed onto its dependency's waiter list without holding a reference on the dependency's node
/// (JobNode, "pushing without a reference"). If the dependency finishes and its node is recycled into a later job while
/// the push is under way, the edge can land in the later job's list. These tests force that moment through Debug-only
/// hooks and check that every job still runs exactly once, after what it depends on, and that no failure of the later
/// job leaks into the dependent. Run alone: they hold every worker, so that only the test thread runs jobs and a
/// finished node goes back to this thread's pool, where the next job of the same type takes it.
/// </summary>
[Collection(SequentialCollection.Name)]
public class JobEdgePushRaceTests
{
#if DEBUG
    /// <summary>A job type used only here and in <see cref="JobEdgeClaimRaceTests"/>, so its pool holds only these nodes. Records the order it ran in.</summary>
    internal struct OrderJob : IJob
    {
        public List<string> Log;
        public string Name;
        public Exception? Throw;

        public readonly void Execute()
        {
            lock (Log)
            {
                Log.Add(Name);
            }
            if (Throw is not null)
            {
                throw Throw;
            }
        }
    }

    /// <summary>A second job type (a pool of its own), for a dependent whose node must not be taken by the jobs above.</summary>
    private struct OtherOrderJob : IJob
    {
        public List<string> Log;
        public string Name;

        public readonly void Execute()
        {
            lock (Log)
            {
                Log.Add(Name);
            }
        }
    }

    /// <summary>
    /// Runs <paramref name="push"/> (a push onto <paramref name="dependency"/>'s waiter list) with the dependency finished
    /// and its node rented by a later job, which fails with <paramref name="laterFault"/>, between the pusher's read of
    /// the list and its CAS: the CAS then lands in the later job's list. <paramref name="whileRecycled"/> runs right after
    /// the later job is scheduled, <paramref name="afterPush"/> between the CAS and the pusher's second look at the
    /// version, and then, with <paramref name="laterFinishesFirst"/>, the later job is completed (it fails) before that
    /// look; the first <paramref name="skipPushes"/> pushes are left alone. Returns the later job.
    /// </summary>
    private static JobHandle PushWhileTheDependencyIsRecycled(
        JobHandle dependency,
        List<string> log,
        Exception laterFault,
        Action push,
        Action<JobHandle>? afterPush = null,
        Action<JobHandle>? whileRecycled = null,
        int skipPushes = 0,
        bool laterFinishesFirst = false)
    {
        JobHandle later = default;
        bool reused = false;
        int skipped = 0;
        JobNode.TestHookBeforeEdgePush = node =>
        {
            if (skipped++ < skipPushes)
            {
                return;
            }
            JobNode.TestHookBeforeEdgePush = null;
            dependency.Complete();
            later = new OrderJob { Log = log, Name = "C", Throw = laterFault }.Schedule();
            reused = later.Node == node;
            whileRecycled?.Invoke(later);
        };
        if (afterPush is not null || laterFinishesFirst)
        {
            JobNode.TestHookAfterEdgePush = _ =>
            {
                if (later.Node is null)
                {
                    return; // a push before the forced one
                }
                JobNode.TestHookAfterEdgePush = null;
                afterPush?.Invoke(later);
                if (laterFinishesFirst)
                {
                    Assert.Equal(laterFault, Assert.Throws(laterFault.GetType(), () => later.Complete()));
                }
            };
        }
        try
        {
            push();
        }
        finally
        {
            JobNode.TestHookBeforeEdgePush = null;
            JobNode.TestHookAfterEdgePush = null;
        }
        Assert.True(reused, "the later job did not reuse the dependency's node: the race was not forced");
        return later;
    }

    [Fact]
    public void DependencyRecycledBeforeThePush_TheEdgeIsRevokedAndTheDependentRunsOnce()
    {
        var log = new List<string>();
        var laterFault = new InvalidTimeZoneException("the later job's own failure");
        using (new HoldWorkers())
        {
            JobHandle a = new OrderJob { Log = log, Name = "A" }.Schedule();
            JobHandle b = default;
            JobHandle later = PushWhileTheDependencyIsRecycled(a, log, laterFault, () => b = new OrderJob { Log = log, Name = "B" }.Schedule(a));

            // A succeeded, so B was ready at once, and neither waits for C nor inherits its failure. The flush makes C
            // visible first (it was scheduled first); its finish meets B's revoked edge in its list and skips it.
            b.Complete();
            Assert.Equal(laterFault, Assert.Throws<InvalidTimeZoneException>(() => later.Complete()));
            Assert.Equal(new[] { "A", "C", "B" }, log);

            // B's node can depend on jobs again (its own edge was replaced, not reused while still linked).
            JobHandle d = new OrderJob { Log = log, Name = "D" }.Schedule();
            JobHandle e = new OrderJob { Log = log, Name = "E" }.Schedule(d);
            e.Complete();
            Assert.Equal(new[] { "A", "C", "B", "D", "E" }, log);
        }
    }

    [Fact]
    public void MisplacedEdgeDeliveredByTheLaterJobFirst_TheDependentRunsOnceAsASuccess()
    {
        var log = new List<string>();
        using (new HoldWorkers())
        {
            JobHandle a = new OrderJob { Log = log, Name = "A" }.Schedule();
            JobHandle b = default;
            PushWhileTheDependencyIsRecycled(
                a,
                log,
                new InvalidTimeZoneException("the later job's own failure"),
                () => b = new OrderJob { Log = log, Name = "B" }.Schedule(a),
                // The later job finishes between the push and the pusher's second look at the version: its finish finds
                // the misplaced edge first, claims it, and makes B ready as if A had just succeeded (which it had).
                laterFinishesFirst: true);

            b.Complete(); // no inherited failure: the edge was A's, and A succeeded
            Assert.Equal(new[] { "A", "C", "B" }, log);
        }
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public void MisplacedIntoALaterListThatIsNotEmpty_EveryDependentGetsItsOwnOutcome(bool laterFinishesFirst)
    {
        // The head B's pusher read is G's own edge. While the push is under way, A finishes (G runs after it), A's node is
        // rented by C and G's by G2, which depends on C: G's own edge is C's head again, so B's CAS succeeds into C's
        // list, behind G2's edge. C fails: G2 inherits that failure; B does not, and runs once, after A.
        var log = new List<string>();
        var laterFault = new InvalidTimeZoneException("the later job's own failure");
        using (new HoldWorkers())
        {
            JobHandle a = new OrderJob { Log = log, Name = "A" }.Schedule();
            JobHandle g = new OtherOrderJob { Log = log, Name = "G" }.Schedule(a);
            JobHandle g2 = default;
            bool landedInTheLaterList = false;
            JobHandle b = default;
            JobHandle later = PushWhileTheDependencyIsRecycled(
                a,
                log,
                laterFault,
                () => b = new OrderJob { Log = log, Name = "B" }.Schedule(a),
                afterPush: later => landedInTheLaterList = later.Node!.Version != a.Version,
                whileRecycled: later => g2 = new OtherOrderJob { Log = log, Name = "G2" }.Schedule(later),
                laterFinishesFirst: laterFinishesFirst);
            Assert.True(g2.Node == g.Node, "G2 did not reuse G's node: the later list's head is not the one B's pusher read");
            Assert.True(landedInTheLaterList, "the CAS did not land in the later job's list");

            b.Complete();
            Assert.Equal(laterFault, Assert.Throws<InvalidTimeZoneException>(() => g2.Complete()));
            Assert.Throws<InvalidTimeZoneException>(() => later.Complete());
            Assert.Single(log.FindAll(name => name == "B"));
            Assert.DoesNotContain("G2", log);
            Assert.True(log.IndexOf("A") < log.IndexOf("B"));
        }
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public void CombineWhoseSecondDependencyIsRecycledDuringItsPush_CompletesOnceWithoutALaterFailure(bool laterFinishesFirst)
    {
        var log = new List<string>();
        using (new HoldWorkers())
        {
            JobHandle x = new OtherOrderJob { Log = log, Name = "X" }.Schedule();
            JobHandle a = new OrderJob { Log = log, Name = "A" }.Schedule();
            JobHandle combined = default;
            JobHandle later = PushWhileTheDependencyIsRecycled(
                a,
                log,
                new InvalidTimeZoneException("the later job's own failure"),
                () => combined = JobHandle.CombineDependencies(x, a),
                skipPushes: 1, // the first push is onto X
                laterFinishesFirst: laterFinishesFirst);
            JobHandle d = new OtherOrderJob { Log = log, Name = "D" }.Schedule(combined);
            d.Complete(); // no failure: the combine waited for X and for A, which succeeded
            if (!laterFinishesFirst)
            {
                Assert.Throws<InvalidTimeZoneException>(() => later.Complete());
            }
            Assert.True(log.IndexOf("X") >= 0 && log.IndexOf("X") < log.IndexOf("D"));
            Assert.Single(log.FindAll(name => name == "D"));
        }
    }

    [Fact]
    public void PusherLooksLateAfterADeliveryAndAReuseOfTheSameEdge_LeavesTheNewPushAlone()
    {
        // B's edge lands in A's list (the right one). Before B's scheduler looks at A's version again, A finishes and
        // delivers the edge, B runs and finishes, and B's node is rented for B2, which pushes the same own edge onto X.
        // The late look then finds A's version changed: it must see that its own push was delivered, and not take B2's
        // push for an unsettled one (which would revoke it, and make B2 ready before X has run).
        var log = new List<string>();
        using (new HoldWorkers())
        {
            JobHandle a = new OrderJob { Log = log, Name = "A" }.Schedule();
            JobHandle x = default;
            JobHandle b2 = default;
            JobNode.TestHookAfterEdgePush = _ =>
            {
                JobNode.TestHookAfterEdgePush = null;
                x = new OrderJob { Log = log, Name = "X" }.Schedule();
                a.Complete(); // delivers B's edge; B runs inline after A, finishes, and its node goes back to the pool
                b2 = new OrderJob { Log = log, Name = "B2" }.Schedule(x);
            };
            JobHandle b;
            try
            {
                b = new OrderJob { Log = log, Name = "B" }.Schedule(a);
            }
            finally
            {
                JobNode.TestHookAfterEdgePush = null;
            }
            Assert.True(b2.Node == b.Node, "B2 did not reuse B's node: the race was not forced");
            Assert.Equal(new[] { "A", "B" }, log);
            Assert.Equal(1, b2.Node!.PendingDependenciesForTests); // B2 still waits for X
            b2.Complete();
            x.Complete();
            Assert.Equal(new[] { "A", "B", "X", "B2" }, log);
        }
    }

    [Fact]
    public void AwaiterRegisteredWhileTheJobIsRecycled_ResumesOnceAsASuccess()
    {
        var log = new List<string>();
        using (new HoldWorkers())
        {
            JobHandle a = new OrderJob { Log = log, Name = "A" }.Schedule();
            int resumed = 0;
            JobHandle later = PushWhileTheDependencyIsRecycled(
                a, log, new InvalidTimeZoneException("C"), () => a.GetAwaiter().OnCompleted(() => Interlocked.Increment(ref resumed)));
            Assert.Equal(1, Volatile.Read(ref resumed)); // revoked: the registrant ran it itself, at once
            a.GetAwaiter().GetResult(); // a stale handle: A succeeded
            Assert.Throws<InvalidTimeZoneException>(() => later.Complete());
            Assert.Equal(1, Volatile.Read(ref resumed)); // C's finish skipped the revoked edge
        }
    }

    [Fact]
    public void AsSpindleTaskWhoseWaitIsRevoked_ThenTheSameWaitObjectReused_TheLaterJobsFinishNeverRunsIt()
    {
        // JobHandle.AsSpindleTask's JobWait pushes its edge as any awaiter does. Revoked (the job finished and its node was
        // rented by C during the push), the wait goes back to its pool at once, although its revoked edge, whose state is
        // that object, stays linked in C's list. The next wait rents the same object for another job: C's finish must
        // skip the revoked edge and never complete the reused wait.
        var log = new List<string>();
        var laterFault = new InvalidTimeZoneException("the later job's own failure");
        using (new HoldWorkers())
        {
            JobWaitBaseline pool = JobWaitBaseline.Take();
            JobHandle a = new OrderJob { Log = log, Name = "A" }.Schedule();
            SpindleTask first = default;
            JobHandle later = PushWhileTheDependencyIsRecycled(a, log, laterFault, () => first = a.AsSpindleTask());
            Assert.Equal(SpindleTaskStatus.Succeeded, first.Status); // A succeeded: the revoked wait took its outcome at once
            first.GetAwaiter().GetResult();
            Assert.Equal(0, pool.Held);

            JobHandle d = new OtherOrderJob { Log = log, Name = "D" }.Schedule();
            SpindleTask second = d.AsSpindleTask(); // a JobWait from the pool the revoked one went back to, on D's list
            Assert.Equal(1, pool.Held);
            Assert.Equal(laterFault, Assert.Throws<InvalidTimeZoneException>(() => later.Complete()));
            Assert.Equal(SpindleTaskStatus.Pending, second.Status); // C's finish skipped the revoked edge
            d.Complete();
            Assert.Equal(SpindleTaskStatus.Succeeded, second.Status);
            second.GetAwaiter().GetResult();
            Assert.Equal(new[] { "A", "C", "D" }, log);
            pool.AssertAllReturnedOnce();
        }
    }

    [Fact]
    public void AsSpindleTaskWhoseEdgeIsMisplaced_DeliveredByTheLaterJobFirst_CompletesOnceAsASuccess()
    {
        // The later job C fails and finishes between the JobWait's push (into C's list) and the pusher's second look: C's
        // finish claims the misplaced edge and completes the wait as a success (A succeeded); the read must not pick up
        // C's failure from the recycled node, and the wait goes back to its pool once.
        var log = new List<string>();
        using (new HoldWorkers())
        {
            JobWaitBaseline pool = JobWaitBaseline.Take();
            JobHandle a = new OrderJob { Log = log, Name = "A" }.Schedule();
            SpindleTask wait = default;
            PushWhileTheDependencyIsRecycled(
                a, log, new InvalidTimeZoneException("the later job's own failure"), () => wait = a.AsSpindleTask(), laterFinishesFirst: true);
            Assert.Equal(1, pool.Held); // the push stood: a JobWait, delivered
            Assert.Equal(SpindleTaskStatus.Succeeded, wait.Status);
            wait.GetAwaiter().GetResult();
            Assert.Throws<InvalidOperationException>(() => wait.GetAwaiter().GetResult()); // read once
            pool.AssertAllReturnedOnce();
        }
    }
#endif

    [Fact]
    public void Stress_DependentsScheduledWhileTheirDependenciesFinishAndRecycle_RunOnceAndInOrder()
    {
        // More threads than cores each schedule short chains on jobs that the workers are finishing (and recycling) at
        // the same moment, so pushes race with finishes and node reuse, and a pusher preempted between its CAS and its
        // second look finds the version moved on (a standalone run of this shape met that about once per 40,000 chains;
        // before the claim carried a ticket, it ran a reused job twice and early). Every job checks that what it depends
        // on ran before it, and the totals check that each ran exactly once.
        int rounds = TestUtil.Stress(10_000);
        var errors = new System.Collections.Concurrent.ConcurrentQueue<string>();
        int[] ran = new int[4];
        Task[] threads = new Task[ran.Length];
        for (int t = 0; t < threads.Length; t++)
        {
            int me = t;
            threads[t] = Task.Factory.StartNew(() =>
            {
                for (int r = 0; r < rounds; r++)
                {
                    var state = new int[3];
                    JobHandle first = new StepJob { State = state, Index = 0, Ran = ran, Thread = me, Errors = errors }.Schedule();
                    JobHandle.ScheduleBatchedJobs(); // visible at once: a worker may finish it while the next is pushed
                    JobHandle second = new StepJob { State = state, Index = 1, Ran = ran, Thread = me, Errors = errors }.Schedule(first);
                    JobHandle third = new StepJob { State = state, Index = 2, Ran = ran, Thread = me, Errors = errors }.Schedule(second);
                    if ((r & 1) == 0)
                    {
                        third.Complete();
                    }
                    else
                    {
                        JobHandle.ScheduleBatchedJobs();
                        third.GetAwaiter().GetResult();
                    }
                    for (int i = 0; i < 3; i++)
                    {
                        if (Volatile.Read(ref state[i]) != 1)
                        {
                            errors.Enqueue($"round {r}: step {i} ran {state[i]} times");
                        }
                    }
                }
            }, TaskCreationOptions.LongRunning);
        }
        Assert.True(Task.WaitAll(threads, TimeSpan.FromSeconds(TestUtil.StressTimeout(60))), "the schedulers did not finish");
        Assert.Empty(errors);
        Assert.All(ran, count => Assert.Equal(rounds * 3, count));
    }

    private struct StepJob : IJob
    {
        public int[] State;
        public int Index;
        public int[] Ran;
        public int Thread;
        public System.Collections.Concurrent.ConcurrentQueue<string> Errors;

        public readonly void Execute()
        {
            if (Index > 0 && Volatile.Read(ref State[Index - 1]) != 1)
            {
                Errors.Enqueue($"step {Index} ran before step {Index - 1}");
            }
            Interlocked.Increment(ref State[Index]);
            Interlocked.Increment(ref Ran[Thread]);
        }
    }
}

using System;
using System.Collections.Generic;
using System.Threading;

using SpindleLib.Tests.Sources;

namespace SpindleLib.Tests.Jobs;

#if DEBUG // the job node's test hooks exist only in a Debug build of the library
/// <summary>
/// An edge pushed onto a dependency's waiter list just as the dependency finished and its node was rented by a later job
/// lands in the later job's list (<see cref="JobEdgePushRaceTests"/>). Then two threads may settle it at once: its
/// pusher, seeing the version moved on, revokes it (a compare-exchange of its claim from the push's ticket), and the
/// later job's finisher, finding it misplaced, claims it to deliver (a compare-exchange from the same ticket). One of the
/// two must win: with either made a read and a store, both went through when they met, and the dependent's one
/// dependency was counted out twice, by its pusher and by the finisher: its count went to -1 (or it was made ready and
/// ran twice) (mutation testing, mut54: J9 and J10; <see cref="JobEdgePushRaceTests"/> settles the two one after the
/// other, and no test failed). The node's Debug hooks set the moment up each round: the
/// later job is made visible while the push is under way, the racing thread completes it, and the pusher just after its
/// push and the finisher just before its claim meet and go on at once, at an offset that sweeps through the rounds
/// (<see cref="HookMeeting"/>). Each round checks that the dependent counts no dependency left, and that it ran once,
/// after its dependency. Run alone: it holds
/// every worker, so that only its two threads run jobs, and the hooks are process-wide.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class JobEdgeClaimRaceTests
{
    [Fact]
    public void APusherRevokingAMisplacedEdge_AsTheLaterJobsFinishClaimsIt_LeavesTheDependentRunningOnce()
    {
        var log = new List<string>();
        var laterFault = new InvalidTimeZoneException("the later job's own failure");
        var meeting = new HookMeeting(); // side 0 the pusher, side 1 the later job's finisher
        int current = -1, laterAt = -1, pushedAt = -1, notReused = 0, met = 0;
        JobHandle a = default, later = default;
        Thread test = Thread.CurrentThread;
        Thread? finisher = null;
        // Lines one side writes just after the meeting, before its claim, in turn (the finisher in even rounds, the pusher
        // in odd ones), and the other writes before it arrives: the delayed side's claim, had it a store after its read,
        // would reach the other side later while its read goes ahead (ContinuationRacer.StoreToLines), as on a busy
        // machine; the other side's own stores have drained while it waited, so its claim is not held back with them.
        long[] lines = ContinuationRacer.NewLinePair()[0];
        // A failing round stops the run: a dependent made ready twice leaves the pools' state not to be trusted.
        var race = new RaceRounds("JobEdgeClaimRaceTests", TestUtil.Stress(Spinning.Helps ? 5_000 : 500))
        {
            MaxFailures = 1,
            TimeCap = TimeSpan.FromSeconds(5),
            ClearHooks = () =>
            {
                JobNode.TestHookBeforeEdgePush = null;
                JobNode.TestHookAfterEdgePush = null;
                JobNode.TestHookBeforeMisplacedClaim = null;
            },
        };
        JobNode.TestHookBeforeEdgePush = node =>
        {
            int round = Volatile.Read(ref current);
            if (Thread.CurrentThread != test || Volatile.Read(ref laterAt) == round)
            {
                return; // one forced push a round, the dependent's
            }
            // Between the push's read of the list and its CAS: the dependency finishes and a later job takes its node.
            a.Complete();
            later = new JobEdgePushRaceTests.OrderJob { Log = log, Name = "C", Throw = laterFault }.Schedule();
            if (later.Node != node)
            {
                notReused++;
            }
            JobHandle.ScheduleBatchedJobs(); // visible to the racing thread, which completes it
            Volatile.Write(ref laterAt, round);
        };
        JobNode.TestHookAfterEdgePush = _ =>
        {
            int round = Volatile.Read(ref current);
            if (Thread.CurrentThread == test && Volatile.Read(ref laterAt) == round && Volatile.Read(ref pushedAt) != round)
            {
                Volatile.Write(ref pushedAt, round);
                bool delayed = (round & 1) == 1;
                if (!delayed)
                {
                    ContinuationRacer.StoreToLines(lines, round);
                }
                meeting.Arrive(0, round); // the edge is in the later job's list: its finisher will find it misplaced
                if (delayed)
                {
                    ContinuationRacer.StoreToLines(lines, round);
                }
            }
        };
        JobNode.TestHookBeforeMisplacedClaim = () =>
        {
            if (Thread.CurrentThread == finisher)
            {
                met++;
                int round = Volatile.Read(ref current);
                bool delayed = (round & 1) == 0;
                if (!delayed)
                {
                    ContinuationRacer.StoreToLines(lines, round);
                }
                meeting.Arrive(1, round);
                if (delayed)
                {
                    ContinuationRacer.StoreToLines(lines, round);
                }
            }
        };
        using (new HoldWorkers())
        {
            race.Run(round =>
            {
                lock (log)
                {
                    log.Clear();
                }
                a = new JobEdgePushRaceTests.OrderJob { Log = log, Name = "A" }.Schedule();
                JobHandle b = default;
                Volatile.Write(ref current, round);
                (Exception? mine, Exception? theirs) = race.Racer.RunOnceReady(round, () => Volatile.Read(ref laterAt) == round, spins: 0, () =>
                {
                    finisher ??= Thread.CurrentThread;
                    Assert.Equal(laterFault, Assert.Throws<InvalidTimeZoneException>(() => later.Complete()));
                }, () => b = new JobEdgePushRaceTests.OrderJob { Log = log, Name = "B" }.Schedule(a));
                Assert.Null(mine);
                Assert.Null(theirs);
                Assert.True(meeting.Missed < 0, $"round {meeting.Missed}: the pusher and the finisher did not both reach the edge within 10 s");
                // Both have settled the edge. B waits for nothing now (it ran already, or is queued to): an edge delivered
                // twice counts its one dependency out twice, to -1, unless the second delivery made B ready again.
                JobNode bNode = b.Node!;
                int pending = bNode.PendingDependenciesForTests;
                if (bNode.Version == b.Version && pending != 0)
                {
                    race.Fail($"the dependent B counts {pending} dependencies still to finish, not 0");
                    return;
                }
                b.Complete(); // no inherited failure: the edge was A's, and A succeeded
                string[] ran;
                lock (log)
                {
                    ran = log.ToArray();
                }
                int runsOfB = Array.FindAll(ran, name => name == "B").Length;
                if (runsOfB != 1 || Array.IndexOf(ran, "A") > Array.IndexOf(ran, "B"))
                {
                    race.Fail($"the jobs ran [{string.Join(", ", ran)}]: the dependent B ran {runsOfB} times");
                }
            });
        }
        Assert.True(met * 2 > race.Ran, $"the later job's finisher met a misplaced edge in only {met} of {race.Ran} rounds ({notReused} where the later job took another node)");
        race.AssertNone($"a misplaced edge settled by its pusher and the later job's finisher at once ({race.Ran} rounds, {notReused} where the later job took another node)");
    }
}
#endif

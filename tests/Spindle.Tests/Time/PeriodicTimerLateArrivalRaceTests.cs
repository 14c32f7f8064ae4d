using System;
using System.Reflection;
using System.Threading;

using SpindleLib.Tests.Sources;

namespace SpindleLib.Tests.Time;

#if DEBUG // the source's test hooks exist only in a Debug build of the library
/// <summary>
/// A tick wait whose token is cancelled just after its node fired is claimed by the cancellation, while the node's
/// continuation is still to run: the wait must not complete before that continuation has run (it would claim the next
/// wait's timer), so both arrive at a two-party handshake (<c>PeriodicTimerSource.ArriveLate</c>, an interlocked
/// increment), and the second to arrive completes the wait, cancelled. The two arrive from two threads, and may arrive
/// at once: an increment made of a read and a store lost one of the two when they met, neither saw the count reach two,
/// and the wait never completed (mutation testing, mut54: P3; no test failed with it). The moment is rare by timing
/// alone, so the source's Debug hooks set it up each round: the node's continuation waits, before its claim, for the
/// cancellation to have claimed the wait; then both meet just before the increment and go on at once, at an offset that
/// sweeps through the rounds (<see cref="HookMeeting"/>). And the claim itself: the continuation's exchange and the
/// cancellation's compare-exchange met at once, so that exactly one claims. Run alone: its threads must run at once, and
/// the hooks are process-wide.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class PeriodicTimerLateArrivalRaceTests
{
    private static readonly FieldInfo s_source = typeof(SpindlePeriodicTimer).GetField("_source", BindingFlags.Instance | BindingFlags.NonPublic)!;
    private static readonly FieldInfo s_lateArrivals = typeof(PeriodicTimerSource).GetField("_lateArrivals", BindingFlags.Instance | BindingFlags.NonPublic)!;
    private static readonly TimeSpan s_period = TimeSpan.FromMilliseconds(10);

    /// <summary>A run of up to 500 rounds (5,000 where spinning helps) or 5 s, stopped by its first failing round, which clears the source's hooks.</summary>
    private static RaceRounds NewRace(string name) => new(name, TestUtil.Stress(Spinning.Helps ? 5_000 : 500))
    {
        // A failing round stops the run: the handshake's count is left at one, and the next wait's would be off.
        MaxFailures = 1,
        TimeCap = TimeSpan.FromSeconds(5),
        ClearHooks = () =>
        {
            PeriodicTimerSource.TestHookBeforeTickClaim = null;
            PeriodicTimerSource.TestHookBeforeLateArrival = null;
            PeriodicTimerSource.TestHookOnCanceled = null;
        },
    };

    /// <summary>The timer's next wait that is pending (a tick a cancelled wait did not deliver is taken at once: passed over).</summary>
    private static SpindleTask<bool> NextPendingWait(SpindlePeriodicTimer timer, CancellationToken token)
    {
        SpindleTask<bool> wait;
        while ((wait = timer.WaitForNextTickAsync(token)).IsCompleted)
        {
            Assert.True(wait.GetAwaiter().GetResult()); // a tick the last round's cancelled wait did not deliver
        }
        return wait;
    }

    [Fact]
    public void ACancellationClaimingAWaitJustAfterItsTick_AndTheTicksContinuation_ArriveOnce_AndEndTheWait()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var timer = new SpindlePeriodicTimer(s_period, wheel);
        object source = s_source.GetValue(timer)!;
        var meeting = new HookMeeting(); // side 0 the node's continuation, side 1 the cancellation
        int current = -1, tickAt = -1, cancelledAt = -1;
        RaceRounds race = NewRace("PeriodicTimerLateArrivalRaceTests");
        PeriodicTimerSource.TestHookBeforeTickClaim = s =>
        {
            if (s == source)
            {
                int round = Volatile.Read(ref current);
                Volatile.Write(ref tickAt, round);
                // The cancellation claims the wait now (its node has fired): this continuation then finds the claim taken. A
                // bound, not a throw: a hook must not throw into the library (the round's checks report a miss).
                SpinWait.SpinUntil(() => Volatile.Read(ref cancelledAt) == round, TimeSpan.FromSeconds(10));
            }
        };
        PeriodicTimerSource.TestHookBeforeLateArrival = s =>
        {
            if (s == source)
            {
                int round = Volatile.Read(ref current);
                bool cancelling = Volatile.Read(ref tickAt) == round && Volatile.Read(ref cancelledAt) != round;
                if (cancelling)
                {
                    Volatile.Write(ref cancelledAt, round);
                }
                meeting.Arrive(cancelling ? 1 : 0, round);
            }
        };
        race.Run(round =>
        {
            using var cts = new CancellationTokenSource();
            SpindleTask<bool> wait = NextPendingWait(timer, cts.Token);
            Volatile.Write(ref current, round);
            // This thread ticks; the racing one cancels once the tick's continuation waits before its claim.
            (Exception? mine, Exception? theirs) = race.Racer.RunOnceReady(round, () => Volatile.Read(ref tickAt) == round, spins: 0, cts.Cancel, () => clock.Advance(s_period));
            Assert.Null(mine);
            Assert.Null(theirs);
            Assert.True(meeting.Missed < 0, $"round {meeting.Missed}: the continuation and the cancellation did not both arrive within 10 s");
            if (!SpinWait.SpinUntil(() => wait.IsCompleted, TimeSpan.FromSeconds(2)))
            {
                race.Fail("the cancellation and the tick's continuation both arrived, and the wait never completed");
                return;
            }
            Assert.ThrowsAny<OperationCanceledException>(() => wait.GetAwaiter().GetResult());
        });
        race.AssertNone("a wait claimed by its cancellation just after its tick");
    }

    /// <summary>
    /// A tick wait's node continuation and its token's cancellation claim the wait's timer at the same moment
    /// (<c>TimeoutTimer</c>: the continuation by an exchange, the cancellation by a compare-exchange from Armed): exactly
    /// one of them claims it. The continuation's exchange made a read and then a store (a mutation of
    /// <c>TimeoutTimer.OnFired</c>, decisions section 53's M23) let both claim when the cancellation's compare-exchange
    /// fell between the two: both read the node, so the second read threw (a null node, the other having taken it), or
    /// the cancellation, finding the node fired, waited at the late handshake for a continuation that had gone on to
    /// complete the wait itself, and the handshake's count was left at one. Both sides meet at the hooks just before their
    /// claims (<c>TestHookBeforeTickClaim</c>, <c>TestHookOnCanceled</c>).
    /// </summary>
    [Fact]
    public void ATicksContinuationAndACancellationClaimingAtOnce_OneOfThemEndsTheWait()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var timer = new SpindlePeriodicTimer(s_period, wheel);
        object source = s_source.GetValue(timer)!;
        var meeting = new HookMeeting(); // side 0 the node's continuation, side 1 the cancellation
        int current = -1, ticks = 0, cancels = 0;
        RaceRounds race = NewRace("PeriodicTimerClaimRaceTests");
        PeriodicTimerSource.TestHookBeforeTickClaim = s =>
        {
            if (s == source)
            {
                meeting.Arrive(0, Volatile.Read(ref current));
            }
        };
        PeriodicTimerSource.TestHookOnCanceled = s =>
        {
            if (s == source)
            {
                meeting.Arrive(1, Volatile.Read(ref current));
            }
        };
        race.Run(round =>
        {
            using var cts = new CancellationTokenSource();
            SpindleTask<bool> wait = NextPendingWait(timer, cts.Token);
            Volatile.Write(ref current, round);
            (Exception? mine, Exception? theirs) = race.Racer.RunBothAtOnce(round, () => clock.Advance(s_period), cts.Cancel);
            if ((mine ?? theirs) is { } threw)
            {
                race.Fail("a claimant threw (both claimed the timer, and one read a node the other had taken): " + threw);
                return;
            }
            Assert.True(meeting.Missed < 0, $"round {meeting.Missed}: the continuation and the cancellation did not both arrive within 10 s");
            if (!SpinWait.SpinUntil(() => wait.IsCompleted, TimeSpan.FromSeconds(2)))
            {
                race.Fail("the wait never completed (both claimed its timer, and the continuation's read of the node threw)");
                return;
            }
            bool ticked = wait.IsCompletedSuccessfully;
            if (ticked)
            {
                Assert.True(wait.GetAwaiter().GetResult());
                ticks++;
            }
            else
            {
                Assert.ThrowsAny<OperationCanceledException>(() => wait.GetAwaiter().GetResult());
                cancels++;
            }
            int left = (int)s_lateArrivals.GetValue(source)!;
            if (left != 0)
            {
                race.Fail($"the late handshake's count was left at {left} ({(ticked ? "the wait ticked" : "the wait was cancelled")}): both claimed the timer");
            }
        });
        race.AssertNone($"a tick and a cancellation claiming a wait at once ({ticks} ticked, {cancels} cancelled)");
    }
}
#endif

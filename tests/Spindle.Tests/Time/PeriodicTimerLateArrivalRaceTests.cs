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
/// sweeps through the rounds (<see cref="HookMeeting"/>). Run alone: its threads must run at once, and the hooks are
/// process-wide.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class PeriodicTimerLateArrivalRaceTests
{
    private static readonly FieldInfo s_source = typeof(SpindlePeriodicTimer).GetField("_source", BindingFlags.Instance | BindingFlags.NonPublic)!;
    private static readonly TimeSpan s_period = TimeSpan.FromMilliseconds(10);

    [Fact]
    public void ACancellationClaimingAWaitJustAfterItsTick_AndTheTicksContinuation_ArriveOnce_AndEndTheWait()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var timer = new SpindlePeriodicTimer(s_period, wheel);
        object source = s_source.GetValue(timer)!;
        var meeting = new HookMeeting(); // side 0 the node's continuation, side 1 the cancellation
        int current = -1, tickAt = -1, cancelledAt = -1;
        // A failing round stops the run: the handshake's count is left at one, and the next wait's would be off.
        var race = new RaceRounds("PeriodicTimerLateArrivalRaceTests", TestUtil.Stress(Spinning.Helps ? 5_000 : 500))
        {
            MaxFailures = 1,
            TimeCap = TimeSpan.FromSeconds(5),
            ClearHooks = () =>
            {
                PeriodicTimerSource.TestHookBeforeTickClaim = null;
                PeriodicTimerSource.TestHookBeforeLateArrival = null;
            },
        };
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
            SpindleTask<bool> wait;
            while ((wait = timer.WaitForNextTickAsync(cts.Token)).IsCompleted)
            {
                Assert.True(wait.GetAwaiter().GetResult()); // a tick the last round's cancelled wait did not deliver
            }
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
}
#endif

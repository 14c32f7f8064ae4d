using System;
using System.Threading;

using SpindleLib.Tests.Sources;

namespace SpindleLib.Tests.Tasks;

#if DEBUG
/// <summary>
/// What a signal's wait holds (its registration, its timer) is taken by one ender: the ending of the wait once it is
/// over (a read, or, for a forgotten wait, its observer, run by the set on the setter's thread), or the owner's next
/// wait, whichever claims it first with a compare-exchange (<c>Signal.WaitState.TryTake</c>). Claimed with a read and a
/// store, both passed the read when they met there and both took the wait's timer: each stopped it, the owner's stop
/// recycled it, the owner's next wait rented the same pooled timer object, and the observer's stop, coming later,
/// stopped the next wait's timer (the next wait then never timed out) and gave the object back to its pool while the
/// next wait still held it (mutation testing, mut52: S5). <see cref="SignalEndedReadTests"/> holds the observer up
/// before its claim, which decides nothing between the two enders; here Debug hooks bring both to their claims at the
/// same moment, with a sweep of small offsets (<see cref="HookMeeting"/>) and their stores held back
/// (<see cref="ContinuationRacer.StoreToLines"/>), and hold the observer up after it has taken (a thread preempted
/// there) until the next wait has armed. Run alone: process-wide hooks, and its two threads must
/// run at once.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class SignalTakeClaimRaceTests
{
    private const int Bound = 10; // seconds: a side waiting for the other

    /// <summary>
    /// Each round a forgotten timed wait (ten minutes, on a manual clock) is set on the racing thread, whose observer
    /// ends it there as the owner starts its next wait (a 50 ms timeout) on this one, as soon as the old wait is over:
    /// the observer's ending of the old wait meets the next wait's at their claims. The next wait times out when the
    /// clock passes its 50 ms, and leaves nothing in the wheel.
    /// </summary>
    [Fact]
    public void AForgottenWaitEndedAsTheNextWaitStarts_LeavesTheNextWaitsTimeoutToIt()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var signal = new Signal();
        var meeting = new HookMeeting(); // side 0 the observer, side 1 the owner
        int current = -1, armedAt = -1; // the round under way; the last whose next wait has armed
        // Written by each side just before its claim: the claim's stores reach the other side later, while its reads go
        // ahead (ContinuationRacer.StoreToLines).
        long[][] lines = ContinuationRacer.NewLinePair();
        // Fewer rounds on a loaded machine (each round checks its outcome), never fewer than 200; the first failing round
        // stops the run: its pooled timer may be another's now, so nothing after it is sound.
        var race = new RaceRounds("SignalTakeClaimRaceTests", TestUtil.Stress(20_000))
        {
            MaxFailures = 1,
            TimeCap = TimeSpan.FromSeconds(3),
            MinRounds = 200,
            ClearHooks = () =>
            {
                Signal.TestHookBeforeEndingRead = null;
                Signal.TestHookAfterEndingReadTook = null;
            },
        };
        Signal.TestHookBeforeEndingRead = s =>
        {
            if (ReferenceEquals(s, signal))
            {
                int round = Volatile.Read(ref current);
                meeting.Arrive(0, round);
                ContinuationRacer.StoreToLines(lines[round & 1], round);
            }
        };
        Signal.TestHookAfterEndingReadTook = s =>
        {
            if (ReferenceEquals(s, signal))
            {
                int round = Volatile.Read(ref current);
                TestUtil.SpinUntil(() => Volatile.Read(ref armedAt) == round, () => $"round {round}: the owner's next wait did not arm", Bound);
            }
        };
        race.Run(round =>
        {
            Volatile.Write(ref current, round);
            signal.WaitAsync(TimeSpan.FromMinutes(10), wheel).Forget();
            SpindleTask<bool> next = default;
            int r = round;
            (Exception? mine, Exception? theirs) = race.Racer.RunBothAtOnce(round, () =>
            {
                Assert.True(meeting.WaitFor(0, r), $"round {r}: the observer did not reach its claim within 10 s");
                Signal.TestHookUnderArmingMark = s =>
                {
                    if (ReferenceEquals(s, signal))
                    {
                        meeting.Arrive(1, r);
                        ContinuationRacer.StoreToLines(lines[(r & 1) ^ 1], r);
                    }
                };
                try
                {
                    next = signal.WaitAsync(TimeSpan.FromMilliseconds(50), wheel);
                }
                finally
                {
                    Signal.TestHookUnderArmingMark = null;
                }
                Volatile.Write(ref armedAt, r);
            }, signal.Set); // completes the forgotten wait: its observer ends it on the racing thread
            Assert.Null(mine);
            Assert.Null(theirs);
            Assert.False(next.IsCompleted, $"round {round}: the next wait ended before its timeout");
            clock.Advance(TimeSpan.FromMilliseconds(100));
            if (!next.IsCompleted)
            {
                race.Fail($"the next wait did not time out 100 ms into its 50 ms timeout (the old wait's observer stopped its timer); {wheel.PendingCount} timers in the wheel");
                return; // its pooled timer may be another's now: nothing after this is sound
            }
            Assert.False(next.GetAwaiter().GetResult(), $"round {round}: the next wait did not time out");
            Assert.Equal(0, wheel.PendingCount);
        });
        Assert.True(meeting.Missed == -1, $"round {meeting.Missed}: the observer and the owner did not both reach their claims within 10 s");
        race.AssertNone($"after {race.Ran} rounds");
    }
}
#endif

using System;
using System.Reflection;
using System.Threading;

using SpindleLib.Tests.Sources;

namespace SpindleLib.Tests.Tasks;

#if DEBUG // the timeout's test hook exists only in a Debug build of the library
/// <summary>
/// A timed wait's timeout object (<c>SignalTimeout</c>) has two holders, the timer's continuation and the signal until
/// the wait ends, and the last to drop its hold returns it to its pool. The two drop theirs on two threads when the wait
/// has timed out and is read elsewhere: the continuation, on the advancing thread, after it has timed the wait out, and
/// the read, which ends the wait and stops its timer (too late: the continuation claimed it). A decrement made of a read
/// and a store (a mutation of <c>SignalTimeout.Release</c>, decisions section 53's M21) lost one of the two when they met:
/// neither saw the count reach zero, and the object was never returned (its count left at one). The two drops meet each
/// round at the Debug hook before the decrement and go on at once (<see cref="HookMeeting"/>). Run alone: its threads
/// must run at once, and the hook is process-wide.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class SignalTimeoutReleaseRaceTests
{
    private static readonly FieldInfo s_holds = typeof(SignalTimeout).GetField("_holds", BindingFlags.Instance | BindingFlags.NonPublic)!;
    private static readonly FieldInfo s_signal = typeof(SignalTimeout).GetField("_signal", BindingFlags.Instance | BindingFlags.NonPublic)!;

    [Fact]
    public void ATimedOutWaitReadOnAnotherThread_AsTheTimersContinuationEnds_ReturnsItsTimeoutOnce()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var signal = new Signal();
        var meeting = new HookMeeting(); // side 0 the timer's continuation (this thread), side 1 the read (the racing one)
        int current = -1;
        int advancing = Environment.CurrentManagedThreadId;
        SignalTimeout? timeout = null;
        var race = new RaceRounds("SignalTimeoutReleaseRaceTests", TestUtil.Stress(Spinning.Helps ? 5_000 : 500))
        {
            MaxFailures = 1,
            TimeCap = TimeSpan.FromSeconds(5),
            ClearHooks = () => SignalTimeout.TestHookBeforeRelease = null,
        };
        SignalTimeout.TestHookBeforeRelease = t =>
        {
            if (s_signal.GetValue(t) == signal)
            {
                Volatile.Write(ref timeout, t);
                meeting.Arrive(Environment.CurrentManagedThreadId == advancing ? 0 : 1, Volatile.Read(ref current));
            }
        };
        race.Run(round =>
        {
            SpindleTask<bool> wait = signal.WaitAsync(TimeSpan.FromMilliseconds(1), wheel);
            Volatile.Write(ref current, round);
            bool? result = null;
            // This thread fires the timer, whose continuation times the wait out and then drops its hold; the racing
            // thread reads the wait once that continuation is at its drop, which ends the wait and drops the signal's.
            (Exception? mine, Exception? theirs) = race.Racer.RunOnceReady(round, static () => true, spins: 0, () =>
            {
                if (meeting.WaitFor(0, round))
                {
                    result = wait.GetAwaiter().GetResult();
                }
            }, () => clock.Advance(TimeSpan.FromMilliseconds(1)));
            Assert.Null(mine);
            Assert.Null(theirs);
            Assert.True(meeting.Missed < 0, $"round {meeting.Missed}: the continuation and the read did not both drop their holds within 10 s");
            Assert.False(result, "the wait should have timed out");
            int holds = (int)s_holds.GetValue(Volatile.Read(ref timeout)!)!;
            if (holds != 0)
            {
                race.Fail($"the timeout's count was left at {holds} after both holders dropped theirs: it was never returned to its pool");
            }
        });
        race.AssertNone("a timed-out wait read as its timer's continuation ends");
    }
}
#endif

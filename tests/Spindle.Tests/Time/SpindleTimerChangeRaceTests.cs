using System;
using System.Collections.Generic;
using System.Threading;

namespace SpindleLib.Tests.Time;

#if DEBUG // the node's test hook exists only in a Debug build of the library
/// <summary>
/// A Change that lands while the wheel fires its timer: the Change reads the word (armed, due soon), and the owner's
/// settling CAS fires the timer before the Change's CAS. The Change must then read the word again and re-arm the timer
/// through the owner (a one-shot that fired is no longer linked anywhere), so the due time it gave is kept. A Change
/// that stored its word with a plain write instead of a CAS (mutation testing, mut55: M08; every earlier test passed)
/// left the word armed at the later tick with the node linked nowhere: the re-arm was lost and the timer never fired
/// again. The moment is a few instructions wide, so the node's Debug hook sets it up: the wheel fires the timer, on the
/// same thread (a <see cref="ManualClock"/> fires inline), between the Change's read and its CAS. The hook is process-wide,
/// and acts on this test's node only.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class SpindleTimerChangeRaceTests
{
    private static TimeSpan Ms(long ms) => TimeSpan.FromMilliseconds(ms);

    /// <summary>
    /// Runs <paramref name="act"/> with <paramref name="hook"/> (one of the library's Debug hooks that hand over the
    /// object they act on: a node's, or a provider timer's) set to run <paramref name="landing"/> the first time it is
    /// reached for <paramref name="node"/>, clears the hook after, and checks that it was reached (else the race the test
    /// sets up never happened).
    /// </summary>
    internal static void LandOnce<T>(ref Action<T>? hook, T node, Action landing, Action act)
        where T : class
    {
        int hooked = 0;
        try
        {
            hook = n =>
            {
                if (ReferenceEquals(n, node) && Interlocked.Exchange(ref hooked, 1) == 0)
                {
                    landing();
                }
            };
            act();
        }
        finally
        {
            hook = null;
        }
        Assert.True(hooked == 1, "The hook never ran for this test's object: the race the test sets up did not happen.");
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public void ChangeLandingAsTheWheelFiresTheTimer_KeepsItsDueTime(bool periodic)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var fired = new List<long>();
        Action<object?> callback = _ => fired.Add(clock.GetTimestamp() * 1000 / clock.TimestampFrequency);
        using SpindleTimer timer = wheel.CreateTimer(callback, null, Ms(5), periodic ? Ms(100) : Timeout.InfiniteTimeSpan);
        clock.Advance(Ms(4)); // linked at 5
        CallbackTimerNode node = SpindleTimerMutationTests.NodeOf(timer);
        LandOnce(ref CallbackTimerNode.TestHookBeforeChangeCas, node,
            () =>
            {
                clock.Advance(Ms(1)); // the wheel fires it (due at 5) between the Change's read and its CAS
            },
            () =>
            {
                // At 4: due at 10, later than the word it read (a push-back); the period as it was.
                timer.Change(Ms(6), periodic ? Ms(100) : Timeout.InfiniteTimeSpan);
            });
        Assert.Equal(new long[] { 5 }, fired);
        clock.Advance(Ms(200));
        // The Change's due time, then its period's (the firing at 5 had linked a periodic timer at 105, the word
        // armed: the Change, read again, pulls it forward).
        Assert.Equal(periodic ? new long[] { 5, 10, 110 } : new long[] { 5, 10 }, fired);
        Assert.Equal(periodic ? 1 : 0, wheel.PendingCount);
    }

    /// <summary>
    /// A Change that passed the wheel's disposed check just before the wheel's Dispose ran to its end (its last pass had
    /// taken the change inbox) pushes the timer into the inbox of a wheel no pass drains any more. So the push asks for
    /// another disposing pass (<c>TimerWheel.QueueChange</c>), which ends the timer as the wheel's Dispose ends every
    /// timer, and the user's Dispose then returns the node to the pool. Without that request (mut55: M32; every earlier test
    /// passed) the node stayed in the dead inbox, Queued, and the user's Dispose could never recycle it. The hook runs the
    /// wheel's Dispose between the Change's read of the word and its CAS.
    /// </summary>
    [Fact]
    public void ChangeRacingTheWheelsDispose_TheTimerIsEnded_AndItsDisposeReturnsTheNode()
    {
        var clock = new ManualClock();
        var wheel = new TimerWheel(clock);
        int fired = 0;
        SpindleTimer timer = wheel.CreateTimer(_ => fired++, null, Timeout.InfiniteTimeSpan); // stopped: in no part of the wheel
        CallbackTimerNode node = SpindleTimerMutationTests.NodeOf(timer);
        LandOnce(ref CallbackTimerNode.TestHookBeforeChangeCas, node,
            () =>
            {
                wheel.Dispose(); // after the Change's check of the wheel, before its CAS
            },
            () =>
            {
                timer.Change(Ms(5), Timeout.InfiniteTimeSpan); // arms it: Queued, pushed to the disposed wheel's inbox
            });
        clock.Advance(Ms(10));
        Assert.Equal(0, fired);
        var ex = Assert.Throws<ObjectDisposedException>(() => timer.Change(Ms(1), Timeout.InfiniteTimeSpan));
        Assert.Contains("TimerWheel has been disposed", ex.Message, StringComparison.Ordinal);
        timer.Dispose();
        Assert.Null(node.Wheel); // recycled: the handle's hold was the last
        Assert.Throws<ObjectDisposedException>(() => timer.Change(Ms(1), Timeout.InfiniteTimeSpan));
    }
}
#endif

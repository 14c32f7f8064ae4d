using System;
using System.Threading;

namespace SpindleLib.Tests.Time;

#if DEBUG // the node's test hooks exist only in a Debug build of the library
/// <summary>
/// A user's call landing in the few instructions between a CAS-based step's read of a callback timer's word and its
/// CAS, or just after the wheel's settling CAS: the three windows the fifth mutation pass left open (decisions section
/// 51, M39-M41: each mutant passed every earlier test). The node's Debug hooks run the user's call there, on the same
/// thread, so each race happens every run: <c>TestHookAfterSettleCas</c> and <c>TestHookBeforeSettleCas</c> run inside
/// the wheel's pass (a <see cref="ManualClock"/>'s Advance fires inline), <c>TestHookBeforeDisposeCas</c> inside the
/// user's Dispose. The hooks are process-wide (hence the sequential collection) and act on this test's node, once.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class SpindleTimerSettlementRaceTests
{
    private static TimeSpan Ms(long ms) => TimeSpan.FromMilliseconds(ms);

    private static readonly TimeSpan Infinite = Timeout.InfiniteTimeSpan;

    /// <summary>
    /// The user disposes a one-shot timer just after the wheel's settling CAS took its firing: the CAS let go of the node
    /// (a fired one-shot is held by nobody but its handle), so the Dispose recycles it at once and clears its callback
    /// and state, and the node may be rented again at once by the next timer made on that thread. The firing taken still
    /// runs, with its own callback and state (the class remarks of SpindleTimer: a callback the wheel has already taken
    /// still runs), because the owner copied them before its CAS. A settlement that read them after its CAS (mut55: M39)
    /// ran a cleared callback (a NullReferenceException reported as unobserved, the firing lost) or, with the node
    /// rented again, the next timer's callback with its state, a timer that was never armed.
    /// </summary>
    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public void DisposeJustAfterTheWheelTookTheFiring_TheFiringRunsWithItsOwnCallbackAndState(bool nodeRentedAgain)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var log = new SpindleTimerTests.Log(clock);
        var otherLog = new SpindleTimerTests.Log(clock);
        SpindleTimer timer = wheel.CreateTimer(SpindleTimerTests.Log.Callback, log, Ms(5));
        clock.Advance(Ms(4)); // linked at 5
        CallbackTimerNode node = SpindleTimerMutationTests.NodeOf(timer);
        SpindleTimer other = default;
        SpindleTimerChangeRaceTests.LandOnce(ref CallbackTimerNode.TestHookAfterSettleCas, node,
            () =>
            {
                timer.Dispose(); // between the wheel's CAS (it fires the timer) and its delivery of the callback
                if (nodeRentedAgain)
                {
                    // Stopped, so nothing is pushed: this thread's pool hands it the node the Dispose returned.
                    other = wheel.CreateTimer(SpindleTimerTests.Log.Callback, otherLog, Infinite);
                }
            },
            () =>
            {
                clock.Advance(Ms(1));
            });
        if (nodeRentedAgain)
        {
            Assert.True(ReferenceEquals(node, SpindleTimerMutationTests.NodeOf(other)),
                "Setup: the timer made in the hook should have taken the node the Dispose had just returned to this thread's pool.");
        }
        else
        {
            Assert.True(node.Wheel is null, "The Dispose of a fired one-shot should have returned its node to the pool at once.");
        }
        Assert.Equal(new long[] { 5 }, log.Fired);
        Assert.Empty(otherLog.Fired);
        clock.Advance(Ms(100));
        Assert.Equal(new long[] { 5 }, log.Fired);
        Assert.Empty(otherLog.Fired);
        if (nodeRentedAgain)
        {
            other.Change(Ms(3)); // the other timer works as any other: it fires when armed, once
            clock.Advance(Ms(10));
            Assert.Equal(new long[] { 108 }, otherLog.Fired);
            other.Dispose();
        }
        Assert.Equal(0, wheel.PendingCount);
    }

    /// <summary>
    /// A Change pushing a timer back lands after the wheel read the word of a timer it found due, before its settling
    /// CAS: the CAS fails, the owner reads the word again, finds the later due tick, and links the timer there instead
    /// of firing it (the class remarks of CallbackTimerNode: a Change that lands first makes the CAS fail). A settlement
    /// that stored its decision with a plain write (mut55: M41) fired the timer at its old tick and overwrote the Change:
    /// a one-shot never fired at the tick the Change gave, a periodic one kept its old phase.
    /// </summary>
    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public void ChangeLandingAsTheWheelSettlesTheFiring_TheTimerFiresAtTheChangedTick(bool periodic)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var log = new SpindleTimerTests.Log(clock);
        using SpindleTimer timer = wheel.CreateTimer(SpindleTimerTests.Log.Callback, log, Ms(5), periodic ? Ms(100) : Infinite);
        clock.Advance(Ms(4)); // linked at 5
        CallbackTimerNode node = SpindleTimerMutationTests.NodeOf(timer);
        SpindleTimerChangeRaceTests.LandOnce(ref CallbackTimerNode.TestHookBeforeSettleCas, node,
            () =>
            {
                // At 5, inside the pass that found it due: due at 10 now, a push back (one CAS on the word), the period kept.
                timer.Change(Ms(5));
            },
            () =>
            {
                clock.Advance(Ms(1));
            });
        Assert.Empty(log.Fired); // the Change landed before the wheel took the firing at 5
        clock.Advance(Ms(200));
        Assert.Equal(periodic ? new long[] { 10, 110 } : new long[] { 10 }, log.Fired);
        Assert.Equal(periodic ? 1 : 0, wheel.PendingCount);
    }

    /// <summary>
    /// The user disposes a stopped timer (held by nobody but its handle: its Dispose would recycle the node at once),
    /// and another thread's Change re-arms it between the Dispose's read of the word and its CAS: the Change pushes it
    /// to the owner, which links it (a <see cref="ManualClock"/> runs that pass inline, in the Change). The Dispose's CAS
    /// fails, it reads the word again, finds the node armed, and hands it to the owner, which unlinks and recycles it: the
    /// timer never fires and the wheel holds nothing. A Dispose that stored its word with a plain write (mut55: M40)
    /// recycled the node where the wheel still held it linked (the wheel still counted it, and its slot's next pass would
    /// meet a node in the pool). On that failure this test leaves the wheel alone, neither advanced nor disposed, so that
    /// no pass reaches the pooled node.
    /// </summary>
    [Fact]
    public void ChangeRearmingAStoppedTimerInItsDispose_TheDisposeStillEndsIt_AndTheWheelLetsGo()
    {
        var clock = new ManualClock();
        var wheel = new TimerWheel(clock);
        var log = new SpindleTimerTests.Log(clock);
        SpindleTimer timer = wheel.CreateTimer(SpindleTimerTests.Log.Callback, log, Infinite); // stopped: in no part of the wheel
        CallbackTimerNode node = SpindleTimerMutationTests.NodeOf(timer);
        SpindleTimerChangeRaceTests.LandOnce(ref CallbackTimerNode.TestHookBeforeDisposeCas, node,
            () =>
            {
                timer.Change(Ms(5), Infinite); // re-armed: Queued, pushed, and linked at 5 by the pass its kick runs
                Assert.Equal(1, wheel.PendingCount);
            },
            () =>
            {
                timer.Dispose();
            });
        Assert.True(wheel.PendingCount == 0,
            $"After the Dispose the wheel should hold no timer (it counts {wheel.PendingCount}): a Dispose that missed the re-arm recycled a node the wheel holds.");
        Assert.True(node.Wheel is null, "The Dispose's push should have had the owner recycle the node (a ManualClock's kick runs that pass inline).");
        clock.Advance(Ms(10));
        Assert.Empty(log.Fired);
        Assert.Equal(0, wheel.PendingCount);
        wheel.Dispose();
    }
}
#endif

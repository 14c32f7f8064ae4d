using System;
using System.Collections.Generic;
using System.Runtime.CompilerServices;
using System.Threading;

namespace SpindleLib.Tests.Time;

/// <summary>
/// The fifth mutation pass (mut55, on <see cref="SpindleTimer"/> and its <see cref="CallbackTimerNode"/>): each test here
/// failed with a mutant that every earlier test let through (the table in decisions section 51 names it), and passes
/// without it.
/// </summary>
public class SpindleTimerMutationTests
{
    private static TimeSpan Ms(long ms) => TimeSpan.FromMilliseconds(ms);

    private static readonly TimeSpan Infinite = Timeout.InfiniteTimeSpan;

    /// <summary>The node behind a handle (its internal accessor).</summary>
    internal static CallbackTimerNode NodeOf(SpindleTimer timer) => timer.Node!;

    /// <summary>
    /// A node reused more than 65,536 times on one thread (the pool gives it back to the next timer) goes through every
    /// value of its 16-bit version, the top bit included, and each use still works: it fires, a Change moves it, and the
    /// handle of the use before is refused. A mask one bit short in the word's packing lost the version's top bit from
    /// the 32,768th use on, and every Change of such a use threw ObjectDisposedException.
    /// </summary>
    [Fact]
    public void NodeReusedPastTheVersionsRange_EveryUseWorks()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var log = new SpindleTimerTests.Log(clock);
        SpindleTimer previous = default;
        for (int use = 0; use < 66_000; use++)
        {
            SpindleTimer timer = wheel.CreateTimer(SpindleTimerTests.Log.Callback, log, Infinite);
            timer.Change(Ms(2), Infinite); // Queued for the owner
            timer.Change(Ms(3), Infinite); // still Queued: only the word moves
            if (use % 4096 == 0 || (use >= 32_760 && use <= 32_775))
            {
                // Through the wheel now and then (and around the version's top bit): fires at its tick, once.
                int before = log.Fired.Count;
                clock.Advance(Ms(3));
                Assert.Equal(before + 1, log.Fired.Count);
            }
            if (previous != default)
            {
                Assert.Throws<ObjectDisposedException>(() => previous.Change(Ms(1), Infinite));
            }
            timer.Change(Infinite, Infinite);
            clock.Advance(Ms(1)); // the stop goes through the inbox: settled, the node is the handle's alone
            timer.Dispose();
            previous = timer;
        }
        Assert.Equal(0, wheel.PendingCount);
    }

    /// <summary>
    /// A Change that pulls the due time forward by a single millisecond goes to the owner, which links the timer at the
    /// earlier tick: only a due time at or after the one in the word may stay where it is linked (the lazy push-back).
    /// Taking a one-tick pull forward as a push-back fired the timer a millisecond late.
    /// </summary>
    [Fact]
    public void Change_PulledForwardByOneTick_FiresAtTheEarlierTick()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var log = new SpindleTimerTests.Log(clock);
        using SpindleTimer timer = wheel.CreateTimer(SpindleTimerTests.Log.Callback, log, Ms(10));
        clock.Advance(Ms(1)); // linked at 10
        timer.Change(Ms(8), Infinite); // due at 9
        clock.Advance(Ms(8));
        Assert.Equal(new long[] { 9 }, log.Fired);
    }

    /// <summary>
    /// A stale handle's Change (its timer disposed, the node reused by another) throws and leaves the new timer's period
    /// alone: the period word is written only while its version matches. With that check skipped, the stale call wrote
    /// its period into the new timer before the main word refused it.
    /// </summary>
    [Fact]
    public void StaleHandle_Change_LeavesThePeriodOfTheTimerThatReusesItsNode()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var log = new SpindleTimerTests.Log(clock);
        SpindleTimer stale = wheel.CreateTimer(SpindleTimerTests.Log.Callback, log, Infinite);
        stale.Dispose();
        using SpindleTimer fresh = wheel.CreateTimer(SpindleTimerTests.Log.Callback, log, Ms(10), Ms(10));
        Assert.Throws<ObjectDisposedException>(() => stale.Change(Ms(1), Ms(3)));
        clock.Advance(Ms(30));
        Assert.Equal(new long[] { 10, 20, 30 }, log.Fired);
    }

    /// <summary>
    /// After the wheel's Dispose (which ends an armed timer, and finds a stopped one in no part of it), the user's Dispose
    /// returns the timer's node to the pool: the next timer this thread creates gets it (the pool's own stack for the
    /// thread is last in, first out), cleared and on its next version. With that Dispose letting go of the hold but not recycling the node, the node was lost to the
    /// pool (collected, never reused), and every test still passed.
    /// </summary>
    [Theory]
    [InlineData(true)]
    [InlineData(false)]
    public void WheelDispose_ThenTheUsersDispose_ReturnsTheNodeToThePool(bool armed)
    {
        var clock = new ManualClock();
        var wheel = new TimerWheel(clock);
        var log = new SpindleTimerTests.Log(clock);
        SpindleTimer timer = wheel.CreateTimer(SpindleTimerTests.Log.Callback, log, armed ? Ms(10) : Infinite);
        CallbackTimerNode node = NodeOf(timer);
        wheel.Dispose();
        Assert.Null(node.NextChange);
        timer.Dispose();
        Assert.Null(node.Wheel); // recycled: cleared
        using var other = new TimerWheel(clock);
        using SpindleTimer next = other.CreateTimer(SpindleTimerTests.Log.Callback, log, Ms(5));
        Assert.Same(node, NodeOf(next));
        Assert.Throws<ObjectDisposedException>(() => timer.Change(Ms(1), Infinite));
        clock.Advance(Ms(10));
        Assert.Equal(new long[] { 5 }, log.Fired);
    }

    /// <summary>
    /// The wheel's Dispose lets go of each timer's callback and state at once, as the remarks on <see cref="SpindleTimer"/>
    /// say, though the user still holds the handle (and disposes it only later, or never): the state is collected while
    /// the handle lives. A wheel's Dispose that kept them held the state until the user's Dispose, which may never come.
    /// </summary>
    [Theory]
    [InlineData(true)]
    [InlineData(false)]
    public void WheelDispose_LetsGoOfTheCallbackAndState_WhileTheHandleLives(bool linked)
    {
        var clock = new ManualClock();
        var wheel = new TimerWheel(clock);
        (SpindleTimer timer, WeakReference state) = CreateWithState(wheel);
        if (linked)
        {
            clock.Advance(Ms(1)); // else still in the change inbox when the wheel is disposed
        }
        wheel.Dispose();
        GC.Collect();
        GC.WaitForPendingFinalizers();
        GC.Collect();
        Assert.False(state.IsAlive, "the disposed wheel's timer still holds its state");
        var ex = Assert.Throws<ObjectDisposedException>(() => timer.Change(Ms(1), Infinite));
        Assert.Contains("TimerWheel has been disposed", ex.Message, StringComparison.Ordinal);
        timer.Dispose();
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    private static (SpindleTimer, WeakReference) CreateWithState(TimerWheel wheel)
    {
        var state = new object();
        return (wheel.CreateTimer(static _ => { }, state, Ms(10)), new WeakReference(state));
    }

    /// <summary>
    /// A fractional period is rounded up to the wheel's millisecond, as the due time is: never early. A period rounded
    /// down (1.5 ms taken as 1 ms) fired every millisecond.
    /// </summary>
    [Fact]
    public void Periodic_FractionalPeriod_RoundsUp()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var log = new SpindleTimerTests.Log(clock);
        using SpindleTimer timer = wheel.CreateTimer(SpindleTimerTests.Log.Callback, log, Ms(2), TimeSpan.FromTicks(15_000)); // 1.5 ms: 2 ms
        for (int i = 0; i < 8; i++)
        {
            clock.Advance(Ms(1)); // stops at every millisecond
        }
        Assert.Equal(new long[] { 2, 4, 6, 8 }, log.Fired);
        timer.Change(Ms(1), TimeSpan.FromTicks(1)); // a tenth of a microsecond: one millisecond
        for (int i = 0; i < 3; i++)
        {
            clock.Advance(Ms(1));
        }
        Assert.Equal(new long[] { 2, 4, 6, 8, 9, 10, 11 }, log.Fired);
    }

    /// <summary>
    /// A periodic timer's next tick at the top of the word's range: the last tick the word holds (one before
    /// <see cref="CallbackTimerNode.NeverDue"/>) is still a tick, and one that would reach NeverDue or pass it stops the
    /// timer (34 years after the wheel's origin, which no test clock reaches through the wheel). A bound off by one made
    /// the last tick a stop.
    /// </summary>
    [Fact]
    public void NextTick_AtTheTopOfTheWordsRange_KeepsTheLastTickAndStopsPastIt()
    {
        const long Never = CallbackTimerNode.NeverDue;
        Assert.Equal(Never - 1, CallbackTimerNode.NextTick(Never - 11, 10, Never - 11));
        Assert.Equal(Never - 1, CallbackTimerNode.NextTick(Never - 11, 10, Never - 2));
        Assert.Equal(Never, CallbackTimerNode.NextTick(Never - 10, 10, Never - 10));
        Assert.Equal(Never, CallbackTimerNode.NextTick(Never - 11, 10, Never - 1));
        Assert.Equal(Never - 1, CallbackTimerNode.NextTick(Never - 1 - 3 * 1000, 1000, Never - 1 - 1000)); // whole periods
        Assert.Equal(25, CallbackTimerNode.NextTick(5, 10, 17)); // coalesced: the first tick after 17
        Assert.Equal(15, CallbackTimerNode.NextTick(5, 10, 5));
        Assert.Equal(15, CallbackTimerNode.NextTick(5, 10, 3)); // the clock behind the tick: the next period
    }

    /// <summary>
    /// A one-shot timer that has fired is held by nobody but its handle (the firing CAS let go of the owner's hold), so
    /// its Dispose returns the node to the pool at once, on the calling thread, which hands it to the next timer the
    /// thread creates. On a wheel of the system clock the owner is the timer thread: a firing that left the owner's hold
    /// on made the Dispose go through the change inbox, and the node was recycled on the timer thread instead (the
    /// caller's next timer allocated a node).
    /// </summary>
    [Fact]
    public void SystemClock_DisposeOfAFiredOneShot_RecyclesItAtOnce_OnTheCallingThread()
    {
        using var wheel = new TimerWheel(TimeProvider.System);
        using var fired = new ManualResetEventSlim();
        SpindleTimer timer = wheel.CreateTimer(static s => ((ManualResetEventSlim)s!).Set(), fired, Ms(1));
        CallbackTimerNode node = NodeOf(timer);
        Assert.True(fired.Wait(TimeSpan.FromSeconds(10)), "the timer never fired");
        timer.Dispose();
        Assert.Null(node.Wheel); // recycled by this call
        using SpindleTimer next = wheel.CreateTimer(static _ => { }, null, Infinite);
        Assert.Same(node, NodeOf(next));
    }

    /// <summary>
    /// A late pass on a wheel that holds a timer already linked moves the wheel's time only by stepping through it: the
    /// jump that settling the change inbox may make (to just before the earliest changed timer) is for an empty wheel
    /// only. Made on a wheel that held a delay due at 5, the jump to 7 passed its slot: the timer changed to 8 fired,
    /// and the delay was left behind until the wheel came round to its slot again.
    /// </summary>
    [Fact]
    public void ChangedTimer_OnALatePass_DoesNotMoveTheWheelPastALinkedDelay()
    {
        var clock = new DeferredClock();
        using var wheel = new TimerWheel(clock);
        var order = new List<string>();
        wheel.Delay(5).ContinueWithForTest(() => order.Add("delay 5"));
        clock.RunDue(); // linked
        using SpindleTimer timer = wheel.CreateTimer(s => ((List<string>)s!).Add("timer 8"), order, Ms(8));
        clock.MoveWithoutFiring(Ms(10)); // the provider's thread is late: one pass covers both
        clock.RunDue();
        Assert.Equal(new[] { "delay 5", "timer 8" }, order);
    }

    /// <summary>
    /// A periodic timer started due at once, settled from the change inbox by a pass at a tick the wheel has already
    /// reached while it holds another timer (so the pass does not jump ahead, see <c>SettleChanged</c>), fires there and
    /// is linked at its next period with the owner's hold (Armed) set, as every timer linked in a slot is. Its Dispose then
    /// goes through the change inbox, and the owner unlinks it before it returns the node to the pool. A settlement that
    /// linked it without Armed (mut55: M38; every earlier test passed) let the Dispose recycle the node at once while it
    /// was still linked (the wheel went on counting it, and its slot would hand a pooled node, or the next timer's, to a
    /// later pass). On that failure this test leaves the wheel alone, neither advanced nor disposed.
    /// </summary>
    [Fact]
    public void PeriodicTimerStartedDueAtOnce_InATickTheWheelHasPassed_IsLinkedAsHeld_AndItsDisposeUnlinksIt()
    {
        var clock = new ManualClock();
        var wheel = new TimerWheel(clock);
        var log = new SpindleTimerTests.Log(clock);
        SpindleTimer keeper = wheel.CreateTimer(static _ => { }, null, Ms(1000)); // the wheel is not empty
        SpindleTimer passer = wheel.CreateTimer(static _ => { }, null, Ms(5));
        clock.Advance(Ms(5)); // a pass at 5: the wheel's time is 5
        SpindleTimer periodic = wheel.CreateTimer(SpindleTimerTests.Log.Callback, log, TimeSpan.Zero, Ms(10));
        Assert.Equal(new long[] { 5 }, log.Fired); // settled from the inbox at 5: fired, and linked at 15
        Assert.Equal(2, wheel.PendingCount);
        CallbackTimerNode node = NodeOf(periodic);
        periodic.Dispose();
        Assert.True(wheel.PendingCount == 1,
            $"After the periodic timer's Dispose the wheel should hold the keeper alone (it counts {wheel.PendingCount}): the Dispose recycled a node still linked.");
        Assert.Null(node.Wheel); // recycled by the pass its push ran (a ManualClock's kick runs it inline)
        using SpindleTimer next = wheel.CreateTimer(SpindleTimerTests.Log.Callback, log, Ms(25)); // this thread's pool hands it the node
        clock.Advance(Ms(40));
        Assert.Equal(new long[] { 5, 30 }, log.Fired); // the disposed timer never again; the next one once, at its tick
        passer.Dispose();
        keeper.Dispose();
        wheel.Dispose();
    }
}

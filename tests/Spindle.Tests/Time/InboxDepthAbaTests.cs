using System;
using Xunit;

namespace SpindleLib.Tests.Time;

#if DEBUG
/// <summary>
/// A shard's inbox counts its timers by the depth each push writes on its node (the depth of the head it read, plus
/// one). The CAS compares the head by identity: if, between a producer's read of the head and its CAS, the owner takes
/// the inbox, that head's timer ends, and its pooled node is pushed again as a new timer, the CAS succeeds with a depth
/// computed from the node's previous use (an ABA). Nothing but the published count reads the depth (PendingCount,
/// spindle.timer.count, diagnostics): the timers themselves are linked and fired correctly, and the owner's next pass
/// publishes the exact count. This pins that bound, which PendingCount's docs state.
/// </summary>
[Collection(SequentialCollection.Name)] // a process-wide hook, and the thread's timer pool
public class InboxDepthAbaTests
{
    [Fact]
    public void AHeadRecycledAndPushedAgainDuringAPush_MiscountsUntilTheNextPass_AndFiresEveryTimer()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        // Pending through the window: the wheel's next pass is planned for it, so a delay inserted meanwhile with a later
        // deadline stays in the inbox (an earlier one would have the wheel run a pass at once, taking the inbox).
        SpindleTask keep = wheel.Delay(TimeSpan.FromMilliseconds(5));
        SpindleTask a = wheel.Delay(TimeSpan.FromMilliseconds(1));
        SpindleTask b = wheel.Delay(TimeSpan.FromMilliseconds(1));
        SpindleTask c = wheel.Delay(TimeSpan.FromMilliseconds(1));
        Assert.Equal(4, wheel.PendingCount);
        object top = c._source!;
        SpindleTask again = default;
        bool ran = false;
        WheelShard.TestHookBeforeInboxCas = head =>
        {
            if (!ReferenceEquals(head, top))
            {
                return;
            }
            WheelShard.TestHookBeforeInboxCas = null;
            ran = true;
            clock.Advance(TimeSpan.FromMilliseconds(1)); // the owner's pass takes the inbox, fires the three, links keep
            a.GetAwaiter().GetResult();
            b.GetAwaiter().GetResult();
            c.GetAwaiter().GetResult(); // its node goes back to this thread's pool last: the next delay rents it
            again = wheel.Delay(TimeSpan.FromMilliseconds(10)); // on top of the inbox again, as a new timer (depth 1)
            Assert.Same(top, again._source);
        };
        SpindleTask d;
        try
        {
            d = wheel.Delay(TimeSpan.FromMilliseconds(10)); // read the head at depth 4; its CAS meets the same node on top
        }
        finally
        {
            WheelShard.TestHookBeforeInboxCas = null;
        }
        Assert.True(ran);
        long during = wheel.PendingCount; // three timers pending (keep linked, two in the inbox); the stale depth counts 4 + 1 for d
        string state = wheel.Describe() + " depth(d)=" + ((TimerNode)d._source!).InboxDepth + " depth(again)=" + ((TimerNode)again._source!).InboxDepth;
        Assert.InRange(during, 1, 3 + 4); // off by at most the depth the inbox had when the producer read its head
        clock.Advance(TimeSpan.FromMilliseconds(4)); // keep is due: the pass takes the inbox and publishes the exact count
        keep.GetAwaiter().GetResult();
        Assert.Equal(2, wheel.PendingCount);
        clock.Advance(TimeSpan.FromMilliseconds(10));
        again.GetAwaiter().GetResult();
        d.GetAwaiter().GetResult();
        Assert.Equal(0, wheel.PendingCount);
        Assert.True(during != 3, "the window did not miscount (" + during + "): the hook missed the ABA; " + state);
    }
}
#endif

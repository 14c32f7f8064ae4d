using System;
using Xunit;

namespace SpindleLib.Tests.Combinators;

#if DEBUG
/// <summary>
/// A delay a WhenAny has just abandoned fires, and the caller reads it anyway (misuse), before the combinator's release
/// looks at the node: the misused read consumes the fired use and recycles the node, which the next delay then rents.
/// The release must end only the use it abandoned: it read the node's version afresh, took the next delay's token for
/// the abandoned one, and consumed (and recycled) the innocent next delay, whose own read then failed.
/// </summary>
[Collection(SequentialCollection.Name)] // a process-wide hook, and the thread's timer pool
public class AbandonedDelayReuseTests
{
    [Fact]
    public void WhenAny_DelayLoserFiredAndMisreadBeforeItsRelease_NeverConsumesTheNodesNextDelay()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        SpindleTask warm = wheel.Delay(1);
        clock.Advance(TimeSpan.FromMilliseconds(1));
        warm.GetAwaiter().GetResult();

        SpindleTask delay = wheel.Delay(TimeSpan.FromSeconds(30));
        SpindleTask innocent = default;
        bool ran = false;
        TimerNode.TestHookBeforeAbandonedRelease = node =>
        {
            TimerNode.TestHookBeforeAbandonedRelease = null;
            ran = true;
            clock.Advance(TimeSpan.FromSeconds(30)); // the abandoned use fires: it has left the wheel
            delay.GetAwaiter().GetResult();          // the misused read consumes it, and recycles the node
            innocent = wheel.Delay(1);               // the next delay rents the same node
            Assert.Same(node, innocent._source);
            clock.Advance(TimeSpan.FromMilliseconds(1)); // and fires
        };
        try
        {
            Assert.Equal(0, SpindleTask.WhenAny(SpindleTask.CompletedTask, delay).GetAwaiter().GetResult());
        }
        finally
        {
            TimerNode.TestHookBeforeAbandonedRelease = null;
        }
        Assert.True(ran);
        Exception? e = Record.Exception(() => innocent.GetAwaiter().GetResult());
        Assert.True(e is null, "the WhenAny's release of its abandoned delay consumed the next delay on the same node: " + e?.Message);
        Assert.Equal(0, wheel.PendingCount);
    }
    /// <summary>As above, for a delay a registered combinator detaches (its other input won after it registered).</summary>
    [Fact]
    public void WhenAny_DelayLoserDetached_FiredAndMisreadBeforeItsRelease_NeverConsumesTheNodesNextDelay()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        SpindleTask warm = wheel.Delay(1);
        clock.Advance(TimeSpan.FromMilliseconds(1));
        warm.GetAwaiter().GetResult();

        var winner = new Promise();
        SpindleTask delay = wheel.Delay(TimeSpan.FromSeconds(30));
        SpindleTask<int> any = SpindleTask.WhenAny(winner.Task, delay);
        SpindleTask innocent = default;
        bool ran = false;
        TimerNode.TestHookBeforeAbandonedRelease = node =>
        {
            TimerNode.TestHookBeforeAbandonedRelease = null;
            ran = true;
            clock.Advance(TimeSpan.FromSeconds(30));
            delay.GetAwaiter().GetResult();
            innocent = wheel.Delay(1);
            Assert.Same(node, innocent._source);
            clock.Advance(TimeSpan.FromMilliseconds(1));
        };
        try
        {
            winner.SetResult();
        }
        finally
        {
            TimerNode.TestHookBeforeAbandonedRelease = null;
        }
        Assert.True(ran);
        Assert.Equal(0, any.GetAwaiter().GetResult());
        Exception? e = Record.Exception(() => innocent.GetAwaiter().GetResult());
        Assert.True(e is null, "the WhenAny's release of its detached delay consumed the next delay on the same node: " + e?.Message);
        Assert.Equal(0, wheel.PendingCount);
    }
    /// <summary>
    /// The wheel disposed just as a WhenAny stops its losing delay (after the stopping CAS, before the node reaches the
    /// cancel inbox): the disposing pass no longer finds the node to release, and the node's later cancel-inbox entry was
    /// never taken by anyone, so the node never went back to its pool.
    /// </summary>
    [Fact]
    public void WhenAny_WheelDisposedAsItsDelayLoserIsStopped_TheNodeStillGoesBackToItsPool()
    {
        var clock = new ManualClock();
        var wheel = new TimerWheel(clock);
        SpindleTask warm = wheel.Delay(1);
        clock.Advance(TimeSpan.FromMilliseconds(1));
        warm.GetAwaiter().GetResult();

        SpindleTask delay = wheel.Delay(TimeSpan.FromSeconds(30));
        var node = (TimerNode)delay._source!;
        bool ran = false;
        TimerNode.TestHookAfterAbandonedSettled = _ =>
        {
            TimerNode.TestHookAfterAbandonedSettled = null;
            ran = true;
            wheel.Dispose();
        };
        try
        {
            Assert.Equal(0, SpindleTask.WhenAny(SpindleTask.CompletedTask, delay).GetAwaiter().GetResult());
        }
        finally
        {
            TimerNode.TestHookAfterAbandonedSettled = null;
        }
        Assert.True(ran);
        Assert.Equal(0, wheel.PendingCount);
        TimerNode? top = ObjectPool<TimerNode>.TryRent();
        if (top is not null)
        {
            ObjectPool<TimerNode>.Return(top);
        }
        Assert.True(ReferenceEquals(node, top), "the stopped node was left in a disposed wheel's cancel inbox and never recycled");
    }
}
#endif

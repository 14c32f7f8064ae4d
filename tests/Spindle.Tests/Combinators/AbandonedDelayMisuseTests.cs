using System;
using System.Threading;
using Xunit;

namespace SpindleLib.Tests.Combinators;

#if DEBUG
/// <summary>
/// A delay given to a WhenAny that lets go of it, read by the caller anyway (misuse) at the moment the combinator lets go
/// (a hook stands in for the caller's thread): the read must be the await-once error, and the node, which is still linked
/// in the wheel, must not go back to its pool before the wheel lets go of it.
/// </summary>
[Collection(SequentialCollection.Name)] // a process-wide hook, and the thread's timer pool
public class AbandonedDelayMisuseTests
{
    [Fact]
    public void WhenAny_AnInputFinished_DelayLoserReadByTheCallerAsItIsLetGo_IsTheAwaitOnceError_AndTheWheelKeepsItsNode()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        SpindleTask warm = wheel.Delay(1);
        clock.Advance(TimeSpan.FromMilliseconds(1));
        warm.GetAwaiter().GetResult();

        SpindleTask delay = wheel.Delay(TimeSpan.FromSeconds(30));
        Exception? misuse = null;
        bool ran = false;
        TimerNode.TestHookAfterAbandonedSettled = _ =>
        {
            TimerNode.TestHookAfterAbandonedSettled = null;
            ran = true;
            misuse = Record.Exception(() => delay.GetAwaiter().GetResult());
        };
        Exception? fromWhenAny;
        try
        {
            fromWhenAny = Record.Exception(() => Assert.Equal(0, SpindleTask.WhenAny(SpindleTask.CompletedTask, delay).GetAwaiter().GetResult()));
        }
        finally
        {
            TimerNode.TestHookAfterAbandonedSettled = null;
        }
        Assert.True(ran);
        Assert.Null(fromWhenAny); // the combinator's own read of the loser never throws the caller's misuse at it
        Assert.IsType<InvalidOperationException>(misuse);

        // The wheel lets go of the node (its cancel inbox) on its next turn; the node is recycled once, and works.
        clock.Advance(TimeSpan.FromMilliseconds(1));
        Assert.Equal(0, wheel.PendingCount);
        var node = (TimerNode)delay._source!;
        TimerNode? top = ObjectPool<TimerNode>.TryRent();
        TimerNode? next = ObjectPool<TimerNode>.TryRent();
        try
        {
            Assert.Same(node, top);
            Assert.NotSame(node, next);
        }
        finally
        {
            if (next is not null)
            {
                ObjectPool<TimerNode>.Return(next);
            }
            if (top is not null)
            {
                ObjectPool<TimerNode>.Return(top);
            }
        }
        SpindleTask again = wheel.Delay(5);
        clock.Advance(TimeSpan.FromMilliseconds(5));
        again.GetAwaiter().GetResult();
        Assert.Equal(0, wheel.PendingCount);
    }
}
#endif

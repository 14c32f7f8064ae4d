using System;
using System.Threading;
using Xunit;

namespace SpindleLib.Tests.Time;

#if DEBUG
/// <summary>
/// A wheel's Dispose cancels the never-due timers it holds weakly, each by its node and the token of its use. A periodic
/// timer whose period is infinite takes back its wait's timer quietly when it is disposed, and that ends the use without
/// a read: the node goes back to the pool and on to another timer. If that happens between Dispose's look at the node
/// and its claim of the use, the claim must fail: the node's next use is somebody else's timer.
/// </summary>
[Collection(SequentialCollection.Name)] // a process-wide hook, and the thread's timer pool
public class NeverDueReuseTests
{
    [Fact]
    public void Dispose_NeverCancelsAnotherWheelsDelay_OnTheNodeOfAPeriodicWaitEndedQuietlyMeanwhile()
    {
        var clock = new ManualClock();
        var first = new TimerWheel(clock);
        using var second = new TimerWheel(clock);
        var periodic = new SpindlePeriodicTimer(Timeout.InfiniteTimeSpan, first);
        SpindleTask<bool> wait = periodic.WaitForNextTickAsync(); // a never-due timer the first wheel holds
        Assert.Equal(1, first.NeverDuePendingCount);
        SpindleTask later = default;
        bool ran = false;
        TimerNode.TestHookBeforeNeverDueClaim = node =>
        {
            TimerNode.TestHookBeforeNeverDueClaim = null;
            ran = true;
            periodic.Dispose();                              // takes the wait's timer back quietly: the node is recycled
            later = second.Delay(TimeSpan.FromMilliseconds(10)); // and rented again, by the other wheel
            Assert.Same(node, later._source);
        };
        try
        {
            first.Dispose();
        }
        finally
        {
            TimerNode.TestHookBeforeNeverDueClaim = null;
        }
        Assert.True(ran);
        Assert.False(wait.GetAwaiter().GetResult()); // the periodic timer's Dispose ended its wait
        Assert.False(later.IsCompleted,
            "the first wheel's Dispose cancelled the other wheel's delay on the node its periodic wait had used: "
            + (later.IsCompleted ? Record.Exception(() => later.GetAwaiter().GetResult())?.Message : ""));
        clock.Advance(TimeSpan.FromMilliseconds(10));
        later.GetAwaiter().GetResult();
        Assert.Equal(0, second.PendingCount);
    }
}
#endif

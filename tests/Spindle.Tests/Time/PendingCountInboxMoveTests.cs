using System;
using System.Threading;

namespace SpindleLib.Tests.Time;

#if DEBUG
/// <summary>
/// PendingCount is the shard's linked count plus its insert inbox's depth, two reads. A pass takes the inbox (an
/// exchange) and then stores the count that holds the timers it took: a reader whose two reads fell around that take
/// found the timers in neither place. The fresh-clone CI at b43d9e0 saw it as 3,983 of 4,000 delays counted right after
/// the last one was started (<c>CancelInboxRaceTests</c>, whose wheel's thread was draining meanwhile). The reads now
/// retry while a pass is between its take and its store, or if one ran between them.
/// </summary>
[Collection(SequentialCollection.Name)] // a process-wide hook
public class PendingCountInboxMoveTests
{
    /// <summary>
    /// Holds the owner's pass between its take of the inbox and its store of the count, and reads the count from another
    /// thread meanwhile: it must count the inbox's timers (before the fix it read 1, the linked delay alone).
    /// </summary>
    [Fact]
    public void ACountReadWhileAPassMovesTheInbox_CountsItsTimers()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        // Its kick runs a pass at once (a manual clock runs it inside the kick), which links it; the wheel's next pass is
        // then planned for it, so the later delays stay in the insert inbox until that pass.
        SpindleTask keep = wheel.Delay(TimeSpan.FromMilliseconds(5));
        SpindleTask a = wheel.Delay(TimeSpan.FromMilliseconds(10));
        SpindleTask b = wheel.Delay(TimeSpan.FromMilliseconds(10));
        SpindleTask c = wheel.Delay(TimeSpan.FromMilliseconds(10));
        Assert.Equal(4, wheel.PendingCount);
        Assert.Contains(" inbox", wheel.Describe());

        long readDuringTheMove = -1;
        int hooked = 0;
        Thread? reader = null;
        int testThread = Environment.CurrentManagedThreadId;
        WheelShard.TestHookInboxTaken = () =>
        {
            if (Environment.CurrentManagedThreadId != testThread)
            {
                return; // another wheel's pass (a manual clock's pass runs on the advancing thread: this one)
            }
            Interlocked.Increment(ref hooked);
            reader = new Thread(() => Volatile.Write(ref readDuringTheMove, wheel.PendingCount)) { IsBackground = true };
            reader.Start();
            // Before the fix the read returns at once, inside the move; after it, it waits for the move to end. Held
            // until the reader has read or a second has passed, so that a reader slow to start cannot read after it.
            long until = Environment.TickCount64 + 1_000;
            while (Volatile.Read(ref readDuringTheMove) == -1 && Environment.TickCount64 < until)
            {
                Thread.Sleep(1);
            }
        };
        try
        {
            clock.Advance(TimeSpan.FromMilliseconds(1)); // a pass: takes the inbox, fires nothing
        }
        finally
        {
            WheelShard.TestHookInboxTaken = null;
        }
        Assert.Equal(1, hooked);
        Assert.True(reader!.Join(TimeSpan.FromSeconds(30)), "the count's read did not return after the pass ended");
        long read = Volatile.Read(ref readDuringTheMove);
        Assert.True(read == 4, $"a read made while the pass moved the inbox's timers into the count returned {read} with four delays pending");
        Assert.Equal(4, wheel.PendingCount);

        clock.Advance(TimeSpan.FromMilliseconds(9));
        keep.GetAwaiter().GetResult();
        a.GetAwaiter().GetResult();
        b.GetAwaiter().GetResult();
        c.GetAwaiter().GetResult();
        Assert.Equal(0, wheel.PendingCount);
    }
}
#endif

using System;
using System.Runtime.CompilerServices;
using System.Threading;

namespace SpindleLib.Tests.Frames;

/// <summary>
/// An await of a loop's frame from another thread goes through the loop's inbox, which the loop drains at the start of
/// a frame into its phases, keeping the drained array for the next posts. The drain clears each entry it takes: an entry
/// left in that array kept what it held (an async method's box, with its locals) reachable until a later post happened to
/// reuse the same place, which a loop that rarely hears from other threads may never do. Mutation testing (mut52) found
/// no test that failed with the clearing removed.
/// </summary>
public sealed class FrameInboxLetGoTests
{
    private sealed class Payload;

    private static async SpindleTask WaitForAFrameThenForever(FrameLoop loop, Payload payload, StrongBox<int> step)
    {
        await loop.NextFrame(); // from another thread: the box itself goes through the inbox
        Volatile.Write(ref step.Value, 1);
        await new Promise().Task; // never completed: the method, and its payload, are then garbage
        GC.KeepAlive(payload);
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    private static WeakReference StartOnAnotherThread(FrameLoop loop, StrongBox<int> step)
    {
        var payload = new Payload();
        var started = TestUtil.RunOnThread(() => WaitForAFrameThenForever(loop, payload, step).Forget());
        Assert.True(started.Wait(TimeSpan.FromSeconds(30)), "the other thread did not start the method");
        return new WeakReference(payload);
    }

    [Fact]
    public void AMethodResumedThroughTheInbox_IsNotKeptByIt_OnceItWaitsOnSomethingUnreachable()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop(); // this thread is the loop's
        var step = new StrongBox<int>();
        WeakReference payload = StartOnAnotherThread(loop, step);
        Assert.Equal(1, loop.QueuedCount);
        loop.RunFrame(); // drains the inbox; the method resumes here and waits on a promise nothing else holds
        Assert.Equal(1, Volatile.Read(ref step.Value));
        Assert.Equal(0, loop.QueuedCount);
        for (int attempt = 0; attempt < 10 && payload.IsAlive; attempt++)
        {
            GC.Collect();
            GC.WaitForPendingFinalizers();
            GC.Collect();
        }
        Assert.False(payload.IsAlive, "the method's box was still reachable after the inbox was drained: its entry was not cleared");
        GC.KeepAlive(loop);
    }
}

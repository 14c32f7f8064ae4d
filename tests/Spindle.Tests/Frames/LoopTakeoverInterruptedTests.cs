using System;
using System.Reflection;
using System.Threading;

namespace SpindleLib.Tests.Frames;

/// <summary>
/// A thread taking the loop over waits for the takeover lock (the previous loop thread may be adding between its steps).
/// If that wait is interrupted (<see cref="Thread.Interrupt"/>), the frame is not run and the loop must be left free:
/// before, the claim was already taken and nothing gave it back, so every later frame was refused as "another thread is
/// running a frame".
/// </summary>
public sealed class LoopTakeoverInterruptedTests
{
    [Fact]
    public void TakeoverInterruptedWhileWaitingForTheLock_LeavesTheLoopFree()
    {
        var loop = new FrameLoop();
        object takeoverLock = typeof(FrameLoop).GetField("_takeoverLock", BindingFlags.NonPublic | BindingFlags.Instance)!.GetValue(loop)!;
        Exception? seen = null;
        bool ranFrame = false;
        var taker = new Thread(() =>
        {
            try
            {
                loop.RunFrame(); // the first frame: this thread takes the loop over, and waits for the lock
                ranFrame = true;
            }
            catch (Exception e)
            {
                seen = e;
            }
        });
        Monitor.Enter(takeoverLock);
        try
        {
            taker.Start();
            // Interrupt throws at the taker's next blocking wait, which is the lock held here (at once if it waits already).
            taker.Interrupt();
            Assert.True(taker.Join(TimeSpan.FromSeconds(30)), "the interrupted taker did not return");
        }
        finally
        {
            Monitor.Exit(takeoverLock);
        }

        Assert.False(ranFrame);
        Assert.IsType<ThreadInterruptedException>(seen);
        Assert.False(loop.IsLoopThread);
        // The loop is free: this thread runs a frame.
        loop.RunFrame();
        Assert.Equal(1, loop.FrameCount);
        Assert.True(loop.IsLoopThread);
    }
}

using System;
using System.Threading;
using System.Threading.Tasks;
using Xunit;

namespace SpindleLib.Tests.Frames;

/// <summary>
/// A game server's connection method (started off the loop, awaiting socket I/O) hands a request to the tick loop and
/// awaits the loop's reply on a promise. The promise is set by loop code, so the connection resumes inline on the loop
/// thread (the README: the awaiting code runs on the thread that completes the source), under the loop's
/// SynchronizationContext, which <c>loop.Run</c> installs there; its next BCL await (<c>socket.ReceiveAsync</c>) captures
/// that context, and every later I/O completion of the connection is posted to the loop. The eighth user's review
/// (/tmp/user8-threads: 1,000 connections, 50 requests each) found 48,999 of 50,000 socket reads resumed on the loop
/// thread. A <c>TaskCompletionSource</c> never does this: the BCL does not run an await's continuation inline on a thread
/// whose SynchronizationContext is not the default one; it queues it to the thread pool. These tests pin the behaviour and
/// the remedy the README names: a promise or signal made with <c>runContinuationsAsynchronously: true</c> resumes the
/// method on a worker, under no context, so its BCL awaits stay off the loop. (A signal here, whose HasWaiter tells when
/// the connection has suspended; the review's program used a promise, which behaves the same.)
/// </summary>
public sealed class LoopResumedMethodContextTests
{
    private sealed class Seen
    {
        public int AfterReplyThread;
        public SynchronizationContext? AfterReplyContext;
        public int AfterBclThread;
        public readonly TaskCompletionSource Replied = new(TaskCreationOptions.RunContinuationsAsynchronously);
    }

    /// <summary>The connection: awaits the loop's reply, then a BCL task that is completed off the loop.</summary>
    private static async SpindleTask Connection(Signal reply, Task io, Seen seen)
    {
        await reply.WaitAsync();
        seen.AfterReplyThread = Environment.CurrentManagedThreadId;
        seen.AfterReplyContext = SynchronizationContext.Current;
        seen.Replied.SetResult();
        await io;
        seen.AfterBclThread = Environment.CurrentManagedThreadId;
    }

    private static async SpindleTask<int> ReplyFromTheLoop(FrameLoop loop, Signal reply)
    {
        await Spindle.SwitchTo(loop);
        int loopThread = Environment.CurrentManagedThreadId;
        reply.Set();
        return loopThread;
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task AMethodResumedByLoopCode_RunsItsLaterBclAwaitsOnTheLoop_UnlessThePromiseRunsContinuationsAsynchronously(bool runContinuationsAsynchronously)
    {
        var loop = new FrameLoop();
        using var stop = new CancellationTokenSource();
        Task run = loop.Run(1000, stop.Token);
        try
        {
            var reply = new Signal(false, runContinuationsAsynchronously); // a promise behaves the same; a signal tells when it is awaited
            var io = new TaskCompletionSource();
            var seen = new Seen();
            SpindleTask connection = Spindle.Run(() => Connection(reply, io.Task, seen)); // suspended on a worker, under no context
            // Registered, not only armed: a set between the two would complete the await before it suspends, and the
            // connection would go on on its worker (failed CI once on the netstandard2.1 build, and once in a helper's run).
            TestUtil.SpinUntil(() => reply.HasRegisteredWaiterForTests);
            int loopThread = await TestUtil.WithTimeout(Spindle.Run(() => ReplyFromTheLoop(loop, reply)).AsTask());
            await TestUtil.WithTimeout(seen.Replied.Task);
            io.SetResult(); // the socket's completion, on a thread that is not the loop's
            await TestUtil.WithTimeout(connection.AsTask());

            if (runContinuationsAsynchronously)
            {
                Assert.NotEqual(loopThread, seen.AfterReplyThread);
                Assert.Null(seen.AfterReplyContext);
                Assert.NotEqual(loopThread, seen.AfterBclThread);
            }
            else
            {
                // Resumed inline by the loop code, under the loop's context: the BCL await after it came back to the loop.
                Assert.Equal(loopThread, seen.AfterReplyThread);
                Assert.Same(loop.SynchronizationContext, seen.AfterReplyContext);
                Assert.Equal(loopThread, seen.AfterBclThread);
            }
        }
        finally
        {
            stop.Cancel();
            await TestUtil.WithTimeout(run.ContinueWith(static _ => { }, TaskScheduler.Default));
        }
    }
}

using System;
using System.Collections.Generic;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Time;

/// <summary>
/// A delay's node keeps two counts in one word (size56: 120 → 112 B): in its low two bits, how many of its two holders
/// (the wheel's owner, the consumer) have let go, an interlocked increment whose second recycles the node; above them,
/// the insert inbox's depth with the node on top, a plain store by the push that publishes the node, read by the pushes
/// above it and by <see cref="TimerWheel.PendingCount"/>. Neither may disturb the other: a count that carried into the
/// depth, or a depth store that dropped a holder's increment, would recycle a node twice or never.
/// </summary>
[Collection(SequentialCollection.Name)] // the thread's timer pool, and a stress test that wants both cores
public class TimerNodeCountWordTests
{
    [Fact]
    public void TheHoldersCount_LeavesTheDepth_AndTheDepthLeavesTheCount()
    {
        using var wheel = new TimerWheel(new ManualClock());
        TimerNode node = TimerNode.Rent(wheel);
        node.InboxDepth = TimerNode.MaxInboxDepth;
        int pooled = ObjectPool<TimerNode>.LocalCount;

        node.ReleaseFromWheel(); // the first holder lets go: not recycled
        Assert.Equal(TimerNode.MaxInboxDepth, node.InboxDepth);
        Assert.Equal(pooled, ObjectPool<TimerNode>.LocalCount);

        node.InboxDepth = 7; // a depth written between the two (never done by the wheel) keeps the first holder's count
        node.ReleaseFromWheel(); // the second recycles it, once
        Assert.Equal(7, node.InboxDepth);
        Assert.Equal(pooled + 1, ObjectPool<TimerNode>.LocalCount);

        // Rented again (this thread's pool hands back what it took last): the depth of the previous use stays for a
        // producer that read the node as its inbox's head then, and the new use's count starts at nothing let go.
        TimerNode again = TimerNode.Rent(wheel);
        Assert.Same(node, again);
        Assert.Equal(7, again.InboxDepth);
        again.ReleaseFromWheel();
        Assert.Equal(pooled, ObjectPool<TimerNode>.LocalCount);
        again.ReleaseFromWheel();
        Assert.Equal(pooled + 1, ObjectPool<TimerNode>.LocalCount);

        // Rented for no wheel, its consumer alone lets go: one release recycles it.
        TimerNode alone = TimerNode.Rent(null);
        Assert.Same(node, alone);
        alone.ReleaseFromWheel();
        Assert.Equal(pooled + 1, ObjectPool<TimerNode>.LocalCount);
        Assert.Equal(7, alone.InboxDepth);
    }

    [Fact]
    public void AnInboxDeeperThanTheWordHolds_StaysAtItsMost()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        SpindleTask keep = wheel.Delay(TimeSpan.FromMilliseconds(5)); // plans the next pass: later delays stay in the inbox
        SpindleTask first = wheel.Delay(TimeSpan.FromMilliseconds(10));
        var top = (TimerNode)first._source!;
        Assert.Equal(2, wheel.PendingCount);
        top.InboxDepth = TimerNode.MaxInboxDepth; // as if the inbox held that many below it
        SpindleTask next = wheel.Delay(TimeSpan.FromMilliseconds(10));
        Assert.Equal(TimerNode.MaxInboxDepth, ((TimerNode)next._source!).InboxDepth);
        top.InboxDepth = 1;
        ((TimerNode)next._source!).InboxDepth = 2;
        Assert.Equal(3, wheel.PendingCount);
        clock.Advance(TimeSpan.FromMilliseconds(10));
        keep.GetAwaiter().GetResult();
        first.GetAwaiter().GetResult();
        next.GetAwaiter().GetResult();
        Assert.Equal(0, wheel.PendingCount);
    }

    private const int PerPusher = 2_000; // delays each of the two pushing threads starts in a round
    private const int ChunkSize = 20; // delays a token

    /// <summary>
    /// Two threads push delays onto one shard's insert inbox at once (each push reads its head's depth, and writes its
    /// own), while the test thread cancels them a token at a time as soon as they are pushed: each cancellation runs the
    /// delay's continuation inline, which reads the delay (the consumer lets go), and the wheel's owner lets go of it in
    /// its next pass, on its own thread. So holders' increments land on nodes that are the inbox's head for a push, and on
    /// nodes recycled and pushed again for another delay. Every delay must run its continuation once and read as
    /// cancelled once, and the wheel must empty; a node recycled twice would serve two delays at once (one of them then
    /// reads a stale token), and one never recycled would keep the wheel's count up.
    /// </summary>
    [Fact]
    public void PushesAndLettingGo_OnOneShardAtOnce_LoseNothing_AndRunNothingTwice()
    {
        using var wheel = new TimerWheel(TimeProvider.System); // one shard, driven by its own thread: its owner
        int rounds = TestUtil.Stress(6);
        for (int round = 0; round < rounds; round++)
        {
            int chunks = PerPusher / ChunkSize;
            var tokens = new CancellationTokenSource[2, chunks];
            for (int side = 0; side < 2; side++)
            {
                for (int chunk = 0; chunk < chunks; chunk++)
                {
                    tokens[side, chunk] = new CancellationTokenSource();
                }
            }
            var ran = new int[2 * PerPusher];
            var canceled = new int[2 * PerPusher];
            var otherOutcome = new string?[2 * PerPusher];
            var pushed = new int[2];
            var errors = new Exception?[2];
            var start = new Barrier(3);
            var pushers = new Thread[2];
            for (int side = 0; side < 2; side++)
            {
                int s = side;
                pushers[s] = new Thread(() =>
                {
                    try
                    {
                        start.SignalAndWait();
                        for (int i = 0; i < PerPusher; i++)
                        {
                            int index = s * PerPusher + i;
                            SpindleTask delay = wheel.Delay(TimeSpan.FromMinutes(10), tokens[s, i / ChunkSize].Token);
                            delay.GetAwaiter().UnsafeOnCompleted(() =>
                            {
                                try
                                {
                                    delay.GetAwaiter().GetResult();
                                    otherOutcome[index] = "completed";
                                }
                                catch (TaskCanceledException)
                                {
                                    Interlocked.Increment(ref canceled[index]);
                                }
                                catch (Exception ex)
                                {
                                    otherOutcome[index] = ex.GetType().Name + ": " + ex.Message;
                                }
                                Interlocked.Increment(ref ran[index]);
                            });
                            Volatile.Write(ref pushed[s], i + 1);
                        }
                    }
                    catch (Exception ex)
                    {
                        errors[s] = ex;
                    }
                })
                { IsBackground = true, Name = "pusher " + s };
                pushers[s].Start();
            }

            // Cancel each side's chunks as soon as they are whole, alternating sides, while the pushes go on.
            start.SignalAndWait();
            var next = new int[2];
            long until = Environment.TickCount64 + 60_000;
            while (next[0] < chunks || next[1] < chunks)
            {
                bool any = false;
                for (int side = 0; side < 2; side++)
                {
                    if (next[side] < chunks && Volatile.Read(ref pushed[side]) >= (next[side] + 1) * ChunkSize)
                    {
                        tokens[side, next[side]++].Cancel();
                        any = true;
                    }
                }
                if (!any)
                {
                    Assert.True(Environment.TickCount64 < until, $"round {round}: the pushers stopped at {pushed[0]} and {pushed[1]}");
                    Thread.SpinWait(20);
                }
            }
            foreach (Thread pusher in pushers)
            {
                Assert.True(pusher.Join(TimeSpan.FromSeconds(60)), $"round {round}: a pusher did not return");
            }
            Assert.Null(errors[0]);
            Assert.Null(errors[1]);

            long pending = -1;
            TestUtil.SpinUntil(
                () => (pending = wheel.PendingCount) == 0,
                () => $"round {round}: {pending} cancelled delays are still counted in the wheel; {wheel.Describe()}",
                seconds: 20);
            var wrong = new List<string>();
            for (int i = 0; i < ran.Length; i++)
            {
                if (Volatile.Read(ref ran[i]) != 1 || canceled[i] != 1)
                {
                    wrong.Add($"delay {i}: continuation ran {ran[i]} times, read as cancelled {canceled[i]} times, else {otherOutcome[i] ?? "nothing"}");
                }
            }
            Assert.True(wrong.Count == 0, $"round {round}: {wrong.Count} delays wrong: " + string.Join("; ", wrong.GetRange(0, Math.Min(10, wrong.Count))));
            Assert.Equal("main: count=0 linked=0", wheel.Describe());
            foreach (CancellationTokenSource cts in tokens)
            {
                cts.Dispose();
            }
            start.Dispose();
        }
    }
}

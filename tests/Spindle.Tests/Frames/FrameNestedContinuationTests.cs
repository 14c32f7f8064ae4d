using System;
using System.Collections.Generic;
using System.Threading;

namespace SpindleLib.Tests.Frames;

/// <summary>
/// Loop code that completes a chain of sources deeper than <see cref="Continuations.MaxInlineDepth"/> (a relay of units,
/// each awaiting the one before's promise; an async call chain 33 deep resumed by a frame wait) stays on the loop thread,
/// in the same frame and phase, in order: past the nesting bound a continuation run inside a loop's step is queued to
/// that step, not to the workers, where it ran off the loop thread, at the same time as the loop, in no fixed order (a
/// twentieth user's review, a lockstep simulation: docs/decisions.md section 48).
/// </summary>
public sealed class FrameNestedContinuationTests
{
    private sealed record Link(int Index, int Thread, long Frame, string? Phase);

    [Theory]
    [InlineData(Continuations.MaxInlineDepth + 1)]
    [InlineData(40)]
    [InlineData(5_000)] // far past the bound: the stack stays bounded
    public void ARelayOfPromises_CompletedFromAPhase_RunsEveryLinkOnTheLoop_InThatFrameAndPhase_InOrder(int length)
    {
        var loop = new FrameLoop();
        loop.RunFrame();
        var chain = new Promise[length + 1];
        for (int i = 0; i <= length; i++)
        {
            chain[i] = new Promise();
        }
        var links = new List<Link>();
        for (int i = 0; i < length; i++)
        {
            RelayLink(i).Forget();
        }
        Kick().Forget();
        long frame = loop.FrameCount + 1;
        loop.RunFrame();
        SpinWait.SpinUntil(() => { lock (links) { return links.Count >= length; } }, TimeSpan.FromSeconds(1)); // a worker's links, before the fix
        Link[] seen;
        lock (links)
        {
            seen = links.ToArray();
        }
        int loopThread = Environment.CurrentManagedThreadId;
        Link? offLoop = Array.Find(seen, l => l.Thread != loopThread);
        Assert.True(offLoop is null, $"link {offLoop?.Index} of {length} ran off the loop thread (frame {offLoop?.Frame}, phase {offLoop?.Phase ?? "none"})");
        Assert.Equal(length, seen.Length);
        for (int i = 0; i < length; i++)
        {
            Assert.Equal(i, seen[i].Index);
            Assert.Equal(frame, seen[i].Frame);
            Assert.Equal("Update", seen[i].Phase);
        }
        Assert.True(chain[length].IsCompleted);

        async SpindleTask Kick()
        {
            await loop.NextFrame();
            chain[0].SetResult();
        }

        async SpindleTask RelayLink(int i)
        {
            await chain[i].Task;
            lock (links)
            {
                links.Add(new Link(i, Environment.CurrentManagedThreadId, loop.FrameCount, loop.CurrentPhase?.Name));
            }
            chain[i + 1].SetResult();
        }
    }

    [Fact]
    public void AnAsyncCallChainDeeperThanTheBound_ResumedByAFrameWait_ContinuesOnTheLoop_InThatFrame()
    {
        const int Depth = 40;
        var loop = new FrameLoop();
        loop.RunFrame();
        var levels = new List<Link>();
        SpindleTask top = Deep(Depth);
        long frame = loop.FrameCount + 1;
        loop.RunFrame();
        SpinWait.SpinUntil(() => top.IsCompleted, TimeSpan.FromSeconds(1));
        Assert.True(top.IsCompleted, "the outermost method did not finish");
        int loopThread = Environment.CurrentManagedThreadId;
        Link? offLoop = levels.Find(l => l.Thread != loopThread);
        Assert.True(offLoop is null, $"level {offLoop?.Index} of {Depth} continued off the loop thread");
        Assert.Equal(Depth, levels.Count);
        for (int i = 0; i < Depth; i++)
        {
            Assert.Equal(i + 1, levels[i].Index); // innermost first
            Assert.Equal(frame, levels[i].Frame);
        }

        async SpindleTask Deep(int depth)
        {
            if (depth == 0)
            {
                await loop.NextFrame();
                return;
            }
            await Deep(depth - 1);
            lock (levels)
            {
                levels.Add(new Link(depth, Environment.CurrentManagedThreadId, loop.FrameCount, loop.CurrentPhase?.Name));
            }
        }
    }

    [Fact]
    public void ARelayPastTheBound_RunsBeforeTheNextItemOfThePhase()
    {
        // The links past the bound run when the item that started the relay returns, before the phase's next item:
        // as close to inline as a bounded stack allows, and the same in every run.
        const int Length = 50;
        var loop = new FrameLoop();
        loop.RunFrame();
        var order = new List<string>();
        var chain = new Promise[Length + 1];
        for (int i = 0; i <= Length; i++)
        {
            chain[i] = new Promise();
        }
        for (int i = 0; i < Length; i++)
        {
            RelayLink(i).Forget();
        }
        First().Forget();
        Second().Forget();
        loop.RunFrame();
        Assert.Equal(Length + 3, order.Count);
        Assert.Equal("first starts", order[0]);
        Assert.Equal("first ends", order[Continuations.MaxInlineDepth + 1]); // the links within the bound ran inside SetResult
        Assert.Equal("link " + (Length - 1), order[Length + 1]);
        Assert.Equal("second", order[Length + 2]);

        async SpindleTask First()
        {
            await loop.NextFrame();
            order.Add("first starts");
            chain[0].SetResult();
            order.Add("first ends");
        }

        async SpindleTask Second()
        {
            await loop.NextFrame();
            order.Add("second");
        }

        async SpindleTask RelayLink(int i)
        {
            await chain[i].Task;
            order.Add("link " + i);
            chain[i + 1].SetResult();
        }
    }
    [Fact]
    public void LoopCodeBlockedOnATaskThatADeepRelayCompletes_RunsTheRestOfTheRelay_AndReturns()
    {
        // Sync over async on the loop thread: the links past the bound wait for the blocked item to return, so the
        // blocking wait runs them itself (before, a worker ran them); without that it would wait for ever.
        const int Length = 40;
        var loop = new FrameLoop();
        var chain = new Promise[Length + 1];
        for (int i = 0; i <= Length; i++)
        {
            chain[i] = new Promise();
        }
        int loopThread = 0;
        int offLoop = 0;
        bool returned = false;
        var frames = new Thread(() =>
        {
            loopThread = Environment.CurrentManagedThreadId;
            loop.RunFrame();
            for (int i = 0; i < Length; i++)
            {
                RelayLink(i).Forget();
            }
            Blocker().Forget();
            loop.RunFrame();
        }) { IsBackground = true, Name = "loop blocked on a relay" };
        frames.Start();
        Assert.True(frames.Join(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "the loop thread stayed blocked on the relay's last promise");
        Assert.True(returned);
        Assert.Equal(0, offLoop);

        async SpindleTask Blocker()
        {
            await loop.NextFrame();
            chain[0].SetResult();
            chain[Length].Task.GetAwaiter().GetResult(); // blocks: the tail is past the bound
            returned = true;
        }

        async SpindleTask RelayLink(int i)
        {
            await chain[i].Task;
            if (Environment.CurrentManagedThreadId != loopThread)
            {
                Interlocked.Increment(ref offLoop);
            }
            chain[i + 1].SetResult();
        }
    }
}

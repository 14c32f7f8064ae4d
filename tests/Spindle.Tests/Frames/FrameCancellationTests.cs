using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Frames;

/// <summary>
/// Cancelling an await completes it at once, inside the call that cancels, not at the next frame (UniTask notices only
/// then, its issue 378); and leaves nothing behind: no queued continuation, no timer, no registration.
/// </summary>
public sealed class FrameCancellationTests
{
    public static TheoryData<string> Kinds() => new()
    {
        "Yield", "YieldEarlyUpdate", "NextFrame", "DelayFrame0", "DelayFrame1", "DelayFrame", "Delay", "DelayUnscaled",
        "DelayInfinite", "WaitUntil", "WaitWhile", "WaitUntilState", "AsSpindleTask",
    };

    private static async SpindleTask Wait(FrameLoop loop, string kind, CancellationToken token)
    {
        switch (kind)
        {
            case "Yield": await loop.Yield(token); break;
            case "YieldEarlyUpdate": await loop.Yield(loop.EarlyUpdate, token); break;
            case "NextFrame": await loop.NextFrame(token); break;
            case "DelayFrame0": await loop.DelayFrame(0, token); break;
            case "DelayFrame1": await loop.DelayFrame(1, token); break;
            case "DelayFrame": await loop.DelayFrame(50, token); break;
            case "Delay": await loop.Delay(TimeSpan.FromSeconds(5), token); break;
            case "DelayUnscaled": await loop.Delay(TimeSpan.FromSeconds(5), FrameTimeKind.Unscaled, token); break;
            case "DelayInfinite": await loop.Delay(Timeout.InfiniteTimeSpan, token); break;
            case "WaitUntil": await loop.WaitUntil(static () => false, token); break;
            case "WaitWhile": await loop.WaitWhile(static () => true, token); break;
            case "WaitUntilState": await loop.WaitUntil(loop, static l => l.FrameCount < 0, loop.LateUpdate, token); break;
            case "AsSpindleTask": await loop.NextFrame(token).AsSpindleTask(); break;
            default: throw new ArgumentException(kind);
        }
    }

    [Theory]
    [MemberData(nameof(Kinds))]
    public void Cancel_CompletesTheAwaitAtOnce_AndLeavesNothingBehind(string kind)
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        using var cts = new CancellationTokenSource();
        string? resumed = null;
        OperationCanceledException? caught = null;
        async SpindleTask Run()
        {
            // Start inside Update, so Yield and NextFrame are still pending after this frame.
            await loop.Yield(loop.Update);
            try
            {
                await Wait(loop, kind, cts.Token);
            }
            catch (OperationCanceledException e)
            {
                caught = e;
                resumed = loop.Where();
            }
        }

        SpindleTask task = Run();
        loop.RunFrame(); // frame 2: the wait starts in Update
        Assert.False(task.IsCompleted);

        cts.Cancel();

        // At once: no frame has run since.
        Assert.True(task.IsCompleted);
        Assert.Equal("2/-", resumed);
        Assert.Equal(cts.Token, caught!.CancellationToken);
        task.GetAwaiter().GetResult();

        // The loop lets go of what it held at its next frame: queue entries and timers.
        loop.RunFrame();
        Assert.Equal(0, loop.QueuedCount);
        Assert.Equal(0, loop.PendingTimers);
    }

    [Theory]
    [MemberData(nameof(Kinds))]
    public void AlreadyCancelledToken_CompletesAsCancelledWithoutQueueing(string kind)
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        var token = new CancellationToken(canceled: true);
        SpindleTask task = Wait(loop, kind, token);
        Assert.True(task.IsCompleted);
        Assert.Equal(SpindleTaskStatus.Canceled, task.Status);
        Assert.ThrowsAny<OperationCanceledException>(() => task.GetAwaiter().GetResult());
        Assert.Equal(0, loop.QueuedCount);
        Assert.Equal(0, loop.PendingTimers);
    }

    [Theory]
    [MemberData(nameof(Kinds))]
    public void CompletedWithAToken_ThenCancelled_LeavesNothingToFire(string kind)
    {
        if (kind is "DelayInfinite" or "WaitUntil" or "WaitWhile" or "WaitUntilState")
        {
            return; // these never complete on their own
        }
        FrameLoop loop = FrameUtil.NewBoundLoop();
        using var cts = new CancellationTokenSource();
        SpindleTask task = Wait(loop, kind, cts.Token);
        loop.RunUntil(() => task.IsCompleted, maxFrames: 1000);
        task.GetAwaiter().GetResult();
        cts.Cancel(); // nothing is registered any more: nothing runs
        loop.RunFrame();
        Assert.Equal(0, loop.QueuedCount);
        Assert.Equal(0, loop.PendingTimers);
    }

    [Fact]
    public void Cancel_FromAnotherThread_RunsTheAwaitingCodeOnThatThreadAtOnce()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        using var cts = new CancellationTokenSource();
        int resumedOn = 0;
        async SpindleTask Run()
        {
            try
            {
                await loop.DelayFrame(1000, cts.Token);
            }
            catch (OperationCanceledException)
            {
                resumedOn = Environment.CurrentManagedThreadId;
            }
        }

        SpindleTask task = Run();
        int canceller = 0;
        TestUtil.RunOnThread(() =>
        {
            canceller = Environment.CurrentManagedThreadId;
            cts.Cancel();
            Assert.True(task.IsCompleted);
        }).Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds));
        Assert.True(task.IsCompleted);
        Assert.Equal(canceller, resumedOn);
        loop.RunFrame();
        Assert.Equal(0, loop.PendingTimers);
    }

    [Fact]
    public void Cancel_AfterTheDelayExpiredButBeforeItsPhase_StillCompletesAtOnce()
    {
        // The delay falls due at the start of frame 2 and waits for Update; EarlyUpdate cancels it first.
        FrameLoop loop = FrameUtil.NewBoundLoop(); // 10 ms frames, loop time 10 ms
        using var cts = new CancellationTokenSource();
        string? outcome = null;
        async SpindleTask Delayed()
        {
            try
            {
                await loop.Delay(TimeSpan.FromMilliseconds(10), cts.Token);
                outcome = "resumed " + loop.Where();
            }
            catch (OperationCanceledException)
            {
                outcome = "cancelled " + loop.Where();
            }
        }

        async SpindleTask Canceller()
        {
            await loop.Yield(loop.EarlyUpdate);
            cts.Cancel();
            Assert.Equal("cancelled 2/EarlyUpdate", outcome);
        }

        SpindleTask delayed = Delayed();
        SpindleTask canceller = Canceller();
        loop.RunFrame();
        canceller.GetAwaiter().GetResult();
        delayed.GetAwaiter().GetResult();
        Assert.Equal("cancelled 2/EarlyUpdate", outcome);
        loop.RunFrame();
        Assert.Equal(0, loop.QueuedCount);
        Assert.Equal(0, loop.PendingTimers);
    }

    [Fact]
    public async Task SwitchTo_FromAnotherThreadWhileTheLoopIsIdle_CancelsAtOnce()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        using var cts = new CancellationTokenSource();
        Task<bool> handOff = Task.Run(async () =>
        {
            try
            {
                await loop.SwitchTo(cts.Token);
                return true;
            }
            catch (OperationCanceledException)
            {
                return false;
            }
        });
        TestUtil.SpinUntil(() => loop.QueuedCount == 1);
        cts.Cancel();
        Assert.False(await TestUtil.WithTimeout(handOff));
        loop.RunFrame();
        Assert.Equal(0, loop.QueuedCount);
    }

    [Fact]
    public async Task CancelRacingCompletion_EndsEachWaitExactlyOnce()
    {
        // The loop's frame and a canceller on another thread race for the same waits: each ends once, one way or the other.
        const int Waits = 200;
        int rounds = TestUtil.Stress(100);
        FrameLoop? loop = null;
        CancellationTokenSource[] sources = new CancellationTokenSource[Waits];
        int[] endings = new int[Waits];
        int completed = 0, cancelled = 0;

        async SpindleTask Wait(int i, CancellationToken token)
        {
            try
            {
                await loop!.NextFrame(token);
                Interlocked.Increment(ref completed);
            }
            catch (OperationCanceledException)
            {
                Interlocked.Increment(ref cancelled);
            }
            Interlocked.Increment(ref endings[i]);
        }

        int ran = await TestUtil.WithTimeout(Race.Run(rounds,
            before: _ =>
            {
                loop = FrameUtil.NewBoundLoop();
                Array.Clear(endings);
                for (int i = 0; i < Waits; i++)
                {
                    sources[i] = new CancellationTokenSource();
                    Wait(i, sources[i].Token).Forget();
                }
            },
            after: _ =>
            {
                loop!.RunFrame(); // whatever is left
                foreach (int e in endings)
                {
                    Assert.Equal(1, e);
                }
                Assert.Equal(0, loop.QueuedCount);
                foreach (CancellationTokenSource s in sources)
                {
                    s.Dispose();
                }
            },
            _ => loop!.RunFrame(),
            _ =>
            {
                foreach (CancellationTokenSource s in sources)
                {
                    s.Cancel();
                }
            }), TestUtil.StressTimeout(TestUtil.DefaultTimeoutSeconds));
        Assert.Equal((long)ran * Waits, completed + cancelled);
    }
}

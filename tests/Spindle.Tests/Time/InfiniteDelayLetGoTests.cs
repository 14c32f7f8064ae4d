using System;
using System.Runtime.CompilerServices;
using System.Threading;

namespace SpindleLib.Tests.Time;

/// <summary>
/// An infinite delay nothing can end but its wheel's Dispose holds nothing that keeps its awaiting code alive, as
/// <c>Task.Delay(-1)</c> holds nothing: a server session abandoned while it awaits one (or a WhenAny over one and
/// something else, which then lets go of it) is collected with its state machine and its locals. A wheel made with the
/// constructor kept such a delay in its list of timers that are never due until it was disposed, pinning the session
/// (found by a review of the defects left alone, decisions 23). Sequential: a test running beside it that keeps old task
/// copies over pooled timer nodes can keep a session alive (a review saw it fail once so).
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class InfiniteDelayLetGoTests
{
    private sealed class Session
    {
        public readonly byte[] State = new byte[1024];
    }

    /// <summary>Collects until <paramref name="weak"/> is gone, a few times at most (a GC may keep it one round).</summary>
    private static bool IsCollected(WeakReference weak)
    {
        for (int attempt = 0; attempt < 5 && weak.IsAlive; attempt++)
        {
            GC.Collect();
            GC.WaitForPendingFinalizers();
            GC.Collect();
        }
        return !weak.IsAlive;
    }

    /// <summary>The session is collected, and the wheel holds no timer that is never due.</summary>
    private static void AssertLetGo(TimerWheel wheel, WeakReference session)
    {
        bool collected = IsCollected(session);
        int held = wheel.NeverDuePendingCount;
        Assert.True(collected && held == 0,
            $"the wheel still holds the abandoned session awaiting its infinite delay: collected {collected}, never-due timers pending {held}");
    }

    private static async SpindleTask Idle(Session session, SpindleTask forever)
    {
        await forever;
        GC.KeepAlive(session);
    }

    /// <summary>Starts a session awaiting <paramref name="forever"/>, drops it, and returns a weak reference to its state.</summary>
    [MethodImpl(MethodImplOptions.NoInlining)]
    private static WeakReference AbandonSessionAwaiting(Func<SpindleTask> forever)
    {
        var session = new Session();
        SpindleTask running = Idle(session, forever());
        Assert.False(running.IsCompleted);
        return new WeakReference(session);
    }

    [Fact]
    public void AnUncancelableInfiniteDelay_OnAConstructedWheel_DoesNotPinTheSessionAwaitingIt()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        WeakReference session = AbandonSessionAwaiting(() => wheel.Delay(Timeout.InfiniteTimeSpan));
        AssertLetGo(wheel, session);
    }

    [Fact]
    public void AnUncancelableInfiniteDelayInMilliseconds_OnAConstructedWheel_DoesNotPinTheSessionAwaitingIt()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        WeakReference session = AbandonSessionAwaiting(() => wheel.Delay(Timeout.Infinite));
        AssertLetGo(wheel, session);
    }

    /// <summary>
    /// A session with a token of its own that nobody cancels, dropped with it: as with <c>Task.Delay(-1, token)</c>, the
    /// token's source holds the delay, and once that is garbage too nothing else may.
    /// </summary>
    [Fact]
    public void AnInfiniteDelayOnADroppedToken_OnAConstructedWheel_DoesNotPinTheSessionAwaitingIt()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        WeakReference session = AbandonSessionAwaiting(() => wheel.Delay(Timeout.InfiniteTimeSpan, new CancellationTokenSource().Token));
        AssertLetGo(wheel, session);
    }

    [Fact]
    public void AnUncancelableInfiniteDelay_OnTheDefaultWheel_DoesNotPinTheSessionAwaitingIt()
    {
        WeakReference session = AbandonSessionAwaiting(() => Spindle.Delay(Timeout.InfiniteTimeSpan));
        Assert.True(IsCollected(session), "the default wheel still holds the abandoned session awaiting its infinite delay");
    }

    [Fact]
    public void AnUncancelableInfiniteLoopDelay_DoesNotPinTheSessionAwaitingIt()
    {
        var loop = new FrameLoop();
        loop.RunFrame();
        WeakReference session = AbandonSessionAwaiting(() => loop.Delay(Timeout.InfiniteTimeSpan));
        loop.RunFrame();
        Assert.True(IsCollected(session), "the frame loop still holds the abandoned session awaiting its infinite delay");
    }

    private static async SpindleTask IdleOrWork(Session session, SpindleTask forever, Promise work, Promise next)
    {
        await SpindleTask.WhenAny(forever, work.Task); // the work wins, and the race lets go of the infinite delay
        await next.Task;
        GC.KeepAlive(session);
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    private static WeakReference AbandonSessionAfterARace(TimerWheel wheel)
    {
        var session = new Session();
        var work = new Promise();
        var next = new Promise(); // dropped with the session: nothing will ever complete it
        SpindleTask running = IdleOrWork(session, wheel.Delay(Timeout.InfiniteTimeSpan), work, next);
        work.SetResult();
        Assert.False(running.IsCompleted);
        return new WeakReference(session);
    }

    /// <summary>A WhenAny that another input won lets go of the infinite delay: nothing of the race stays in the wheel.</summary>
    [Fact]
    public void WhenAny_LetsGoOfALosingInfiniteDelay_AndTheWheelKeepsNothingOfIt()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        WeakReference session = AbandonSessionAfterARace(wheel);
        Assert.Equal(0, wheel.NeverDuePendingCount);
        Assert.Equal(0, wheel.PendingCount);
        Assert.True(IsCollected(session), "the abandoned session is still held after its race let go of the infinite delay");
    }

    /// <summary>Still true after the change: a cancelable infinite delay ends with its token, and leaves nothing behind.</summary>
    [Fact]
    public void ACancelableInfiniteDelay_StillEndsWithItsToken()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var cts = new CancellationTokenSource();
        SpindleTask forever = wheel.Delay(Timeout.InfiniteTimeSpan, cts.Token);
        clock.Advance(TimeSpan.FromDays(100));
        Assert.False(forever.IsCompleted);
        cts.Cancel();
        Assert.Equal(SpindleTaskStatus.Canceled, forever.Status);
        Assert.ThrowsAny<OperationCanceledException>(() => forever.GetAwaiter().GetResult());
        Assert.Equal(0, wheel.NeverDuePendingCount);
        Assert.Equal(0, wheel.PendingCount);
    }

    /// <summary>
    /// Held weakly, an infinite delay somebody still awaits is cancelled by Dispose as before, however many others were
    /// abandoned and collected around it (the list sweeps them as it fills).
    /// </summary>
    [Fact]
    public void Dispose_StillCancelsTheInfiniteDelaysSomebodyAwaits_AmongManyAbandoned()
    {
        var clock = new ManualClock();
        var wheel = new TimerWheel(clock);
        var held = new SpindleTask[3];
        var sessions = new WeakReference[300];
        for (int i = 0; i < sessions.Length; i++)
        {
            sessions[i] = AbandonSessionAwaiting(() => wheel.Delay(Timeout.InfiniteTimeSpan));
            if (i % 100 == 0)
            {
                held[i / 100] = wheel.Delay(Timeout.InfiniteTimeSpan);
            }
        }
        Assert.All(sessions, s => Assert.True(IsCollected(s)));
        Assert.Equal(3, wheel.NeverDuePendingCount);
        wheel.Dispose();
        foreach (SpindleTask delay in held)
        {
            Assert.Equal(SpindleTaskStatus.Canceled, delay.Status);
            OperationCanceledException e = Assert.ThrowsAny<OperationCanceledException>(() => delay.GetAwaiter().GetResult());
            Assert.Contains("disposed", e.Message, StringComparison.Ordinal);
        }
        Assert.Equal(0, wheel.NeverDuePendingCount);
    }

    /// <summary>
    /// Timer nodes are pooled: the node of an infinite delay that ended goes on to other timers, and the wheel's weak
    /// entry for it must never act on them. Here it becomes another wheel's finite delay, which the first wheel's Dispose
    /// leaves alone.
    /// </summary>
    [Fact]
    public void Dispose_LeavesAloneTheLaterUseOfAnInfiniteDelaysPooledNode()
    {
        var clock = new ManualClock();
        var first = new TimerWheel(clock);
        using var second = new TimerWheel(clock);
        using var cts = new CancellationTokenSource();
        SpindleTask forever = first.Delay(Timeout.InfiniteTimeSpan, cts.Token);
        object node = forever._source!;
        cts.Cancel();
        Assert.ThrowsAny<OperationCanceledException>(() => forever.GetAwaiter().GetResult()); // recycled: back to this thread's pool
        SpindleTask later = second.Delay(TimeSpan.FromMilliseconds(10));
        Assert.Same(node, later._source); // the same node, now a finite delay of the other wheel
        SpindleTask laterForever = second.Delay(Timeout.InfiniteTimeSpan);
        first.Dispose();
        Assert.False(later.IsCompleted, "the first wheel's Dispose cancelled a later use of its infinite delay's node");
        Assert.False(laterForever.IsCompleted, "the first wheel's Dispose cancelled the other wheel's infinite delay");
        clock.Advance(TimeSpan.FromMilliseconds(10));
        later.GetAwaiter().GetResult();
        second.Dispose();
        Assert.ThrowsAny<OperationCanceledException>(() => laterForever.GetAwaiter().GetResult());
    }

    private static async SpindleTask Ticks(Session session, SpindlePeriodicTimer timer)
    {
        while (await timer.WaitForNextTickAsync())
        {
        }
        GC.KeepAlive(session);
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    private static WeakReference AbandonSessionOnATimerThatNeverTicks(TimerWheel wheel)
    {
        var session = new Session();
        var timer = new SpindlePeriodicTimer(Timeout.InfiniteTimeSpan, wheel); // dropped undisposed with the session
        SpindleTask running = Ticks(session, timer);
        Assert.False(running.IsCompleted);
        return new WeakReference(session);
    }

    /// <summary>A periodic timer whose period is infinite waits on a tick that is never due: the same hold, the same fix.</summary>
    [Fact]
    public void APeriodicTimerThatNeverTicks_DroppedWithItsSession_IsNotPinnedByTheWheel()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        WeakReference session = AbandonSessionOnATimerThatNeverTicks(wheel);
        AssertLetGo(wheel, session);
    }
}

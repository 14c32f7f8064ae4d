using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Time;

/// <summary>
/// A session that waits for its next message or its heartbeat tick: <c>WhenAny(timer.WaitForNextTickAsync(),
/// inbox.WaitAsync())</c>, in a loop. The README promises that WhenAny lets go of its losers as soon as the race is
/// decided, as <c>Task.WhenAny</c> removes its continuations (a losing delay leaves its wheel, a losing signal wait ends
/// and a later set is kept). Found by the journey review of 2026-11-29: a losing tick wait was not let go of. It stayed in
/// the wheel, the next WaitForNextTickAsync threw "A wait on this SpindlePeriodicTimer is already pending", and when
/// its tick came the combinator that had lost read it: the heartbeat was lost.
/// </summary>
public sealed class PeriodicTimerLetGoTests
{
    private static readonly TimeSpan s_period = TimeSpan.FromMilliseconds(10);

    public static TheoryData<string> LetGoKinds => new() { "WhenAny", "WhenAnySettledAtTheCall", "WithTimeout", "WithCancellation" };

    /// <summary>Starts a tick wait and lets it lose the way <paramref name="kind"/> does, before its tick.</summary>
    private static async Task LoseATickWait(SpindlePeriodicTimer timer, string kind)
    {
        var other = new ManualClock();
        using var otherWheel = new TimerWheel(other);
        using var cts = new CancellationTokenSource();
        var inbox = new Signal();
        switch (kind)
        {
            case "WhenAny":
            {
                SpindleTask<int> race = SpindleTask.WhenAny(timer.WaitForNextTickAsync(CancellationToken.None), inbox.WaitAsync(CancellationToken.None));
                inbox.Set(); // a message wins
                Assert.Equal(1, await TestUtil.WithTimeout(race));
                break;
            }
            case "WhenAnySettledAtTheCall":
                inbox.Set();
                Assert.Equal(1, await TestUtil.WithTimeout(SpindleTask.WhenAny(timer.WaitForNextTickAsync(CancellationToken.None), inbox.WaitAsync(CancellationToken.None))));
                break;
            case "WithTimeout":
            {
                SpindleTask<bool> timed = timer.WaitForNextTickAsync(CancellationToken.None).WithTimeout(TimeSpan.FromMilliseconds(1), otherWheel, CancellationToken.None);
                other.Advance(TimeSpan.FromMilliseconds(1));
                await Assert.ThrowsAsync<TimeoutException>(() => TestUtil.WithTimeout(timed));
                break;
            }
            default:
            {
                SpindleTask<bool> cancellable = timer.WaitForNextTickAsync(CancellationToken.None).WithCancellation(cts.Token);
                cts.Cancel();
                await Assert.ThrowsAnyAsync<OperationCanceledException>(() => TestUtil.WithTimeout(cancellable));
                break;
            }
        }
    }

    [Theory]
    [MemberData(nameof(LetGoKinds))]
    public async Task LosingTickWait_LeavesTheWheel_AndTheNextWaitCanStart(string kind)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var timer = new SpindlePeriodicTimer(s_period, wheel);

        await LoseATickWait(timer, kind);
        Assert.True(wheel.PendingCount == 0, "the losing tick wait is still in the wheel (" + wheel.PendingCount + ")");
        SpindleTask<bool> next = timer.WaitForNextTickAsync(CancellationToken.None); // threw "already pending" before
        Assert.False(next.IsCompleted);
        clock.Advance(s_period);
        Assert.True(await TestUtil.WithTimeout(next));
    }

    [Theory]
    [MemberData(nameof(LetGoKinds))]
    public async Task LosingTickWait_DoesNotTakeTheTick(string kind)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var timer = new SpindlePeriodicTimer(s_period, wheel);

        await LoseATickWait(timer, kind);
        clock.Advance(s_period); // tick 1 comes while nobody waits: it is remembered
        SpindleTask<bool> next = timer.WaitForNextTickAsync(CancellationToken.None);
        Assert.True(next.IsCompleted, "tick 1 was taken by the race that had let go of its wait");
        Assert.True(await next);
    }

    [Fact]
    public async Task SessionLoop_MessagesAndHeartbeats_EveryTickAndEveryMessageCounted()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var timer = new SpindlePeriodicTimer(s_period, wheel);
        var inbox = new Signal();
        int messages = 0, ticks = 0;
        for (int i = 0; i < 200; i++)
        {
            SpindleTask<int> race = SpindleTask.WhenAny(timer.WaitForNextTickAsync(CancellationToken.None), inbox.WaitAsync(CancellationToken.None));
            if (i % 3 == 0)
            {
                clock.Advance(s_period);
            }
            else
            {
                inbox.Set();
            }
            if (await TestUtil.WithTimeout(race) == 0)
            {
                ticks++;
            }
            else
            {
                messages++;
            }
        }
        Assert.Equal(67, ticks);
        Assert.Equal(133, messages);
        Assert.Equal(0, wheel.PendingCount);
    }

    /// <summary>
    /// The tick and the message race on two threads, so the let-go meets a firing node (its claim taken just after the
    /// node fired, or by the node first). Each round must end, the timer must stay usable (a wait started right after the
    /// race may find the lost one still being read for an instant, as documented, and is retried), and no tick may be
    /// delivered twice: the ticks the session saw never exceed the ticks that passed. The wheel ends empty.
    /// </summary>
    [Fact]
    public async Task TickAndMessageRacingOnTwoThreads_TheTimerStaysUsable()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var timer = new SpindlePeriodicTimer(s_period, wheel);
        var inbox = new Signal();
        int rounds = TestUtil.Stress(500), ticksSeen = 0;
        using var start = new Barrier(2);
        Task ticker = TestUtil.RunOnThread(() =>
        {
            for (int i = 0; i < rounds; i++)
            {
                start.SignalAndWait();
                clock.Advance(s_period);
                start.SignalAndWait();
            }
        }, "ticker");
        for (int i = 0; i < rounds; i++)
        {
            SpindleTask<bool> tick = default;
            Assert.True(SpinWait.SpinUntil(() =>
            {
                try
                {
                    tick = timer.WaitForNextTickAsync(CancellationToken.None);
                    return true;
                }
                catch (InvalidOperationException)
                {
                    return false; // the previous round's losing wait is still being read
                }
            }, TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "round " + i + ": the timer stayed busy");
            SpindleTask<int> race = SpindleTask.WhenAny(tick, inbox.WaitAsync(CancellationToken.None));
            start.SignalAndWait();
            inbox.Set();
            if (await TestUtil.WithTimeout(race) == 0)
            {
                ticksSeen++;
                inbox.Reset(); // the message lost: drop it, the next round sends another
            }
            start.SignalAndWait();
        }
        await TestUtil.WithTimeout(ticker);
        Assert.True(ticksSeen <= rounds, ticksSeen + " ticks seen in " + rounds + " periods");
        Assert.True(SpinWait.SpinUntil(() => wheel.PendingCount == 0, TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "the wheel kept " + wheel.PendingCount);
    }
}

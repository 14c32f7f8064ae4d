using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Scenarios;

/// <summary>
/// A server's sessions at the moment a message arrives just as the session is closed or its idle timeout fires: one
/// thread sets every session's signal while another cancels them (or advances the clock past all their timeouts). The
/// README's promise: a set is delivered or kept, never lost. So for each session, either its wait took the set, or the
/// wait ended without it and the signal is still set for the next wait. Counts only.
/// </summary>
public sealed class SessionRaceScenarioTests
{
    private const int Sessions = 4000;
    private static readonly TimeSpan s_idle = TimeSpan.FromSeconds(1);

    private enum Outcome { Pending, Delivered, TimedOut, Cancelled, Other }

    private static async SpindleTask<Outcome> TimedWait(Signal inbox, TimerWheel wheel, CancellationToken token)
    {
        try
        {
            return await inbox.WaitAsync(s_idle, wheel, token) ? Outcome.Delivered : Outcome.TimedOut;
        }
        catch (OperationCanceledException)
        {
            return Outcome.Cancelled;
        }
    }

    private static async SpindleTask<Outcome> RacedWait(Signal inbox, TimerWheel wheel, CancellationToken token)
    {
        try
        {
            int winner = await SpindleTask.WhenAny(inbox.WaitAsync(token), wheel.Delay(s_idle, token));
            return winner == 0 ? Outcome.Delivered : Outcome.TimedOut;
        }
        catch (OperationCanceledException)
        {
            return Outcome.Cancelled;
        }
    }

    private static async Task Race(Func<Signal, TimerWheel, CancellationToken, SpindleTask<Outcome>> wait, bool byClock, bool asynchronous)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var inboxes = new Signal[Sessions];
        var closers = new CancellationTokenSource[Sessions];
        var outcomes = new Outcome[Sessions];
        var waits = new Task[Sessions];
        for (int i = 0; i < Sessions; i++)
        {
            inboxes[i] = new Signal(false, asynchronous);
            closers[i] = new CancellationTokenSource();
            int id = i;
            SpindleTask<Outcome> pending = wait(inboxes[i], wheel, closers[i].Token);
            waits[i] = Record(pending, id);
        }

        async Task Record(SpindleTask<Outcome> pending, int id) => outcomes[id] = await pending;

        using var start = new Barrier(2);
        Task setter = TestUtil.RunOnThread(() =>
        {
            start.SignalAndWait();
            for (int i = 0; i < Sessions; i++)
            {
                inboxes[i].Set();
            }
        }, "setter");
        Task ender = TestUtil.RunOnThread(() =>
        {
            start.SignalAndWait();
            if (byClock)
            {
                clock.Advance(s_idle);
            }
            else
            {
                for (int i = 0; i < Sessions; i++)
                {
                    closers[i].Cancel();
                }
            }
        }, "ender");
        await TestUtil.WithTimeout(Task.WhenAll(setter, ender, Task.WhenAll(waits)));

        int delivered = 0, kept = 0;
        for (int i = 0; i < Sessions; i++)
        {
            if (outcomes[i] == Outcome.Delivered)
            {
                delivered++;
                Assert.False(inboxes[i].IsSet, "session " + i + ": its set was delivered and is still set");
            }
            else
            {
                Assert.True(outcomes[i] == (byClock ? Outcome.TimedOut : Outcome.Cancelled), "session " + i + " ended " + outcomes[i]);
                Assert.True(inboxes[i].IsSet, "session " + i + ": its wait ended " + outcomes[i] + " and the set made meanwhile was lost (" + delivered + " delivered so far)");
                kept++;
            }
            Assert.False(inboxes[i].HasWaiter, "session " + i + " still has a waiter");
        }
        Assert.Equal(Sessions, delivered + kept);
        Assert.Equal(0, wheel.PendingCount);
    }

    [Theory]
    [InlineData(false, false)]
    [InlineData(false, true)]
    [InlineData(true, false)]
    [InlineData(true, true)]
    public Task SignalWaitWithTimeout_SetRacingTheEnd_IsDeliveredOrKept(bool byClock, bool asynchronous)
        => Race(TimedWait, byClock, asynchronous);

    [Theory]
    [InlineData(false, false)]
    [InlineData(false, true)]
    [InlineData(true, false)]
    [InlineData(true, true)]
    public Task WhenAnyOfWaitAndDelay_SetRacingTheEnd_IsDeliveredOrKept(bool byClock, bool asynchronous)
        => Race(RacedWait, byClock, asynchronous);
}

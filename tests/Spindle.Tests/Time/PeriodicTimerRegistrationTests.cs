using System;
using System.Threading;

namespace SpindleLib.Tests.Time;

/// <summary>
/// A tick wait given a token registers a callback on it, and drops that registration when the wait is read
/// (<c>CancellationRegistrations.Drop</c>): it unregisters the callback, waits for one already running on another thread,
/// and clears the field that held it. A periodic timer lives as long as its user's loop, one wait after another, each
/// perhaps with a token of its own (a request's), so what a read leaves behind stays for the timer's life. Mutation
/// testing (mut54) found that no test failed when the drop kept the registration in its field (CR1: the token's source,
/// which the registration reaches, stayed alive as long as the timer) or returned without waiting for a callback in
/// flight (CR2: the old wait's callback, still running, cancelled the next wait, which had no token at all).
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class PeriodicTimerRegistrationTests
{
    private static readonly TimeSpan s_period = TimeSpan.FromMilliseconds(10);

    /// <summary>A wait with a token, ticked and read: the timer, still in use, keeps nothing of the token's source.</summary>
    [Fact]
    public void AReadTickWait_LetsGoOfItsTokensSource_WhileTheTimerLivesOn()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var timer = new SpindlePeriodicTimer(s_period, wheel);
        Assert.False(TestUtil.StaysAliveWhileItsThreadIdles(() =>
        {
            var cts = new CancellationTokenSource();
            SpindleTask<bool> wait = timer.WaitForNextTickAsync(cts.Token);
            clock.Advance(s_period);
            Assert.True(wait.IsCompleted, "the tick wait did not complete when the clock reached its tick");
            Assert.True(wait.GetAwaiter().GetResult());
            return new WeakReference(cts);
        }), "the token's source of a wait read long ago stays alive, held by the periodic timer");
        // The timer is still in use: its next wait, with no token, is pending until its tick.
        SpindleTask<bool> next = timer.WaitForNextTickAsync();
        Assert.False(next.IsCompleted);
        clock.Advance(s_period);
        Assert.True(next.GetAwaiter().GetResult());
    }

#if DEBUG // the source's test hook exists only in a Debug build of the library
    /// <summary>
    /// The token is cancelled on another thread as the tick comes: the cancellation's callback has started (a Debug hook
    /// holds it there) when the tick completes the wait. Reading the wait must wait for that callback to return, so that
    /// it finds the wait over and leaves alone the next wait, started with no token right after the read.
    /// </summary>
    [Fact]
    public void ATokenCallbackStillRunning_WhenTheWaitIsRead_LeavesTheNextWaitAlone()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var timer = new SpindlePeriodicTimer(s_period, wheel);
        using var cts = new CancellationTokenSource();
        using var entered = new ManualResetEventSlim();
        using var nextStarted = new ManualResetEventSlim();
        Thread? canceller = null;
        PeriodicTimerSource.TestHookOnCanceled = _ =>
        {
            if (Thread.CurrentThread == canceller)
            {
                entered.Set();
                // The read waits for this callback; without that wait the next wait starts now. A bound, not a deadlock,
                // when the read does wait (as it must).
                nextStarted.Wait(TimeSpan.FromSeconds(1));
            }
        };
        try
        {
            SpindleTask<bool> wait = timer.WaitForNextTickAsync(cts.Token);
            var cancelling = new Thread(() => cts.Cancel()) { IsBackground = true, Name = "PeriodicTimerRegistrationTests canceller" };
            canceller = cancelling;
            cancelling.Start();
            Assert.True(entered.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "the token's callback did not start");
            clock.Advance(s_period); // the tick claims the wait first: the callback, once it goes on, finds it over
            Assert.True(wait.IsCompleted, "the tick did not complete the wait");
            Assert.True(wait.GetAwaiter().GetResult(), "the tick's wait did not return true");
            SpindleTask<bool> next = timer.WaitForNextTickAsync();
            nextStarted.Set();
            Assert.True(cancelling.Join(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "the cancellation did not return");
            Assert.False(next.IsCompleted, "the next wait, which has no token, was ended by the old wait's token callback");
            clock.Advance(s_period);
            Assert.True(next.GetAwaiter().GetResult());
        }
        finally
        {
            PeriodicTimerSource.TestHookOnCanceled = null;
        }
    }
#endif
}

using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Time;

/// <summary>
/// A wheel on a foreign <see cref="TimeProvider"/> takes a fire of the provider's timer before the time it was armed for,
/// within the fraction of a millisecond truncation drops, with no kick since, as proof that the provider truncates due
/// times to whole milliseconds, and from then on rounds every relative due time up (see <c>TruncatingProviderTests</c>).
/// A kick (an earlier delay, the first cancellation since a pass) sets a flag, then changes the timer to fire at once;
/// the fire that follows takes the flag, so that it is not judged. Found by a review (2026-11-29): when another fire (the
/// timer's own, late) takes the flag first, and its pass arms the timer for less than a millisecond, the kick's fire
/// lands after that arming with no flag left, inside the window, and was taken for truncation, for good, though the
/// provider never truncated. Every later pass was then up to a millisecond late, and a whole step late on a clock
/// advanced in coarse steps. Both orders are driven here on a <see cref="DeferredClock"/>, whose timer fires exactly on
/// time (late only when the test says so): the kick's <see cref="ITimer.Change"/> held while the other fire runs, and
/// the kick's fire dispatched before the other fire's pass but run after it (a <see cref="System.Threading.Timer"/>
/// runs callbacks on pool threads, and a dispatched one is not withdrawn by a later change).
/// </summary>
public class KickTakenForTruncationTests
{
    private static TimeSpan Ms(double ms) => TimeSpan.FromMilliseconds(ms);

    private static readonly TimeSpan Bound = TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds);

    /// <summary>
    /// The review's interleaving: a producer's kick has set its flag and not yet changed the timer; the timer fires for
    /// its own (late) arming, takes the flag, and its pass arms the timer for the 0.7 ms left to the next tick; then the
    /// kick's change fires the timer at once.
    /// </summary>
    [Fact]
    public void AKickHeldBeforeItsChange_WhileALateFireTakesItsFlag_IsNotTakenForATimerThatTruncates()
    {
        var clock = new DeferredClock();
        using var wheel = new TimerWheel(clock);
        clock.Advance(Ms(0.5));
        SpindleTask first = wheel.Delay(10); // due at 11 ms
        SpindleTask next = wheel.Delay(11); // due at 12 ms
        Run(clock.RunDue); // the first delay's kick: the pass arms the timer for 10.5 ms, to 11 ms

        Thread? producer = null;
        using var entered = new ManualResetEventSlim();
        using var release = new ManualResetEventSlim();
        int held = 0;
        clock.BeforeChange = due =>
        {
            if (Thread.CurrentThread == producer && due == TimeSpan.Zero && Interlocked.Exchange(ref held, 1) == 0)
            {
                entered.Set(); // the kick's flag is set; its change waits here
                Assert.True(release.Wait(Bound), "the test never released the kick");
            }
        };
        SpindleTask earlier = default;
        Task producing = TestUtil.RunOnThread(() =>
        {
            producer = Thread.CurrentThread;
            earlier = wheel.Delay(5); // due at 6 ms, before the plan: kicks
        }, "kicking producer");
        Assert.True(entered.Wait(Bound), "the earlier delay never kicked the provider's timer");

        Run(() => clock.Advance(Ms(10.8))); // 11.3 ms: the timer fires late for 11 ms; its pass arms it for 0.7 ms
        Assert.Equal(SpindleTaskStatus.Succeeded, first.Status);
        release.Set();
        Assert.True(producing.Wait(Bound), "the producer's delay never returned");
        producing.GetAwaiter().GetResult();
        Assert.Equal(SpindleTaskStatus.Succeeded, earlier.Status); // no kick lost: the pass saw its push
        clock.BeforeChange = null;
        Run(clock.RunDue); // the kick's fire, at 11.3 ms

        AssertNotRoundedUp(clock, wheel, next);
    }

    /// <summary>
    /// The other order: the timer's own late fire is dispatched, a cancellation kicks and its fire is dispatched too, and
    /// the first fire runs (taking the flag, arming the timer for the 0.7 ms left) before the kick's fire runs.
    /// </summary>
    [Fact]
    public void AKicksFireRunAfterTheLateFireBeforeItTookItsFlag_IsNotTakenForATimerThatTruncates()
    {
        var clock = new DeferredClock();
        using var wheel = new TimerWheel(clock);
        clock.Advance(Ms(0.5));
        SpindleTask first = wheel.Delay(10); // due at 11 ms
        SpindleTask next = wheel.Delay(11); // due at 12 ms
        using var cts = new CancellationTokenSource();
        SpindleTask cancelled = wheel.Delay(20, cts.Token); // due at 21 ms: no kick
        Run(clock.RunDue); // the first delay's kick: the pass arms the timer for 10.5 ms, to 11 ms

        clock.MoveWithoutFiring(Ms(10.8)); // 11.3 ms
        Action late = clock.TakeDue() ?? throw new InvalidOperationException("the timer armed for 11 ms was not due at 11.3 ms");
        cts.Cancel(); // the first cancellation since the pass: kicks
        Assert.Equal(SpindleTaskStatus.Canceled, cancelled.Status);
        Action kick = clock.TakeDue() ?? throw new InvalidOperationException("the cancellation did not kick the provider's timer");
        Run(late); // takes the kick's flag; its pass fires the first delay and arms the timer for 0.7 ms, to 12 ms
        Assert.Equal(SpindleTaskStatus.Succeeded, first.Status);
        Run(kick); // the kick's fire, at 11.3 ms
        Run(clock.RunDue);

        AssertNotRoundedUp(clock, wheel, next);
    }

    /// <summary>
    /// With the clock at 11.3 ms and <paramref name="next"/> due at 12 ms: checks that the wheel still arms its timer for
    /// the fraction of a millisecond a due time has, by a delay started at a fraction and one coarse step of 16.6 ms.
    /// </summary>
    private static void AssertNotRoundedUp(DeferredClock clock, TimerWheel wheel, SpindleTask next)
    {
        Run(() => clock.Advance(Ms(1.2))); // 12.5 ms
        Assert.Equal(SpindleTaskStatus.Succeeded, next.Status);
        next.GetAwaiter().GetResult();

        SpindleTask stepped = wheel.Delay(16); // started at 12.5 ms: due at 29 ms (28.5 rounded up)
        Run(clock.RunDue); // its kick: the pass arms the timer for 16.5 ms
        Run(() => clock.Advance(Ms(16.6))); // one coarse step: the clock reads 29.1 ms
        Assert.True(stepped.IsCompleted,
            "a 16 ms delay due at 29 ms had not fired with the clock at 29.1 ms: the kick's fire was taken for a timer that truncates, every due time is now rounded up to a whole millisecond, and the pass falls in the next step, 16.6 ms later");
        stepped.GetAwaiter().GetResult();
        Assert.Equal(0, wheel.PendingCount);
    }

    private static void Run(Action action) => TestUtil.AssertReturns(action, "the clock's fire never returned");
}

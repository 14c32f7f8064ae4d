using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Time;

/// <summary>
/// A wheel on a foreign <see cref="TimeProvider"/> took a fire of the provider's timer before the time it was armed for,
/// within the fraction of a millisecond truncation drops, with no kick since, as proof that the provider truncates due
/// times to whole milliseconds, and from then on rounded every relative due time up (see <c>TruncatingProviderTests</c>).
/// A kick (an earlier delay, the first cancellation since a pass) set a flag, then changed the timer to fire at once; the
/// fire that followed took the flag, so that it was not judged. Found by a review (2026-11-29): when another fire (the
/// timer's own, late) took the flag first, and its pass armed the timer for less than a millisecond, the kick's fire
/// landed after that arming with no flag left, inside the window, and was taken for truncation, for good, though the
/// provider never truncated. Every later pass was then up to a millisecond late, and a whole step late on a clock
/// advanced in coarse steps. Driven here on a <see cref="DeferredClock"/>, whose timers fire exactly on time (late only
/// when the test says so), in each order: the kick's <see cref="ITimer.Change"/> held while the other fire runs; the
/// kick's fire dispatched before the other fire's pass but run after it (a <see cref="System.Threading.Timer"/> runs
/// callbacks on pool threads, and a change does not withdraw one already dispatched); and two kicks, one of each, whose
/// fires run one after the other (which a second opinion from the next fire would take for truncation). A fire that looks
/// early is now confirmed by a probe: a second timer of the provider that nothing else changes.
/// </summary>
public class KickTakenForTruncationTests
{
    private static TimeSpan Ms(double ms) => TimeSpan.FromMilliseconds(ms);

    private static readonly TimeSpan Bound = TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds);

    /// <summary>
    /// The review's interleaving: a producer's kick has begun (before the fix: set its flag) and not yet changed the timer;
    /// the timer fires for its own (late) arming (before the fix: taking the flag), and its pass arms the timer for the
    /// 0.7 ms left to the next tick; then the kick's change fires the timer at once.
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

        using var kick = new HeldKick(clock);
        SpindleTask earlier = default;
        kick.Start(() => earlier = wheel.Delay(5)); // due at 6 ms, before the plan: kicks

        Run(() => clock.Advance(Ms(10.8))); // 11.3 ms: the timer fires late for 11 ms; its pass arms it for 0.7 ms
        Assert.Equal(SpindleTaskStatus.Succeeded, first.Status);
        kick.Release();
        Assert.Equal(SpindleTaskStatus.Succeeded, earlier.Status); // no kick lost: the pass saw its push
        Run(clock.RunDue); // the kick's fire, at 11.3 ms

        AssertNotRoundedUp(clock, wheel, next, nextOnTime: true);
    }

    /// <summary>
    /// The other order: the timer's own late fire is dispatched, a cancellation kicks and its fire is dispatched too, and
    /// the first fire runs (before the fix: taking the kick's flag) and arms the timer for the 0.7 ms left before the
    /// kick's fire runs.
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
        Run(late); // its pass fires the first delay and arms the timer for 0.7 ms, to 12 ms
        Assert.Equal(SpindleTaskStatus.Succeeded, first.Status);
        Run(kick); // the kick's fire, at 11.3 ms
        Run(clock.RunDue);

        AssertNotRoundedUp(clock, wheel, next, nextOnTime: true);
    }

    /// <summary>
    /// Both orders at once, with two kicks: a producer's earlier delay has begun its kick and not yet changed the timer;
    /// the timer's own late fire is dispatched; a cancellation kicks and its fire is dispatched too; the late fire runs
    /// (before the fix: taking the one flag both kicks set) and its pass arms the timer for 0.7 ms; then the producer's
    /// change lands, and the two kicks' fires run one after the other: two fires in a row that look early.
    /// </summary>
    [Fact]
    public void TwoKicksWhoseFlagALateFireTook_AreNotTakenForATimerThatTruncates()
    {
        var clock = new DeferredClock();
        using var wheel = new TimerWheel(clock);
        clock.Advance(Ms(0.5));
        SpindleTask first = wheel.Delay(10); // due at 11 ms
        SpindleTask next = wheel.Delay(11); // due at 12 ms
        using var cts = new CancellationTokenSource();
        SpindleTask cancelled = wheel.Delay(20, cts.Token); // due at 21 ms: no kick
        Run(clock.RunDue); // the first delay's kick: the pass arms the timer for 10.5 ms, to 11 ms

        using var kick = new HeldKick(clock);
        SpindleTask earlier = default;
        kick.Start(() => earlier = wheel.Delay(5)); // due at 6 ms, before the plan: kicks

        clock.MoveWithoutFiring(Ms(10.8)); // 11.3 ms
        Action late = clock.TakeDue() ?? throw new InvalidOperationException("the timer armed for 11 ms was not due at 11.3 ms");
        cts.Cancel(); // the first cancellation since the pass: kicks
        Action cancelKick = clock.TakeDue() ?? throw new InvalidOperationException("the cancellation did not kick the provider's timer");
        Run(late); // its pass fires the first delay and the earlier one, and arms the timer for 0.7 ms, to 12 ms
        Assert.Equal(SpindleTaskStatus.Succeeded, first.Status);
        kick.Release();
        Assert.Equal(SpindleTaskStatus.Succeeded, earlier.Status);
        Action producerKick = clock.TakeDue() ?? throw new InvalidOperationException("the producer's kick did not change the timer");
        Run(cancelKick); // at 11.3 ms
        Run(producerKick); // at 11.3 ms, right after
        Run(clock.RunDue);

        AssertNotRoundedUp(clock, wheel, next, nextOnTime: false);
        Assert.Equal(SpindleTaskStatus.Canceled, cancelled.Status);
    }

    /// <summary>
    /// With the clock at 11.3 ms and <paramref name="next"/> due at 12 ms: checks that the wheel still arms its timer for
    /// the fraction of a millisecond a due time has, by a delay started at a fraction and one coarse step of 16.6 ms; and,
    /// when <paramref name="nextOnTime"/>, that the pass for <paramref name="next"/> runs when the clock reaches 12 ms (one
    /// fire that only looks early costs nothing; two in a row make the passes planned until the probe's verdict up to a
    /// millisecond late, within the wheel's contract).
    /// </summary>
    private static void AssertNotRoundedUp(DeferredClock clock, TimerWheel wheel, SpindleTask next, bool nextOnTime)
    {
        bool firedAt12 = true;
        if (nextOnTime)
        {
            Run(() => clock.Advance(Ms(0.7))); // 12 ms
            firedAt12 = next.IsCompleted; // checked last: the lasting harm below is the one to report first
        }
        Run(() => clock.Advance(Ms(nextOnTime ? 0.5 : 1.2))); // 12.5 ms
        Assert.Equal(SpindleTaskStatus.Succeeded, next.Status);
        next.GetAwaiter().GetResult();

        SpindleTask stepped = wheel.Delay(16); // started at 12.5 ms: due at 29 ms (28.5 rounded up)
        Run(clock.RunDue); // its kick: the pass arms the timer for 16.5 ms
        Run(() => clock.Advance(Ms(16.6))); // one coarse step: the clock reads 29.1 ms
        Assert.True(stepped.IsCompleted,
            "a 16 ms delay due at 29 ms had not fired with the clock at 29.1 ms: the kick's fire was taken for a timer that truncates, every due time is now rounded up to a whole millisecond, and the pass falls in the next step, 16.6 ms later");
        stepped.GetAwaiter().GetResult();
        Assert.Equal(0, wheel.PendingCount);
        Assert.True(firedAt12,
            "the delay due at 12 ms had not fired with the clock at 12 ms: a fire that only looked early had the pass for the 0.7 ms left rounded up to a whole millisecond");
    }

    /// <summary>
    /// Holds the first change to a due time of zero (a kick) that <see cref="Producer"/> makes to the clock's timers, after
    /// everything the kick does before it, until <see cref="Release"/>.
    /// </summary>
    private sealed class HeldKick : IDisposable
    {
        private readonly DeferredClock _clock;
        private readonly ManualResetEventSlim _entered = new();
        private readonly ManualResetEventSlim _released = new();
        private int _held;

        public HeldKick(DeferredClock clock)
        {
            _clock = clock;
            clock.BeforeChange = due =>
            {
                if (Thread.CurrentThread == _producer && due == TimeSpan.Zero && Interlocked.Exchange(ref _held, 1) == 0)
                {
                    _entered.Set();
                    if (!_released.Wait(Bound))
                    {
                        throw new TimeoutException("the test never released the kick");
                    }
                }
            };
        }

        private volatile Thread? _producer;
        private Task? _producing;

        /// <summary>
        /// Runs <paramref name="produce"/> (a delay that kicks) on a thread of its own, and returns once its kick is held
        /// before the provider's timer is changed.
        /// </summary>
        public void Start(Action produce)
        {
            _producing = TestUtil.RunOnThread(() =>
            {
                _producer = Thread.CurrentThread;
                produce();
            }, "kicking producer");
            Assert.True(_entered.Wait(Bound), "the producer's delay never kicked the provider's timer");
        }

        /// <summary>Lets the kick change the timer, and waits for the producer to return.</summary>
        public void Release()
        {
            _released.Set();
            Task producing = _producing ?? throw new InvalidOperationException("Start was not called");
            Assert.True(producing.Wait(Bound), "the producer's delay never returned");
            producing.GetAwaiter().GetResult();
            _clock.BeforeChange = null;
        }

        public void Dispose()
        {
            _released.Set();
            _clock.BeforeChange = null;
            _entered.Dispose();
            _released.Dispose();
        }
    }

    private static void Run(Action action) => TestUtil.AssertReturns(action, "the clock's fire never returned");
}

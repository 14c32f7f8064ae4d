using System;
using System.Diagnostics;
using System.Threading;

namespace SpindleLib;

/// <summary>
/// A periodic timer on a <see cref="TimerWheel"/>, awaited with <see cref="WaitForNextTickAsync"/>: the Spindle
/// counterpart of the BCL's <c>PeriodicTimer</c>, whose wait allocates nothing in steady state.
/// </summary>
/// <example>
/// <code>
/// using var timer = new SpindlePeriodicTimer(TimeSpan.FromSeconds(1));
/// while (await timer.WaitForNextTickAsync(token))
/// {
///     Poll();
/// }
/// </code>
/// </example>
/// <remarks>
/// <para><b>Ticks</b> fall at exact multiples of <see cref="Period"/> from the timer's start, however long the consumer
/// takes between waits, so there is no drift: tick k is due at the start (the moment the timer was created, rounded up
/// to the wheel's 1 ms tick) plus k × <see cref="Period"/> rounded up to the millisecond, so never early. A tick
/// that happens while nobody waits is remembered: the next wait returns <see langword="true"/> at once. Several missed
/// ticks count as one, and the wait after that waits for the next tick still to come.</para>
/// <para><b>Cost.</b> A wait that has to wait arms one pooled timer node in the wheel for the next tick's deadline;
/// between waits nothing is in the wheel, so an idle periodic timer costs nothing.</para>
/// <para><b>Dispose</b> stops the timer: a wait pending at that moment completes with <see langword="false"/>, and so
/// does every wait started after it (at once; as canceled if its token is already cancelled), as with the BCL's <c>PeriodicTimer</c>, so a loop
/// whose timer is disposed from another thread between two waits (a hosted service's <c>StopAsync</c>) ends. A timer
/// whose <see cref="TimerWheel"/> has been disposed, but which was not disposed itself, answers its pending wait with
/// <see langword="false"/> and throws <see cref="ObjectDisposedException"/> for later ones: a wheel disposed under a
/// timer still in use is a mistake the user did not ask for.</para>
/// <para><b>Racing a tick.</b> A wait may race others (<c>WhenAny(timer.WaitForNextTickAsync(), inbox.WaitAsync())</c>
/// for a session's heartbeat or its next message). A wait that loses, or that <c>WithTimeout</c> or
/// <c>WithCancellation</c> ends, is let go of as a cancelled one is: it leaves the wheel, the next wait may start at
/// once, and its tick is not taken (the next wait returns at once once it has passed), unless that tick was being
/// delivered at the very instant the race was decided.</para>
/// <para><b>Thread-safety.</b> One consumer at a time: a second wait while the first one's result has not been read
/// throws. <see cref="Dispose"/> may be called from any thread, at any time, including while a wait is pending.</para>
/// </remarks>
[DebuggerDisplay("Period = {Period}")]
public sealed class SpindlePeriodicTimer : IDisposable
{
    private readonly PeriodicTimerSource _source;

    /// <summary>Creates a periodic timer that ticks every <paramref name="period"/>, starting now.</summary>
    /// <param name="period">
    /// The time between ticks: at least 1 ms (the wheel's tick), at most <see cref="TimerWheel.MaxDelay"/>; or
    /// <see cref="Timeout.InfiniteTimeSpan"/>, as the BCL's <c>PeriodicTimer</c> accepts it, for a timer that never ticks:
    /// a wait on it ends only with its token, <see cref="Dispose"/>, or the wheel's disposal.
    /// </param>
    /// <param name="timers">The wheel that drives it; null for <see cref="TimerWheel.Default"/>. Pass a wheel on a <see cref="ManualClock"/> to test deterministically.</param>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="period"/> is shorter than 1 ms (zero or negative, other than <see cref="Timeout.InfiniteTimeSpan"/>) or longer than <see cref="TimerWheel.MaxDelay"/>.</exception>
    /// <exception cref="ObjectDisposedException"><paramref name="timers"/> has been disposed.</exception>
    /// <exception cref="InvalidOperationException">A timer is needed on a wheel of <see cref="TimeProvider.System"/> (<see cref="TimerWheel.Default"/> among them), the workers had not started (this starts them, as its timer thread hands the resumed code to them), and the SPINDLE_WORKERS environment variable is invalid (see <see cref="Spindle.WorkerCount"/>).</exception>
    public SpindlePeriodicTimer(TimeSpan period, TimerWheel? timers = null)
    {
        if ((period < TimeSpan.FromMilliseconds(1) || period > TimerWheel.MaxDelay) && period != Timeout.InfiniteTimeSpan)
        {
            throw new ArgumentOutOfRangeException(nameof(period), period,
                "A period must be between 1 ms (the timer wheel's tick) and TimerWheel.MaxDelay (about 49.7 days), or Timeout.InfiniteTimeSpan for a timer that never ticks.");
        }
        _source = new PeriodicTimerSource(TimerWheel.ForTimeouts(timers), period);
    }

    /// <summary>The time between ticks (<see cref="Timeout.InfiniteTimeSpan"/>: the timer never ticks).</summary>
    public TimeSpan Period => _source.Period;

    /// <summary>
    /// Waits for the next tick: <see langword="true"/> when it comes (at once if a tick was missed since the last wait),
    /// <see langword="false"/> if the timer is disposed while this wait is pending, or was disposed before it (at once).
    /// Allocates nothing in steady state.
    /// </summary>
    /// <param name="cancellationToken">
    /// Cancels this wait: it completes as canceled, its timer node leaves the wheel at once, and the tick it was waiting
    /// for is not lost (the next wait returns <see langword="true"/> at once if it has passed). A token already cancelled
    /// cancels at once, and nothing is registered. The cancellation is kept as a value: its
    /// <see cref="System.Threading.Tasks.TaskCanceledException"/> is built only by a read that throws it, so an await with
    /// <see cref="SpindleTask{T}.SuppressCancellationThrow"/> builds none.
    /// </param>
    /// <exception cref="ObjectDisposedException">The timer's wheel has been disposed (and the timer was not).</exception>
    /// <exception cref="InvalidOperationException">Another wait is pending: only one consumer may wait at a time.</exception>
    public SpindleTask<bool> WaitForNextTickAsync(CancellationToken cancellationToken = default) => _source.Wait(cancellationToken);

    /// <summary>
    /// Stops the timer. A wait pending at this moment completes with <see langword="false"/>, and a later call to
    /// <see cref="WaitForNextTickAsync"/> returns <see langword="false"/> at once. Calling it again does nothing.
    /// </summary>
    public void Dispose() => _source.Dispose();
}

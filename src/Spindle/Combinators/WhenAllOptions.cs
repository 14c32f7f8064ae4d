using System;
using System.Threading;

namespace SpindleLib;

/// <summary>
/// Options for <c>SpindleTask.WhenAll</c>: what the BCL's WhenAll does not offer. Every option is off in
/// <c>default(WhenAllOptions)</c>, which behaves as the overloads without options do.
/// </summary>
/// <example><c>await SpindleTask.WhenAll(tasks, new WhenAllOptions { AggregateExceptions = true, Timeout = TimeSpan.FromSeconds(5) }, token);</c></example>
/// <remarks>
/// A value type, so passing options allocates nothing. New options are added as further properties whose default means
/// "off", so code written against this version keeps its meaning.
/// </remarks>
public readonly struct WhenAllOptions
{
    private readonly TimeSpan? _timeout;

    /// <summary>
    /// When true, a WhenAll whose inputs failed throws an <see cref="AggregateException"/> holding every failed input's
    /// exception, in input order (cancellations included), instead of only the lowest index's fault. If every failure is a
    /// cancellation, the combined task is cancelled (it throws the first <see cref="OperationCanceledException"/>), as
    /// without this option. Default: false, the BCL's behaviour for <c>await Task.WhenAll</c>.
    /// </summary>
    /// <remarks>
    /// As the BCL's <c>Task.WhenAll(...).Exception</c>, a <see cref="System.Threading.Tasks.Task"/> input that faulted with
    /// several exceptions (itself a <c>Task.WhenAll</c>) gives each of them, in its order. One difference: cancellations
    /// are included (the BCL's leaves them out once an input faulted). A ValueTask input gives the one exception its await
    /// throws.
    /// </remarks>
    public bool AggregateExceptions { get; init; }

    /// <summary>
    /// How long the WhenAll may wait: if the inputs have not all finished by then, the combined task fails with a
    /// <see cref="TimeoutException"/>. Default: null, no timeout (as is <see cref="System.Threading.Timeout.InfiniteTimeSpan"/>).
    /// </summary>
    /// <remarks>
    /// <para>As with the overloads' <see cref="CancellationToken"/>, the timeout ends the wait, not the inputs: the wait
    /// lets go of them as a WhenAny lets go of its losers (a promise's task can be awaited again or the promise reset, a signal's wait ends), and a
    /// failure among them that nobody will read goes to <see cref="Spindle.UnobservedException"/>, once. When
    /// the inputs finish first, the timer is cancelled at once (it never fires; it leaves the wheel then on the worker that
    /// armed it, else at the wheel's next pass). The deadline is rounded
    /// up to the wheel's 1 ms tick, so it never fires early. <see cref="TimeSpan.Zero"/> times out at once unless every
    /// input has already finished, or the token is already cancelled (then it is canceled, as the token is checked
    /// first, and no timer is armed). Inputs that have all finished at the call need no timer and never time out.</para>
    /// <para>The timer runs on <see cref="Timers"/>. The timer is pooled, so a timeout adds no allocation in steady
    /// state (a timeout that fires allocates its exception).</para>
    /// <para>WhenAny takes no options: to time it out, time out its task, <c>SpindleTask.WhenAny(a, b).WithTimeout(t)</c>
    /// (see <see cref="SpindleTask.WithTimeout(TimeSpan, TimerWheel, CancellationToken)"/>).</para>
    /// </remarks>
    /// <exception cref="ArgumentOutOfRangeException">The value is negative (other than <see cref="System.Threading.Timeout.InfiniteTimeSpan"/>) or longer than <see cref="TimerWheel.MaxDelay"/>.</exception>
    public TimeSpan? Timeout
    {
        get => _timeout;
        init
        {
            if (value is { } timeout)
            {
                TimerWheel.IsFiniteTimeout(timeout, nameof(Timeout));
            }
            _timeout = value;
        }
    }

    /// <summary>
    /// The wheel that times <see cref="Timeout"/>; null (the default) for <see cref="TimerWheel.Default"/>. Pass a wheel on
    /// a <see cref="ManualClock"/> to test timeouts deterministically. A disposed wheel makes the WhenAll call throw
    /// <see cref="ObjectDisposedException"/> when it needs a timer.
    /// </summary>
    public TimerWheel? Timers { get; init; }

    /// <summary>
    /// A single task's timeout (<c>WithTimeout</c>, <c>TryWithTimeout</c>) as WhenAll options: checked, on
    /// <paramref name="timers"/> (null: <see cref="TimerWheel.Default"/>); none for <see cref="System.Threading.Timeout.InfiniteTimeSpan"/>.
    /// </summary>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="timeout"/> is negative (other than <see cref="System.Threading.Timeout.InfiniteTimeSpan"/>) or longer than <see cref="TimerWheel.MaxDelay"/>.</exception>
    /// <exception cref="ObjectDisposedException"><paramref name="timers"/> has been disposed.</exception>
    internal static WhenAllOptions ForTimeout(TimeSpan timeout, TimerWheel? timers, string paramName)
    {
        TimerWheel? wheel = TimerWheel.ForTimeout(timeout, timers, paramName);
        return wheel is null ? default : new WhenAllOptions { Timeout = timeout, Timers = wheel };
    }

    /// <summary>The finite timeout, if any: null for none (null or infinite).</summary>
    internal TimeSpan? FiniteTimeout => _timeout is { } t && t != System.Threading.Timeout.InfiniteTimeSpan ? t : null;
}

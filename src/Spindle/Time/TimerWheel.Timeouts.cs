using System;
using System.Globalization;
using System.Threading;

namespace SpindleLib;

/// <summary>What timeouts and periodic timers need from the wheel, kept apart from the wheel's own machinery.</summary>
public sealed partial class TimerWheel
{
    /// <summary>
    /// The wheel a timeout or periodic timer runs on: <paramref name="timers"/>, or <see cref="Default"/>, with the
    /// workers its timer thread hands continuations to started (<see cref="EnsureWorkers"/>).
    /// </summary>
    /// <exception cref="ObjectDisposedException"><paramref name="timers"/> has been disposed.</exception>
    /// <exception cref="InvalidOperationException">The workers had not started and SPINDLE_WORKERS is invalid.</exception>
    internal static TimerWheel ForTimeouts(TimerWheel? timers)
    {
        TimerWheel wheel = NotDisposed(timers);
        wheel.EnsureWorkers();
        return wheel;
    }

    /// <summary><paramref name="timers"/>, or <see cref="Default"/>, checked.</summary>
    /// <exception cref="ObjectDisposedException"><paramref name="timers"/> has been disposed.</exception>
    private static TimerWheel NotDisposed(TimerWheel? timers)
    {
        TimerWheel wheel = timers ?? Default;
        if (wheel._disposed)
        {
            ThrowDisposed();
        }
        return wheel;
    }

    /// <summary>
    /// Checks a timeout: <see cref="Timeout.InfiniteTimeSpan"/>, or zero to <see cref="MaxDelay"/>. Returns false for
    /// the infinite one (no timeout at all).
    /// </summary>
    /// <exception cref="ArgumentOutOfRangeException">Any other value.</exception>
    internal static bool IsFiniteTimeout(TimeSpan timeout, string paramName)
        => IsFiniteSpan(timeout, paramName, "A timeout", "for no timeout");

    /// <summary>
    /// Checks a delay (a parameter named <c>delay</c>): <see cref="Timeout.InfiniteTimeSpan"/>, or zero to
    /// <see cref="MaxDelay"/>. Returns false for the infinite one (a wait that only its token ends). The wheel's
    /// <see cref="Delay(TimeSpan, CancellationToken)"/> and the frame loop's delays check with it.
    /// </summary>
    /// <exception cref="ArgumentOutOfRangeException">Any other value.</exception>
    internal static bool IsFiniteDelay(TimeSpan delay) => IsFiniteSpan(delay, nameof(delay), "A delay", "to wait until cancelled");

    /// <summary>
    /// Checks a wait's <paramref name="timeout"/> and its wheel (<paramref name="timers"/>, or <see cref="Default"/>), both
    /// before anything changes and the wheel for an infinite timeout too: the wheel to arm the timeout on, or null for
    /// <see cref="Timeout.InfiniteTimeSpan"/> (no timer).
    /// </summary>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="timeout"/> is neither infinite nor zero to <see cref="MaxDelay"/>.</exception>
    /// <exception cref="ObjectDisposedException">The wheel has been disposed.</exception>
    /// <exception cref="InvalidOperationException">A finite <paramref name="timeout"/>, and the workers had not started and SPINDLE_WORKERS is invalid.</exception>
    internal static TimerWheel? ForTimeout(TimeSpan timeout, TimerWheel? timers, string paramName)
    {
        if (IsFiniteTimeout(timeout, paramName))
        {
            return ForTimeouts(timers);
        }
        NotDisposed(timers);
        return null;
    }

    /// <summary>The exception a timed-out wait completes with: a <see cref="TimeoutException"/>, as <c>Task.WaitAsync</c>'s.</summary>
    internal static TimeoutException NewTimeoutException(TimeSpan timeout)
        => new("The operation did not complete within its timeout of " + timeout.ToString("c", CultureInfo.InvariantCulture) + ".");
}

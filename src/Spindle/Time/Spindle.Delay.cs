using System;
using System.Threading;

namespace SpindleLib;

public static partial class Spindle
{
    /// <summary>
    /// A task that completes after <paramref name="delay"/>, on <see cref="TimerWheel.Default"/>: the pooled timer
    /// node is the awaitable itself, so steady state allocates nothing. See <see cref="TimerWheel.Delay(TimeSpan, CancellationToken)"/>.
    /// </summary>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="delay"/> is negative (other than <see cref="Timeout.InfiniteTimeSpan"/>) or longer than <see cref="TimerWheel.MaxDelay"/>.</exception>
    /// <exception cref="InvalidOperationException">The workers had not started, <see cref="ConfigureWorkers"/> was not
    /// called, and the SPINDLE_WORKERS environment variable is invalid (see <see cref="WorkerCount"/>): a delay on
    /// <see cref="TimerWheel.Default"/> starts the workers.</exception>
    public static SpindleTask Delay(TimeSpan delay, CancellationToken cancellationToken = default)
        => TimerWheel.Default.Delay(delay, cancellationToken);

    /// <summary>As <see cref="Delay(TimeSpan, CancellationToken)"/>, in milliseconds; -1 waits until cancelled.</summary>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="millisecondsDelay"/> is below -1.</exception>
    /// <exception cref="InvalidOperationException">The workers had not started, <see cref="ConfigureWorkers"/> was not
    /// called, and the SPINDLE_WORKERS environment variable is invalid (see <see cref="WorkerCount"/>): a delay on
    /// <see cref="TimerWheel.Default"/> starts the workers.</exception>
    public static SpindleTask Delay(int millisecondsDelay, CancellationToken cancellationToken = default)
        => TimerWheel.Default.Delay(millisecondsDelay, cancellationToken);
}

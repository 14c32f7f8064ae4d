using System;
using System.Globalization;
using System.Threading;

namespace SpindleLib;

/// <summary>What timeouts and periodic timers need from the wheel, kept apart from the wheel's own machinery.</summary>
public sealed partial class TimerWheel
{
    /// <summary>
    /// Takes back a timer that its owner no longer needs (the operation it guarded finished first), with no exception
    /// and no allocation: the cheap cancellation that "timeouts that are mostly cancelled" need. Returns false if the
    /// timer had already fired (or been cancelled by the wheel's disposal): its continuation then runs, or ran.
    /// </summary>
    /// <remarks>
    /// <para>A token's cancellation (<see cref="TimerNode.Cancel"/>) completes a node with an exception, which the
    /// consumer then has to throw and catch to read: an allocation and microseconds per cancelled timeout. This completes
    /// the node as <see cref="TimerNode.TryFire"/> would, so the one CAS in its core still decides between firing and
    /// cancelling, and hands the node to the cancel inbox exactly as a cancellation does (the owner unlinks it and lets go
    /// of it). The continuation that the caller registered is dropped, not run: the caller is the consumer, and releases
    /// the consumer's hold itself. The node's version is not advanced (nothing reads its result), which is harmless
    /// because its token never left the caller.</para>
    /// <para>Only for a node whose continuation belongs to the caller and is already registered (so that no one else
    /// can consume it), and that is already in the wheel (the cancel inbox must never see a node before the insert
    /// inbox has). <see cref="TimeoutTimer"/> guarantees both.</para>
    /// <para>Merge note: this belongs in <see cref="TimerNode"/> (say, <c>TryCancelQuietly</c>); it lives here only
    /// because TimerNode.cs is being reworked on another branch. It relies on <see cref="TimerNode.TryFire"/>,
    /// <see cref="EnqueueCancel"/> and <see cref="TimerNode.ReleaseFromWheel"/>.</para>
    /// </remarks>
    internal bool CancelQuietly(TimerNode node)
    {
        if (!node.TryFire(out _, out _))
        {
            return false;
        }
        EnqueueCancel(node);
        node.ReleaseFromWheel(); // the consumer's hold; the second of consumer and owner recycles the node
        return true;
    }

    /// <summary>The wheel a timeout or periodic timer runs on: <paramref name="timers"/>, or <see cref="Default"/>.</summary>
    /// <exception cref="ObjectDisposedException"><paramref name="timers"/> has been disposed.</exception>
    internal static TimerWheel ForTimeouts(TimerWheel? timers)
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
    {
        if (timeout == Timeout.InfiniteTimeSpan)
        {
            return false;
        }
        if (timeout < TimeSpan.Zero || timeout > MaxDelay)
        {
            throw new ArgumentOutOfRangeException(paramName, timeout,
                "A timeout must be between TimeSpan.Zero and TimerWheel.MaxDelay (about 49.7 days), or Timeout.InfiniteTimeSpan for no timeout.");
        }
        return true;
    }

    /// <summary>The exception a timed-out wait completes with: a <see cref="TimeoutException"/>, as <c>Task.WaitAsync</c>'s.</summary>
    internal static TimeoutException NewTimeoutException(TimeSpan timeout)
        => new("The operation did not complete within its timeout of " + timeout.ToString("c", CultureInfo.InvariantCulture) + ".");
}

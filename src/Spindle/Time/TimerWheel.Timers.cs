using System;
using System.Threading;

namespace SpindleLib;

public sealed partial class TimerWheel
{
    /// <summary>
    /// Creates a callback timer on this wheel that runs <paramref name="callback"/>(<paramref name="state"/>) once after
    /// <paramref name="dueTime"/>, then every <paramref name="period"/>: the wheel's counterpart of
    /// <see cref="TimeProvider.CreateTimer"/> and <c>new System.Threading.Timer(...)</c>, which a Change moves (pushing it
    /// back costs one CAS) and a Dispose stops, allocating nothing in steady state. See <see cref="SpindleTimer"/>.
    /// </summary>
    /// <param name="callback">Runs each time the timer fires: on Spindle's workers for a wheel on <see cref="TimeProvider.System"/>, on the thread that drives the clock for any other provider (a <see cref="ManualClock"/>'s <c>Advance</c>).</param>
    /// <param name="state">Passed to <paramref name="callback"/>.</param>
    /// <param name="dueTime">How long until the first firing: <see cref="TimeSpan.Zero"/> (at once) to <see cref="MaxDelay"/>, or <see cref="Timeout.InfiniteTimeSpan"/> to create it stopped (a later <see cref="SpindleTimer.Change"/> starts it).</param>
    /// <param name="period">The time between firings after the first, rounded up to the millisecond: up to <see cref="MaxDelay"/>; <see cref="TimeSpan.Zero"/> or <see cref="Timeout.InfiniteTimeSpan"/> for a one-shot timer.</param>
    /// <returns>The timer's handle. Dispose it when done: that returns its node to the pool.</returns>
    /// <exception cref="ArgumentNullException"><paramref name="callback"/> is null.</exception>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="dueTime"/> or <paramref name="period"/> is negative (other than <see cref="Timeout.InfiniteTimeSpan"/>) or longer than <see cref="MaxDelay"/>.</exception>
    /// <exception cref="ObjectDisposedException">The wheel has been disposed.</exception>
    /// <exception cref="InvalidOperationException">On a wheel of <see cref="TimeProvider.System"/>, whose callbacks run on the workers: the workers had not started and the SPINDLE_WORKERS environment variable is invalid.</exception>
    public SpindleTimer CreateTimer(Action<object?> callback, object? state, TimeSpan dueTime, TimeSpan period)
    {
        if (callback is null)
        {
            ThrowHelper.ThrowArgumentNull(nameof(callback));
        }
        long due = TimerDue(dueTime, nameof(dueTime));
        long periodMs = TimerPeriod(period, nameof(period));
        if (_disposed)
        {
            ThrowDisposed();
        }
        EnsureWorkers();
        CallbackTimerNode node = CallbackTimerNode.Rent(this, callback!, state, due, periodMs, out short version);
        if (due != CallbackTimerNode.NeverDue)
        {
            QueueChange(node, due);
        }
        return new SpindleTimer(node, version);
    }

    /// <summary>As <see cref="CreateTimer(Action{object?}, object?, TimeSpan, TimeSpan)"/>, for a one-shot timer: it fires once, <paramref name="dueTime"/> from now, and again only if a Change re-arms it.</summary>
    /// <exception cref="ArgumentNullException"><paramref name="callback"/> is null.</exception>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="dueTime"/> is negative (other than <see cref="Timeout.InfiniteTimeSpan"/>) or longer than <see cref="MaxDelay"/>.</exception>
    /// <exception cref="ObjectDisposedException">The wheel has been disposed.</exception>
    /// <exception cref="InvalidOperationException">On a wheel of <see cref="TimeProvider.System"/>: the workers had not started and the SPINDLE_WORKERS environment variable is invalid.</exception>
    public SpindleTimer CreateTimer(Action<object?> callback, object? state, TimeSpan dueTime)
        => CreateTimer(callback, state, dueTime, Timeout.InfiniteTimeSpan);

    /// <summary>A timer's due tick <paramref name="dueTime"/> from now (checked), or <see cref="CallbackTimerNode.NeverDue"/> for an infinite one.</summary>
    private long TimerDue(TimeSpan dueTime, string paramName)
    {
        if (!IsFiniteSpan(dueTime, paramName, "A timer's due time", "to leave the timer stopped"))
        {
            return CallbackTimerNode.NeverDue;
        }
        long due = DeadlineAfter(dueTime);
        return due >= CallbackTimerNode.NeverDue ? CallbackTimerNode.NeverDue : due; // past 34 years of the wheel's clock
    }

    /// <summary>A timer's period in whole milliseconds, rounded up (checked); 0 for a one-shot timer.</summary>
    private static long TimerPeriod(TimeSpan period, string paramName)
    {
        if (!IsFiniteSpan(period, paramName, "A timer's period", "(or TimeSpan.Zero) for a one-shot timer"))
        {
            return 0;
        }
        return (period.Ticks + TimeSpan.TicksPerMillisecond - 1) / TimeSpan.TicksPerMillisecond;
    }

    /// <summary>Use <paramref name="version"/> of <paramref name="node"/> (a timer of this wheel) is changed: see <see cref="SpindleTimer.Change"/>.</summary>
    internal void ChangeTimer(CallbackTimerNode node, short version, TimeSpan dueTime, TimeSpan period)
    {
        long due = TimerDue(dueTime, nameof(dueTime));
        long periodMs = TimerPeriod(period, nameof(period));
        if (_disposed)
        {
            // A timer stopped when the wheel was disposed is in no part of it, so nothing ended it: this call does. One the
            // wheel's Dispose ended is kept for its handle until the user disposes it (CallbackTimerNode.DisposeByWheel).
            CallbackTimerNode.ThrowDisposed(byWheel: node.IsLiveOrEndedByWheel(version));
        }
        if (node.Change(version, due, periodMs))
        {
            QueueChange(node, due);
        }
    }

    /// <summary>
    /// Hands a callback timer to the main shard's owner (its change inbox), then wakes the owner as an insert does when
    /// <paramref name="due"/> is earlier than the tick it sleeps towards, else as a cancellation does if the inbox was empty.
    /// </summary>
    internal void QueueChange(CallbackTimerNode node, long due)
    {
        bool first = _main.PushChange(node);
        // Dekker with the owner (DriveAndPlan), as in Insert: the push happens before this read, and the owner publishes
        // _wakeAt before it re-checks the inboxes (HasInsertInbox includes the change inbox).
        if (due != CallbackTimerNode.NeverDue && LowerWakeAt(due))
        {
            Kick();
        }
        else if (first)
        {
            Kick(toRelease: true);
        }
        if (_disposed)
        {
            // Raced with Dispose: make sure a disposing pass takes this node (it ends it: CancelEverything).
            RequestDrive();
        }
    }
}

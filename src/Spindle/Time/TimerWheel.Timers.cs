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
    /// <param name="dueTime">How long until the first firing: <see cref="TimeSpan.Zero"/> (at once) to <see cref="MaxDelay"/>, or <see cref="Timeout.InfiniteTimeSpan"/> to create it stopped (a later <see cref="SpindleTimer.Change(TimeSpan, TimeSpan)"/> starts it).</param>
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

    /// <summary>
    /// This wheel as a <see cref="System.TimeProvider"/>, for code written against one (<c>Task.Delay(delay, provider)</c>,
    /// <c>new CancellationTokenSource(delay, provider)</c>, <c>new PeriodicTimer(period, provider)</c>,
    /// <c>task.WaitAsync(timeout, provider)</c>, libraries that take a provider): its timers are this wheel's callback
    /// timers, and its time is this wheel's clock's (<see cref="TimeProvider"/>). The same instance on every call.
    /// </summary>
    /// <remarks>
    /// <para><b>Time.</b> <c>GetUtcNow</c>, <c>GetTimestamp</c>, <c>TimestampFrequency</c> and <c>LocalTimeZone</c> are
    /// those of the clock the wheel was built on: a wheel on a <see cref="ManualClock"/> or on Microsoft's
    /// <c>FakeTimeProvider</c> gives that clock's time, and its timers fire as that clock is advanced. This is not the
    /// wheel's clock itself (<see cref="TimeProvider"/>): that one's timers are its own, not the wheel's.</para>
    /// <para><b>Timers.</b> <c>CreateTimer</c> gives an <see cref="ITimer"/> with the contract of
    /// <see cref="System.TimeProvider.System"/>'s: <c>Change</c> returns false once the timer (or this wheel) is disposed;
    /// <c>Dispose</c> and <c>DisposeAsync</c> may be called again; <see cref="Timeout.InfiniteTimeSpan"/> as the due time
    /// stops the timer, and as the period (or <see cref="TimeSpan.Zero"/>) makes it fire once; a due time or period
    /// that is negative (other than infinite) or longer than <see cref="MaxDelay"/> throws
    /// <see cref="ArgumentOutOfRangeException"/>, and a null callback <see cref="ArgumentNullException"/>. The callback
    /// runs in the <see cref="ExecutionContext"/> of the code that created the timer (its <c>AsyncLocal</c> values), or
    /// in none when that code suppressed the flow, as the BCL's own consumers do when they create timers; no callback
    /// starts after <c>Dispose</c> returns, and <c>DisposeAsync</c> completes when the ones running have ended. The callbacks
    /// run where this wheel's run (see <see cref="SpindleTimer"/>): on Spindle's workers for a wheel on the system clock,
    /// on the thread that advances any other clock. A callback's exception goes to <see cref="Spindle.UnobservedException"/>.</para>
    /// <para><b>Differences from <c>TimeProvider.System</c>.</b> Due times and periods are rounded up to the millisecond
    /// (never early), where the BCL truncates them (so it takes 1.5 ms as 1 ms, −0.5 ms as 0 and −1.5 ms as infinite;
    /// here −0.5 ms and −1.5 ms throw). A callback's exception does not end the process.</para>
    /// <para><b>Cost.</b> Each timer is one object of 64 B (on 64-bit: the callback, its state, the captured context and
    /// the wheel timer's node and version) besides the wheel's pooled node, which goes back to the pool when the timer is disposed: a
    /// <c>Change</c> allocates nothing, and a push back is one CAS, as for <see cref="SpindleTimer"/>. A timer that is
    /// armed is held by the wheel, with its callback and state, until it fires or is disposed, as
    /// <c>TimeProvider.System</c>'s timers are held by the runtime's timer queue: a periodic timer that is never disposed
    /// keeps firing. One that is stopped, or a one-shot one that has fired, is collected once nothing references it.</para>
    /// </remarks>
    /// <returns>The wheel's <see cref="System.TimeProvider"/>.</returns>
    public TimeProvider AsTimeProvider()
        => Volatile.Read(ref _asTimeProvider) ?? Interlocked.CompareExchange(ref _asTimeProvider, new WheelTimeProvider(this), null) ?? _asTimeProvider!;

    private WheelTimeProvider? _asTimeProvider;

    /// <summary>As <see cref="CreateTimer(Action{object?}, object?, TimeSpan, TimeSpan)"/>, for a one-shot timer: it fires once, <paramref name="dueTime"/> from now, and again only if a Change re-arms it.</summary>
    /// <exception cref="ArgumentNullException"><paramref name="callback"/> is null.</exception>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="dueTime"/> is negative (other than <see cref="Timeout.InfiniteTimeSpan"/>) or longer than <see cref="MaxDelay"/>.</exception>
    /// <exception cref="ObjectDisposedException">The wheel has been disposed.</exception>
    /// <exception cref="InvalidOperationException">On a wheel of <see cref="TimeProvider.System"/>: the workers had not started and the SPINDLE_WORKERS environment variable is invalid.</exception>
    public SpindleTimer CreateTimer(Action<object?> callback, object? state, TimeSpan dueTime)
        => CreateTimer(callback, state, dueTime, Timeout.InfiniteTimeSpan);

    /// <summary>Checks a timer's due time and period as <see cref="CreateTimer(Action{object?}, object?, TimeSpan, TimeSpan)"/> and <see cref="SpindleTimer.Change(TimeSpan, TimeSpan)"/> do, for a Change that then does nothing (its timer disposed).</summary>
    /// <exception cref="ArgumentOutOfRangeException">Either is out of range.</exception>
    internal static void CheckTimerSpans(TimeSpan dueTime, TimeSpan period)
    {
        IsFiniteSpan(dueTime, nameof(dueTime), DueTimeWhat, DueTimeInfinite);
        TimerPeriod(period, nameof(period));
    }

    private const string DueTimeWhat = "A timer's due time";
    private const string DueTimeInfinite = "to leave the timer stopped";

    /// <summary>A timer's due tick <paramref name="dueTime"/> from now (checked), or <see cref="CallbackTimerNode.NeverDue"/> for an infinite one.</summary>
    private long TimerDue(TimeSpan dueTime, string paramName)
    {
        if (!IsFiniteSpan(dueTime, paramName, DueTimeWhat, DueTimeInfinite))
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

    /// <summary>Use <paramref name="version"/> of <paramref name="node"/> (a timer of this wheel) is changed: see <see cref="SpindleTimer.Change(TimeSpan, TimeSpan)"/>.</summary>
    internal void ChangeTimer(CallbackTimerNode node, short version, TimeSpan dueTime, TimeSpan period)
        => ChangeTimer(node, version, TimerDue(dueTime, nameof(dueTime)), TimerPeriod(period, nameof(period)), throwIfEnded: true);

    /// <summary>Use <paramref name="version"/> of <paramref name="node"/> is changed, keeping its period: see <see cref="SpindleTimer.Change(TimeSpan)"/>.</summary>
    internal void ChangeTimer(CallbackTimerNode node, short version, TimeSpan dueTime)
        => ChangeTimer(node, version, TimerDue(dueTime, nameof(dueTime)), CallbackTimerNode.KeepPeriod, throwIfEnded: true);

    /// <summary>
    /// As <see cref="ChangeTimer(CallbackTimerNode, short, TimeSpan, TimeSpan)"/>, for <c>ITimer.Change</c> (<see cref="WheelTimeProvider"/>): false, changing nothing,
    /// where that throws <see cref="ObjectDisposedException"/> (the use is disposed or stale, or the wheel is disposed).
    /// Bad arguments still throw, before anything else, as <c>TimeProvider.System</c>'s timers check them.
    /// </summary>
    internal bool TryChangeTimer(CallbackTimerNode node, short version, TimeSpan dueTime, TimeSpan period)
        => ChangeTimer(node, version, TimerDue(dueTime, nameof(dueTime)), TimerPeriod(period, nameof(period)), throwIfEnded: false);

    /// <summary>
    /// The change of every ChangeTimer form, with the due tick and period (or <see cref="CallbackTimerNode.KeepPeriod"/>)
    /// checked: true if made; for an ended use or a disposed wheel, <see cref="ObjectDisposedException"/> if
    /// <paramref name="throwIfEnded"/>, else false.
    /// </summary>
    [System.Runtime.CompilerServices.MethodImpl(System.Runtime.CompilerServices.MethodImplOptions.AggressiveInlining)]
    private bool ChangeTimer(CallbackTimerNode node, short version, long due, long periodMs, bool throwIfEnded)
    {
        if (_disposed)
        {
            if (throwIfEnded)
            {
                // A timer stopped when the wheel was disposed is in no part of it, so nothing ended it: this call does. One the
                // wheel's Dispose ended is kept for its handle until the user disposes it (CallbackTimerNode.DisposeByWheel).
                CallbackTimerNode.ThrowDisposed(byWheel: node.IsLiveOrEndedByWheel(version));
            }
            return false;
        }
        int result = node.Change(version, due, periodMs);
        if (result == CallbackTimerNode.ChangePush)
        {
            QueueChange(node, due);
        }
        else if (result == CallbackTimerNode.ChangeEnded)
        {
            if (throwIfEnded)
            {
                node.ThrowEnded(version);
            }
            return false;
        }
        return true;
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

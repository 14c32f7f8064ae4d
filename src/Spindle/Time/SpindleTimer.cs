using System;
using System.Diagnostics;
using System.Threading;

namespace SpindleLib;

/// <summary>
/// A callback timer on a <see cref="TimerWheel"/> (<see cref="TimerWheel.CreateTimer(Action{object?}, object?, TimeSpan, TimeSpan)"/>):
/// Spindle's <c>System.Threading.Timer</c>, <c>ITimer</c>, Linux's <c>mod_timer</c>/<c>del_timer</c> or Netty's
/// <c>Timeout</c>, for the server that holds a timer per session or the game that holds one per buff: a
/// <see cref="Change(TimeSpan, TimeSpan)"/> moves it from any thread, a <see cref="Dispose"/> ends it, and neither allocates.
/// </summary>
/// <example>
/// <code>
/// // An idle timeout that each message pushes back.
/// SpindleTimer idle = TimerWheel.Default.CreateTimer(static s => ((Session)s!).Close(), session, TimeSpan.FromSeconds(30));
/// void OnMessage() => idle.Change(TimeSpan.FromSeconds(30), Timeout.InfiniteTimeSpan);
/// void OnClosed() => idle.Dispose();
/// </code>
/// </example>
/// <remarks>
/// <para><b>Cost.</b> The handle is a struct holding a pooled node (96 B on 64-bit, with the callback and state the
/// caller's) and its version: creating, changing and disposing a timer allocate nothing once the pool is warm. A Change
/// that pushes the timer back (a due time at or after the one it replaces, the common case of an idle timeout) is one
/// CAS on the node and wakes nothing: the wheel finds the later time when it reaches the old one, and links the timer
/// again there. A Change that pulls it forward, re-arms a timer that fired or was stopped, or stops it, goes to the
/// wheel's owner through a lock-free inbox, as a new delay does.</para>
/// <para><b>When it fires.</b> Never early: a due time is rounded up to the wheel's millisecond, and so is the period.
/// A periodic timer's ticks fall at whole periods from the due time it was last given, so they do not drift; ticks
/// missed while the callbacks' thread was late coalesce into one, as <see cref="SpindlePeriodicTimer"/>'s do.</para>
/// <para><b>Where the callback runs.</b> For a wheel on <see cref="TimeProvider.System"/> (<see cref="TimerWheel.Default"/>
/// included), on Spindle's workers, handed over in batches as awaited delays are: never on the wheel's timer thread, so
/// a slow callback holds up no firing of the wheel. The callbacks of one batch (up to 64 due together) run in turn on one
/// worker: a slow one holds up the rest of its batch until an idle worker takes them over (after about 2 ms), and holds
/// its worker, one of the few that run all Spindle continuations, while it runs. Keep callbacks short, as a
/// <c>System.Threading.Timer</c>'s should be, and start blocking work elsewhere. As with <c>System.Threading.Timer</c>, one periodic timer's callbacks may
/// then overlap, if one runs longer than the period: guard shared state in the callback. For a wheel on any other
/// provider (a <see cref="ManualClock"/>), on the thread that drives the clock, one at a time, in deadline order, inside
/// its <c>Advance</c> (or inside the Change or create that made the timer due at once). The
/// <see cref="ExecutionContext"/> is not captured (as <c>ThreadPool.UnsafeQueueUserWorkItem</c>): <c>AsyncLocal</c>
/// values of the creating code are not seen by the callback. An exception the callback throws goes to
/// <see cref="Spindle.UnobservedException"/>, and the timer carries on (a periodic timer keeps firing).</para>
/// <para><b>Races.</b> A callback the wheel has already taken when a Change or Dispose lands still runs (as with
/// <c>System.Threading.Timer</c>, whose callbacks may run after Dispose returns); the Change then applies to the next
/// firing. On the workers that may be more than one callback of a periodic timer: each tick that fired while the workers
/// were busy queued one, and every queued callback still runs. So a callback that must not act on a firing a Change has
/// overtaken (an idle session closed just after its message) checks the state it guards itself, as Netty's
/// <c>IdleStateHandler</c> compares the last read's time with now; the handle does not tell it. Each arming fires at
/// most once. Two Change calls that race on one timer each take effect, the later one
/// (in the order the timer saw them) deciding the due time; if they give different periods, the timer may end with the
/// other one's period.</para>
/// <para><b>Ending it.</b> <see cref="Dispose"/> stops the timer and returns its node to the pool; it is idempotent,
/// and a copy of a disposed handle never acts on the timer that reuses the node (its <see cref="Change(TimeSpan, TimeSpan)"/> throws
/// <see cref="ObjectDisposedException"/>, its Dispose does nothing). Disposing the wheel stops every timer on it and
/// lets go of its callback and state (a timer then stopped keeps them until its handle is disposed); a Change then throws <see cref="ObjectDisposedException"/> naming the wheel, and
/// the handle's Dispose returns the node to the pool. So a Change that may race with the Dispose (a message handled as
/// its session closes) catches that exception, or is ordered before the Dispose: .NET's <c>Timer.Change</c> and
/// <c>ITimer.Change</c> return false there instead, and code ported from them that ignores the result meets an exception
/// here. Code that needs that contract, or the creator's <see cref="ExecutionContext"/>, takes the wheel's timers through
/// <see cref="TimerWheel.AsTimeProvider"/>, whose <see cref="ITimer"/> costs one object per timer. A timer that is never disposed is collected once nothing references it and it is stopped; while it is
/// armed, the wheel holds it (and its state) until it fires, as a BCL timer is held.</para>
/// <para><b>Thread-safety.</b> Every member may be called from any thread, at any time, including from the callback.</para>
/// </remarks>
[DebuggerDisplay("{DebuggerText,nq}")]
public readonly struct SpindleTimer : IDisposable, IEquatable<SpindleTimer>
{
    private readonly CallbackTimerNode? _node;
    private readonly short _version;

    internal SpindleTimer(CallbackTimerNode node, short version)
    {
        _node = node;
        _version = version;
    }

    /// <summary>The node (null for default): for a holder that keeps the node and version as two fields of its own, packed with others (<see cref="WheelTimeProvider"/>).</summary>
    internal CallbackTimerNode? Node => _node;

    /// <summary>The use's version: see <see cref="Node"/>.</summary>
    internal short Version => _version;

    /// <summary>
    /// Moves the timer: it fires <paramref name="dueTime"/> from now, then every <paramref name="period"/>, whether it is
    /// pending, has fired (a one-shot timer is armed again) or was stopped. <see cref="Timeout.InfiniteTimeSpan"/> as
    /// <paramref name="dueTime"/> stops it without disposing it. As <c>ITimer.Change</c>.
    /// </summary>
    /// <param name="dueTime">How long until it fires: <see cref="TimeSpan.Zero"/> (at once) to <see cref="TimerWheel.MaxDelay"/>, or <see cref="Timeout.InfiniteTimeSpan"/> to stop it.</param>
    /// <param name="period">The time between firings after that, rounded up to the millisecond: up to <see cref="TimerWheel.MaxDelay"/>; <see cref="TimeSpan.Zero"/> or <see cref="Timeout.InfiniteTimeSpan"/> for one firing.</param>
    /// <returns>Always true: the timer was changed (failures throw). Unlike .NET's <c>Timer.Change</c> and
    /// <c>ITimer.Change</c>, which return false for a disposed timer, this throws for one; it does not tell whether the
    /// timer had fired, nor whether a callback already taken is still to run.</returns>
    /// <remarks>A due time at or after the one it replaces costs one CAS; see the remarks on <see cref="SpindleTimer"/>. Callbacks already taken when this lands still run (on the workers, one for each tick a periodic timer queued while they were busy); the Change applies to the next firing.</remarks>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="dueTime"/> or <paramref name="period"/> is negative (other than <see cref="Timeout.InfiniteTimeSpan"/>) or longer than <see cref="TimerWheel.MaxDelay"/>.</exception>
    /// <exception cref="ObjectDisposedException">The timer, or its wheel, has been disposed.</exception>
    /// <exception cref="InvalidOperationException">This is <c>default(SpindleTimer)</c>, which no timer backs.</exception>
    public bool Change(TimeSpan dueTime, TimeSpan period)
    {
        WheelOrThrow(out CallbackTimerNode node).ChangeTimer(node, _version, dueTime, period);
        return true;
    }

    /// <summary>
    /// Moves the timer as <see cref="Change(TimeSpan, TimeSpan)"/> does, keeping its period: it fires
    /// <paramref name="dueTime"/> from now, then every period it was last given (once, for a one-shot timer).
    /// <see cref="Timeout.InfiniteTimeSpan"/> stops it, and a later call re-arms it with the same period. For the common
    /// push back of an idle timeout or a periodic heartbeat, without repeating the period at every call site.
    /// </summary>
    /// <param name="dueTime">How long until it fires: <see cref="TimeSpan.Zero"/> (at once) to <see cref="TimerWheel.MaxDelay"/>, or <see cref="Timeout.InfiniteTimeSpan"/> to stop it.</param>
    /// <returns>Always true, as <see cref="Change(TimeSpan, TimeSpan)"/>.</returns>
    /// <remarks>If another thread's <see cref="Change(TimeSpan, TimeSpan)"/> gives the timer a new period meanwhile, the timer keeps whichever period it holds when it next fires.</remarks>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="dueTime"/> is negative (other than <see cref="Timeout.InfiniteTimeSpan"/>) or longer than <see cref="TimerWheel.MaxDelay"/>.</exception>
    /// <exception cref="ObjectDisposedException">The timer, or its wheel, has been disposed.</exception>
    /// <exception cref="InvalidOperationException">This is <c>default(SpindleTimer)</c>, which no timer backs.</exception>
    public bool Change(TimeSpan dueTime)
    {
        WheelOrThrow(out CallbackTimerNode node).ChangeTimer(node, _version, dueTime);
        return true;
    }

    /// <summary>The wheel of this handle's node, for a Change: a stale read of it fails the version check there.</summary>
    /// <exception cref="ObjectDisposedException">The node is between uses (recycled), so this use is over.</exception>
    private TimerWheel WheelOrThrow(out CallbackTimerNode node)
    {
        node = NodeOrThrow();
        TimerWheel? wheel = node.Wheel;
        if (wheel is null)
        {
            CallbackTimerNode.ThrowDisposed(byWheel: false);
        }
        return wheel!;
    }

    /// <summary>
    /// As <see cref="Change(TimeSpan, TimeSpan)"/>, but false where that throws <see cref="ObjectDisposedException"/> (the timer or its wheel
    /// has been disposed), as <c>ITimer.Change</c> does: for <see cref="TimerWheel.AsTimeProvider"/>'s timers.
    /// </summary>
    internal bool TryChange(TimeSpan dueTime, TimeSpan period)
    {
        CallbackTimerNode node = NodeOrThrow();
        TimerWheel? wheel = node.Wheel;
        if (wheel is null)
        {
            TimerWheel.CheckTimerSpans(dueTime, period); // recycled, so this use is over; the arguments are still checked first
            return false;
        }
        return wheel.TryChangeTimer(node, _version, dueTime, period); // a stale read of the wheel fails the version check there
    }

    /// <summary>
    /// Stops the timer and returns its node to the pool (at once, or when the wheel's owner lets go of it, promptly).
    /// Calling it again, or on a copy of this handle, does nothing; after the wheel's Dispose, the first call still returns
    /// the node. Callbacks already taken still run, maybe after this returns (on the workers, one for each tick a periodic
    /// timer queued while they were busy).
    /// </summary>
    /// <exception cref="InvalidOperationException">This is <c>default(SpindleTimer)</c>, which no timer backs.</exception>
    public void Dispose()
    {
        CallbackTimerNode node = NodeOrThrow();
        TimerWheel? wheel = node.Wheel; // read before the node can be recycled: it cannot be while this use is live
        if (node.Dispose(_version))
        {
            // This call set Queued: the owner cannot let go of the node before the push below, so the wheel read is this use's.
            wheel!.QueueChange(node, CallbackTimerNode.NeverDue);
        }
    }

    private CallbackTimerNode NodeOrThrow()
    {
        if (_node is null)
        {
            ThrowHelper.ThrowInvalidOperation("This SpindleTimer is default: no timer backs it. Create one with TimerWheel.CreateTimer (for example TimerWheel.Default.CreateTimer(callback, state, dueTime)).");
        }
        return _node!;
    }

    private string DebuggerText => _node is null ? "default" : _node.IsLive(_version) ? "live" : "disposed";

    /// <inheritdoc/>
    public bool Equals(SpindleTimer other) => ReferenceEquals(_node, other._node) && _version == other._version;

    /// <inheritdoc/>
    public override bool Equals(object? obj) => obj is SpindleTimer other && Equals(other);

    /// <inheritdoc/>
    public override int GetHashCode() => _node is null ? 0 : (System.Runtime.CompilerServices.RuntimeHelpers.GetHashCode(_node) * 397) ^ _version;

    /// <summary>True when both handles are the same use of the same timer (or both default).</summary>
    public static bool operator ==(SpindleTimer left, SpindleTimer right) => left.Equals(right);

    /// <summary>True unless both handles are the same use of the same timer (or both default).</summary>
    public static bool operator !=(SpindleTimer left, SpindleTimer right) => !left.Equals(right);
}

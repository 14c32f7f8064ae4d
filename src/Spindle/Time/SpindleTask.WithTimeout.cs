using System;
using System.Threading;

namespace SpindleLib;

public readonly partial struct SpindleTask
{
    /// <summary>
    /// A task that completes as this one does if it finishes within <paramref name="timeout"/>, and otherwise fails with a
    /// <see cref="TimeoutException"/>, as the BCL's <c>Task.WaitAsync(TimeSpan)</c>. Allocates nothing in steady state.
    /// </summary>
    /// <remarks>
    /// <para><b>Consumes this task.</b> Await the returned task instead. If the timeout wins, this task is still read when
    /// it finishes (a pooled one goes back to its pool), and a fault of it then goes to
    /// <see cref="Spindle.UnobservedException"/> (a cancellation does not). The operation behind it is not cancelled: to
    /// stop it, give it a token of its own.</para>
    /// <para><b>Timing.</b> The deadline is rounded up to the wheel's 1 ms tick, so the timeout never fires early. If this
    /// task finishes first, the timer is cancelled at once and nothing is left in the wheel. If the wheel is disposed
    /// while the timeout is pending, the returned task completes as canceled, as the wheel's delays do.</para>
    /// <para><b>No timer when none is needed.</b> <see cref="Timeout.InfiniteTimeSpan"/>, or a task that has already
    /// completed, returns this task as it is. <see cref="TimeSpan.Zero"/> on a pending task fails at once.</para>
    /// <para><b>Threads.</b> The returned task completes on the thread that decides it: the one that completes this task,
    /// or the wheel's (a worker for <see cref="TimerWheel.Default"/>; the thread that advances a <see cref="ManualClock"/>).
    /// The timeout's two sides may race from any threads: exactly one outcome wins.</para>
    /// <para>To time out a combination, time out the combined task: <c>SpindleTask.WhenAny(a, b).WithTimeout(t)</c>
    /// (WhenAll also takes <see cref="WhenAllOptions.Timeout"/>).</para>
    /// </remarks>
    /// <param name="timeout">How long to wait: <see cref="TimeSpan.Zero"/> to <see cref="TimerWheel.MaxDelay"/>, or <see cref="Timeout.InfiniteTimeSpan"/> for no timeout.</param>
    /// <param name="timers">The wheel that times it; null for <see cref="TimerWheel.Default"/>. Pass a wheel on a <see cref="ManualClock"/> to test timeouts deterministically.</param>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="timeout"/> is negative (other than <see cref="Timeout.InfiniteTimeSpan"/>) or longer than <see cref="TimerWheel.MaxDelay"/>.</exception>
    /// <exception cref="ObjectDisposedException"><paramref name="timers"/> has been disposed.</exception>
    /// <exception cref="InvalidOperationException">This task was already awaited (the await-once error), or is being awaited elsewhere.</exception>
    public SpindleTask WithTimeout(TimeSpan timeout, TimerWheel? timers = null)
    {
        bool finite = TimerWheel.IsFiniteTimeout(timeout, nameof(timeout));
        TimerWheel wheel = TimerWheel.ForTimeouts(timers);
        ISpindleSource? source = _source;
        if (!finite || source is null || source.GetStatus(_token) != SpindleTaskStatus.Pending)
        {
            return this;
        }
        if (timeout == TimeSpan.Zero)
        {
            Forget();
            return FromException(TimerWheel.NewTimeoutException(timeout));
        }
        TimeoutSource<VoidResult> timed = TimeoutSource<VoidResult>.Start(source, _token, timeout, wheel, out short token);
        return new SpindleTask(timed, token);
    }
}

public readonly partial struct SpindleTask<T>
{
    /// <summary>
    /// A task that completes with this one's result if it finishes within <paramref name="timeout"/>, and otherwise fails
    /// with a <see cref="TimeoutException"/>, as the BCL's <c>Task&lt;T&gt;.WaitAsync(TimeSpan)</c>. Allocates nothing in
    /// steady state. See <see cref="SpindleTask.WithTimeout(TimeSpan, TimerWheel)"/> for the rules: this task is
    /// consumed, a late fault of it is reported to <see cref="Spindle.UnobservedException"/>, the timer never fires early
    /// and is cancelled at once when this task wins.
    /// </summary>
    /// <param name="timeout">How long to wait: <see cref="TimeSpan.Zero"/> to <see cref="TimerWheel.MaxDelay"/>, or <see cref="Timeout.InfiniteTimeSpan"/> for no timeout.</param>
    /// <param name="timers">The wheel that times it; null for <see cref="TimerWheel.Default"/>.</param>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="timeout"/> is negative (other than <see cref="Timeout.InfiniteTimeSpan"/>) or longer than <see cref="TimerWheel.MaxDelay"/>.</exception>
    /// <exception cref="ObjectDisposedException"><paramref name="timers"/> has been disposed.</exception>
    /// <exception cref="InvalidOperationException">This task was already awaited (the await-once error), or is being awaited elsewhere.</exception>
    public SpindleTask<T> WithTimeout(TimeSpan timeout, TimerWheel? timers = null)
    {
        bool finite = TimerWheel.IsFiniteTimeout(timeout, nameof(timeout));
        TimerWheel wheel = TimerWheel.ForTimeouts(timers);
        ISpindleSource<T>? source = _source;
        if (!finite || source is null || source.GetStatus(_token) != SpindleTaskStatus.Pending)
        {
            return this;
        }
        if (timeout == TimeSpan.Zero)
        {
            Forget();
            return SpindleTask.FromException<T>(TimerWheel.NewTimeoutException(timeout));
        }
        TimeoutSource<T> timed = TimeoutSource<T>.Start(source, _token, timeout, wheel, out short token);
        return new SpindleTask<T>(timed, token);
    }
}

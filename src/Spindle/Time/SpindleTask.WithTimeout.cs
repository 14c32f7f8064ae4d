using System;
using System.Runtime.InteropServices;
using System.Threading;

namespace SpindleLib;

public readonly partial struct SpindleTask
{
    /// <summary>
    /// A task that completes as this one does if it finishes within <paramref name="timeout"/>, and otherwise fails with a
    /// <see cref="TimeoutException"/>, as the BCL's <c>Task.WaitAsync(TimeSpan)</c>. Allocates nothing in steady state.
    /// </summary>
    /// <remarks>
    /// <para><b>Consumes this task.</b> Await the returned task instead. If the timeout wins, the wait lets go of this task
    /// before the returned one completes, as <see cref="WhenAny(System.ReadOnlySpan{SpindleTask})"/> lets go of a loser:
    /// a <see cref="Promise"/>'s task is left pending (wait on it again with a new timeout, or reset the promise); a <see cref="Signal"/>'s wait
    /// ends (so the signal can be waited on again at once, and a later set is kept for that wait); a delay leaves its
    /// wheel; an async method goes on running, forgotten. Other sources are read when they finish. A fault that nobody
    /// will read then goes to <see cref="Spindle.UnobservedException"/>, once (a cancellation does not). The operation
    /// behind this task is not cancelled: to stop it, give it a token of its own.</para>
    /// <para><b>Timing.</b> The deadline is rounded up to the wheel's 1 ms tick, so the timeout never fires early. If this
    /// task finishes first, the timer is cancelled at once, with no exception and nothing allocated: it never fires, and it
    /// leaves the wheel then if this task finished on the worker that armed it (the common case: a reply that resumes the
    /// asker inline), else at the wheel's next pass. If the wheel is disposed
    /// while the timeout is pending, the returned task completes as canceled, as the wheel's delays do.</para>
    /// <para><b>No timer when none is needed.</b> A task that has already completed is returned as it is, and so is any
    /// task given <see cref="Timeout.InfiniteTimeSpan"/> with a token that cannot be cancelled (with one that can, the
    /// token alone bounds the wait). <see cref="TimeSpan.Zero"/> on a pending task fails at once (and lets go of it),
    /// unless the token is already cancelled: the token is checked first, as <c>Task.WaitAsync</c> does, and the
    /// returned task is canceled, with no timer armed.</para>
    /// <para>It is a WhenAll of one task with <see cref="WhenAllOptions.Timeout"/>, on the same pooled combinator.</para>
    /// <para><b>Threads.</b> The returned task completes on the thread that decides it: the one that completes this task,
    /// or the wheel's (a worker for <see cref="TimerWheel.Default"/>; the thread that advances a <see cref="ManualClock"/>).
    /// The timeout's two sides may race from any threads: exactly one outcome wins.</para>
    /// <para>To time out a combination, time out the combined task: <c>SpindleTask.WhenAny(a, b).WithTimeout(t)</c>
    /// (WhenAll also takes <see cref="WhenAllOptions.Timeout"/>).</para>
    /// <para>A timeout that fires builds its <see cref="TimeoutException"/>; where timeouts are frequent (an actor's asks),
    /// <see cref="TryWithTimeout(TimeSpan, TimerWheel, CancellationToken)"/> returns false instead, and builds nothing.</para>
    /// </remarks>
    /// <param name="timeout">How long to wait: <see cref="TimeSpan.Zero"/> to <see cref="TimerWheel.MaxDelay"/>, or <see cref="Timeout.InfiniteTimeSpan"/> for no timeout.</param>
    /// <param name="timers">The wheel that times it; null for <see cref="TimerWheel.Default"/>. Pass a wheel on a <see cref="ManualClock"/> to test timeouts deterministically.</param>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="timeout"/> is negative (other than <see cref="Timeout.InfiniteTimeSpan"/>) or longer than <see cref="TimerWheel.MaxDelay"/>.</exception>
    /// <exception cref="ObjectDisposedException"><paramref name="timers"/> has been disposed.</exception>
    /// <exception cref="InvalidOperationException">A timer is needed on a wheel of <see cref="TimeProvider.System"/> (<see cref="TimerWheel.Default"/> among them), the workers had not started (this starts them, as its timer thread hands the resumed code to them), and the SPINDLE_WORKERS environment variable is invalid (see <see cref="Spindle.WorkerCount"/>).</exception>
    /// <param name="cancellationToken">
    /// Also ends the wait: if it is cancelled first, the returned task completes as canceled (an
    /// <see cref="OperationCanceledException"/> for this token) and lets go of this task as the timeout would. A task that
    /// has already completed is returned as it is, whatever the token.
    /// </param>
    /// <exception cref="InvalidOperationException">This task was already awaited (the await-once error), or is being awaited elsewhere.</exception>
    public SpindleTask WithTimeout(TimeSpan timeout, TimerWheel? timers = null, CancellationToken cancellationToken = default)
        => Bounded(WhenAllOptions.ForTimeout(timeout, timers, nameof(timeout)), cancellationToken);

    /// <summary>
    /// As <see cref="WithTimeout(TimeSpan, TimerWheel, CancellationToken)"/>, but a timeout is a result, not an exception:
    /// the returned task's result is true if this task finished within <paramref name="timeout"/>, false if the timeout
    /// passed first. Nothing is thrown or built for a timeout, and nothing is allocated in steady state, whichever wins:
    /// the form for a wait that often times out (an actor's ask), where each <see cref="TimeoutException"/> and its
    /// <c>catch</c> cost more than the wait.
    /// </summary>
    /// <remarks>
    /// <para>Only the timeout becomes a value, as <see cref="Signal.WaitAsync(TimeSpan, CancellationToken)"/> returns
    /// false (and <c>SemaphoreSlim.WaitAsync(TimeSpan)</c> does): a fault or cancellation of this task still throws at the
    /// await, as its own, and so does the token's cancellation (an <see cref="OperationCanceledException"/> for that
    /// token; add <see cref="SuppressCancellationThrow"/> to have that as a value too).</para>
    /// <para>The rest is <see cref="WithTimeout(TimeSpan, TimerWheel, CancellationToken)"/>'s. <b>Consumes this task</b>;
    /// when the timeout or the token wins, the wait lets go of it before the returned task completes (a promise's task can
    /// be awaited again or the promise reset, a signal's wait ends and a later set is kept for the next wait, a delay
    /// leaves its wheel, an async method runs on, forgotten), and a late fault of it goes to
    /// <see cref="Spindle.UnobservedException"/>, once. The deadline is rounded up to the wheel's 1 ms tick (never early);
    /// when this task wins, the timer is taken out of the wheel at once. A wheel disposed while the timeout is pending
    /// completes the returned task as canceled, as its delays. A task that has already completed arms no timer and
    /// ignores the token: the returned task has its outcome at once (true, or its fault). <see cref="Timeout.InfiniteTimeSpan"/>
    /// arms no timer (the result is true unless the token ends the wait); <see cref="TimeSpan.Zero"/> on a pending task
    /// is false at once (and lets go of it), unless the token is already cancelled: the token is checked first.</para>
    /// <para><b>Threads.</b> The returned task completes on the thread that decides it: the one that completes this task,
    /// or the wheel's (a worker for <see cref="TimerWheel.Default"/>; the thread that advances a <see cref="ManualClock"/>).
    /// The task, the timeout and the token may race from any threads: exactly one outcome wins.</para>
    /// <para>UniTask's <c>TimeoutWithoutException</c> is the same wait with the opposite flag (true there means timed out).</para>
    /// </remarks>
    /// <example>
    /// <code>
    /// if (!await reply.Task.TryWithTimeout(TimeSpan.FromMilliseconds(20)))
    /// {
    ///     // timed out: no exception thrown
    /// }
    /// </code>
    /// </example>
    /// <param name="timeout">How long to wait: <see cref="TimeSpan.Zero"/> to <see cref="TimerWheel.MaxDelay"/>, or <see cref="Timeout.InfiniteTimeSpan"/> for no timeout.</param>
    /// <param name="timers">The wheel that times it; null for <see cref="TimerWheel.Default"/>. Pass a wheel on a <see cref="ManualClock"/> to test timeouts deterministically.</param>
    /// <param name="cancellationToken">
    /// Also ends the wait: if it is cancelled first, the returned task completes as canceled (an
    /// <see cref="OperationCanceledException"/> for this token) and lets go of this task as the timeout would.
    /// </param>
    /// <returns>A task whose result is true if this task succeeded in time, false if the timeout passed first.</returns>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="timeout"/> is negative (other than <see cref="Timeout.InfiniteTimeSpan"/>) or longer than <see cref="TimerWheel.MaxDelay"/>.</exception>
    /// <exception cref="ObjectDisposedException"><paramref name="timers"/> has been disposed.</exception>
    /// <exception cref="InvalidOperationException">A timer is needed on a wheel of <see cref="TimeProvider.System"/> (<see cref="TimerWheel.Default"/> among them), the workers had not started (this starts them, as its timer thread hands the resumed code to them), and the SPINDLE_WORKERS environment variable is invalid (see <see cref="Spindle.WorkerCount"/>).</exception>
    /// <exception cref="InvalidOperationException">This task was already awaited (the await-once error), or is being awaited elsewhere.</exception>
    public SpindleTask<bool> TryWithTimeout(TimeSpan timeout, TimerWheel? timers = null, CancellationToken cancellationToken = default)
    {
        WhenAllOptions options = WhenAllOptions.ForTimeout(timeout, timers, nameof(timeout));
        return _source is null
            ? new SpindleTask<bool>(true)
            : Combine.OneTimeoutAsResult<SpindleTask, VoidResult, SpindleInput, bool>(this, options, cancellationToken, CombinedResults.InTime);
    }

    /// <summary>
    /// A task that completes as this one does, unless <paramref name="cancellationToken"/> is cancelled first: then it
    /// completes as canceled (an <see cref="OperationCanceledException"/> for that token), as the BCL's
    /// <c>Task.WaitAsync(CancellationToken)</c>. The token ends the wait, not the operation behind this task. Allocates
    /// nothing in steady state.
    /// </summary>
    /// <remarks>
    /// The rules are <see cref="WithTimeout(TimeSpan, TimerWheel, CancellationToken)"/>'s: this task is consumed (await
    /// the returned one); if the token wins, the wait lets go of this task before the returned one completes, as a
    /// WhenAny lets go of a loser (a promise's task can be awaited again or the promise reset, a signal's wait ends and a later set is kept), and a
    /// late fault of it goes to <see cref="Spindle.UnobservedException"/>. When this task finishes first, the returned task
    /// completes with its outcome at once, and a later cancellation changes nothing; the token's registration is dropped
    /// when the returned task's result is read (as for every combinator), so await it rather than leave it unread. A token that cannot be cancelled, or a task that has already completed, returns
    /// this task as it is; a token already cancelled, on a pending task, completes the returned task as canceled at once.
    /// The token may be cancelled from any thread, racing this task's completion: exactly one outcome wins.
    /// </remarks>
    /// <param name="cancellationToken">The token that ends the wait.</param>
    /// <exception cref="InvalidOperationException">This task was already awaited (the await-once error), or is being awaited elsewhere.</exception>
    public SpindleTask WithCancellation(CancellationToken cancellationToken) => Bounded(default, cancellationToken);

    /// <summary>
    /// This task bounded by a timeout (in <paramref name="options"/>, if any) and a token: a WhenAll of one on the pooled
    /// combinator, or this task as it is when there is nothing to bound or it has already completed.
    /// </summary>
    private SpindleTask Bounded(WhenAllOptions options, CancellationToken cancellationToken)
    {
        ISpindleSource? source = _source;
        if ((options.FiniteTimeout is null && !cancellationToken.CanBeCanceled) || source is null || source.GetStatus(_token) != SpindleTaskStatus.Pending)
        {
            return this;
        }
        SpindleTask input = this;
        return Combine.All<SpindleTask, SpindleInput>(MemoryMarshal.CreateReadOnlySpan(ref input, 1), options, cancellationToken);
    }
}

public readonly partial struct SpindleTask<T>
{
    /// <summary>
    /// A task that completes with this one's result if it finishes within <paramref name="timeout"/>, and otherwise fails
    /// with a <see cref="TimeoutException"/>, as the BCL's <c>Task&lt;T&gt;.WaitAsync(TimeSpan)</c>. Allocates nothing in
    /// steady state. See <see cref="SpindleTask.WithTimeout(TimeSpan, TimerWheel, CancellationToken)"/> for the rules: this task is
    /// consumed, a late fault of it is reported to <see cref="Spindle.UnobservedException"/>, the timer never fires early
    /// and is cancelled at once when this task wins.
    /// </summary>
    /// <param name="timeout">How long to wait: <see cref="TimeSpan.Zero"/> to <see cref="TimerWheel.MaxDelay"/>, or <see cref="Timeout.InfiniteTimeSpan"/> for no timeout.</param>
    /// <param name="timers">The wheel that times it; null for <see cref="TimerWheel.Default"/>.</param>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="timeout"/> is negative (other than <see cref="Timeout.InfiniteTimeSpan"/>) or longer than <see cref="TimerWheel.MaxDelay"/>.</exception>
    /// <exception cref="ObjectDisposedException"><paramref name="timers"/> has been disposed.</exception>
    /// <exception cref="InvalidOperationException">A timer is needed on a wheel of <see cref="TimeProvider.System"/> (<see cref="TimerWheel.Default"/> among them), the workers had not started (this starts them, as its timer thread hands the resumed code to them), and the SPINDLE_WORKERS environment variable is invalid (see <see cref="Spindle.WorkerCount"/>).</exception>
    /// <param name="cancellationToken">Also ends the wait: if it is cancelled first, the returned task completes as canceled and lets go of this task.</param>
    /// <exception cref="InvalidOperationException">This task was already awaited (the await-once error), or is being awaited elsewhere.</exception>
    public SpindleTask<T> WithTimeout(TimeSpan timeout, TimerWheel? timers = null, CancellationToken cancellationToken = default)
        => Bounded(WhenAllOptions.ForTimeout(timeout, timers, nameof(timeout)), cancellationToken);

    /// <summary>
    /// As <see cref="WithTimeout(TimeSpan, TimerWheel, CancellationToken)"/>, but a timeout is a result, not an exception:
    /// <c>(true, result)</c> if this task finished within <paramref name="timeout"/>, <c>(false, default)</c> if the
    /// timeout passed first. Nothing is thrown or built for a timeout, and nothing is allocated in steady state, whichever
    /// wins. A fault or cancellation of this task, and the token's cancellation, still throw at the await. See
    /// <see cref="SpindleTask.TryWithTimeout(TimeSpan, TimerWheel, CancellationToken)"/> for the rules: this task is
    /// consumed and let go of when the timeout or the token wins, a late fault of it is reported to
    /// <see cref="Spindle.UnobservedException"/>, the timer never fires early and is taken out of the wheel at once when
    /// this task wins, and a task that has already completed arms no timer.
    /// </summary>
    /// <example>
    /// <code>
    /// var (answered, value) = await reply.Task.TryWithTimeout(TimeSpan.FromMilliseconds(20));
    /// </code>
    /// </example>
    /// <param name="timeout">How long to wait: <see cref="TimeSpan.Zero"/> to <see cref="TimerWheel.MaxDelay"/>, or <see cref="Timeout.InfiniteTimeSpan"/> for no timeout.</param>
    /// <param name="timers">The wheel that times it; null for <see cref="TimerWheel.Default"/>.</param>
    /// <param name="cancellationToken">Also ends the wait: if it is cancelled first, the returned task completes as canceled and lets go of this task.</param>
    /// <returns>A task whose result is <c>(true, result)</c> if this task succeeded in time, <c>(false, default)</c> if the timeout passed first.</returns>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="timeout"/> is negative (other than <see cref="Timeout.InfiniteTimeSpan"/>) or longer than <see cref="TimerWheel.MaxDelay"/>.</exception>
    /// <exception cref="ObjectDisposedException"><paramref name="timers"/> has been disposed.</exception>
    /// <exception cref="InvalidOperationException">A timer is needed on a wheel of <see cref="TimeProvider.System"/> (<see cref="TimerWheel.Default"/> among them), the workers had not started (this starts them, as its timer thread hands the resumed code to them), and the SPINDLE_WORKERS environment variable is invalid (see <see cref="Spindle.WorkerCount"/>).</exception>
    /// <exception cref="InvalidOperationException">This task was already awaited (the await-once error), or is being awaited elsewhere.</exception>
    public SpindleTask<(bool Completed, T Result)> TryWithTimeout(TimeSpan timeout, TimerWheel? timers = null, CancellationToken cancellationToken = default)
    {
        WhenAllOptions options = WhenAllOptions.ForTimeout(timeout, timers, nameof(timeout));
        return _source is null
            ? new SpindleTask<(bool, T)>((true, _result))
            : Combine.OneTimeoutAsResult<SpindleTask<T>, T, SpindleInput<T>, (bool, T)>(this, options, cancellationToken, CombinedResults<T>.InTimeWithValue);
    }

    /// <summary>
    /// A task that completes with this one's result, unless <paramref name="cancellationToken"/> is cancelled first: then
    /// it completes as canceled, as the BCL's <c>Task&lt;T&gt;.WaitAsync(CancellationToken)</c>. See
    /// <see cref="SpindleTask.WithCancellation(CancellationToken)"/> for the rules. Allocates nothing in steady state.
    /// </summary>
    /// <param name="cancellationToken">The token that ends the wait.</param>
    /// <exception cref="InvalidOperationException">This task was already awaited (the await-once error), or is being awaited elsewhere.</exception>
    public SpindleTask<T> WithCancellation(CancellationToken cancellationToken) => Bounded(default, cancellationToken);

    /// <summary>See <see cref="SpindleTask"/>'s: a WhenAll of one whose result is this task's.</summary>
    private SpindleTask<T> Bounded(WhenAllOptions options, CancellationToken cancellationToken)
    {
        ISpindleSource<T>? source = _source;
        if ((options.FiniteTimeout is null && !cancellationToken.CanBeCanceled) || source is null || source.GetStatus(_token) != SpindleTaskStatus.Pending)
        {
            return this;
        }
        var c = Combinator<T>.RentAll(1, options, static x => x.Value<T>(0));
        SpindleTask<T> input = this;
        return c.ToTask(Combine.AddAll<SpindleTask<T>, T, SpindleInput<T>, T>(c, MemoryMarshal.CreateReadOnlySpan(ref input, 1), cancellationToken));
    }
}

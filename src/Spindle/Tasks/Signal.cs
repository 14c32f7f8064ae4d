using System;
using System.Diagnostics;
using System.Runtime.CompilerServices;
using System.Runtime.ExceptionServices;
using System.Threading;
using System.Threading.Tasks.Sources;

namespace SpindleLib;

/// <summary>
/// An auto-reset awaitable event for one waiter at a time: <see cref="Set"/> releases the waiter, or, if nobody is
/// waiting, lets the next <see cref="WaitAsync(CancellationToken)"/> complete at once. A wait-set cycle allocates
/// nothing; so does a wait with a timeout (<see cref="WaitAsync(TimeSpan, CancellationToken)"/>), in steady state.
/// </summary>
/// <remarks>
/// <para>Thread-safety: <see cref="Set"/> may be called from any thread, concurrently with a wait and with
/// cancellation and a timeout; exactly one of a set, a cancellation and a timeout ends a wait. Only one wait may be
/// pending at a time: a second concurrent wait throws <see cref="InvalidOperationException"/>.</para>
/// <para>A wait given to <see cref="SpindleTask.WhenAny(System.ReadOnlySpan{SpindleTask})"/> that loses ends when the
/// race is decided (so does one given to a WhenAll whose token or timeout wins, or to
/// <see cref="SpindleTask.WithTimeout(TimeSpan, TimerWheel, CancellationToken)"/> that times out): the signal is idle again at once, so it
/// can be waited on again, and a later <see cref="Set"/> is kept for that wait. A Set that lands on the losing wait while the race is
/// being decided is given back to the signal, so it too is kept for the next wait, never lost (for a signal that runs its
/// continuations asynchronously, as soon as a worker has read the losing wait, which may be just after the WhenAny
/// completes). Until the WhenAny completes, the wait
/// is still its own: a second wait started before then, from another thread, is a second waiter and may lose a wake-up.
/// A set is handed out once: a set given back so has reached nobody else (a read of the wait by the caller, before it
/// was handed over or while the combinator held it, keeps the set with that reader instead), and a read of the wait
/// after its set was given back is the await-once error (<see cref="InvalidOperationException"/>).
/// A wait that finds the signal set has taken the set when <see cref="WaitAsync(CancellationToken)"/> returns (its task
/// has completed). A WhenAny reports the first of its inputs that has finished, in order, as <c>Task.WhenAny</c> does, so
/// such a wait passed behind an input that has also finished loses with its set consumed; pass the signal's wait first
/// where its set must not be consumed unseen.</para>
/// <para>A wait handed to something that reads it later (<see cref="SpindleTask.Preserve"/>, a <see cref="TaskScope"/>
/// child, a combinator) is read when that reader gets to it, which may be after the wait has ended: start the next wait
/// only once that reader is done (await the preserved or combined task first). A next wait started before then makes the
/// late read the await-once error, as a stale token's read is. A wait passed to <see cref="SpindleTask.Forget"/> is never
/// read, so the next wait may start as soon as it has ended.</para>
/// <para>The whole state is the completion core's one word (see <c>SourceCore</c>): idle (the last wait is over), set
/// (nobody has taken the set yet), or a wait in progress, which is a use of the core armed from idle. A wait that finds
/// the signal set takes it with one CAS; otherwise one CAS arms it and one more registers its waiter; a set is one CAS
/// that completes the armed wait or, with nobody waiting, leaves the signal set; a cancellation is one CAS that completes
/// the armed wait of its own version, and never a later one. So a wait-and-set cycle is three atomic operations, and a
/// set and a cancellation racing for a wait have exactly one winner (the loser finds the wait completed; a losing set
/// then leaves the signal set, so no set is lost).</para>
/// </remarks>
[DebuggerDisplay("{DebuggerDisplay,nq}")]
public sealed class Signal : ISpindleSource<bool>, IDetachableSource, IQuietSource<bool>, ILazyCanceledSource
{
#if NET
    private static readonly Action<object?, CancellationToken> s_cancel = static (o, ct) => ((Signal)o!).Cancel(ct);
#else
    // Register has no token argument here: the callback reads the wait's own token (see Cancel).
    private static readonly Action<object?> s_cancel = static o => ((Signal)o!).Cancel();
#endif

    // The result of a wait is whether it timed out (WaitAsync with a timeout): false, the default, for every wait a set
    // ends, so a set writes nothing (see SourceCore.TryArm, which clears it for each wait).
    private SourceCore<bool> _core;
    private WaitState? _waitState; // created by the first cancelable or timed wait, then reused: a signal awaited without either stays small

    /// <summary>
    /// What one wait holds: its cancellation (its registration, its token, which a late callback is checked against, and
    /// the version of the wait it may cancel) and its timeout's timer, if it has one. Owned by one wait at a time
    /// (<see cref="_holder"/>), and ended only by that wait's end (<see cref="EndWait"/>).
    /// </summary>
    private sealed class WaitState
    {
        private const int NoHolder = -1;
        private const int Taking = -2;

        // Whose registration, token and timer the fields below hold: a wait's token (as 0..65535), NoHolder, or Taking
        // while an ending copies them out (a few stores; the drop and the stop come after, on the ender's copies).
        // Invariant: only the wait named here has anything stored, and only the thread that moved it from that wait's
        // token to Taking touches the fields until it writes NoHolder. A wait names itself (Hold) under the core's arming
        // mark, after it has ended whatever was held, and before it stores anything; a read of a wait that is over takes
        // only what that wait holds (TryTake with its token). So a read of an old wait, which may still be running on
        // another thread (a forgotten wait's observer, run by the set) when the owner arms its next wait, can never end
        // the next wait's registration or timer: it used to drop the next wait's registration (the wait then ignored its
        // token: a lost wake-up), or stop its timer once the pooled timer object had been reused for it.
        private int _holder = NoHolder;

        public CancellationTokenRegistration Registration;
        public CancellationToken Token;

        /// <summary>Written with a release after <see cref="Token"/>, read with an acquire before it (see <see cref="Cancel"/>).</summary>
        public short Version;

        public SignalTimeout? Timeout;

        /// <summary>
        /// The token that canceled the last wait, kept for a reader that throws (<see cref="ILazyCanceledSource"/>): written
        /// by the canceller under the core's completion claim, before it publishes; dropped by the next wait under the
        /// arming mark once the version has moved on (so a late read of the canceled wait finds its token stale).
        /// Not cleared by <see cref="TryTake"/>: a signal's wait may be read again, and each throwing read needs it.
        /// </summary>
        public CancellationToken CanceledBy;

        /// <summary>True while a canceled wait's token is kept (<see cref="CanceledBy"/>): the next wait drops it.</summary>
        public bool HoldsCancellation => CanceledBy.CanBeCanceled;

        /// <summary>
        /// True while a wait's registration or timer is held (or being taken): the current wait's, or that of one that
        /// completed and was never read (the next wait ends it). Read by a new wait before it holds the arming mark: what
        /// a wait that is over holds can only go away meanwhile (a wait that is storing its own is pending, or holds the
        /// mark, so the new wait is rejected).
        /// </summary>
        public bool HoldsWait => Volatile.Read(ref _holder) != NoHolder;

        /// <summary>Under the arming mark, with nothing held: wait <paramref name="token"/> is about to store what it holds.</summary>
        public void Hold(short token)
        {
            Debug.Assert(Volatile.Read(ref _holder) == NoHolder, "the previous wait's state was ended first");
            Volatile.Write(ref _holder, (ushort)token);
        }

        /// <summary>
        /// Takes what wait <paramref name="onlyWait"/> holds (or, with <see cref="AnyWait"/>, whatever is held: only a new
        /// wait, under the arming mark), clearing the fields: true with the registration and the timer, for the caller to
        /// drop and stop outside (a drop may wait for a callback in flight). False if that wait holds nothing (any more),
        /// or another thread is taking what it holds. With <see cref="AnyWait"/>, an ending in progress elsewhere is
        /// waited for, a few stores, so that the caller may store the new wait's state once this returns.
        /// </summary>
        public bool TryTake(int onlyWait, Signal signal, out CancellationTokenRegistration registration, out SignalTimeout? timeout)
        {
            SpinWait spin = default;
            while (true)
            {
                int holder = Volatile.Read(ref _holder);
                if (holder == Taking && onlyWait == AnyWait)
                {
                    spin.SpinOnce();
                    continue;
                }
                if (holder < 0 || (onlyWait != AnyWait && holder != (ushort)onlyWait))
                {
                    registration = default;
                    timeout = null;
                    return false;
                }
#if DEBUG
                if (onlyWait != AnyWait)
                {
                    TestHookBeforeEndingRead?.Invoke(signal);
                }
#endif
                if (Interlocked.CompareExchange(ref _holder, Taking, holder) == holder)
                {
                    registration = Registration;
                    Registration = default;
                    Token = default;
                    timeout = Timeout;
                    Timeout = null;
                    Volatile.Write(ref _holder, NoHolder);
                    return true;
                }
            }
        }
    }

    /// <summary>Creates a signal whose waiter runs on the thread that sets it (as far as a bounded nesting depth).</summary>
    /// <param name="initiallySet">True to start in the set state, so the first wait completes at once.</param>
    public Signal(bool initiallySet = false) => _core.InitializeSignal(initiallySet);

    /// <summary>Creates a signal.</summary>
    /// <param name="initiallySet">True to start in the set state, so the first wait completes at once.</param>
    /// <param name="runContinuationsAsynchronously">
    /// True to queue the released waiter to Spindle's workers instead of running it on the thread that calls
    /// <see cref="Set"/> (or cancels the wait), as the BCL's <c>TaskCreationOptions.RunContinuationsAsynchronously</c>
    /// does: the setter returns at once. Still allocates nothing.
    /// </param>
    /// <exception cref="InvalidOperationException"><paramref name="runContinuationsAsynchronously"/> is true, the workers had not started (this starts them), and the SPINDLE_WORKERS environment variable is invalid (see <see cref="Spindle.WorkerCount"/>).</exception>
    public Signal(bool initiallySet, bool runContinuationsAsynchronously)
        : this(initiallySet)
    {
        if (runContinuationsAsynchronously)
        {
            _core.RunContinuationsAsynchronously();
        }
    }

    /// <summary>True if a released waiter is queued to the workers, not run on the thread that sets the signal.</summary>
    public bool RunsContinuationsAsynchronously => _core.DispatchesContinuations;

    /// <summary>True when the signal is set and no wait has consumed it yet.</summary>
    public bool IsSet => _core.IsSignaled;

    /// <summary>True when a wait is pending.</summary>
    public bool HasWaiter => _core.IsWaitPending;

    /// <summary>What a debugger shows: whether it is set and whether a wait is pending.</summary>
    private string DebuggerDisplay => $"IsSet = {IsSet}, HasWaiter = {HasWaiter}";

    /// <summary>
    /// Tests only: a wait's continuation has registered, not only the wait armed (<see cref="HasWaiter"/> is true from
    /// the call to <see cref="WaitAsync(CancellationToken)"/>, before its await registers).
    /// </summary>
    internal bool HasRegisteredWaiterForTests => _core.IsWaitRegistered;

    /// <summary>
    /// Waits for the signal. Completes at once (consuming the signal) if it is set. A canceled wait completes as
    /// canceled at once and leaves nothing registered.
    /// </summary>
    /// <param name="cancellationToken">
    /// Cancels the wait. The cancellation is kept as a value: a read that throws it builds its
    /// <see cref="System.Threading.Tasks.TaskCanceledException"/>, with this token, then, so an await with
    /// <see cref="SpindleTask.SuppressCancellationThrow"/> builds none (a server that cancels many waiting sessions at
    /// once pays no exception per wait). The signal keeps the token until its next wait starts.
    /// </param>
    /// <exception cref="InvalidOperationException">Another wait is already pending.</exception>
    public SpindleTask WaitAsync(CancellationToken cancellationToken = default)
    {
        // A canceled token wins over a set signal (as SemaphoreSlim does), and leaves the signal set for the next wait.
        if (cancellationToken.IsCancellationRequested)
        {
            return SpindleTask.FromCanceled(cancellationToken);
        }
        return TryArmWait(cancellationToken, null, default, out short token, out _) ? new SpindleTask(this, token) : default;
    }

    /// <summary>
    /// Waits for the signal for at most <paramref name="timeout"/>, on <see cref="TimerWheel.Default"/>: the task's result
    /// is true if the wait took a set, false if the timeout passed first (the signal is then idle: a later
    /// <see cref="Set"/> is kept for the next wait). As <c>SemaphoreSlim.WaitAsync(TimeSpan)</c>, and allocation-free: the
    /// lean form of <c>WhenAny(signal.WaitAsync(), Spindle.Delay(timeout))</c>, with no combinator.
    /// </summary>
    /// <param name="timeout">
    /// How long to wait, rounded up to the wheel's 1 ms tick (never early). <see cref="TimeSpan.Zero"/> only takes a set
    /// that is there now (true) or returns false at once; <see cref="Timeout.InfiniteTimeSpan"/> waits with no timeout.
    /// </param>
    /// <param name="cancellationToken">
    /// Cancels the wait: the task completes as canceled and nothing stays registered. The cancellation is kept as a
    /// value, as for <see cref="WaitAsync(CancellationToken)"/>: its exception is built only by a read that throws it.
    /// </param>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="timeout"/> is negative (other than <see cref="Timeout.InfiniteTimeSpan"/>) or longer than <see cref="TimerWheel.MaxDelay"/>.</exception>
    /// <exception cref="InvalidOperationException">Another wait is already pending; or a finite <paramref name="timeout"/>, and the workers had not started (this starts them: <see cref="TimerWheel.Default"/>'s timer thread hands the resumed code to them) and the SPINDLE_WORKERS environment variable is invalid (see <see cref="Spindle.WorkerCount"/>).</exception>
    /// <remarks>
    /// Exactly one of a set, the timeout, the token and a combinator letting go of the wait ends it.
    /// </remarks>
    public SpindleTask<bool> WaitAsync(TimeSpan timeout, CancellationToken cancellationToken = default)
        => WaitWithTimeout(timeout, null, cancellationToken);

    /// <summary>
    /// As <see cref="WaitAsync(TimeSpan, CancellationToken)"/>, with the timeout measured on <paramref name="timers"/>
    /// (a wheel on a <see cref="ManualClock"/> or another <see cref="TimeProvider"/>, in tests or simulations).
    /// </summary>
    /// <exception cref="ArgumentNullException"><paramref name="timers"/> is null.</exception>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="timeout"/> is negative (other than <see cref="Timeout.InfiniteTimeSpan"/>) or longer than <see cref="TimerWheel.MaxDelay"/>.</exception>
    /// <exception cref="ObjectDisposedException"><paramref name="timers"/> has been disposed.</exception>
    /// <exception cref="InvalidOperationException">A timer is needed on a wheel of <see cref="TimeProvider.System"/> (<see cref="TimerWheel.Default"/> among them), the workers had not started (this starts them, as its timer thread hands the resumed code to them), and the SPINDLE_WORKERS environment variable is invalid (see <see cref="Spindle.WorkerCount"/>).</exception>
    /// <exception cref="InvalidOperationException">Another wait is already pending.</exception>
    /// <remarks>
    /// If <paramref name="timers"/> is disposed while the wait is pending, the wait completes as canceled, as the wheel's
    /// pending delays do (<see cref="TimerWheel.Default"/> is never disposed).
    /// </remarks>
    public SpindleTask<bool> WaitAsync(TimeSpan timeout, TimerWheel timers, CancellationToken cancellationToken = default)
    {
        if (timers is null)
        {
            ThrowHelper.ThrowArgumentNull(nameof(timers));
        }
        return WaitWithTimeout(timeout, timers, cancellationToken);
    }

    private SpindleTask<bool> WaitWithTimeout(TimeSpan timeout, TimerWheel? timers, CancellationToken cancellationToken)
    {
        // Checked before anything changes, and for an infinite timeout too (which arms no timer), as WithTimeout does.
        TimerWheel? wheel = TimerWheel.ForTimeout(timeout, timers, nameof(timeout));
        if (cancellationToken.IsCancellationRequested)
        {
            return SpindleTask.FromCanceled<bool>(cancellationToken);
        }
        return TryArmWait(cancellationToken, wheel, timeout, out short token, out bool tookSet)
            ? new SpindleTask<bool>(this, token)
            : new SpindleTask<bool>(tookSet);
    }

    /// <summary>
    /// Starts a wait: true with the armed wait's <paramref name="token"/>, or false if it completed at once:
    /// <paramref name="tookSet"/> if it took a set that was there, or not if <paramref name="wheel"/> was given with a
    /// zero <paramref name="timeout"/> and no set was there (nothing is armed then). A non-null <paramref name="wheel"/>
    /// arms a timeout of <paramref name="timeout"/> on it.
    /// </summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    private bool TryArmWait(CancellationToken cancellationToken, TimerWheel? wheel, TimeSpan timeout, out short token, out bool tookSet)
    {
        // Read once: a wait racing this one (the caller's error) may create it, and must never have its registration
        // dropped by this wait. A wait that touches the wait state does so under the core's arming mark, so a second
        // WaitAsync racing this one is rejected until the state is stored, even if a Set ends this wait first. Every
        // wait, whatever it finds, ends the state that a previous wait which completed unread still holds (its
        // registration, its timer): so nothing stays registered or in the wheel behind a wait that is over.
        WaitState? state = _waitState;
        bool ending = state is not null && (state.HoldsWait || state.HoldsCancellation);
        bool arming = ending || cancellationToken.CanBeCanceled || wheel is not null;
        while (true)
        {
            SignalLook look = _core.LookForWait(ending, out int idle);
            if (look == SignalLook.Taken)
            {
                if (ending)
                {
                    StoreWaitState(state, default, null, default, 0, versionMoved: true); // ends the previous wait's state; stores none
                }
                token = 0;
                tookSet = true;
                return false;
            }
            if (look == SignalLook.WaitPending)
            {
                ThrowSecondWaiter();
            }
            if (wheel is not null && timeout == TimeSpan.Zero)
            {
                // Idle and not set: a zero timeout has passed already, and nothing is armed.
                if (ending)
                {
                    if (!_core.TryMarkIdle(idle))
                    {
                        continue; // a set landed since the look (or another wait started): look again
                    }
                    StoreWaitState(state, default, null, default, 0, versionMoved: false);
                }
                token = 0;
                tookSet = false;
                return false;
            }
            if (_core.TryArm(idle, arming, out token))
            {
                break;
            }
            // A set landed since the look (or another wait started): look again.
        }
        tookSet = false;
        if (arming)
        {
            StoreWaitState(state, cancellationToken, wheel, timeout, token, versionMoved: true);
        }
        return true;
    }

    /// <summary>
    /// The wait <paramref name="token"/>, armed with the arming mark, is its own: nothing else touches the wait state now.
    /// A previous wait that completed but was never read may still hold a registration (dropped here, waiting for its
    /// callback if one is running, which finds its version gone and does nothing) and a timer (stopped here); then this
    /// wait's are made, and the mark is cleared. A wait that armed nothing under the mark (it took a set, or its zero
    /// timeout passed) comes here with no token and no wheel: it only ends the previous wait's state. Kept out of
    /// <see cref="TryArmWait"/>, which is inlined into each WaitAsync: a wait with neither a token nor a timeout, after
    /// waits that were read, never comes here. <paramref name="versionMoved"/>: the previous wait's version is over (this
    /// wait armed or took a set), so the token a cancellation of it kept is dropped (a zero timeout that found nothing
    /// moves no version, and the previous wait may still be read: it keeps it for the next wait).
    /// </summary>
    private void StoreWaitState(WaitState? state, CancellationToken cancellationToken, TimerWheel? wheel, TimeSpan timeout, short token, bool versionMoved)
    {
        try
        {
#if DEBUG
            TestHookUnderArmingMark?.Invoke(this);
#endif
            EndWait(state);
            if (versionMoved && state is not null)
            {
                state.CanceledBy = default; // before this wait registers: its own cancellation may run at once
            }
            if (cancellationToken.CanBeCanceled || wheel is not null)
            {
                try
                {
                    state ??= _waitState = new WaitState();
                    state.Hold(token); // before anything is stored, so that a withdrawal takes whatever was
                    if (cancellationToken.CanBeCanceled)
                    {
                        state.Token = cancellationToken;
                        Volatile.Write(ref state.Version, token); // after the token (see Cancel)
                        state.Registration = CancellationRegistrations.Register(cancellationToken, s_cancel, this);
                    }
                    if (wheel is not null)
                    {
                        // The timer may fire at once (before this returns, on another thread): its continuation completes
                        // this wait only through the core's CAS for this version, as a cancellation does.
                        state.Timeout = SignalTimeout.Start(this, token, wheel, timeout);
                    }
                }
                catch
                {
                    // The wheel's clock (a TimeProvider's) threw as the timeout was started: the wait is armed, but the
                    // caller gets no task for it. Left so, it stayed pending for ever (every later WaitAsync threw "already
                    // pending", and the next Set went to it, lost): it is taken back before the exception goes on.
                    WithdrawWait(token);
                    throw;
                }
            }
        }
        finally
        {
            _core.EndArming();
        }
    }

    /// <summary>
    /// Under the arming mark, takes back wait <paramref name="token"/>, which its WaitAsync armed but is throwing out of:
    /// drops what it stored (its registration, waiting for a callback in flight; its timer, if it got one), so that only
    /// a set can still end it; then ends it with nothing taken, or, if a set ended it meanwhile, keeps that set for the
    /// next wait (the arming mark keeps any other wait out, so the signal is idle or set: <see cref="TryKeepSet"/> keeps
    /// it). A wait its token or its timer ended took no set. The signal is left as the call found it, but for that set.
    /// </summary>
    private void WithdrawWait(short token)
    {
        EndWait(_waitState, onlyWait: token);
        if (_core.TryBeginCompletionOfUse(token, out object? waiter))
        {
            Debug.Assert(waiter is null, "nobody had the wait's task, so nobody registered on it");
            _core.EndCompletion(waiter, null); // idle again, and nothing taken: nobody holds this wait to read it
        }
        else if (_core.Version == token && _core.IsCompleted && _core.Error is null && !_core.ResultUnchecked)
        {
            TryKeepSet(); // ended by a set
        }
    }

    /// <summary>Releases the pending wait, or sets the signal if nobody waits. Setting a set signal does nothing.</summary>
    public void Set() => _core.SetSignal();

    /// <summary>
    /// Keeps a set that landed on a wait a combinator is taking back (<see cref="WithdrawWait"/>): the signal is set now if
    /// no wait is armed (nothing runs); false if one is.
    /// </summary>
    internal bool TryKeepSet() => _core.TryKeepSignal();

    /// <summary>
    /// A combinator gives back the set that wait <paramref name="token"/> took, read by it and never handed to its caller,
    /// unless the set has reached somebody else: a waiter the set resumed, or a read of the wait besides the combinator's
    /// (a signal's wait may be read again). Then the set is theirs, and giving it back too would count one set twice.
    /// <paramref name="readByCaller"/>: the combinator read the wait with a read that marks (a pending combinator's slot,
    /// registered with <see cref="OnCompletedAsReader"/>, or one that found the wait completed; a WhenAny settled at the
    /// call, its winner); false for a read that does not (a WhenAny settled at the call, a losing wait it let go of, read
    /// with <see cref="ReadLosingWait"/>). Given back, the signal is set and the wait's token is stale, so a later read of
    /// it is the await-once error, never a second taker of that set (<c>SourceCore.TryGiveBackSet</c>). Runs nothing, so
    /// it may be called under a claim; a combinator gives back before it publishes, while the wait is still its own.
    /// </summary>
    internal void GiveBackSet(short token, bool readByCaller) => _core.TryGiveBackSet(token, readByCaller);

    /// <summary>
    /// A combinator that may give this wait's set back (<see cref="GiveBackSet"/>) registers its slot: as
    /// <see cref="OnCompleted(Action{object?}, object?, short)"/>, but a set that resumes the slot leaves the wait marked
    /// as read by nobody yet, and the slot's read marks it as any read does, so a misused read of the wait elsewhere is
    /// seen (<c>SourceCore.OnCompletedAsReader</c>).
    /// </summary>
    internal void OnCompletedAsReader(DirectWaiter slot, short token) => _core.OnCompletedAsReader(slot, token);

    /// <summary>Clears the signal if it is set and nobody has consumed it.</summary>
    public void Reset() => _core.TryClearSignal();

    /// <summary>
    /// The timer of wait <paramref name="wait"/> fired (<see cref="SignalTimeout"/>): the wait completes with "timed out"
    /// if it is still pending (the core's CAS for that version decides against a set, a cancellation and a combinator
    /// letting go of it), or as canceled if the wheel was disposed (<paramref name="stopped"/>).
    /// </summary>
    internal void TimeOut(short wait, Exception? stopped)
    {
        if (IsPendingWait(wait))
        {
            EndWaitEarly(wait, stopped is null ? null : ExceptionDispatchInfo.Capture(stopped));
        }
    }

    /// <summary>
    /// True while wait <paramref name="wait"/> is the current one and pending: a quick look that spares a canceller or a
    /// timer capturing an exception for a wait that has ended (the core's CAS checks again).
    /// </summary>
    private bool IsPendingWait(short wait) => _core.IsWaitPending && _core.Version == wait;

    /// <summary>
    /// Ends wait <paramref name="wait"/> before any set, if it is still pending: as canceled with
    /// <paramref name="failure"/> (captured before the claim, see SourceCore.TrySetException), or, with none, as timed
    /// out. The core's CAS for that version only decides against a set, the other of timeout and token, and a
    /// combinator letting go of the wait.
    /// </summary>
    private void EndWaitEarly(short wait, ExceptionDispatchInfo? failure)
    {
        if (!_core.TryBeginCompletionOfUse(wait, out object? waiter))
        {
            return;
        }
        if (failure is null)
        {
            _core.EndCompletionWithResult(waiter, true);
        }
        else
        {
            _core.EndCompletion(waiter, failure);
        }
    }

    /// <summary>
    /// For a combinator that read wait <paramref name="token"/>, which succeeded: true if it took a set (false if its
    /// timeout passed). The combinator holds the wait, so the signal cannot have moved on to another.
    /// </summary>
    internal bool TookSet(short token) => _core.Version == token && !_core.ResultUnchecked;

    /// <summary>
    /// A wait's token was cancelled (its registration's callback): ends the current wait as canceled if it is pending and
    /// its own token is the one cancelled. A callback may still be running for an earlier wait when a later one stores
    /// its state: an ending waits for a callback in flight as it drops the registration, but a read of the earlier wait
    /// on another thread may be the one dropping it, and the next wait does not wait for that. So the version is read
    /// first, then the token, which every wait stores before its version (<see cref="StoreWaitState"/>): the token read is
    /// that version's wait's, or a later wait's (and then that version's wait is over, so nothing happens). A later wait
    /// is ended only if its own token is the one cancelled, or (on netstandard2.1, whose callback gets no token) is
    /// cancelled too.
    /// </summary>
#if NET
    private void Cancel(CancellationToken cancelled)
#else
    private void Cancel()
#endif
    {
        if (_waitState is not { } state)
        {
            return;
        }
        short version = Volatile.Read(ref state.Version);
        CancellationToken token = state.Token;
#if NET
        if (token != cancelled)
#else
        if (!token.IsCancellationRequested)
#endif
        {
            return;
        }
        if (IsPendingWait(version) && _core.TryBeginCompletionOfUse(version, out object? waiter))
        {
            // Lazily: the exception is built only for a reader that throws it (LazyCancellation); the token is stored
            // under the claim, before the publication, so every reader of this wait finds it.
            state.CanceledBy = token;
            _core.EndCompletionCanceledLazily(waiter);
        }
    }

    /// <summary>The token that canceled the last wait (<see cref="ILazyCanceledSource"/>): kept until the next wait starts.</summary>
    CancellationToken ILazyCanceledSource.CanceledBy => _waitState?.CanceledBy ?? default;

    /// <summary>
    /// A WhenAny that no longer needs this wait leaves it: the signal goes back to idle without consuming a set (a later
    /// <see cref="Set"/> is kept for the next wait), so the owner can wait on it again at once.
    /// </summary>
    DetachOutcome IDetachableSource.TryDetach(DirectWaiter waiter)
    {
        DetachOutcome outcome = _core.TryAbandonWaiter(waiter, out short abandoned);
        if (outcome == DetachOutcome.Detached)
        {
            EndAbandonedWait(abandoned);
        }
        return outcome;
    }

    bool IDetachableSource.TryAbandon(short token)
    {
        if (!_core.TryAbandon(token))
        {
            return false;
        }
        EndAbandonedWait(token);
        return true;
    }

    /// <summary>
    /// A combinator let go of the current wait (the core's use is Abandoned: no set or cancellation completes it, and no
    /// new wait starts until it is released): drops its cancellation, then makes the signal idle again. A set that landed
    /// meanwhile is kept for the next wait.
    /// </summary>
    private void EndAbandonedWait(short wait)
    {
        EndWait(_waitState, onlyWait: wait);
        _core.ReleaseAbandoned(wait); // false: a set landed meanwhile (kept, the signal is set), nothing else to do
    }

    private static void ThrowSecondWaiter() => ThrowHelper.ThrowInvalidOperation(
        "A wait on this Signal is already pending. A Signal has one waiter at a time; give each waiter its own Signal. If the " +
        "earlier wait was given a combinator of its own (WithCancellation, WithTimeout, a WhenAll) and that combined task lost a " +
        "WhenAny, the combined task still holds the wait until it ends (a WhenAny lets go of a signal's wait, not of a combined " +
        "task): pass the token or timeout to the wait itself, WaitAsync(cancellationToken) or WaitAsync(timeout, cancellationToken), " +
        "and race that.");

    /// <inheritdoc/>
    [StackTraceHidden]
    public SpindleTaskStatus GetStatus(short token) => _core.GetStatus(token);

    [StackTraceHidden]
    ValueTaskSourceStatus IValueTaskSource.GetStatus(short token) => (ValueTaskSourceStatus)_core.GetStatus(token);

    /// <inheritdoc/>
    [StackTraceHidden]
    public void GetResult(short token) => ReadWait(token);

    /// <summary>Reads wait <paramref name="token"/>: true if it took a set, false if its timeout passed (only a wait with a timeout can).</summary>
    [StackTraceHidden]
    bool ISpindleSource<bool>.GetResult(short token) => ReadWait(token);

    [StackTraceHidden]
    bool IValueTaskSource<bool>.GetResult(short token) => ReadWait(token);

    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    [StackTraceHidden]
    private bool ReadWait(short token)
    {
        bool tookSet = ReadWaitQuietly(token, out ExceptionDispatchInfo? error);
        if (error is not null)
        {
            throw LazyCancellation.ToThrow(error); // a cancellation this read built is thrown as built (docs/decisions.md section 43)
        }
        return tookSet;
    }

    /// <summary>
    /// Reads wait <paramref name="token"/> as <see cref="GetResult(short)"/> does, with its failure (a canceled wait)
    /// handed back instead of thrown (<see cref="IQuietSource"/>); misuse still throws. A set it finds has reached this
    /// reader: marked so that no combinator gives it back as well (<c>SourceCore.MarkSetRead</c>, a bit test for the
    /// waiter the set resumed).
    /// </summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    private bool ReadWaitQuietly(short token, out ExceptionDispatchInfo? error)
    {
        bool tookSet = ReadLosingWait(token, out error);
        if (tookSet)
        {
            _core.MarkSetRead(token);
        }
        return tookSet;
    }

    /// <summary>
    /// Reads wait <paramref name="token"/> as <see cref="ReadWaitQuietly"/> does, but leaves a set it finds unmarked: for a
    /// WhenAny settled at the call that reads a losing wait to give its set back (<see cref="GiveBackSet"/>) if nobody
    /// else has it. Pending and awaited elsewhere (the caller's error), the read's registration is refused with the
    /// await-once error.
    /// </summary>
    internal bool ReadLosingWait(short token, out ExceptionDispatchInfo? error)
    {
        _core.ValidateToken(token);
        try
        {
            return !_core.ReadQuietly(token, this, out error);
        }
        finally
        {
            // The wait is over: drop its cancellation registration and stop its timer, so nothing stays registered behind
            // it. Only if it is over: a misused read of a pending wait (a second await, which throws) must not touch the
            // state of the wait its real awaiter is still waiting on. And only what this wait holds: the owner may arm
            // its next wait at any moment from here on, and that wait's state is never this read's (WaitState.TryTake).
            if (_core.IsCompleted && _core.Version == token)
            {
                EndWait(_waitState, onlyWait: token);
            }
        }
    }

    /// <summary>
    /// The observer of a forgotten wait (<see cref="ForgetObserver"/>) ends wait <paramref name="token"/>, which has
    /// completed: it runs on the thread that ended it, after the publication, when the owner may already be starting its
    /// next wait (a forgotten wait gives the owner no task to await, so it cannot know when its observer has read). A
    /// signal's wait never faults (a set and a timeout succeed; a token, and a disposed wheel under a timeout, cancel), so
    /// there is nothing to report, and the wait is not read: a read that met the next wait's arming between its token
    /// check and its outcome's was refused as stale, and the observer reported that refusal as the await-once error
    /// (LazyCancellationRaceTests); a lazily cancelled wait's read built its exception for nobody. It only ends what the
    /// wait still holds (its registration, its timer), as a read does, and never the next wait's (WaitState.TryTake).
    /// </summary>
    internal void EndForgottenWait(short token) => EndWait(_waitState, onlyWait: token);

#if DEBUG
    /// <summary>
    /// Tests only (a Debug build): runs on the waiting thread once its WaitAsync holds the core's arming mark (it armed a
    /// wait, took a set, or found its zero timeout passed), before it ends the previous wait's state: the window in which
    /// a combinator still holding that previous wait reads it and gives its set back.
    /// </summary>
    [ThreadStatic]
    internal static Action<Signal>? TestHookUnderArmingMark;

    /// <summary>
    /// Tests only (a Debug build): runs on the reading thread when a read of a wait has found it over, and what it holds
    /// (its registration, its timer) still held, just before it takes them: the instant at which the owner's next wait
    /// may arm and store its own.
    /// </summary>
    internal static Action<Signal>? TestHookBeforeEndingRead;

    /// <summary>
    /// Tests only (a Debug build): runs on the thread of a read (or a combinator's or a forgotten wait's ending) that has
    /// taken what the wait held (its registration, its timer), before it drops and stops them: a reader held up there
    /// while the owner starts its next wait. What it took is its own, so that must change nothing.
    /// </summary>
    internal static Action<Signal>? TestHookAfterEndingReadTook;
#endif

    bool IQuietSource<bool>.ReadQuietly(short token, out ExceptionDispatchInfo? error) => ReadWaitQuietly(token, out error);

    ExceptionDispatchInfo? IQuietSource.ReadQuietly(short token)
    {
        ReadWaitQuietly(token, out ExceptionDispatchInfo? error);
        return error;
    }

    /// <summary>Whatever wait holds the state (outside a token's range): see <see cref="EndWait"/>.</summary>
    private const int AnyWait = int.MinValue;

    /// <summary>
    /// A wait is over (read, let go of, withdrawn, or followed by a new one): drops its cancellation registration (waiting
    /// for its callback if one is running) and stops its timer. With <paramref name="onlyWait"/> (a token), only if that
    /// wait holds them; with <see cref="AnyWait"/> (a new wait, under the arming mark), whatever a previous wait holds.
    /// </summary>
    private void EndWait(WaitState? state, int onlyWait = AnyWait)
    {
        if (state is not null && state.TryTake(onlyWait, this, out CancellationTokenRegistration registration, out SignalTimeout? timeout))
        {
#if DEBUG
            if (onlyWait != AnyWait)
            {
                TestHookAfterEndingReadTook?.Invoke(this);
            }
#endif
            CancellationRegistrations.Drop(ref registration);
            timeout?.Stop();
        }
    }

    /// <inheritdoc/>
    [StackTraceHidden]
    public void OnCompleted(Action<object?> continuation, object? state, short token) => _core.OnCompleted(continuation, state, token);

    [StackTraceHidden]
    void IValueTaskSource.OnCompleted(Action<object?> continuation, object? state, short token, ValueTaskSourceOnCompletedFlags flags)
        => _core.OnCompleted(continuation, state, token, flags);

    [StackTraceHidden]
    ValueTaskSourceStatus IValueTaskSource<bool>.GetStatus(short token) => (ValueTaskSourceStatus)_core.GetStatus(token);

    [StackTraceHidden]
    void IValueTaskSource<bool>.OnCompleted(Action<object?> continuation, object? state, short token, ValueTaskSourceOnCompletedFlags flags)
        => _core.OnCompleted(continuation, state, token, flags);
}

using System;
using System.Diagnostics;
using System.Runtime.ExceptionServices;
using System.Threading;
using System.Threading.Tasks.Sources;

namespace SpindleLib;

/// <summary>
/// One pending delay: the awaitable source and the timer wheel's list node in one pooled object, so a delay costs
/// no second allocation (Tokio embeds its timer entry in the future for the same reason).
/// </summary>
/// <remarks>
/// <para><b>One outcome.</b> Firing and cancellation race through the completion core: the wheel fires with
/// <see cref="SourceCore{TResult}.TrySetVoidResultDeferred"/>, a cancellation completes with TrySetCanceled, and the
/// core's single CAS picks exactly one of them.</para>
/// <para><b>Who holds the node.</b> The wheel (its inbox, a slot list, or its cancel inbox) and the consumer (whoever
/// reads the result). A fired node has already left the wheel when the core publishes, so its consumer recycles it
/// at once. A cancelled node may still be linked in a slot; the canceller pushes it to the wheel's cancel inbox, and
/// the wheel's owner and the consumer each add one to its count of holders that let go (<see cref="LetGo"/>): the second recycles.
/// A canceller that is the shard's owner (a worker ending a timer of its own shard) unlinks it at once instead and lets
/// go for the wheel itself (<see cref="WheelShard.TryUnlinkAsOwner"/>); one that is the consumer too (a timeout whose task
/// won, a delay let go of unread) holds both parts, and recycles the node there. A node that never
/// enters the wheel (a timer that is never due, such as an infinite delay, which its wheel holds weakly if at all, see
/// <see cref="NeverDueTimers"/>) has that count at 1 from the start, so its consumer alone recycles it.</para>
/// <para><b>Ordering.</b> A node is pushed to the insert inbox before its cancellation is registered, and its token is
/// stored only then, so a cancellation (including a late callback from a previous use, which the token check filters)
/// always reaches the cancel inbox after the node reached the insert inbox. The owner takes its cancel snapshot
/// before its insert snapshot, so it never releases a node that is still waiting to be linked.</para>
/// </remarks>
[StackTraceHidden]
internal sealed class TimerNode : WheelNode, ISpindleSource, IDetachableSource, IPoolNode<TimerNode>, IQuietSource, ILazyCanceledSource
{
#if NET
    private static readonly Action<object?, CancellationToken> s_onTokenCanceled = static (o, ct) => ((TimerNode)o!).OnTokenCanceled(ct);
#else
    private static readonly Action<object?> s_onTokenCanceled = static o => ((TimerNode)o!).OnTokenCanceled(((TimerNode)o!)._token);
#endif

    private SourceCore<VoidResult> _core;

    /// <summary>Next node in the cancel inbox; also the pool's link (a pooled node is in no inbox).</summary>
    internal TimerNode? NextCancel;

    /// <summary>The deepest insert inbox <see cref="InboxDepth"/> counts (2^29 - 1): deeper, it stays there.</summary>
    internal const int MaxInboxDepth = int.MaxValue >> ReleaseBits;

    private const int ReleaseBits = 2;
    private const int ReleasesMask = (1 << ReleaseBits) - 1;

    // Two counts in one word. The low two bits: how many of the node's two holders (the wheel's owner, the consumer)
    // have let go. Invariant: exactly one of them moves it to 2, and that one recycles the node, once (a reference count
    // of two, as COM's or Linux's kref, counted up); it never passes 2, so an increment never carries into the bits above.
    // The bits above: the insert inbox's depth with this node on top (InboxDepth). One word, since two ints left a 4 B
    // hole before the core (its fields are 8 B aligned) and made the node 120 B instead of 112. The two never write at
    // once: the depth is written only by the push that publishes the node (WheelShard.Push, before its CAS), and before
    // that nothing can let go of it (its consumer has no task yet, its token is not registered, the wheel has not seen
    // it, and every holder of its previous use let go before it was recycled); the holders' increments come after.
    private int _depthAndReleases;
    private CancellationToken _token;
    private CancellationTokenRegistration _registration;

    // Where this use lives: its shard (a timer that is due) or the wheel that holds it as never due; one field, since a
    // never-due node never enters a shard (TimerWheel.InfiniteDelay leaves it out of the wheel), so the two are never both
    // set. One field keeps a delay's node 8 B smaller (128 → 120 B then, 112 B since the two counts share a word; a million
    // timed waits, 8 MB).
    private object? _home;

    /// <summary>The shard the node was added to (set when it is pushed or linked); its cancellation goes there.</summary>
    internal WheelShard? Shard
    {
        get => _home as WheelShard;
        set
        {
            Debug.Assert(_home is null or WheelShard, "a never-due node never enters a shard");
            _home = value;
        }
    }

    /// <summary>
    /// The wheel that holds this use weakly as a timer that is never due (<see cref="NeverDueTimers"/>), or null: set when
    /// the wheel takes it, cleared when the node is recycled, so a stale entry of the wheel's never-due list never acts on
    /// the node's later uses.
    /// </summary>
    internal TimerWheel? NeverDueOn
    {
        get => _home as TimerWheel;
        set
        {
            Debug.Assert(_home is null or TimerWheel, "a node in a shard is never a never-due timer");
            _home = value;
        }
    }

    ref TimerNode? IPoolNode<TimerNode>.Next => ref NextCancel;

    public short Version => _core.Version;

    /// <summary>True once fired or cancelled.</summary>
    public bool IsCompleted => _core.IsCompleted;

    /// <summary>Rents a node for one delay on <paramref name="wheel"/> (null for a delay that never enters a wheel).</summary>
    public static TimerNode Rent(TimerWheel? wheel)
    {
        TimerNode node = ObjectPool<TimerNode>.TryRent() ?? new TimerNode();
        node.SetReleases(wheel is null ? 1 : 0);
        return node;
    }

    /// <summary>
    /// This use will never be in a wheel (a timer that is never due, which its wheel holds weakly if at all): its consumer
    /// alone recycles it, as if it had been rented for no wheel. Before the node is published.
    /// </summary>
    public void LeaveOutOfWheel() => SetReleases(1);

    /// <summary>
    /// Starts a use's count of holders that let go, before the node is published. The depth bits stay: a producer that
    /// read this node as its inbox's head during its previous use may still read its depth (see
    /// <see cref="WheelShard.PendingCount"/>), and finds what it would have found before.
    /// </summary>
    private void SetReleases(int released) => _depthAndReleases = (_depthAndReleases & ~ReleasesMask) | released;

    /// <summary>One of the node's two holders lets go: true for the second, which recycles the node.</summary>
    private bool LetGo()
    {
        int released = Interlocked.Increment(ref _depthAndReleases) & ReleasesMask;
        Debug.Assert(released is 1 or 2, "a holder let go twice: the count carried into the inbox depth");
        return released == 2;
    }

    /// <summary>
    /// How many nodes the insert inbox held with this one on top (written before the push; read only for PendingCount,
    /// which it may leave wrong until the next drain: see <see cref="WheelShard.PendingCount"/>). At most
    /// <see cref="MaxInboxDepth"/>.
    /// </summary>
    internal int InboxDepth
    {
        get => (int)((uint)_depthAndReleases >> ReleaseBits);
        set
        {
            // Only the push that publishes the node writes it, before its CAS: nothing else writes the word meanwhile.
            Debug.Assert(value is >= 0 and <= MaxInboxDepth, "a depth the word holds");
            _depthAndReleases = (value << ReleaseBits) | (_depthAndReleases & ReleasesMask);
        }
    }

    /// <summary>True while this node is use <paramref name="use"/>, still pending, of a never-due timer that <paramref name="wheel"/> holds.</summary>
    public bool IsNeverDueOf(TimerWheel wheel, short use) => NeverDueOn == wheel && _core.Version == use && !_core.IsCompleted;

    /// <summary>
    /// The wheel's Dispose cancels its never-due timer: completes use <paramref name="use"/> as canceled by the disposal,
    /// lazily (<see cref="TimerWheel.DisposalToken"/>), running its continuation, if the node is still that use of a
    /// never-due timer of <paramref name="wheel"/> and pending. Such a node is in no wheel, so nothing else is to do: its
    /// consumer recycles it when it reads it.
    /// </summary>
    public bool TryCancelNeverDue(TimerWheel wheel, short use)
    {
        if (NeverDueOn != wheel)
        {
            return false; // recycled since the wheel took it (and maybe another timer's now)
        }
#if DEBUG
        TestHookBeforeNeverDueClaim?.Invoke(this);
#endif
        if (!_core.TryBeginCompletionOfUse(use, out object? waiter))
        {
            return false; // ended meanwhile (its token, a combinator letting go of it), or a later use
        }
        _token = TimerWheel.DisposalToken; // only the claim's winner writes it, before the outcome is published
        _core.EndCompletionCanceledLazily(waiter);
        return true;
    }

    /// <summary>
    /// The task of a wait asked for with <paramref name="cancellationToken"/> already cancelled (a delay, a frame wait): a
    /// pooled node rented for no wheel (its consumer alone recycles it), completed at once as canceled, lazily
    /// (<see cref="ILazyCanceledSource"/>), as a node cancelled while it waits: the exception is built only for a reader
    /// that throws it, so a suppressed await (<c>SuppressCancellationThrow()</c>) builds none and, the node being pooled,
    /// allocates nothing. <c>SpindleTask.FromCanceled</c> builds its exception lazily too, but allocates its source (40
    /// bytes): it has a typed form and may be read any number of times, which a pooled node, read once, may not. The
    /// signal's, <c>Spindle.Run</c>'s, the combinators' and the tick wait's already-cancelled paths return it.
    /// </summary>
    public static SpindleTask CanceledAtOnce(CancellationToken cancellationToken)
    {
        TimerNode node = Rent(null);
        short use = node.Version;
        node._token = cancellationToken;
        node._core.TrySetCanceledLazily();
        return new SpindleTask(node, use);
    }

    /// <summary>
    /// Keeps the token of this use, before the node is published (inserted): a wheel's Dispose may end the use as soon as
    /// it is, and writes <see cref="TimerWheel.DisposalToken"/> here then, which a later write would hide (a read then
    /// said "A task was canceled." instead of naming the disposal).
    /// </summary>
    public void KeepToken(CancellationToken cancellationToken) => _token = cancellationToken;

    /// <summary>Registers the cancellation of this use by <paramref name="cancellationToken"/>, the token <see cref="KeepToken"/> kept. Called after the node is in the insert inbox (see remarks).</summary>
    public void RegisterCancellation(CancellationToken cancellationToken)
    {
        Debug.Assert(_token == cancellationToken || _token == TimerWheel.DisposalToken, "KeepToken first: a callback for another token is ignored");
        _registration = CancellationRegistrations.Register(cancellationToken, s_onTokenCanceled, this);
    }

    /// <summary>The wheel's owner fires the node: true if it won, with the waiter to run (or dispatch) afterwards.</summary>
    public bool TryFire(out object? waiter, out object? state) => _core.TrySetVoidResultDeferred(out waiter, out state);

    private void OnTokenCanceled(CancellationToken cancellationToken)
    {
        // A callback from an earlier use of this node (Unregister does not wait for one in flight) must not cancel this use.
        if (cancellationToken != _token)
        {
            return;
        }
        Cancel(byDisposal: false); // lazily: the exception is built only for a reader that throws it (LazyCancellation)
    }

    /// <summary>The token that canceled this use (<see cref="ILazyCanceledSource"/>): it stays until the node is recycled.</summary>
    CancellationToken ILazyCanceledSource.CanceledBy => _token;

    /// <summary>
    /// Cancels the delay if it is still pending: completes it as canceled by its token, or by its wheel's disposal
    /// (<paramref name="byDisposal"/>: <see cref="TimerWheel.DisposalToken"/> replaces the token), lazily either way, so
    /// the exception is built only for a reader that throws it (running its continuation), and hands the node to the
    /// wheel's cancel inbox. Returns false if the delay had already fired or been cancelled.
    /// </summary>
    public bool Cancel(bool byDisposal)
    {
        WheelShard? shard = Shard;
        bool won = false;
        try
        {
            won = byDisposal ? _core.TrySetCanceledKeepingToken(ref _token, TimerWheel.DisposalToken) : _core.TrySetCanceledLazily();
        }
        catch
        {
            // Only the continuation, run after the core published the outcome, can throw: this call won. Its exception
            // goes to the canceller, but the node must still reach the wheel's owner, or it stays linked (and counted)
            // until its deadline and is never recycled.
            won = true;
            throw;
        }
        finally
        {
            // The consumer may already have read the result, but cannot recycle the node before the wheel releases it.
            if (won && shard is not null)
            {
                if (shard.TryUnlinkAsOwner(this))
                {
                    ReleaseFromWheel(); // cancelled on the worker that owns the shard: the wheel's hold, let go of now
                }
                else
                {
                    shard.PushCancel(this);
                }
            }
        }
        return won;
    }

    /// <summary>
    /// Takes back a timer that its owner no longer needs (the operation it guarded finished first), with no exception
    /// and no allocation: the cheap cancellation that "timeouts that are mostly cancelled" need. Returns false if the
    /// timer had already fired (or been cancelled by the wheel's disposal): its continuation then runs, or ran.
    /// </summary>
    /// <remarks>
    /// The one CAS in the core still decides between firing and this; the node then goes to its shard's cancel inbox
    /// exactly as a cancellation does (the owner unlinks it and lets go of it), or, on the worker that owns the shard,
    /// leaves the wheel here and is recycled at once (<see cref="WheelShard.TryUnlinkAsOwner"/>: about 30 ns less for a
    /// timeout answered in time on a worker, <c>docs/decisions.md</c> section 57). The continuation the caller registered
    /// is dropped, not run: the caller is the consumer, and lets go of the consumer's hold here. The version is not
    /// advanced (nothing reads the result), which is harmless because the token never left the caller, except for a node
    /// in no shard (a timer that is never due), whose wheel's never-due list holds the token: its version steps, so that
    /// a Dispose that found it a moment before cannot claim the node's next use (<c>NeverDueReuseTests</c>). Only for a node
    /// already in a wheel (or held by none: one never due) whose continuation belongs to the caller (<see cref="TimeoutTimer"/>
    /// guarantees both).
    /// </remarks>
    public bool TryCancelQuietly()
    {
        Debug.Assert(_registration.Equals(default(CancellationTokenRegistration)), "a quiet cancel drops no registration: a timeout's node has none");
        WheelShard? shard = Shard;
        if (!_core.TrySetVoidResultDeferred(out _, out _))
        {
            return false;
        }
        if (shard is not null)
        {
            if (shard.TryUnlinkAsOwner(this))
            {
                Recycle(); // the two holders, the wheel's owner and the consumer, are both this thread: nothing else holds it
                return true;
            }
            shard.PushCancel(this);
        }
        else
        {
            // In no shard: a timer that is never due, which its wheel's Dispose may still be about to cancel by this use's
            // token (NeverDueTimers keeps it). The token has left the caller after all, so the use ends with a version step,
            // as a read's does: recycled with the same version, the node's next use (another wheel's timer) matched it.
            _core.Reset();
        }
        ReleaseFromWheel(); // the consumer's hold; the second of consumer and owner recycles the node
        return true;
    }

    /// <summary>
    /// A frame-loop wait that a combinator let go of stops its timer, use <paramref name="token"/>, if it has not fired or
    /// been cancelled: the timer leaves the wheel now (through the cancel inbox, as a cancellation), the waiter's callback
    /// is dropped, not run, and the caller lets go of the node as its consumer. The token check keeps a node that fired,
    /// was read and went on to another delay from being stopped. False if the use has fired or was cancelled: its callback
    /// runs, or ran.
    /// </summary>
    internal bool TryStopUnread(short token)
    {
        WheelShard? shard = Shard;
        if (!_core.TryBeginCompletionOfUse(token, out _))
        {
            return false;
        }
        _core.EndCompletion(null, null); // published as a success that nobody reads; the registered callback is dropped
        LeaveWheelUnread(shard);
        return true;
    }

    /// <summary>
    /// A use that ended unread while the node may still be linked in a slot (stopped, or abandoned by a combinator): the
    /// owner unlinks it and lets go, as for a cancellation; the token's registration is dropped, and the consumer's hold
    /// let go of here. <paramref name="shard"/> was read before the use ended.
    /// </summary>
    private void LeaveWheelUnread(WheelShard? shard)
    {
        if (shard is not null && shard.TryUnlinkAsOwner(this))
        {
            CancellationRegistrations.Drop(ref _registration);
            Recycle(); // the two holders, the wheel's owner and the consumer, are both this thread: nothing else holds it
            return;
        }
        shard?.PushCancel(this);
        CancellationRegistrations.Drop(ref _registration);
        ReleaseFromWheel(); // the consumer's hold; the second of consumer and owner recycles the node
    }

    /// <summary>
    /// A WhenAny that no longer needs this delay leaves it: the timer comes out of the wheel now, not at its deadline (a
    /// losing timeout no longer holds a slot, or the combinator, until it would have fired), and the node is read as its
    /// consumer would read it. A node that fired or was cancelled first is left to its waiter, which reads it.
    /// </summary>
    DetachOutcome IDetachableSource.TryDetach(DirectWaiter waiter)
    {
        DetachOutcome outcome = _core.TryAbandonWaiter(waiter, out short abandoned);
        if (outcome != DetachOutcome.Detached)
        {
            return outcome == DetachOutcome.Completed ? DetachOutcome.NotWaiting : outcome;
        }
        ReleaseAbandoned(abandoned);
        return DetachOutcome.Detached;
    }

    bool IDetachableSource.TryAbandon(short token)
    {
        if (!_core.TryAbandon(token))
        {
            return false;
        }
        ReleaseAbandoned(token);
        return true;
    }

    /// <summary>
    /// Nobody waits on this delay any more (its use was abandoned): stops it, and lets go of it as its consumer, advancing
    /// the version so that a stale copy of the task is the await-once error.
    /// </summary>
    /// <remarks>
    /// Invariant: the abandoned use is never readable through the caller's token while the node may still be linked in
    /// the wheel. Stopped here, it ends consumed in one CAS (<see cref="SourceCore{TResult}.ReleaseAbandoned"/>): a copy
    /// the caller kept (misuse) is stale at once, where a success published before the read let such a copy consume it
    /// and recycle a node still linked in a slot. Fired or cancelled first, it is read without throwing: a misused read
    /// that consumed it first holds the consumer's part (it recycles a fired node, or lets go of a cancelled one), and
    /// nothing is left to do here.
    /// </remarks>
    private void ReleaseAbandoned(short token)
    {
#if DEBUG
        TestHookBeforeAbandonedRelease?.Invoke(this);
#endif
        // Invariant: token is the abandoned use's, taken by the abandoning CAS, never the version read here: if the use
        // fired and a misused read consumed it meanwhile, that read holds the consumer's part (it recycled the node, or
        // will), the node may already be another delay's, and this call must touch nothing (see the remarks).
        WheelShard? shard = Shard;
        if (_core.ReleaseAbandoned(token))
        {
#if DEBUG
            TestHookAfterAbandonedSettled?.Invoke(this);
#endif
            LeaveWheelUnread(shard); // still linked in a slot
            return;
        }
        // It fired or was cancelled first; its completer may still be between its claim and its publication, a few stores.
        // Waited for only while it is still this use: consumed by a misused read, the node goes back to Pending for its
        // next use, and waiting for "completed" spun until someone else's delay completed on it.
        _core.WaitUntilPublished(token);
#if DEBUG
        TestHookAfterAbandonedSettled?.Invoke(this);
#endif
        if (!_core.TryConsumeCompleted(token, out ExceptionDispatchInfo? error))
        {
            return; // a misused read of the caller's copy consumed it first, and let go of the node as its consumer
        }
        CancellationRegistrations.Drop(ref _registration);
        // As in GetResult: a node that fired has left the wheel, so its consumer recycles it at once; one cancelled is
        // still the wheel's until its owner lets go, and the second of the two recycles it.
        if (error is null || LetGo())
        {
            Recycle();
        }
    }

#if DEBUG
    /// <summary>
    /// Tests only (a Debug build): runs when <see cref="ReleaseAbandoned"/> has settled the abandoned use (stopped it, or
    /// seen it fire or be cancelled), before it lets go of the node, standing in for the caller's misused read of a delay
    /// it gave to a WhenAny at that moment.
    /// </summary>
    internal static Action<TimerNode>? TestHookAfterAbandonedSettled;

    /// <summary>
    /// Tests only (a Debug build): runs when a combinator has abandoned the use (TryAbandon or TryDetach won), before
    /// <see cref="ReleaseAbandoned"/> looks at the node: the timer firing and the caller's misused read may both land here.
    /// </summary>
    internal static Action<TimerNode>? TestHookBeforeAbandonedRelease;

    /// <summary>
    /// Tests only (a Debug build): runs when a wheel's Dispose has found a node still its never-due timer
    /// (<see cref="TryCancelNeverDue"/>), before it claims the use: the use's owner may end it and the node go on to
    /// another timer here.
    /// </summary>
    internal static Action<TimerNode>? TestHookBeforeNeverDueClaim;

    /// <summary>
    /// Tests only (a Debug build): runs in <see cref="ReleaseFromWheel"/> before the count, on the thread letting go (the
    /// wheel's owner, or the consumer of a node it stopped): where the two meet when they let go at once.
    /// </summary>
    internal static Action<TimerNode>? TestHookBeforeReleaseFromWheel;
#endif

    /// <summary>The wheel's owner lets go of a cancelled node, or its consumer of one it stopped unread. The second of owner and consumer recycles it.</summary>
    public void ReleaseFromWheel()
    {
#if DEBUG
        TestHookBeforeReleaseFromWheel?.Invoke(this);
#endif
        if (LetGo())
        {
            Recycle();
        }
    }

    /// <summary>Reads the outcome once, releases the consumer's hold, and recycles the node when it is the last holder.</summary>
    public void GetResult(short token)
    {
        if (ReadQuietly(token) is { } error)
        {
            throw LazyCancellation.ToThrow(error);
        }
    }

    /// <summary>As <see cref="GetResult"/>, returning the failure instead of throwing it (<see cref="IQuietSource"/>).</summary>
    public ExceptionDispatchInfo? ReadQuietly(short token)
    {
        _core.Consume(token, this, out ExceptionDispatchInfo? error);
        CancellationRegistrations.Drop(ref _registration);
        if (error is null || LetGo())
        {
            Recycle();
        }
        return error;
    }

    private void Recycle()
    {
        _token = default;
        _home = null; // its shard, or the wheel that held it as never due
        Next = null;
        Prev = null;
        NextCancel = null;
        Slot = -1;
        Deadline = 0;
        _core.ClearForPool();
        ObjectPool<TimerNode>.Return(this);
    }

    public SpindleTaskStatus GetStatus(short token) => _core.GetStatus(token);

    ValueTaskSourceStatus IValueTaskSource.GetStatus(short token) => (ValueTaskSourceStatus)_core.GetStatus(token);

    public void OnCompleted(Action<object?> continuation, object? state, short token) => _core.OnCompleted(continuation, state, token);

    public void OnCompleted(Action<object?> continuation, object? state, short token, ValueTaskSourceOnCompletedFlags flags)
        => _core.OnCompleted(continuation, state, token, flags);
}

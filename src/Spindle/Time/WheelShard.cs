using System;
using System.Diagnostics;
using System.Runtime.CompilerServices;
using System.Threading;

namespace SpindleLib;

/// <summary>
/// One wheel of a <see cref="TimerWheel"/>: six levels of 64 slots, a bitmap of occupied slots per level, and the two
/// lock-free inboxes in front of it. A shard has exactly one owner at a time, and only the owner touches the slots.
/// </summary>
/// <remarks>
/// <para><b>Owners.</b> A wheel's main shard is owned by whoever holds the wheel's drive (its timer thread, or its
/// provider's timer callback). For <see cref="TimerWheel.Default"/> (and no other wheel), each Spindle worker also owns
/// a shard of its own: a delay started on a worker is linked there directly, with no atomic operation, and the worker
/// runs its due timers between work items and sleeps no longer than the next one (Tokio's per-worker wheels). Other
/// threads reach a shard only through its inboxes.</para>
/// <para><b>Inboxes.</b> Each is a Treiber stack (R. K. Treiber, 1986): a push is one CAS on the head, and the owner
/// takes the whole stack with one exchange, so there is no ABA problem (nodes are never popped one by one).</para>
/// <para><b>TimerWheel.Levels.</b> A deadline is linked at the level of the highest 6-bit group in which it differs from the
/// shard's elapsed time, in the slot its bits in that group name. Expiring a coarse slot re-links its timers one level
/// down (cascading), so each timer moves at most once per level. The design follows the hierarchical timing wheels of
/// Varghese and Lauck (1987), as Kafka and Tokio use them.</para>
/// </remarks>
internal sealed class WheelShard : WorkerTimers
{
    private readonly TimerWheel _wheel;
    private readonly bool _dispatch;

    /// <summary>True when fired continuations are handed to the workers rather than run inline (a timer thread's shard).</summary>
    public bool Dispatches => _dispatch;
    // A worker's own shard (WorkerPool.OwnsTimers tells its owner): lent around each continuation its passes run inline
    // (when it does not dispatch them), and ended timers may leave it at once (TryUnlinkAsOwner).
    private readonly bool _ofWorker;
    // Each slot is a doubly linked list, kept in the order its timers were linked: a timer is appended at the tail, and a
    // pass fires from the head. So timers due at the same millisecond fire in the order they were started.
    private readonly WheelNode?[] _slots = new WheelNode?[TimerWheel.Levels * TimerWheel.SlotsPerLevel];
    private readonly WheelNode?[] _tails = new WheelNode?[TimerWheel.Levels * TimerWheel.SlotsPerLevel];
    private readonly ulong[] _occupied = new ulong[TimerWheel.Levels];
    private long _elapsed;
    private TimerBatch? _batch;

    /// <summary>
    /// The most timers a worker's pass fires (<see cref="Poll"/>): the rest stay due, and the pass after the worker's next
    /// look at its queues fires them, in the same order. Without a bound, a worker whose timers were always due (more
    /// than it could fire: a timer storm) fired every one in each pass and took at most 64 items between passes, so work
    /// queued from outside it (a cancellation's continuation, a <c>Spindle.Run</c> or <c>SwitchToWorker</c> from another
    /// thread, a rescued batch) barely moved: 0 of 20,000 such items ran in 15 s under 200,000 delay loops (a user's
    /// review). Go's scheduler gets the same fairness by readying a timer's goroutine instead of running it.
    /// </summary>
    internal const int PassBudget = 512;

    // The fires left to the running pass (DrainInboxes). Unbounded (int.MaxValue) except in a worker's Poll: a wheel's
    // driver, a rescuer and a disposal fire everything due, since nothing else waits for their thread.
    private int _budget = int.MaxValue;
    private long _linkedOwner;

    // A worker's shard: Owned while its worker runs; Parked while it blocks; Tidying while another thread holds it to
    // release cancelled nodes (see ReleaseCancelledWhileParked).
    private const int Owned = 0;
    private const int Parked = 1;
    private const int Tidying = 2;
    private int _park;

    // Shared with producers. Invariant of both inboxes (Treiber stacks, see remarks): any thread pushes with one CAS on
    // the head; only the owner takes, and only the whole stack at once (Interlocked.Exchange with null). A node is in the
    // insert inbox at most once per use (its first push) and in the cancel inbox at most once (pushed by the one
    // cancellation that won the node's core), so the links (Next, NextCancel) are written only by the pushing thread
    // before its CAS publishes them.
    private TimerNode? _inbox;
    private TimerNode? _cancelInbox;
    // The callback timers' change inbox (main shard only), the same kind of Treiber stack through NextChange: a node is
    // in it at most once, pushed by the one CAS that set its Queued flag (CallbackTimerNode's remarks).
    private CallbackTimerNode? _changeInbox;
    // The clock's tick the running pass expires up to (owner only): a periodic callback timer's ticks that it covers
    // coalesce into the one it fires (CallbackTimerNode.NextTick), however late the pass is or far the clock jumped.
    private long _passNow;
    private long _linked;
    // Odd while the owner moves the insert inbox's timers into _linked's count (DrainInboxes takes the inbox, then writes
    // the count that holds them): a sequence lock (Lamport's, as Linux's seqcount) for PendingCount, whose two reads
    // (the count, then the inbox) could straddle that move and miss the timers moved (CI at b43d9e0: 3,983 of 4,000 read
    // after the last push). Owner-written only; nothing but the take and the count's store (and, in Debug builds, a
    // test's hook) runs while it is odd.
    private int _inboxMoves;

    /// <param name="wheel">The wheel whose clock this shard reads.</param>
    /// <param name="dispatch">True to hand due continuations to the workers in batches, false to run them on the owner.</param>
    /// <param name="worker">True for a worker's own shard, whose passes lend it around each continuation they run
    /// inline (<see cref="WorkerTimers.LendForContinuation"/>), so that another worker can take over a pass held up by one.</param>
    public WheelShard(TimerWheel wheel, bool dispatch, bool worker = false)
    {
        _wheel = wheel;
        _dispatch = dispatch;
        _ofWorker = worker;
    }

    /// <summary>
    /// The deadline of a timer that is never due: an infinite delay, a periodic timer's tick when its period is infinite,
    /// a deadline past the range of a long. No shard ever holds one: its wheel holds it weakly, if at all
    /// (<see cref="TimerWheel.Insert"/>, <see cref="NeverDueTimers"/>).
    /// </summary>
    public const long Never = long.MaxValue;

    /// <summary>The shard's elapsed time in ticks: everything due up to it has fired. Owner only.</summary>
    public long Elapsed => _elapsed;

    /// <summary>
    /// Timers linked as of the owner's last change, plus those in the insert inbox. During a pass, the timers it took from
    /// the inbox count as linked (see <see cref="DrainInboxes"/>).
    /// </summary>
    /// <remarks>
    /// The inbox's part is the depth on its head (<see cref="Push"/>), which may be wrong until the owner's next drain: a
    /// push whose head was taken, recycled and pushed again between its read of the depth and its CAS (an ABA on the
    /// head's identity, harmless to the stack itself) carries the depth of the node's previous use, and so do the pushes
    /// above it. Off by at most the depth the inbox had then (<c>InboxDepthAbaTests</c>). The count and the inbox are read
    /// as one, retried while a pass moves the inbox's timers into the count or if one moved them meanwhile
    /// (<c>_inboxMoves</c>): read one after the other, a pass between them made those timers count nowhere
    /// (<c>PendingCountInboxMoveTests</c>), and a head it took and reused meanwhile carried its new use's depth. Only
    /// counts read it (<see cref="TimerWheel.PendingCount"/> and diagnostics): the owner links by walking the nodes, and
    /// decides when to run by <see cref="HasInbox"/> and <see cref="HasPending"/>, which read no depth.
    /// </remarks>
    public long PendingCount
    {
        get
        {
            // A reader retries while the owner is moving the inbox into the count, or if it moved it between the reads:
            // the move is an exchange and a store, so the wait is that long unless the owner is preempted inside it.
            SpinWait spin = default;
            while (true)
            {
                int moves = Volatile.Read(ref _inboxMoves);
                if ((moves & 1) == 0)
                {
                    long count = Volatile.Read(ref _linked) + (Volatile.Read(ref _inbox)?.InboxDepth ?? 0);
                    // The depth is a plain read: a full fence keeps it before the check below (Linux's smp_rmb in
                    // read_seqcount_retry), so a head taken and reused since the read of _inbox is caught by the check.
                    Interlocked.MemoryBarrier();
                    if (Volatile.Read(ref _inboxMoves) == moves)
                    {
                        return count;
                    }
                }
                spin.SpinOnce();
            }
        }
    }

    /// <summary>
    /// The shard's state, for diagnostics: its published count, the owner's own count (read racily), whether either inbox
    /// holds nodes, and, for a worker's shard, whether its worker is parked.
    /// </summary>
    internal string Describe()
        => "count=" + PendingCount + " linked=" + _linkedOwner
            + (Volatile.Read(ref _inbox) is null ? "" : " inbox")
            + (Volatile.Read(ref _cancelInbox) is null ? "" : " cancel-inbox")
            + (Volatile.Read(ref _changeInbox) is null ? "" : " change-inbox")
            + (Volatile.Read(ref _park) switch { Parked => " parked", Tidying => " tidying", _ => "" });

    /// <summary>True when a producer has added a timer, cancelled one, or changed a callback timer, and the owner has not taken it yet.</summary>
    public bool HasInbox => Volatile.Read(ref _inbox) is not null || Volatile.Read(ref _cancelInbox) is not null || Volatile.Read(ref _changeInbox) is not null;

    /// <summary>True when a producer has added a timer, or changed a callback timer, that the owner has not taken yet.</summary>
    public bool HasInsertInbox => Volatile.Read(ref _inbox) is not null || Volatile.Read(ref _changeInbox) is not null;

    /// <summary>The next node of an insert-inbox walk: the insert inbox holds delays' nodes only.</summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    private static TimerNode? AsTimerNode(WheelNode? node)
    {
        Debug.Assert(node is null or TimerNode, "the insert inbox holds delays' nodes only");
        return Unsafe.As<TimerNode>(node!); // null stays null (As does not look at it)
    }

    /// <summary>
    /// Adds <paramref name="node"/> from any thread: one CAS onto the insert inbox. The depth it records is the head's plus
    /// one, read before the CAS: only a count, which an ABA on the head can make stale (see <see cref="PendingCount"/>).
    /// </summary>
    public void Push(TimerNode node)
    {
        node.Shard = this;
        TimerNode? head = Volatile.Read(ref _inbox);
        while (true)
        {
            node.Next = head;
            int below = head is null ? 0 : head.InboxDepth;
            node.InboxDepth = below < TimerNode.MaxInboxDepth ? below + 1 : below;
#if DEBUG
            TestHookBeforeInboxCas?.Invoke(head);
#endif
            TimerNode? seen = Interlocked.CompareExchange(ref _inbox, node, head);
            if (seen == head)
            {
                return;
            }
            head = seen;
        }
    }

#if DEBUG
    /// <summary>
    /// Tests only: runs on the owner between its take of a non-empty insert inbox and its store of the count that holds
    /// the timers taken, while readers of <see cref="PendingCount"/> wait (it must not read the count itself).
    /// </summary>
    internal static Action? TestHookInboxTaken;

    /// <summary>
    /// Tests only: runs on a pushing thread with the head it read (and whose depth it used), before its CAS: the window in
    /// which the owner can take that head, and its node come back to the top of the inbox in a later use.
    /// </summary>
    internal static Action<TimerNode?>? TestHookBeforeInboxCas;
#endif

    /// <summary>
    /// Links <paramref name="node"/> directly. Owner only (a worker adding to its own shard); if the owner has lent the
    /// shard for the item it is running (<see cref="WorkerTimers.Lend"/>), it takes it back for the link.
    /// </summary>
    public void AddOwned(TimerNode node, long now)
    {
        bool lent = IsLent;
        if (lent)
        {
            Reclaim();
        }
        if (Volatile.Read(ref _cancelInbox) is not null)
        {
            // Releases what was cancelled since the owner last looked, before it links more: a worker held in one long
            // item makes no look at its timers until the item ends, and one that arms timers there and has them ended
            // early (a dispatcher draining a queue whose replies resume their askers inline, each arming its next ask's
            // timeout) kept every one of them linked, counted and unrecycled meanwhile, however many (a library author's
            // review: 1,000,000 timers, 122 MB, after a 2.6 s run; docs/decisions.md section 44). Safe here as in a pass:
            // the owner holds the shard (taken back above if it was lent), a release runs no user code, and no node of
            // the cancel inbox can still be waiting to be linked, since a worker's shard takes its timers only here,
            // never through the insert inbox (that is the main shard's). One read when nothing was cancelled.
            Debug.Assert(Volatile.Read(ref _inbox) is null, "a worker's shard takes its timers through AddOwned only");
            ReleaseCancelled(Interlocked.Exchange(ref _cancelInbox, null));
        }
        node.Shard = this;
        if (_linkedOwner == 0 && now > _elapsed)
        {
            _elapsed = now; // an empty shard may jump ahead: nothing in it can be skipped
        }
        if (node.Deadline <= _elapsed)
        {
            // A rescuer's pass moved this shard's time past the deadline, read from the clock before the owner took the
            // shard back for this link (a worker preempted in between, or waiting here for the rescuer): the timer is
            // due, so it goes to the current fine slot, which the next pass fires (no earlier than asked). Linked at its
            // own deadline, behind the shard's time, it sat in a slot a whole level ahead (found beside CPU hogs: the
            // storm test's Debug assert "only the top level wraps"; a Release build fired such timers 64 ms or 4 s late).
            node.Deadline = _elapsed;
        }
        Link(node);
        PublishCount();
        bool earliest = node.Deadline < _nextDue;
        if (earliest)
        {
            Volatile.Write(ref _nextDue, node.Deadline);
        }
        // The item or the inline continuation goes on: lend the shard (again), now that it has a timer.
        LendAgain();
        if (earliest && InItem) // its worker runs an item (the shard was lent, or had no timer when the item began)
        {
            // A parked worker sleeps until the other workers' timers were due when it parked: wake one, so it parks
            // again no longer than until this one, and rescues it if this item still runs then.
            WorkerPool.Shared.WakeOneIdleToWatchAt(_wheel.TimestampAt(node.Deadline)); // a worker's shard: the system clock
        }
    }

    /// <summary>
    /// Links <paramref name="node"/> (its deadline set) directly, from the owner of a wheel's main shard: a frame loop's
    /// thread inside a step (<see cref="TimerWheel.StartAsOwner"/>), possibly in the middle of a pass (a continuation the
    /// pass runs). The deadline is past the wheel's time, since a delay is due at least a millisecond after the clock's
    /// reading and the wheel's time never passes the clock's; linked in the middle of a pass, it is past everything the
    /// pass fires. The published count goes up by one rather than to the owner's count, which in the middle of a pass
    /// leaves out the new timers it has taken from the inbox and not linked yet (see <see cref="DrainInboxes"/>).
    /// </summary>
    /// <remarks>
    /// An empty shard first moves its time to <paramref name="now"/> (the clock's reading, in ticks), as
    /// <see cref="AddOwned"/> does: a wheel with nothing in it runs no pass, so its time may be far behind its clock (a
    /// frame of hours, or of more than the wheel's span), and a deadline linked relative to it could be beyond the span,
    /// in a slot the wheel takes for another rotation (FrameTimeModelTests hung so, a pass cascading a timer into its own
    /// slot for ever). A shard that holds a timer has its clock's timer armed for it, so its time is never more than the
    /// longest delay behind the clock.
    /// </remarks>
    public void LinkAsOwner(TimerNode node, long now)
    {
        if (_linkedOwner == 0 && now > _elapsed)
        {
            _elapsed = now; // nothing in the shard can be skipped
        }
        Debug.Assert(node.Deadline > _elapsed, "a new delay is due after the wheel's time");
        node.Shard = this;
        Link(node);
        Volatile.Write(ref _linked, _linked + 1);
    }

    /// <summary>
    /// Takes a node whose use has ended (the caller's claim of its core won, so it never fires) out of a worker's own
    /// shard at once, when the calling thread is that worker: true, and the wheel's hold on the node is the caller's to
    /// let go of (no cancel-inbox entry, no later pass). False on any other thread, or for a shard that is not a
    /// worker's: the caller pushes the node (<see cref="PushCancel"/>).
    /// </summary>
    /// <remarks>
    /// The owner may be anywhere in its own code: in an item (the shard lent, taken back here as <see cref="AddOwned"/>
    /// takes it, waiting for a rescuer's pass to end), or in a continuation its own pass runs inline (then the slots are
    /// consistent, see <see cref="Advance"/>, whose fine-slot loop reads the slot's head again after each continuation). A
    /// worker's shard takes its timers only through <see cref="AddOwned"/>, so a node of this use is either linked or was
    /// unlinked by a pass that then failed to fire it (the caller's claim came first): never in a list a pass is walking.
    /// The published next deadline (<see cref="UntilDue"/>, a hint) is cleared when the shard empties; otherwise it may
    /// stay early until the owner's next poll, which a worker makes between items while it has timers.
    /// </remarks>
    public bool TryUnlinkAsOwner(TimerNode node)
    {
        if (!_ofWorker || !IsOwnedByCaller())
        {
            return false;
        }
        if (IsLent)
        {
            Reclaim();
        }
        if (node.Slot >= 0)
        {
            Unlink(node);
        }
        PublishCount();
        if (_linkedOwner == 0)
        {
            // Emptied: no pass of the owner's follows (it polls only while it has timers, and lends only then), so the hint
            // would stay at the ended timer's deadline, and every idle worker, parking no longer than until it
            // (UntilDue), would wake every look once it passed (a review: 2,300–3,100 idle spins a second, for ever, after
            // one in-time timeout on a worker). With timers left, the owner's next poll, between items, publishes it.
            Volatile.Write(ref _nextDue, long.MaxValue);
        }
        LendAgain();
        return true;
    }

    /// <summary>True when the calling thread owns this worker's shard (its worker, or in Debug builds a test that drives it by hand).</summary>
    private bool IsOwnedByCaller()
    {
#if DEBUG
        if (OwnerThreadForTests != 0)
        {
            return OwnerThreadForTests == Environment.CurrentManagedThreadId;
        }
#endif
        return WorkerPool.OwnsTimers(this);
    }

#if DEBUG
    /// <summary>
    /// Tests only: the managed thread id of the thread that owns this worker's shard (made with <c>worker: true</c>) as
    /// its worker would, for a test that drives it by hand; 0 for the real owner, its worker.
    /// </summary>
    internal int OwnerThreadForTests;
#endif

    /// <summary>Hands a cancelled node to the owner (one CAS); the first since the owner last looked sees that it is released promptly (<see cref="TimerWheel.OnCancelQueued"/>).</summary>
    public void PushCancel(TimerNode node)
    {
        TimerNode? head = Volatile.Read(ref _cancelInbox);
        while (true)
        {
            node.NextCancel = head;
            TimerNode? seen = Interlocked.CompareExchange(ref _cancelInbox, node, head);
            if (seen == head)
            {
                if (head is null)
                {
                    _wheel.OnCancelQueued(this);
                }
                return;
            }
            head = seen;
        }
    }

    /// <summary>
    /// Hands a callback timer whose Change (or Dispose) needs the owner to it (one CAS; the caller's CAS on the node's word
    /// set its Queued flag, so it is in this inbox once). True when the inbox was empty.
    /// </summary>
    public bool PushChange(CallbackTimerNode node)
    {
        CallbackTimerNode? head = Volatile.Read(ref _changeInbox);
        while (true)
        {
            node.NextChange = head;
            CallbackTimerNode? seen = Interlocked.CompareExchange(ref _changeInbox, node, head);
            if (seen == head)
            {
                return head is null;
            }
            head = seen;
        }
    }

    /// <summary>
    /// Settles every callback timer of a change-inbox snapshot (<paramref name="changed"/>): unlinked if linked, then linked
    /// at its due tick, fired if that has passed, left out if stopped, or recycled if disposed (see
    /// <see cref="CallbackTimerNode.Settle"/>); or, for the wheel's Dispose (<paramref name="disposing"/>), ended. Owner only.
    /// </summary>
    private void SettleChanged(CallbackTimerNode? changed, long now, bool disposing = false)
    {
        // The inbox is a stack, newest first: settled oldest first, so timers changed to one tick are linked, and fire, in
        // the order they were changed, as delays started for one tick do (the nodes are Queued: only this owner writes
        // their NextChange until it settles them).
        CallbackTimerNode? oldest = null;
        long earliest = CallbackTimerNode.NeverDue;
        while (changed is not null)
        {
            CallbackTimerNode node = changed;
            changed = node.NextChange;
            node.NextChange = oldest;
            oldest = node;
            earliest = Math.Min(earliest, CallbackTimerNode.DueOf(node.Word));
        }
        changed = oldest;
        // An empty shard may jump ahead (as LinkAsOwner), so that a link after a long idle stays within the wheel's span;
        // but only to just before the earliest due tick it settles, not to now: a timer due by now is then linked, and the
        // pass fires it in deadline order with the rest (a review found them all fired here at once, newest first, before
        // the delays of the same pass). A Change that lowers a due tick after this read is late for the pass: it fires here.
        long to = Math.Min(now, earliest - 1);
        if (_linkedOwner == 0 && to > _elapsed)
        {
            _elapsed = to;
        }
        while (changed is not null)
        {
            CallbackTimerNode node = changed;
            changed = node.NextChange; // read before the settlement: it may recycle the node, or its callback push it again
            node.NextChange = null;
            if (node.Slot >= 0)
            {
                Unlink(node);
            }
            if (disposing)
            {
                node.DisposeByWheel(fromInbox: true);
            }
            else
            {
                Settle(node, fromInbox: true);
            }
        }
    }

    /// <summary>Carries out the owner's settlement of a callback timer it holds, unlinked (<see cref="CallbackTimerNode.Settle"/>). Owner only.</summary>
    private void Settle(CallbackTimerNode node, bool fromInbox)
    {
        switch (node.Settle(fromInbox, _elapsed, Math.Max(_elapsed, _passNow), out long linkAt, out Action<object?>? callback, out object? state))
        {
            case CallbackTimerNode.Settlement.Link:
                node.Deadline = linkAt;
                Link(node);
                break;
            case CallbackTimerNode.Settlement.FireAndLink:
                _fired++;
                _budget--;
                node.Deadline = linkAt;
                Link(node); // linked before its callback runs, which may change or dispose it
                Deliver(callback!, state);
                break;
            case CallbackTimerNode.Settlement.Fire:
                _fired++;
                _budget--;
                Deliver(callback!, state); // the node may already be another timer's: only the copies are used
                break;
            case CallbackTimerNode.Settlement.Recycle:
                node.Recycle();
                break;
        }
    }

    /// <inheritdoc/>
    /// <remarks>
    /// Dekker with <see cref="ReleaseCancelledWhileParked"/>: the worker publishes Parked (a full fence), then reads the
    /// cancel inbox; a canceller pushes (a CAS), then reads the state. So either the worker sees the cancellation and
    /// stays up to poll, or the canceller sees the shard parked and tidies it.
    /// </remarks>
    public override bool TryPark()
    {
        Interlocked.Exchange(ref _park, Parked);
        if (Volatile.Read(ref _cancelInbox) is null)
        {
            return true;
        }
        Unpark();
        return false;
    }

    /// <inheritdoc/>
    public override void Unpark()
    {
        // A canceller tidying the shard holds it for the few stores of a release each: wait for it to hand it back.
        SpinWait spin = default;
        while (Interlocked.CompareExchange(ref _park, Owned, Parked) != Parked)
        {
            spin.SpinOnce();
        }
    }

    /// <summary>
    /// Releases the cancelled nodes of a worker's shard whose worker is parked, on the calling thread (the canceller),
    /// holding the shard meanwhile: a particular parked worker cannot be woken (a producer wakes whichever announced worker
    /// it finds, see <see cref="IdleSet"/>; when wake-ups were permits of one shared semaphore, any parked worker took
    /// them), so a cancellation used to stay linked, and counted, until its owner happened to wake. No user code runs here: a
    /// release only unlinks and recycles. After handing the shard back, it looks at the inbox again, since a
    /// cancellation pushed meanwhile found the shard held and left it to this thread.
    /// </summary>
    public void ReleaseCancelledWhileParked()
    {
        while (Volatile.Read(ref _cancelInbox) is not null && Interlocked.CompareExchange(ref _park, Tidying, Parked) == Parked)
        {
            ReleaseCancelled(Interlocked.Exchange(ref _cancelInbox, null));
            PublishCount();
            // Its next deadline may be later now: other workers park until it (UntilDue), so a stale earlier one would
            // wake them every look while this worker sleeps on.
            Volatile.Write(ref _nextDue, NextDeadline());
            Interlocked.Exchange(ref _park, Parked); // a full fence before the inbox is read again
        }
    }

    /// <inheritdoc/>
    public override bool HasPending => _linkedOwner != 0 || Volatile.Read(ref _cancelInbox) is not null;

    /// <inheritdoc/>
    /// <remarks>A worker that polls while it blocks inside an item, or inside a timer's continuation that one of its own
    /// passes runs, takes its lent shard back for the poll (its continuations run here, on the owner), and lends it again
    /// after.</remarks>
    public override bool Poll(out TimeSpan untilNext)
    {
        if (IsLent)
        {
            Reclaim();
        }
        // A pass runs continuations inline: a timer one of them starts must not lend the shard for an item in the middle
        // of it, and a pass nested in a continuation lends it around its own continuations.
        bool inItem = InItem;
        bool inContinuation = InContinuation;
        InItem = false;
        InContinuation = false;
        long now = _wheel.NowTick();
        long outerPass = _passSince;
        Volatile.Write(ref _passSince, now);
        long fired = _fired;
        DrainInboxes(now, PassBudget);
        PublishCount();
        long next = NextDeadline();
        Volatile.Write(ref _nextDue, next);
        Volatile.Write(ref _passSince, outerPass);
        untilNext = next == long.MaxValue ? Timeout.InfiniteTimeSpan : _wheel.TimeUntil(next);
        InItem = inItem;
        InContinuation = inContinuation;
        LendAgain(); // polled while it blocks inside an item or a continuation: that goes on, and so does the lending
        return _fired != fired;
    }

    /// <inheritdoc/>
    /// <remarks>
    /// The pass is the owner's own (<see cref="Poll"/>: the same budget, the same order of firing), but it queues the
    /// due continuations in batches, in order, to the pool's queue of fired timers' batches (as a rescue does), where an
    /// idle worker takes them: the timers they start go into that worker's shard. No user code runs inside this pass, so nothing
    /// nests in it and nothing is lent around a continuation.
    /// </remarks>
    public override bool PollSharing(out TimeSpan untilNext)
    {
        Debug.Assert(!IsLent && !InItem && !InContinuation, "only the owner's loop shares, between items");
        _queueing = true;
#if DEBUG
        Interlocked.Increment(ref SharingPassesForTests);
#endif
        try
        {
            return Poll(out untilNext);
        }
        finally
        {
            FlushBatch();
            _queueing = false;
        }
    }

#if DEBUG
    /// <summary>Tests only: how many passes have shared their continuations (<see cref="PollSharing"/>).</summary>
    internal static long SharingPassesForTests;
#endif

    /// <inheritdoc/>
    public override long Count => Volatile.Read(ref _linked);

    private long _fired;

    // A worker's shard, lent while its worker runs an item (WorkerTimers.Lend): the earliest tick at which something may
    // be due, as the owner (or the last rescuer) published it: a pass's next expiration (a coarse slot's start, at or
    // before its timers' deadlines), lowered by each link. Only a hint for rescuers: one that finds nothing due costs a pass.
    private long _nextDue = long.MaxValue;
    // The tick at which the owner's running pass began (the outermost pass's, once a nested one ends); long.MaxValue
    // between passes. A rescuer takes over a pass lent for a continuation only once it has run LongPassTicks.
    private long _passSince = long.MaxValue;
    // True while a rescuer's pass runs (Rescue), or an owner's pass that shares its continuations (PollSharing): due
    // continuations are queued to the workers in order, not run. Touched only by the shard's holder of the moment.
    private bool _queueing;

    /// <inheritdoc/>
    protected override bool IsOverdue() => Volatile.Read(ref _nextDue) < _wheel.NowTick();

    /// <summary>
    /// How long a worker's pass must have run before an idle worker takes it over while a continuation holds it
    /// (<see cref="PassRunsLong"/>): two ticks, at least a whole millisecond, which a pass of <see cref="PassBudget"/>
    /// timers whose continuations return promptly does not come near (it takes tens of microseconds).
    /// </summary>
    internal const long LongPassTicks = 2;

    /// <inheritdoc/>
    /// <remarks>Read racily: a pass that has just ended and another that has just begun may be taken for each other,
    /// which costs one rescue of a short pass, or one look more.</remarks>
    protected override bool PassRunsLong() => _wheel.NowTick() - Volatile.Read(ref _passSince) >= LongPassTicks;

    /// <inheritdoc/>
    public override TimeSpan UntilDue() => Volatile.Read(ref _nextDue) is var next && next != long.MaxValue ? _wheel.TimeUntil(next) : Timeout.InfiniteTimeSpan;

    /// <inheritdoc/>
    /// <remarks>
    /// A rescuer holds the shard (<see cref="WorkerTimers.TryRescue"/>) while its owner runs an item: it runs the pass the
    /// owner would run between items, but hands the due continuations to the workers in batches, so no user code runs
    /// while it holds the shard, and the owner, when it takes the shard back, waits only for the pass itself.
    /// </remarks>
    protected override bool Rescue()
    {
        long now = _wheel.NowTick();
        long fired = _fired;
        _queueing = true;
        DrainInboxes(now);
        FlushBatch();
        _queueing = false;
        PublishCount();
        Volatile.Write(ref _nextDue, NextDeadline());
        return _fired != fired;
    }

    /// <summary>
    /// Takes the cancel snapshot first, then the insert snapshot (see <see cref="TimerNode"/> remarks); expires what is
    /// due by <paramref name="now"/>, old and new timers together in deadline order; links the new timers not yet due;
    /// and only then releases the cancelled ones, which may be among the new. Owner only.
    /// </summary>
    /// <remarks>
    /// <para>The inbox is a stack, newest first: the new timers not due by <paramref name="now"/> are gathered in the
    /// order they were started, and linked after the pass, relative to <paramref name="now"/>, so each is
    /// within the wheel's span of it (a deadline is at most <see cref="TimerWheel.MaxDelay"/> after its start).</para>
    /// <para>The new timers already due join the pass in deadline order (and those due at the same millisecond in the
    /// order they were started): the pass expires everything due before each one, then links it one millisecond ahead,
    /// so it fires after the linked timers due at the same millisecond, which were started before it. A pass that
    /// covers a long gap (a clock that jumps, as <c>FakeTimeProvider.Advance</c> does, or a late pass) so fires every
    /// due timer in deadline order; it used to fire the new ones after all the linked ones, newest first (found with
    /// Microsoft's fake clock). A new timer due before the point the pass has reached (its insert raced the previous
    /// pass) fires at once. Linking the due ones one millisecond ahead keeps every link within the span however far
    /// the clock jumped: a first version linked them all relative to the earliest one, and a jump of more than the
    /// span (2^36 ms) with a far timer in the same snapshot then cascaded that timer into its own slot for ever (found
    /// by a review).</para>
    /// <para>Sorting the due ones needs two arrays, kept for the next pass: they grow only when a pass finds more new
    /// timers already due than ever before, which only a late pass or a jumping clock produces.</para>
    /// </remarks>
    /// <param name="now">The tick to expire up to.</param>
    /// <param name="budget">The most timers this pass fires (see <see cref="PassBudget"/>); the rest stay due.</param>
    public void DrainInboxes(long now, int budget = int.MaxValue)
    {
        // A pass nested in this one (a continuation that blocks makes its worker help, and poll) has a budget of its own.
        int outerBudget = _budget;
        _budget = budget;
        try
        {
            DrainInboxesWithinBudget(now);
        }
        finally
        {
            _budget = outerBudget;
        }
    }

    private void DrainInboxesWithinBudget(long now)
    {
        _passNow = now;
        if (now < _elapsed)
        {
            Rewind(now); // the clock went back: rare, and only on a provider whose timestamp is not monotonic
        }
        TimerNode? cancelled = Interlocked.Exchange(ref _cancelInbox, null);
        // The timers taken leave the inbox's count and join the linked one inside one odd stretch of _inboxMoves, so a
        // reader of PendingCount sees them in one place or the other, never in neither (nor in both).
        Volatile.Write(ref _inboxMoves, _inboxMoves + 1);
        TimerNode? added;
        try
        {
            added = Interlocked.Exchange(ref _inbox, null); // a full fence: the odd count is seen before the take
            if (added is not null)
            {
#if DEBUG
                TestHookInboxTaken?.Invoke();
#endif
                Volatile.Write(ref _linked, _linkedOwner + added.InboxDepth);
            }
        }
        finally
        {
            // Even again whatever happened: an odd count left behind would hold every later reader in its retry loop.
            Volatile.Write(ref _inboxMoves, _inboxMoves + 1);
        }
        if (Volatile.Read(ref _changeInbox) is not null)
        {
            // Before the due delays join: a callback timer moved to a tick this pass covers is linked, and the pass fires
            // it in deadline order (one whose tick the wheel's time has passed fires here).
            SettleChanged(Interlocked.Exchange(ref _changeInbox, null), now);
        }
        if (added is not null)
        {
            // Taken out of the inbox, the new timers are linked only after this pass has fired what is due, and the code
            // that firing runs inline (a ManualClock's or a frame loop's continuations) read PendingCount meanwhile: they
            // were counted nowhere. Counted with the linked ones from the take above, and again here with the callback
            // timers just settled; the caller publishes the exact count after the pass (until then the timers it fires
            // stay counted too: too many for a moment, never too few).
            Volatile.Write(ref _linked, _linkedOwner + added.InboxDepth);
        }
        TimerNode? later = null; // oldest first: the walk below goes newest first, and pushes
        int due = 0;
        for (int newer = 0; added is not null; newer++)
        {
            TimerNode node = added;
            added = AsTimerNode(node.Next);
            if (node.Deadline > now)
            {
                node.Next = later;
                later = node;
                continue;
            }
            node.Next = null;
            if (due == _dueNodes.Length)
            {
                Array.Resize(ref _dueNodes, Math.Max(16, due * 2));
                Array.Resize(ref _dueKeys, _dueNodes.Length);
            }
            _dueNodes[due] = node;
            _dueKeys[due] = (node.Deadline, -newer); // the earlier started, the lower
            due++;
        }
        if (due > 0)
        {
            JoinDue(due);
        }
        Advance(now);
        while (later is not null)
        {
            TimerNode node = later;
            later = AsTimerNode(node.Next);
            node.Next = null;
            if (!node.IsCompleted) // else cancelled before it was linked; its cancel-inbox entry releases it
            {
                if (node.Deadline <= _elapsed)
                {
                    // Only after a step back further than Rewind can follow: the wheel cannot link a time it has passed,
                    // so the timer waits for the next tick of the wheel's own time (late, never early).
                    node.Deadline = _elapsed + 1;
                }
                Link(node);
            }
        }
        ReleaseCancelled(cancelled);
    }

    /// <summary>
    /// How far back the wheel's time can follow its clock: a linked deadline is less than 2^32 ms (over
    /// <see cref="TimerWheel.MaxDelay"/>) past the time its timer was started, at or before <see cref="_elapsed"/>, so a
    /// wheel taken back by at most this still has every deadline within its span (2^36 ms).
    /// </summary>
    internal const long MaxRewind = TimerWheel.WheelSpan - (1L << 32);

    /// <summary>
    /// Takes the wheel's time back to <paramref name="now"/>, a reading of a clock that stepped back (a provider whose
    /// timestamp is not monotonic), and links every timer again relative to it. Owner only.
    /// </summary>
    /// <remarks>
    /// <para>A slot is placed by the bits a deadline shares with the wheel's time, so a deadline the wheel's time has passed
    /// has no slot: a timer started after the step, due before the time the wheel had reached, was linked in a slot behind
    /// it, which the wheel took for one a whole rotation of its level ahead, and whose cascade moved it up a level instead
    /// of down (found by a review, <c>BackwardClockTests</c>: a 2 ms delay after a 5 ms step back fired 64 ms late; after a
    /// 1 s step it had not fired 795 days later, when the pass cascaded it into its own slot for ever; in a Debug build the
    /// pass failed its assertion and the delay never fired). Taken back, the wheel fires
    /// every timer when the clock reads its deadline, as it does on a monotonic clock; the timers started before the step
    /// keep their deadlines, which the clock reaches again later.</para>
    /// <para>It goes back at most <see cref="MaxRewind"/> (about 745 days), and not before the wheel's origin; a new timer
    /// due before the point it stops at waits for the wheel's next tick (see <see cref="DrainInboxes"/>). No user code runs
    /// here, and each slot's timers are linked again in their order, so timers due at the same millisecond keep firing in
    /// the order they were started.</para>
    /// </remarks>
    private void Rewind(long now)
    {
        long to = Math.Max(Math.Max(now, 0), _elapsed - MaxRewind);
        if (to >= _elapsed)
        {
            return;
        }
        WheelNode? head = null;
        WheelNode? tail = null;
        for (int index = 0; index < _slots.Length; index++)
        {
            while (_slots[index] is { } node)
            {
                Unlink(node);
                if (tail is null)
                {
                    head = node;
                }
                else
                {
                    tail.Next = node;
                }
                tail = node;
            }
        }
        _elapsed = to;
        while (head is not null)
        {
            WheelNode node = head;
            head = node.Next;
            Link(node);
        }
    }

    private TimerNode?[] _dueNodes = Array.Empty<TimerNode?>();
    private (long Deadline, int Started)[] _dueKeys = Array.Empty<(long, int)>(); // Started: the earlier, the lower

    /// <summary>
    /// The new timers already due by this pass's time, in <see cref="_dueNodes"/>: each, in deadline order and then in the
    /// order they were started, joins the wheel one millisecond ahead of the pass, or fires at once if the pass is past it.
    /// </summary>
    private void JoinDue(int count)
    {
#if DEBUG
        DueJoinedForTests += count;
#endif
        if (count > 1 && !PutInOrderWithoutSorting(count))
        {
#if DEBUG
            DueSortsForTests++;
#endif
            Array.Sort(_dueKeys, _dueNodes, 0, count); // by deadline, then by start: the keys are distinct
        }
        for (int i = 0; i < count; i++)
        {
            TimerNode node = _dueNodes[i]!;
            _dueNodes[i] = null;
            if (node.IsCompleted)
            {
                continue; // cancelled before it was linked; its cancel-inbox entry releases it
            }
            Advance(node.Deadline - 1); // everything due before it fires first (nothing, if the pass is past it)
            // Out of budget, the pass may have stopped in the middle of its own millisecond: it joins that slot's tail, after
            // the timers due then that were started before it, as a link does.
            if (node.Deadline > _elapsed || (node.Deadline == _elapsed && _budget <= 0))
            {
                Link(node);
            }
            else
            {
                Fire(node);
            }
        }
    }

    /// <summary>
    /// Puts the due set in deadline-then-start order with one look at each key, and true, when it is in that order or
    /// its reverse already; false leaves it to the sort. The set is gathered newest first (see
    /// <see cref="DrainInboxesWithinBudget"/>), so each key's start part is below the one before it, and the set is in
    /// exact reverse order when no timer is due later than the one started after it: a burst of delays of one length
    /// started off the workers (or any set whose deadlines do not go down as they were started). That is the set a late
    /// pass finds, thousands at once, and the sort cost the timer thread 0.04–0.1 µs a timer before the first of them
    /// fired (a review of tail latency, 20,000 delays of 10 ms started at once: 0.9–1.9 ms for 20,000); the look and the
    /// reversal cost a tenth of that. A set in neither order (delays of mixed lengths) ends the look at the first keys
    /// that show it, mostly the first three, and is sorted as before.
    /// </summary>
    private bool PutInOrderWithoutSorting(int count)
    {
        (long Deadline, int Started)[] keys = _dueKeys;
        bool reversed = true; // each deadline at or before the one gathered before it (started after it): reverse order
        bool ordered = true; // each deadline after the one gathered before it: already in order (started before it)
        for (int i = 1; i < count && (reversed || ordered); i++)
        {
            long deadline = keys[i].Deadline;
            long before = keys[i - 1].Deadline;
            reversed &= deadline <= before;
            ordered &= deadline > before;
        }
        if (reversed)
        {
            Array.Reverse(keys, 0, count);
            Array.Reverse(_dueNodes, 0, count);
        }
        return reversed || ordered;
    }

#if DEBUG
    /// <summary>Tests only: how many times this shard's passes have sorted a set of new timers already due (<see cref="JoinDue"/>).</summary>
    internal int DueSortsForTests;

    /// <summary>Tests only: how many new timers this shard's passes have found already due (<see cref="JoinDue"/>).</summary>
    internal int DueJoinedForTests;
#endif

    /// <summary>Unlinks every node of a cancel-inbox snapshot that is still linked, and lets go of it. Owner only.</summary>
    public void ReleaseCancelled(TimerNode? cancelled)
    {
        while (cancelled is not null)
        {
            TimerNode node = cancelled;
            cancelled = node.NextCancel; // read before the release: the release may recycle the node
            node.NextCancel = null;
            if (node.Slot >= 0)
            {
                Unlink(node);
            }
            node.ReleaseFromWheel();
        }
    }

    /// <summary>Expires every slot due at or before <paramref name="now"/>, cascading coarse slots down. Owner only.</summary>
    /// <remarks>
    /// <para><b>Re-entrancy.</b> A worker's shard runs continuations inline, and one that blocks makes its worker poll
    /// this shard again (<c>WorkerPool.TryRunOne</c>) while this call is still firing a slot. So whenever user code runs,
    /// the slots must be consistent: the invariant is that a node with <see cref="WheelNode.Slot"/> &gt;= 0 is in the
    /// list of that slot, and that every slot due before <see cref="_elapsed"/> is empty. A fine slot is therefore fired
    /// one node at a time, each unlinked before its continuation runs (a nested poll that releases a cancelled node of
    /// the same slot unlinks it properly, and finishes the slot itself); a coarse slot is cascaded without firing
    /// anything (a node due exactly now is linked into the current fine slot and fired on the next round), so no user
    /// code runs while a coarse slot is half moved. Detaching a whole slot and walking it while continuations ran let a
    /// nested poll unlink and recycle the node the walk was about to visit.</para>
    /// </remarks>
    public void Advance(long now)
    {
        while (_budget > 0 && TryNextExpiration(out int level, out int slot, out long deadline) && deadline <= now)
        {
            Debug.Assert(deadline >= _elapsed, "time never goes back: every slot due before _elapsed is empty");
            _elapsed = deadline;
            int index = level * TimerWheel.SlotsPerLevel + slot;
            if (level > 0)
            {
                // Cascade: every node here is due in [deadline, deadline + slot range), so each moves to a finer level.
                while (_slots[index] is { } node)
                {
                    Unlink(node);
                    Link(node);
                }
                continue;
            }
            // A fine slot holds only nodes due exactly at deadline. A nested poll may finish it and move time on: stop then.
            // A pass out of budget stops here, the rest of the slot still due at _elapsed: the next pass resumes it.
            while (_elapsed == deadline && _budget > 0 && _slots[index] is { } due)
            {
                Debug.Assert(due.Deadline == deadline, "a fine slot holds one deadline");
                Unlink(due);
                Fire(due);
            }
        }
        if (now > _elapsed && _budget > 0)
        {
            _elapsed = now; // every slot due by now has fired (else time stays at the slot the pass stopped in)
        }
    }

    public void PublishCount() => Volatile.Write(ref _linked, _linkedOwner);

    /// <summary>
    /// The earliest occupied slot. Searching levels from the finest, the first occupied level holds the earliest
    /// deadline: every timer in a finer level falls inside the current slot of each coarser level. Owner only.
    /// </summary>
    private bool TryNextExpiration(out int level, out int slot, out long deadline)
    {
        for (level = 0; level < TimerWheel.Levels; level++)
        {
            ulong occupied = _occupied[level];
            if (occupied == 0)
            {
                continue;
            }
            int shift = level * TimerWheel.SlotBits;
            int nowSlot = (int)((_elapsed >> shift) & TimerWheel.SlotMask);
            slot = (Bits.TrailingZeroCount(Bits.RotateRight(occupied, nowSlot)) + nowSlot) & TimerWheel.SlotMask;
            long slotRange = 1L << shift;
            long levelRange = slotRange << TimerWheel.SlotBits;
            deadline = (_elapsed & ~(levelRange - 1)) + slot * slotRange;
            if (deadline <= _elapsed)
            {
                // Only the top level wraps: a deadline beyond its current rotation sits in a slot "behind" now.
                Debug.Assert(level == TimerWheel.Levels - 1 || slot == nowSlot, "only the top level wraps");
                if (slot != nowSlot)
                {
                    deadline += levelRange;
                }
            }
            return true;
        }
        slot = 0;
        deadline = 0;
        return false;
    }

    /// <summary>The next tick at which something is due, or <see cref="long.MaxValue"/> when the wheel is empty. Owner only.</summary>
    public long NextDeadline() => TryNextExpiration(out _, out _, out long deadline) ? deadline : long.MaxValue;

    /// <summary>The level of a deadline: the highest 6-bit group in which it differs from now (Tokio's <c>level_for</c>).</summary>
    internal static int LevelFor(long elapsed, long deadline)
    {
        long masked = (elapsed ^ deadline) | TimerWheel.SlotMask;
        if (masked >= TimerWheel.WheelSpan)
        {
            masked = TimerWheel.WheelSpan - 1;
        }
        int significant = 63 - Bits.LeadingZeroCount((ulong)masked);
        return significant / TimerWheel.SlotBits;
    }

    private void Link(WheelNode node)
    {
        Debug.Assert(node.Deadline != Never, "a timer that is never due is never linked (TimerWheel.Insert)");
        int level = LevelFor(_elapsed, node.Deadline);
        int slot = (int)((node.Deadline >> (level * TimerWheel.SlotBits)) & TimerWheel.SlotMask);
        int index = level * TimerWheel.SlotsPerLevel + slot;
        _occupied[level] |= 1UL << slot;
        _linkedOwner++;
        WheelNode? tail = _tails[index];
        node.Next = null;
        node.Prev = tail;
        if (tail is not null)
        {
            tail.Next = node;
        }
        else
        {
            _slots[index] = node;
        }
        _tails[index] = node;
        node.Slot = index;
    }

    public void Unlink(WheelNode node)
    {
        int index = node.Slot;
        WheelNode? prev = node.Prev;
        WheelNode? next = node.Next;
        if (prev is not null)
        {
            prev.Next = next;
        }
        else
        {
            _slots[index] = next;
            if (next is null)
            {
                _occupied[index >> TimerWheel.SlotBits] &= ~(1UL << (index & TimerWheel.SlotMask));
            }
        }
        if (next is not null)
        {
            next.Prev = prev;
        }
        else
        {
            _tails[index] = prev;
        }
        node.Next = null;
        node.Prev = null;
        node.Slot = -1;
        _linkedOwner--;
    }

    /// <summary>
    /// A node found in the fine slot the pass has reached: a delay fires; a callback timer is settled, which fires it, or
    /// links it again at the later tick a Change pushed it back to (the lazy re-insertion). Owner only.
    /// </summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    private void Fire(WheelNode node)
    {
        if (node is TimerNode delay) // exact: both node types are sealed
        {
            Fire(delay);
        }
        else
        {
            Settle((CallbackTimerNode)node, fromInbox: false);
        }
    }

    /// <summary>Fires a node whose deadline has passed; its continuation runs inline or joins the batch. Owner only.</summary>
    private void Fire(TimerNode node)
    {
        _fired++;
        _budget--;
        // After TryFire publishes, the consumer may recycle the node: nothing below touches it.
        if (!node.TryFire(out object? waiter, out object? state) || waiter is null)
        {
            return;
        }
        Deliver(waiter, state);
    }

    /// <summary>Runs a fired timer's continuation (or callback) inline, or adds it to the batch for the workers. Owner only.</summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    private void Deliver(object waiter, object? state)
    {
        if (!_dispatch && !_queueing)
        {
            // Inline on the owner, in the middle of a pass: a continuation that throws must not unwind the pass (the rest
            // of the slot would be lost, a worker's thread would die, a wheel's drive would stay held). It is reported,
            // as a dispatched batch reports it (TimerBatch.Execute).
            if (_ofWorker)
            {
                // A worker's pass: lent while the continuation runs (the slots are consistent here, see Advance), so an
                // idle worker can fire the rest of the pass if this continuation blocks or computes for long.
                LendForContinuation();
                Continuations.InvokeReporting(waiter, state);
                EndContinuation();
            }
            else
            {
                Continuations.InvokeReporting(waiter, state);
            }
            return;
        }
        TimerBatch batch = _batch ??= TimerBatch.Rent();
        if (batch.Add(waiter, state))
        {
            _batch = null;
            QueueBatch(batch);
        }
    }

    public void FlushBatch()
    {
        TimerBatch? batch = _batch;
        if (batch is not null)
        {
            _batch = null;
            QueueBatch(batch);
        }
    }

    /// <summary>
    /// Hands a full (or final) batch to the workers, in order and ahead of the work queued from outside them
    /// (<see cref="Scheduler.QueueTimers"/>): a rescuer's, or a sharing owner's (<see cref="PollSharing"/>), to the shared
    /// pool whose worker it is (its own queueing would run them newest first, and an idle worker takes them from there),
    /// the timer thread's to the default scheduler.
    /// </summary>
    private void QueueBatch(TimerBatch batch)
    {
        if (_queueing)
        {
            WorkerPool.Shared.QueueTimers(batch);
        }
        else
        {
            Scheduler.ForHandOff.QueueTimers(batch); // dropped once Spindle's collectible context is unloading
        }
    }


    /// <summary>Unlinks and cancels every linked timer, and releases the cancelled ones. Owner only.</summary>
    public void CancelEverything()
    {
        DrainInboxes(_elapsed);
        for (int index = 0; index < _slots.Length; index++)
        {
            WheelNode? node = _slots[index];
            while (node is not null)
            {
                WheelNode? next = node.Next;
                Unlink(node);
                if (node is not TimerNode delay)
                {
                    ((CallbackTimerNode)node).DisposeByWheel(fromInbox: false); // stopped; recycled unless still in the change inbox
                    node = next;
                    continue;
                }
                // Whoever wins, the node is now in the cancel inbox (pushed by this call or by its token's callback).
                try
                {
                    delay.Cancel(byDisposal: true);
                }
                catch (Exception ex)
                {
                    UnobservedExceptions.Report(ex); // its continuation threw; the node was still handed over (see Cancel)
                }
                node = next;
            }
        }
        // Callback timers changed since the drain above (or during it, by callbacks it ran) end here; a Change racing this
        // pass after it finds the wheel disposed and asks for another (TimerWheel.QueueChange).
        SettleChanged(Interlocked.Exchange(ref _changeInbox, null), _elapsed, disposing: true);
        ReleaseCancelled(Interlocked.Exchange(ref _cancelInbox, null));
        PublishCount();
    }
}

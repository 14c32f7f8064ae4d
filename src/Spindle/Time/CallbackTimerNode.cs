using System;
using System.Diagnostics;
using System.Threading;

namespace SpindleLib;

/// <summary>
/// A callback timer (<see cref="SpindleTimer"/>): one pooled node, linked in its wheel's main shard as a delay's node is,
/// whose due time any thread may move, and which stays with its user from <see cref="TimerWheel.CreateTimer(Action{object?}, object?, TimeSpan, TimeSpan)"/>
/// to <see cref="SpindleTimer.Dispose"/> however often it fires.
/// </summary>
/// <remarks>
/// <para><b>The word.</b> Everything a thread other than the owner may change is in one 64-bit word, changed only by
/// CAS: the due tick the user asked for (40 bits; <see cref="NeverDue"/> when stopped), the use's version (16 bits), and
/// three flags. <see cref="Armed"/>: the shard's owner holds the node in a slot (or is settling it). <see cref="Queued"/>:
/// the node is in the shard's change inbox (a Treiber stack through <see cref="NextChange"/>; a node is in it at most once,
/// since only the CAS that sets the flag pushes it and only the owner, taking the whole stack, clears it).
/// <see cref="Disposed"/>: the user (or the wheel's Dispose) is done with it. Armed and Queued are the owner's holds, the
/// user's handle is the third: the CAS that leaves the word Disposed with neither flag recycles the node, and exactly one
/// CAS can (the owner only clears its flags, the user only sets Disposed). The wheel's Dispose sets Disposed with
/// <see cref="ByWheel"/>, which keeps the handle's hold: the node stays with this use (so a Change names the wheel) until
/// the user's Dispose clears ByWheel, a CAS that recycles it if the owner holds it no longer.</para>
/// <para><b>Pushing back is lazy.</b> Invariant: while Armed and not Queued, the node is linked at a tick at or before
/// the due tick in the word (<see cref="WheelNode.Deadline"/> &lt;= due). So a Change to a due tick at or after the
/// word's only stores it (one CAS, no inbox, no wake): when the wheel reaches the old slot it finds the later due tick and
/// links the node again there. The re-insertion is Kafka's (its <c>TimingWheel</c>'s expired bucket hands each entry back
/// to <c>addTimerTaskEntry</c>, which places it by its expiration again, a finer bucket or a run); here the expiration
/// may also have moved later meanwhile, so a timer pushed back many times moves once per tick it reaches, not once per
/// push (Linux's <c>mod_timer</c> likewise leaves a re-armed timer where it is when the new expiry falls in its bucket,
/// since the non-cascading wheel of 4.8). Any
/// other Change (earlier than the word's due, a re-arm of a timer that is not Armed, a stop, a Dispose) sets Queued and
/// hands the node to the owner through the inbox, as a delay's insert and cancel do: the owner unlinks it and settles it
/// from the word as it then reads it (<see cref="Settle"/>).</para>
/// <para><b>Firing.</b> The owner settles a node it finds due with one CAS that also moves the word's due tick on (to
/// <see cref="NeverDue"/> for a one-shot timer, to its next tick for a periodic one): a Change that lands first makes the
/// CAS fail and the owner reads the word again, and one that lands after it applies to the next arming. So each arming
/// fires at most once, and a Change is never lost. The callback and its state are read before that CAS, while the owner
/// still holds the node: a Dispose after the CAS may recycle it.</para>
/// <para><b>The period</b> is in a second word with the version in its top 16 bits, changed by CAS only while the
/// version matches, so a stale handle never writes another timer's period. Two Change calls racing on one timer each
/// store their due tick and their period atomically, but not the pair: the timer may end with one's due tick and the
/// other's period.</para>
/// </remarks>
[DebuggerDisplay("Due = {DueOf(_word)}, Flags = {_word & 7}")]
internal sealed class CallbackTimerNode : WheelNode, IPoolNode<CallbackTimerNode>
{
    internal const long Armed = 1;
    internal const long Queued = 2;
    internal const long Disposed = 4;
    /// <summary>With <see cref="Disposed"/>: the wheel's Dispose ended the timer, not its user (named by the exception).</summary>
    internal const long ByWheel = 8;
    private const long Flags = 0xFF;
    private const int VersionShift = 8;
    private const int DueShift = 24;
    private const int PeriodVersionShift = 48;
    private const long PeriodMask = (1L << PeriodVersionShift) - 1;

    /// <summary>The due tick of a stopped timer (and the largest the word holds: a tick 34 years after the wheel's origin).</summary>
    internal const long NeverDue = (1L << (64 - DueShift)) - 1;

    private long _word = NeverDue << DueShift;
    private long _periodWord;
    private Action<object?>? _callback;
    private object? _state;

    /// <summary>The wheel the timer belongs to (set for each use).</summary>
    internal TimerWheel? Wheel;

    /// <summary>Next node in the change inbox; also the pool's link (a pooled node is in no inbox).</summary>
    internal CallbackTimerNode? NextChange;

    ref CallbackTimerNode? IPoolNode<CallbackTimerNode>.Next => ref NextChange;

    internal static long DueOf(long word) => (long)((ulong)word >> DueShift);

    private static long WithDue(long word, long due) => (word & ((1L << DueShift) - 1)) | (due << DueShift);

    private static short VersionOf(long word) => (short)(word >> VersionShift);

    /// <summary>The word, for tests and diagnostics.</summary>
    internal long Word => Volatile.Read(ref _word);

    /// <summary>
    /// Rents a node for a new timer on <paramref name="wheel"/>, due at <paramref name="due"/> (a tick, or
    /// <see cref="NeverDue"/>), every <paramref name="periodMs"/> ms after (0: once); returns the node, and its use's version in <paramref name="version"/>. When due, the
    /// node is Queued: the caller pushes it (<see cref="TimerWheel.QueueChange"/>). Nothing is published before that push.
    /// </summary>
    internal static CallbackTimerNode Rent(TimerWheel wheel, Action<object?> callback, object? state, long due, long periodMs, out short version)
    {
        CallbackTimerNode node = ObjectPool<CallbackTimerNode>.TryRent() ?? new CallbackTimerNode();
        long word = Volatile.Read(ref node._word);
        Debug.Assert((word & Flags) == 0 && DueOf(word) == NeverDue, "a pooled node is stopped and held by nobody");
        version = VersionOf(word);
        node.Wheel = wheel;
        node._callback = callback;
        node._state = state;
        node._periodWord = ((long)(ushort)version << PeriodVersionShift) | periodMs;
        node._word = WithDue(word, due) | (due == NeverDue ? 0 : Queued);
        return node;
    }

    internal static void ThrowDisposed(bool byWheel) => throw new ObjectDisposedException(nameof(SpindleTimer), byWheel
        ? "This SpindleTimer's TimerWheel has been disposed, which stopped the timer. Create timers on a wheel that is still in use (or on TimerWheel.Default)."
        : "This SpindleTimer has been disposed. Create a new one with TimerWheel.CreateTimer; a timer to stop and start again is stopped with Change(Timeout.InfiniteTimeSpan, ...), not disposed.");

    /// <summary>As the period of <see cref="Change"/>: keep the timer's period (<see cref="SpindleTimer.Change(TimeSpan)"/>).</summary>
    internal const long KeepPeriod = -1;

    /// <summary><see cref="Change"/>: the use is disposed or stale, and nothing was changed.</summary>
    internal const int ChangeEnded = -1;
    /// <summary><see cref="Change"/>: the word holds the change, and the owner needs no word of it.</summary>
    internal const int ChangeStored = 0;
    /// <summary><see cref="Change"/>: this call set Queued; the caller pushes the node to the change inbox.</summary>
    internal const int ChangePush = 1;

    /// <summary>
    /// Use <paramref name="version"/>'s Change to due tick <paramref name="due"/> (<see cref="NeverDue"/>: stop) and
    /// period <paramref name="periodMs"/> (<see cref="KeepPeriod"/>: the one it has): <see cref="ChangePush"/> if the
    /// caller must push the node to the change inbox (this call set Queued), <see cref="ChangeStored"/> if the word alone
    /// holds it, <see cref="ChangeEnded"/> for a disposed or stale use, which the caller reports
    /// (<see cref="ThrowEnded"/> for <see cref="SpindleTimer.Change(TimeSpan, TimeSpan)"/>, false for <c>ITimer.Change</c>).
    /// </summary>
    internal int Change(short version, long due, long periodMs)
    {
        long period = Volatile.Read(ref _periodWord);
        while (((period & PeriodMask) != periodMs && periodMs != KeepPeriod) || (short)(period >> PeriodVersionShift) != version) // the same period, or kept: no write
        {
            if ((short)(period >> PeriodVersionShift) != version)
            {
                return ChangeEnded; // a later use's period word (the main word may still show this use, being recycled): this use is over
            }
            period = Interlocked.CompareExchange(ref _periodWord, (period & ~PeriodMask) | periodMs, period) is var seen && seen == period
                ? (period & ~PeriodMask) | periodMs
                : seen;
        }
        long word = Volatile.Read(ref _word);
        while (true)
        {
            if (VersionOf(word) != version || (word & Disposed) != 0)
            {
                return ChangeEnded;
            }
            long next = WithDue(word, due);
            int push = ChangeStored;
            if ((word & Queued) != 0)
            {
                // The owner has yet to settle it, and reads this word when it does (its CAS clearing Queued fails otherwise).
            }
            else if ((word & Armed) != 0 && due != NeverDue && due >= DueOf(word))
            {
                // Pushed back: linked at or before the old due tick, so at or before this one (the invariant in the remarks).
            }
            else if ((word & Armed) != 0 || due != NeverDue)
            {
                next |= Queued; // earlier, a stop (left linked, it would hold the node until its old tick), or a re-arm
                push = ChangePush;
            }
#if DEBUG
            TestHookBeforeChangeCas?.Invoke(this);
#endif
            long witnessed = Interlocked.CompareExchange(ref _word, next, word);
            if (witnessed == word)
            {
                return push;
            }
            word = witnessed;
        }
    }

    /// <summary>Throws for use <paramref name="version"/>, which <see cref="Change"/> found ended: naming the wheel if its Dispose ended it.</summary>
    internal void ThrowEnded(short version)
    {
        long word = Volatile.Read(ref _word);
        ThrowDisposed(byWheel: (word & ByWheel) != 0 && (word & Disposed) != 0 && VersionOf(word) == version);
    }

#if DEBUG
    /// <summary>
    /// Tests only (a Debug build): run by <see cref="Change"/> between its read of the word and its CAS, on the calling
    /// thread (<c>SpindleTimerChangeRaceTests</c> fires the timer there, or disposes its wheel).
    /// </summary>
    internal static Action<CallbackTimerNode>? TestHookBeforeChangeCas;

    /// <summary>
    /// Tests only (a Debug build): run by <see cref="Dispose"/> between its read of the word and the CAS that ends the use,
    /// on the calling thread (<c>SpindleTimerSettlementRaceTests</c> lands a Change there).
    /// </summary>
    internal static Action<CallbackTimerNode>? TestHookBeforeDisposeCas;

    /// <summary>
    /// Tests only (a Debug build): run by <see cref="Settle"/> between its read of the word and its CAS, on the owner's
    /// thread, inside its pass (<c>SpindleTimerSettlementRaceTests</c> lands a Change there).
    /// </summary>
    internal static Action<CallbackTimerNode>? TestHookBeforeSettleCas;

    /// <summary>
    /// Tests only (a Debug build): run by <see cref="Settle"/> just after its CAS succeeded, before it returns, on the
    /// owner's thread (<c>SpindleTimerSettlementRaceTests</c> lands the user's Dispose there, which may recycle the node).
    /// </summary>
    internal static Action<CallbackTimerNode>? TestHookAfterSettleCas;

#endif
    /// <summary>
    /// Ends use <paramref name="version"/> (idempotent; a stale use does nothing). Returns true if the caller must push the
    /// node to the change inbox so that its owner unlinks and recycles it; a node its owner does not hold is recycled here.
    /// </summary>
    internal bool Dispose(short version)
    {
        long word = Volatile.Read(ref _word);
        while (true)
        {
            if (VersionOf(word) != version)
            {
                return false;
            }
            if ((word & Disposed) != 0)
            {
                if ((word & ByWheel) == 0)
                {
                    return false;
                }
                // The wheel's Dispose ended it and left it to this handle: letting go of it is this call's.
                long released = word & ~ByWheel;
                long seen = Interlocked.CompareExchange(ref _word, released, word);
                if (seen == word)
                {
                    if ((released & (Armed | Queued)) == 0)
                    {
                        Recycle();
                    }
                    return false;
                }
                word = seen;
                continue;
            }
            long next = WithDue(word, NeverDue) | Disposed;
            bool push = (word & (Armed | Queued)) == Armed;
            if (push)
            {
                next |= Queued;
            }
#if DEBUG
            TestHookBeforeDisposeCas?.Invoke(this);
#endif
            long witnessed = Interlocked.CompareExchange(ref _word, next, word);
            if (witnessed == word)
            {
                if ((next & (Armed | Queued)) == 0)
                {
                    Recycle(); // the owner holds it nowhere: the user's hold was the last
                }
                return push;
            }
            word = witnessed;
        }
    }

    /// <summary>True while use <paramref name="version"/> is live, or was ended by its wheel's Dispose and its user has not disposed it yet.</summary>
    internal bool IsLiveOrEndedByWheel(short version)
    {
        long word = Volatile.Read(ref _word);
        return VersionOf(word) == version && ((word & Disposed) == 0 || (word & ByWheel) != 0);
    }

    /// <summary>True while use <paramref name="version"/> is neither disposed nor stale.</summary>
    internal bool IsLive(short version)
    {
        long word = Volatile.Read(ref _word);
        return VersionOf(word) == version && (word & Disposed) == 0;
    }

    /// <summary>What the owner does with a node it settles (<see cref="Settle"/>).</summary>
    internal enum Settlement
    {
        /// <summary>Nothing: stopped, or still Queued (the inbox entry settles it again).</summary>
        Keep,
        /// <summary>Link it at the tick given.</summary>
        Link,
        /// <summary>Run the callback; the timer is stopped (a one-shot).</summary>
        Fire,
        /// <summary>Link it at the tick given (its next period), and run the callback.</summary>
        FireAndLink,
        /// <summary>Recycle it: disposed, and the owner's hold was the last.</summary>
        Recycle,
    }

    /// <summary>
    /// The owner settles the node, which is in no slot: taken from a slot it was linked in (<paramref name="fromInbox"/>
    /// false: it holds it as Armed), or from the change inbox (true: as Queued, which this clears). Decides from the word,
    /// with the wheel's time at <paramref name="elapsed"/>, and publishes the decision with one CAS (see remarks on the
    /// class). A periodic timer's next tick is the first after <paramref name="now"/>, the clock's tick the pass expires
    /// up to (<see cref="NextTick"/>). Owner only.
    /// </summary>
    internal Settlement Settle(bool fromInbox, long elapsed, long now, out long linkAt, out Action<object?>? callback, out object? state)
    {
        Debug.Assert(Slot < 0, "unlinked before it is settled");
        callback = _callback; // stable while the owner holds the node; a CAS below may let it go
        state = _state;
        long word = Volatile.Read(ref _word);
        while (true)
        {
            Debug.Assert((word & (fromInbox ? Queued : Armed)) != 0, "the owner settles only a node it holds");
            long next = fromInbox ? word & ~Queued : word;
            Settlement settlement;
            linkAt = 0;
            long due = DueOf(word);
            if ((word & Disposed) != 0)
            {
                next &= ~Armed;
                settlement = (next & Queued) == 0 ? Settlement.Recycle : Settlement.Keep;
            }
            else if (due == NeverDue)
            {
                next &= ~Armed;
                settlement = Settlement.Keep;
            }
            else if (due > elapsed)
            {
                next |= Armed;
                linkAt = due;
                settlement = Settlement.Link;
            }
            else
            {
                long period = Volatile.Read(ref _periodWord) & PeriodMask;
                long following = period == 0 ? NeverDue : NextTick(due, period, now);
                if (following == NeverDue)
                {
                    next = WithDue(next, NeverDue) & ~Armed;
                    settlement = Settlement.Fire;
                }
                else
                {
                    next = WithDue(next, following) | Armed;
                    linkAt = following;
                    settlement = Settlement.FireAndLink;
                }
            }
#if DEBUG
            TestHookBeforeSettleCas?.Invoke(this);
#endif
            long witnessed = Interlocked.CompareExchange(ref _word, next, word);
            if (witnessed == word)
            {
#if DEBUG
                TestHookAfterSettleCas?.Invoke(this);
#endif
                return settlement;
            }
            word = witnessed;
        }
    }

    /// <summary>
    /// The first tick of a periodic timer after <paramref name="elapsed"/>, counting whole periods from
    /// <paramref name="due"/> (the tick it fired for): ticks missed while the wheel was late coalesce into the one that
    /// fired, as <see cref="SpindlePeriodicTimer"/>'s do, and the phase does not drift. <see cref="NeverDue"/> past the word's range.
    /// </summary>
    internal static long NextTick(long due, long period, long elapsed)
    {
        long periods = elapsed < due ? 1 : (elapsed - due) / period + 1;
        return periods > (NeverDue - 1 - due) / period ? NeverDue : due + periods * period;
    }

    /// <summary>
    /// The wheel's Dispose ends the timer, which the owner holds (in a slot, or in the inbox: <paramref name="fromInbox"/>).
    /// A timer its user had not disposed stays with its handle (<see cref="ByWheel"/>: its Change names the wheel), and
    /// goes to the pool when the user disposes it; one the user had disposed is recycled by the owner's last let-go. Owner only.
    /// </summary>
    internal void DisposeByWheel(bool fromInbox)
    {
        // No pass settles it again: the callback and state go now, while the owner's hold keeps the node this use's.
        _callback = null;
        _state = null;
        long word = Volatile.Read(ref _word);
        while (true)
        {
            long next = fromInbox ? word & ~Queued : word;
            next &= ~Armed;
            if ((word & Disposed) == 0)
            {
                next = WithDue(next, NeverDue) | Disposed | ByWheel;
            }
            long witnessed = Interlocked.CompareExchange(ref _word, next, word);
            if (witnessed == word)
            {
                if ((next & (Queued | ByWheel)) == 0)
                {
                    Recycle(); // the user had let go: the owner's hold was the last
                }
                return;
            }
            word = witnessed;
        }
    }

    /// <summary>
    /// Back to the pool, by the one holder whose CAS left the node Disposed and held by nobody: cleared, and on to the next
    /// version, which a stale handle's every call then sees (its Change throws, its Dispose does nothing).
    /// </summary>
    internal void Recycle()
    {
        long word = Volatile.Read(ref _word);
        Debug.Assert((word & (Armed | Queued)) == 0 && (word & Disposed) != 0, "recycled by its last holder");
        short next = (short)(VersionOf(word) + 1);
        _callback = null;
        _state = null;
        Wheel = null;
        NextChange = null;
        Next = null;
        Prev = null;
        Slot = -1;
        Deadline = 0;
        Volatile.Write(ref _periodWord, (long)(ushort)next << PeriodVersionShift);
        Volatile.Write(ref _word, ((long)(ushort)next << VersionShift) | (NeverDue << DueShift));
        ObjectPool<CallbackTimerNode>.Return(this);
    }
}

using System;
using System.Diagnostics;
using System.Threading;

namespace SpindleLib;

/// <summary>
/// Timers a worker owns (installed by a higher layer, the timer wheel): the worker runs the due ones between work
/// items, and parks no longer than until the next one is due.
/// </summary>
internal abstract class WorkerTimers
{
    /// <summary>True when the worker has timers (or cancellations) to look after. Read by the owning worker.</summary>
    public abstract bool HasPending { get; }

    /// <summary>
    /// Runs every timer now due (their continuations run on this worker) and tells how long until the next is due
    /// (<see cref="System.Threading.Timeout.InfiniteTimeSpan"/> for none). Returns true if anything ran. Owner only.
    /// </summary>
    public abstract bool Poll(out TimeSpan untilNext);

    /// <summary>
    /// As <see cref="Poll"/>, but the continuations of the timers due are queued to the workers in order instead of run
    /// here, so that an idle worker runs a share of them, and the timers they start go into its own timers: how a worker
    /// whose timers far outnumber an idle worker's hands it sessions (<c>WorkerPool.ShouldShareTimers</c>). Owner only, from
    /// its loop, between items.
    /// </summary>
    public virtual bool PollSharing(out TimeSpan untilNext) => Poll(out untilNext);

    /// <summary>
    /// How many timers the worker holds, as its owner last published (a hint, for <c>WorkerPool.ShouldShareTimers</c>). Any thread.
    /// </summary>
    public virtual long Count => 0;

    /// <summary>
    /// Called by the owning worker just before it blocks (after its last <see cref="Poll"/>): from now until
    /// <see cref="Unpark"/>, other threads may tidy the timers (release cancelled ones). Returns false, and stays owned,
    /// if something arrived that the worker must handle first: it must then not block, but poll again.
    /// </summary>
    public virtual bool TryPark() => true;

    /// <summary>Called by the owning worker when it wakes from a block that <see cref="TryPark"/> allowed: it owns its timers again.</summary>
    public virtual void Unpark()
    {
    }

    // Lending (see Lend, LendForContinuation, Reclaim, TryRescue). Invariant: the timers are touched by their owner while
    // _lent is NotLent, and by the one thread that holds _rescuer while _lent is not; never by both. Dekker's protocol
    // (E. W. Dijkstra, "Cooperating sequential processes", 1965), each side storing its own flag, then a fence, then
    // reading the other's:
    // - Lent for an item (LentForItem): the owner takes its timers back with an exchange of _lent (a full fence) before it
    //   reads _rescuer; a rescuer claims _rescuer with a CAS (a full fence) before it reads _lent.
    // - Lent around an inline continuation of the owner's own pass (LentForContinuation): the owner pays no atomic
    //   operation, since it lends and takes back around every timer it fires: a volatile write of _lent, then a volatile
    //   read of _rescuer, which x64 may reorder (a load may pass an earlier store to another address). The rescuer pays
    //   instead: after its CAS and a first read that finds the timers lent for a continuation, it runs a process-wide
    //   barrier (Interlocked.MemoryBarrierProcessWide: membarrier(2) or an inter-processor interrupt on Linux,
    //   FlushProcessWriteBuffers on Windows), which makes every thread of the process execute a full fence, and reads
    //   _lent again. If the owner's fence falls before its store of NotLent, its read of _rescuer comes after the CAS and
    //   sees it; if after, the store is visible to the rescuer's second read. This is the asymmetric Dekker of Dice,
    //   Huang and Yang ("Asymmetric Dekker Synchronization", Sun Microsystems, 2001), as HotSpot's serialization page and
    //   userspace RCU's membarrier flavour use it (.NET builds only: the netstandard2.1 build takes these back with the
    //   exchange too, see Reclaim). ARM64 needs the barrier as much as x64: on a core with RCpc (ARMv8.3) RyuJIT reads
    //   volatile fields with LDAPR, which, unlike LDAR, may complete before an earlier STLR (dotnet/runtime#67384); and
    //   RyuJIT does not move a volatile read above a volatile write (WeakMemory relies on it too).
    // The owner moves only NotLent -> LentForItem -> NotLent (by exchange) and NotLent -> LentForContinuation -> NotLent
    // (by store). So either the rescuer sees the timers taken back and leaves them, or the owner sees the rescuer and waits
    // for it, which holds them only for a pass that runs no user code.
    private const int NotLent = 0;
    private const int LentForItem = 1;
    private const int LentForContinuation = 2;
    private int _lent; // written by the owner only
    private int _itemsEntered; // written by the owner only (EnterItem): a count a busy rescuer compares between its looks
    private int _rescuer; // 0, or 1 while one rescuer holds the timers (thieves race for it with a CAS)

    /// <summary>True while the owner has lent its timers (<see cref="Lend"/>, <see cref="LendForContinuation"/>). Owner only.</summary>
    public bool IsLent => _lent != NotLent;

    /// <summary>
    /// True while the owning worker runs an item from its loop (<see cref="EnterItem"/>) and no pass of its own is under
    /// way: a timer it starts then may lend the timers (a pass running inline continuations must keep them). Owner only.
    /// </summary>
    protected bool InItem { get; set; }

    /// <summary>
    /// True while the owner runs a timer's continuation inline in a pass of its own (<see cref="LendForContinuation"/>):
    /// a timer it starts then, or a pass nested in it, lends the timers again afterwards. Owner only.
    /// </summary>
    protected bool InContinuation { get; set; }

    /// <summary>
    /// Called by the owning worker before it runs an item from its loop: lends its timers if it has any
    /// (<see cref="Lend"/>), and notes the item, so that a timer started during it lends them too. Owner only.
    /// </summary>
    public void EnterItem()
    {
        InItem = true;
        _itemsEntered++;
        if (HasPending)
        {
            Lend();
        }
    }

    /// <summary>Called by the owning worker after the item <see cref="EnterItem"/> noted: takes its timers back if lent. Owner only.</summary>
    public void ExitItem()
    {
        InItem = false;
        if (_lent != NotLent)
        {
            Reclaim();
        }
    }

    /// <summary>
    /// Lends the timers while the owner runs an item (<see cref="EnterItem"/>): until <see cref="Reclaim"/>, it does not
    /// touch them, and an idle worker may fire the overdue ones (<see cref="TryRescue"/>), so a long item does not hold
    /// back timers that fall due meanwhile. Owner only; an owner that needs its timers during the item (it starts a timer,
    /// or polls them while it blocks) reclaims them first and lends them again after. The owner pays a volatile write
    /// here and an exchange in <see cref="Reclaim"/>: only while it has timers.
    /// </summary>
    public void Lend() => Volatile.Write(ref _lent, LentForItem);

    /// <summary>
    /// How many items the owner has begun (<see cref="EnterItem"/>), and whether its timers are lent for one now: a busy
    /// worker that finds them lent for an item with the same count as at its previous look knows the owner has been in
    /// one item since (<c>WorkerPool.RescueOverdueTimers</c>). Any thread; read racily, as hints.
    /// </summary>
    public int ItemsEntered => Volatile.Read(ref _itemsEntered);

    /// <inheritdoc cref="ItemsEntered"/>
    public bool IsLentForItem => Volatile.Read(ref _lent) == LentForItem;

    /// <summary>
    /// Lends the timers while the owner runs a timer's continuation inline, in the middle of a pass of its own: until
    /// <see cref="Reclaim"/>, it does not touch them, and an idle worker may take over the pass if it has run too long
    /// (<see cref="PassRunsLong"/>): a continuation that blocks or computes for long then holds back none of the owner's
    /// other timers. On .NET the owner pays two plain stores and a load a continuation (see the fields); the rescuer pays a
    /// process-wide barrier. Owner only; the timers must be consistent (the pass's state saved in them, as for a nested
    /// pass: see <c>WheelShard.Advance</c>).
    /// </summary>
    protected void LendForContinuation()
    {
        Debug.Assert(_lent == NotLent && !InItem, "a pass lends only timers it holds, outside an item's lending");
        InContinuation = true;
        Volatile.Write(ref _lent, LentForContinuation);
    }

    /// <summary>
    /// Called by the owner after an inline continuation <see cref="LendForContinuation"/> lent the timers for: takes them
    /// back if still lent (the continuation may have taken them back itself), waiting for a rescuer that holds them. Owner only.
    /// </summary>
    protected void EndContinuation()
    {
        InContinuation = false;
        if (_lent != NotLent)
        {
            Reclaim();
        }
    }

    /// <summary>
    /// Lends the timers again after the owner took them back in the middle of an item or of an inline continuation (to
    /// start a timer, or for a pass nested in it), as <see cref="EnterItem"/> or <see cref="LendForContinuation"/> lent
    /// them. Owner only.
    /// </summary>
    protected void LendAgain()
    {
        if (InItem)
        {
            if (HasPending)
            {
                Volatile.Write(ref _lent, LentForItem);
            }
        }
        else if (InContinuation)
        {
            Volatile.Write(ref _lent, LentForContinuation);
        }
    }

    /// <summary>Takes lent timers back (<see cref="Lend"/>), waiting for a rescuer that holds them to finish its pass. Owner only.</summary>
    public void Reclaim()
    {
#if NET
        if (_lent == LentForContinuation)
        {
            Volatile.Write(ref _lent, NotLent); // no fence: a rescuer that finds this lending fences for both (see the fields)
        }
        else
#endif
        {
            // The full fence before the read of _rescuer (see the fields). The netstandard2.1 build takes a continuation's
            // lending back this way too: the runtimes it serves (Mono, Unity's IL2CPP) are not known to implement
            // MemoryBarrierProcessWide as a barrier on every other thread, which the unfenced store relies on.
            Interlocked.Exchange(ref _lent, NotLent);
        }
        if (Volatile.Read(ref _rescuer) != 0)
        {
            SpinWait spin = default;
            while (Volatile.Read(ref _rescuer) != 0)
            {
                spin.SpinOnce();
            }
        }
    }

    /// <summary>
    /// Called by an idle worker for another worker's timers: if their owner has lent them (it is running an item, or a
    /// timer's continuation inline in a pass that has run long) and some are overdue, fires those on the calling thread's
    /// behalf (their continuations are queued to the workers, not run here) and returns true. False if the timers are not
    /// lent, nothing is overdue, the pass has not run long, or another rescuer holds them.
    /// </summary>
    public bool TryRescue()
    {
        int lent = Volatile.Read(ref _lent);
        if (lent == NotLent || !IsOverdue() || (lent == LentForContinuation && !PassRunsLong()))
        {
            return false; // a pass that has not run long is left to its owner: it takes the timers back in nanoseconds
        }
        if (Interlocked.CompareExchange(ref _rescuer, 1, 0) != 0)
        {
            return false;
        }
        bool ran = false;
        try
        {
#if DEBUG
            TestHookRescuerClaimed?.Invoke(this);
#endif
            lent = Volatile.Read(ref _lent); // after the CAS's fence
#if NET
            if (lent == LentForContinuation)
            {
                // The owner takes these back with a plain store: this barrier is the fence its side lacks (see the fields).
                // The netstandard2.1 build's owner takes them back with the exchange (see Reclaim), so the CAS above is
                // enough there, and a runtime that serves it need not have this barrier at all.
#if DEBUG
                TestHookProcessWideBarrier?.Invoke(this);
#endif
                Interlocked.MemoryBarrierProcessWide();
                lent = Volatile.Read(ref _lent);
            }
#endif
            if (lent != NotLent) // the owner has not taken them back (see the fields)
            {
                ran = Rescue();
            }
        }
        finally
        {
            Volatile.Write(ref _rescuer, 0);
        }
        return ran;
    }

#if DEBUG
    /// <summary>Tests only: runs on a rescuer that has claimed the timers, before it reads whether they are still lent.</summary>
    internal static Action<WorkerTimers>? TestHookRescuerClaimed;

    /// <summary>Tests only: runs on a rescuer just before it runs the process-wide barrier (.NET builds only).</summary>
    internal static Action<WorkerTimers>? TestHookProcessWideBarrier;
#endif

    /// <summary>True when a timer is overdue, as far as the owner last published. Any thread.</summary>
    protected virtual bool IsOverdue() => false;

    /// <summary>
    /// True when the owner's pass that lent the timers for a continuation (<see cref="LendForContinuation"/>) has run long
    /// enough to take over: only a hint (a wrong answer costs a rescue of a pass about to end, or a later look). Any thread.
    /// </summary>
    protected virtual bool PassRunsLong() => false;

    /// <summary>
    /// How long until the earliest timer falls due, as far as the owner last published (zero if one is overdue;
    /// <see cref="Timeout.InfiniteTimeSpan"/> for none): how long another idle worker may park before it looks whether
    /// to rescue them (<see cref="TryRescue"/>). Any thread.
    /// </summary>
    public virtual TimeSpan UntilDue() => Timeout.InfiniteTimeSpan;

    /// <summary>
    /// Fires the due timers for a rescuer that holds lent timers (<see cref="TryRescue"/>), queuing their continuations to
    /// the workers instead of running them; true if any fired.
    /// </summary>
    protected virtual bool Rescue() => false;
}

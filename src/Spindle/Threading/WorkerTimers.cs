using System;
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
    /// Called by the owning worker just before it blocks (after its last <see cref="Poll"/>): from now until
    /// <see cref="Unpark"/>, other threads may tidy the timers (release cancelled ones). Returns false, and stays owned,
    /// if something arrived that the worker must handle first: it must then not block, but poll again.
    /// </summary>
    public virtual bool TryPark() => true;

    /// <summary>Called by the owning worker when it wakes from a block that <see cref="TryPark"/> allowed: it owns its timers again.</summary>
    public virtual void Unpark()
    {
    }

    // Lending (see Lend, Reclaim, TryRescue). Invariant: the timers are touched by their owner while _lent is 0, and by
    // the one thread that holds _rescuer while _lent is 1; never by both. Dekker's protocol (E. W. Dijkstra, "Cooperating
    // sequential processes", 1965), each side storing its own flag, then a full fence, then reading the other's: the
    // owner takes its timers back with an exchange of _lent (the fence) before it reads _rescuer; a rescuer claims
    // _rescuer with a CAS (the fence) before it reads _lent. So either the rescuer sees the timers taken back and leaves
    // them, or the owner sees the rescuer and waits for it, which holds them only for a pass that runs no user code.
    private int _lent; // written by the owner only
    private int _rescuer; // 0, or 1 while one rescuer holds the timers (thieves race for it with a CAS)

    /// <summary>True while the owner has lent its timers (<see cref="Lend"/>). Owner only.</summary>
    public bool IsLent => _lent != 0;

    /// <summary>
    /// True while the owning worker runs an item from its loop (<see cref="EnterItem"/>) and no pass of its own is under
    /// way: a timer it starts then may lend the timers (a pass running inline continuations must keep them). Owner only.
    /// </summary>
    protected bool InItem { get; set; }

    /// <summary>
    /// Called by the owning worker before it runs an item from its loop: lends its timers if it has any
    /// (<see cref="Lend"/>), and notes the item, so that a timer started during it lends them too. Owner only.
    /// </summary>
    public void EnterItem()
    {
        InItem = true;
        if (HasPending)
        {
            Lend();
        }
    }

    /// <summary>Called by the owning worker after the item <see cref="EnterItem"/> noted: takes its timers back if lent. Owner only.</summary>
    public void ExitItem()
    {
        InItem = false;
        if (_lent != 0)
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
    public void Lend() => Volatile.Write(ref _lent, 1);

    /// <summary>Takes lent timers back (<see cref="Lend"/>), waiting for a rescuer that holds them to finish its pass. Owner only.</summary>
    public void Reclaim()
    {
        Interlocked.Exchange(ref _lent, 0); // the full fence before the read of _rescuer (see the fields)
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
    /// Called by an idle worker for another worker's timers: if their owner has lent them (it is running an item) and
    /// some are overdue, fires those on the calling thread's behalf (their continuations are queued to the workers, not
    /// run here) and returns true. False if the timers are not lent, nothing is overdue, or another rescuer holds them.
    /// </summary>
    public bool TryRescue()
    {
        if (Volatile.Read(ref _lent) == 0 || !IsOverdue())
        {
            return false;
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
            if (Volatile.Read(ref _lent) != 0) // after the CAS's fence: the owner has not taken them back (see the fields)
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
#endif

    /// <summary>True when a timer is overdue, as far as the owner last published. Any thread.</summary>
    protected virtual bool IsOverdue() => false;

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

using System.Diagnostics;
using System.Threading;

namespace SpindleLib;

/// <summary>
/// The parked workers of a <see cref="WorkerPool"/>, and their wake-ups: each worker has its own, so a wake-up a
/// producer sends one worker can never be taken by another.
/// </summary>
/// <remarks>
/// <para>Each worker's slot is Running, Announced (it is about to block, or blocks) or Claimed (a producer chose it and
/// is releasing its semaphore). A worker announces (Running to Announced, then <see cref="_count"/> + 1, a full fence),
/// re-checks every queue, and blocks on its own semaphore. A producer that sees <see cref="_count"/> above zero claims
/// one announced worker with a CAS (Announced to Claimed), takes it off the count and releases that worker's semaphore.
/// A worker that leaves by itself (it found work in its re-check, a cancellation reached its timers, or its timed wait
/// ran out) CASes its own slot from Announced to Running; if that fails, it has been claimed, and it takes the wake-up
/// meant for it first (it is a few instructions away) before it runs anything. A worker runs no user code while it is
/// announced, not even its timers' continuations: a wake-up aimed at it would wait for that code while another announced
/// worker slept on.</para>
/// <para>Invariants: a slot is claimed at most once per announcement, and each claim releases exactly one permit on that
/// worker's own semaphore, which only that worker waits on; so every permit is consumed by the worker it was meant for,
/// and <see cref="_count"/> is the number of Announced slots (give or take a step in flight). The pool's first version
/// shared one counted semaphore among all workers, whose permits any waiter could take: a worker claimed during its
/// re-check, which had taken an item and waited for "its" permit before running it, lost the permit to another worker
/// that parked in between and then slept with the item in hand, for ever (found with a per-item event log in the
/// sequential benchmark, about one run in 40). The aimed wake-up follows Go's runtime, where an idle M sleeps on its own
/// note (stopm's notesleep on m.park) and a producer wakes one chosen M (startm's notewakeup).</para>
/// </remarks>
internal sealed class IdleSet
{
    private const int Running = 0;
    private const int Announced = 1;
    private const int Claimed = 2;

    private readonly Slot[] _slots;
    private int _count;
    private int _lastAnnounced;

    public IdleSet(int workerCount)
    {
        _slots = new Slot[workerCount];
        for (int i = 0; i < workerCount; i++)
        {
            _slots[i] = new Slot();
        }
    }

    /// <summary>How many workers have announced and not been claimed or left (a racy count: a fast test for producers).</summary>
    public int Count => Volatile.Read(ref _count);

    /// <summary>Worker <paramref name="worker"/> is about to block: after this (a full fence) it re-checks every queue.</summary>
    public void Announce(int worker)
    {
        Slot slot = _slots[worker];
        Volatile.Write(ref slot.State, Announced);
        Volatile.Write(ref _lastAnnounced, worker);
        Interlocked.Increment(ref _count);
    }

    /// <summary>
    /// Producer: claims one announced worker and wakes it. Looks first at the worker after the one that announced last:
    /// with two workers, the one that has been parked longer, as a shared semaphore's waiters were woken. Waking the last
    /// one first measured worse: a worker that queues into its own run-next slot and takes the item straight back (an
    /// await of a just-queued Spindle.Run) woke the worker that had just parked, which then preempted it and stole the
    /// item before the take-back in 2-28% of 3000 tries, against 0.1-0.3% (found by review). False if none is announced.
    /// </summary>
    public bool TryWakeOne()
    {
        if (Volatile.Read(ref _count) <= 0)
        {
            return false;
        }
        Slot[] slots = _slots;
        int n = slots.Length;
        int i = Volatile.Read(ref _lastAnnounced) + 1;
        if (i >= n)
        {
            i = 0;
        }
        for (int looked = 0; looked < n; looked++, i = i + 1 == n ? 0 : i + 1)
        {
            Slot slot = slots[i];
            if (Volatile.Read(ref slot.State) == Announced
                && Interlocked.CompareExchange(ref slot.State, Claimed, Announced) == Announced)
            {
                Interlocked.Decrement(ref _count);
                slot.Wake.Release();
                return true;
            }
        }
        return false;
    }

    /// <summary>
    /// Worker <paramref name="worker"/> stays awake after announcing: it leaves the set, or, if a producer has claimed it
    /// meanwhile, takes that producer's wake-up first, so that no permit is left behind for a later wait.
    /// </summary>
    public void StandDown(int worker)
    {
        Slot slot = _slots[worker];
        if (Interlocked.CompareExchange(ref slot.State, Running, Announced) == Announced)
        {
            Interlocked.Decrement(ref _count);
            return;
        }
        slot.Wake.Wait(); // claimed: the release is a few instructions away, and only this worker can take it
        Volatile.Write(ref slot.State, Running);
    }

    /// <summary>
    /// Worker <paramref name="worker"/>, announced, blocks until a producer wakes it or <paramref name="milliseconds"/>
    /// pass (<see cref="Timeout.Infinite"/>: no limit). Either way it is Running, and out of the count, on return.
    /// True if it was woken.
    /// </summary>
    public bool Block(int worker, int milliseconds)
    {
        Slot slot = _slots[worker];
        if (slot.Wake.Wait(milliseconds))
        {
            // Claimed (or released by Dispose while still announced: then take it off the count here).
            if (Interlocked.Exchange(ref slot.State, Running) == Announced)
            {
                Interlocked.Decrement(ref _count);
            }
            return true;
        }
        StandDown(worker);
        return false;
    }

    /// <summary>Wakes every worker, announced or not (the pool is being disposed and its workers must see it).</summary>
    public void ReleaseAll()
    {
        foreach (Slot slot in _slots)
        {
            slot.Wake.Release();
        }
    }

    /// <summary>One worker's state and its own semaphore.</summary>
    private sealed class Slot
    {
        public int State;
        public readonly ParkingSemaphore Wake = new();
    }
}

/// <summary>
/// A counting semaphore that one thread waits on, which blocks at once: a monitor and a count (the lock guards the
/// count; a release pulses the lock). A worker parks on it only after its own spin has found nothing, so a wait spins no
/// more. <see cref="SemaphoreSlim"/>'s wait spins first, 140 rounds of <c>SpinWait.SpinOnce</c>, 130 of them
/// yields of the processor, and only then blocks for what is left of its timeout: beside other busy threads a yield gives
/// the core away for a whole time slice, so a worker's park until its next timer, due in a millisecond, took 135-400 ms
/// (10,000 loops of <c>Spindle.Delay(50)</c> beside two CPU hogs fired 209-276 ms late at the median; the workers used
/// 2% of a core each and never blocked). The .NET timer thread waits without a spin too.
/// </summary>
internal sealed class ParkingSemaphore
{
    private readonly object _lock = new();
    private int _permits; // guarded by _lock

    /// <summary>Adds a permit, and wakes the waiter if it blocks.</summary>
    public void Release()
    {
        lock (_lock)
        {
            _permits++;
            Monitor.Pulse(_lock);
        }
    }

    /// <summary>Takes a permit, blocking until one is released.</summary>
    public void Wait() => Wait(Timeout.Infinite);

    /// <summary>
    /// Takes a permit, blocking until one is released or <paramref name="milliseconds"/> have passed
    /// (<see cref="Timeout.Infinite"/>: no limit). True if it took one.
    /// </summary>
    public bool Wait(int milliseconds)
    {
        lock (_lock)
        {
            long start = milliseconds == Timeout.Infinite ? 0 : Stopwatch.GetTimestamp();
            while (_permits == 0)
            {
                int left = milliseconds;
                if (milliseconds != Timeout.Infinite)
                {
                    left -= (int)((Stopwatch.GetTimestamp() - start) * 1000 / Stopwatch.Frequency);
                    if (left <= 0)
                    {
                        return false; // ran out with no permit (a release meanwhile would have made the count non-zero)
                    }
                }
                Monitor.Wait(_lock, left); // woken by a release's pulse, or out of time: the loop looks at the count again
            }
            _permits--;
            return true;
        }
    }
}

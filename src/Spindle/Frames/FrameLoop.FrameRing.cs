using System;
using System.Diagnostics;
using System.Threading;

namespace SpindleLib;

/// <summary>
/// The loop's frame ring: short frame delays kept in a bucket per frame, a timer wheel of one level whose tick is a frame.
/// </summary>
/// <remarks>
/// <para>A <see cref="DelayFrame(int, FramePhase, CancellationToken)"/> of 2 to <see cref="FrameRingSize"/> - 1 frames
/// started inside a step of the loop went through the frame wheel: a waiter, a timer node linked into a wheel slot, the
/// node's continuation, and at expiry the node fired in the wheel's pass, its callback run, the waiter listed as expired,
/// then the node read (and recycled) when the phase reached the waiter. Three objects, each touched two or three times
/// at moments far apart, so most touches missed the cache: with 20,000 units each waiting 1–8 ticks this cost 3–6 times
/// a countdown of <see cref="NextFrame(CancellationToken)"/>s (decisions 48, user20). Here the waiter goes straight into
/// the bucket of frame <see cref="FrameCount"/> + n, a list linked through the waiters themselves, and the frame that
/// begins queues each for its phase: one object and no timer, nothing allocated once the waiters are pooled.</para>
/// <para><b>Invariants.</b> Only the thread inside a step of the loop reads or writes the buckets and
/// <see cref="_frameRingCount"/>: the waits are added inside a step (<see cref="DelayFrame(int, FramePhase, CancellationToken)"/>
/// sends every other caller to the frame wheel), and <see cref="BeginFrameCore"/> and the sweep run inside one. A wait is
/// due at frame F = <see cref="CurrentFrame"/> + n with 2 &lt;= n &lt; <see cref="FrameRingSize"/>, and its bucket is
/// F mod <see cref="FrameRingSize"/>: every bucket holds waits of one frame only, since frame F's bucket is emptied as
/// F begins, before any wait due in F + <see cref="FrameRingSize"/> could be added (detached as F's count is published,
/// its waits are queued after the wheels' passes, or with the next frame's if F's begin fails in between: see
/// <see cref="DetachFrameBucket"/>). A bucket holds its waits in start
/// order: each is appended at its tail and takes its sequence from the loop's counter as it is added, on the one thread
/// adding. A waiter's link (<see cref="PhaseWaiter.NextInRing"/>) is read and cleared before the waiter leaves the ring. The bucket holds the
/// waiter's queue hold (<see cref="FrameWaiter.HoldForQueue"/>): a waiter cancelled or let go of stays valid until the
/// frame takes it to its phase, which drops it, or until a sweep drops it.</para>
/// <para><b>Cancellation.</b> The waiter listens to its token from the start and completes at once when it fires, as
/// every frame wait does; only its queue hold stays in the bucket. A cancellation, or a combinator letting go, adds to
/// <see cref="_frameRingDone"/> (any thread, a hint: it may count a wait that has already left the ring), and a frame
/// that begins with that count at a quarter or more of the waits in the ring sweeps the finished ones out, so that a
/// scene unload returns its waiters to their pool at the next frame, and a trickle of cancellations costs O(1) each.</para>
/// </remarks>
public sealed partial class FrameLoop
{
    /// <summary>The frames the ring covers: a <see cref="DelayFrame(int, FramePhase, CancellationToken)"/> of fewer frames, started inside a step, uses it.</summary>
    internal const int FrameRingSize = 64;

    // Each frame's bucket is a singly linked list through its waiters (PhaseWaiter.NextInRing), oldest first: appending
    // and taking allocate nothing, and need no array sized for the busiest frame in each of the ring's buckets.
    private PhaseWaiter?[]? _ringHead;
    private PhaseWaiter?[]? _ringTail;
    private int _frameRingCount;
    private int _frameRingDone;
    // The waits of the frame beginning, detached from its bucket until the wheels' passes have run (DetachFrameBucket),
    // in start order unless a failed begin left some before them (_dueInOrder false). The thread inside the step only.
    private PhaseWaiter? _dueHead;
    private PhaseWaiter? _dueTail;
    private bool _dueInOrder = true;

    /// <summary>
    /// Starts a frame delay of <paramref name="frameCount"/> frames (2 to <see cref="FrameRingSize"/> - 1) in the ring.
    /// The thread inside a step of the loop only.
    /// </summary>
    private SpindleTask StartFrameDelay(FramePhase phase, int frameCount, CancellationToken cancellationToken)
    {
        Debug.Assert(IsInsideStep && frameCount >= 2 && frameCount < FrameRingSize, "a short frame delay inside a step");
        PhaseWaiter waiter = PhaseWaiter.Rent(phase, cancellationToken);
        waiter.Sequence = NextSequence();
        Debug.Assert(phase.Loop == this, "a frame delay waits in its phase's loop's ring");
        waiter.EnterRing();
        short token = waiter.Version;
        waiter.HoldForQueue();
        PhaseWaiter?[] heads = _ringHead ??= new PhaseWaiter?[FrameRingSize];
        PhaseWaiter?[] tails = _ringTail ??= new PhaseWaiter?[FrameRingSize];
        int bucket = (int)((_frameCount + frameCount) & (FrameRingSize - 1));
        if (tails[bucket] is { } tail)
        {
            tail.NextInRing = waiter;
        }
        else
        {
            heads[bucket] = waiter;
        }
        tails[bucket] = waiter;
        _frameRingCount++;
        waiter.RegisterCancellation();
        return new SpindleTask(waiter, token);
    }

    /// <summary>A ring wait was cancelled or let go of (any thread): a hint for <see cref="TakeFrameBucket"/>'s sweep.</summary>
    internal void NoteFrameRingDone() => Interlocked.Increment(ref _frameRingDone);

    /// <summary>
    /// Detaches the bucket of <paramref name="frame"/>, which is beginning, as its count is published and before anything
    /// of the begin that can fail (a wheel's pass, the lock of the held delays): <see cref="TakeFrameBucket"/> queues it
    /// after the passes. A begin that failed in between left its frame's waits here, and they are queued with the next
    /// frame's, one frame late, as a wheel's next pass fires what a failed pass left due; a bucket left in the ring
    /// instead held them until the ring came round, 64 frames late (FrameRingFailedBeginTests).
    /// </summary>
    private void DetachFrameBucket(long frame)
    {
        PhaseWaiter?[]? heads = _ringHead;
        if (heads is null)
        {
            return;
        }
        int bucket = (int)(frame & (FrameRingSize - 1));
        PhaseWaiter? head = heads[bucket];
        if (head is null)
        {
            return;
        }
        heads[bucket] = null;
        PhaseWaiter? tail = _ringTail![bucket];
        _ringTail[bucket] = null;
        if (_dueTail is { } last)
        {
            // Behind the waits of a frame whose begin failed: two runs in start order, which only the merge puts in order.
            last.NextInRing = head;
            _dueInOrder = false;
        }
        else
        {
            _dueHead = head;
        }
        _dueTail = tail;
    }

    /// <summary>
    /// Queues the waits <see cref="DetachFrameBucket"/> took for the frame beginning, after the wheels' passes: straight to
    /// their phases when nothing else expired in this frame (a bucket is in start order), else into the expired list,
    /// which <see cref="QueueExpired"/> merges by start order. Sweeps the ring first if enough of its waits have finished.
    /// </summary>
    private void TakeFrameBucket()
    {
        PhaseWaiter?[]? heads = _ringHead;
        if (heads is null)
        {
            return;
        }
        int done = Volatile.Read(ref _frameRingDone);
        if (done != 0 && (long)done * 4 >= _frameRingCount)
        {
            SweepFrameRing(heads);
        }
        PhaseWaiter? waiter = _dueHead;
        if (waiter is null)
        {
            return;
        }
        _dueHead = null;
        _dueTail = null;
        bool direct = _expiredCount == 0 && _dueInOrder;
        _dueInOrder = true;
        int n = 0;
        do
        {
            // The link is read and cleared before the waiter is queued: once queued, it may be recycled and rented again.
            PhaseWaiter? next = waiter.NextInRing;
            waiter.NextInRing = null;
            if (direct)
            {
                waiter.Phase!.AddBack(waiter);
            }
            else
            {
                AppendExpired(waiter);
            }
            n++;
            waiter = next;
        }
        while (waiter is not null);
        _frameRingCount -= n;
    }

    /// <summary>Drops the ring's finished waits (cancelled, or let go of), keeping the rest in order. Inside a step only.</summary>
    private void SweepFrameRing(PhaseWaiter?[] heads)
    {
        // Cleared first: a wait that finishes during the sweep counts towards the next one.
        Interlocked.Exchange(ref _frameRingDone, 0);
        PhaseWaiter?[] tails = _ringTail!;
        for (int bucket = 0; bucket < heads.Length; bucket++)
        {
            PhaseWaiter? kept = null;
            PhaseWaiter? waiter = heads[bucket];
            heads[bucket] = null;
            while (waiter is not null)
            {
                PhaseWaiter? next = waiter.NextInRing;
                waiter.NextInRing = null;
                if (waiter.IsDone)
                {
                    _frameRingCount--;
                    waiter.LetGoOfCompleted(); // may recycle it: its link was read and cleared first
                }
                else
                {
                    if (kept is null)
                    {
                        heads[bucket] = waiter;
                    }
                    else
                    {
                        kept.NextInRing = waiter;
                    }
                    kept = waiter;
                }
                waiter = next;
            }
            tails[bucket] = kept;
        }
    }

    /// <summary>Waits the ring holds, pending or finished and not yet swept (for tests). The thread running the loop only.</summary>
    internal int FrameRingHeld => _frameRingCount;

    /// <summary>Waits in the ring still pending (for tests: <see cref="PendingTimers"/>). Reads another thread's ring: tests only.</summary>
    private int FrameRingPending
    {
        get
        {
            int pending = 0;
            for (PhaseWaiter? w = _dueHead; w is not null; w = w.NextInRing)
            {
                pending += w.IsDone ? 0 : 1;
            }
            if (_ringHead is { } heads)
            {
                foreach (PhaseWaiter? head in heads)
                {
                    for (PhaseWaiter? w = head; w is not null; w = w.NextInRing)
                    {
                        if (!w.IsDone)
                        {
                            pending++;
                        }
                    }
                }
            }
            return pending;
        }
    }
}

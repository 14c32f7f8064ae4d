using System;
using System.Diagnostics;
using System.Runtime.CompilerServices;
using System.Threading;

namespace SpindleLib;

/// <summary>
/// Up to <see cref="Capacity"/> continuations of expired timers, run together on one worker, in the order they were
/// added. A wheel's main shard hands its due continuations to the workers this way, and so does a rescuer of a worker's
/// shard (<see cref="WheelShard"/>). A continuation that blocks or computes for long holds only itself: once the batch has
/// run <see cref="WheelShard.LongPassTicks"/> milliseconds, an idle worker takes over the continuations not yet begun
/// (<see cref="TryTakeRest"/>) and queues them as a batch of their own.
/// </summary>
/// <remarks>
/// <para><b>Taking over the rest.</b> Invariant: each continuation of a run is run once, by the runner (the thread in
/// <see cref="Execute"/>) if its index is below <see cref="_end"/> when the runner reaches it, else by the taker's new
/// batch; <see cref="_end"/> is written once per run, by the one taker whose CAS moved <see cref="_state"/> from Open to
/// Claimed, to one past the index the runner has published in <see cref="_cursor"/>, and the entries from there are moved
/// to the new batch. Dekker's protocol, each side storing, then fencing, then reading the other's word: before each
/// continuation the runner stores its index in <see cref="_cursor"/>, then reads <see cref="_state"/>; the taker claims
/// <see cref="_state"/> with a CAS, then reads <see cref="_cursor"/>. So either the taker reads the index the runner is
/// at (or a later one) and takes only what follows it, or the runner reads the claim and waits for the taker to set
/// <see cref="_end"/>. The runner pays no atomic operation a continuation: its store and load (which x64 may reorder) are
/// fenced by the taker's <see cref="Interlocked.MemoryBarrierProcessWide"/> after its CAS, which makes every thread
/// execute a full fence: if the runner's falls before its store, its load comes after the CAS and sees the claim; if
/// after, the taker's read sees the store. This is the asymmetric Dekker of Dice, Huang and Yang ("Asymmetric Dekker
/// Synchronization", 2001), as <see cref="WorkerTimers"/> lends a worker's shard around an inline continuation (decisions
/// section 34); the netstandard2.1 build stores the index with an exchange instead, since whether its runtimes' process-wide
/// barrier reaches every thread is not known. Taking the rest of a held item is work stealing of a blocked task's
/// remainder, and waiting for a run to have held long is Go's sysmon, which retakes a processor held in a system call for
/// over a tick (<c>retake</c>).</para>
/// <para>A run ends by closing <see cref="_state"/> with a CAS (one atomic operation a batch): a taker that read a batch
/// that has finished, or been reused, claims nothing, or claims the current run, whose protocol is as above. The taken
/// continuations follow the one the runner is at, in their order, through the pool's queue of fired timers' batches
/// (<see cref="WorkerPool.QueueTimers"/>).</para>
/// </remarks>
internal sealed class TimerBatch : DivisibleWorkItem, IPoolNode<TimerBatch>
{
    internal const int Capacity = 64;

    private readonly object?[] _waiters = new object?[Capacity];
    private readonly object?[] _states = new object?[Capacity];
    private int _count;
    private TimerBatch? _next;

    // The run's word (see the remarks): Closed while filled, queued or pooled (no taker may claim it); Open while it runs;
    // Claimed while a taker moves the rest; Taken once it has (final for the run: nothing is left to take).
    private const int Closed = 0;
    private const int Open = 1;
    private const int Claimed = 2;
    private const int Taken = 3;
    private int _state;
    private int _cursor; // the index the runner is at (its continuation running, or about to); written by the runner only
    private int _end; // the runner runs the continuations below it: the count, or what a taker left it
    private long _startedAt; // Stopwatch timestamp at which the run began

    ref TimerBatch? IPoolNode<TimerBatch>.Next => ref _next;

    public static TimerBatch Rent() => ObjectPool<TimerBatch>.TryRent() ?? new TimerBatch();

    /// <summary>Adds a continuation; true when the batch is full and must be queued.</summary>
    public bool Add(object waiter, object? state)
    {
        int i = _count;
        _waiters[i] = waiter;
        _states[i] = state;
        _count = i + 1;
        return i + 1 == Capacity;
    }

    public override void Execute()
    {
        int end = _count;
        _end = end;
        _cursor = 0;
        _startedAt = Stopwatch.GetTimestamp();
        Volatile.Write(ref _state, Open); // publishes the fields above to a taker, whose CAS reads it
        // A batch of one has nothing to take over: no parked worker need look at it.
        DivisibleWorkItem? outer = WorkerPool.EnterDivisible(this, watch: end > 1, s_longRun);
        for (int i = 0; ; i++)
        {
            PublishCursor(i);
            if (Volatile.Read(ref _state) != Open)
            {
                end = EndAfterTaker(); // a taker has claimed the rest: it may have left this run less
            }
            if (i >= end)
            {
                break;
            }
            object waiter = _waiters[i]!;
            object? state = _states[i];
            _waiters[i] = null;
            _states[i] = null;
            Continuations.InvokeReporting(waiter, state); // one that throws is reported; the others in the batch still run
        }
        WorkerPool.ExitDivisible(outer);
        Close();
        _count = 0;
        _cursor = 0;
        _end = 0;
        _startedAt = 0;
        ObjectPool<TimerBatch>.Return(this);
    }

    /// <summary>The runner's store of the index it is at: the runner's half of the protocol (see the remarks).</summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    private void PublishCursor(int index)
    {
#if NET
        Volatile.Write(ref _cursor, index); // no fence: a taker fences for both (see the remarks)
#else
        Interlocked.Exchange(ref _cursor, index); // the full fence before the read of _state (see the remarks)
#endif
    }

    /// <summary>Waits for a taker that has claimed the rest to set <see cref="_end"/>, and returns it. Runner only.</summary>
    [MethodImpl(MethodImplOptions.NoInlining)]
    private int EndAfterTaker()
    {
        SpinWait spin = default;
        while (Volatile.Read(ref _state) == Claimed)
        {
            spin.SpinOnce();
        }
        return _end; // read after the taker's release store of Taken
    }

    /// <summary>Ends the run, so no taker claims it any more; waits for one that has claimed it. Runner only.</summary>
    private void Close()
    {
        if (Interlocked.CompareExchange(ref _state, Closed, Open) != Open)
        {
            SpinWait spin = default;
            while (Volatile.Read(ref _state) == Claimed)
            {
                spin.SpinOnce(); // a taker claimed it after the last continuation: it finds nothing left, and says so
            }
            Volatile.Write(ref _state, Closed);
        }
    }

#if DEBUG
    /// <summary>
    /// How long a run must have lasted before an idle worker takes the rest over, in <see cref="Stopwatch"/> ticks:
    /// <see cref="WheelShard.LongPassTicks"/> milliseconds. Tests only may set it (0 takes over at once).
    /// </summary>
    internal static long LongRunTimestamps = DefaultLongRunTimestamps;
#else
    private static readonly long LongRunTimestamps = DefaultLongRunTimestamps;
#endif

    internal static long DefaultLongRunTimestamps => WheelShard.LongPassTicks * Stopwatch.Frequency / 1000;

    private static readonly TimeSpan s_longRun = TimeSpan.FromMilliseconds(WheelShard.LongPassTicks);

    /// <inheritdoc/>
    /// <remarks>
    /// Takes over only a run that began <see cref="WheelShard.LongPassTicks"/> milliseconds ago or more, as a rescuer takes
    /// over a worker's pass (a batch of continuations that return promptly runs in microseconds): each takeover costs a
    /// process-wide barrier. The checks before the CAS are hints, read racily: a run that is ending, or a stale read, costs
    /// at most a takeover of nothing.
    /// </remarks>
    public override WorkItem? TryTakeRest()
    {
        if (Volatile.Read(ref _state) != Open
            || Volatile.Read(ref _cursor) + 1 >= Volatile.Read(ref _end)
            || Stopwatch.GetTimestamp() - Volatile.Read(ref _startedAt) < LongRunTimestamps
            || Interlocked.CompareExchange(ref _state, Claimed, Open) != Open)
        {
            return null;
        }
#if NET
        // The runner publishes its index with a plain store: this barrier is the fence its side lacks (see the remarks).
        Interlocked.MemoryBarrierProcessWide();
#endif
        int from = Volatile.Read(ref _cursor) + 1;
        int end = _end;
        TimerBatch? rest = null;
        if (from < end)
        {
            rest = Rent();
            for (int i = from; i < end; i++)
            {
                rest.Add(_waiters[i]!, _states[i]);
                _waiters[i] = null;
                _states[i] = null;
            }
            _end = from;
        }
        Volatile.Write(ref _state, Taken); // releases _end and the cleared entries to the runner
        return rest;
    }
}

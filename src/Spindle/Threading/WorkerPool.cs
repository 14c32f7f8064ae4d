using System;
using System.Collections.Concurrent;
using System.Diagnostics;
using System.Diagnostics.CodeAnalysis;
using System.Runtime.CompilerServices;
using System.Threading;

namespace SpindleLib;

/// <summary>
/// Spindle's own worker pool: one thread per core, each with a work-stealing deque and a one-item "run next" slot,
/// plus a shared injection queue for work queued from other threads. Idle workers spin, then park.
/// </summary>
/// <remarks>
/// <para><b>Placement.</b> Work queued from a worker goes to that worker's run-next slot; the item it displaces goes to
/// the bottom of its deque (after Go's runtime, whose per-P <c>runnext</c> keeps a producer→consumer hand-off on one
/// thread). Work queued from any other thread goes to the injection queue. Jobs, from any thread, go to the jobs' shared
/// queue (<see cref="QueueShared"/>), where a thread waiting in a job's Complete() can take them too.</para>
/// <para><b>Finding work</b>, in order: own run-next, own deque (LIFO), the injection queue, other workers' deques (FIFO
/// steal), and last other workers' run-next slots. A thief takes a run-next item only when it saw the very same
/// item there on its previous look, at least one back-off earlier; a hand-off that its owner runs within microseconds
/// is therefore never stolen, and one whose owner is busy is stolen after a few microseconds.</para>
/// <para><b>Parking</b> follows the "announce, then re-check" protocol (a Dekker pair). A producer publishes an item,
/// issues a full fence, then reads <see cref="_spinning"/> and the idle count. A parking worker announces itself idle
/// (<see cref="IdleSet.Announce"/>, a full fence), then re-checks every queue before it blocks. Of the two, at least
/// one sees the other's write: either the producer sees the idle worker and wakes it, or the worker sees the item.
/// Wake-ups are aimed: a producer claims one announced worker and releases that worker's own semaphore, so a release
/// that comes before the wait is not lost, and no other worker can take it (see <see cref="IdleSet"/>, whose
/// remarks tell the hang a shared semaphore caused). One path leaves the pair
/// out on purpose: an item a worker puts in its own empty run-next slot is published with a plain store (a fence there
/// would cost every hand-off), so the producer and a parking worker can miss each other. Such an item is never
/// stranded: its owner runs it when its current item returns, a parking worker's re-check takes a run-next item at first
/// sight, and a worker that parks while another runs an item sleeps at most <see cref="RunNextLookMilliseconds"/>
/// before it looks again, so even an owner that blocks on the item without helping gets it run.</para>
/// <para>Nothing that only one particular worker can do may rely on a wake-up, since a producer wakes whichever
/// announced worker it finds: a worker's own timers are parked with it instead (<see cref="WorkerTimers.TryPark"/>).</para>
/// </remarks>
internal sealed class WorkerPool : Scheduler
{
    private static readonly SharedPoolSlot s_shared = new(static count => new WorkerPool(count, "Spindle worker"));

    /// <summary>The process-wide pool, created on first use (see <see cref="SharedPoolSlot"/> for its size).</summary>
    public static WorkerPool Shared => s_shared.Get();

    /// <summary>The slot that creates <see cref="Shared"/> and fixes its size (<see cref="Spindle.ConfigureWorkers"/>).</summary>
    internal static SharedPoolSlot SharedSlot => s_shared;

    /// <summary>Most workers a pool may have: far beyond any machine this runs on, and a typo's guard.</summary>
    internal const int MaxWorkers = 1024;

    private const int SpinRounds = 40;
    private const int PureSpinRounds = 8;

    /// <summary>
    /// One worker per processor, unless the SPINDLE_WORKERS environment variable names a count. A value that is set but
    /// is not a whole number from 1 to <see cref="MaxWorkers"/> is refused, as ConfigureWorkers refuses it, instead of
    /// quietly falling back (0, "four") or passing the cap (100000 threads).
    /// </summary>
    /// <exception cref="InvalidOperationException">SPINDLE_WORKERS is set to such a value.</exception>
    internal static int DefaultWorkerCount()
    {
        string? configured = Environment.GetEnvironmentVariable("SPINDLE_WORKERS");
        if (string.IsNullOrWhiteSpace(configured))
        {
            return Environment.ProcessorCount;
        }
        if (!int.TryParse(configured, System.Globalization.NumberStyles.Integer, System.Globalization.CultureInfo.InvariantCulture, out int n)
            || n < 1 || n > MaxWorkers)
        {
            ThrowHelper.ThrowInvalidOperation(
                $"The SPINDLE_WORKERS environment variable is \"{configured}\": it must be a whole number of workers between 1 and {MaxWorkers}, " +
                $"or be unset for one worker per processor ({Environment.ProcessorCount} here). Spindle.ConfigureWorkers(n) at start-up takes precedence over it.");
        }
        return n;
    }

    [ThreadStatic]
    private static Worker? t_worker;

    private readonly Worker[] _workers;
    private readonly ConcurrentQueue<WorkItem> _injection = new();

    // Batches of fired timers' continuations from the timer thread and from rescues (QueueTimers): taken before
    // _injection, on every look and on the fair look, as the .NET ThreadPool takes its timers from a high-priority queue
    // before its global one, so a deadline does not wait behind the backlog it bounds. Only timers always due faster
    // than the workers run them could hold _injection back; the timer thread's batches resume code that then starts its
    // timers in a worker's own shard, whose passes are bounded (WheelShard.PassBudget).
    private readonly ConcurrentQueue<WorkItem> _timerBatches = new();

    // Work that any thread may run: jobs, from whichever thread queues them (QueueShared). A thread that is not a worker
    // and waits on a job (JobHandle.Complete) takes work from here, as Unity's main thread does, but never from _injection.
    private readonly ConcurrentQueue<WorkItem> _helpable = new();

    // How many items threads that are not workers (a thread waiting in Complete()) have taken from _helpable: a plain
    // increment after each such take, racy on purpose (two takers may write the same value: it still changes, and it only
    // has to change). A spinning worker compares it between two looks (see TryTakeShared).
    private int _helpableTakenOutside;
    private readonly IdleSet _idle;
    private int _spinning;
    private volatile bool _disposed;

    public WorkerPool(int workerCount, string threadName)
    {
        if (workerCount < 1)
        {
            ThrowHelper.ThrowArgumentOutOfRange(nameof(workerCount), "A worker pool needs at least one worker.");
        }
        SpindleMetrics.EnsureCreated();
        _workers = new Worker[workerCount];
        _idle = new IdleSet(workerCount);
        for (int i = 0; i < workerCount; i++)
        {
            _workers[i] = new Worker(this, i);
        }
        for (int i = 0; i < workerCount; i++)
        {
            var thread = new Thread(_workers[i].Run)
            {
                IsBackground = true,
                Name = threadName + " " + i,
            };
            ContextFlow.StartWithoutContext(thread); // workers must not inherit the creating thread's ExecutionContext
        }
    }

    public int WorkerCount => _workers.Length;

    /// <summary>
    /// Parked workers, as far as the racy count tells; never below zero (a producer may claim a worker between
    /// <see cref="IdleSet.Announce"/>'s store and its increment, which leaves the count at -1 for a moment).
    /// </summary>
    public int IdleWorkers => Math.Max(0, _idle.Count);

    /// <summary>
    /// Workers looking for work before they park (spinning), as far as the racy count tells. Disjoint from
    /// <see cref="IdleWorkers"/>: a worker stops counting as spinning before it announces itself parked.
    /// </summary>
    internal int SpinningWorkers => Math.Max(0, Volatile.Read(ref _spinning));

#if DEBUG
    /// <summary>
    /// Tests only (a Debug build): runs on a worker that has run out of work, right after it counts itself spinning,
    /// standing in for a metrics collection at that moment.
    /// </summary>
    internal static Action? TestHookStartedSpinning;

    /// <summary>
    /// Tests only (a Debug build): runs on a spinning worker of the given pool just before the two yields of one of its
    /// later spin rounds (the ones that yield the core), after its look for its own due timers.
    /// </summary>
    internal static Action<WorkerPool>? TestHookSpinYield;

    /// <summary>
    /// Tests only (a Debug build): runs on a spinning worker whose look has just left a job in the jobs' queue because a
    /// thread outside the workers took one since its last look (<see cref="TryTakeShared"/>).
    /// </summary>
    internal static Action<WorkerPool>? TestHookLeftAJob;

    /// <summary>
    /// Tests only (a Debug build): runs on a busy worker's look (<see cref="RescueOverdueTimers"/> with busy), between its
    /// two reads of another worker's timers (whether they are lent for an item, and the count of items begun).
    /// </summary>
    internal static Action<WorkerPool, WorkerTimers>? TestHookBusyLookBetweenReads;
#endif

    /// <summary>The shared pool if something has created it (for metrics, which must not start the workers).</summary>
    internal static WorkerPool? SharedIfCreated => s_shared.IfCreated;

    /// <summary>Items waiting in the queues any thread feeds: the timer batches', the injection and the jobs' queues.</summary>
    internal long GlobalQueueLength => _timerBatches.Count + _injection.Count + _helpable.Count;

    /// <summary>Items waiting in the workers' own deques and run-next slots (a racy sum, for metrics).</summary>
    internal long LocalQueueLength
    {
        get
        {
            long count = 0;
            foreach (Worker w in _workers)
            {
                count += w.Deque.Count + (Volatile.Read(ref w.RunNext) is null ? 0 : 1);
            }
            return count;
        }
    }

    /// <summary>A one-line picture of where queued work sits (for diagnostics and test failure messages).</summary>
    internal string Describe()
    {
        var sb = new System.Text.StringBuilder();
        sb.Append("timers=").Append(_timerBatches.Count).Append(" injection=").Append(_injection.Count).Append(" helpable=").Append(_helpable.Count)
          .Append(" idle=").Append(_idle.Count).Append(" spinning=").Append(Volatile.Read(ref _spinning));
        for (int i = 0; i < _workers.Length; i++)
        {
            sb.Append(" w").Append(i).Append("[runnext=").Append(Volatile.Read(ref _workers[i].RunNext) is null ? 0 : 1)
              .Append(" deque=").Append(_workers[i].Deque.Count).Append(']');
        }
        return sb.ToString();
    }

    /// <summary>
    /// Queues a job item where every worker and every thread helping in a job's Complete() can take it (the shared
    /// helpable queue), whichever thread queues it, and wakes a worker if none is spinning.
    /// </summary>
    /// <remarks>
    /// Every job goes here, even one made ready or flushed on a worker. A thread that is not a worker helps only from
    /// this queue (it must never run the other work in a worker's run-next slot or deque), so a job queued in the
    /// worker's own slot waited there for whatever that worker ran next: a main thread in Complete() on it, with nothing
    /// else to do, made no progress while the worker ran the other job its finish had made ready, or the rest of the
    /// item that had flushed it (a review found both, JobReachableWhileItsWorkerIsBusyTests).
    /// </remarks>
    public void QueueShared(WorkItem item)
    {
        _helpable.Enqueue(item); // its interlocked tail update is the full fence the parking protocol needs
        NotifyIfNoneSpinning();
    }

    /// <summary>
    /// Runs one item the calling thread may run while it waits on a job: a worker runs any of its work (as
    /// <see cref="TryRunOne"/>); any other thread runs only helpable items (jobs).
    /// </summary>
    public bool TryRunHelpable()
    {
        Worker? w = t_worker;
        if (w is not null && w.Pool == this)
        {
            return TryRunOne();
        }
        if (!_helpable.TryDequeue(out WorkItem? item))
        {
            return false;
        }
        _helpableTakenOutside++;
        RunItemKeepingContext(item);
        return true;
    }

    public override bool IsWorkerThread => t_worker is { } w && w.Pool == this;

    /// <summary>
    /// True when the calling thread is the worker that owns <paramref name="timers"/> (created by
    /// <see cref="GetOrAddCurrentWorkerTimers"/> on it): a worker's timers are its own for its life, so the answer cannot
    /// change while the caller runs. Any thread; one thread-static read.
    /// </summary>
    public static bool OwnsTimers(WorkerTimers timers) => t_worker is { } w && w.Timers == timers;

    /// <summary>
    /// The timers owned by the calling worker, created with <paramref name="create"/> on its first use; null when the
    /// caller is not one of this pool's workers.
    /// </summary>
    public WorkerTimers? GetOrAddCurrentWorkerTimers<TState>(Func<TState, WorkerTimers> create, TState state)
    {
        Worker? w = t_worker;
        if (w is null || w.Pool != this)
        {
            return null;
        }
        WorkerTimers? timers = w.Timers;
        if (timers is null)
        {
            timers = create(state);
            if (w.RunningItemWithoutTimers)
            {
                // Created by the item the worker is running (its first timer): noted as in that item, as
                // ExecuteLendingTimers notes an existing shard, so the timer lends it, and the loop takes it back when the
                // item ends. Found by review: a worker's first delay, started by an item that then blocked, waited for the
                // item, since nothing had lent the new shard.
                timers.EnterItem();
            }
            Volatile.Write(ref w.Timers, timers); // other workers read it to rescue its overdue timers (RescueOverdueTimers)
        }
        return timers;
    }

#if DEBUG
    /// <summary>
    /// Tests only: the calling worker forgets its timers, as a worker that has never started one, so that the item it is
    /// running creates them again. The forgotten ones must hold no timer (they are never looked at again).
    /// </summary>
    internal void ForgetCurrentWorkerTimersForTests()
    {
        Worker w = t_worker is { } current && current.Pool == this ? current : throw new InvalidOperationException("Call this on one of the pool's workers.");
        if (w.Timers is WheelShard { PendingCount: not 0 } shard)
        {
            throw new InvalidOperationException("The worker's timers still hold timers (" + shard.Describe() + "): wait until they have fired.");
        }
        w.Timers = null;
    }
#endif

    /// <summary>How many items a busy worker runs between looks at its timers.</summary>
    private const int TimerPollInterval = 64;

    /// <summary>
    /// How many items a worker may take back from its run-next slot and run inline (see <see cref="TryTakeBackRunNext"/>)
    /// before it declines one, so that the awaiting code suspends and the worker's loop gets a turn: its timers, its
    /// deque and the injection queue are not held back by a long run of inline awaits.
    /// </summary>
    private const int InlineRunBudget = TimerPollInterval;

    /// <summary>
    /// Takes <paramref name="item"/> back out of the calling worker's run-next slot, so the caller can run it inline: true
    /// only on a worker whose slot holds that very item (not yet started, and not stolen). Used when a worker awaits the
    /// item it has just queued: the worker would run it next anyway, right after the awaiting code suspends, so running it
    /// first and not suspending is the same schedule minus the suspension (the way Task.Wait inlines a task that has not
    /// started). Our compare-exchange races only with a thief's compare-exchange on the same slot (only the owner ever fills
    /// it), so exactly one of them takes the item: it runs once.
    /// </summary>
    public static bool TryTakeBackRunNext(WorkItem item)
    {
        Worker? w = t_worker;
        if (w is null || Volatile.Read(ref w.RunNext) != item)
        {
            return false;
        }
        if (--w.InlineBudget < 0)
        {
            w.InlineBudget = InlineRunBudget;
            w.LookFairlyNext = true; // the loop's next look starts at the other queues, not at this slot
            return false;
        }
        return Interlocked.CompareExchange(ref w.RunNext, null, item) == item;
    }

    public override void Queue(WorkItem item)
    {
        Worker? w = t_worker;
        if (w is not null && w.Pool == this)
        {
            w.RunNextStamp++;
            if (Volatile.Read(ref w.RunNext) is null)
            {
                // Only the owner fills the slot (thieves only empty it), so an empty slot takes a plain release store.
                // No fence before the counters below (a fence here costs every hand-off): a parking worker's
                // announcement and this store may miss each other. The item is not stranded: its owner runs it as soon
                // as the current item returns, and a parked worker looks again within RunNextLookMilliseconds while any
                // worker runs, so an owner that blocks on it without helping is unblocked too.
                Volatile.Write(ref w.RunNext, item);
                NotifyIfNoneSpinning();
                return;
            }
            WorkItem? displaced = Interlocked.Exchange(ref w.RunNext, item);
            if (displaced is not null)
            {
                w.Deque.Push(displaced);
                Interlocked.MemoryBarrier(); // the deque push is a plain release store: fence before reading the counters
            }
        }
        else
        {
            _injection.Enqueue(item); // its interlocked tail update is the full fence
        }
        NotifyIfNoneSpinning();
    }

    /// <summary>
    /// How long a spinning worker's round of two yields may take before the worker stops spinning and parks: a yield that
    /// long gave the core to another thread for a time slice (on a quiet core two yields take about a microsecond). One
    /// tick of the timer wheel, the lateness a worker's timers may have.
    /// </summary>
    internal const int SlowYieldMicroseconds = 1000;

    /// <summary>
    /// How long after a slow round of yields (<see cref="SlowYieldMicroseconds"/>) a worker that runs out of work parks
    /// without yielding: the cores were wanted by other threads then, and are likely to be still. Once it has passed, the
    /// worker's next spin yields again, and finds out.
    /// </summary>
    internal const int ContendedMilliseconds = 100;

    private static readonly long s_slowYieldTimestamps = Math.Max(1, Stopwatch.Frequency * SlowYieldMicroseconds / 1_000_000);
    private long _contendedTimestamps = Stopwatch.Frequency * ContendedMilliseconds / 1000; // set only by tests (Debug) after construction

#if DEBUG
    /// <summary>
    /// Tests only (a Debug build): sets how long this pool's workers park without yielding after a slow round of yields
    /// (<see cref="ContendedMilliseconds"/> by default), so that a test on a slow machine does not outlast it.
    /// </summary>
    internal void SetContendedForTests(TimeSpan span) => _contendedTimestamps = (long)(span.TotalSeconds * Stopwatch.Frequency);
#endif

    /// <summary>A monotonic clock in milliseconds (netstandard2.1 has no <c>Environment.TickCount64</c>).</summary>
    private static long NowMs() => Stopwatch.GetTimestamp() / s_timestampsPerMs;

    private static readonly long s_timestampsPerMs = Math.Max(1, Stopwatch.Frequency / 1000);

    /// <summary>
    /// A worker running an item started a timer, due after <paramref name="until"/>, earlier than any its shard had: a
    /// parked worker must look again when it falls due, to rescue it if that item still runs
    /// (<see cref="RescueOverdueTimers"/>). Wakes one, unless some parked worker will look by then anyway (it parked with
    /// a bounded wait, see <see cref="Worker.ParkedUntilMs"/>): a request that starts a timeout of seconds wakes nobody.
    /// </summary>
    internal void WakeOneIdleToWatch(TimeSpan until)
    {
        if (_idle.Count == 0)
        {
            return;
        }
        WakeOneUnlessOneLooksBy(NowMs() + (long)until.TotalMilliseconds + RunNextLookMilliseconds);
    }

    /// <summary>
    /// As <see cref="WakeOneIdleToWatch"/>, for a timer due at <paramref name="dueTimestamp"/>, a
    /// <see cref="Stopwatch.GetTimestamp"/> reading (the system clock's, which every worker's timers run on), with no
    /// clock read: a worker whose asks each arm a timeout in an emptied shard makes this look once an ask, and two clock
    /// reads here cost more than the rest of the timer's cancellation (<c>docs/decisions.md</c> section 57).
    /// </summary>
    internal void WakeOneIdleToWatchAt(long dueTimestamp)
    {
        if (_idle.Count == 0)
        {
            return;
        }
        WakeOneUnlessOneLooksBy(dueTimestamp / s_timestampsPerMs + RunNextLookMilliseconds);
    }

    /// <summary>Wakes one idle worker unless a parked one will look by <paramref name="by"/> (<see cref="NowMs"/>'s milliseconds) anyway.</summary>
    private void WakeOneUnlessOneLooksBy(long by)
    {
        foreach (Worker w in _workers)
        {
            if (Volatile.Read(ref w.ParkedUntilMs) <= by)
            {
                return; // parked, and looks again in time
            }
        }
        _idle.TryWakeOne();
    }

    private void NotifyIfNoneSpinning()
    {
        if (Volatile.Read(ref _spinning) == 0)
        {
            _idle.TryWakeOne();
        }
    }

    /// <summary>
    /// Runs one item on the calling worker while it waits for a result: a worker that blocks helps, so it cannot strand
    /// the work it waits for (often the item it just put in its own run-next slot). A thread that is not a worker never
    /// runs queued work: it may hold locks or have an identity (a UI or game thread) that queued work must not see,
    /// and Spindle.Run promises a worker. It simply blocks, as Task.Wait does for work it did not start itself.
    /// </summary>
    public override bool TryRunOne()
    {
        Worker? w = t_worker;
        if (w is null || w.Pool != this)
        {
            return false;
        }
        // Its fair looks too, as its loop takes them: a helper that always took its run-next slot first ran a yield loop (or
        // a long run of inline awaits) it had started for as long as that went on, and never the injection queue or its own
        // deque, where the result it waited for could be (found by review, with a test).
        WorkItem? item = FindWorkTakingTurns(w, stealRunNext: true);
        if (item is null)
        {
            // A worker blocked on a result still runs its own due timers: the result may be waiting for one of them. With
            // nothing to run it is as idle as a worker about to park, and looks at the others' timers and held batches as
            // that worker does: it never parks, so no other look of its would reach them (found by review, with tests: with
            // every other worker in such a wait, a blocked worker's delays, and the rest of a held batch, waited for it).
            return (w.Timers is { HasPending: true } timers && PollKeepingContext(timers))
                || RescueOverdueTimers(w, busy: false) || TakeOverHeldItems(w);
        }
        RunItemKeepingContext(item);
        // A worker that keeps finding work while it waits must still look at its timers now and then, as its loop does:
        // polling only when it ran dry left a waiter whose result is one of its own timers stuck for as long as work came.
        // And at those of a worker held in one item, as a busy worker's loop does (RescueOverdueTimers): its loop makes no
        // look while it helps here.
        if (++w.SinceTimerPoll >= TimerPollInterval)
        {
            w.SinceTimerPoll = 0;
            if (w.Timers is { HasPending: true } busyTimers)
            {
                PollKeepingContext(busyTimers);
            }
            RescueOverdueTimers(w, busy: true);
        }
        return true;
    }

    /// <summary>
    /// Runs a worker's due timers from its loop. Their continuations run here, outside any work item, so afterwards the
    /// worker's context goes back to the default, as it does after each item.
    /// </summary>
    private static bool PollTimers(WorkerTimers timers, out TimeSpan untilNext)
    {
        bool ran = timers.Poll(out untilNext);
        RestoreWorkerThreadState();
        return ran;
    }

    /// <summary>
    /// Runs a worker's due timers from its loop, as <see cref="PollTimers(WorkerTimers, out TimeSpan)"/>, or, with
    /// <paramref name="share"/>, queues their continuations for an idle worker to take a share (<see cref="WorkerTimers.PollSharing"/>).
    /// </summary>
    private static bool PollTimers(WorkerTimers timers, bool share, out TimeSpan untilNext)
        => share ? timers.PollSharing(out untilNext) /* runs no user code: nothing to restore */ : PollTimers(timers, out untilNext);

    /// <summary>
    /// The fewest timers a worker holds before it shares its due continuations with an idle worker
    /// (<see cref="ShouldShareTimers"/>): below it, one worker fires them all in a fraction of a millisecond a pass.
    /// </summary>
    internal const int ShareTimersAbove = 256;

    /// <summary>
    /// True when the calling worker's next pass should share its continuations (<see cref="WorkerTimers.PollSharing"/>):
    /// some worker is idle (parked or spinning) and another holds fewer than half as many timers. With two workers they are
    /// the same worker; with more, the idle one and the light one may differ (the pool keeps no per-worker idle flag to
    /// tell), so a pass may be shared when no idle worker is light: that costs queued continuations only (no timer changes
    /// shard, none is lost or run twice). A timer lives on the shard
    /// of the worker that started it, and a timer's continuation runs on the worker that fires it, so a loop of delays
    /// stays on one worker for ever: once a rescue (an idle or a busy worker firing a held worker's timers) had moved a
    /// worker's sessions to another, they never came back (the user's latency program: 200,000 sessions on one shard and
    /// none on the other, the delays at half the rate with the CPU at 52%). Sharing moves continuations, not timers: a
    /// timer never changes shard, so its cancellation and its order of firing are as before. Two volatile reads a pass
    /// while no worker is idle.
    /// </summary>
    private bool ShouldShareTimers(Worker self, WorkerTimers timers)
    {
        if (_workers.Length == 1 || (_idle.Count == 0 && Volatile.Read(ref _spinning) == 0))
        {
            return false;
        }
        long own = timers.Count;
        if (own < ShareTimersAbove)
        {
            return false;
        }
        foreach (Worker other in _workers)
        {
            if (other != self && (Volatile.Read(ref other.Timers)?.Count ?? 0) * 2 < own)
            {
                return true;
            }
        }
        return false;
    }

    /// <summary>Runs a worker's due timers while it helps inside some other code's context, and restores that context.</summary>
    private static bool PollKeepingContext(WorkerTimers timers)
    {
        RunKeepingContext(s_pollTimers, timers);
        return t_polled;
    }

    /// <summary>
    /// Runs <paramref name="callback"/> on a thread that is helping while it waits, inside some other code's context, and
    /// puts that context and the thread's SynchronizationContext back afterwards, whatever the callback changed. The work
    /// runs in the default context and with no SynchronizationContext, as on a worker's loop (work with a context of its
    /// own enters it): a bare continuation, another task's resumed code or a job must not see the waiting code's
    /// AsyncLocal values, nor the SynchronizationContext it installed, which are no more its own than another item's.
    /// Also how <see cref="UnobservedExceptions"/> runs its handlers on whatever thread reports, with
    /// <paramref name="enterDefaultEvenIfUnsure"/>: on netstandard2.1 where captures are not stable (Mono), where this
    /// cannot tell the thread's context from the default and a helping waiter runs the work as it is (a copy of the
    /// default per item would allocate), such a caller enters a copy of the default anyway.
    /// </summary>
    internal static void RunKeepingContext(ContextCallback callback, object state, bool enterDefaultEvenIfUnsure = false)
    {
        SynchronizationContext? sync = SynchronizationContext.Current;
        ContextFlow.RestoreSynchronizationContext(null);
#if NET
        _ = enterDefaultEvenIfUnsure; // the .NET build always tells the default context apart
        if (!ContextFlow.TryRunInDefaultContext(callback, state, out ExecutionContext? before))
        {
            callback(state);
            ContextFlow.RestoreIfChanged(before);
        }
#else
        if (!ContextFlow.TryRunInDefaultContext(callback, state))
        {
            if (enterDefaultEvenIfUnsure && !ContextFlow.CaptureIsStable && ContextFlow.ForContextFree() is { } context)
            {
                ContextFlow.Run(context, callback, state); // a copy of the default: Mono's Run takes a context once
            }
            else
            {
                ContextFlow.RunRestoring(callback, state);
            }
        }
#endif
        ContextFlow.RestoreSynchronizationContext(sync);
    }

    /// <summary>
    /// After an item or a timer pass on a worker's own loop: the default ExecutionContext back, whatever AsyncLocal values
    /// the work set, and no SynchronizationContext, whatever the work installed and left behind (items run inside
    /// ExecutionContext.Run have theirs put back by Run; those run on the default-context fast path do not). The .NET
    /// ThreadPool resets both after each of its items too.
    /// </summary>
    private static void RestoreWorkerThreadState()
    {
        ContextFlow.RestoreDefaultIfChanged();
        ContextFlow.RestoreSynchronizationContext(null);
    }

    /// <summary>
    /// How often a busy worker looks at the queues a run-next chain would hold back (the jobs' queue, the injection queue
    /// and the oldest item of its own deque) before its run-next slot, on its loop and while it helps in a blocking wait:
    /// a chain that always refills the slot (a yield loop, a long run of awaited runs) would otherwise starve them for ever
    /// on a pool whose workers all run such chains, or block on a result waiting there. Go's scheduler looks at its global
    /// queue every 61 ticks for the same reason.
    /// </summary>
    private const int FairLookInterval = 61;

    /// <summary>
    /// The next item for a worker, on its loop or while it helps in a blocking wait (<see cref="TryRunOne"/>): its fair look
    /// (<see cref="FindWorkFairly"/>) every <see cref="FairLookInterval"/> looks and after a declined take-back, else
    /// <see cref="FindWork"/>.
    /// </summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    private WorkItem? FindWorkTakingTurns(Worker self, bool stealRunNext)
        => (--self.UntilFairLook <= 0 || self.LookFairlyNext ? FindWorkFairly(self) : null) ?? FindWork(self, stealRunNext);

    private WorkItem? FindWorkFairly(Worker self)
    {
        self.LookFairlyNext = false;
        self.UntilFairLook = FairLookInterval;
        // The jobs' queue first here; elsewhere the injection queue and the jobs' queue take turns (TryTakeShared), so
        // neither holds the other back. (A parallel-for's runner always waits in the jobs' queue; with the injection
        // queue first here too, a main thread that kept it full held a ready parallel-for back for as long as it did.)
        // Fired timers' batches before the injection queue, as everywhere: a worker that a run-next chain keeps busy
        // reaches them only here, and a held worker's rescued timers waited in them (WorkerShardRescueTests).
        if (_helpable.TryDequeue(out WorkItem? item) || _timerBatches.TryDequeue(out item) || _injection.TryDequeue(out item))
        {
            return item;
        }
        return self.Deque.TrySteal(); // the oldest: the item a run-next chain displaced first
    }

    /// <summary>
    /// Takes an item from the queues every thread feeds: fired timers' batches, then the injection queue and the jobs'
    /// queue, in turn while both have work (<see cref="Worker.JobsTurn"/>). A spinning worker's look is
    /// <paramref name="patient"/>: it takes a job only if no thread outside the workers has taken one since its last look.
    /// </summary>
    /// <remarks>
    /// A thread that schedules a job, flushes, and calls Complete() at once (seed 001's job side, and any main thread
    /// that waits right after it schedules) takes its job straight back and runs it itself, as Unity's main thread does.
    /// A spinning worker that took the job first won nothing: the caller, with nothing left to run, waited for the worker
    /// (1.7 µs a steal, measured), and in that mode workers took 5–20% of the jobs and a unit cost 400–840 ns instead of
    /// 95 (docs/decisions.md section 34). So a spinning look leaves a job alone while such a thread is serving the queue
    /// (the count of its takes changed since this worker's last look) and takes it once that count has stood still for
    /// one look, as its look at another worker's run-next slot waits for the same item twice
    /// (<see cref="Worker.TryStealRunNext"/>). Takes by workers do not count: a spinning worker joins others that drain
    /// a burst at its first look. Only spinning looks wait: a worker that has just finished an item, and a worker's last
    /// look before it parks, take at once, so a job nobody takes back waits at most one spinning look more (a few
    /// microseconds), and a parked worker never sleeps with a job in the queue.
    /// </remarks>
    private bool TryTakeShared(Worker self, bool patient, [NotNullWhen(true)] out WorkItem? item)
    {
        if (_timerBatches.TryDequeue(out item))
        {
            return true;
        }
        // The injection queue and the jobs' queue in turn while both have work (Worker.JobsTurn): with the injection
        // queue always first, a backlog there (a server past its capacity) left the jobs only the fair looks, one take
        // in 61, and jobs that sessions scheduled and awaited waited longer the longer the backlog lasted (16 s after a
        // 20 s spike, a user's review, docs/decisions.md section 45).
        if (self.JobsTurn)
        {
            if (TryTakeJob(self, patient, out item))
            {
                self.JobsTurn = false;
                return true;
            }
            return _injection.TryDequeue(out item); // the jobs keep the next turn
        }
        if (_injection.TryDequeue(out item))
        {
            self.JobsTurn = true;
            return true;
        }
        return TryTakeJob(self, patient, out item); // the injection queue keeps the next turn: it had nothing
    }

    /// <summary>
    /// Takes an item from the jobs' queue (<see cref="TryTakeShared"/>): a spinning worker's look is
    /// <paramref name="patient"/>, and leaves a job alone while a thread outside the workers is taking them.
    /// </summary>
    private bool TryTakeJob(Worker self, bool patient, [NotNullWhen(true)] out WorkItem? item)
    {
        if (patient)
        {
            item = null;
            if (_helpable.IsEmpty)
            {
                return false;
            }
            int taken = Volatile.Read(ref _helpableTakenOutside);
            if (taken != self.SeenHelpableTakenOutside)
            {
                self.SeenHelpableTakenOutside = taken;
#if DEBUG
                TestHookLeftAJob?.Invoke(this);
#endif
                return false;
            }
        }
        return _helpable.TryDequeue(out item);
    }

    private WorkItem? FindWork(Worker self, bool stealRunNext, bool runNextAtOnce = false, bool patient = false)
    {
        WorkItem? item = self.RunNext;
        if (item is not null)
        {
            item = Interlocked.Exchange(ref self.RunNext, null);
            if (item is not null)
            {
                return item;
            }
        }
        item = self.Deque.TryPop();
        if (item is not null)
        {
            return item;
        }
        if (TryTakeShared(self, patient, out item))
        {
            return item;
        }
        Worker[] workers = _workers;
        int n = workers.Length;
        if (n > 1)
        {
            int start = self.NextVictim();
            for (int i = 0; i < n; i++)
            {
                Worker victim = workers[(start + i) % n];
                if (victim != self && (item = victim.Deque.TrySteal()) is not null)
                {
                    return item;
                }
            }
            if (stealRunNext)
            {
                for (int i = 0; i < n; i++)
                {
                    Worker victim = workers[(start + i) % n];
                    if (victim != self && (item = runNextAtOnce ? Worker.TakeRunNext(victim) : self.TryStealRunNext(victim)) is not null)
                    {
                        return item;
                    }
                }
            }
        }
        return null;
    }

    /// <summary>
    /// Runs an item from the worker loop (<see cref="Execute"/>), lending the worker's timers meanwhile, if it has any or
    /// the item starts one (<see cref="WorkerTimers.EnterItem"/>): while the item runs, an idle worker may fire those that fall due
    /// (<see cref="RescueOverdueTimers"/>), so a long item (a blocking call, a heavy computation) does not hold them back,
    /// nor the ones it starts itself before it blocks.
    /// </summary>
    private static void ExecuteLendingTimers(Worker self, WorkItem item)
    {
        if (self.Pool._workers.Length == 1)
        {
            Execute(item); // no other worker could rescue its timers
            return;
        }
        WorkerTimers? timers = self.Timers;
        if (timers is not null)
        {
            timers.EnterItem();
            Execute(item);
            timers.ExitItem();
        }
        else
        {
            // An item that starts the worker's first timer creates its timers as in the item (GetOrAddCurrentWorkerTimers).
            self.RunningItemWithoutTimers = true;
            Execute(item);
            self.RunningItemWithoutTimers = false;
            self.Timers?.ExitItem();
        }
    }

    /// <summary>
    /// Queues <paramref name="item"/> to the injection queue from any thread, a worker too, where <see cref="Queue"/> from
    /// a worker would put it in its run-next slot: behind the work queued from outside, which a worker otherwise takes
    /// only at its fair look (every 61st) while it has work of its own.
    /// </summary>
    public override void QueueInOrder(WorkItem item)
    {
        _injection.Enqueue(item); // its interlocked tail update is the full fence the parking protocol needs
        NotifyIfNoneSpinning();
    }

    /// <summary>
    /// Queues a batch of fired timers' continuations (the timer thread's, or a rescuer's) first in first out, ahead of the
    /// work queued from outside the workers: a worker takes it before the injection queue (<see cref="TryTakeShared"/>),
    /// as the .NET ThreadPool runs its timers from a high-priority queue. In the injection queue, a 2 s deadline on a
    /// shutdown's drain, set on the main thread, fired after 5 s, when the 300,000 cancellations queued before it had
    /// all run (a user's review, 2026-11-30; <c>OffWorkerTimerBacklogTests</c>). A worker's fair look takes them too
    /// (<see cref="FindWorkFairly"/>), so a worker kept busy by a run-next chain still runs a held worker's rescued timers.
    /// First in first out, so that batches run in the order they fired, from a worker too: queued from a worker as its
    /// other items are, they went to its run-next slot, where each full batch displaced the one before into the deque,
    /// and more than a batch of timers due together ran out of order, the later batch first (found by review, with a test).
    /// </summary>
    public override void QueueTimers(WorkItem item)
    {
        _timerBatches.Enqueue(item); // its interlocked tail update is the full fence the parking protocol needs
        NotifyIfNoneSpinning();
    }

    /// <summary>
    /// Fires the overdue timers of other workers that are running an item (<see cref="WorkerTimers.TryRescue"/>): their
    /// continuations are queued to the workers. Go's scheduler does the same with the timers of a busy processor
    /// (<c>stealWork</c> runs <c>checkTimers</c> on the others'). An idle worker about to park, or a worker in a helping
    /// wait that finds nothing to run (<see cref="TryRunOne"/>), fires any it finds (<paramref name="busy"/> false); it looks again every <see cref="RunNextLookMilliseconds"/> while another runs an item, so
    /// a timer held by a long item fires about that late at most, as long as a worker is free. A busy worker looks every
    /// <see cref="TimerPollInterval"/> of its own items (on its loop, or in a helping wait) and fires only the timers of a worker that has been in one item
    /// since its previous look (lent for an item, with the same <see cref="WorkerTimers.ItemsEntered"/> as then): with no
    /// worker idle (a saturated server), a long item's timers waited for it to end, however long (a user's review: 100
    /// delays of 10 ms held 3 s). Only a held worker's: rescuing the timers of a worker that is merely busy too sent them
    /// through the queues in batches, whose items held the shards in turn (counters-delay fell from 11-13M to 3-10M fires
    /// a second, and a rule of 2 or 10 ms overdue did not help, since a busy shard's hint of its next due tick lags).
    /// </summary>
    private bool RescueOverdueTimers(Worker self, bool busy)
    {
        int[]? seen = busy ? self.SeenItemsEntered ??= new int[_workers.Length] : null;
        bool ran = false;
        for (int i = 0; i < _workers.Length; i++)
        {
            Worker other = _workers[i];
            if (other == self || Volatile.Read(ref other.Timers) is not { } timers)
            {
                continue;
            }
            if (seen is not null)
            {
                // Whether lent for an item first, then the count: the owner counts an item before it lends for it (EnterItem,
                // whose lending is a release store), so a lending read here is of an item the count read after it includes,
                // and an unchanged count means the owner has been in that item since the previous look. Read the other way
                // round, an owner that began an item between the two reads was taken for held in the item before it
                // (found by review, with a test).
                bool lentForItem = timers.IsLentForItem;
#if DEBUG
                TestHookBusyLookBetweenReads?.Invoke(this, timers);
#endif
                int entered = timers.ItemsEntered;
                bool held = lentForItem && entered == seen[i];
                seen[i] = entered;
                if (!held)
                {
                    continue;
                }
            }
            if (timers.TryRescue())
            {
                ran = true;
            }
        }
        return ran;
    }

    /// <summary>
    /// Notes, for the calling worker, the divisible item it starts running (<paramref name="item"/>), and returns the one it
    /// was running before (an item run inside a piece of another, by a worker that helps while it waits), which the caller
    /// passes to <see cref="ExitDivisible"/> when its item ends. Idle workers look at it (<see cref="TakeOverHeldItems"/>).
    /// With <paramref name="watch"/> (the item has pieces to take over), it makes sure a parked worker will look after
    /// <paramref name="takeOverAfter"/>, as <see cref="WakeOneIdleToWatch"/> does for a timer: one that parked while no
    /// worker was running sleeps until woken. Does nothing, and returns null, on a thread that is not a worker.
    /// </summary>
    internal static DivisibleWorkItem? EnterDivisible(DivisibleWorkItem item, bool watch, TimeSpan takeOverAfter)
    {
        Worker? w = t_worker;
        if (w is null)
        {
            return null;
        }
        DivisibleWorkItem? outer = w.RunningDivisible;
        Volatile.Write(ref w.RunningDivisible, item);
        if (watch)
        {
            w.Pool.WakeOneIdleToWatch(takeOverAfter);
        }
        return outer;
    }

    /// <summary>Called when the item <see cref="EnterDivisible"/> noted ends, with what it returned. Worker only (else nothing).</summary>
    internal static void ExitDivisible(DivisibleWorkItem? outer)
    {
        if (t_worker is { } w)
        {
            Volatile.Write(ref w.RunningDivisible, outer);
        }
    }

    /// <summary>
    /// For an idle worker about to park (or one in a helping wait that finds nothing to run, <see cref="TryRunOne"/>): takes over the pieces not yet begun of the divisible items (timer batches) that
    /// other workers are running, where one piece has held its item long (<see cref="DivisibleWorkItem.TryTakeRest"/>), and
    /// queues them in order with the fired timers' batches (<see cref="QueueTimers"/>), as <see cref="RescueOverdueTimers"/> takes over a worker's own
    /// timers: a continuation that blocks inside a batch holds only itself. A parked worker looks again every
    /// <see cref="RunNextLookMilliseconds"/> while another runs an item, so the rest of a held batch waits about that long
    /// at most, as long as a worker is free.
    /// </summary>
    private bool TakeOverHeldItems(Worker self)
    {
        bool took = false;
        foreach (Worker other in _workers)
        {
            if (other != self && Volatile.Read(ref other.RunningDivisible) is { } held && held.TryTakeRest() is { } rest)
            {
                QueueTimers(rest);
                took = true;
            }
        }
        return took;
    }

    /// <summary>How long until the earliest timer of another worker falls due, as the owners last published it.</summary>
    private TimeSpan UntilOthersTimersDue(Worker self)
    {
        TimeSpan earliest = Timeout.InfiniteTimeSpan;
        foreach (Worker other in _workers)
        {
            if (other != self && Volatile.Read(ref other.Timers) is { } timers)
            {
                TimeSpan until = timers.UntilDue();
                if (until != Timeout.InfiniteTimeSpan && (earliest == Timeout.InfiniteTimeSpan || until < earliest))
                {
                    earliest = until;
                }
            }
        }
        return earliest;
    }

    /// <summary>Runs an item from the worker loop, where the thread's context is the default, and puts the default back.</summary>
    private static void Execute(WorkItem item)
    {
        try
        {
            // A worker's loop runs in the default context, and puts it back below: items may skip their own checks.
            item.ExecuteOnDefaultContext();
        }
        catch (Exception ex)
        {
            // Work items report their own faults; anything reaching here is a Spindle bug, never swallowed.
            UnobservedExceptions.Report(ex);
        }
        // Whatever AsyncLocal values or SynchronizationContext the item left (or work that ran without a captured
        // context, in this thread's) must not reach the next item.
        RestoreWorkerThreadState();
    }

    /// <summary>
    /// Runs an item on a thread that is helping while it waits, inside some other code's context: afterwards it restores
    /// that context, not the default, so whatever AsyncLocal values the item set do not reach the waiting code.
    /// </summary>
    private static void RunItemKeepingContext(WorkItem item) => RunKeepingContext(s_runItemSafely, item);

    private static readonly ContextCallback s_runItemSafely = static o => RunItemSafely((WorkItem)o!);
    private static readonly ContextCallback s_pollTimers = static o => t_polled = ((WorkerTimers)o!).Poll(out _);
    [ThreadStatic]
    private static bool t_polled; // what s_pollTimers's Poll returned
#if !NET
    private static readonly ContextCallback s_workerLoop = static o => { Worker w = (Worker)o!; w.Pool.WorkerLoop(w); };
#endif

    private static void RunItemSafely(WorkItem item)
    {
        try
        {
            item.Execute();
        }
        catch (Exception ex)
        {
            // Work items report their own faults; anything reaching here is a Spindle bug, never swallowed.
            UnobservedExceptions.Report(ex);
        }
    }

    private void WorkerLoop(Worker self)
    {
        t_worker = self;
        bool woken = false;
#if !NET
        ExecutionContext? entered = ExecutionContext.Capture();
#endif
        while (!_disposed)
        {
#if !NET
            if (ContextFlow.HasChanged(entered))
            {
                return; // an item or a timer changed the context: Worker.Run leaves ExecutionContext.Run, which puts it back
            }
#endif
            WorkItem? item;
            if (!woken)
            {
                item = FindWorkTakingTurns(self, stealRunNext: false);
                if (item is not null)
                {
                    ExecuteLendingTimers(self, item);
                    // A busy worker still looks at its timers now and then, or they would wait for it to run dry; and at
                    // those of a worker held in one item since its previous look (RescueOverdueTimers).
                    if (++self.SinceTimerPoll >= TimerPollInterval)
                    {
                        self.SinceTimerPoll = 0;
                        if (self.Timers is { HasPending: true } busyTimers)
                        {
                            PollTimers(busyTimers, out _);
                        }
                        RescueOverdueTimers(self, busy: true);
                    }
                    continue;
                }
            }
            woken = false;

            // Out of work: run the timers that are due (their continuations may make more work) before spinning.
            if (self.Timers is { HasPending: true } dueTimers && PollTimers(dueTimers, ShouldShareTimers(self, dueTimers), out _))
            {
                // A worker kept busy by its own timers' passes, which are not items, looks at a held worker's timers every
                // TimerPollInterval passes too, or it never reached the look (the user's latency program: 5-6 s late).
                if (++self.SinceTimerPoll >= TimerPollInterval)
                {
                    self.SinceTimerPoll = 0;
                    RescueOverdueTimers(self, busy: true);
                }
                continue;
            }

            // Spin: look again for a while before parking. A worker just woken for work starts here too, so that, like
            // a spinner, it passes the wake-up on only after it has taken an item (Go's woken M is a spinning M).
            Interlocked.Increment(ref _spinning);
#if DEBUG
            TestHookStartedSpinning?.Invoke();
#endif
            item = null;
            for (int round = 0; round < SpinRounds; round++)
            {
                // Look at other workers' run-next slots only every fourth round: each look pulls the owner's cache line.
                item = FindWork(self, stealRunNext: (round & 3) == 3, patient: true);
                if (item is not null)
                {
                    break;
                }
                // A short burst of pause instructions first, then yield the core between looks: on a machine with few
                // cores a worker that only spins would keep a thread being woken (often the one waiting for a result)
                // off the CPU until the OS preempts it. Later looks are further apart (two yields each): every look reads
                // the shared queues' cache lines, which a thread scheduling and taking back its own jobs then has to fetch
                // again (section 34).
                if (round < PureSpinRounds)
                {
                    Spinning.Pause(30);
                }
                else
                {
                    // A spinning worker neither runs its timers nor parks until they fall due, and a yield gives the core
                    // away for a whole time slice when other threads want it (beside two CPU hogs on two cores, 64 yields
                    // took 135-207 ms). So the worker stops spinning once one of its timers is due, and goes to its park
                    // path, which runs them (its next look for work comes right after). A clock read a round, beside two
                    // system calls. (Its park blocks at once: see ParkingSemaphore.)
                    if (self.Timers is { HasPending: true } spinTimers && spinTimers.UntilDue() == TimeSpan.Zero)
                    {
                        break;
                    }
                    // Nor does a yield that gives the core away for a time slice find work sooner than a wake-up would:
                    // a producer wakes nobody while a worker spins, and a timer that falls due during the yield waits for
                    // it. So a yielding round that took longer than SlowYieldMicroseconds (other threads want the cores) ends
                    // the spin, and for ContendedMilliseconds after it the worker parks without yielding at all: a
                    // parked worker is woken by a producer, or by its wait's time-out when its next timer is due, and the
                    // OS runs a thread it wakes sooner than one that keeps yielding. Beside two CPU hogs, the actor
                    // program's timeouts fired 16-50 ms late on the park path, after a yield round of that length.
                    long yieldStart = Stopwatch.GetTimestamp();
                    if (round == PureSpinRounds && yieldStart - self.SlowYieldAt < _contendedTimestamps)
                    {
                        break;
                    }
#if DEBUG
                    TestHookSpinYield?.Invoke(this);
#endif
                    Thread.Yield();
                    Thread.Yield();
                    long yieldEnd = Stopwatch.GetTimestamp();
                    if (yieldEnd - yieldStart >= s_slowYieldTimestamps)
                    {
                        self.SlowYieldAt = yieldEnd;
                        break;
                    }
                }
            }
            Interlocked.Decrement(ref _spinning);
            self.ForgetSeenRunNext();
            if (item is not null)
            {
                // This worker stops spinning to run what it found. If more work is visible and no one else spins,
                // wake a parked worker to take it (Go's scheduler does the same), or it would wait behind this item.
                WakeIfMoreWork(self);
                ExecuteLendingTimers(self, item);
                continue;
            }

            // With timers of its own, a worker sleeps no longer than until the next is due. It polls them before it
            // announces: their continuations are user code (a worker's shard runs them inline), and a producer may aim its
            // wake-up at an announced worker, which would then wait for that code while another parked worker slept on
            // (for ever, if the continuation blocks until that producer's item has run). Found by review, with a test.
            TimeSpan untilTimer = Timeout.InfiniteTimeSpan;
            if (self.Timers is { HasPending: true } parkTimers && (PollTimers(parkTimers, ShouldShareTimers(self, parkTimers), out untilTimer) || untilTimer == TimeSpan.Zero))
            {
                continue; // timers fired (or are due) after all: stay awake
            }
            if (RescueOverdueTimers(self, busy: false))
            {
                continue; // another worker's overdue timers fired: their continuations are queued here
            }
            if (TakeOverHeldItems(self))
            {
                continue; // the rest of an item another worker is held in (a timer batch) is queued here
            }

            ReleaseOnPark(self);

            // Park: announce, re-check, then block (see the class remarks). The re-check takes a run-next item at first
            // sight: one queued before the announcement woke nobody (its producer saw this worker spinning, or not yet
            // idle), and after this look nothing would take it until its owner finished its current item.
            _idle.Announce(self.Index);
            item = FindWork(self, stealRunNext: true, runNextAtOnce: true);
            if (item is not null)
            {
                _idle.StandDown(self.Index);
                WakeIfMoreWork(self);
                ExecuteLendingTimers(self, item);
                continue;
            }
            // While it blocks, its timers are parked: a thread that cancels one of them tidies them itself, since a
            // producer wakes whichever announced worker it finds, not the timers' owner.
            WorkerTimers? parked = self.Timers;
            if (parked is not null && !parked.TryPark())
            {
                // A cancellation arrived after the poll above: handle it before blocking.
                _idle.StandDown(self.Index);
                continue;
            }
            int waitMs = untilTimer == Timeout.InfiniteTimeSpan ? Timeout.Infinite : RoundUpToMilliseconds(untilTimer);
            if (UntilOthersTimersDue(self) is var untilOthers && untilOthers != Timeout.InfiniteTimeSpan)
            {
                // Wake when another worker's timers fall due, a tick late (an owner that is free fires them itself first,
                // and publishes its next), and rescue them if their owner is still running an item; no sooner than the
                // run-next look, so a worker whose timers fall due every millisecond costs the others no more wake-ups.
                int othersMs = Math.Max(RunNextLookMilliseconds, RoundUpToMilliseconds(untilOthers) + 1);
                if ((uint)othersMs < (uint)waitMs)
                {
                    waitMs = othersMs;
                }
            }
            if ((uint)waitMs > RunNextLookMilliseconds && OthersRunning())
            {
                // Another worker is running an item, and a hand-off it leaves in its run-next slot may have missed this
                // worker: the slot is filled with a plain store, no fence, so a producer and this worker's announcement can
                // miss each other (see Queue). Look again now and then, so such an item waits at most this long, and
                // never for ever behind an owner that blocks on it without helping.
                waitMs = RunNextLookMilliseconds;
            }
            // Woken or timed out (for a timer, or to look at the run-next slots again), the worker is awake and out of the
            // idle set either way.
            Volatile.Write(ref self.ParkedUntilMs, waitMs == Timeout.Infinite ? long.MaxValue : NowMs() + waitMs);
            _idle.Block(self.Index, waitMs);
            Volatile.Write(ref self.ParkedUntilMs, long.MaxValue);
            parked?.Unpark();
            woken = true;
        }
    }

    /// <summary>
    /// How long a parked worker sleeps at most while another worker is running an item: the bound on how long a hand-off
    /// whose wake-up was missed can sit in a busy worker's run-next slot (see the park in <see cref="WorkerLoop"/>).
    /// </summary>
    internal const int RunNextLookMilliseconds = 10;

    /// <summary>True when some other worker is running an item (neither parked nor spinning), as far as the counts tell.</summary>
    private bool OthersRunning() => _workers.Length - _idle.Count - Volatile.Read(ref _spinning) > 0;

    /// <summary>
    /// Tests only: queues from a worker into its empty run-next slot and wakes nobody, as a producer whose store and a
    /// parking worker's announcement missed each other would (see <see cref="Queue"/>). False if not on one of this pool's
    /// workers, or if the slot is taken.
    /// </summary>
    internal bool QueueMissingTheWakeForTests(WorkItem item)
    {
        Worker? w = t_worker;
        if (w is null || w.Pool != this || Volatile.Read(ref w.RunNext) is not null)
        {
            return false;
        }
        w.RunNextStamp++;
        Volatile.Write(ref w.RunNext, item);
        return true;
    }

    /// <summary>A wait has whole milliseconds: round up, or the worker would wake early and spin.</summary>
    private static int RoundUpToMilliseconds(TimeSpan wait)
        => (int)Math.Min(int.MaxValue, (wait.Ticks + TimeSpan.TicksPerMillisecond - 1) / TimeSpan.TicksPerMillisecond);

    private void WakeIfMoreWork(Worker self)
    {
        if (Volatile.Read(ref _spinning) == 0 && _idle.Count > 0 && HasVisibleWork(self))
        {
            _idle.TryWakeOne();
        }
    }

    private bool HasVisibleWork(Worker self)
    {
        if (!_timerBatches.IsEmpty || !_injection.IsEmpty || !_helpable.IsEmpty)
        {
            return true;
        }
        foreach (Worker w in _workers)
        {
            if (!w.Deque.IsEmpty || (w != self && Volatile.Read(ref w.RunNext) is not null))
            {
                return true;
            }
        }
        return false;
    }

    /// <summary>
    /// <see cref="SpindlePool.Trim"/>: the shared queues give back the buffers a burst grew, and the parked workers are
    /// woken to empty their pool stacks and shrink their deques before they park again (<see cref="ReleaseOnPark"/>). A
    /// <see cref="ConcurrentQueue{T}"/> keeps its last segment, which grows to a million slots (16 MB) when a million
    /// items wait at once, and never shrinks, even empty: 4 MB stayed after a 200,000-session server's burst of
    /// cancellations, 16 MB in a run of stop 36.
    /// </summary>
    /// <remarks>
    /// No item is lost or run twice, because the queue's own snapshot does the work: an enumeration freezes the tail
    /// segment for enqueues under the queue's lock, an enqueue that then finds it frozen links a new segment of the first
    /// size (32 slots), and a dequeue that finds the frozen head segment empty moves the head past it, dropping it. All of
    /// that is <see cref="ConcurrentQueue{T}"/>'s ordinary, linearizable growth path (the snapshot's effect on the next
    /// segment's size is what .NET's implementation does, not a documented promise: on another runtime the buffers may
    /// simply stay, as before). A marker item, which does nothing, is queued behind the freeze so that a worker's next
    /// take drops the old segment at once, instead of at the next item. The freeze is made only on a queue seen empty
    /// (under load, the segments are in use and a snapshot would keep dequeued items reachable until they are drained).
    /// </remarks>
    internal void ReleaseIdleMemory()
    {
        if (FreezeIfEmpty(_injection))
        {
            QueueInOrder(s_releaseMark);
        }
        if (FreezeIfEmpty(_timerBatches))
        {
            QueueTimers(s_releaseMark);
        }
        if (FreezeIfEmpty(_helpable))
        {
            QueueShared(s_releaseMark);
        }
        while (_idle.TryWakeOne())
        {
        }
    }

    /// <summary>If <paramref name="queue"/> is empty, freezes its tail segment with a snapshot (see <see cref="ReleaseIdleMemory"/>) and returns true.</summary>
    private static bool FreezeIfEmpty(ConcurrentQueue<WorkItem> queue)
    {
        if (!queue.IsEmpty)
        {
            return false;
        }
        queue.GetEnumerator().Dispose(); // the snapshot freezes the tail segment
        return true;
    }

    /// <summary>A worker about to park: if a trim was asked for since it last looked, it lets go of its pool stacks and of a grown deque's array.</summary>
    private static void ReleaseOnPark(Worker self)
    {
        if (ThreadSlots.TrimIfRequested())
        {
            self.Deque.ShrinkIfEmpty();
        }
    }

    private static readonly ReleaseMark s_releaseMark = new();

    /// <summary>The item <see cref="ReleaseIdleMemory"/> queues behind a frozen segment: it does nothing, and may be queued many times at once.</summary>
    private sealed class ReleaseMark : WorkItem
    {
        public override void Execute()
        {
        }
    }

    /// <summary>Tests only: the worker deques' array lengths.</summary>
    internal int[] DequeCapacities()
    {
        var capacities = new int[_workers.Length];
        for (int i = 0; i < capacities.Length; i++)
        {
            capacities[i] = _workers[i].Deque.Capacity;
        }
        return capacities;
    }

    /// <summary>
    /// Stops the pool's workers, without waiting for them: each finishes the item it is running and exits; items still
    /// queued are dropped. For the shared pool, only when Spindle's collectible context unloads (<see cref="SharedPoolSlot.Close"/>).
    /// </summary>
    /// <remarks>
    /// Invariant: no worker stays parked after this. <see cref="_disposed"/> is written before the releases; each worker's
    /// semaphore gets one more permit, which counts even if the worker is not parked yet, so its next park returns at once;
    /// and every return from a park is followed by the loop's read of <see cref="_disposed"/>, which the release (under the
    /// semaphore's lock) happens before.
    /// </remarks>
    public void Dispose()
    {
        _disposed = true;
        _idle.ReleaseAll();
    }

    /// <summary>True once <see cref="Dispose"/> has been called.</summary>
    internal bool IsDisposed => _disposed;

    private sealed class Worker
    {
        public readonly WorkerPool Pool;
        public readonly WorkStealingDeque<WorkItem> Deque = new();
        public WorkItem? RunNext;
        public int RunNextStamp;
        public WorkerTimers? Timers;
        public DivisibleWorkItem? RunningDivisible; // written by the owner (EnterDivisible), read by idle workers (TakeOverHeldItems)
        public bool RunningItemWithoutTimers; // owner only: running an item from its loop while Timers was null (ExecuteLendingTimers)

        /// <summary>
        /// While the worker is parked, when it will wake at the latest (<see cref="NowMs"/>); long.MaxValue
        /// while it runs or parks with no bound. Written by the owner, read by <see cref="WakeOneIdleToWatch"/>.
        /// </summary>
        public long ParkedUntilMs = long.MaxValue;
        public int SinceTimerPoll;
        /// <summary>
        /// When (<see cref="Stopwatch.GetTimestamp"/>) a round of this worker's spin last yielded for longer than
        /// <see cref="SlowYieldMicroseconds"/>; until <see cref="ContendedMilliseconds"/> after it, the worker parks
        /// without yielding. Owner only.
        /// </summary>
        public long SlowYieldAt = long.MinValue / 2;
        public int[]? SeenItemsEntered; // owner only: the others' ItemsEntered at its previous busy look (RescueOverdueTimers)
        public int InlineBudget = InlineRunBudget;
        public bool LookFairlyNext; // set by a declined take-back (TryTakeBackRunNext): see FindWorkFairly
        public int UntilFairLook = FairLookInterval;
        /// <summary>
        /// Owner only: the worker's next take from the queues every thread feeds offers the jobs' queue first; set by a
        /// take from the injection queue, cleared by a take of a job, so while both have work the worker takes from them
        /// in turn (<see cref="TryTakeShared"/>).
        /// </summary>
        public bool JobsTurn;
        public readonly int Index;
        private uint _rng;
        /// <summary>
        /// The count of takes from the jobs' queue by other threads than workers that this worker saw on its last
        /// spinning look (<see cref="TryTakeShared"/>).
        /// </summary>
        public int SeenHelpableTakenOutside = -1;
        private WorkItem? _seenRunNext;
        private int _seenStamp;
        private Worker? _seenVictim;

        public Worker(WorkerPool pool, int index)
        {
            Pool = pool;
            Index = index;
            _rng = (uint)(index * 2654435761u) | 1;
        }

        public void Run()
        {
            ThreadSlots.AdoptTrimRequests();
#if NET
            Pool.WorkerLoop(this);
#else
            // No ExecutionContext.Restore here: the loop runs inside ExecutionContext.Run and returns whenever what it
            // ran changed the thread's context, and leaving Run puts the worker's own context back (ContextFlow.RunRestoring).
            while (!Pool._disposed)
            {
                ContextFlow.RunRestoring(s_workerLoop, this);
            }
#endif
        }

        public int NextVictim()
        {
            // xorshift32: cheap, and enough to spread thieves over victims.
            uint x = _rng;
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            _rng = x;
            return (int)(x % (uint)Pool._workers.Length);
        }

        /// <summary>Takes the victim's run-next item, whatever was there before (a worker about to park).</summary>
        public static WorkItem? TakeRunNext(Worker victim)
        {
            WorkItem? item = Volatile.Read(ref victim.RunNext);
            return item is not null && Interlocked.CompareExchange(ref victim.RunNext, null, item) == item ? item : null;
        }

        /// <summary>Takes the victim's run-next item only if it is the same one, with the same stamp, as on the last look.</summary>
        public WorkItem? TryStealRunNext(Worker victim)
        {
            WorkItem? item = Volatile.Read(ref victim.RunNext);
            int stamp = Volatile.Read(ref victim.RunNextStamp);
            if (item is null)
            {
                return null;
            }
            if (victim != _seenVictim || item != _seenRunNext || stamp != _seenStamp)
            {
                _seenVictim = victim;
                _seenRunNext = item;
                _seenStamp = stamp;
                return null;
            }
            _seenRunNext = null;
            _seenVictim = null;
            return Interlocked.CompareExchange(ref victim.RunNext, null, item) == item ? item : null;
        }

        /// <summary>
        /// Drops what <see cref="TryStealRunNext"/> remembers, at the end of a spin: the item seen last has usually been
        /// run by its owner since, and a worker that parks (or runs other work for long) must not keep it reachable.
        /// </summary>
        public void ForgetSeenRunNext()
        {
            _seenRunNext = null;
            _seenVictim = null;
        }

        public override string ToString() => "worker " + Index;
    }
}

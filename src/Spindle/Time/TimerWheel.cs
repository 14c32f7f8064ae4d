using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Runtime.CompilerServices;
using System.Threading;

namespace SpindleLib;

/// <summary>
/// A hierarchical timing wheel: the clock behind <see cref="Spindle.Delay(TimeSpan, CancellationToken)"/>, timeouts
/// and periodic timers. Six levels of 64 slots, 1 ms per slot at level 0, a bitmap of occupied slots per level, and
/// cascading from coarse levels to fine ones as time passes.
/// </summary>
/// <remarks>
/// <para>Inserting and cancelling a timer are O(1) and lock-free: a delay pushes its node onto an inbox with one CAS,
/// a cancellation completes the node and pushes it onto a second inbox. Only the wheel's single owner (its driver)
/// touches the slots. It drains both inboxes, then expires every slot that is due. Nothing ticks while the wheel is
/// idle: the driver sleeps until the earliest occupied slot, and a timer earlier than that wakes it.</para>
/// <para>Deadlines are rounded up to the next millisecond, so nothing fires early, and a due timer fires within one
/// millisecond of its deadline (plus the time its driver takes to wake up). Timers fire in deadline order, even when
/// one pass covers many milliseconds (a clock that jumps, a late pass); timers due at the same millisecond fire in the
/// order they were started (on one shard: a wheel you create has one, while on <see cref="Default"/> delays started on
/// different workers go to those workers' own parts of the wheel, see its remarks), and their
/// continuations run in that order on the thread that fires them (a worker that shares a pass with an idle one, or the
/// timer thread, hands them to the workers in that order, and two workers may run them at once). A
/// provider whose timestamp steps back (one that is not monotonic) takes the wheel back with it: a timer fires when the
/// clock reads its deadline, whether it was started before the step or after it (the wheel follows a step of up to about
/// 745 days; a timer started after a longer one, due before the point the wheel stopped at, fires at the wheel's next tick
/// from there).</para>
/// <para>The wheel on <see cref="TimeProvider.System"/> (including <see cref="Default"/>) is driven by a dedicated
/// background thread and runs the continuations of expired timers on Spindle's workers, in batches (on
/// <see cref="Default"/>, a timer started on a worker is fired by the workers themselves instead: see its remarks). The thread of a
/// wheel you create ends once the wheel has had no timer for about 10 seconds (the next timer starts another), so a
/// wheel dropped without <see cref="Dispose"/> is collected, as a BCL timer that is not scheduled is; while a timer is
/// pending the thread keeps the wheel, and the code awaiting it, alive until it fires. Dispose a wheel to end its
/// pending timers at once. A wheel on any
/// other <see cref="TimeProvider"/> (such as <see cref="ManualClock"/>) is driven by that provider's timer, and runs the
/// continuations on the thread that drives it, which makes tests on a manual clock deterministic. If that provider's
/// clock or timer throws during a pass, the exception goes to <see cref="Spindle.UnobservedException"/> and the wheel's
/// next timer or cancellation arms the provider's timer again; no timer is lost.</para>
/// <para>The design follows the hashed and hierarchical timing wheels of Varghese and Lauck (1987), as Kafka and
/// Tokio use them (Tokio: 64 slots per level, 1 ms, occupancy bitmaps); the lock-free inboxes in front of a
/// single-owner wheel are Spindle's own arrangement.</para>
/// </remarks>
public sealed partial class TimerWheel : IDisposable
{
    internal const int SlotBits = 6;
    internal const int SlotsPerLevel = 1 << SlotBits;
    internal const int Levels = 6;
    internal const int SlotMask = SlotsPerLevel - 1;

    /// <summary>The span of the whole wheel, in ticks: 2^36 ms, about 795 days.</summary>
    internal const long WheelSpan = 1L << (SlotBits * Levels);

    private static TimerWheel? s_default;

    private readonly TimeProvider _clock;
    private readonly long _origin;
    private readonly long _timestampsPerTimeSpanTick; // > 0 when the clock's frequency is a multiple of 10 MHz
    private readonly double _timeSpanTicksPerTimestamp;
    private readonly TimerDriver _driver;
    // True for a wheel made with the public constructor, the only kind whose Dispose users call: it keeps its timers that
    // are never due (infinite delays) in _neverDue, weakly, so that Dispose cancels the ones somebody still waits on, as
    // it cancels every other delay. Default cannot be disposed, and a frame loop never disposes its wheels: they keep
    // none. Created on first use (most wheels never see an infinite delay); see NeverDue.
    private readonly bool _keepsNeverDue;
    private NeverDueTimers? _neverDue;

    // The main shard, owned by whoever holds the drive (see RequestDrive); and, for Default only, one shard per Spindle
    // worker, each owned by its worker (see WheelShard).
    private readonly WheelShard _main;
    private readonly bool _workerShards;
    private readonly List<WheelShard> _workerShardList = new();
    // Invariant (producers' side of a Dekker store-load pair; E. W. Dijkstra, "Cooperating Sequential Processes", 1965,
    // crediting T. Dekker): a timer pushed to the main shard with a deadline earlier than _wakeAt lowers _wakeAt and
    // kicks the driver, unless the owner's re-check after publishing _wakeAt sees it (see Insert and DriveAndPlan).
    private long _wakeAt = long.MaxValue;

    // Invariant: the number of drive requests not yet covered by a pass. The thread that moves it from 0 owns the main
    // shard until it brings it back to 0, and runs one more full pass for every request counted while it ran (the
    // "work-in-progress counter" drain loop of RxJava; D. Karnok, "Operator concurrency primitives", 2015). It brings it
    // back to 0 even when a pass throws (a provider whose clock or timer fails): a count left above 0 made every later
    // request return at once, and the wheel never ran a pass again.
    private int _driveRequests;
    // The managed thread id of the thread that owns the drive (0: none), written by the owner only: set when it takes the
    // drive, cleared before each attempt to hand it back. Read by SettleForAdvance, so that an Advance run by code inside
    // this wheel's pass does not wait for that pass.
    private int _driveOwner;
    private long _passes;
    private volatile bool _disposed;

    /// <summary>
    /// Creates a wheel on <paramref name="timeProvider"/>. Use <see cref="Default"/> for real time; create a wheel for
    /// a <see cref="ManualClock"/> (or any other provider) to drive timers deterministically.
    /// </summary>
    /// <exception cref="ArgumentNullException"><paramref name="timeProvider"/> is null.</exception>
    /// <exception cref="ArgumentException"><paramref name="timeProvider"/> reports a <see cref="TimeProvider.TimestampFrequency"/> that is not positive.</exception>
    public TimerWheel(TimeProvider timeProvider)
        : this(timeProvider, workerShards: false)
    {
        _keepsNeverDue = true;
    }

    /// <summary>
    /// A frame loop's wheel: its clock (a <see cref="LoopClock"/>) starts at zero, and the wheel counts its milliseconds
    /// from there, not from its own creation, so that a frame delay is due at the loop time of its call plus the delay
    /// rounded up to a whole millisecond of loop time, as <see cref="FrameLoop.Delay(TimeSpan, FrameTimeKind, FramePhase, CancellationToken)"/>
    /// documents. A loop creates its wheels on its first timed wait, at whatever fraction of a millisecond loop time has
    /// reached: anchored there, the grid was offset, and with frames of fractional delta times a delay resumed in a frame
    /// that began up to a millisecond short of its deadline (found by FrameLoopModelTests).
    /// </summary>
    internal TimerWheel(LoopClock clock)
        : this(clock, workerShards: false, origin: 0)
    {
    }

    /// <param name="timeProvider">The clock.</param>
    /// <param name="workerShards">
    /// True only for <see cref="Default"/>: a worker has one shard (<see cref="WorkerTimers"/>), which counts ticks from
    /// its wheel's origin and which only its wheel's Dispose could cancel, so it can serve one wheel alone. Another wheel
    /// on the system clock that used it fired its delays early (by the difference of the two origins) and its Dispose
    /// left them pending.
    /// </param>
    /// <param name="origin">The timestamp the wheel counts from; null for the clock's reading now.</param>
    private TimerWheel(TimeProvider timeProvider, bool workerShards, long? origin = null)
    {
        if (timeProvider is null)
        {
            ThrowHelper.ThrowArgumentNull(nameof(timeProvider));
        }
        _clock = timeProvider;
        long frequency = timeProvider.TimestampFrequency;
        if (frequency <= 0)
        {
            throw new ArgumentException("The TimeProvider reports a TimestampFrequency of " + frequency + "; it must be positive.", nameof(timeProvider));
        }
        if (frequency % TimeSpan.TicksPerSecond == 0)
        {
            _timestampsPerTimeSpanTick = frequency / TimeSpan.TicksPerSecond;
        }
        _timeSpanTicksPerTimestamp = (double)TimeSpan.TicksPerSecond / frequency;
        _origin = origin ?? timeProvider.GetTimestamp();
        bool system = ReferenceEquals(timeProvider, TimeProvider.System);
        // Only Default has worker shards (see workerShards), and only Default keeps its thread when idle: a delay after a
        // quiet spell pays no thread start there, while a wheel someone created and dropped is not rooted by its thread.
        _driver = system ? new ThreadTimerDriver(this, endsWhenIdle: !workerShards) : new ProviderTimerDriver(this, timeProvider);
        _main = new WheelShard(this, dispatch: _driver.DispatchesContinuations);
        _workerShards = workerShards && system;
        (timeProvider as ManualClock)?.Attach(this);
        SpindleMetrics.EnsureCreated();
    }

    /// <summary>The wheel on <see cref="TimeProvider.System"/> that <see cref="Spindle.Delay(TimeSpan, CancellationToken)"/> uses. It is never disposed.</summary>
    /// <remarks>
    /// A timer started on a Spindle worker goes into that worker's own part of this wheel, with no atomic operation, and
    /// the worker fires it between work items, running its continuation there. While the worker runs an item, an idle
    /// worker fires the ones that fall due instead (within about 10 ms), so a long item, such as a blocking call or a
    /// heavy computation, does not hold them back, as long as another worker is free. So does a timer's continuation
    /// that runs long inside its worker's pass: once the pass has run for two ticks of the clock's milliseconds, an idle
    /// worker fires the rest of it that falls due (within about 10 ms); long work is still better run with
    /// <see cref="Spindle.Run(Action)"/>. With no worker free, another worker that runs only its own timers still fires
    /// them, later (it looks every few dozen passes). Code resumed by a timer another worker fired runs there, and the
    /// timers it starts join that worker's part: a worker whose part holds far more timers than an idle worker's hands
    /// that worker a share of its due continuations, so timer loops spread over the workers again.
    /// </remarks>
    public static TimerWheel Default => Volatile.Read(ref s_default) ?? InitDefault();

    /// <summary>The wheel's driver (tests: a system-clock wheel's timer thread).</summary>
    internal TimerDriver Driver => _driver;

    /// <summary>The default wheel if something has created it (for metrics, which must not create it).</summary>
    internal static TimerWheel? DefaultIfCreated => Volatile.Read(ref s_default);

    /// <summary>
    /// <see cref="SpindlePool.Trim"/>: wakes the timer thread, if this wheel has one and it has started, for one more pass,
    /// after which it empties its pool stacks (<see cref="ThreadSlots.TrimIfRequested"/>).
    /// </summary>
    internal void KickForTrim() => _driver.KickIfStarted();

    /// <summary>The longest delay a wheel accepts: <see cref="uint.MaxValue"/> - 1 milliseconds (about 49.7 days), as <c>Task.Delay</c>.</summary>
    public static TimeSpan MaxDelay { get; } = TimeSpan.FromMilliseconds(uint.MaxValue - 1.0);

    /// <summary>The clock this wheel reads.</summary>
    public TimeProvider TimeProvider => _clock;

    /// <summary>
    /// The number of pending timers: those in the wheel as of its last pass, plus those added since. A cancelled timer
    /// leaves the count on the wheel's next pass, which the cancellation triggers at once (on a wheel of the system clock,
    /// within about a millisecond, so that the cancellations of that while share one pass), and so does a fired one (code
    /// that runs inside a pass, such as a continuation a <see cref="ManualClock"/> wheel runs inline, still counts the
    /// timers that pass fires). A callback timer (<see cref="CreateTimer(Action{object?}, object?, TimeSpan, TimeSpan)"/>)
    /// that is started, stopped, re-armed or disposed enters or leaves the count on the wheel's next pass too, which the
    /// change asks for at once (the owner links it then; a push back changes nothing the count sees). On <see cref="Default"/>, a timer started on a Spindle worker is in that worker's own
    /// wheel, whose passes only that worker runs (or, while it is parked, the canceller): one cancelled while its worker
    /// runs an item leaves the count when the worker next looks at its timers (after that item, or after at most 64
    /// items), so code that blocks a worker, other than in a Spindle wait, holds them counted until it returns. While
    /// timers are being added and fired concurrently, the count is approximate: timers added from other threads are
    /// counted by the depth each addition records in the queue it joins, and an addition that races a pass which takes that
    /// queue and reuses a timer of it for a new delay can count those additions wrongly, by at most the number of timers
    /// then waiting in the queue, until the wheel's next pass publishes the exact count. It is a diagnostic (as
    /// <c>spindle.timer.count</c>): nothing in Spindle decides anything by it, and every timer fires or is cancelled as it
    /// should whatever it says.
    /// </summary>
    public long PendingCount
    {
        get
        {
            long count = _main.PendingCount;
            if (_workerShards)
            {
                lock (_workerShardList)
                {
                    foreach (WheelShard shard in _workerShardList)
                    {
                        count += shard.PendingCount;
                    }
                }
            }
            return count;
        }
    }

    /// <summary>Per-shard pending counts, for diagnostics.</summary>
    internal string Describe()
    {
        var sb = new System.Text.StringBuilder("main: ").Append(_main.Describe());
        lock (_workerShardList)
        {
            foreach (WheelShard shard in _workerShardList)
            {
                sb.Append("; worker: ").Append(shard.Describe());
            }
        }
        return sb.ToString();
    }

    /// <summary>Each worker shard's pending count, in the order the shards were created (tests and diagnostics).</summary>
    internal long[] WorkerShardCounts()
    {
        lock (_workerShardList)
        {
            return _workerShardList.ConvertAll(shard => shard.PendingCount).ToArray();
        }
    }

    /// <summary>How many timers that are never due this wheel's Dispose would cancel: the pending ones nobody has let go of and the GC has not collected (tests).</summary>
    internal int NeverDuePendingCount => Volatile.Read(ref _neverDue)?.LiveCount ?? 0;

    /// <summary>How many passes the wheel has run (for tests that prove it does not tick while idle).</summary>
    internal long PassCount => Volatile.Read(ref _passes);

    /// <summary>
    /// The tick the main shard's owner must run a pass by: its plan, lowered by each timer inserted since that is due
    /// earlier (see <see cref="Insert"/>). Any thread.
    /// </summary>
    internal long WakeAt => Volatile.Read(ref _wakeAt);

#if DEBUG
    /// <summary>Tests only: how many times the main shard's passes have sorted the new timers they found already due.</summary>
    internal int DueSortsForTests => _main.DueSortsForTests;

    /// <summary>Tests only: how many new timers the main shard's passes have found already due.</summary>
    internal int DueJoinedForTests => _main.DueJoinedForTests;
#endif

    /// <summary>True once <see cref="Dispose"/> has been called.</summary>
    internal bool IsDisposed => _disposed;

    private static TimerWheel InitDefault()
    {
        CollectibleContext.EnsureSubscribed();
        TimerWheel wheel = new(TimeProvider.System, workerShards: true);
        TimerWheel? raced = Interlocked.CompareExchange(ref s_default, wheel, null);
        if (raced is not null)
        {
            wheel._driver.Dispose();
            return raced;
        }
        // Invariant (with CollectibleContext.StopForUnload): the handler sets its flag, then (after a full fence) reads
        // s_default and disposes that wheel's driver; this side publishes (the CAS above, a full fence), then reads the
        // flag. So a wheel created while Spindle's context unloads has its driver disposed by one side or both (Dispose is
        // idempotent), and no timer thread starts for it that would never end. Its delays then throw at EnsureWorkers.
        if (CollectibleContext.IsUnloading)
        {
            wheel._driver.Dispose();
        }
        return wheel;
    }

    /// <summary>
    /// A task that completes after <paramref name="delay"/>. The deadline is rounded up to the wheel's 1 ms tick, so the
    /// task never completes early. Allocates nothing in steady state.
    /// </summary>
    /// <param name="delay">The delay. <see cref="TimeSpan.Zero"/> completes at once; <see cref="Timeout.InfiniteTimeSpan"/> waits until <paramref name="cancellationToken"/> fires (or the wheel is disposed); as with <c>Task.Delay(-1)</c>, the wheel does not keep the code awaiting it alive.</param>
    /// <param name="cancellationToken">Cancels the delay: the task completes as canceled and nothing stays registered. A token already cancelled completes the task as canceled at once.</param>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="delay"/> is negative (other than <see cref="Timeout.InfiniteTimeSpan"/>) or longer than <see cref="MaxDelay"/>.</exception>
    /// <exception cref="ObjectDisposedException">The wheel has been disposed.</exception>
    /// <exception cref="InvalidOperationException">On a wheel of <see cref="TimeProvider.System"/> (<see cref="Default"/>, or one made on that clock), whose timer thread hands the resumed code to the workers, as for <see cref="Spindle.Delay(TimeSpan, CancellationToken)"/>: the workers had not started and the SPINDLE_WORKERS environment variable is invalid.</exception>
    public SpindleTask Delay(TimeSpan delay, CancellationToken cancellationToken = default) => Delay(delay, cancellationToken, asOwner: false);

    /// <summary>
    /// As <see cref="Delay(TimeSpan, CancellationToken)"/>; <paramref name="asOwner"/> when the caller owns the main shard
    /// (a frame loop's thread inside a step of the loop: see <see cref="StartAsOwner"/>).
    /// </summary>
    internal SpindleTask Delay(TimeSpan delay, CancellationToken cancellationToken, bool asOwner)
    {
        bool finite = IsFiniteDelay(delay);
        if (_disposed)
        {
            ThrowDisposed();
        }
        if (cancellationToken.IsCancellationRequested)
        {
            return TimerNode.CanceledAtOnce(cancellationToken); // lazily, as one cancelled while it waits
        }
        if (delay == TimeSpan.Zero)
        {
            return SpindleTask.CompletedTask;
        }
        EnsureWorkers();
        if (!finite)
        {
            return InfiniteDelay(cancellationToken);
        }
        TimerNode node = TimerNode.Rent(this);
        short token = node.Version;
        node.KeepToken(cancellationToken);
        if (asOwner)
        {
            StartAsOwner(node, delay);
        }
        else
        {
            Start(node, delay);
        }
        if (cancellationToken.CanBeCanceled)
        {
            node.RegisterCancellation(cancellationToken);
        }
        return new SpindleTask(node, token);
    }

    /// <summary>As <see cref="Delay(TimeSpan, CancellationToken)"/>, in milliseconds; -1 (<see cref="Timeout.Infinite"/>) waits until cancelled.</summary>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="millisecondsDelay"/> is below -1.</exception>
    /// <exception cref="ObjectDisposedException">The wheel has been disposed.</exception>
    /// <exception cref="InvalidOperationException">On a wheel of <see cref="TimeProvider.System"/> (<see cref="Default"/>, or one made on that clock), whose timer thread hands the resumed code to the workers, as for <see cref="Spindle.Delay(TimeSpan, CancellationToken)"/>: the workers had not started and the SPINDLE_WORKERS environment variable is invalid.</exception>
    public SpindleTask Delay(int millisecondsDelay, CancellationToken cancellationToken = default)
    {
        if (millisecondsDelay < -1)
        {
            throw new ArgumentOutOfRangeException(nameof(millisecondsDelay), millisecondsDelay,
                "A delay cannot be negative. Pass 0 or more milliseconds, or Timeout.Infinite (-1) to wait until cancelled.");
        }
        return Delay(millisecondsDelay == -1 ? Timeout.InfiniteTimeSpan : TimeSpan.FromMilliseconds(millisecondsDelay), cancellationToken);
    }

    /// <summary>
    /// Before a timer is armed: on a wheel whose timer thread hands the fired continuations to the workers, starts them
    /// if nothing has, so that workers which cannot start (an invalid SPINDLE_WORKERS) fail the call that arms the timer,
    /// and not the timer thread later, where the continuation would be lost. Nothing has been rented or registered yet.
    /// </summary>
    /// <exception cref="InvalidOperationException">The workers had not started and SPINDLE_WORKERS is invalid.</exception>
    internal void EnsureWorkers()
    {
        if (_main.Dispatches)
        {
            Scheduler.EnsureDefault();
        }
    }

    /// <summary>
    /// Puts <paramref name="node"/> in the wheel to fire <paramref name="delay"/> (finite, checked) from now: on a
    /// Spindle worker, when this wheel gives workers shards of their own, straight into that worker's shard with no atomic
    /// operation (the worker runs it when due; while the worker runs an item, an idle worker may fire it, even before this
    /// returns: callers must allow for it, as for <see cref="Insert"/>); anywhere else, into the
    /// main shard's inbox (<see cref="Insert"/>).
    /// </summary>
    internal void Start(TimerNode node, TimeSpan delay)
    {
        long deadline = DeadlineAfter(delay, out long now);
        WheelShard? own = _workerShards ? WorkerPool.Shared.GetOrAddCurrentWorkerTimers(s_createWorkerShard, this) as WheelShard : null;
        if (own is not null)
        {
            node.Deadline = deadline;
#if DEBUG
            TestHookBeforeAddOwned?.Invoke(own, node);
#endif
            own.AddOwned(node, now);
        }
        else
        {
            Insert(node, deadline);
        }
    }

#if DEBUG
    /// <summary>
    /// Tests only: runs on a worker starting a delay in its own shard (<see cref="Start"/>), between its read of the clock
    /// for the deadline (set on the node) and the link (<see cref="WheelShard.AddOwned"/>): the window in which a rescuer's
    /// pass may move the lent shard's time past that deadline.
    /// </summary>
    internal static Action<WheelShard, TimerNode>? TestHookBeforeAddOwned;
#endif

    /// <summary>
    /// Puts <paramref name="node"/> in a frame loop's wheel to fire <paramref name="delay"/> (finite, checked) from now,
    /// linked straight into its slot by the main shard's owner (<see cref="WheelShard.LinkAsOwner"/>), as a worker links
    /// into its own shard. Only the thread inside a step of the loop calls it: a loop's wheel is driven by its
    /// <see cref="LoopClock"/>'s timer, which runs the pass only there (<see cref="LoopClock.FireIfDue"/>), so that thread
    /// owns the shard; a loop never disposes its wheels, and its clock's timer never fails, the two other ways a pass could
    /// run elsewhere.
    /// </summary>
    /// <remarks>
    /// Pushed to the insert inbox instead, a loop's delays were walked at the next frame's pass (a list of cold nodes, one
    /// dependent load after another), and those already due by then (a delay shorter than a frame) sorted and joined the
    /// pass one at a time: stop 36 measured most of a frame's expiry cost there, with thousands of delays a frame. The wake
    /// time is lowered as <see cref="Insert"/> lowers it (other threads still push, and read it), and the clock's timer armed
    /// for it directly: the owner arms the timer, and a loop clock's timer keeps a kick apart from its due time, so the arm
    /// overwrites no kick.
    /// </remarks>
    internal void StartAsOwner(TimerNode node, TimeSpan delay)
    {
        Debug.Assert(_clock is LoopClock, "only a frame loop's wheel has an owner that starts delays");
        long deadline = DeadlineAfter(delay, out long now);
        if (deadline == WheelShard.Never)
        {
            HoldNeverDue(node);
            return;
        }
        node.Deadline = deadline;
        _main.LinkAsOwner(node, now);
        if (LowerWakeAt(deadline))
        {
            _driver.Arm(deadline);
        }
    }

    /// <summary>
    /// Lowers <see cref="_wakeAt"/> to <paramref name="deadline"/> if that is earlier; true if this call lowered it (its
    /// caller then wakes the driver earlier). A CAS loop: producers on any thread race to lower it. Inlined: Insert is
    /// on every delay's path from a thread that is not a worker.
    /// </summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    private bool LowerWakeAt(long deadline)
    {
        long wakeAt = Volatile.Read(ref _wakeAt);
        while (deadline < wakeAt)
        {
            long seen = Interlocked.CompareExchange(ref _wakeAt, deadline, wakeAt);
            if (seen == wakeAt)
            {
                return true;
            }
            wakeAt = seen;
        }
        return false;
    }

    private static readonly Func<TimerWheel, WorkerTimers> s_createWorkerShard = static wheel =>
    {
        var shard = new WheelShard(wheel, dispatch: false, worker: true);
        lock (wheel._workerShardList)
        {
            wheel._workerShardList.Add(shard);
        }
        return shard;
    };

    /// <summary>
    /// A delay that never fires: only its token (and the wheel's Dispose, on a wheel made with the constructor) completes
    /// it; as with <c>Task.Delay</c>, without a token it never completes. It is never in a shard: the wheel holds it
    /// weakly, if at all (<see cref="Insert"/>), so that, as with <c>Task.Delay(-1)</c>, code that awaits it and that
    /// nothing else references is collected. A wheel made with the constructor used to keep it in a list of timers that
    /// are never due until it was disposed, and a session abandoned while it awaited one stayed in memory for as long.
    /// </summary>
    private SpindleTask InfiniteDelay(CancellationToken cancellationToken)
    {
        TimerNode node = TimerNode.Rent(this);
        short token = node.Version;
        node.KeepToken(cancellationToken);
        Insert(node, WheelShard.Never); // before the token, as for every delay (see TimerNode's ordering)
        if (cancellationToken.CanBeCanceled)
        {
            node.RegisterCancellation(cancellationToken);
        }
        return new SpindleTask(node, token);
    }

    /// <summary>
    /// Takes a timer that is never due (<paramref name="node"/>, not yet published): it enters no shard, and only a wheel
    /// made with the constructor keeps it, weakly, for its Dispose to cancel (see <see cref="NeverDueTimers"/>). A wheel
    /// disposed meanwhile cancels it here, as the disposing pass cancels a finite timer that raced it.
    /// </summary>
    private void HoldNeverDue(TimerNode node)
    {
        node.LeaveOutOfWheel();
        if (_keepsNeverDue && !NeverDue().TryAdd(node, node.Version))
        {
            node.Cancel(byDisposal: true); // no continuation yet: its caller registers one after this returns
        }
    }

    /// <summary>The never-due list of a wheel made with the constructor, created by its first infinite timer or its Dispose.</summary>
    private NeverDueTimers NeverDue()
        => Volatile.Read(ref _neverDue) ?? Interlocked.CompareExchange(ref _neverDue, new NeverDueTimers(this), null) ?? _neverDue!;

    /// <summary>
    /// What a timer that its wheel's Dispose cancels keeps as the token that canceled it: a reader that throws gets
    /// <see cref="NewDisposedCancellation"/> (<see cref="LazyCancellation.Build"/>), and a reader that does not builds
    /// nothing. A Dispose used to build an exception for each pending timer (184 B), even for awaits that suppress it:
    /// 368 MB for a zone of 2M timers (a twenty-first user's review).
    /// </summary>
    internal static CancellationToken DisposalToken { get; } = NewDisposalToken();

    private static CancellationToken NewDisposalToken()
    {
        var source = new CancellationTokenSource(); // its own, so that no token of a caller's is mistaken for it
        source.Cancel();
        return source.Token;
    }

    /// <summary>The exception a timer that its wheel's Dispose cancels throws to a reader.</summary>
    internal static OperationCanceledException NewDisposedCancellation() => new("The TimerWheel was disposed.");

    /// <summary>
    /// Checks a delay or timeout: <see cref="Timeout.InfiniteTimeSpan"/>, or zero to <see cref="MaxDelay"/>. Returns
    /// false for the infinite one.
    /// </summary>
    /// <exception cref="ArgumentOutOfRangeException">Any other value, named by <paramref name="paramName"/>.</exception>
    internal static bool IsFiniteSpan(TimeSpan value, string paramName, string what, string infiniteMeans)
    {
        if (value == Timeout.InfiniteTimeSpan)
        {
            return false;
        }
        if (value < TimeSpan.Zero || value > MaxDelay)
        {
            throw new ArgumentOutOfRangeException(paramName, value,
                what + " must be between TimeSpan.Zero and TimerWheel.MaxDelay (about 49.7 days), or Timeout.InfiniteTimeSpan " + infiniteMeans + ".");
        }
        return true;
    }

    private static void ThrowDisposed() => throw new ObjectDisposedException(nameof(TimerWheel),
        "This TimerWheel has been disposed; create a new one, or use TimerWheel.Default.");

    /// <summary>The current time in wheel ticks (milliseconds since the origin), rounded down.</summary>
    internal long NowTick() => ElapsedTimeSpanTicks(roundUp: false) / TimeSpan.TicksPerMillisecond;

    /// <summary>
    /// The tick of a deadline <paramref name="delay"/> from now, rounded up so it never fires early: the tick
    /// <see cref="DeadlineAfter(TimeSpan, out long)"/> gives, with one division instead of three for a clock whose
    /// frequency is a multiple of 10 MHz (the system clock's, a manual clock's), since a timer's Change is a clock read and
    /// a CAS and the divisions were a third of the rest. The same tick: with e the timestamps since the origin, p the
    /// timestamps per TimeSpan tick and d the delay's TimeSpan ticks (an integer), ceil((ceil(e / p) + d) / 10^4)
    /// = ceil((e / p + d) / 10^4) = ceil((e + d p) / (10^4 p)), since ceil(x) + d = ceil(x + d) and ceil(ceil(y) / m)
    /// = ceil(y / m) for a whole m.
    /// </summary>
    internal long DeadlineAfter(TimeSpan delay)
    {
        long per = _timestampsPerTimeSpanTick;
        if (per > 0 && delay.Ticks <= MaxDelay.Ticks)
        {
            long elapsed = _clock.GetTimestamp() - _origin;
            long perTick = per * TimeSpan.TicksPerMillisecond;
            long span = delay.Ticks * per; // at most MaxDelay (2^32 ms) in timestamps: far below 2^62 for any clock below 2^18 GHz
            if (elapsed >= 0 && elapsed <= long.MaxValue / 2 - span)
            {
                return (elapsed + span + perTick - 1) / perTick;
            }
        }
        return DeadlineAfter(delay, out _);
    }

    /// <summary>As <see cref="DeadlineAfter(TimeSpan)"/>, also giving the tick the delay started in.</summary>
    /// <remarks>
    /// A deadline past the end of a long of clock ticks (a <see cref="ManualClock"/> advanced to its end, which
    /// <c>Advance(TimeSpan.MaxValue)</c> does) can never be reached: it is <see cref="WheelShard.Never"/> due. It used to
    /// wrap to a large negative tick, and the delay, timeout or periodic tick fired at once, early.
    /// </remarks>
    internal long DeadlineAfter(TimeSpan delay, out long startTick)
    {
        long start = ElapsedTimeSpanTicks(roundUp: true);
        startTick = start / TimeSpan.TicksPerMillisecond;
        return TickAtOrAfter(start, delay.Ticks);
    }

    /// <summary>
    /// The tick in which <paramref name="ticks"/> (non-negative <see cref="TimeSpan"/> ticks) after <paramref name="from"/>
    /// (in the same unit, since the wheel's origin) falls, rounded up to the next whole millisecond; <see cref="WheelShard.Never"/>
    /// when that is past the range of a long, which no clock reaches.
    /// </summary>
    internal static long TickAtOrAfter(long from, long ticks)
    {
        if (ticks > long.MaxValue - (TimeSpan.TicksPerMillisecond - 1))
        {
            return WheelShard.Never;
        }
        long end = ticks + (TimeSpan.TicksPerMillisecond - 1);
        return from > long.MaxValue - end ? WheelShard.Never : (from + end) / TimeSpan.TicksPerMillisecond;
    }

    /// <summary>How long until tick <paramref name="tick"/> begins (zero if it has).</summary>
    internal TimeSpan TimeUntil(long tick) => TimeUntil(tick, Elapsed());

    /// <summary>How long until tick <paramref name="tick"/> begins, seen from <paramref name="elapsed"/> (an <see cref="Elapsed"/> reading; zero if it has).</summary>
    internal static TimeSpan TimeUntil(long tick, long elapsed)
    {
        long ticks = tick * TimeSpan.TicksPerMillisecond - elapsed;
        return ticks <= 0 ? TimeSpan.Zero : TimeSpan.FromTicks(ticks);
    }

    /// <summary>The time since the wheel's origin, in <see cref="TimeSpan"/> ticks (rounded down).</summary>
    internal long Elapsed() => ElapsedTimeSpanTicks(roundUp: false);

    /// <summary>The clock's timestamp at which tick <paramref name="tick"/> begins (rounded up; capped at <see cref="long.MaxValue"/>).</summary>
    internal long TimestampAt(long tick)
    {
        long per = _timestampsPerTimeSpanTick;
        if (per > 0 && tick <= (long.MaxValue - _origin) / (TimeSpan.TicksPerMillisecond * per))
        {
            return _origin + tick * TimeSpan.TicksPerMillisecond * per; // exact
        }
        double timestamps = Math.Ceiling(tick * (double)TimeSpan.TicksPerMillisecond / _timeSpanTicksPerTimestamp);
        return timestamps >= long.MaxValue - _origin ? long.MaxValue : _origin + (long)timestamps;
    }

    private long ElapsedTimeSpanTicks(bool roundUp)
    {
        long elapsed = _clock.GetTimestamp() - _origin;
        long per = _timestampsPerTimeSpanTick;
        if (per > 0)
        {
            return roundUp ? (elapsed + per - 1) / per : elapsed / per;
        }
        double ticks = elapsed * _timeSpanTicksPerTimestamp;
        return roundUp ? (long)Math.Ceiling(ticks) : (long)ticks;
    }

    /// <summary>
    /// Adds <paramref name="node"/> with an absolute <paramref name="deadline"/> tick: one CAS onto the insert inbox.
    /// Wakes the driver only when the deadline is earlier than the one it sleeps towards.
    /// </summary>
    /// <remarks>
    /// A timer that is never due (<see cref="WheelShard.Never"/>: an infinite delay, a periodic tick of an infinite period,
    /// a deadline past the range of a long) enters no shard: nothing would ever fire it, and a shard would keep what its
    /// continuation reaches alive until the wheel was disposed (see <see cref="HoldNeverDue"/>).
    /// </remarks>
    internal void Insert(TimerNode node, long deadline)
    {
        if (deadline == WheelShard.Never)
        {
            HoldNeverDue(node);
            return;
        }
        node.Deadline = deadline;
        _main.Push(node);
#if DEBUG
        TestHookAfterPush?.Invoke(this);
#endif
        // Dekker with the owner (DriveAndPlan): the push above happens before this read, and the owner publishes
        // _wakeAt before it re-checks the inbox; so either the owner sees this node, or this read sees the owner's plan.
        if (LowerWakeAt(deadline))
        {
            Kick();
        }
        if (_disposed)
        {
            // Raced with Dispose: make sure the final pass sees this node and cancels it.
            RequestDrive();
        }
    }

#if DEBUG
    /// <summary>
    /// Tests only: runs on a thread adding a timer to the main shard (<see cref="Insert"/>) once the node is in the inbox,
    /// before it reads <see cref="_wakeAt"/> and kicks: a timer counted, and not yet armed on the clock.
    /// </summary>
    internal static Action<TimerWheel>? TestHookAfterPush;
#endif

    /// <summary>
    /// The first cancellation queued to a shard since its owner last looked makes sure it is released promptly: the
    /// main shard's driver is kicked; a worker's shard whose worker is parked is tidied by the calling thread (see
    /// <see cref="WheelShard.ReleaseCancelledWhileParked"/>); a running worker looks at its timers before it parks, and
    /// every few dozen items while it is busy.
    /// </summary>
    internal void OnCancelQueued(WheelShard shard)
    {
        if (shard == _main)
        {
            Kick(toRelease: true);
            if (_disposed)
            {
                // Raced with Dispose, as Insert can: a canceller (or a WhenAny stopping its losing delay) that won the
                // node's core before the disposing pass pushes it only afterwards, and the disposed driver's kick runs no
                // pass. Invariant: every node in the cancel inbox is released by a later pass, so one runs here (its
                // disposing form drains the inbox); without it the node stayed there, never recycled.
                RequestDrive();
            }
        }
        else
        {
            shard.ReleaseCancelledWhileParked();
        }
    }

    /// <summary>
    /// Runs a pass of the wheel on this thread, or, if another thread is running one, asks it to run one more. The
    /// request count makes every request followed by a full pass, and lets only one thread own the wheel at a time.
    /// </summary>
    internal void RequestDrive()
    {
        if (Interlocked.Increment(ref _driveRequests) != 1)
        {
            return;
        }
        int seen = 1;
        int self = Environment.CurrentManagedThreadId;
        while (true)
        {
            Volatile.Write(ref _driveOwner, self);
            try
            {
                if (_disposed)
                {
                    CancelEverything();
                }
                else
                {
                    DriveAndPlan();
                }
            }
            catch (Exception ex)
            {
                // Only the driver can throw here (a provider's clock read at the start of a pass, its timer armed at the
                // end; the system clock's timer thread started again by Arm after a start that failed; continuations are
                // reported as they run): see OnDriverFailed. The drive is still handed back below.
                OnDriverFailed(ex);
            }
            Volatile.Write(ref _driveOwner, 0); // before the hand-back: the next owner's write must not be overwritten
            int left = Interlocked.Add(ref _driveRequests, -seen);
            if (left == 0)
            {
                return;
            }
            seen = left;
        }
    }

    /// <summary>
    /// Called by <see cref="ManualClock.Advance"/> on the advancing thread, before it moves time: takes in the timers that
    /// other threads have pushed and the passes they are running, so the Advance finds every timer started before it was
    /// called armed on the clock, and fires it on its own thread. Runs a pass here if the inboxes hold anything, then waits
    /// until no pass and no kick of another thread is under way (their kicks made from now on are due-now timers of the
    /// clock, which the Advance fires instead: see <see cref="ManualClock"/>). Returns at once inside this wheel's own
    /// pass (code a pass resumed, advancing the clock), which it must not wait for.
    /// </summary>
    /// <remarks>
    /// A timer pushed before the Advance is either seen by the pass run here (its push came first), or its kick found
    /// <see cref="_wakeAt"/> at or below its deadline and kicked nothing, or its kick is under way (counted by the
    /// driver, <see cref="ProviderTimerDriver.Kicking"/>) or deferred to the Advance; a pass of another thread that took
    /// it has armed the clock's timer for it by the time the wait ends. The wait is bounded by that thread's pass, which
    /// runs only continuations due at the clock's current time, and by <see cref="SettleLimitMs"/> should one of them block.
    /// </remarks>
    internal void SettleForAdvance()
    {
        if (_disposed)
        {
            return;
        }
        int self = Environment.CurrentManagedThreadId;
        if (Volatile.Read(ref _driveOwner) == self)
        {
            return;
        }
        if (_main.HasInbox)
        {
            RequestDrive();
        }
        SpinWait spin = default;
        long start = 0;
        while ((Volatile.Read(ref _driveRequests) != 0 || _driver is ProviderTimerDriver { Kicking: true }) && Volatile.Read(ref _driveOwner) != self)
        {
#if DEBUG
            TestHookSettleWaits?.Invoke(this);
#endif
            if (spin.NextSpinWillYield)
            {
                long now = Stopwatch.GetTimestamp();
                if (start == 0)
                {
                    start = now;
                }
                else if (now - start > Stopwatch.Frequency * SettleLimitMs / 1000)
                {
                    return; // that pass runs code that blocks (perhaps waiting for this thread): advance without it
                }
            }
            spin.SpinOnce();
        }
    }

    /// <summary>
    /// How long <see cref="SettleForAdvance"/> waits for another thread's pass or kick: a continuation that blocks inside
    /// it (on something the advancing thread does next, or on two threads advancing one clock from inside passes of two
    /// wheels, each waiting for the other) must not hang the test; past the limit the Advance goes on as it did before it
    /// waited, and that pass's timers fire on their own thread.
    /// </summary>
    internal const int SettleLimitMs = 1000;

#if DEBUG
    /// <summary>Tests only: runs on an advancing thread each time round <see cref="SettleForAdvance"/>'s wait for another thread's pass or kick.</summary>
    internal static Action<TimerWheel>? TestHookSettleWaits;
#endif

    /// <summary>
    /// Asks the driver for a pass. A provider whose timer throws instead gets none: the pass then runs here, on the
    /// calling thread (as a <see cref="ManualClock"/>'s timer runs it for a due time of zero), so the timer just pushed,
    /// or the cancellation just queued, is not left in an inbox that no pass is coming for.
    /// </summary>
    /// <param name="toRelease">True for a kick that only releases cancelled timers (see <see cref="TimerDriver.KickToRelease"/>).</param>
    private void Kick(bool toRelease = false)
    {
        try
        {
            if (toRelease)
            {
                _driver.KickToRelease();
            }
            else
            {
                _driver.Kick();
            }
        }
        catch (Exception ex)
        {
            OnDriverFailed(ex);
            RequestDrive();
        }
    }

    /// <summary>
    /// The provider failed to read its clock or to arm its timer: the failure goes to <see cref="Spindle.UnobservedException"/>
    /// (it may have happened on the provider's own timer thread, where an exception would end the process, or in a call
    /// that has already put its timer in the wheel), and the wheel forgets its plan, so that the next timer added wakes it
    /// again and its pass arms the provider's timer again.
    /// </summary>
    /// <remarks>
    /// Forgetting the plan only raises <see cref="_wakeAt"/>: a producer then kicks when it need not, never the other way
    /// round, so the Dekker invariant on <see cref="_wakeAt"/> still holds.
    /// </remarks>
    private void OnDriverFailed(Exception exception)
    {
        Interlocked.Exchange(ref _wakeAt, long.MaxValue);
        UnobservedExceptions.Report(exception);
    }

    /// <summary>
    /// The owner's pass: drain the inboxes, expire everything due, then publish the next deadline to producers and to
    /// the driver, and repeat while producers added or cancelled timers in the meantime. Owner only.
    /// </summary>
    /// <remarks>
    /// The re-check covers both inboxes. A producer pushes, then kicks the driver; the owner publishes and arms, then
    /// re-checks. A provider's kick is a Change to "now", and the owner's Arm is a later Change that overwrites it, so a
    /// push whose kick came before the Arm must be seen by the re-check (Change calls are serialized, so it is). The
    /// first cancellation after a pass kicks too: with only the insert inbox re-checked, a cancellation queued during
    /// the pass (by a continuation the pass ran, or by another thread) stayed linked and counted until the next planned
    /// pass, which could be its own deadline. The system clock's thread needs no re-check of the cancel inbox (it
    /// <see cref="TimerDriver.ServesReleaseKicksItself"/>): such a cancellation found the inbox empty and kicked it after
    /// it reset its event, so it runs another pass, a tick later (see <see cref="ThreadTimerDriver.KickToRelease"/>);
    /// re-checking here would run a pass per cancellation again while a burst of them lasts.
    /// </remarks>
    private void DriveAndPlan()
    {
        while (true)
        {
            _passes++;
            _main.DrainInboxes(NowTick());
            _main.FlushBatch();
            _main.PublishCount();
            long next = _main.NextDeadline();
            Interlocked.Exchange(ref _wakeAt, next);
            _driver.Arm(next);
            if (_driver.ServesReleaseKicksItself ? !_main.HasInsertInbox : !_main.HasInbox)
            {
#if DEBUG
                TestHookPassPlanned?.Invoke(this);
#endif
                return;
            }
        }
    }

#if DEBUG
    /// <summary>
    /// Tests only: runs on the owner once its pass has planned and found both inboxes empty, as it returns: a timer pushed
    /// here is seen by no re-check of this pass, so only its kick brings the next one (<c>LoopClockPassRequestTests</c>).
    /// </summary>
    internal static Action<TimerWheel>? TestHookPassPlanned;
#endif

    /// <summary>
    /// Stops the wheel: every pending delay completes as canceled, and <see cref="Delay(TimeSpan, CancellationToken)"/>
    /// then throws <see cref="ObjectDisposedException"/>. As for a token's cancellation, the exception (an
    /// <see cref="OperationCanceledException"/> saying the wheel was disposed) is built only by a read that throws it, so
    /// awaits with <see cref="SpindleTask.SuppressCancellationThrow"/> allocate nothing however many timers end. Every
    /// callback timer on it (<see cref="CreateTimer(Action{object?}, object?, TimeSpan, TimeSpan)"/>) is ended as its own
    /// <see cref="SpindleTimer.Dispose"/> would stop it: it never fires again (a callback already handed to the workers
    /// still runs), its callback and state are let go of (a timer stopped at the time, which the wheel does not hold,
    /// keeps them until its handle's Dispose), its <see cref="SpindleTimer.Change(TimeSpan, TimeSpan)"/> throws
    /// <see cref="ObjectDisposedException"/> naming the wheel, and its handle's Dispose returns its node to the pool. <see cref="Default"/> cannot be disposed. An infinite delay with
    /// no token (or one whose token's source is gone) is held weakly, as <c>Task.Delay(-1)</c> holds nothing: code awaiting
    /// it that nothing else references may have been collected by then, and its <c>finally</c> blocks never run.
    /// </summary>
    /// <exception cref="InvalidOperationException">This is <see cref="Default"/>.</exception>
    public void Dispose()
    {
        if (ReferenceEquals(this, Volatile.Read(ref s_default)))
        {
            ThrowHelper.ThrowInvalidOperation("TimerWheel.Default is shared by the whole process and cannot be disposed. Dispose only a wheel you created with new TimerWheel(timeProvider).");
        }
        if (_disposed)
        {
            return;
        }
        _disposed = true;
        try
        {
            _driver.Dispose();
        }
        finally
        {
            // Even if the provider's timer throws as it is disposed: every pending delay still completes as canceled.
            RequestDrive();
            if (_keepsNeverDue)
            {
                NeverDue().Close();
            }
        }
    }

    /// <summary>The disposing pass: cancels everything in the main shard and its inboxes. Owner only.</summary>
    private void CancelEverything()
    {
        _main.CancelEverything();
        // Its drain may have fired nodes from the insert inbox whose deadline had passed: their continuations are in
        // the shard's batch, which no later pass will flush.
        _main.FlushBatch();
        Interlocked.Exchange(ref _wakeAt, long.MaxValue);
    }
}

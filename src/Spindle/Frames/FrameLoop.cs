using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Runtime.CompilerServices;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib;

/// <summary>
/// A single-threaded frame loop with ordered, named phases, for games, simulations and any engine: awaits that resume on
/// the loop thread, in the order they were queued, with nothing allocated per frame however many tasks wait.
/// </summary>
/// <remarks>
/// <para><b>A frame.</b> <see cref="RunFrame()"/> runs one frame: <see cref="BeginFrame"/>, then every phase in order
/// (<see cref="EarlyUpdate"/>, <see cref="FixedUpdate"/>, <see cref="Update"/>, <see cref="LateUpdate"/>, then any
/// added with <see cref="AddPhase(string)"/>). <see cref="BeginFrame"/> does, in this order: move the continuations
/// handed off from other threads since the last frame to their phases; add one to <see cref="FrameCount"/>; advance
/// <see cref="UnscaledTime"/> by the frame's delta and <see cref="Time"/> by the delta times <see cref="TimeScale"/>;
/// queue, for their phases, the delays and frame delays that fall due, in the order they were started. Each phase then
/// runs the continuations queued for it, first queued first run.</para>
/// <para><b>Double buffering.</b> A phase runs the batch queued for it before it started. A continuation that the batch
/// queues to the same phase (or to an earlier one) runs at that phase's next run, in the next frame (or later in this
/// frame, if a host runs the phase again: see <see cref="RunPhase"/>); one queued to a later phase runs in this frame. A
/// frame therefore always ends, and <see cref="Yield(CancellationToken)"/> in a loop resumes once per frame.</para>
/// <para><b>Which frame each await resumes in</b>, awaited on the loop thread during frame N (a phase is "still to run"
/// if it has not started in frame N):</para>
/// <list type="bullet">
/// <item><see cref="Yield(FramePhase, CancellationToken)"/>: the phase's next run: frame N if the phase is still to run
/// (or if a host runs it again in frame N), else frame N + 1.</item>
/// <item><see cref="NextFrame(FramePhase, CancellationToken)"/>: the phase's first run in frame N + 1, always (never a run
/// still to come in frame N, even when a host runs the phase several times a frame).</item>
/// <item><see cref="DelayFrame(int, FramePhase, CancellationToken)"/>: the phase in frame N + n (n = 0 is a Yield).</item>
/// <item><see cref="Delay(TimeSpan, FrameTimeKind, FramePhase, CancellationToken)"/>: the phase in the first frame that
/// begins with loop time at or past the deadline (the start time plus the delay, to the tick: a delay of one 1/60 s step
/// resumes in the next frame).</item>
/// <item><see cref="WaitUntil(Func{bool}, FramePhase, CancellationToken)"/>: the predicate is checked at once, then at
/// every run of the phase, starting with the next; it resumes at the first run where it holds.</item>
/// <item><see cref="SwitchTo(FramePhase, CancellationToken)"/>: continues at once.</item>
/// </list>
/// <para>Between frames N and N + 1 (on the loop thread, outside <see cref="RunFrame()"/>), the same rules apply with
/// every phase already run: Yield, NextFrame and SwitchTo's hand-off resume in frame N + 1.</para>
/// <para><b>From other threads.</b> Every await may be made from any thread. One made off the loop thread is handed
/// to the loop through a thread-safe queue and takes effect at the start of the next frame to begin, as if made on the
/// loop thread just before it: Yield, NextFrame, SwitchTo and the first check of WaitUntil happen in that frame's phase.
/// Delays and frame delays are counted from the loop's time and frame count at the call. Nothing handed off is lost,
/// including when the loop is not running: it waits for the next frame. Such a wait completes only once it is awaited,
/// so its awaiting code always runs on the loop thread, even if frames that could have completed it ran before the await
/// (a task obtained on another thread and never awaited stays pending, unless cancelled). The loop thread is the thread
/// running <see cref="Run"/>, else the thread that last began a frame or ran a phase (Run's thread stops being it when
/// Run stops); before either, every thread is "another thread".</para>
/// <para><b>Cancellation.</b> Every await takes a <see cref="CancellationToken"/>. Cancelling it completes the await at
/// once, inside the call that cancels (not at the next frame), with <see cref="OperationCanceledException"/>, and leaves
/// nothing registered: the awaiting code then runs on the thread that cancelled. An await whose token is already
/// cancelled completes as cancelled without waiting.</para>
/// <para><b>Faults.</b> A continuation that throws does not stop the loop: in an async method the exception faults its
/// task and reaches the code awaiting it; a plain delegate continuation's exception goes to
/// <see cref="Spindle.UnobservedException"/>, and the phase carries on with the next continuation. A WaitUntil
/// predicate that throws faults the wait.</para>
/// <para><b>Other awaits.</b> A job handle, a <see cref="Promise"/>, or a WhenAll/WhenAny of tasks that are not the
/// loop's resume on the thread that completes them; add <c>await loop.SwitchTo()</c> to come back. A WhenAll or WhenAny
/// of the loop's own awaits resumes on the loop thread. Loop code that completes such a source (a promise, a signal, an
/// async method it awaits) runs the awaiting code inline, inside that call, on the loop thread, and so on down a chain
/// of completions however deep it goes: past 32 nested continuations, where Spindle stops running them inline to bound
/// the stack, the rest of the chain is queued to the loop and runs as soon as the phase's current item returns, before
/// its next item, in the same frame and phase (not on the workers), or inside a blocking <c>GetResult()</c> that the item
/// makes meanwhile. Code that runs between steps on the thread that
/// runs them (a host's code between <see cref="RunPhase"/> calls) is not inside the loop: there a chain deeper than 32
/// goes on on the workers, so complete sources that start long chains from loop code.</para>
/// <para><b>Memory.</b> An await with no cancelable token queues the awaiting method's own state-machine box (Spindle
/// async methods); other awaits rent a pooled source. The queues are arrays reused from frame to frame. In steady state
/// a frame allocates nothing.</para>
/// <para><b>Thread-safety.</b> The awaits, <see cref="FrameCount"/>, the time properties, <see cref="TimeScale"/> and
/// <see cref="FixedDeltaTime"/> may be used from any thread. <see cref="RunFrame()"/>, <see cref="BeginFrame"/> and
/// <see cref="RunPhase"/> run the loop on the calling thread; one thread at a time, never from inside a frame.
/// <see cref="AddPhase(string)"/>, <see cref="AddPhaseAfter"/> and <see cref="AddPhaseBefore"/> may be called from any
/// thread, but not while a frame runs.</para>
/// </remarks>
[DebuggerDisplay("{DebuggerDisplay,nq}")]
public sealed partial class FrameLoop
{
    private readonly object _phasesLock = new();
    private FramePhase[] _phases;
    // What Phases hands out: a read-only view of _phases, made with each copy (a cast of the array itself could reorder
    // the loop's phases).
    private IReadOnlyList<FramePhase> _phasesView;
    private readonly FrameInbox _inbox = new();

    // Time: one clock per kind of timed wait, each with its own wheel, created on first use.
    private readonly LoopClock _frameClock = new();
    private readonly LoopClock _unscaledClock = new();
    private readonly LoopClock _scaledClock = new();
    private readonly object _wheelLock = new();
    private TimerWheel? _frameWheel;
    private TimerWheel? _unscaledWheel;
    private TimerWheel? _scaledWheel;
    private long _sequence;

    // Timers that expired in this frame's pass, merged into start order as they join their phases (loop thread only).
    private long[] _expiredOrder = new long[16];
    private FrameWaiter?[] _expired = new FrameWaiter?[16];
    private int _expiredCount;
    // The runs of _expired already in start order, for the merge (QueueExpired): each run's next entry and its end, and
    // a binary min-heap of the runs left, keyed by their next entry's sequence. Reused from frame to frame.
    private int[] _runNext = new int[16];
    private int[] _runEnd = new int[16];
    private int[] _runHeap = new int[16];
    // Delays in loop time whose timer has fallen due, or that needed none, but whose exact deadline no frame has reached
    // yet: each is at most a millisecond of loop time from its deadline (see StartLoopTimeDelay). Each frame moves those
    // now due (and those cancelled meanwhile) to _expired. Under _dueLock: a delay started on another thread adds here too.
    private readonly object _dueLock = new();
    private FrameWaiter?[] _notYetDue = new FrameWaiter?[16];
    private int _notYetDueCount;

    private long _frameCount;
    private long _timeTicks;
    private long _unscaledTimeTicks;
    private long _deltaTicks;
    private long _unscaledDeltaTicks;
    private double _timeScale = 1.0;
    private long _fixedDeltaTicks = TimeSpan.TicksPerSecond / 60;

    private FramePhase? _currentPhase;
    // The loop thread as an object, not an id: Thread.CurrentThread is a managed thread-static read (about 1.5 ns here),
    // Environment.CurrentManagedThreadId a runtime call (about 2.8 ns), and every await on the loop checks it.
    private Thread? _loopThread;
    // The thread inside Enter..Exit (set and cleared by that thread only): while it is set, no other thread can take the
    // loop, so its awaits add to the phases without a lock. The loop thread between steps adds under _takeoverLock,
    // under which every change of _loopThread is made: a thread that takes the loop over cannot reach the phases while
    // the previous loop thread is in the middle of an add.
    private Thread? _owner;
    private readonly object _takeoverLock = new();
    private int _busy;
    private int _runThreadId;

    /// <summary>Creates a loop with the default phases: EarlyUpdate, FixedUpdate, Update and LateUpdate.</summary>
    public FrameLoop()
    {
        SpindleMetrics.EnsureCreated();
        EarlyUpdate = new FramePhase(this, nameof(EarlyUpdate));
        FixedUpdate = new FramePhase(this, nameof(FixedUpdate));
        Update = new FramePhase(this, nameof(Update));
        LateUpdate = new FramePhase(this, nameof(LateUpdate));
        _phases = new[] { EarlyUpdate, FixedUpdate, Update, LateUpdate };
        Renumber(_phases);
        _phasesView = Array.AsReadOnly(_phases);
        SynchronizationContext = new FrameSynchronizationContext(this);
    }

    /// <summary>
    /// Creates a named loop with the default phases. The name tags the loop's frame durations (<c>spindle.frame.duration</c>,
    /// tag <c>spindle.loop</c>) and names the thread of <see cref="Run"/>, so that a host of many loops (a server running a
    /// match per loop) can tell which one is slow, in its metrics and in a profiler or a dump.
    /// </summary>
    /// <param name="name">The loop's name, for example a match's id. Loops may share a name.</param>
    /// <exception cref="ArgumentNullException"><paramref name="name"/> is null: use <see cref="FrameLoop()"/> for an unnamed loop.</exception>
    /// <exception cref="ArgumentException"><paramref name="name"/> is empty or only white space: give a name that tells the loop apart, or use <see cref="FrameLoop()"/>.</exception>
    public FrameLoop(string name)
        : this()
    {
        if (name is null)
        {
            throw new ArgumentNullException(nameof(name), "A loop's name cannot be null: use new FrameLoop() for an unnamed loop.");
        }
        if (string.IsNullOrWhiteSpace(name))
        {
            throw new ArgumentException("A loop's name cannot be empty or white space: give a name that tells the loop apart (a match's id), or use new FrameLoop() for an unnamed loop.", nameof(name));
        }
        Name = name;
    }

    /// <summary>
    /// The name given to <see cref="FrameLoop(string)"/>, or null for a loop made with <see cref="FrameLoop()"/>. It tags
    /// the loop's frame durations (<c>spindle.loop</c>) and names <see cref="Run"/>'s thread.
    /// </summary>
    public string? Name { get; }

    /// <summary>
    /// The loop's <see cref="System.Threading.SynchronizationContext"/>, as Unity's and Godot's main-thread contexts are to
    /// their engines: installed on the loop thread, it makes a BCL await there (a <c>Task</c>, a <c>ValueTask</c>,
    /// <c>Task.Yield()</c>) resume on the loop thread, in <see cref="Update"/>, instead of on a thread-pool thread where it
    /// would race with the loop's code. <see cref="Run"/> installs it on its thread; a host that runs frames itself
    /// (<see cref="RunFrame()"/>) installs it with <c>SynchronizationContext.SetSynchronizationContext</c> if it wants it.
    /// Spindle's own awaits capture no context, as everywhere: they resume where their source completes.
    /// </summary>
    /// <remarks>
    /// A post goes where <see cref="SwitchTo(CancellationToken)"/> goes: from another thread, or from the loop thread between frames, to
    /// <see cref="Update"/> of the next frame to begin (a thread-safe hand-off, never lost); from inside a frame, to
    /// <see cref="Update"/>'s next run. Posts from one thread run in the order they were made, each in the
    /// <see cref="ExecutionContext"/> of its post, and a post allocates nothing in steady state. A callback that throws does
    /// not stop the loop: its exception goes to <see cref="Spindle.UnobservedException"/>. <c>Send</c> runs the callback at
    /// once on the loop thread, and throws <see cref="NotSupportedException"/> on any other (it could wait for ever).
    /// </remarks>
    public SynchronizationContext SynchronizationContext { get; }

    /// <summary>The first default phase: input, and anything that must see the frame before the game logic does.</summary>
    public FramePhase EarlyUpdate { get; }

    /// <summary>
    /// The second default phase: fixed-step simulation (physics). It runs once per frame, like every phase; a host that
    /// steps physics at its own rate (50 Hz beside 60 Hz frames) calls <see cref="RunPhase"/> on it once per step: several
    /// times in a frame, or not at all in a frame with no step (see <see cref="BeginFrame"/>).
    /// </summary>
    public FramePhase FixedUpdate { get; }

    /// <summary>The third default phase, and the one awaits resume in when none is given: game logic.</summary>
    public FramePhase Update { get; }

    /// <summary>The fourth default phase: what must follow the game logic (cameras, late bookkeeping).</summary>
    public FramePhase LateUpdate { get; }

    /// <summary>The phases in the order each frame runs them.</summary>
    /// <remarks>A read-only snapshot: it does not change when a phase is added later, and cannot be changed.</remarks>
    public IReadOnlyList<FramePhase> Phases => Volatile.Read(ref _phasesView);

    /// <summary>The number of frames begun: 0 before the first, N during frame N and until frame N + 1 begins.</summary>
    public long FrameCount => Volatile.Read(ref _frameCount);

    /// <summary>What a debugger shows: the loop's name, its frame, the phase running (if any) and its time.</summary>
    private string DebuggerDisplay
        => $"{(Name is null ? "" : "'" + Name + "', ")}Frame = {FrameCount}, Phase = {CurrentPhase?.Name ?? "none"}, Time = {Time}";

    /// <summary>The frame count, read on the loop thread (the phases' queues mark what each frame queued).</summary>
    internal long CurrentFrame => _frameCount;

    /// <summary>Loop time: the sum of every frame's <see cref="DeltaTime"/>, as of the current frame's start.</summary>
    public TimeSpan Time => TimeSpan.FromTicks(Volatile.Read(ref _timeTicks));

    /// <summary>Loop time not affected by <see cref="TimeScale"/>: the sum of every frame's <see cref="UnscaledDeltaTime"/>.</summary>
    public TimeSpan UnscaledTime => TimeSpan.FromTicks(Volatile.Read(ref _unscaledTimeTicks));

    /// <summary>The current frame's step of <see cref="Time"/>: its <see cref="UnscaledDeltaTime"/> times <see cref="TimeScale"/>.</summary>
    public TimeSpan DeltaTime => TimeSpan.FromTicks(Volatile.Read(ref _deltaTicks));

    /// <summary>The current frame's step of <see cref="UnscaledTime"/>, as given to <see cref="BeginFrame"/>.</summary>
    public TimeSpan UnscaledDeltaTime => TimeSpan.FromTicks(Volatile.Read(ref _unscaledDeltaTicks));

    /// <summary>
    /// How fast <see cref="Time"/> runs against <see cref="UnscaledTime"/> (default 1; 0 pauses scaled time and the
    /// delays on it). A change applies from the next frame.
    /// </summary>
    /// <exception cref="ArgumentOutOfRangeException">The value is negative, infinite or NaN.</exception>
    public double TimeScale
    {
        get => Volatile.Read(ref _timeScale);
        set
        {
            if (!(value >= 0) || double.IsInfinity(value))
            {
                throw new ArgumentOutOfRangeException(nameof(value), value, "The time scale must be zero or a finite positive number.");
            }
            Volatile.Write(ref _timeScale, value);
        }
    }

    /// <summary>The step <see cref="RunFrame()"/> advances loop time by (default 1/60 s).</summary>
    /// <exception cref="ArgumentOutOfRangeException">The value is negative.</exception>
    public TimeSpan FixedDeltaTime
    {
        get => TimeSpan.FromTicks(Volatile.Read(ref _fixedDeltaTicks));
        set
        {
            ValidateDelta(value, nameof(value));
            Volatile.Write(ref _fixedDeltaTicks, value.Ticks);
        }
    }

    /// <summary>
    /// The phase the loop thread is running, or null outside a phase (between phases, between frames, and during
    /// <see cref="BeginFrame"/>). Meant for the loop thread; another thread reads a value that may already be stale.
    /// </summary>
    public FramePhase? CurrentPhase => Volatile.Read(ref _currentPhase);

    /// <summary>True when the calling thread is the loop thread (see the remarks on <see cref="FrameLoop"/>).</summary>
    /// <remarks>
    /// The loop thread is the thread that began the latest frame (or ran a phase), or the thread running
    /// <see cref="Run"/>, from its first frame until it stops. So this is false on every thread before the loop's first
    /// frame, including the thread that is about to call <see cref="RunFrame()"/> or <see cref="Run"/>: which thread will
    /// drive a loop is not known until one does, and a loop may be driven by another thread later. Awaits made then are
    /// not lost: they take effect in the first frame and resume on the thread that runs it. To ask "will this code run
    /// on the loop", test <c>IsLoopThread</c> inside a frame (a phase's continuation), or after <c>await loop.SwitchTo()</c>.
    /// </remarks>
    public bool IsLoopThread => Thread.CurrentThread == Volatile.Read(ref _loopThread);

    /// <summary>Continuations queued in the phases, and handed off but not yet drained (for tests).</summary>
    internal int QueuedCount
    {
        get
        {
            int n = _inbox.Count;
            foreach (FramePhase p in Volatile.Read(ref _phases))
            {
                n += p.QueuedCount;
            }
            return n;
        }
    }

    /// <summary>
    /// Timers pending on the loop's wheels, delays held for their exact deadline, and frame delays pending in the frame
    /// ring (for tests: a cancelled delay leaves none once a frame has run).
    /// </summary>
    internal long PendingTimers => (_frameWheel?.PendingCount ?? 0) + (_unscaledWheel?.PendingCount ?? 0) + (_scaledWheel?.PendingCount ?? 0) +
        Volatile.Read(ref _notYetDueCount) + FrameRingPending;

    /// <summary>Adds a phase at the end of the frame, after every existing one.</summary>
    /// <returns>The new phase.</returns>
    /// <exception cref="ArgumentNullException"><paramref name="name"/> is null.</exception>
    /// <exception cref="ArgumentException"><paramref name="name"/> is empty, or already a phase's name in this loop.</exception>
    /// <exception cref="InvalidOperationException">A frame is running.</exception>
    public FramePhase AddPhase(string name) => InsertPhase(name, null, after: true);

    /// <summary>Adds a phase right after <paramref name="after"/>.</summary>
    /// <returns>The new phase.</returns>
    /// <exception cref="ArgumentNullException"><paramref name="after"/> or <paramref name="name"/> is null.</exception>
    /// <exception cref="ArgumentException"><paramref name="name"/> is empty, or taken; or <paramref name="after"/> belongs to another loop.</exception>
    /// <exception cref="InvalidOperationException">A frame is running.</exception>
    public FramePhase AddPhaseAfter(FramePhase after, string name)
    {
        CheckPhase(after, nameof(after));
        return InsertPhase(name, after, after: true);
    }

    /// <summary>Adds a phase right before <paramref name="before"/> (before <see cref="EarlyUpdate"/> makes it the first).</summary>
    /// <returns>The new phase.</returns>
    /// <exception cref="ArgumentNullException"><paramref name="before"/> or <paramref name="name"/> is null.</exception>
    /// <exception cref="ArgumentException"><paramref name="name"/> is empty, or taken; or <paramref name="before"/> belongs to another loop.</exception>
    /// <exception cref="InvalidOperationException">A frame is running.</exception>
    public FramePhase AddPhaseBefore(FramePhase before, string name)
    {
        CheckPhase(before, nameof(before));
        return InsertPhase(name, before, after: false);
    }

    /// <summary>Adds a phase next to <paramref name="anchor"/> (at the end when null), whose place is read under the lock.</summary>
    private FramePhase InsertPhase(string name, FramePhase? anchor, bool after)
    {
        if (name is null)
        {
            ThrowHelper.ThrowArgumentNull(nameof(name));
        }
        if (name.Length == 0)
        {
            throw new ArgumentException("A phase needs a name: pass a non-empty string, different from every other phase's in this loop.", nameof(name));
        }
        lock (_phasesLock)
        {
            if (Volatile.Read(ref _busy) != 0)
            {
                ThrowHelper.ThrowInvalidOperation("Phases cannot be added while a frame is running; add them before running the loop or between frames.");
            }
            FramePhase[] old = _phases;
            foreach (FramePhase p in old)
            {
                if (p.Name == name)
                {
                    throw new ArgumentException("This loop already has a phase named '" + name + "'. Give each phase a name of its own, or use the existing phase (see Phases).", nameof(name));
                }
            }
            var phase = new FramePhase(this, name);
            var phases = new List<FramePhase>(old);
            // The anchor's index is read here, under the lock: another thread's insert may have moved it meanwhile.
            phases.Insert(anchor is null ? phases.Count : anchor.Index + (after ? 1 : 0), phase);
            FramePhase[] array = phases.ToArray();
            Renumber(array);
            // Copy on write: a frame iterates the array it read at its start.
            Volatile.Write(ref _phases, array);
            Volatile.Write(ref _phasesView, Array.AsReadOnly(array));
            return phase;
        }
    }

    private static void Renumber(FramePhase[] phases)
    {
        for (int i = 0; i < phases.Length; i++)
        {
            phases[i].Index = i;
        }
    }

    /// <summary>Runs one frame, advancing loop time by <see cref="FixedDeltaTime"/> (see <see cref="RunFrame(TimeSpan)"/>).</summary>
    /// <exception cref="InvalidOperationException">Called from inside a frame, while another thread runs the loop, or while <see cref="Run"/> runs it.</exception>
    public void RunFrame() => RunFrame(FixedDeltaTime);

    /// <summary>
    /// Runs one frame on the calling thread, which becomes the loop thread: <see cref="BeginFrame"/> with
    /// <paramref name="deltaTime"/>, then every phase in order.
    /// </summary>
    /// <param name="deltaTime">How far loop time moves this frame (unscaled).</param>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="deltaTime"/> is negative, or would take loop time
    /// (scaled by <see cref="TimeScale"/>, or unscaled) past about 29,000 years; nothing changes then.</exception>
    /// <exception cref="InvalidOperationException">Called from inside a frame (a continuation running on the loop), while another thread runs the loop, or while <see cref="Run"/> runs it.</exception>
    public void RunFrame(TimeSpan deltaTime)
    {
        ValidateDelta(deltaTime, nameof(deltaTime));
        long scaledTicks = EnterFrame(deltaTime.Ticks);
        long started = SpindleMetrics.FrameStarted();
        try
        {
            BeginFrameCore(deltaTime.Ticks, scaledTicks);
            long frame = _frameCount;
            FramePhase[] phases = Volatile.Read(ref _phases);
            for (int i = 0; i < phases.Length; i++)
            {
                RunPhaseCore(phases[i], frame);
            }
        }
        finally
        {
            SpindleMetrics.FrameEnded(started, Name);
            Exit();
        }
    }

    /// <summary>
    /// Begins a frame without running its phases, for a host that runs them itself with <see cref="RunPhase"/>,
    /// interleaved with its own work: hands-off from other threads join their phases, <see cref="FrameCount"/> goes up
    /// by one, loop time advances, and the delays that fall due are queued for their phases. Then call
    /// <see cref="RunPhase"/> for each phase, in order, before beginning the next frame. A host may run a phase several
    /// times (<see cref="FixedUpdate"/> for several physics steps) or not at all (a frame with no physics step, or every
    /// frame while paused): what waits for a phase stays queued for its next run, so each await resumes at the phase's
    /// first run at or after the frame its rule names, once, first queued first run.
    /// </summary>
    /// <param name="deltaTime">How far loop time moves this frame (unscaled).</param>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="deltaTime"/> is negative, or would take loop time
    /// (scaled by <see cref="TimeScale"/>, or unscaled) past about 29,000 years; nothing changes then.</exception>
    /// <exception cref="InvalidOperationException">Called from inside a frame, while another thread runs the loop, or while <see cref="Run"/> runs it.</exception>
    public void BeginFrame(TimeSpan deltaTime)
    {
        ValidateDelta(deltaTime, nameof(deltaTime));
        long scaledTicks = EnterFrame(deltaTime.Ticks);
        try
        {
            BeginFrameCore(deltaTime.Ticks, scaledTicks);
        }
        finally
        {
            Exit();
        }
    }

    /// <summary>
    /// Runs one phase of the current frame on the calling thread: the continuations queued for it, first queued first
    /// run. Those it queues to itself wait for its next run. A host may call it more than once in a frame (several physics
    /// steps of FixedUpdate): each run takes what was queued for it since the previous one, except NextFrame
    /// continuations awaited in this frame, which wait for the phase's first run in the next frame.
    /// </summary>
    /// <exception cref="ArgumentNullException"><paramref name="phase"/> is null.</exception>
    /// <exception cref="ArgumentException"><paramref name="phase"/> belongs to another loop.</exception>
    /// <exception cref="InvalidOperationException">Called from inside a frame, while another thread runs the loop, or while <see cref="Run"/> runs it.</exception>
    public void RunPhase(FramePhase phase)
    {
        CheckPhase(phase, nameof(phase));
        Enter();
        try
        {
            RunPhaseCore(phase, _frameCount);
        }
        finally
        {
            Exit();
        }
    }

    private void RunPhaseCore(FramePhase phase, long frame)
    {
        Volatile.Write(ref _currentPhase, phase);
        phase.Run(frame); // catches what continuations throw
        Volatile.Write(ref _currentPhase, null);
    }

    private static void ValidateDelta(TimeSpan deltaTime, string paramName)
    {
        if (deltaTime < TimeSpan.Zero)
        {
            throw new ArgumentOutOfRangeException(paramName, deltaTime, "A frame's delta time cannot be negative: loop time only moves forward.");
        }
    }

    internal void CheckPhase(FramePhase phase, string paramName)
    {
        if (phase is null)
        {
            ThrowHelper.ThrowArgumentNull(paramName);
        }
        if (phase.Loop != this)
        {
            throw new ArgumentException("The phase '" + phase.Name + "' belongs to another FrameLoop.", paramName);
        }
    }

    /// <summary>Claims the loop for one step on the calling thread, which becomes the loop thread.</summary>
    private void Enter()
    {
        Claim();
        TakeLoopThread();
    }

    /// <summary>
    /// As <see cref="Enter"/>, for a frame that moves loop time by <paramref name="deltaTicks"/>: the frame is checked to
    /// fit in loop time (<see cref="ScaledDelta"/>) once the loop is claimed, since only the thread inside a step reads
    /// loop time, and before the calling thread becomes the loop thread, so that a refused frame changes nothing (a thread
    /// whose frame was refused took the loop over, and an await of SwitchTo() there resumed at once, on a thread that runs
    /// no frames). Returns the frame's scaled delta.
    /// </summary>
    private long EnterFrame(long deltaTicks)
    {
        Claim();
        long scaledTicks;
        try
        {
            scaledTicks = ScaledDelta(deltaTicks);
        }
        catch
        {
            Exit();
            throw;
        }
        TakeLoopThread();
        return scaledTicks;
    }

    /// <summary>Claims the loop for one step on the calling thread; nothing else changes (<see cref="TakeLoopThread"/> follows).</summary>
    private void Claim()
    {
        int me = Environment.CurrentManagedThreadId;
        int runner = Volatile.Read(ref _runThreadId);
        if (runner != 0 && runner != me)
        {
            ThrowHelper.ThrowInvalidOperation("This FrameLoop is being run by Run(...) on its own thread; RunFrame, BeginFrame and RunPhase cannot be called until it stops.");
        }
        if (Interlocked.CompareExchange(ref _busy, 1, 0) != 0)
        {
            // Inside a step only if this thread is its owner: the loop thread of an earlier step, refused because another
            // thread has just claimed the loop and not yet taken it over, is in no frame (FrameLoopClaimRaceTests).
            ThrowHelper.ThrowInvalidOperation(IsInsideStep
                ? "RunFrame, BeginFrame or RunPhase was called from inside a frame (a continuation running on this loop). A frame cannot run another; await loop.NextFrame() instead."
                : "Another thread is running a frame of this FrameLoop. A loop runs on one thread at a time.");
        }
        // This thread's pools keep what a frame returns past their cap, and the task tracker names this loop, until Exit
        // (which puts back the step of another loop this one's frame was run from inside, if any).
        _outerStep = ThreadSlots.EnterLoopStep(this);
    }

    private object? _outerStep; // written and read by the one thread inside this loop's step

    // Continuations past the nesting bound queued inside a step (DeferNested), first queued first run; the one thread
    // inside the step reads and writes them. A phase runs them as its items (FramePhase.RunItems): right after the item
    // that queued them, before the next. Reused from frame to frame.
    private WorkItem?[] _nested = new WorkItem?[16];
    private int _nestedHead;
    private int _nestedCount;

    /// <summary>
    /// Queues a continuation that <see cref="Continuations"/> would have run past its nesting bound on this thread, inside
    /// this loop's step: a chain of completions deeper than the bound (a relay of promises, an async call chain) that
    /// loop code started. The phase running runs it when the current item returns, before its next item, so the chain
    /// goes on on the loop thread, in this frame and phase, in a fixed order, on a bounded stack; sent to the workers, it
    /// ran there at the same time as the loop. Called only by the thread inside the step.
    /// </summary>
    internal void DeferNested(WorkItem item)
    {
        int tail = _nestedHead + _nestedCount;
        if (tail == _nested.Length)
        {
            if (_nestedHead > 0)
            {
                Array.Copy(_nested, _nestedHead, _nested, 0, _nestedCount);
                Array.Clear(_nested, _nestedCount, _nestedHead);
            }
            else
            {
                Array.Resize(ref _nested, _nested.Length * 2);
            }
            _nestedHead = 0;
            tail = _nestedCount;
        }
        _nested[tail] = item;
        _nestedCount++;
    }

    /// <summary>Continuations queued by <see cref="DeferNested"/> and not yet run (the thread inside the step only).</summary>
    internal bool HasNested => _nestedCount != 0;

    /// <summary>The first continuation queued by <see cref="DeferNested"/>; call only when <see cref="HasNested"/>.</summary>
    internal WorkItem TakeNested()
    {
        int head = _nestedHead;
        WorkItem item = _nested[head]!;
        _nested[head] = null;
        if (--_nestedCount == 0)
        {
            _nestedHead = 0;
        }
        else
        {
            _nestedHead = head + 1;
        }
        return item;
    }

    /// <summary>
    /// The loop whose step (a frame, BeginFrame or RunPhase) the calling thread is inside, or null: the task tracker
    /// records it for a method that suspends there (<see cref="TrackedTask.Loop"/>).
    /// </summary>
    internal static FrameLoop? InStepOnThisThread => (FrameLoop?)ThreadSlots.LoopInStep;

    /// <summary>
    /// The thread that has claimed the loop becomes the thread inside the step, and the loop thread. A takeover waits for
    /// the takeover lock; if that wait is interrupted (<see cref="Thread.Interrupt"/>), the claim is given back, so the
    /// loop is left free rather than refusing every later frame as "another thread is running a frame".
    /// </summary>
    private void TakeLoopThread()
    {
        Thread current = Thread.CurrentThread;
        Volatile.Write(ref _owner, current);
        if (Volatile.Read(ref _loopThread) != current)
        {
            try
            {
                SetLoopThread(current);
            }
            catch
            {
                Exit();
                throw;
            }
        }
    }

    /// <summary>True on the thread inside a step of the loop (a frame, BeginFrame or RunPhase): no other can take it then.</summary>
    internal bool IsInsideStep => Thread.CurrentThread == Volatile.Read(ref _owner);

    private void Exit()
    {
        ThreadSlots.ExitLoopStep(_outerStep);
        _outerStep = null;
        Volatile.Write(ref _owner, null);
        Volatile.Write(ref _busy, 0);
    }

    /// <summary>Changes the loop thread, waiting for an add the previous loop thread has in progress between its steps.</summary>
    private void SetLoopThread(Thread? thread)
    {
        lock (_takeoverLock)
        {
            Volatile.Write(ref _loopThread, thread);
        }
    }

    /// <summary>
    /// The furthest loop time (scaled or unscaled) a frame may reach, about 29,000 years: short of TimeSpan.MaxValue by
    /// <see cref="TimerWheel.MaxDelay"/> and a millisecond, so that every delay's deadline still fits in a long.
    /// </summary>
    private static readonly long s_maxLoopTicks = TimeSpan.MaxValue.Ticks - TimerWheel.MaxDelay.Ticks - TimeSpan.TicksPerMillisecond;

    /// <summary>
    /// The scaled step of a frame of <paramref name="deltaTicks"/>, checked before anything changes: a frame that would
    /// take loop time past its range is refused (it wrapped to a large negative time, stranding or firing early the
    /// delays in the loop's wheels). Called by the thread that has claimed the loop, which alone moves loop time.
    /// </summary>
    /// <exception cref="ArgumentOutOfRangeException">The frame would take loop time past its range.</exception>
    private long ScaledDelta(long deltaTicks)
    {
        double scale = Volatile.Read(ref _timeScale);
        double product = deltaTicks * scale;
        long scaledTicks = scale == 1.0 ? deltaTicks : product < s_maxLoopTicks ? (long)Math.Round(product) : long.MaxValue;
        if (deltaTicks > s_maxLoopTicks - _unscaledTimeTicks || scaledTicks > s_maxLoopTicks - _timeTicks)
        {
            throw new ArgumentOutOfRangeException("deltaTime", TimeSpan.FromTicks(deltaTicks),
                "This frame would take loop time (" + TimeSpan.FromTicks(_unscaledTimeTicks) + " unscaled, " + TimeSpan.FromTicks(_timeTicks) +
                " scaled, time scale " + scale + ") past " + TimeSpan.FromTicks(s_maxLoopTicks) + ", the furthest it can go. Use a smaller delta or time scale.");
        }
        return scaledTicks;
    }

    /// <summary>Begins a frame of <paramref name="deltaTicks"/>, <paramref name="scaledTicks"/> scaled (<see cref="ScaledDelta"/>).</summary>
    private void BeginFrameCore(long deltaTicks, long scaledTicks)
    {
        // Hand-offs first, as if they had been made on the loop thread just before this frame.
        _inbox.Drain();

        long frame = _frameCount + 1;
        long unscaled = _unscaledTimeTicks + deltaTicks;
        long scaled = _timeTicks + scaledTicks;
        // The clocks the delays' wheels read move first, then the frame count and times everyone else reads: a thread
        // that has seen frame N (or time t) and starts a delay counts it from N (or t) or later, never from the frame
        // before, so it never resumes early.
        _frameClock.Set(frame * TimeSpan.TicksPerMillisecond);
        _unscaledClock.Set(unscaled);
        _scaledClock.Set(scaled);
        Volatile.Write(ref _frameCount, frame);
        DetachFrameBucket(frame); // before anything that can fail: a failed begin leaves its waits to the next frame
#if DEBUG
        TestHookFramePublished?.Invoke(this);
#endif
        Volatile.Write(ref _unscaledDeltaTicks, deltaTicks);
        Volatile.Write(ref _deltaTicks, scaledTicks);
        Volatile.Write(ref _unscaledTimeTicks, unscaled);
        Volatile.Write(ref _timeTicks, scaled);

        // The delays held for their exact deadline first, then each wheel's pass, if something on it is due (or it asked
        // for one), then the frame ring's bucket for this frame; expired waits land in _expired, and QueueExpired puts
        // them all in start order.
        ReleaseDue();
        _frameClock.FireIfDue();
        _unscaledClock.FireIfDue();
        _scaledClock.FireIfDue();
        TakeFrameBucket();
        QueueExpired();
    }

#if DEBUG
    /// <summary>Tests only: runs in BeginFrame once the new frame's count is published, before the wheels' passes.</summary>
    internal static Action<FrameLoop>? TestHookFramePublished;
#endif

    /// <summary>
    /// An expired timed wait. From a wheel's pass (inside a step of the loop, on the thread running it) it joins its
    /// phase after the pass, in start order. From any other thread it is a delay whose timer fell due before its waiter
    /// listened to it (the thread starting it was preempted between the two while a frame's pass fired the timer), and
    /// it goes to its phase as any wait from another thread does: only the thread inside a step may touch the expired
    /// list, which that thread's pass is filling and emptying meanwhile.
    /// </summary>
    internal void AddExpired(FrameWaiter waiter)
    {
        if (waiter.DueClock is { } clock && waiter.DueTicks > clock.GetTimestamp())
        {
            // Its timer fell due on the millisecond before its deadline, in a frame that began short of the deadline.
            HoldUntilDue(waiter);
            return;
        }
        if (!IsInsideStep)
        {
            Schedule(waiter, waiter.Phase!, FrameAwaitKind.Yield);
            return;
        }
        AppendExpired(waiter);
    }

    /// <summary>Adds a wait to this frame's expired list (the thread inside the step only).</summary>
    private void AppendExpired(FrameWaiter waiter)
    {
        int n = _expiredCount;
        if (n == _expired.Length)
        {
            Array.Resize(ref _expired, n * 2);
            Array.Resize(ref _expiredOrder, n * 2);
        }
        _expired[n] = waiter;
        _expiredOrder[n] = waiter.Sequence;
        _expiredCount = n + 1;
    }

    /// <summary>
    /// Holds a delay in loop time, holding its queue hold, until a frame begins at or past its exact deadline
    /// (<see cref="FrameWaiter.DueTicks"/>): <see cref="ReleaseDue"/> then moves it to the expired list. Any thread.
    /// </summary>
    internal void HoldUntilDue(FrameWaiter waiter)
    {
        lock (_dueLock)
        {
            int n = _notYetDueCount;
            if (n == _notYetDue.Length)
            {
                Array.Resize(ref _notYetDue, n * 2);
            }
            _notYetDue[n] = waiter;
            _notYetDueCount = n + 1;
        }
    }

    /// <summary>
    /// Moves the held delays whose deadline this frame's loop time has reached, and those completed meanwhile (cancelled:
    /// their phase lets go of them), to the expired list; keeps the rest, in their order. The thread beginning a frame,
    /// after the clocks have moved.
    /// </summary>
    private void ReleaseDue()
    {
        if (Volatile.Read(ref _notYetDueCount) == 0)
        {
            return;
        }
        lock (_dueLock)
        {
            FrameWaiter?[] held = _notYetDue;
            int kept = 0;
            for (int i = 0; i < _notYetDueCount; i++)
            {
                FrameWaiter w = held[i]!;
                held[i] = null;
                if (w.IsDone || w.DueTicks <= w.DueClock!.GetTimestamp())
                {
                    AppendExpired(w);
                }
                else
                {
                    held[kept++] = w;
                }
            }
            _notYetDueCount = kept;
        }
    }

    /// <summary>Queues the frame's expired waits for their phases, in the order they were started.</summary>
    /// <remarks>
    /// A wheel fires in deadline order, and the timers due at the same millisecond in the order they were linked, which
    /// for delays started on the loop thread is their start order; three wheels fire one after another. So the list is a
    /// few runs already in start order (about one per millisecond the frame covers, per wheel): they are found by
    /// comparing sequences (so the result is in start order whatever the wheels did), and merged with a binary heap of the
    /// runs, O(n log r) for r runs instead of a sort's O(n log n), and each wait is read and stored once. Stop 36 measured
    /// the sort (Array.Sort of the sequences and the waits) at about a fifth of a frame's expiry cost with 1,000 delays.
    /// </remarks>
    private void QueueExpired()
    {
        int n = _expiredCount;
        if (n == 0)
        {
            return;
        }
        FrameWaiter?[] expired = _expired;
        long[] order = _expiredOrder;
        int runs = FindRuns(order, n);
        if (runs == 1)
        {
            for (int i = 0; i < n; i++)
            {
                FrameWaiter w = expired[i]!;
                expired[i] = null;
                w.Phase!.AddBack(w);
            }
        }
        else
        {
            MergeRuns(expired, order, runs);
        }
        _expiredCount = 0;
    }

    /// <summary>Splits <paramref name="order"/>[0..n) into ascending runs (<see cref="_runNext"/>, <see cref="_runEnd"/>), and returns how many.</summary>
    private int FindRuns(long[] order, int n)
    {
        int runs = 0;
        int start = 0;
        for (int i = 1; i <= n; i++)
        {
            if (i == n || order[i] < order[i - 1])
            {
                if (runs == _runNext.Length)
                {
                    Array.Resize(ref _runNext, runs * 2);
                    Array.Resize(ref _runEnd, runs * 2);
                    Array.Resize(ref _runHeap, runs * 2);
                }
                _runNext[runs] = start;
                _runEnd[runs] = i;
                runs++;
                start = i;
            }
        }
        return runs;
    }

    /// <summary>
    /// Queues the waits of <paramref name="runs"/> ascending runs in sequence order: a k-way merge with a binary min-heap
    /// of the runs keyed by each run's next sequence (sequences are distinct: one counter hands them out).
    /// </summary>
    private void MergeRuns(FrameWaiter?[] expired, long[] order, int runs)
    {
        int[] next = _runNext;
        int[] end = _runEnd;
        int[] heap = _runHeap;
        for (int r = 0; r < runs; r++)
        {
            heap[r] = r;
        }
        int size = runs;
        for (int i = size / 2 - 1; i >= 0; i--)
        {
            SiftDown(heap, size, i, next, order);
        }
        while (size > 0)
        {
            int run = heap[0];
            int at = next[run];
            FrameWaiter w = expired[at]!;
            expired[at] = null;
            w.Phase!.AddBack(w);
            if (at + 1 == end[run])
            {
                heap[0] = heap[--size]; // the run is done
                if (size == 0)
                {
                    break;
                }
            }
            else
            {
                next[run] = at + 1;
            }
            SiftDown(heap, size, 0, next, order);
        }
    }

    /// <summary>Restores the heap order below <paramref name="i"/>: each run's key is the sequence of its next entry.</summary>
    private static void SiftDown(int[] heap, int size, int i, int[] next, long[] order)
    {
        int run = heap[i];
        long key = order[next[run]];
        while (true)
        {
            int child = 2 * i + 1;
            if (child >= size)
            {
                break;
            }
            int c = heap[child];
            long childKey = order[next[c]];
            if (child + 1 < size)
            {
                int d = heap[child + 1];
                long dKey = order[next[d]];
                if (dKey < childKey)
                {
                    child++;
                    c = d;
                    childKey = dKey;
                }
            }
            if (key < childKey)
            {
                break;
            }
            heap[i] = c;
            i = child;
        }
        heap[i] = run;
    }

    /// <summary>
    /// Queues a continuation (a state-machine box, a delegate's work item, or a waiter holding its queue hold) for
    /// <paramref name="phase"/>: directly when on the loop thread, else through the hand-off inbox.
    /// </summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    internal void Schedule(WorkItem item, FramePhase phase, FrameAwaitKind kind)
    {
        if (IsInsideStep)
        {
            // Inside this thread's own frame or phase: no other thread can take the loop until it exits.
            AddToPhase(item, phase, kind);
            return;
        }
        ScheduleOutsideAStep(item, phase, kind);
    }

    /// <summary>Schedule from a thread that is not inside a step of the loop: the loop thread between steps, or another.</summary>
    [MethodImpl(MethodImplOptions.NoInlining)]
    private void ScheduleOutsideAStep(WorkItem item, FramePhase phase, FrameAwaitKind kind)
    {
        Thread current = Thread.CurrentThread;
        if (current == Volatile.Read(ref _loopThread))
        {
            // The loop thread between its steps: another thread may be taking the loop over right now.
            lock (_takeoverLock)
            {
                if (current == _loopThread)
                {
                    AddToPhase(item, phase, kind);
                    return;
                }
            }
        }
        _inbox.Post(item, phase);
    }

    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    private void AddToPhase(WorkItem item, FramePhase phase, FrameAwaitKind kind)
    {
        if (kind == FrameAwaitKind.NextFrame)
        {
            // The phase's first run in the next frame: not a run still to come in this one (the phase may be still
            // to run, or a host may run it more than once a frame).
            phase.AddNextFrame(item);
        }
        else
        {
            phase.AddBack(item);
        }
    }

    /// <summary>The wheel for timed waits of the given kind, created on first use (any thread).</summary>
    internal TimerWheel Wheel(LoopClock clock, ref TimerWheel? field)
    {
        TimerWheel? wheel = Volatile.Read(ref field);
        if (wheel is not null)
        {
            return wheel;
        }
        lock (_wheelLock)
        {
            // One wheel per clock: a clock has exactly one timer, its wheel's driver.
            wheel = field ??= new TimerWheel(clock); // the LoopClock overload: the wheel counts from loop time zero
        }
        return wheel;
    }

    internal long NextSequence() => Interlocked.Increment(ref _sequence);

    /// <summary>
    /// Runs the loop with a fixed timestep on a dedicated thread (named "Spindle FrameLoop"), which becomes the loop
    /// thread, until <paramref name="cancellationToken"/> is cancelled. Each frame advances loop time by
    /// 1 / <paramref name="framesPerSecond"/>, rounded to the nearest <see cref="TimeSpan"/> tick (100 ns); frames start
    /// on the exact schedule in real time, and a loop that falls more than a few frames behind (a frame took too long)
    /// drops the backlog instead of running frames back to back. A rate the thread cannot keep up with runs frames back to
    /// back, keeping one core busy. The thread runs under the loop's <see cref="SynchronizationContext"/>, so a BCL await in
    /// loop code resumes on the loop.
    /// </summary>
    /// <param name="framesPerSecond">Frames per second: the timestep's inverse. At most 10,000,000 (a 100 ns timestep).</param>
    /// <param name="cancellationToken">Stops the loop after the frame in progress.</param>
    /// <returns>
    /// A task that completes when the loop has stopped (successfully: stopping is the normal end), or faults if the loop
    /// itself failed. Continuations still waiting stay queued; <see cref="RunFrame()"/> or a new Run carries on with them.
    /// Await it off the loop: loop code runs under the loop's <see cref="SynchronizationContext"/>, so an <c>await</c> of
    /// this task there resumes through the loop that has just stopped, and never does unless the loop runs again (a
    /// match's code that cancels its loop from inside it: <c>await runTask.ConfigureAwait(false)</c>, or await it on the
    /// host's thread).
    /// </returns>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="framesPerSecond"/> is not a positive finite number, is
    /// so small that one timestep would not fit in loop time, or is above 10,000,000, so that one timestep would be shorter
    /// than a <see cref="TimeSpan"/> tick.</exception>
    /// <exception cref="InvalidOperationException">The loop is already being run by Run.</exception>
    public Task Run(double framesPerSecond, CancellationToken cancellationToken)
    {
        if (!(framesPerSecond > 0) || double.IsInfinity(framesPerSecond))
        {
            throw new ArgumentOutOfRangeException(nameof(framesPerSecond), framesPerSecond, "Frames per second must be a positive finite number.");
        }
        if (TimeSpan.TicksPerSecond / framesPerSecond > s_maxLoopTicks)
        {
            throw new ArgumentOutOfRangeException(nameof(framesPerSecond), framesPerSecond,
                "Frames per second is so low that one frame's timestep would not fit in loop time (about 29,000 years).");
        }
        if (framesPerSecond > TimeSpan.TicksPerSecond)
        {
            // A timestep under a tick was taken as one tick: loop time moved up to many times further per frame than asked.
            throw new ArgumentOutOfRangeException(nameof(framesPerSecond), framesPerSecond,
                "Frames per second is above 10,000,000: one frame's timestep would be shorter than a TimeSpan tick (100 ns), the least loop time can move. Use 10,000,000 or fewer.");
        }
        if (Interlocked.CompareExchange(ref _runThreadId, -1, 0) != 0)
        {
            ThrowHelper.ThrowInvalidOperation("This FrameLoop is already being run by Run(...): a loop has one Run at a time. Cancel the running one's token and await its task before calling Run again.");
        }
        var done = new TaskCompletionSource<bool>(TaskCreationOptions.RunContinuationsAsynchronously);
        var thread = new Thread(() => RunThread(framesPerSecond, cancellationToken, done))
        {
            IsBackground = true,
            Name = Name is null ? "Spindle FrameLoop" : "Spindle FrameLoop: " + Name,
        };
        // The loop thread starts with no AsyncLocal values of the caller's; each continuation brings its own.
        ContextFlow.StartWithoutContext(thread);
        return done.Task;
    }

    private void RunThread(double framesPerSecond, CancellationToken cancellationToken, TaskCompletionSource<bool> done)
    {
        const int MaxBacklogFrames = 5;
        try
        {
            Volatile.Write(ref _runThreadId, Environment.CurrentManagedThreadId);
            // The loop's own thread runs under the loop's context, as an engine's main thread runs under the engine's: a
            // BCL await in loop code resumes on the loop.
            SynchronizationContext.SetSynchronizationContext(SynchronizationContext);
            // Not the loop thread yet: its first frame's Enter makes it so. A frame another thread is still running
            // refuses that Enter (and so this Run), and must not lose the loop thread to a Run that never ran a frame.
            TimeProvider clock = TimeProvider.System;
            var step = TimeSpan.FromTicks((long)Math.Round(TimeSpan.TicksPerSecond / framesPerSecond)); // at least a tick (checked above)
            double timestampsPerFrame = clock.TimestampFrequency / framesPerSecond;
            // No spinning before it blocks: every wait here is a millisecond or more, and the default spin yields the
            // processor a few dozen times first, which under contention costs a time slice each (a 100 fps loop beside two
            // busy threads ran 14 frames while a thread sleeping 10 ms at a time woke 68 times; Wait(10) on a spinning
            // event came back 55 times a second there, on one that does not spin 98, as Thread.Sleep(10) did).
            using var wake = new ManualResetEventSlim(false, spinCount: 0);
            using CancellationTokenRegistration registration = cancellationToken.Register(static o => ((ManualResetEventSlim)o!).Set(), wake);
            double next = clock.GetTimestamp();
            while (!cancellationToken.IsCancellationRequested)
            {
                RunFrame(step);
                next += timestampsPerFrame;
                long now = clock.GetTimestamp();
                if (now - next > MaxBacklogFrames * timestampsPerFrame)
                {
                    next = now; // far behind: start the schedule again from now rather than rush
                }
                double wait = next - now;
                if (wait > 0)
                {
                    // Waits are whole milliseconds, rounded up; the schedule is absolute, so the rate stays exact on average.
                    int ms = (int)Math.Min(int.MaxValue, Math.Ceiling(wait * 1000.0 / clock.TimestampFrequency)); // no wrap on net8.0
                    wake.Wait(ms);
                }
            }
            Stopped();
            done.TrySetResult(true);
        }
        catch (Exception ex)
        {
            Stopped();
            done.TrySetException(ex);
        }

        void Stopped()
        {
            // The thread is about to end: it is no longer the loop thread, so awaits made anywhere go through the hand-off
            // until a thread runs the loop again.
            lock (_takeoverLock)
            {
                Interlocked.CompareExchange(ref _loopThread, null, Thread.CurrentThread);
            }
            Volatile.Write(ref _runThreadId, 0);
        }
    }
}

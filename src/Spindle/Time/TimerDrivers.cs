using System;
using System.Threading;

namespace SpindleLib;

/// <summary>What makes a <see cref="TimerWheel"/> run its passes: a thread of its own, or a provider's timer.</summary>
internal abstract class TimerDriver : IDisposable
{
    /// <summary>True when expired timers' continuations go to the workers in batches, false to run them on the driving thread.</summary>
    public abstract bool DispatchesContinuations { get; }

    /// <summary>Asks for a pass soon (a timer earlier than the planned wake-up, or a cancellation to clean up).</summary>
    public abstract void Kick();

    /// <summary>
    /// Asks for a pass that releases cancelled timers (the first cancellation queued to the main shard since its last
    /// snapshot). A release moves no deadline, so a driver may gather the cancellations of a short while into one pass;
    /// by default it is a <see cref="Kick"/>.
    /// </summary>
    public virtual void KickToRelease() => Kick();

    /// <summary>
    /// <see cref="SpindlePool.Trim"/>: a driver with a thread of its own wakes it for a pass, after which the thread empties
    /// its pool stacks; one that has not started its thread, or has none, does nothing.
    /// </summary>
    public virtual void KickIfStarted()
    {
    }

    /// <summary>
    /// True when the owner's pass need not look at the cancel inbox again before it returns (see
    /// <see cref="TimerWheel"/>'s DriveAndPlan): a cancellation queued during the pass has kicked the driver, and the
    /// driver is sure to run another pass for it.
    /// </summary>
    public virtual bool ServesReleaseKicksItself => false;

    /// <summary>Plans the next pass for tick <paramref name="next"/> (<see cref="long.MaxValue"/>: none). Called by the owner.</summary>
    public abstract void Arm(long next);

    public abstract void Dispose();
}

/// <summary>
/// Drives a wheel on the system clock with one background thread that sleeps until the next deadline. The thread
/// starts on the first kick, so a wheel that is never used costs no thread. It runs no user code: expired timers'
/// continuations go to the workers in batches. A thread that has had nothing planned for <see cref="IdleExitMs"/> ends
/// (except <see cref="TimerWheel.Default"/>'s), and the next kick starts another: the thread is what roots its wheel, so a wheel that a session dropped without
/// disposing it (an editor's play session, a test) is collected once idle, with its thread, instead of keeping both for
/// the life of the process, as a BCL timer that is not scheduled is not rooted (a user's review: 200 play sessions
/// left 200 threads). A wheel with timers pending keeps its thread, and so stays alive until they fire, as a
/// scheduled BCL timer does.
/// </summary>
internal sealed class ThreadTimerDriver : TimerDriver
{
    private const long LongestWaitMs = 3_600_000;

    /// <summary>
    /// How long the thread waits with nothing planned (no timer in the wheel) before it ends. Long enough that a wheel used
    /// now and then keeps one thread, rather than one per use; tests lower it.
    /// </summary>
    internal static int IdleExitMs = 10_000;

    /// <summary>
    /// How long the thread waits, after a kick to release cancelled timers, before its pass: the cancellations queued
    /// meanwhile join that pass (see <see cref="KickToRelease"/>).
    /// </summary>
    internal const int ReleaseLagMs = 1;

    private readonly TimerWheel _wheel;
    private readonly ManualResetEventSlim _wake = new(initialState: false, spinCount: 1);
    private long _planned = long.MaxValue;
    // Invariant: 1 while a thread runs Loop and has not given the wheel up (see TryEndIdle); at most one such thread. A
    // kick sets the event, then reads this (starting a thread if 0); an idle thread clears this, then reads the event
    // (carrying on if a kick set it). Both sides write, then read the other's word (a store-load pair, each write
    // interlocked), so a kick that comes as the thread gives up is never lost: either the kick sees 0 and starts a
    // thread, or the thread sees the event set and takes the wheel back (a CAS, which only one of the two can win).
    private int _started;
    private int _threads; // threads in Loop, for tests (a thread that lost the CAS above is still counted until it returns)
    private volatile bool _stopped;

    // Invariant: 1 from a release kick until the thread, about to run the pass that serves it, takes it back (an exchange,
    // a full fence, before that pass takes the cancel inbox). A canceller that reads 1 kicks nothing: its push came before
    // the take, so the pass sees its node. Each side writes, then reads the other's word (the canceller pushes, then reads
    // this; the thread clears this, then takes the inbox), the store-load pair of Insert's _wakeAt.
    private int _releaseKicked;

    // False for TimerWheel.Default's driver: that wheel lives as long as the process, so its thread stays, and a delay
    // started off the workers after a quiet spell does not pay for starting a thread.
    private readonly bool _endsWhenIdle;

    public ThreadTimerDriver(TimerWheel wheel, bool endsWhenIdle)
    {
        _wheel = wheel;
        _endsWhenIdle = endsWhenIdle;
    }

    public override bool DispatchesContinuations => true;

    public override bool ServesReleaseKicksItself => true;

    /// <summary>
    /// A cancellation's release wakes the thread at most once per <see cref="ReleaseLagMs"/>: the thread waits that long
    /// before the pass (less if a timer is due sooner; a kick for an earlier timer ends the wait at once), and every
    /// cancellation queued meanwhile finds the cancel inbox non-empty and kicks nothing. Before, the thread emptied the
    /// inbox as soon as it woke, so each cancellation of a burst (one token cancelling many delays) found it empty and
    /// woke the thread again: a futex wake and a pass per delay, a fifth of the cancelling thread's time and a busy timer
    /// thread (a user's review: 500,000 delays cancelled by one token).
    /// </summary>
    public override void KickToRelease()
    {
        if (Volatile.Read(ref _releaseKicked) == 0 && Interlocked.Exchange(ref _releaseKicked, 1) == 0)
        {
            Kick();
        }
    }

    public override void KickIfStarted()
    {
        if (Volatile.Read(ref _started) != 0)
        {
            Kick();
        }
    }

    public override void Kick()
    {
        // The event first, then _started (see _started's invariant): a thread giving the wheel up meanwhile sees the event.
        if (!_wake.IsSet)
        {
            _wake.Set();
        }
        if (Volatile.Read(ref _started) == 0 && Interlocked.CompareExchange(ref _started, 1, 0) == 0)
        {
            StartThread();
        }
    }

    /// <summary>
    /// Starts the thread, for the kick that claimed the wheel for it. A start that throws (out of memory, past a thread
    /// limit) gives the claim back before the exception goes on (the wheel reports it and runs a pass on the kicking
    /// thread, see TimerWheel.Kick): a claim kept with no thread behind it made every later kick start nothing, and the
    /// wheel's timers never fired again (found by the review of stop 42: a created wheel now starts a thread after every
    /// quiet spell, not once). The next try is that pass's <see cref="Arm"/>, or the next kick.
    /// </summary>
    private void StartThread()
    {
        try
        {
#if DEBUG
            TestHookStartingThread?.Invoke(this);
#endif
            Thread thread = new(static o => ((ThreadTimerDriver)o!).Loop(), maxStackSize: 256 * 1024)
            {
                IsBackground = true,
                Name = "Spindle Timer",
            };
            ContextFlow.StartWithoutContext(thread, this);
        }
        catch
        {
            Volatile.Write(ref _started, 0);
            throw;
        }
    }

    /// <summary>Threads running this driver's loop (tests: 0 once an idle thread has ended).</summary>
    internal int ThreadCount => Volatile.Read(ref _threads);

    /// <summary>
    /// Plans the thread's next pass. Called by the owner of the wheel's pass: the thread itself, which holds the claim
    /// (<see cref="_started"/>), except after a start that failed, when the kicking thread runs the pass (TimerWheel.Kick):
    /// with a timer planned and no thread, that pass tries to start one again. If that throws too, the wheel forgets its
    /// plan (TimerWheel.OnDriverFailed), so the next timer kicks, and tries again.
    /// </summary>
    public override void Arm(long next)
    {
        _planned = next;
        if (next != long.MaxValue && Volatile.Read(ref _started) == 0)
        {
            Kick();
        }
    }

    private void Loop()
    {
        Interlocked.Increment(ref _threads);
        try
        {
            Run();
        }
        finally
        {
            Interlocked.Decrement(ref _threads);
        }
    }

    private void Run()
    {
        ThreadSlots.AdoptTrimRequests();
        while (!_stopped)
        {
#if DEBUG
            TestHookWoken?.Invoke(_wheel);
#endif
            // Reset before the pass, so a kick during the pass is not lost: the wait below then returns at once. Invariant
            // (a store-load pair with Kick, both sides fenced by the event's interlocked state): a kick whose IsSet read
            // missed this Reset pushed before the pass below drains the inbox, so the pass sees its timer.
            _wake.Reset();
            if (Volatile.Read(ref _releaseKicked) != 0)
            {
                LagForReleases();
            }
            _wheel.RequestDrive();
            // The thread rents timer batches (a rent that finds its stack empty takes the whole shared stack) and no user
            // code runs here to trim them: SpindlePool.Trim asks, and kicks it (KickIfStarted).
            ThreadSlots.TrimIfRequested();
            long next = _planned;
            if (next == long.MaxValue)
            {
                if (!_wake.Wait(_endsWhenIdle ? IdleExitMs : Timeout.Infinite) && TryEndIdle())
                {
                    return;
                }
                continue;
            }
            TimeSpan wait = _wheel.TimeUntil(next);
            if (wait > TimeSpan.Zero)
            {
                // A wait has whole milliseconds: round up, or the thread would wake early and spin. Far deadlines are
                // approached in steps of at most an hour (a wait takes at most int.MaxValue ms).
                long ms = (wait.Ticks + TimeSpan.TicksPerMillisecond - 1) / TimeSpan.TicksPerMillisecond;
                _wake.Wait((int)Math.Min(ms, LongestWaitMs));
            }
        }
    }

    /// <summary>
    /// Called by the thread after <see cref="IdleExitMs"/> with nothing planned and no kick: gives the wheel up (so that
    /// a dropped wheel is not rooted by its thread) and returns true, unless a kick came meanwhile, in which case it takes
    /// the wheel back and returns false, or returns true if that kick has already started another thread.
    /// </summary>
    private bool TryEndIdle()
    {
        Interlocked.Exchange(ref _started, 0);
#if DEBUG
        TestHookGivenUp?.Invoke(this);
#endif
        if (!_wake.IsSet)
        {
            return true; // a later kick sets the event, then reads 0 and starts a thread
        }
        return Interlocked.CompareExchange(ref _started, 1, 0) != 0;
    }

    /// <summary>
    /// Woken to release cancelled timers: waits up to <see cref="ReleaseLagMs"/> (no later than the earliest timer known
    /// to the wheel) so that the cancellations of that while join one pass, then takes the kick back (see
    /// <see cref="_releaseKicked"/>).
    /// </summary>
    /// <remarks>
    /// Bounded by the wheel's wake time (<see cref="TimerWheel.WakeAt"/>), not only by this thread's plan: a timer
    /// inserted after the last pass is in the insert inbox, not in the plan, and its kick may have found the event still
    /// set by the release kick and set nothing, which the Reset before this then cleared; the thread waited a whole tick
    /// with that timer due (found by the review of stop 37, <c>ReleaseLagTests</c>). Invariant: an insert lowers the wake
    /// time (a CAS) before it reads the event; the thread resets the event (an interlocked update) before it reads the wake
    /// time here. So either this read sees the earlier timer and waits no longer than until it, or that insert's read of
    /// the event comes after the Reset, finds it clear, and sets it, which ends the wait at once.
    /// </remarks>
    private void LagForReleases()
    {
        long next = Math.Min(_planned, _wheel.WakeAt);
        TimeSpan untilNext = next == long.MaxValue ? TimeSpan.MaxValue : _wheel.TimeUntil(next);
        bool waits = untilNext >= TimeSpan.FromMilliseconds(ReleaseLagMs);
#if DEBUG
        TestHookLagDecided?.Invoke(_wheel, waits);
#endif
        if (waits)
        {
            _wake.Wait(ReleaseLagMs); // a kick for an earlier timer, or Dispose, ends it at once (and stays set: one more pass)
        }
        Interlocked.Exchange(ref _releaseKicked, 0);
    }

#if DEBUG
    /// <summary>
    /// Tests only: runs on a wheel's timer thread each time round its loop, before it resets its event: a kick made here
    /// finds the event still set by the kick that woke the thread, and sets nothing.
    /// </summary>
    internal static Action<TimerWheel>? TestHookWoken;

    /// <summary>Tests only: runs on a wheel's timer thread when a release kick woke it, with whether it waits before the pass.</summary>
    internal static Action<TimerWheel, bool>? TestHookLagDecided;

    /// <summary>
    /// Tests only: runs on an idle timer thread right after it has given its wheel up, before it looks for a kick that
    /// came meanwhile (<see cref="TryEndIdle"/>).
    /// </summary>
    internal static Action<ThreadTimerDriver>? TestHookGivenUp;

    /// <summary>
    /// Tests only: runs on a kicking thread that has claimed the wheel for a new timer thread, before it starts it: a
    /// hook that throws stands for a start that failed (Thread.Start out of memory, or past a thread limit).
    /// </summary>
    internal static Action<ThreadTimerDriver>? TestHookStartingThread;

    /// <summary>The wheel this driver drives (for the hooks' filters).</summary>
    internal TimerWheel Wheel => _wheel;
#endif

    public override void Dispose()
    {
        _stopped = true;
        _wake.Set();
    }
}

/// <summary>
/// Drives a wheel through a <see cref="TimeProvider"/>'s own timer, re-armed for the next deadline after each pass.
/// Continuations run on the thread the provider fires its timer on (for <see cref="ManualClock"/>, the thread that
/// advances it). Its timers capture no context (<see cref="ContextFlow.CreateTimerWithoutContext"/>): a pass never runs
/// in the context of the code that created the wheel or first needed the probe.
/// </summary>
internal sealed class ProviderTimerDriver : TimerDriver
{
    private readonly TimerWheel _wheel;
    private readonly ITimer _timer;
    private readonly TimeProvider _provider;

    // What the timer was last armed for by a relative Change; see OnFired. A heuristic only: a pass always reads the
    // clock. It packs two numbers of one arming into one word, so that OnFired never pairs one arming's with another's:
    // the wheel's elapsed time (TimeSpan ticks) it was armed for, a whole millisecond, plus the fraction of a millisecond
    // in the due time it was given, which a timer that truncates drops (below TicksPerMillisecond). long.MinValue: never
    // armed so.
    private long _armed = long.MinValue;
    // Set by a kick before its Change, taken by the next fire: a fire that follows a kick is not judged (the common case,
    // on every provider; on a fake clock that does not move between kicks, a probe would stay out, and the passes planned
    // meanwhile be rounded up, until the clock moved). A kick whose flag another fire took is the rare case the probe
    // settles (see Probe).
    private int _kicked;
    // Set once the provider's timers are known to fire early (see Probe): from then on a relative due time is rounded up
    // to a whole millisecond (see Arm).
    private volatile bool _firesEarly;

    // The probe: a second timer of the provider, created on the first fire that looks early (most wheels never need it),
    // and armed by nothing but Probe. Invariant: _probing is not ProbeIdle from the moment a prober claims it (CAS from
    // ProbeIdle) until the probe's own fire has been judged (or its arming failed); only the claimant writes _probeFrom and
    // _probeUntil and changes the probe, so every fire of the probe is the fire of the one arming those two fields
    // describe. ProbeOutRounding only ever follows ProbeOut (a CAS), so a fire that looks early as the verdict comes cannot
    // leave the rounding on with no probe out. Created and disposed under _probeLock (rare, and no Change is made under
    // it: a provider may fire a timer inline inside Change).
    private const int ProbeIdle = 0;
    private const int ProbeOut = 1;
    private const int ProbeOutRounding = 2; // out, and the timer fired early again meanwhile: Arm rounds up until the verdict
    private readonly object _probeLock = new();
    private ITimer? _probe;
    private bool _disposed;
    private int _probing;
    private long _probeFrom;   // the wheel's elapsed time when the probe was armed
    private long _probeUntil;  // and the time its due time (under a millisecond) ends

    // Kicks under way, counted on a ManualClock only (see Kicking).
    private readonly bool _countsKicks;
    private int _kicksUnderWay;

    public ProviderTimerDriver(TimerWheel wheel, TimeProvider provider)
    {
        _wheel = wheel;
        _provider = provider;
        _countsKicks = provider is ManualClock;
        _timer = ContextFlow.CreateTimerWithoutContext(provider, static o => ((ProviderTimerDriver)o!).OnFired(), this);
    }

    public override bool DispatchesContinuations => false;

    // Change calls are atomic with respect to each other, and the owner arms before it re-checks the inbox, so a
    // kick is either seen by that re-check or lands after the arm; it is never overwritten by a later plan. (A kick that
    // lands between two of Arm's Changes is overwritten, but its push came before it, so the re-check sees that.)
    public override void Kick()
    {
        Volatile.Write(ref _kicked, 1);
        if (!_countsKicks)
        {
            _timer.Change(TimeSpan.Zero, Timeout.InfiniteTimeSpan);
            return;
        }
        Interlocked.Increment(ref _kicksUnderWay);
        try
        {
            _timer.Change(TimeSpan.Zero, Timeout.InfiniteTimeSpan); // a ManualClock fires it, and so runs the pass, in here
        }
        finally
        {
            Interlocked.Decrement(ref _kicksUnderWay);
        }
    }

    /// <summary>
    /// True while a kick is under way on some thread, on a <see cref="ManualClock"/> (always false on other providers):
    /// the clock fires a kick inline, so its pass runs inside the kick, and an Advance that began meanwhile waits for it
    /// (<see cref="TimerWheel.SettleForAdvance"/>); a kick that began with the clock's Advance already under way is
    /// deferred to that Advance and ends at once.
    /// </summary>
    public bool Kicking => _countsKicks && Volatile.Read(ref _kicksUnderWay) != 0;

    /// <summary>
    /// The provider's timer fired: runs a pass. A fire before the time the timer was armed for, by no more than the
    /// fraction of a millisecond in its due time, may be a timer that truncates due times to whole milliseconds, as
    /// <see cref="System.Threading.Timer"/> does, and so the timer of every provider that does not override
    /// <see cref="TimeProvider.CreateTimer"/>: its pass finds nothing due, and arming it for the fraction of a millisecond
    /// left gave a due time of zero, so it fired again at once, and again, until the clock reached the tick (a busy loop of
    /// up to a millisecond per deadline; for ever on a clock that only moves when told to). Such a fire arms the probe (see
    /// <see cref="Probe"/>), and once that confirms it, <see cref="Arm"/> rounds up.
    /// </summary>
    /// <remarks>
    /// <para>Truncation explains a fire no earlier than the due time's whole milliseconds after the arming. A fire earlier
    /// still is the clock stepping back while the timer was armed (a provider whose timestamp is not monotonic), not the
    /// timer: it used to count as an early fire too, and from then on every relative due time was rounded up, for good, so
    /// a delay started at a fraction of a millisecond fired up to a millisecond past its deadline, and a whole step past
    /// it on a clock advanced in coarse steps (found by the review of the defects left alone, <c>BackwardClockTests</c>).</para>
    /// <para>A fire inside that window, with no kick flagged since (a kick sets <see cref="_kicked"/>, the next fire takes
    /// it, and a fire that takes it is not judged), used to be taken as proof. But a fire cannot be matched with the change
    /// that caused it: a kick's fire could land after a later arming
    /// with its flag taken by another fire (the timer's own, late, that ran while the kick had not yet changed the timer,
    /// or while the kick's fire, already dispatched to another thread, had not yet run), whose pass had armed the timer for
    /// less than a millisecond; it was taken for truncation, for good (found by a review, <c>KickTakenForTruncationTests</c>).
    /// Counting kicks in flight does not close the second order (the kick has returned before its fire runs), nor asking
    /// the next fire for a second opinion (two kicks in the window give two such fires in a row), and a step back smaller
    /// than the fraction looked like truncation too. The probe asks the provider directly, on a timer that nothing else
    /// changes.</para>
    /// </remarks>
    private void OnFired()
    {
#if DEBUG
        TestHookFired?.Invoke(_wheel);
#endif
        if (!_firesEarly && Interlocked.Exchange(ref _kicked, 0) == 0)
        {
            try
            {
                long armed = Volatile.Read(ref _armed);
                if (armed != long.MinValue)
                {
                    long fraction = armed % TimeSpan.TicksPerMillisecond;
                    long armedFor = armed - fraction;
                    long elapsed = _wheel.Elapsed();
                    if (elapsed < armedFor && elapsed >= armedFor - fraction && !Probe(elapsed, armedFor - elapsed))
                    {
                        // Early again while the probe is out: a timer that truncates, spinning (or a second kick's fire).
                        Interlocked.CompareExchange(ref _probing, ProbeOutRounding, ProbeOut);
                    }
                }
            }
            catch (Exception)
            {
                // The provider's clock failed: this runs on its timer's thread, where an exception may end the process. The
                // pass below reads the clock too, and reports the failure (TimerWheel.OnDriverFailed).
            }
        }
        _wheel.RequestDrive();
    }

#if DEBUG
    /// <summary>
    /// Tests only: runs on the thread the provider's timer fires on, before the pass it asks for: on a
    /// <see cref="ManualClock"/>, a kick's fire runs inside the kick (<see cref="Kicking"/> is true here).
    /// </summary>
    internal static Action<TimerWheel>? TestHookFired;
#endif

    /// <summary>
    /// Finds out whether the provider's timers fire early: arms the probe for <paramref name="due"/> (TimeSpan ticks, more
    /// than zero and less than a millisecond) from <paramref name="elapsed"/>, the wheel's time now. A timer that truncates
    /// takes the due time as zero and fires at once, before it ends; any other fires when it ends or later. Does nothing
    /// while a probe is out (returns false: its verdict is coming) or once the driver is disposed.
    /// </summary>
    /// <remarks>
    /// A fire that only looked early (a kick's, a small step back) costs nothing: the pass arms the timer for the fraction
    /// left, which it fires on time. A timer that truncates fires again at once, early again, while the probe is out; from
    /// then until the verdict <see cref="Arm"/> rounds up, or a provider that fires one due timer at a time, the first it
    /// finds, would fire that one again and again and never the probe (two kicks' fires in a row cost the passes planned
    /// in that time up to a millisecond each, once, within the wheel's contract). A provider that truncates pays one probe
    /// and a pass, once. A probe whose fire is late by more than its due time (a loaded machine) finds no truncation: the
    /// next fire that looks early probes again. A clock that steps back while a probe is out, by less than its due time,
    /// still looks like truncation.
    /// </remarks>
    private bool Probe(long elapsed, long due)
    {
        if (Interlocked.CompareExchange(ref _probing, ProbeOut, ProbeIdle) != ProbeIdle)
        {
            return false;
        }
        try
        {
            ITimer? probe = Volatile.Read(ref _probe) ?? CreateProbe();
            if (probe is null)
            {
                Volatile.Write(ref _probing, ProbeIdle);
                return true;
            }
            _probeFrom = elapsed;
            _probeUntil = elapsed + due;
            probe.Change(TimeSpan.FromTicks(due), Timeout.InfiniteTimeSpan); // may fire inline, and judge, before it returns
        }
        catch (Exception ex)
        {
            Volatile.Write(ref _probing, ProbeIdle);
            if (!Volatile.Read(ref _disposed))
            {
                UnobservedExceptions.Report(ex); // the provider's timer failed: nothing else reports it; no verdict
            }
        }
        return true;
    }

    /// <summary>The probe, created on first use; null once the driver is disposed.</summary>
    private ITimer? CreateProbe()
    {
        lock (_probeLock)
        {
            if (_disposed)
            {
                return null;
            }
            if (_probe is null)
            {
                Volatile.Write(ref _probe, ContextFlow.CreateTimerWithoutContext(_provider, static o => ((ProviderTimerDriver)o!).OnProbeFired(), this));
            }
            return _probe;
        }
    }

    /// <summary>The probe fired: before its due time ended (and not before it was armed: a clock that stepped back), the provider's timers fire early.</summary>
    private void OnProbeFired()
    {
        try
        {
            long elapsed = _wheel.Elapsed();
            if (elapsed < _probeUntil && elapsed >= _probeFrom)
            {
                _firesEarly = true;
            }
        }
        catch (Exception)
        {
            // The provider's clock failed (see OnFired): no verdict; a later fire that looks early probes again.
        }
        Volatile.Write(ref _probing, ProbeIdle);
    }

    // How many times Arm arms a relative timer again when the clock moved meanwhile (see there).
    private const int MaxReArms = 3;

    // A relative due time is worked out from a reading of the clock, and the provider counts it from its own now, a
    // moment later: a clock advanced in between (by another thread; the advance found this timer unscheduled, so it fired
    // nothing) made the wheel's next pass late by that advance, and a delay the clock had reached waited for a later one.
    // A ManualClock's timer is armed at the absolute timestamp instead, which no advance can move. Another provider's
    // timer has only the relative Change, so the clock is read again after it: if it moved by a whole tick of the wheel
    // (1 ms) or more, the timer is armed again from the new reading. So the pass is late by less than a tick of clock time
    // moved during the arming, within the wheel's contract (a due timer fires within a tick of its deadline). A real clock
    // moves a few microseconds in that time and is armed once; the cap bounds a clock that moves on every read
    // (FakeTimeProvider.AutoAdvanceAmount). A frame loop's clock is armed at the absolute timestamp too.
    public override void Arm(long next)
    {
        if (next == long.MaxValue)
        {
            _timer.Change(Timeout.InfiniteTimeSpan, Timeout.InfiniteTimeSpan);
            return;
        }
        if (_timer is IAbsoluteTimer absolute)
        {
            absolute.ChangeAt(_wheel.TimestampAt(next));
            return;
        }
        long seen = _wheel.Elapsed();
        for (int rearms = 0; ; rearms++)
        {
            TimeSpan due = TimerWheel.TimeUntil(next, seen);
            if ((_firesEarly || Volatile.Read(ref _probing) == ProbeOutRounding) && due.Ticks % TimeSpan.TicksPerMillisecond != 0)
            {
                // A timer that truncates would take the fraction as zero: a late pass (within the tick) instead of a spin
                // (see Probe for the rounding while a probe is out).
                due = TimeSpan.FromTicks((due.Ticks / TimeSpan.TicksPerMillisecond + 1) * TimeSpan.TicksPerMillisecond);
            }
            // A non-negative whole millisecond, plus a fraction below one, unpacked by OnFired (without the fraction at the
            // very end of a long, which only a ManualClock advanced to its end reaches).
            long armedFor = next * TimeSpan.TicksPerMillisecond;
            long fraction = due.Ticks % TimeSpan.TicksPerMillisecond;
            Volatile.Write(ref _armed, armedFor > long.MaxValue - fraction ? armedFor : armedFor + fraction);
            _timer.Change(due, Timeout.InfiniteTimeSpan);
            if (due == TimeSpan.Zero || rearms == MaxReArms)
            {
                return; // due now: the timer fires at once, and the pass it runs plans again
            }
            long now = _wheel.Elapsed();
            if (now - seen < TimeSpan.TicksPerMillisecond)
            {
                return;
            }
            seen = now;
        }
    }

    public override void Dispose()
    {
        ITimer? probe;
        lock (_probeLock)
        {
            _disposed = true;
            probe = _probe;
        }
        try
        {
            _timer.Dispose();
        }
        finally
        {
            probe?.Dispose();
        }
    }
}

/// <summary>A provider's timer that can be armed at an absolute timestamp of its clock (<see cref="ManualClock"/>'s, a frame loop's <see cref="LoopClock"/>'s).</summary>
internal interface IAbsoluteTimer
{
    /// <summary>
    /// Arms the timer to fire once when its clock reaches <paramref name="dueTimestamp"/>: if it has already, as a due time
    /// of zero fires (at once, on the calling thread, for a <see cref="ManualClock"/>; at the next frame for a frame loop's
    /// clock, which moves only with frames).
    /// </summary>
    void ChangeAt(long dueTimestamp);
}

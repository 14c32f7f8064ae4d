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

    /// <summary>Plans the next pass for tick <paramref name="next"/> (<see cref="long.MaxValue"/>: none). Called by the owner.</summary>
    public abstract void Arm(long next);

    public abstract void Dispose();
}

/// <summary>
/// Drives a wheel on the system clock with one background thread that sleeps until the next deadline. The thread
/// starts on the first kick, so a wheel that is never used costs no thread. It runs no user code: expired timers'
/// continuations go to the workers in batches.
/// </summary>
internal sealed class ThreadTimerDriver : TimerDriver
{
    private const long LongestWaitMs = 3_600_000;

    private readonly TimerWheel _wheel;
    private readonly ManualResetEventSlim _wake = new(initialState: false, spinCount: 1);
    private long _planned = long.MaxValue;
    private int _started;
    private volatile bool _stopped;

    public ThreadTimerDriver(TimerWheel wheel) => _wheel = wheel;

    public override bool DispatchesContinuations => true;

    public override void Kick()
    {
        if (Volatile.Read(ref _started) == 0 && Interlocked.Exchange(ref _started, 1) == 0)
        {
            Thread thread = new(static o => ((ThreadTimerDriver)o!).Loop(), maxStackSize: 256 * 1024)
            {
                IsBackground = true,
                Name = "Spindle Timer",
            };
            ContextFlow.StartWithoutContext(thread, this);
            return;
        }
        if (!_wake.IsSet)
        {
            _wake.Set();
        }
    }

    public override void Arm(long next) => _planned = next;

    private void Loop()
    {
        while (!_stopped)
        {
            // Reset before the pass, so a kick during the pass is not lost: the wait below then returns at once. Invariant
            // (a store-load pair with Kick, both sides fenced by the event's interlocked state): a kick whose IsSet read
            // missed this Reset pushed before the pass below drains the inbox, so the pass sees its timer.
            _wake.Reset();
            _wheel.RequestDrive();
            long next = _planned;
            if (next == long.MaxValue)
            {
                _wake.Wait();
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

    public override void Dispose()
    {
        _stopped = true;
        _wake.Set();
    }
}

/// <summary>
/// Drives a wheel through a <see cref="TimeProvider"/>'s own timer, re-armed for the next deadline after each pass.
/// Continuations run on the thread the provider fires its timer on (for <see cref="ManualClock"/>, the thread that
/// advances it).
/// </summary>
internal sealed class ProviderTimerDriver : TimerDriver
{
    private readonly TimerWheel _wheel;
    private readonly ITimer _timer;

    // What the timer was last armed for by a relative Change, and whether a kick (a due time of zero) may be what fires
    // it next; see OnFired. Heuristics only: a pass always reads the clock. _armed packs two numbers of one arming into
    // one word, so that OnFired never pairs one arming's with another's: the wheel's elapsed time (TimeSpan ticks) it was
    // armed for, a whole millisecond, plus the fraction of a millisecond in the due time it was given, which a timer that
    // truncates drops (below TicksPerMillisecond). long.MinValue: never armed so.
    private long _armed = long.MinValue;
    private int _kicked;
    // Whether the fire judged last (see OnFired) looked early: the first such fire is only a suspicion, confirmed by the
    // fire right after it. Heuristic too: written by every judged fire, which may run on several provider threads at once.
    private volatile bool _lastFiredEarly;
    // Set once the provider's timer has fired before the time it was armed for twice in a row: from then on a relative
    // due time is rounded up to a whole millisecond (see Arm).
    private volatile bool _firesEarly;

    public ProviderTimerDriver(TimerWheel wheel, TimeProvider provider)
    {
        _wheel = wheel;
        _timer = provider.CreateTimer(static o => ((ProviderTimerDriver)o!).OnFired(), this, Timeout.InfiniteTimeSpan, Timeout.InfiniteTimeSpan);
    }

    public override bool DispatchesContinuations => false;

    // Change calls are atomic with respect to each other, and the owner arms before it re-checks the inbox, so a
    // kick is either seen by that re-check or lands after the arm; it is never overwritten by a later plan. (A kick that
    // lands between two of Arm's Changes is overwritten, but its push came before it, so the re-check sees that.)
    public override void Kick()
    {
        Volatile.Write(ref _kicked, 1);
        _timer.Change(TimeSpan.Zero, Timeout.InfiniteTimeSpan);
    }

    /// <summary>
    /// The provider's timer fired: runs a pass. A timer that fires before the time it was armed for, with no kick since,
    /// by no more than the fraction of a millisecond in its due time, twice in a row, is one that truncates due times to
    /// whole milliseconds, as <see cref="System.Threading.Timer"/> does, and so the timer of every provider that does not
    /// override <see cref="TimeProvider.CreateTimer"/>: its pass finds nothing due, and arming it for the fraction of a
    /// millisecond left gave a due time of zero, so it fired again at once, and again, until the clock reached the tick
    /// (a busy loop of up to a millisecond per deadline; for ever on a clock that only moves when told to). Once seen,
    /// <see cref="Arm"/> rounds up.
    /// </summary>
    /// <remarks>
    /// <para>Truncation explains a fire no earlier than the due time's whole milliseconds after the arming. A fire earlier
    /// still is the clock stepping back while the timer was armed (a provider whose timestamp is not monotonic), not the
    /// timer: it used to count as an early fire too, and from then on every relative due time was rounded up, for good, so
    /// a delay started at a fraction of a millisecond fired up to a millisecond past its deadline, and a whole step past
    /// it on a clock advanced in coarse steps (found by the review of the defects left alone, <c>BackwardClockTests</c>).</para>
    /// <para>One early fire is only a suspicion; the fire right after it decides. A fire cannot be matched with the change
    /// that caused it, and a kick's fire can land after a later arming with its flag taken: another fire (the timer's own,
    /// late) took the flag while the kick had not yet changed the timer, or before the kick's fire, already dispatched to
    /// another thread, ran; that fire's pass armed the timer for less than a millisecond, and the kick's fire, inside the
    /// window, was taken for truncation, for good (found by a review, <c>KickTakenForTruncationTests</c>). Counting kicks
    /// in flight cannot close the second order (the kick has returned before its fire runs), and a step back smaller than
    /// the fraction looked like truncation too. Now such a fire's pass arms the timer for the fraction left, unrounded: a
    /// timer that truncates takes it as zero and fires again at once, early again, which confirms it; any other timer
    /// fires on time, and the suspicion is dropped. A provider that truncates pays one more pass, once.</para>
    /// </remarks>
    private void OnFired()
    {
        try
        {
            if (!_firesEarly)
            {
                // Any fire judged clears a suspicion that it does not confirm, a kicked one too: a truncating timer's
                // confirming fire comes right after the suspected one, so only two fires in a row that both look early
                // (with no kick flag left for either) switch the rounding on.
                bool early = Interlocked.Exchange(ref _kicked, 0) == 0 && FiredEarly();
                if (early && _lastFiredEarly)
                {
                    _firesEarly = true;
                }
                _lastFiredEarly = early;
            }
        }
        catch (Exception)
        {
            // The provider's clock failed: this runs on its timer's thread, where an exception may end the process. The
            // pass below reads the clock too, and reports the failure (TimerWheel.OnDriverFailed).
        }
        _wheel.RequestDrive();
    }

    /// <summary>True when the clock reads before the time the timer was last armed for, by no more than the fraction of a millisecond its due time had.</summary>
    private bool FiredEarly()
    {
        long armed = Volatile.Read(ref _armed);
        if (armed == long.MinValue)
        {
            return false;
        }
        long fraction = armed % TimeSpan.TicksPerMillisecond;
        long armedFor = armed - fraction;
        long elapsed = _wheel.Elapsed();
        return elapsed < armedFor && elapsed >= armedFor - fraction;
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
            if (_firesEarly && due.Ticks % TimeSpan.TicksPerMillisecond != 0)
            {
                // A timer that truncates would take the fraction as zero: a late pass (within the tick) instead of a spin.
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

    public override void Dispose() => _timer.Dispose();
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

/// <summary>Up to <see cref="Capacity"/> continuations of expired timers, run together on one worker.</summary>
internal sealed class TimerBatch : WorkItem, IPoolNode<TimerBatch>
{
    internal const int Capacity = 64;

    private readonly object?[] _waiters = new object?[Capacity];
    private readonly object?[] _states = new object?[Capacity];
    private int _count;
    private TimerBatch? _next;

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
        int count = _count;
        for (int i = 0; i < count; i++)
        {
            object waiter = _waiters[i]!;
            object? state = _states[i];
            _waiters[i] = null;
            _states[i] = null;
            Continuations.InvokeReporting(waiter, state); // one that throws is reported; the others in the batch still run
        }
        _count = 0;
        ObjectPool<TimerBatch>.Return(this);
    }
}

using System;
using System.Threading;
using CsCheck;
using Microsoft.Extensions.Time.Testing;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// Random programs on one <see cref="Signal"/> (CsCheck, which shrinks a failure to a smallest program), checked after
/// every step against a model of its documented contract: Set releases the pending wait or, with nobody waiting, leaves
/// the signal set (a set signal stays set); a wait takes a set signal at once, otherwise waits; a second wait while one
/// is pending throws; Reset clears a set signal; a cancelled wait ends as canceled and consumes nothing; a wait given
/// to a WhenAny that another input wins ends with the race, leaving the signal idle and a later Set for the next wait;
/// a wait with a timeout (WithTimeout, on a wheel driven by Microsoft's FakeTimeProvider) fails with TimeoutException
/// once the clock passes its deadline and lets go of the wait the same way. A wait with a timeout of its own
/// (<see cref="Signal.WaitAsync(TimeSpan, TimerWheel, CancellationToken)"/>, alone, with a token, inside a WhenAny, or
/// with a zero timeout) is true when a set ends it and false when the clock passes its deadline first, after which the
/// signal is idle and a later Set is kept. <see cref="Signal.IsSet"/>, <see cref="Signal.HasWaiter"/> and the wheel's
/// <see cref="TimerWheel.PendingCount"/> (one timer for a pending wait with a finite timeout, none once every wait is
/// over) are checked too. A timed wait nobody reads keeps its timer after a set ends it, until the next wait of any
/// kind ends it (decisions 16) or its deadline passes.
/// </summary>
public class SignalModelTests
{
    private enum Op
    {
        Set,
        Reset,
        Wait,
        WaitCancelable,
        CancelWait,
        WaitInWhenAny,
        OtherInputWins,
        WaitWithTimeout,
        Advance,
        TimedWait,
        TimedWaitCancelable,
        TimedWaitInWhenAny,
        TimedWaitZero,
        TimedWaitUnread,
    }

    private static readonly Gen<(bool InitiallySet, Op[] Program)> Cases = Gen.Select(
        Gen.Bool,
        Gen.Frequency(
            (4, Gen.Const(Op.Set)),
            (1, Gen.Const(Op.Reset)),
            (3, Gen.Const(Op.Wait)),
            (2, Gen.Const(Op.WaitCancelable)),
            (2, Gen.Const(Op.CancelWait)),
            (2, Gen.Const(Op.WaitInWhenAny)),
            (2, Gen.Const(Op.OtherInputWins)),
            (2, Gen.Const(Op.WaitWithTimeout)),
            (3, Gen.Const(Op.Advance)),
            (3, Gen.Const(Op.TimedWait)),
            (2, Gen.Const(Op.TimedWaitCancelable)),
            (2, Gen.Const(Op.TimedWaitInWhenAny)),
            (1, Gen.Const(Op.TimedWaitZero)),
            (1, Gen.Const(Op.TimedWaitUnread))).Array[1, 40]);

    /// <summary>A timed wait's timeout; each Advance moves the fake clock by 4 ms, so one times out on its third.</summary>
    private static readonly TimeSpan Timeout = TimeSpan.FromMilliseconds(10);

    private static readonly TimeSpan AdvanceBy = TimeSpan.FromMilliseconds(4);

    [Fact]
    public void RandomPrograms_MatchTheModel()
        => Cases.Sample((bool initiallySet, Op[] program) => { Run(initiallySet, program); }, iter: TestUtil.Stress(1_000),
            print: static c => $"initially set {c.Item1}: {string.Join(", ", c.Item2)}");

    /// <summary>One wait, its kind, and what its continuation saw.</summary>
    private sealed class Wait
    {
        public CancellationTokenSource? Cts;
        public Promise? Other; // set for a wait given to a WhenAny with this other input
        public Promise<bool>? TypedOther; // set for a timed wait given to a WhenAny with this other input
        public TimeSpan? Deadline; // set for a wait with a timeout: the fake clock's elapsed time it times out at
        public bool Timed; // a wait with a timeout of its own (Signal.WaitAsync(timeout, wheel)): false once it times out
        public SpindleTaskStatus Outcome = SpindleTaskStatus.Pending;
        public int Winner = -1; // the WhenAny's result
        public bool? Result; // a timed wait's result: true if it took a set, false if it timed out
        public bool IsUnread; // a timed wait that nobody reads (TimedWaitUnread): its task is looked at, never read
        public SpindleTask<bool> Unread;

        /// <summary>How the wait ended so far: what its continuation saw, or, for one nobody reads, its task's status.</summary>
        public SpindleTaskStatus Status => IsUnread ? Unread.Status : Outcome;

        /// <summary>The WhenAny's other input, whichever kind it is.</summary>
        public bool InWhenAny => Other is not null || TypedOther is not null;

        /// <summary>Timers this wait keeps in the wheel while it is pending: its own, or its WithTimeout's.</summary>
        public int Timers => Deadline is null ? 0 : 1;

        public void Watch(SpindleTask task)
        {
            SpindleTask.Awaiter awaiter = task.GetAwaiter();
            if (awaiter.IsCompleted)
            {
                End(awaiter.GetResult);
                return;
            }
            awaiter.OnCompleted(() => End(awaiter.GetResult)); // on the thread that completes it: this one
        }

        public void WatchRace(SpindleTask<int> race)
        {
            SpindleTask<int>.Awaiter awaiter = race.GetAwaiter();
            if (awaiter.IsCompleted)
            {
                End(() => Winner = awaiter.GetResult());
                return;
            }
            awaiter.OnCompleted(() => End(() => Winner = awaiter.GetResult()));
        }

        public void WatchTimed(SpindleTask<bool> task)
        {
            SpindleTask<bool>.Awaiter awaiter = task.GetAwaiter();
            if (awaiter.IsCompleted)
            {
                End(() => Result = awaiter.GetResult());
                return;
            }
            awaiter.OnCompleted(() => End(() => Result = awaiter.GetResult()));
        }

        public void WatchTimedRace(SpindleTask<(int Index, bool Result)> race)
        {
            SpindleTask<(int Index, bool Result)>.Awaiter awaiter = race.GetAwaiter();
            if (awaiter.IsCompleted)
            {
                End(() => (Winner, Result) = awaiter.GetResult());
                return;
            }
            awaiter.OnCompleted(() => End(() => (Winner, Result) = awaiter.GetResult()));
        }

        /// <summary>Lets the WhenAny's other input be used again (the race let go of it, or it won and was read).</summary>
        public void ResetOther()
        {
            Other?.Reset();
            TypedOther?.Reset();
        }

        private void End(Action read)
        {
            Assert.Equal(SpindleTaskStatus.Pending, Outcome); // ends once
            try
            {
                read();
                Outcome = SpindleTaskStatus.Succeeded;
            }
            catch (OperationCanceledException)
            {
                Outcome = SpindleTaskStatus.Canceled;
            }
            catch (TimeoutException)
            {
                Outcome = SpindleTaskStatus.Faulted;
            }
        }
    }

    private static void Run(bool initiallySet, Op[] program)
    {
        var signal = new Signal(initiallySet);
        var time = new FakeTimeProvider();
        using var wheel = new TimerWheel(time);
        TimeSpan elapsed = TimeSpan.Zero;
        bool set = initiallySet; // the model
        Wait? pending = null;
        Wait? unreadOver = null; // a wait nobody read, which a set ended: its timer stays until the next wait or its deadline
        for (int step = 0; step < program.Length; step++)
        {
            string at = $"step {step} ({program[step]})";
            switch (program[step])
            {
                case Op.Set:
                    signal.Set();
                    if (pending is { IsUnread: true })
                    {
                        Assert.True(pending.Unread.Status == SpindleTaskStatus.Succeeded, $"{at}: the set did not end the unread wait");
                        unreadOver = pending;
                        pending = null;
                    }
                    else if (pending is not null)
                    {
                        Assert.True(pending.Outcome == SpindleTaskStatus.Succeeded, $"{at}: the set did not release the pending wait");
                        Assert.True(!pending.InWhenAny || pending.Winner == 0, $"{at}: the WhenAny's winner is {pending.Winner}, not the signal");
                        Assert.True(!pending.Timed || pending.Result == true, $"{at}: the timed wait a set ended is {pending.Result}, not true");
                        pending.ResetOther(); // the WhenAny let go of its other input
                        pending = null;
                    }
                    else
                    {
                        set = true;
                    }
                    break;
                case Op.Reset:
                    signal.Reset();
                    set = false;
                    break;
                case Op.Wait:
                case Op.WaitCancelable:
                case Op.WaitInWhenAny:
                case Op.WaitWithTimeout:
                case Op.TimedWait:
                case Op.TimedWaitCancelable:
                case Op.TimedWaitInWhenAny:
                case Op.TimedWaitUnread:
                    if (pending is not null)
                    {
                        Assert.Throws<InvalidOperationException>(() => signal.WaitAsync());
                        Assert.Throws<InvalidOperationException>(() => signal.WaitAsync(Timeout, wheel));
                        break;
                    }
                    var wait = new Wait();
                    if (program[step] is Op.WaitCancelable or Op.TimedWaitCancelable)
                    {
                        wait.Cts = new CancellationTokenSource();
                    }
                    unreadOver = null; // the next wait ends a wait nobody read
                    if (program[step] is Op.TimedWait or Op.TimedWaitCancelable or Op.TimedWaitInWhenAny or Op.TimedWaitUnread)
                    {
                        wait.Timed = true;
                        wait.Deadline = elapsed + Timeout;
                        SpindleTask<bool> timed = signal.WaitAsync(Timeout, wheel, wait.Cts?.Token ?? default);
                        if (program[step] == Op.TimedWaitInWhenAny)
                        {
                            wait.TypedOther = new Promise<bool>();
                            wait.WatchTimedRace(SpindleTask.WhenAny([timed, wait.TypedOther.Task]));
                        }
                        else if (program[step] == Op.TimedWaitUnread)
                        {
                            wait.IsUnread = true;
                            wait.Unread = timed;
                        }
                        else
                        {
                            wait.WatchTimed(timed);
                        }
                    }
                    else
                    {
                        SpindleTask task = signal.WaitAsync(wait.Cts?.Token ?? default);
                        if (program[step] == Op.WaitInWhenAny)
                        {
                            wait.Other = new Promise();
                            wait.WatchRace(SpindleTask.WhenAny(task, wait.Other.Task));
                        }
                        else if (program[step] == Op.WaitWithTimeout)
                        {
                            wait.Deadline = elapsed + Timeout;
                            wait.Watch(task.WithTimeout(Timeout, wheel));
                        }
                        else
                        {
                            wait.Watch(task);
                        }
                    }
                    if (set)
                    {
                        Assert.True(wait.Status == SpindleTaskStatus.Succeeded, $"{at}: a wait on a set signal did not complete at once");
                        Assert.True(!wait.InWhenAny || wait.Winner == 0, $"{at}: the WhenAny's winner is {wait.Winner}, not the set signal");
                        Assert.True(!wait.Timed || wait.IsUnread || wait.Result == true, $"{at}: a timed wait on a set signal is {wait.Result}, not true");
                        set = false;
                        wait.ResetOther();
                    }
                    else
                    {
                        Assert.True(wait.Status == SpindleTaskStatus.Pending, $"{at}: a wait on an idle signal completed at once");
                        pending = wait;
                    }
                    break;
                case Op.TimedWaitZero:
                    if (pending is not null)
                    {
                        Assert.Throws<InvalidOperationException>(() => signal.WaitAsync(TimeSpan.Zero, wheel));
                        break;
                    }
                    SpindleTask<bool> zero = signal.WaitAsync(TimeSpan.Zero, wheel);
                    unreadOver = null; // the next wait ends a wait nobody read
                    Assert.True(zero.IsCompleted, $"{at}: a wait with a zero timeout did not complete at once");
                    Assert.True(zero.GetAwaiter().GetResult() == set, $"{at}: a wait with a zero timeout did not take exactly the set that was there");
                    set = false;
                    break;
                case Op.CancelWait:
                    if (pending?.Cts is { } cts)
                    {
                        cts.Cancel();
                        Assert.True(pending.Outcome == SpindleTaskStatus.Canceled, $"{at}: the cancelled wait is {pending.Outcome}");
                        pending = null;
                    }
                    break;
                case Op.Advance:
                    time.Advance(AdvanceBy);
                    elapsed += AdvanceBy;
                    if (unreadOver?.Deadline is { } passed && elapsed >= passed)
                    {
                        unreadOver = null; // its timer fired, finding its wait over
                    }
                    if (pending?.Deadline is { } deadline && elapsed >= deadline)
                    {
                        if (pending.IsUnread)
                        {
                            Assert.True(pending.Unread.Status == SpindleTaskStatus.Succeeded, $"{at}: the unread wait did not time out at {deadline.TotalMilliseconds} ms");
                        }
                        else if (pending.Timed)
                        {
                            Assert.True(pending.Outcome == SpindleTaskStatus.Succeeded && pending.Result == false,
                                $"{at}: the timed wait is {pending.Outcome} with {pending.Result}, not false at {deadline.TotalMilliseconds} ms");
                            Assert.True(!pending.InWhenAny || pending.Winner == 0, $"{at}: the WhenAny's winner is {pending.Winner}, not the timed-out wait");
                            pending.ResetOther();
                        }
                        else
                        {
                            Assert.True(pending.Outcome == SpindleTaskStatus.Faulted, $"{at}: the wait did not time out at {deadline.TotalMilliseconds} ms");
                        }
                        pending = null; // the timeout let go of the signal's wait: idle again
                    }
                    break;
                case Op.OtherInputWins:
                    if (pending?.Other is { } rival)
                    {
                        rival.SetResult();
                        Assert.True(pending.Outcome == SpindleTaskStatus.Succeeded && pending.Winner == 1,
                            $"{at}: the WhenAny is {pending.Outcome} with winner {pending.Winner}, not won by its other input");
                        rival.Reset();
                        pending = null; // the race let go of the signal's wait: idle again
                    }
                    else if (pending?.TypedOther is { } typedRival)
                    {
                        typedRival.SetResult(true);
                        Assert.True(pending.Outcome == SpindleTaskStatus.Succeeded && pending.Winner == 1 && pending.Result == true,
                            $"{at}: the WhenAny is {pending.Outcome} with ({pending.Winner}, {pending.Result}), not won by its other input");
                        typedRival.Reset();
                        pending = null; // the race let go of the timed wait, and stopped its timer: idle again
                    }
                    break;
            }
            Assert.True(signal.IsSet == set, $"{at}: IsSet is {signal.IsSet}, the model says {set}");
            Assert.True(signal.HasWaiter == (pending is not null), $"{at}: HasWaiter is {signal.HasWaiter}, the model says {pending is not null}");
            int timers = (pending?.Timers ?? 0) + (unreadOver is null ? 0 : 1);
            Assert.True(wheel.PendingCount == timers, $"{at}: the wheel holds {wheel.PendingCount} timers, the model says {timers}");
        }
        if (pending is not null)
        {
            signal.Set(); // ends the last wait, so that nothing is left registered
            Assert.Equal(SpindleTaskStatus.Succeeded, pending.Status);
        }
    }
}

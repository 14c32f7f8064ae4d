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
/// once the clock passes its deadline and lets go of the wait the same way. <see cref="Signal.IsSet"/> and
/// <see cref="Signal.HasWaiter"/> are checked too.
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
            (3, Gen.Const(Op.Advance))).Array[1, 40]);

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
        public TimeSpan? Deadline; // set for a wait with a timeout: the fake clock's elapsed time it times out at
        public SpindleTaskStatus Outcome = SpindleTaskStatus.Pending;
        public int Winner = -1; // the WhenAny's result

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
        for (int step = 0; step < program.Length; step++)
        {
            string at = $"step {step} ({program[step]})";
            switch (program[step])
            {
                case Op.Set:
                    signal.Set();
                    if (pending is not null)
                    {
                        Assert.True(pending.Outcome == SpindleTaskStatus.Succeeded, $"{at}: the set did not release the pending wait");
                        Assert.True(pending.Other is null || pending.Winner == 0, $"{at}: the WhenAny's winner is {pending.Winner}, not the signal");
                        if (pending.Other is { } other)
                        {
                            other.Reset(); // the WhenAny let go of its other input
                        }
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
                    if (pending is not null)
                    {
                        Assert.Throws<InvalidOperationException>(() => signal.WaitAsync());
                        break;
                    }
                    var wait = new Wait();
                    if (program[step] == Op.WaitCancelable)
                    {
                        wait.Cts = new CancellationTokenSource();
                    }
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
                    if (set)
                    {
                        Assert.True(wait.Outcome == SpindleTaskStatus.Succeeded, $"{at}: a wait on a set signal did not complete at once");
                        Assert.True(wait.Other is null || wait.Winner == 0, $"{at}: the WhenAny's winner is {wait.Winner}, not the set signal");
                        set = false;
                        wait.Other?.Reset();
                    }
                    else
                    {
                        Assert.True(wait.Outcome == SpindleTaskStatus.Pending, $"{at}: a wait on an idle signal completed at once");
                        pending = wait;
                    }
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
                    if (pending?.Deadline is { } deadline && elapsed >= deadline)
                    {
                        Assert.True(pending.Outcome == SpindleTaskStatus.Faulted, $"{at}: the wait did not time out at {deadline.TotalMilliseconds} ms");
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
                    break;
            }
            Assert.True(signal.IsSet == set, $"{at}: IsSet is {signal.IsSet}, the model says {set}");
            Assert.True(signal.HasWaiter == (pending is not null), $"{at}: HasWaiter is {signal.HasWaiter}, the model says {pending is not null}");
        }
        if (pending is not null)
        {
            signal.Set(); // ends the last wait, so that nothing is left registered
            Assert.Equal(SpindleTaskStatus.Succeeded, pending.Outcome);
        }
    }
}

using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Scopes;

/// <summary>
/// A token cancelled on one thread while the wait completes on another, for every API that takes a token: exactly one
/// outcome (the result, or an OperationCanceledException carrying the caller's token), nothing left in the wheel, and
/// the losing side leaves no trace (a signal's losing set is kept for the next wait; a promise input let go of can be
/// reset at once).
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class CancellationRaceTests
{
    private static readonly int Rounds = TestUtil.Stress(2000);

    /// <summary>Runs <paramref name="complete"/> and <paramref name="cancel"/> on two threads released together.</summary>
    private static void Together(Action complete, Action cancel)
    {
        using var barrier = new Barrier(2);
        Task a = TestUtil.RunOnThread(() => { barrier.SignalAndWait(); complete(); });
        Task b = TestUtil.RunOnThread(() => { barrier.SignalAndWait(); cancel(); });
        Task.WaitAll(a, b);
    }

    /// <summary>Reads <paramref name="task"/>: true if it succeeded, false if cancelled by <paramref name="token"/>; anything else fails.</summary>
    private static bool Succeeded(SpindleTask task, CancellationToken token, string at)
    {
        Assert.True(task.IsCompleted, $"{at}: neither completion nor cancellation ended the wait");
        try
        {
            task.GetAwaiter().GetResult();
            return true;
        }
        catch (OperationCanceledException e)
        {
            Assert.True(e.CancellationToken == token, $"{at}: cancelled with another token than the caller's");
            return false;
        }
    }

    [Fact]
    public void Signal_SetRacingCancellation_ExactlyOneEndsTheWait_ALosingSetIsKept()
    {
        var signal = new Signal();
        int[] outcomes = new int[2];
        for (int i = 0; i < Rounds; i++)
        {
            using var cts = new CancellationTokenSource();
            SpindleTask wait = signal.WaitAsync(cts.Token);
            Together(signal.Set, cts.Cancel);
            bool ok = Succeeded(wait, cts.Token, $"round {i}");
            outcomes[ok ? 1 : 0]++;
            // The set was taken by the wait if it succeeded; otherwise it is kept.
            Assert.True(signal.IsSet == !ok, $"round {i}: the wait {(ok ? "took" : "lost to cancellation; the signal should keep")} the set, but IsSet={signal.IsSet}");
            Assert.False(signal.HasWaiter);
            signal.Reset();
        }
        Assert.Equal(Rounds, outcomes[0] + outcomes[1]);
    }

    [Fact]
    public void Delay_FiringRacingCancellation_OneOutcome_NothingLeftInTheWheel()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        for (int i = 0; i < Rounds; i++)
        {
            using var cts = new CancellationTokenSource();
            SpindleTask delay = wheel.Delay(TimeSpan.FromMilliseconds(1), cts.Token);
            Together(() => clock.Advance(TimeSpan.FromMilliseconds(1)), cts.Cancel);
            Succeeded(delay, cts.Token, $"round {i}");
        }
        clock.Advance(TimeSpan.FromMilliseconds(1));
        Assert.Equal(0, wheel.PendingCount);
    }

    [Fact]
    public void WhenAllAndWhenAny_InputRacingCancellation_OneOutcome_PromiseResettableAtOnce()
    {
        var promise = new Promise();
        for (int i = 0; i < Rounds; i++)
        {
            using var cts = new CancellationTokenSource();
            promise.Reset(); // the previous use was read or let go of: resettable at once
            SpindleTask combined = (i % 2) == 0
                ? SpindleTask.WhenAll([promise.Task], cts.Token)
                : Untyped(SpindleTask.WhenAny([promise.Task], cts.Token));
            Together(promise.SetResult, cts.Cancel);
            Succeeded(combined, cts.Token, $"round {i}");
        }
        promise.Reset(); // the last use is let go of or read: resettable
    }

    private static async SpindleTask Untyped<T>(SpindleTask<T> t) => await t;

    [Fact]
    public void WhenAnyProducers_WinnerRacingTheCallersCancellation_OneOutcome()
    {
        var gate = new Promise();
        for (int i = 0; i < Rounds; i++)
        {
            using var cts = new CancellationTokenSource();
            gate.Reset();
            var signal = new Signal();
            SpindleTask<int> any = SpindleTask.WhenAny(
            [
                ct => signal.WaitAsync(ct),
                _ => gate.Task,
            ], cts.Token);
            Together(gate.SetResult, cts.Cancel);
            bool ok;
            try
            {
                Assert.Equal(1, any.GetAwaiter().GetResult());
                ok = true;
            }
            catch (OperationCanceledException e)
            {
                Assert.True(e.CancellationToken == cts.Token, $"round {i}: another token than the caller's");
                ok = false;
            }
            Assert.False(signal.HasWaiter, $"round {i}: the loser is still waiting ({(ok ? "won" : "cancelled")})");
        }
    }

    [Fact]
    public void PeriodicTimer_TickRacingCancellation_OneOutcome_NothingLeftInTheWheel()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var timer = new SpindlePeriodicTimer(TimeSpan.FromMilliseconds(1), wheel);
        int ticks = 0;
        for (int i = 0; i < Rounds; i++)
        {
            using var cts = new CancellationTokenSource();
            SpindleTask<bool> tick = timer.WaitForNextTickAsync(cts.Token);
            Together(() => clock.Advance(TimeSpan.FromMilliseconds(1)), cts.Cancel);
            try
            {
                Assert.True(tick.GetAwaiter().GetResult());
                ticks++;
            }
            catch (OperationCanceledException e)
            {
                Assert.True(e.CancellationToken == cts.Token, $"round {i}: another token than the caller's");
            }
        }
        timer.Dispose();
        clock.Advance(TimeSpan.FromMilliseconds(2));
        Assert.Equal(0, wheel.PendingCount);
    }
}

using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Combinators;

/// <summary>
/// One set per round, racing a combinator's other deciders (its timeout, its token, another input, the wait's own timeout
/// and token), with one waiter at a time: the set reaches the caller through the combined task, or the signal keeps it
/// for the next wait; never both (a set handed out twice) and never neither (a set lost while a wait could take it). The
/// combinators that give a set back are all here at once, with the deferred Set of stop 32's TakenSets gone (decisions
/// section 29). Written by the review of stop 32's changes; all pass on the code they reviewed.
/// </summary>
public class SignalSetAccountingStressTests
{
    /// <summary>
    /// After a round whose one set was <paramref name="delivered"/> to the caller, or not: the signal holds it exactly
    /// when it was not, and a held set is taken by the next wait (which must not find a second one).
    /// </summary>
    private static void AssertAccounted(Signal signal, bool delivered, int round, string what)
    {
        if (delivered)
        {
            Assert.False(signal.IsSet, $"round {round}: {what} delivered the set to the caller and the signal holds it too");
            return;
        }
        // A set that lost is given back before the combined task is published, or landed after the wait was let go of:
        // both before the round's racers are all done, so there is nothing to wait for but a slow machine.
        Assert.True(SpinWait.SpinUntil(() => signal.IsSet, TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)),
            $"round {round}: {what} did not deliver the set and the signal did not keep it: the set was lost");
        SpindleTask next = signal.WaitAsync();
        Assert.True(next.IsCompleted, $"round {round}: the kept set did not complete the next wait");
        next.GetAwaiter().GetResult();
        Assert.False(signal.IsSet, $"round {round}: one set was kept twice");
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task WithTimeoutAndToken_SetTimeoutAndTokenRacing_TheSetIsDeliveredOrKeptOnce(bool dispatch)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var signal = new Signal(false, dispatch);
        CancellationTokenSource cts = null!;
        SpindleTask timed = default;
        int delivered = 0, kept = 0;
        int rounds = await TestUtil.WithTimeout(Race.Run(TestUtil.Stress(10_000),
            before: _ =>
            {
                cts = new CancellationTokenSource();
                timed = signal.WaitAsync().WithTimeout(TimeSpan.FromMilliseconds(1), wheel, cts.Token);
            },
            after: round =>
            {
                Exception? e = Record.Exception(() => timed.GetAwaiter().GetResult());
                Assert.True(e is null or TimeoutException or OperationCanceledException, $"round {round}: {e}");
                AssertAccounted(signal, e is null, round, "a WithTimeout with a token");
                if (e is null)
                {
                    delivered++;
                }
                else
                {
                    kept++;
                }
                cts.Dispose();
            },
            _ => signal.Set(),
            _ => clock.Advance(TimeSpan.FromMilliseconds(1)),
            _ => cts.Cancel()), 120);
        Assert.Equal(rounds, delivered + kept);
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task TimedWhenAllWithToken_SetOtherTimeoutAndTokenRacing_TheSetIsDeliveredOrKeptOnce(bool dispatch)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var signal = new Signal(false, dispatch);
        var other = new Promise();
        var options = new WhenAllOptions { Timeout = TimeSpan.FromMilliseconds(1), Timers = wheel };
        CancellationTokenSource cts = null!;
        SpindleTask all = default;
        await TestUtil.WithTimeout(Race.Run(TestUtil.Stress(10_000),
            before: _ =>
            {
                cts = new CancellationTokenSource();
                other.Reset();
                all = SpindleTask.WhenAll([signal.WaitAsync(), other.Task], options, cts.Token);
            },
            after: round =>
            {
                Exception? e = Record.Exception(() => all.GetAwaiter().GetResult());
                Assert.True(e is null or TimeoutException or OperationCanceledException, $"round {round}: {e}");
                AssertAccounted(signal, e is null, round, "a timed WhenAll with a token");
                cts.Dispose();
            },
            _ => signal.Set(),
            _ => other.SetResult(),
            _ => clock.Advance(TimeSpan.FromMilliseconds(1)),
            _ => cts.Cancel()), 120);
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task WhenAnyWithToken_OverATimedWaitWithItsOwnToken_EverythingRacing_TheSetIsDeliveredOrKeptOnce(bool dispatch)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var signal = new Signal(false, dispatch);
        var other = new Promise<bool>();
        CancellationTokenSource anyCts = null!, waitCts = null!;
        SpindleTask<(int Index, bool Result)> any = default;
        await TestUtil.WithTimeout(Race.Run(TestUtil.Stress(10_000),
            before: _ =>
            {
                anyCts = new CancellationTokenSource();
                waitCts = new CancellationTokenSource();
                other.Reset();
                any = SpindleTask.WhenAny([signal.WaitAsync(TimeSpan.FromMilliseconds(1), wheel, waitCts.Token), other.Task], anyCts.Token);
            },
            after: round =>
            {
                (int Index, bool Result) won = default;
                Exception? e = Record.Exception(() => won = any.GetAwaiter().GetResult());
                Assert.True(e is null or OperationCanceledException, $"round {round}: {e}");
                // The wait won with its set (true), or lost, or ended by its own timeout (false) or token (the exception).
                AssertAccounted(signal, e is null && won.Index == 0 && won.Result, round, "a WhenAny over a timed wait, both with tokens");
                anyCts.Dispose();
                waitCts.Dispose();
            },
            _ => signal.Set(),
            _ => other.SetResult(true),
            _ => clock.Advance(TimeSpan.FromMilliseconds(1)),
            round =>
            {
                if (round % 2 == 0)
                {
                    anyCts.Cancel();
                }
                else
                {
                    waitCts.Cancel();
                }
            }), 120);
    }
}

using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Combinators;

/// <summary>
/// When a set that a combinator took is given back, and what its consumer sees (from a review of the change that gives
/// sets back): at the combination's decision, not when its last input finishes, and before its continuation runs, so
/// the continuation sees it and a reset there drops it.
/// </summary>
public class SignalSetKeptWhenDecidedTests
{
    /// <summary>
    /// A WhenAll with a timeout read a signal input (its set was taken), then timed out. Its other input cannot be let
    /// go of (a nested combinator, like a BCL task or a ValueTask) and is still running. The set must be kept by the
    /// signal when the combined task times out, not held in the slot until that other input finishes (which may be never).
    /// </summary>
    [Fact]
    public void WhenAllTimedOut_WithAnInputThatCannotBeLetGoOf_GivesTheSetBackWhenItTimesOut()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var a = new Signal();
        var b = new Signal();
        var c = new Signal();
        SpindleTask inner = SpindleTask.WhenAll(b.WaitAsync(), c.WaitAsync()); // a combinator: not detachable
        SpindleTask both = SignalSetKeptByCombinatorTests.TimedWhenAll(wheel, 5, a.WaitAsync(), inner);
        a.Set(); // read by the WhenAll's slot: the set is taken
        Assert.False(a.IsSet);

        clock.Advance(TimeSpan.FromMilliseconds(5));

        Assert.Throws<TimeoutException>(() => both.GetAwaiter().GetResult());
        bool keptAtTimeout = a.IsSet;
        b.Set();
        c.Set(); // the other input finishes: nothing is given back twice
        Assert.True(a.IsSet);
        Assert.True(keptAtTimeout, "the WhenAll timed out, but a's set was held until its other input finished (it could be never)");
    }

    /// <summary>The same with a token: the set is held until the input that cannot be let go of finishes.</summary>
    [Fact]
    public void WhenAllCancelled_WithAnInputThatCannotBeLetGoOf_GivesTheSetBackWhenCancelled()
    {
        var a = new Signal();
        var b = new Signal();
        var c = new Signal();
        using var cts = new CancellationTokenSource();
        SpindleTask both = SpindleTask.WhenAll([a.WaitAsync(), SpindleTask.WhenAll(b.WaitAsync(), c.WaitAsync())], cts.Token);
        a.Set();
        cts.Cancel();
        Assert.ThrowsAny<OperationCanceledException>(() => both.GetAwaiter().GetResult());
        bool keptAtCancel = a.IsSet;
        b.Set();
        c.Set();
        Assert.True(a.IsSet);
        Assert.True(keptAtCancel, "the WhenAll was cancelled, but a's set was held until its other input finished (it could be never)");
    }

    /// <summary>
    /// The consumer of a timed-out WhenAll resets the signal (to drop any set that happened so far) in its continuation,
    /// which runs when the combined task is published. The set the WhenAll took happened before that, so the reset drops
    /// it, as it drops a set that landed after the wait was let go of; it must not come back after the reset.
    /// </summary>
    [Fact]
    public void WhenAllTimedOut_ASetTakenBeforeTheTimeout_DoesNotComeBackAfterTheConsumersReset()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var a = new Signal();
        var b = new Signal();
        SpindleTask both = SignalSetKeptByCombinatorTests.TimedWhenAll(wheel, 5, a.WaitAsync(), b.WaitAsync());
        a.Set(); // before the timeout
        bool setSeenByContinuation = false;
        bool continuationRan = false;
        both.GetAwaiter().UnsafeOnCompleted(() =>
        {
            continuationRan = true;
            setSeenByContinuation = a.IsSet;
            a.Reset();
        });

        clock.Advance(TimeSpan.FromMilliseconds(5));

        Assert.True(continuationRan);
        Assert.Throws<TimeoutException>(() => both.GetAwaiter().GetResult());
        Assert.False(a.IsSet, $"a was reset after the WhenAll timed out (the continuation saw IsSet={setSeenByContinuation}); the set taken before the timeout came back after the reset");
    }

    /// <summary>Set racing the timeout, the other input not detachable: after a timeout the set is kept at once.</summary>
    [Fact]
    public async Task WhenAllTimedOut_SetRacingTheTimeout_IsKeptWhenTheCombinedTaskCompletes()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var a = new Signal();
        var b = new Signal();
        var c = new Signal();
        SpindleTask both = default;
        await TestUtil.WithTimeout(Race.Run(TestUtil.Stress(20_000),
            before: _ => both = SignalSetKeptByCombinatorTests.TimedWhenAll(wheel, 1, a.WaitAsync(), SpindleTask.WhenAll(b.WaitAsync(), c.WaitAsync())),
            after: round =>
            {
                Exception? e = Record.Exception(() => both.GetAwaiter().GetResult());
                Assert.IsType<TimeoutException>(e);
                Assert.True(a.IsSet, $"round {round}: timed out, and a's set is not kept");
                a.WaitAsync().GetAwaiter().GetResult();
                Assert.False(a.IsSet, $"round {round}: a set twice");
                b.Set();
                c.Set();
                Assert.False(a.IsSet, $"round {round}: a's set given back twice");
            },
            _ => clock.Advance(TimeSpan.FromMilliseconds(1)),
            _ => a.Set()), 120);
    }
}

using System;
using System.Threading;
using System.Threading.Tasks;
using Xunit;
using SpindleLib.Tests.Scopes;

namespace SpindleLib.Tests.Combinators;

/// <summary>
/// Loops ported from Task code hand the SAME object to a combinator turn after turn (an overall deadline raced in every
/// turn's WhenAny, a long-running task given <c>WithCancellation</c> or <c>WithTimeout</c> in every turn). A Task can be
/// waited on any number of times; a Spindle task cannot, and the combinator that lost with it (or ended without it) let
/// go of it or still holds it. The docs say so (WhenAny and WithTimeout "consume" their inputs), so the idiom fails, on
/// its FIRST misuse (the second turn), with an exception that names what happened and the fix, and nothing is left
/// behind by the failed turn. Before, the second turn's message said "already awaited, or passed to Forget()" (neither of
/// which the loop did) or "already has an awaiter" (for a task nobody else awaits), naming only Preserve().
/// </summary>
public class LoopReuseMessageTests
{
    private static async SpindleTask AwaitGate(Promise gate) => await gate.Task;

    private static async SpindleTask Bridge(Task task) => await task;

    private static InvalidOperationException SecondTurn(Func<SpindleTask> turn, Action decide)
    {
        SpindleTask first = turn();
        decide();
        Assert.True(first.IsCompleted, "the first turn did not end");
        Record.Exception(() => first.GetAwaiter().GetResult());
        return Assert.Throws<InvalidOperationException>(() => turn());
    }

    /// <summary>
    /// <see cref="SecondTurn"/> for an overall deadline: each turn races a fresh piece of work (a promise, reset) against
    /// the same <paramref name="deadline"/>, and the work wins the first turn.
    /// </summary>
    private static InvalidOperationException SecondTurnAgainst(SpindleTask deadline)
    {
        var work = new Promise();
        return SecondTurn(
            () =>
            {
                work.Reset();
                return SpindleTask.WhenAny(work.Task, deadline);
            },
            () => work.SetResult());
    }

    /// <summary>The message of a task a combinator let go of: what happened, and the fix for a loop.</summary>
    private static void AssertNamesTheLetGoAndTheFix(InvalidOperationException e, string what)
    {
        Assert.True(e.Message.Contains("let go of by a combinator", StringComparison.Ordinal),
            $"{what}: the message does not say that a combinator let go of the task: {e.Message}");
        Assert.True(e.Message.Contains("turn after turn", StringComparison.Ordinal) && e.Message.Contains("Preserve()", StringComparison.Ordinal),
            $"{what}: the message does not name the fix for a loop (preserve it once, before the loop): {e.Message}");
    }

    [Fact]
    public void Deadline_SpindleDelayRacedInEveryTurn_SecondTurnNamesTheLetGo_AndTheWheelIsEmpty()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        SpindleTask deadline = wheel.Delay(TimeSpan.FromSeconds(5));
        InvalidOperationException e = SecondTurnAgainst(deadline);
        AssertNamesTheLetGoAndTheFix(e, "a delay raced in every turn");
        clock.Advance(TimeSpan.FromMilliseconds(1)); // a pass unlinks the delay the first turn let go of
        Assert.Equal(0, wheel.PendingCount);
    }

    [Theory]
    [InlineData("Delay")]
    [InlineData("DelayFrame")]
    public void Deadline_LoopWaitRacedInEveryTurn_SecondTurnNamesTheLetGo(string kind)
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        SpindleTask deadline = kind == "Delay" ? loop.Delay(TimeSpan.FromSeconds(5)) : loop.DelayFrame(300);
        InvalidOperationException e = SecondTurnAgainst(deadline);
        AssertNamesTheLetGoAndTheFix(e, "loop." + kind + " raced in every turn");
    }

    public static TheoryData<string> LongTasks() => new() { "async method", "bridged BCL task" };

    [Theory]
    [MemberData(nameof(LongTasks))]
    public void LongTask_WithCancellationInEveryTurn_SecondTurnNamesTheLetGo_AndLeavesNoRegistration(string kind)
    {
        var gate = new Promise();
        var bcl = new TaskCompletionSource();
        SpindleTask longTask = kind == "async method" ? AwaitGate(gate) : Bridge(bcl.Task);
        using var cts1 = new CancellationTokenSource();
        using var cts2 = new CancellationTokenSource();
        SpindleTask first = longTask.WithCancellation(cts1.Token);
        cts1.Cancel();
        Assert.ThrowsAny<OperationCanceledException>(() => first.GetAwaiter().GetResult());
        var e = Assert.Throws<InvalidOperationException>(() => longTask.WithCancellation(cts2.Token));
        AssertNamesTheLetGoAndTheFix(e, kind + " given WithCancellation in every turn");
        Assert.Equal(0, TokenRegistrationLeakTests.RegistrationCount(cts2)); // the refused turn registered nothing
        gate.SetResult();
        bcl.SetResult();
    }

    [Fact]
    public void LongTask_WithTimeoutInEveryTurn_SecondTurnNamesTheLetGo_AndLeavesNoTimer()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var gate = new Promise();
        SpindleTask longTask = AwaitGate(gate);
        SpindleTask first = longTask.WithTimeout(TimeSpan.FromMilliseconds(1), wheel);
        clock.Advance(TimeSpan.FromMilliseconds(1));
        Assert.Throws<TimeoutException>(() => first.GetAwaiter().GetResult());
        var e = Assert.Throws<InvalidOperationException>(() => longTask.WithTimeout(TimeSpan.FromMilliseconds(1), wheel));
        AssertNamesTheLetGoAndTheFix(e, "an async method given WithTimeout in every turn");
        clock.Advance(TimeSpan.FromMilliseconds(1));
        Assert.Equal(0, wheel.PendingCount);
        gate.SetResult();
    }

    /// <summary>
    /// A <see cref="Spindle.Run(Action)"/> task cannot be let go of: the combinator whose timeout won still waits for it
    /// (it is read when it finishes). The second turn's message says so, and names the fix.
    /// </summary>
    [Fact]
    public void RunTask_WithTimeoutInEveryTurn_SecondTurnNamesTheCombinatorStillWaiting()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        // Not disposed: on a loaded machine the worker may start the run only after the test has ended, and a wait on a
        // disposed event there threw ObjectDisposedException to UnobservedException, which aborted the test host (mut53c).
        var release = new ManualResetEventSlim();
        SpindleTask run = Spindle.Run(() => release.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)));
        try
        {
            SpindleTask first = run.WithTimeout(TimeSpan.FromMilliseconds(1), wheel);
            clock.Advance(TimeSpan.FromMilliseconds(1));
            Assert.Throws<TimeoutException>(() => first.GetAwaiter().GetResult());
            var e = Assert.Throws<InvalidOperationException>(() => run.WithTimeout(TimeSpan.FromMilliseconds(1), wheel));
            Assert.True(e.Message.Contains("combinator", StringComparison.Ordinal) && e.Message.Contains("still waits for it", StringComparison.Ordinal),
                "the message does not say that the combinator of the earlier turn still waits for the task: " + e.Message);
            Assert.True(e.Message.Contains("turn after turn", StringComparison.Ordinal) && e.Message.Contains("Preserve()", StringComparison.Ordinal),
                "the message does not name the fix for a loop: " + e.Message);
            Assert.Equal(0, wheel.PendingCount);
        }
        finally
        {
            release.Set();
        }
    }

    /// <summary>
    /// A signal's wait bounded by its own combinator (<c>WithCancellation</c>) and raced in a WhenAny: the combined task
    /// that lost cannot be let go of, so it keeps the wait, and the next turn's <c>WaitAsync</c> finds it pending. The
    /// message names that case and the fix (the token or timeout given to WaitAsync itself, which a WhenAny lets go of).
    /// </summary>
    [Fact]
    public void SignalWait_WithCancellationRacedInEveryTurn_SecondTurnNamesTheCombinatorThatHoldsIt()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        using var cts = new CancellationTokenSource();
        var signal = new Signal();
        SpindleTask<int> first = SpindleTask.WhenAny(signal.WaitAsync().WithCancellation(cts.Token), loop.NextFrame().AsSpindleTask());
        loop.RunFrame();
        Assert.Equal(1, first.GetAwaiter().GetResult());
        var e = Assert.Throws<InvalidOperationException>(() => signal.WaitAsync());
        Assert.True(e.Message.Contains("WaitAsync(cancellationToken)", StringComparison.Ordinal) && e.Message.Contains("WaitAsync(timeout", StringComparison.Ordinal),
            "the message does not name the fix (the token or timeout passed to WaitAsync itself): " + e.Message);
        Assert.True(e.Message.Contains("still holds", StringComparison.Ordinal), "the message does not name a combinator that still holds the wait: " + e.Message);
        signal.Set(); // the held wait ends, and its combinator with it
        Assert.False(signal.HasWaiter);
        Assert.Equal(0, TokenRegistrationLeakTests.RegistrationCount(cts)); // read by the WhenAny that lost it, which dropped it
    }
}

using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// A read of a signal's wait that finds it over ends what the wait holds (its token's registration, its timer). The
/// owner may start its next wait as soon as the last one is over, so a reader elsewhere (a forgotten wait's observer,
/// run by the set on the setter's thread) may still be ending the old wait's state when the next wait stores its own:
/// the late read must end only the old wait's, never the next wait's registration or timer (a lost wake-up: the next
/// wait could no longer be cancelled by its token). Found by a review that left it unproven; proven here with a Debug
/// hook in the read's window between its check and its ending.
/// </summary>
[Collection(SequentialCollection.Name)] // a process-wide hook
public class SignalEndedReadTests
{
    /// <summary>
    /// The same window raced without a hook: a forgotten wait (with a token and a timeout) is set on one thread, whose
    /// observer reads it there, while the owner arms its next wait (its own token and timeout) as soon as the signal has no
    /// waiter. Every round, cancelling the next wait's token ends it, and no timer is left in the wheel once it is read.
    /// </summary>
    [Fact]
    public async Task ForgottenWaitsRead_RacingTheNextWaitsArming_LeavesTheNextWaitCancellable()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var signal = new Signal();
        CancellationTokenSource first = new(), next = new();
        SpindleTask<bool> nextWait = default;
        await TestUtil.WithTimeout(Race.Run(TestUtil.Stress(20_000),
            before: _ =>
            {
                first.Dispose();
                next.Dispose();
                first = new CancellationTokenSource();
                next = new CancellationTokenSource();
                signal.WaitAsync(TimeSpan.FromMinutes(10), wheel, first.Token).Forget();
            },
            after: round =>
            {
                Assert.False(nextWait.IsCompleted, $"round {round}: the next wait completed before its token was cancelled");
                next.Cancel();
                Assert.True(nextWait.IsCompleted, $"round {round}: cancelling the next wait's token did not end it");
                Assert.ThrowsAny<OperationCanceledException>(() => nextWait.GetAwaiter().GetResult());
                Assert.Equal(0, wheel.PendingCount);
            },
            _ => signal.Set(),
            _ =>
            {
                TestUtil.SpinUntil(() => !signal.HasWaiter);
                nextWait = signal.WaitAsync(TimeSpan.FromMinutes(10), wheel, next.Token);
            }));
        first.Dispose();
        next.Dispose();
    }

#if DEBUG
    /// <summary>
    /// <c>signal.WaitAsync(token).Forget()</c>, then a set: the observer reads the wait on the setter's thread. As its read
    /// has found the wait over, the owner starts its next wait with its own token (and a timeout): cancelling that token
    /// must end the next wait, and nothing stays in the wheel.
    /// </summary>
    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public void ForgottenWaitsRead_AsTheNextWaitArms_LeavesTheNextWaitCancellable(bool nextTimed)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var signal = new Signal();
        using var first = new CancellationTokenSource();
        using var next = new CancellationTokenSource();
        signal.WaitAsync(TimeSpan.FromMinutes(10), wheel, first.Token).Forget();
        SpindleTask nextWait = default;
        bool armed = false;
        Signal.TestHookBeforeEndingRead = s =>
        {
            if (ReferenceEquals(s, signal) && !armed)
            {
                armed = true;
                // The owner's next wait, armed between the old wait's read and its ending (here on the same thread).
                nextWait = nextTimed ? signal.WaitAsync(TimeSpan.FromMinutes(10), wheel, next.Token) : signal.WaitAsync(next.Token);
            }
        };
        try
        {
            signal.Set(); // completes the forgotten wait: its observer reads it here
        }
        finally
        {
            Signal.TestHookBeforeEndingRead = null;
        }
        Assert.True(armed, "the read never reached its ending");
        Assert.False(nextWait.IsCompleted);
        next.Cancel();
        Assert.True(nextWait.IsCompleted, "cancelling the next wait's token did not end it: the old wait's late read dropped its registration");
        Assert.Equal(SpindleTaskStatus.Canceled, nextWait.Status);
        Assert.ThrowsAny<OperationCanceledException>(() => nextWait.GetAwaiter().GetResult());
        Assert.Equal(0, wheel.PendingCount);
        Assert.False(signal.HasWaiter);
    }

    /// <summary>
    /// The same window with the next wait timed and no token: the old wait's late read must leave the next wait's timer
    /// armed (the timeout still ends it).
    /// </summary>
    [Fact]
    public void ForgottenWaitsRead_AsATimedNextWaitArms_LeavesItsTimerArmed()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var signal = new Signal();
        using var first = new CancellationTokenSource();
        signal.WaitAsync(TimeSpan.FromMinutes(10), wheel, first.Token).Forget();
        SpindleTask<bool> nextWait = default;
        bool armed = false;
        Signal.TestHookBeforeEndingRead = s =>
        {
            if (ReferenceEquals(s, signal) && !armed)
            {
                armed = true;
                nextWait = signal.WaitAsync(TimeSpan.FromMilliseconds(50), wheel);
            }
        };
        try
        {
            signal.Set();
        }
        finally
        {
            Signal.TestHookBeforeEndingRead = null;
        }
        Assert.True(armed, "the read never reached its ending");
        Assert.False(nextWait.IsCompleted);
        clock.Advance(TimeSpan.FromMilliseconds(100));
        Assert.True(nextWait.IsCompleted, "the next wait's timeout did not end it");
        Assert.False(nextWait.GetAwaiter().GetResult());
        Assert.Equal(0, wheel.PendingCount);
    }
#endif
}

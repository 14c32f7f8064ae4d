using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Time;

#if DEBUG // the provider's test hooks exist only in a Debug build of the library
/// <summary>
/// The running count of a <see cref="TimerWheel.AsTimeProvider"/> timer (its callbacks running now, plus a bit once it is
/// disposed): each of its three steps meets another thread's step in a window of a few instructions, which the sixth
/// mutation pass (stop 56, mut57: M12, M13, M16) found no test reached. The provider's Debug hooks run the other step
/// there, every run: a callback that starts between Dispose's read and its CAS must still be waited for; a Dispose that
/// lands between a firing's read and its CAS must keep the callback from starting; a callback that ends between
/// DisposeAsync's first look and the publication of its waiter must still complete the wait. The hooks are
/// process-wide (hence the sequential collection) and act on this test's timer, once.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class WheelTimeProviderRaceTests
{
    private static TimeSpan Ms(long ms) => TimeSpan.FromMilliseconds(ms);

    private static readonly TimeSpan Infinite = Timeout.InfiniteTimeSpan;

    private static readonly TimeSpan Patience = TimeSpan.FromSeconds(30);

    /// <summary>
    /// A callback starts (another thread's Advance fires the timer, and the callback blocks) after Dispose read the count
    /// as zero and before its CAS: the CAS fails, the reread counts the callback, and DisposeAsync waits for it. A
    /// Dispose that set the bit with a plain write (M12) erased the callback's count, so DisposeAsync completed while the
    /// callback still ran.
    /// </summary>
    [Fact]
    public async Task ACallbackStartingAsDisposeSetsItsBit_IsWaitedForByDisposeAsync()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var entered = new ManualResetEventSlim();
        using var release = new ManualResetEventSlim();
        ITimer timer = WheelTimeProviderTests.CreateBlockingTimer(wheel, entered, release);
        Task advancing = Task.CompletedTask;
        bool started = false;
        bool disposedEarly;
        try
        {
            SpindleTimerChangeRaceTests.LandOnce(ref WheelTimeProvider.TestHookBeforeDisposeCas, timer,
                () =>
                {
                    advancing = Task.Run(() => clock.Advance(Ms(1)));
                    started = entered.Wait(Patience);
                },
                () => timer.Dispose());
            disposedEarly = timer.DisposeAsync().IsCompleted;
        }
        finally
        {
            release.Set();
        }
        await TestUtil.WithTimeout(advancing);
        Assert.True(started, "the callback never started");
        Assert.False(disposedEarly, "DisposeAsync completed while the callback that started during Dispose still ran");
        await TestUtil.WithTimeout(timer.DisposeAsync().AsTask());
    }

    /// <summary>
    /// The user disposes the timer after the wheel's firing read the count (no bit) and before its CAS that starts the
    /// callback: the CAS fails, the reread finds the bit, and the callback never starts (no callback starts after
    /// Dispose returns, as <c>TimeProvider.System</c>'s timers promise). A firing that raised the count with a plain
    /// write (M16) erased the bit and ran the callback after the Dispose.
    /// </summary>
    [Fact]
    public void ADisposeLandingAsAFiringClaimsItsRun_TheCallbackNeverStarts()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        int ran = 0;
        ITimer timer = wheel.AsTimeProvider().CreateTimer(_ => ran++, null, Ms(1), Infinite);
        // A ManualClock fires inline: the hook runs on this thread, inside the Advance.
        SpindleTimerChangeRaceTests.LandOnce(ref WheelTimeProvider.TestHookBeforeRunClaim, timer,
            () => timer.Dispose(),
            () => clock.Advance(Ms(1)));
        Assert.Equal(0, ran);
        Assert.True(timer.DisposeAsync().IsCompleted, "no callback runs, so nothing is waited for");
        Assert.False(timer.Change(Ms(1), Infinite));
        clock.Advance(Ms(5));
        Assert.Equal(0, ran);
    }

    /// <summary>
    /// The running callback ends (its count falls to the bit alone, and it finds no waiter to complete) after
    /// DisposeAsync's first look at the count and before it publishes its waiter: DisposeAsync's second look sees the
    /// count at zero and completes the waiter itself. Without that second look (M13) the wait never ended.
    /// </summary>
    [Fact]
    public async Task TheCallbackEndingAsDisposeAsyncPublishesItsWaiter_TheWaitStillEnds()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var entered = new ManualResetEventSlim();
        using var release = new ManualResetEventSlim();
        ITimer timer = WheelTimeProviderTests.CreateBlockingTimer(wheel, entered, release);
        Task advancing = Task.Run(() => clock.Advance(Ms(1)));
        ValueTask disposing = default;
        bool ended = false;
        try
        {
            Assert.True(entered.Wait(Patience), "the callback never started");
            SpindleTimerChangeRaceTests.LandOnce(ref WheelTimeProvider.TestHookBeforeWaiterPublished, timer,
                () =>
                {
                    release.Set();
                    ended = advancing.Wait(Patience); // the Advance returns after the firing lowered the count
                },
                () => disposing = timer.DisposeAsync());
        }
        finally
        {
            release.Set();
        }
        Assert.True(ended, "the callback's Advance never returned");
        await TestUtil.WithTimeout(disposing.AsTask(), seconds: 10);
    }
}
#endif

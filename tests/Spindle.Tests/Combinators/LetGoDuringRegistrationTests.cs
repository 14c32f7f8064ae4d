#if DEBUG
using System;
using System.Collections.Concurrent;
using System.Threading;
using System.Threading.Tasks;
using static SpindleLib.Tests.Combinators.CombinatorTestSupport;
using static SpindleLib.Tests.UnobservedReports;

namespace SpindleLib.Tests.Combinators;

/// <summary>
/// The detachable waits added in stop 29 (a periodic timer's tick wait, a scope's wait) met by a decider while their slot
/// is published but not yet registered (Debug hook): the decider's let-go finds the wait pending with no waiter, and the
/// registrant lets go after the decision. The wait must end once, leave nothing in the wheel or registered, and the
/// source must be usable at once, its tick not taken. Sequential: the hook is process-wide.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class LetGoDuringRegistrationTests
{
    private static void DecideOnAnotherThreadWhenSlotPublished(int slot, Promise winner)
    {
        CombinatorCore.TestHookAfterSlotPublished = index =>
        {
            if (index != slot)
            {
                return;
            }
            CombinatorCore.TestHookAfterSlotPublished = null;
            var decider = new Thread(() => winner.SetResult());
            decider.Start();
            Assert.True(decider.Join(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "the deciding thread did not finish");
        };
    }

    [Fact]
    public async Task PeriodicTickWait_LetGoWhileBeingRegistered_TheTimerIsUsable_AndKeepsItsTick()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var timer = new SpindlePeriodicTimer(TimeSpan.FromMilliseconds(10), wheel);
        var winner = new Promise();
        DecideOnAnotherThreadWhenSlotPublished(1, winner);
        ConcurrentQueue<Exception> reported;
        try
        {
            reported = await ObserveAsync(Own.Any(Own.ReportedOnTestThreads(), Own.AwaitOnceErrors()), async _ =>
                Assert.Equal(0, await TestUtil.WithTimeout(SpindleTask.WhenAny(winner.Task, timer.WaitForNextTickAsync(CancellationToken.None)))));
        }
        finally
        {
            CombinatorCore.TestHookAfterSlotPublished = null;
        }
        Assert.Empty(reported);
        Assert.Equal(0, wheel.PendingCount);
        clock.Advance(TimeSpan.FromMilliseconds(10)); // tick 1 passes while nobody waits
        SpindleTask<bool> next = timer.WaitForNextTickAsync(CancellationToken.None);
        Assert.True(next.IsCompleted, "tick 1 was taken by the race that had let go of its wait");
        Assert.True(await next);
    }

    [Fact]
    public async Task ScopeWait_LetGoWhileBeingRegistered_CanBeAwaitedAgain_AndHasTheFailure()
    {
        var error = new InvalidTimeZoneException("a child's");
        var gate = new Promise();
        var scope = new TaskScope();
        scope.Run(async _ =>
        {
            await gate.Task;
            throw error;
        });
        var winner = new Promise();
        DecideOnAnotherThreadWhenSlotPublished(1, winner);
        ConcurrentQueue<Exception> reported;
        try
        {
            reported = await ObserveAsync(Own.Any(Own.InstancesOrOnTestThreads(error), Own.AwaitOnceErrors()), async _ =>
                Assert.Equal(0, await TestUtil.WithTimeout(SpindleTask.WhenAny(winner.Task, scope.WaitAsync()))));
        }
        finally
        {
            CombinatorCore.TestHookAfterSlotPublished = null;
        }
        Assert.Empty(reported);
        SpindleTask rest = scope.WaitAsync();
        gate.SetResult();
        Assert.Same(error, await Assert.ThrowsAsync<InvalidTimeZoneException>(() => TestUtil.WithTimeout(rest)));
        await scope.DisposeAsync();
    }
}
#endif

using System;
using System.Threading;
using System.Threading.Tasks;
using Xunit;
using SpindleLib.Tests.Scopes;

namespace SpindleLib.Tests.Combinators;

/// <summary>
/// Loop idioms ported from Task code that keep working turn after turn, checked over thousands of turns: every turn
/// works, nothing accumulates (no allocation per turn once warm, no timer or token registration left, a let-go
/// predicate not polled again), no tick or set is lost or delivered twice, and a fault is reported once. Each is the
/// supported form of an idiom whose other forms fail on their second turn (see <see cref="LoopReuseMessageTests"/>).
/// </summary>
[Collection(SequentialCollection.Name)] // allocation counts on this thread, and a long-lived token's registrations
public class LoopIdiomTests
{
    private static readonly int Turns = TestUtil.Stress(2_000);

    /// <summary>
    /// A session's frame loop: every frame it races its heartbeat (a periodic timer's tick) against a condition polled by
    /// the loop (<c>WaitUntil</c>). Each tick is delivered once (a tick wait that lost leaves the tick for the next turn),
    /// each condition once, the predicate a WhenAny let go of is not polled by later frames, and a turn allocates nothing.
    /// </summary>
    [Fact]
    public void TickRacedWithWaitUntil_EveryFrame_EachTickAndConditionOnce_NothingAccumulates()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        FrameLoop loop = FrameUtil.NewBoundLoop();
        using var timer = new SpindlePeriodicTimer(TimeSpan.FromMilliseconds(10), wheel);
        bool condition = false;
        int polls = 0;
        Func<bool> predicate = () =>
        {
            polls++;
            return condition;
        };
        int ticks = 0, fired = 0, conditions = 0, raised = 0;
        TestUtil.AssertSteadyStateAllocatesNothing(i =>
        {
            SpindleTask<int> any = SpindleTask.WhenAny(timer.WaitForNextTickAsync().AsSpindleTask(), loop.WaitUntil(predicate));
            if (i % 2 == 0)
            {
                clock.Advance(TimeSpan.FromMilliseconds(10)); // one tick
                fired++;
            }
            else
            {
                condition = true;
                raised++;
            }
            loop.RunFrame();
            if (!any.IsCompleted)
            {
                Assert.Fail($"turn {i}: neither the tick nor the condition ended the turn");
            }
            if (any.GetAwaiter().GetResult() == 0)
            {
                ticks++;
            }
            else
            {
                conditions++;
                condition = false;
            }
        }, Turns);
        Assert.Equal(fired, ticks);
        Assert.Equal(raised, conditions);
        int before = polls;
        loop.RunFrames(5);
        Assert.True(polls == before, $"a predicate a WhenAny had let go of was polled {polls - before} times by later frames");
        Assert.Equal(0, wheel.PendingCount);
    }

    /// <summary>
    /// A signal raced every turn against every kind of frame-loop wait (a condition, frames, loop time, the next frame),
    /// and winning: the losing waits end at once, allocate nothing per turn, and a predicate let go of is never polled by
    /// a frame.
    /// </summary>
    [Fact]
    public void SignalRacedWithEveryLoopWait_EveryTurn_NothingAccumulates()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        var signal = new Signal();
        int polls = 0;
        Func<bool> predicate = () =>
        {
            polls++;
            return false;
        };
        int calls = 0;
        TestUtil.AssertSteadyStateAllocatesNothing(i =>
        {
            calls++;
            SpindleTask<int> any = SpindleTask.WhenAny(
                signal.WaitAsync(), loop.WaitUntil(predicate), loop.DelayFrame(3), loop.Delay(TimeSpan.FromSeconds(1)), loop.NextFrame().AsSpindleTask());
            signal.Set();
            if (any.GetAwaiter().GetResult() != 0)
            {
                Assert.Fail($"turn {i}: a loop wait won over a set signal");
            }
            if (i % 100 == 0)
            {
                loop.RunFrame(); // the let-go waits leave the phases and the loop's wheel
            }
        }, Turns);
        loop.RunFrames(5);
        // Polled once at each call, on the loop thread (a condition already true completes the wait there), never by a frame.
        Assert.True(polls == calls, $"predicates a WhenAny had let go of were polled {polls - calls} times by frames ({calls} calls)");
        Assert.False(signal.IsSet);
    }

    /// <summary>
    /// A signal's wait bounded, every turn, by a timeout and the loop's long-lived token (<c>WithTimeout(t, wheel,
    /// token)</c>): every set is delivered once (a set after a timeout is kept for the next turn), and neither a timer nor
    /// a registration on the long-lived token is left behind.
    /// </summary>
    [Fact]
    public void SignalWaitWithTimeoutAndTheLoopsToken_EveryTurn_EachSetOnce_NoRegistrationLeft()
    {
        using var cts = new CancellationTokenSource();
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var signal = new Signal();
        int sets = 0, delivered = 0;
        for (int i = 0; i < Turns; i++)
        {
            SpindleTask turn = signal.WaitAsync().WithTimeout(TimeSpan.FromMilliseconds(1), wheel, cts.Token);
            if (i % 3 == 0)
            {
                signal.Set();
                sets++;
            }
            clock.Advance(TimeSpan.FromMilliseconds(1));
            Assert.True(turn.IsCompleted);
            if (Record.Exception(() => turn.GetAwaiter().GetResult()) is null)
            {
                delivered++;
            }
        }
        Assert.Equal(sets, delivered);
        Assert.False(signal.IsSet);
        Assert.Equal(0, TokenRegistrationLeakTests.RegistrationCount(cts));
        Assert.Equal(0, wheel.PendingCount);
    }

    /// <summary>
    /// The supported form of "race a long-lived BCL task every turn" (see the WhenAny remarks): the task cancels a token
    /// when it finishes, and each turn races its wait against that token. No registration piles up on the token, and the
    /// turn after the task finished ends as canceled.
    /// </summary>
    [Fact]
    public void LongLivedBclTask_RacedAsAToken_EveryTurn_NoRegistrationPilesUp()
    {
        var shutdown = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        using var stop = new CancellationTokenSource();
        _ = shutdown.Task.ContinueWith(static (_, s) => ((CancellationTokenSource)s!).Cancel(), stop,
            CancellationToken.None, TaskContinuationOptions.ExecuteSynchronously, TaskScheduler.Default);
        var inbox = new Signal();
        TestUtil.AssertSteadyStateAllocatesNothing(_ =>
        {
            SpindleTask<int> any = SpindleTask.WhenAny([inbox.WaitAsync()], stop.Token);
            inbox.Set();
            any.GetAwaiter().GetResult(); // one input: its index is 0
        }, Turns);
        Assert.Equal(0, TokenRegistrationLeakTests.RegistrationCount(stop));
        SpindleTask<int> last = SpindleTask.WhenAny([inbox.WaitAsync()], stop.Token);
        shutdown.SetResult();
        Assert.ThrowsAny<OperationCanceledException>(() => TestUtil.WithTimeout(last).GetAwaiter().GetResult());
        Assert.False(inbox.HasWaiter);
    }

    /// <summary>
    /// A scope's WaitAsync polled with a timeout every turn until it finishes, with a child that fails meanwhile: each
    /// turn times out while the scope runs, the last wait gets the failure, and the failure is not reported as unobserved.
    /// </summary>
    [Fact]
    public void ScopeWaitPolledWithATimeout_EveryTurn_TheFailureReachesTheLastWaitOnly()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var gate = new Promise();
        var boom = new InvalidOperationException("the scope's child failed");
        var reports = UnobservedReports.Observe(e => ReferenceEquals(e, boom), () =>
        {
            var scope = new TaskScope();
            scope.Run(async _ =>
            {
                await gate.Task;
                throw boom;
            });
            for (int i = 0; i < Turns; i++)
            {
                SpindleTask turn = scope.WaitAsync().WithTimeout(TimeSpan.FromMilliseconds(1), wheel);
                clock.Advance(TimeSpan.FromMilliseconds(1));
                Assert.Throws<TimeoutException>(() => turn.GetAwaiter().GetResult());
            }
            gate.SetResult();
            Assert.Same(boom, Record.Exception(() => scope.WaitAsync().WithTimeout(TimeSpan.FromMilliseconds(1), wheel).GetAwaiter().GetResult()));
            Assert.True(scope.DisposeAsync().IsCompletedSuccessfully);
        });
        Assert.True(reports.IsEmpty, $"the failure the last wait got was also reported {reports.Count} times");
        Assert.Equal(0, wheel.PendingCount);
    }
}

using System;
using System.Threading;
using System.Threading.Tasks;
using SpindleLib.Tests.Scopes;
using static SpindleLib.Tests.Combinators.CombinatorTestSupport;
using static SpindleLib.Tests.UnobservedReports;

namespace SpindleLib.Tests.Frames;

#if DEBUG
/// <summary>
/// A review of frame-loop waits let go of by a combinator (FrameWaiter as an IDetachableSource): each path that lets go
/// (timer stopped before expiry, timer expired and queued, timer expiring or cancelled while the combinator lets go, a
/// predicate wait, a token-carrying wait with no timer) returns the waiter to its pool exactly once, and leaves nothing
/// registered on a long-lived token.
/// </summary>
[Collection(SequentialCollection.Name)] // the pool hook is process-wide
public sealed class FrameWaitLetGoReviewTests
{
    /// <summary>Counts how often <see cref="Target"/> is handed back to its pool while it is installed.</summary>
    private sealed class ReturnCounter : IDisposable
    {
        public object? Target;
        public int Count;

        public ReturnCounter() => PoolTestHooks.Returning = o =>
        {
            if (ReferenceEquals(o, Volatile.Read(ref Target)))
            {
                Interlocked.Increment(ref Count);
            }
        };

        public void Watch(object target)
        {
            Volatile.Write(ref Count, 0);
            Volatile.Write(ref Target, target);
        }

        public void Dispose() => PoolTestHooks.Returning = null;
    }

    /// <summary>
    /// The one evaluation a let-go cannot prevent: another thread lets go of the wait just as its phase, having found it
    /// pending, is about to evaluate the predicate. That run still evaluates it (after the WhenAny has completed: before
    /// this review the documentation said the predicate was not evaluated again, and this test, asserting that, failed
    /// with "the predicate was evaluated 1 time(s) after the WhenAny that let go of it had completed"); what it returns or
    /// throws is dropped, nothing resumes, the waiter goes back to its pool once, and no later run evaluates it.
    /// </summary>
    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public void WaitUntil_LetGoOfByAnotherThreadAsItsPhaseReachesIt_EvaluatedAtMostOnceMore_OutcomeDropped(bool throws)
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        using var returns = new ReturnCounter();
        var work = new Promise();
        SpindleTask<int> any = default;
        bool started = false;
        int callsAfterCompletion = 0;
        SpindleTask wait = loop.WaitUntil(() =>
        {
            if (started && any.IsCompleted)
            {
                callsAfterCompletion++;
                if (throws)
                {
                    throw new InvalidOperationException("evaluated after the let-go");
                }
                return true;
            }
            return false;
        });
        returns.Watch(wait._source!);
        any = SpindleTask.WhenAny(work.Task, wait);
        started = true;
        FrameWaiter.TestHookBeforePoll = _ =>
        {
            FrameWaiter.TestHookBeforePoll = null;
            // Another thread decides the race just as the phase, having found the wait pending, is about to poll it.
            Assert.True(Task.Run(work.SetResult).Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)));
        };
        System.Collections.Concurrent.ConcurrentQueue<Exception> reported;
        try
        {
            // The frames' own reports, and the await-once error of a stale read by the deciding thread.
            reported = Observe(Own.Any(Own.ReportedOnTestThreads(), Own.AwaitOnceErrors()), () => loop.RunFrames(3));
        }
        finally
        {
            FrameWaiter.TestHookBeforePoll = null;
        }
        Assert.Equal(0, any.GetAwaiter().GetResult());
        Assert.Equal(1, callsAfterCompletion);
        Assert.Empty(reported);
        Assert.Equal(1, Volatile.Read(ref returns.Count));
        Assert.Equal(0, loop.QueuedCount);
    }

    /// <summary>
    /// The token check of <see cref="TimerNode.TryStopUnread"/>: a node that fired, was read and went on to another delay
    /// is not stopped by the first delay's token, and the second delay still resumes.
    /// </summary>
    [Fact]
    public void TryStopUnread_WithTheTokenOfAUseThatFiredAndWasRead_DoesNotStopTheNodesNextDelay()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        SpindleTask timer = default;
        FrameLoop.TestHookAfterTimerStarted = t => timer = t;
        try
        {
            SpindleTask first = loop.Delay(FrameUtil.Step);
            SpindleTask firstTimer = timer;
            loop.RunFrame();
            first.GetAwaiter().GetResult(); // its phase read the timer node, which went back to this thread's pool
            SpindleTask second = loop.Delay(FrameUtil.Step);
            Assert.Same(firstTimer._source, timer._source); // the same node, reused
            Assert.NotEqual(firstTimer._token, timer._token);
            Assert.False(((TimerNode)firstTimer._source!).TryStopUnread(firstTimer._token));
            loop.RunFrame();
            Assert.True(second.IsCompleted);
            second.GetAwaiter().GetResult();
            Assert.Equal(0, loop.PendingTimers);
        }
        finally
        {
            FrameLoop.TestHookAfterTimerStarted = null;
        }
    }

    [Fact]
    public void LoopDelayStoppedBeforeItExpires_WaiterPooledOnce_NothingLeftOnTheToken()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        using var cts = new CancellationTokenSource();
        using var returns = new ReturnCounter();
        var work = new Promise();
        SpindleTask delay = loop.Delay(TimeSpan.FromSeconds(30), cts.Token);
        returns.Watch(delay._source!);
        SpindleTask<int> any = SpindleTask.WhenAny(work.Task, delay);
        Assert.Equal(1, TokenRegistrationLeakTests.RegistrationCount(cts));
        work.SetResult();
        Assert.Equal(0, any.GetAwaiter().GetResult());
        Assert.Equal(0, TokenRegistrationLeakTests.RegistrationCount(cts));
        Assert.Equal(1, Volatile.Read(ref returns.Count));
        loop.RunFrames(2);
        cts.Cancel(); // nothing is left to run
        loop.RunFrames(2);
        Assert.Equal(1, Volatile.Read(ref returns.Count));
        Assert.Equal(0, loop.PendingTimers);
        Assert.Equal(0, loop.QueuedCount);
    }

    [Fact]
    public void LoopDelayExpiredAndQueuedForALaterPhase_LetGoOfInAnEarlierPhase_WaiterPooledOnce_NothingLeftOnTheToken()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        using var cts = new CancellationTokenSource();
        using var returns = new ReturnCounter();
        bool open = false;
        // Expires in frame 2's pass, and waits for LateUpdate; the predicate holds in frame 2's Update, before it.
        SpindleTask delay = loop.Delay(FrameUtil.Step, FrameTimeKind.Scaled, loop.LateUpdate, cts.Token);
        SpindleTask wait = loop.WaitUntil(() => Volatile.Read(ref open), loop.Update);
        returns.Watch(delay._source!);
        SpindleTask<int> any = SpindleTask.WhenAny(delay, wait);
        open = true;
        int registrationsAtUpdate = -1;
        int returnsAtUpdate = -1;
        int probes = 0;
        FramePhase between = loop.AddPhaseBefore(loop.LateUpdate, "probe");
        SpindleTask probe = loop.WaitUntil(() =>
        {
            if (probes++ == 0)
            {
                return false; // the check at the call
            }
            registrationsAtUpdate = TokenRegistrationLeakTests.RegistrationCount(cts);
            returnsAtUpdate = Volatile.Read(ref returns.Count);
            return true;
        }, between);
        loop.RunFrame();
        Assert.True(any.IsCompleted);
        Assert.Equal(1, any.GetAwaiter().GetResult());
        // In Update, the delay was let go of: the waiter's own registration (made at expiry) is gone, the timer node's
        // stays until LateUpdate reads the node; the queue still holds the waiter.
        Assert.Equal(1, registrationsAtUpdate);
        Assert.Equal(0, returnsAtUpdate);
        Assert.Equal(0, TokenRegistrationLeakTests.RegistrationCount(cts));
        Assert.Equal(1, Volatile.Read(ref returns.Count));
        loop.RunFrames(2);
        Assert.Equal(1, Volatile.Read(ref returns.Count));
        Assert.Equal(0, loop.QueuedCount);
        Assert.Equal(0, loop.PendingTimers);
        probe.GetAwaiter().GetResult();
    }

    [Fact]
    public void TwoDelaysExpireInOneFrame_TheFirstLetsGoOfTheQueuedSecond_PooledOnce_NothingLeftOnTheToken()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        using var cts = new CancellationTokenSource();
        using var returns = new ReturnCounter();
        SpindleTask first = loop.Delay(FrameUtil.Step, cts.Token);
        SpindleTask second = loop.Delay(FrameUtil.Step, cts.Token);
        returns.Watch(second._source!);
        SpindleTask<int> any = SpindleTask.WhenAny(first, second);
        loop.RunFrame();
        Assert.Equal(0, any.GetAwaiter().GetResult());
        Assert.True(WasConsumed(second));
        Assert.Equal(0, TokenRegistrationLeakTests.RegistrationCount(cts));
        Assert.Equal(1, Volatile.Read(ref returns.Count));
        loop.RunFrames(2);
        Assert.Equal(1, Volatile.Read(ref returns.Count));
        Assert.Equal(0, loop.QueuedCount);
        Assert.Equal(0, loop.PendingTimers);
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public void WaitWithATokenAndNoTimer_LetGoOf_PooledOnceWhenItsPhaseDropsIt_NothingLeftOnTheToken(bool predicate)
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        using var cts = new CancellationTokenSource();
        using var returns = new ReturnCounter();
        var work = new Promise();
        int calls = 0;
        SpindleTask wait = predicate
            ? loop.WaitUntil(() => { calls++; return false; }, cts.Token)
            : loop.NextFrame(cts.Token).AsSpindleTask();
        returns.Watch(wait._source!);
        SpindleTask<int> any = SpindleTask.WhenAny(work.Task, wait);
        int before = calls;
        work.SetResult();
        Assert.Equal(0, any.GetAwaiter().GetResult());
        Assert.Equal(0, TokenRegistrationLeakTests.RegistrationCount(cts));
        Assert.Equal(0, Volatile.Read(ref returns.Count)); // its phase's queue still holds it
        loop.RunFrames(3);
        Assert.Equal(before, calls);
        Assert.Equal(1, Volatile.Read(ref returns.Count));
        Assert.Equal(0, loop.QueuedCount);
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task LoopDelayWithALongLivedToken_ExpiresAsAWorkerLetsGoOfIt_PooledOnce_NothingLeftOnTheToken(bool cancelToo)
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        using var longLived = new CancellationTokenSource();
        CancellationTokenSource? perRound = null;
        using var returns = new ReturnCounter();
        var work = new Promise();
        SpindleTask delay = default;
        SpindleTask<int> any = default;
        int[] outcomes = new int[3];
        var watch = UnobservedReports.Start(Own.Any(Own.ReportedOnTestThreads(), Own.AwaitOnceErrors()));
        System.Collections.Concurrent.ConcurrentQueue<Exception> reported = watch.Reports;
        try
        {
            int rounds = await TestUtil.WithTimeout(Race.Run(
                TestUtil.Stress(3_000),
                before: round =>
                {
                    work.Reset();
                    perRound?.Dispose();
                    perRound = cancelToo ? new CancellationTokenSource() : null;
                    delay = loop.Delay(FrameUtil.Step, perRound?.Token ?? longLived.Token);
                    returns.Watch(delay._source!);
                    any = SpindleTask.WhenAny(work.Task, delay);
                },
                after: round =>
                {
                    try
                    {
                        outcomes[any.GetAwaiter().GetResult()]++;
                    }
                    catch (OperationCanceledException)
                    {
                        outcomes[2]++;
                    }
                    Assert.True(WasConsumed(delay), $"round {round}: the delay was not let go of or read");
                    loop.RunFrame();
                    Assert.Equal(0, loop.QueuedCount);
                    Assert.Equal(0, loop.PendingTimers);
                    int left = TokenRegistrationLeakTests.RegistrationCount(longLived);
                    Assert.True(left == 0, $"round {round}: {left} registrations left on the long-lived token");
                    int n = Volatile.Read(ref returns.Count);
                    Assert.True(n == 1, $"round {round}: the delay's waiter went back to its pool {n} times");
                },
                _ => loop.RunFrame(),
                _ => work.SetResult(),
                _ => perRound?.Cancel()), 120);
            Assert.Equal(rounds, outcomes[0] + outcomes[1] + outcomes[2]);
        }
        finally
        {
            watch.Dispose();
            perRound?.Dispose();
        }
        Assert.Empty(reported);
    }
}
#endif

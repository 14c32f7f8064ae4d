using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Combinators;

/// <summary>
/// A set that lands on a signal's wait just as a combinator's race is decided against that wait is never lost: a
/// WhenAny that the other input wins, or a WithTimeout whose timeout wins, keeps the set for the signal's next wait,
/// as a set that lands after the wait was let go of is kept. (Before, the combinator read the completed wait as a loser
/// and the set was gone: a wake-up lost, as a SemaphoreSlim.WaitAsync(timeout) never loses a release.)
/// </summary>
public class SignalSetKeptByCombinatorTests
{
    /// <summary>
    /// The set is kept by the signal. A signal that dispatches its waiters has its wait's completion read on a worker,
    /// which may be after the combined task completed: the set is given back then, so this waits for it.
    /// </summary>
    private static void AssertKept(Signal signal, string message)
        => Assert.True(SpinWait.SpinUntil(() => signal.IsSet, TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), message);

    /// <summary>A WhenAll of <paramref name="inputs"/> that times out after <paramref name="milliseconds"/> on <paramref name="wheel"/>.</summary>
    internal static SpindleTask TimedWhenAll(TimerWheel wheel, int milliseconds, params SpindleTask[] inputs)
        => SpindleTask.WhenAll(inputs, new WhenAllOptions { Timeout = TimeSpan.FromMilliseconds(milliseconds), Timers = wheel });

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task WhenAny_SetRacingTheOtherInput_TheSetIsDeliveredOrKept(bool dispatch)
    {
        var signal = new Signal(false, dispatch);
        var other = new Promise();
        SpindleTask<int> any = default;
        int kept = 0, delivered = 0;
        int rounds = await TestUtil.WithTimeout(Race.Run(TestUtil.Stress(20_000),
            before: _ =>
            {
                other.Reset();
                any = SpindleTask.WhenAny(signal.WaitAsync(), other.Task);
            },
            after: round =>
            {
                int winner = any.GetAwaiter().GetResult();
                if (winner == 0)
                {
                    delivered++;
                    Assert.False(signal.IsSet, $"round {round}: the signal won and is still set");
                    return;
                }
                AssertKept(signal, $"round {round}: the promise won and the signal's set was lost");
                kept++;
                SpindleTask next = signal.WaitAsync();
                Assert.True(next.IsCompleted, $"round {round}: the kept set did not complete the next wait");
                next.GetAwaiter().GetResult();
            },
            _ => other.SetResult(),
            _ => signal.Set()), 120);
        Assert.Equal(rounds, kept + delivered);
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task WithTimeout_SetRacingTheTimeout_TheSetIsDeliveredOrKept(bool dispatch)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var signal = new Signal(false, dispatch);
        SpindleTask timed = default;
        await TestUtil.WithTimeout(Race.Run(TestUtil.Stress(20_000),
            before: _ => timed = signal.WaitAsync().WithTimeout(TimeSpan.FromMilliseconds(1), wheel),
            after: round =>
            {
                Exception? e = Record.Exception(() => timed.GetAwaiter().GetResult());
                if (e is null)
                {
                    Assert.False(signal.IsSet, $"round {round}: the wait completed and the signal is still set");
                    return;
                }
                Assert.IsType<TimeoutException>(e);
                AssertKept(signal, $"round {round}: the timeout won and the signal's set was lost");
                signal.WaitAsync().GetAwaiter().GetResult();
            },
            _ => clock.Advance(TimeSpan.FromMilliseconds(1)),
            _ => signal.Set()), 120);
    }

    [Fact]
    public void WhenAllTimedOut_TheSetOfAnInputItHadRead_IsGivenBack()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var a = new Signal();
        var b = new Signal();
        SpindleTask both = TimedWhenAll(wheel, 5, a.WaitAsync(), b.WaitAsync());
        a.Set(); // a's wait completes, and the WhenAll reads it; b is never set
        Assert.False(a.IsSet);

        clock.Advance(TimeSpan.FromMilliseconds(5));

        Assert.Throws<TimeoutException>(() => both.GetAwaiter().GetResult());
        Assert.True(a.IsSet, "the WhenAll timed out, so a's set never reached the caller: a keeps it");
        Assert.False(b.IsSet);
        Assert.False(b.HasWaiter);
        Assert.True(a.WaitAsync().IsCompleted);
    }

    [Fact]
    public void WhenAllThatSucceeds_KeepsNoSet()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var a = new Signal();
        var b = new Signal();
        SpindleTask both = TimedWhenAll(wheel, 5, a.WaitAsync(), b.WaitAsync());
        a.Set();
        b.Set();
        both.GetAwaiter().GetResult();
        clock.Advance(TimeSpan.FromMilliseconds(10));
        Assert.False(a.IsSet);
        Assert.False(b.IsSet);
    }

    /// <summary>
    /// The documented limit of a wait that took its set at once (Signal's remarks): it has completed before the WhenAny
    /// sees it, so the first finished input in order wins. Passed first, it wins and its set reaches the caller; passed
    /// behind a finished input, it loses with its set consumed, as a SemaphoreSlim.WaitAsync that took a count does
    /// behind a finished input of Task.WhenAny.
    /// </summary>
    [Fact]
    public void WhenAny_AWaitThatTookItsSetAtOnce_WinsPassedFirst_AndLosesItsSetBehindAFinishedInput()
    {
        var signal = new Signal(initiallySet: true);
        SpindleTask<int> first = SpindleTask.WhenAny(signal.WaitAsync(), SpindleTask.CompletedTask);
        Assert.Equal(0, first.GetAwaiter().GetResult());
        Assert.False(signal.IsSet);

        signal.Set();
        SpindleTask<int> behind = SpindleTask.WhenAny(SpindleTask.CompletedTask, signal.WaitAsync());
        Assert.Equal(0, behind.GetAwaiter().GetResult());
        Assert.False(signal.IsSet); // taken by the wait when WaitAsync returned, before the WhenAny saw it
        Assert.False(signal.HasWaiter);
        Assert.False(signal.WaitAsync().IsCompleted, "a set came back that the documented rule says was consumed");
    }

    [Fact]
    public void WhenAnyCancelled_ALosingWaitThatCompletedIsKept_AndAWinningOneIsNot()
    {
        // The signal dispatches its waiters, so a set completes the wait but its slot runs later, on a worker: the token
        // decides the race first and reads the completed wait as a loser.
        var signal = new Signal(false, runContinuationsAsynchronously: true);
        using var cts = new CancellationTokenSource();
        var other = new Promise();
        SpindleTask<int> any = SpindleTask.WhenAny([signal.WaitAsync(), other.Task], cts.Token);
        signal.Set();
        cts.Cancel();
        Exception? e = Record.Exception(() => any.GetAwaiter().GetResult());
        if (e is null)
        {
            Assert.False(signal.IsSet); // the signal's slot ran before the cancellation: it won, and its set was delivered
            return;
        }
        Assert.IsAssignableFrom<OperationCanceledException>(e);
        AssertKept(signal, "the cancellation won, so the set never reached the caller: the signal keeps it");
    }

    /// <summary>
    /// An input that has finished, and that sets <paramref name="signal"/> the first time the WhenAny looks at it: the
    /// set lands on the signal's wait (passed first, still pending when it was looked at) while the WhenAny settles
    /// the race without a combinator, between its scan of the inputs and its letting go of the losers.
    /// </summary>
    private sealed class SetsOnLook(Signal signal) : ISpindleSource<bool>
    {
        private int _looked;

        public SpindleTaskStatus GetStatus(short token)
        {
            if (Interlocked.Exchange(ref _looked, 1) == 0)
            {
                signal.Set();
            }
            return SpindleTaskStatus.Succeeded;
        }

        public bool GetResult(short token) => true;

        public void OnCompleted(Action<object?> continuation, object? state, short token) => continuation(state);

        System.Threading.Tasks.Sources.ValueTaskSourceStatus System.Threading.Tasks.Sources.IValueTaskSource.GetStatus(short token)
            => System.Threading.Tasks.Sources.ValueTaskSourceStatus.Succeeded;

        System.Threading.Tasks.Sources.ValueTaskSourceStatus System.Threading.Tasks.Sources.IValueTaskSource<bool>.GetStatus(short token)
            => System.Threading.Tasks.Sources.ValueTaskSourceStatus.Succeeded;

        void System.Threading.Tasks.Sources.IValueTaskSource.GetResult(short token)
        {
        }

        void System.Threading.Tasks.Sources.IValueTaskSource.OnCompleted(Action<object?> continuation, object? state, short token, System.Threading.Tasks.Sources.ValueTaskSourceOnCompletedFlags flags)
            => continuation(state);

        void System.Threading.Tasks.Sources.IValueTaskSource<bool>.OnCompleted(Action<object?> continuation, object? state, short token, System.Threading.Tasks.Sources.ValueTaskSourceOnCompletedFlags flags)
            => continuation(state);
    }

    /// <summary>
    /// Found by the mixed soak test (a session's wait raced a delay of 0 ms, which had finished when WhenAny was called):
    /// a WhenAny whose other input has finished settles without a combinator, and a set that landed on the pending wait
    /// after the WhenAny looked at it made the wait's abandonment fail; the wait was then forgotten, which read it and
    /// consumed the set. The set never reached the caller, and the signal's next wait waited for ever.
    /// </summary>
    [Fact]
    public void WhenAnySettledAtOnce_ASetLandingOnThePendingWait_IsKept()
    {
        var signal = new Signal();
        SpindleTask<int> any = SpindleTask.WhenAny(signal.WaitAsync(), new SpindleTask(new SetsOnLook(signal), 0));
        Assert.Equal(1, any.GetAwaiter().GetResult());
        Assert.True(signal.IsSet, "the set landed on the losing wait as the WhenAny settled, and was lost");
        Assert.False(signal.HasWaiter);
        Assert.True(signal.WaitAsync().IsCompleted);
    }

    /// <summary>As <see cref="WhenAnySettledAtOnce_ASetLandingOnThePendingWait_IsKept"/>, for a timed wait among typed inputs.</summary>
    [Fact]
    public void WhenAnySettledAtOnce_ASetLandingOnAPendingTimedWait_IsKept()
    {
        var signal = new Signal();
        using var wheel = new TimerWheel(new ManualClock());
        SpindleTask<(int, bool)> any = SpindleTask.WhenAny(
            [signal.WaitAsync(TimeSpan.FromHours(1), wheel), new SpindleTask<bool>(new SetsOnLook(signal), 0)]);
        Assert.Equal((1, true), any.GetAwaiter().GetResult());
        Assert.True(signal.IsSet, "the set landed on the losing timed wait as the WhenAny settled, and was lost");
        Assert.Equal(0, wheel.PendingCount); // the wait's timer went with it
    }
    /// <summary>
    /// The same finished wait passed twice (misuse: a task is read once), to a WhenAny that settles without a combinator:
    /// the first copy wins and the second is let go of. Letting go read the wait and gave its set back to the signal, and
    /// the winner's read then took the same set again: the caller was told it won a set that the signal still kept, so
    /// one Set woke two waits. The given-back set then moved the wait's version on, so the winner's read was the
    /// await-once error and the set was kept once. Now the repeated task is refused at the call, before either copy is
    /// read or let go of: the wait is still the caller's, and it holds the one set.
    /// </summary>
    [Fact]
    public void WhenAnySettledAtOnce_TheSameFinishedWaitTwice_NeverCountsItsSetTwice()
    {
        var signal = new Signal();
        SpindleTask wait = signal.WaitAsync();
        signal.Set();
        Exception? e = Record.Exception(() => SpindleTask.WhenAny(wait, wait).GetAwaiter().GetResult());
        Assert.IsType<InvalidOperationException>(e);
        Assert.False(signal.IsSet, "the set was given back to the signal although the wait still holds it");
        wait.GetAwaiter().GetResult(); // the caller's wait, which took the set
        Assert.False(signal.IsSet);
    }
}

using System;
using System.Reflection;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Scopes;

/// <summary>
/// One long-lived <see cref="CancellationTokenSource"/> used by many waits that all end some other way (the wait
/// succeeds, loses a race, times out): no wait may leave its registration behind on the token, or a long-lived token
/// (an application's shutdown token) grows without bound. The registrations are counted by reflection on the source
/// (the runtime's own linked list of callback nodes), before and after; and the timer wheel must be empty afterwards.
/// Also: the <see cref="OperationCanceledException"/> of a cancelled wait carries the caller's token.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class TokenRegistrationLeakTests
{
    private static readonly int Rounds = TestUtil.Stress(20_000);

    /// <summary>The number of callbacks registered on <paramref name="cts"/> right now (the runtime's private list).</summary>
    internal static int RegistrationCount(CancellationTokenSource cts)
    {
        FieldInfo registrationsField = typeof(CancellationTokenSource).GetField("_registrations", BindingFlags.NonPublic | BindingFlags.Instance)
            ?? throw new InvalidOperationException("CancellationTokenSource._registrations not found: the runtime changed");
        object? registrations = registrationsField.GetValue(cts);
        if (registrations is null)
        {
            return 0;
        }
        FieldInfo callbacksField = registrations.GetType().GetField("Callbacks", BindingFlags.Public | BindingFlags.NonPublic | BindingFlags.Instance)
            ?? throw new InvalidOperationException("Registrations.Callbacks not found: the runtime changed");
        object? node = callbacksField.GetValue(registrations);
        int count = 0;
        while (node is not null)
        {
            count++;
            node = node.GetType().GetField("Next", BindingFlags.Public | BindingFlags.NonPublic | BindingFlags.Instance)!.GetValue(node);
        }
        return count;
    }

    [Fact]
    public void Counter_SeesARegistration()
    {
        using var cts = new CancellationTokenSource();
        Assert.Equal(0, RegistrationCount(cts));
        CancellationTokenRegistration r = cts.Token.Register(static () => { });
        Assert.Equal(1, RegistrationCount(cts));
        r.Dispose();
        Assert.Equal(0, RegistrationCount(cts));
    }

    private static void AssertNoGrowth(CancellationTokenSource cts, string what)
    {
        int left = RegistrationCount(cts);
        Assert.True(left == 0, $"{what}: {left} registrations left on the long-lived token after {Rounds} waits");
    }

    [Fact]
    public void Delay_FiredOnAManualClock_LeavesNoRegistration_AndAnEmptyWheel()
    {
        using var cts = new CancellationTokenSource();
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        for (int i = 0; i < Rounds; i++)
        {
            SpindleTask delay = wheel.Delay(TimeSpan.FromMilliseconds(1 + (i % 3)), cts.Token);
            clock.Advance(TimeSpan.FromMilliseconds(3));
            Assert.True(delay.IsCompleted);
            delay.GetAwaiter().GetResult();
        }
        AssertNoGrowth(cts, "Delay");
        Assert.Equal(0, wheel.PendingCount);
    }

    [Fact]
    public void Delay_LosingAWhenAny_LeavesNoRegistration_AndAnEmptyWheel()
    {
        using var cts = new CancellationTokenSource();
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var promise = new Promise();
        for (int i = 0; i < Rounds; i++)
        {
            promise.Reset();
            SpindleTask finite = wheel.Delay(TimeSpan.FromSeconds(10), cts.Token);
            SpindleTask infinite = wheel.Delay(Timeout.InfiniteTimeSpan, cts.Token);
            SpindleTask<int> any = SpindleTask.WhenAny(finite, promise.Task, infinite);
            promise.SetResult();
            Assert.Equal(1, any.GetAwaiter().GetResult());
        }
        clock.Advance(TimeSpan.FromMilliseconds(1)); // a pass to unlink the cancelled nodes
        AssertNoGrowth(cts, "Delay losing a WhenAny");
        Assert.Equal(0, wheel.PendingCount);
    }

    [Fact]
    public void SignalWait_SetOrLosingAWhenAny_LeavesNoRegistration()
    {
        using var cts = new CancellationTokenSource();
        var signal = new Signal();
        var promise = new Promise();
        for (int i = 0; i < Rounds; i++)
        {
            SpindleTask wait = signal.WaitAsync(cts.Token);
            if (i % 2 == 0)
            {
                signal.Set();
                wait.GetAwaiter().GetResult();
            }
            else
            {
                promise.Reset();
                SpindleTask<int> any = SpindleTask.WhenAny(wait, promise.Task);
                promise.SetResult();
                Assert.Equal(1, any.GetAwaiter().GetResult());
                Assert.False(signal.HasWaiter);
            }
        }
        AssertNoGrowth(cts, "Signal.WaitAsync");
    }

    [Fact]
    public void SignalWait_CompletedButNeverRead_NextWaitDropsItsRegistration()
    {
        using var cts = new CancellationTokenSource();
        var signal = new Signal();
        for (int i = 0; i < Rounds; i++)
        {
            SpindleTask wait = signal.WaitAsync(cts.Token);
            signal.Set(); // the wait completes; nobody reads it
            Assert.True(wait.IsCompleted);
        }
        Assert.True(RegistrationCount(cts) <= 1, $"{RegistrationCount(cts)} registrations: only the last unread wait may keep one");
    }

    [Fact]
    public void WhenAllAndWhenAny_WithAToken_LeaveNoRegistration()
    {
        using var cts = new CancellationTokenSource();
        var a = new Promise();
        var b = new Promise();
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        for (int i = 0; i < Rounds; i++)
        {
            a.Reset();
            b.Reset();
            switch (i % 4)
            {
                case 0:
                {
                    SpindleTask all = SpindleTask.WhenAll([a.Task, b.Task], cts.Token);
                    a.SetResult();
                    b.SetResult();
                    all.GetAwaiter().GetResult();
                    break;
                }
                case 1:
                {
                    SpindleTask<int> any = SpindleTask.WhenAny([a.Task, b.Task], cts.Token);
                    b.SetResult();
                    Assert.Equal(1, any.GetAwaiter().GetResult());
                    break;
                }
                case 2:
                {
                    SpindleTask all = SpindleTask.WhenAll([a.Task, b.Task], new WhenAllOptions { Timeout = TimeSpan.FromSeconds(5), Timers = wheel }, cts.Token);
                    b.SetResult();
                    a.SetResult();
                    all.GetAwaiter().GetResult();
                    break;
                }
                default:
                {
                    // Timed out: the token loses, and must still be unregistered.
                    SpindleTask all = SpindleTask.WhenAll([a.Task, b.Task], new WhenAllOptions { Timeout = TimeSpan.FromMilliseconds(1), Timers = wheel }, cts.Token);
                    clock.Advance(TimeSpan.FromMilliseconds(2));
                    Assert.Throws<TimeoutException>(() => all.GetAwaiter().GetResult());
                    break;
                }
            }
        }
        AssertNoGrowth(cts, "WhenAll/WhenAny");
        clock.Advance(TimeSpan.FromMilliseconds(1));
        Assert.Equal(0, wheel.PendingCount);
    }

    [Fact]
    public void WhenAnyProducers_WithACallerToken_LeaveNoRegistration_OnEitherToken()
    {
        using var cts = new CancellationTokenSource();
        var winner = new Promise();
        var signal = new Signal();
        CancellationToken lastProducerToken = default;
        for (int i = 0; i < Rounds; i++)
        {
            winner.Reset();
            SpindleTask<int> any = SpindleTask.WhenAny(
            [
                ct => { lastProducerToken = ct; return signal.WaitAsync(ct); },
                _ => winner.Task,
            ], cts.Token);
            winner.SetResult();
            Assert.Equal(1, any.GetAwaiter().GetResult());
            Assert.True(lastProducerToken.IsCancellationRequested, "the loser's token was not cancelled");
            Assert.False(signal.HasWaiter, "the loser is still waiting");
        }
        AssertNoGrowth(cts, "WhenAny over producers");
    }

    [Fact]
    public void TaskScope_CreatedAndDisposed_LeavesNoRegistrationOnTheOuterToken()
    {
        using var cts = new CancellationTokenSource();
        var promise = new Promise();
        for (int i = 0; i < Rounds / 4; i++)
        {
            promise.Reset();
            var scope = new TaskScope(cts.Token);
            scope.Run(_ => promise.Task);
            SpindleTask wait = scope.WaitAsync();
            promise.SetResult();
            wait.GetAwaiter().GetResult();
            ValueTask disposal = scope.DisposeAsync();
            Assert.True(disposal.IsCompletedSuccessfully);
        }
        AssertNoGrowth(cts, "TaskScope");
    }

    [Fact]
    public void PeriodicTimer_WaitsWithALongLivedToken_LeaveNoRegistration_AndAnEmptyWheel()
    {
        using var cts = new CancellationTokenSource();
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using (var timer = new SpindlePeriodicTimer(TimeSpan.FromMilliseconds(2), wheel))
        {
            for (int i = 0; i < Rounds / 4; i++)
            {
                SpindleTask<bool> tick = timer.WaitForNextTickAsync(cts.Token);
                clock.Advance(TimeSpan.FromMilliseconds(2));
                Assert.True(tick.IsCompleted);
                Assert.True(tick.GetAwaiter().GetResult());
            }
            AssertNoGrowth(cts, "SpindlePeriodicTimer");
        }
        clock.Advance(TimeSpan.FromMilliseconds(1));
        Assert.Equal(0, wheel.PendingCount);
    }

    [Fact]
    public void FrameAwaits_WithALongLivedToken_LeaveNoRegistration()
    {
        using var cts = new CancellationTokenSource();
        var loop = new FrameLoop();
        int resumed = 0;
        async SpindleTask Waits(int n)
        {
            for (int i = 0; i < n; i++)
            {
                await loop.NextFrame(cts.Token);
                await loop.DelayFrame(1, cts.Token);
                await loop.Yield(cts.Token);
                resumed++;
            }
        }
        int frames = Rounds / 20;
        SpindleTask run = Waits(frames);
        for (int f = 0; f < frames * 4 && !run.IsCompleted; f++)
        {
            loop.RunFrame(TimeSpan.FromMilliseconds(16));
        }
        Assert.True(run.IsCompleted, $"the frame waits did not finish ({resumed} of {frames})");
        run.GetAwaiter().GetResult();
        AssertNoGrowth(cts, "FrameLoop awaits");
    }

    // ---- The exception's token -------------------------------------------------------------------------------------

    private static OperationCanceledException CancelledBy(CancellationTokenSource cts, Func<CancellationToken, SpindleTask> start, Action? afterStart = null)
    {
        SpindleTask task = start(cts.Token);
        Assert.False(task.IsCompleted, "the wait finished before it was cancelled");
        afterStart?.Invoke();
        cts.Cancel();
        Assert.True(task.IsCompleted, "cancelling the token did not complete the wait at once");
        return Assert.ThrowsAny<OperationCanceledException>(() => task.GetAwaiter().GetResult());
    }

    public static TheoryData<string> Apis() => new()
    {
        "Delay", "DelayInfinite", "Signal", "WhenAll", "WhenAllTimed", "WhenAny", "WhenAnyProducers", "WhenAnyProducersTyped", "PeriodicTimer",
    };

    private static Func<CancellationToken, SpindleTask> Starter(string api, TimerWheel wheel, Promise p)
        => api switch
        {
            "Delay" => ct => wheel.Delay(TimeSpan.FromSeconds(1), ct),
            "DelayInfinite" => ct => wheel.Delay(Timeout.InfiniteTimeSpan, ct),
            "Signal" => ct => new Signal().WaitAsync(ct),
            "WhenAll" => ct => SpindleTask.WhenAll([p.Task], ct),
            "WhenAllTimed" => ct => SpindleTask.WhenAll([p.Task], new WhenAllOptions { Timeout = TimeSpan.FromSeconds(5), Timers = wheel }, ct),
            "WhenAny" => ct => SpindleTask.WhenAny([p.Task], ct),
            "WhenAnyProducers" => ct => SpindleTask.WhenAny([inner => wheel.Delay(Timeout.InfiniteTimeSpan, inner)], ct),
            "WhenAnyProducersTyped" => ct => Untyped(SpindleTask.WhenAny<int>([inner => Typed(wheel.Delay(Timeout.InfiniteTimeSpan, inner))], ct)),
            "PeriodicTimer" => ct => Untyped(new SpindlePeriodicTimer(TimeSpan.FromSeconds(1), wheel).WaitForNextTickAsync(ct)),
            _ => throw new ArgumentException(api),
        };

    private static async SpindleTask<int> Typed(SpindleTask t)
    {
        await t;
        return 1;
    }

    private static async SpindleTask Untyped<T>(SpindleTask<T> t) => await t;

    [Theory]
    [MemberData(nameof(Apis))]
    public void CancelledWait_ThrowsWithTheCallersToken(string api)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var p = new Promise();
        using var cts = new CancellationTokenSource();
        OperationCanceledException oce = CancelledBy(cts, Starter(api, wheel, p));
        Assert.True(oce.CancellationToken == cts.Token, $"{api}: the exception carries another token than the caller's");
        Assert.Equal(0, RegistrationCount(cts) - 0); // the callback ran: nothing is left registered
        clock.Advance(TimeSpan.FromMilliseconds(1));
        Assert.Equal(0, wheel.PendingCount);
    }

    [Theory]
    [MemberData(nameof(Apis))]
    public void AlreadyCancelledToken_ThrowsWithTheCallersToken_AndRegistersNothing(string api)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var p = new Promise();
        using var cts = new CancellationTokenSource();
        cts.Cancel();
        SpindleTask task = Starter(api, wheel, p)(cts.Token);
        Assert.True(task.IsCompleted, $"{api}: a wait with a cancelled token did not complete at once");
        var oce = Assert.ThrowsAny<OperationCanceledException>(() => task.GetAwaiter().GetResult());
        Assert.True(oce.CancellationToken == cts.Token, $"{api}: the exception carries another token than the caller's");
        clock.Advance(TimeSpan.FromMilliseconds(1));
        Assert.Equal(0, wheel.PendingCount);
    }

    [Fact]
    public void TaskScope_ChildCancelledByTheOuterToken_SeesTheScopesToken_AndWaitAsyncIsCanceledWithTheOuterToken()
    {
        // Documented: a child's OperationCanceledException because the scope was cancelled is not a failure; the scope,
        // cancelled from outside, reports that cancellation with the outer token, and disposal does not throw it again.
        using var cts = new CancellationTokenSource();
        var scope = new TaskScope(cts.Token);
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        OperationCanceledException? seen = null;
        scope.Run(async ct =>
        {
            try
            {
                await wheel.Delay(TimeSpan.FromSeconds(1), ct);
            }
            catch (OperationCanceledException e)
            {
                seen = e;
                throw;
            }
        });
        cts.Cancel();
        Assert.NotNull(seen);
        Assert.True(seen!.CancellationToken == scope.Token, "the child's exception carries another token than the scope's");
        SpindleTask wait = scope.WaitAsync();
        Assert.True(wait.IsCompleted);
        Assert.Equal(SpindleTaskStatus.Canceled, wait.Status);
        var canceled = Assert.ThrowsAny<OperationCanceledException>(() => wait.GetAwaiter().GetResult());
        Assert.True(canceled.CancellationToken == cts.Token, "WaitAsync's cancellation carries another token than the outer one");
        Assert.True(scope.DisposeAsync().IsCompletedSuccessfully);
    }
}

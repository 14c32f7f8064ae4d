using System;
using System.Collections.Generic;
using System.Threading;
using System.Threading.Tasks;
using Microsoft.Extensions.Time.Testing;

namespace SpindleLib.Tests.Time;

/// <summary>
/// <see cref="TimerWheel.AsTimeProvider"/>: the BCL's consumers of a <see cref="TimeProvider"/> (Task.Delay,
/// CancellationTokenSource, PeriodicTimer, WaitAsync) on a manual clock and on the system clock; its time is the
/// wheel's clock's; its <see cref="ITimer"/>'s Change and Dispose answer as <see cref="TimeProvider.System"/>'s do on
/// the same inputs; the creator's <see cref="ExecutionContext"/> flows to the callback; DisposeAsync waits for a running
/// callback; a disposed timer is not held by the wheel.
/// </summary>
public class WheelTimeProviderTests
{
    private static TimeSpan Ms(double ms) => TimeSpan.FromMilliseconds(ms);

    private static readonly TimeSpan Infinite = Timeout.InfiniteTimeSpan;

    [Fact]
    public void AsTimeProvider_IsOneInstancePerWheel()
    {
        using var wheel = new TimerWheel(new ManualClock());
        using var other = new TimerWheel(new ManualClock());
        Assert.Same(wheel.AsTimeProvider(), wheel.AsTimeProvider());
        Assert.NotSame(wheel.AsTimeProvider(), other.AsTimeProvider());
        Assert.Same(TimerWheel.Default.AsTimeProvider(), TimerWheel.Default.AsTimeProvider());
        Assert.NotSame(TimeProvider.System, TimerWheel.Default.AsTimeProvider()); // its timers are the wheel's, not the BCL's
    }

    [Fact]
    public void Time_IsTheWheelsClocks_ManualClock()
    {
        var clock = new ManualClock(new DateTimeOffset(2030, 1, 2, 3, 4, 5, TimeSpan.Zero));
        using var wheel = new TimerWheel(clock);
        TimeProvider provider = wheel.AsTimeProvider();
        clock.Advance(Ms(1234.5));
        Assert.Equal(clock.GetUtcNow(), provider.GetUtcNow());
        Assert.Equal(clock.GetTimestamp(), provider.GetTimestamp());
        Assert.Equal(clock.TimestampFrequency, provider.TimestampFrequency);
        Assert.Equal(clock.LocalTimeZone, provider.LocalTimeZone);
        long start = provider.GetTimestamp();
        clock.Advance(Ms(250));
        Assert.Equal(Ms(250), provider.GetElapsedTime(start));
    }

    [Fact]
    public void Time_IsTheWheelsClocks_FakeTimeProvider()
    {
        var fake = new FakeTimeProvider(new DateTimeOffset(2031, 5, 6, 7, 8, 9, TimeSpan.Zero));
        fake.SetLocalTimeZone(TimeZoneInfo.CreateCustomTimeZone("tp55", TimeSpan.FromHours(3), "tp55", "tp55"));
        using var wheel = new TimerWheel(fake);
        TimeProvider provider = wheel.AsTimeProvider();
        fake.Advance(TimeSpan.FromMinutes(5));
        Assert.Equal(fake.GetUtcNow(), provider.GetUtcNow());
        Assert.Equal(fake.GetTimestamp(), provider.GetTimestamp());
        Assert.Equal(fake.TimestampFrequency, provider.TimestampFrequency);
        Assert.Equal("tp55", provider.LocalTimeZone.Id);
        Assert.Equal(TimeSpan.FromHours(3), provider.GetLocalNow().Offset);

        // Its timers are the wheel's, which the fake clock drives.
        int fired = 0;
        using ITimer timer = provider.CreateTimer(_ => fired++, null, Ms(10), Infinite);
        Assert.Equal(1, wheel.PendingCount);
        fake.Advance(Ms(9));
        Assert.Equal(0, fired);
        fake.Advance(Ms(1));
        Assert.Equal(1, fired);
    }

    [Fact]
    public void Time_IsTheWheelsClocks_SystemClock()
    {
        TimeProvider provider = TimerWheel.Default.AsTimeProvider();
        Assert.Equal(TimeProvider.System.TimestampFrequency, provider.TimestampFrequency);
        Assert.Equal(TimeProvider.System.LocalTimeZone, provider.LocalTimeZone);
        DateTimeOffset before = TimeProvider.System.GetUtcNow();
        long stamp = provider.GetTimestamp();
        DateTimeOffset now = provider.GetUtcNow();
        DateTimeOffset after = TimeProvider.System.GetUtcNow();
        Assert.InRange(now, before, after);
        Assert.InRange(stamp, 1, TimeProvider.System.GetTimestamp());
    }

    [Fact]
    public void TaskDelay_OnManualClock_CompletesWhenTheClockReachesIt()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        Task delay = Task.Delay(Ms(10), wheel.AsTimeProvider());
        Assert.Equal(1, wheel.PendingCount);
        clock.Advance(Ms(9));
        Assert.False(delay.IsCompleted, "early");
        clock.Advance(Ms(1));
        Assert.True(delay.IsCompletedSuccessfully);
        Assert.Equal(0, wheel.PendingCount);
    }

    [Fact]
    public void TaskDelay_OnManualClock_CanceledByItsToken_LeavesNothingInTheWheel()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var cts = new CancellationTokenSource();
        Task delay = Task.Delay(Ms(10), wheel.AsTimeProvider(), cts.Token);
        cts.Cancel();
        Assert.True(delay.IsCanceled);
        clock.Advance(Ms(1)); // a pass lets go of the disposed timer
        Assert.Equal(0, wheel.PendingCount);
    }

    [Fact]
    public void CancellationTokenSource_OnManualClock_CancelsAtItsTimeout_AndCancelAfterMovesIt()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var cts = new CancellationTokenSource(Ms(30), wheel.AsTimeProvider());
        clock.Advance(Ms(20));
        Assert.False(cts.IsCancellationRequested);
        cts.CancelAfter(Ms(30)); // an idle timeout pushed back: due at 50 ms now
        clock.Advance(Ms(29));
        Assert.False(cts.IsCancellationRequested, "fired at the old timeout or early");
        cts.CancelAfter(Ms(5)); // pulled forward: 54 ms
        clock.Advance(Ms(4));
        Assert.False(cts.IsCancellationRequested);
        clock.Advance(Ms(1));
        Assert.True(cts.IsCancellationRequested);
        Assert.Equal(0, wheel.PendingCount);
    }

    [Fact]
    public void CancellationTokenSource_DisposedBeforeItsTimeout_LeavesNothingInTheWheel()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var sources = new List<CancellationTokenSource>();
        for (int i = 0; i < 100; i++)
        {
            sources.Add(new CancellationTokenSource(Ms(100 + i), wheel.AsTimeProvider()));
        }
        Assert.Equal(100, wheel.PendingCount);
        foreach (CancellationTokenSource source in sources)
        {
            source.Dispose();
        }
        clock.Advance(Ms(1));
        Assert.Equal(0, wheel.PendingCount);
        clock.Advance(Ms(500));
        Assert.All(sources, s => Assert.False(s.IsCancellationRequested));
    }

    [Fact]
    public async Task PeriodicTimer_OnManualClock_TicksEachPeriod()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var periodic = new PeriodicTimer(Ms(10), wheel.AsTimeProvider());
        for (int tick = 1; tick <= 3; tick++)
        {
            ValueTask<bool> next = periodic.WaitForNextTickAsync();
            clock.Advance(Ms(9));
            Assert.False(next.IsCompleted, $"tick {tick} early");
            clock.Advance(Ms(1));
            Assert.True(next.IsCompleted, $"tick {tick} not at its period");
            Assert.True(await next);
        }
        periodic.Dispose();
        Assert.False(await periodic.WaitForNextTickAsync());
        clock.Advance(Ms(1));
        Assert.Equal(0, wheel.PendingCount);
    }

    [Fact]
    public void WaitAsync_OnManualClock_TimesOutWhenTheClockReachesIt()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var never = new TaskCompletionSource<int>();
        Task<int> waiting = never.Task.WaitAsync(Ms(15), wheel.AsTimeProvider());
        clock.Advance(Ms(14));
        Assert.False(waiting.IsCompleted);
        clock.Advance(Ms(1));
        Assert.True(waiting.IsFaulted);
        Assert.IsType<TimeoutException>(waiting.Exception!.InnerException);

        Task<int> answered = never.Task.WaitAsync(Ms(15), wheel.AsTimeProvider());
        never.SetResult(7);
        Assert.Equal(7, answered.Result);
        clock.Advance(Ms(1));
        Assert.Equal(0, wheel.PendingCount);
    }

    [Fact]
    public async Task BclConsumers_OnTheSystemClock_Work()
    {
        TimeProvider provider = TimerWheel.Default.AsTimeProvider();
        long start = provider.GetTimestamp();
        await TestUtil.WithTimeout(Task.Delay(Ms(20), provider));
        Assert.True(provider.GetElapsedTime(start) >= Ms(20), "Task.Delay early");

        using var cts = new CancellationTokenSource(Ms(20), provider);
        await TestUtil.WithTimeout(Task.Delay(Infinite, cts.Token).ContinueWith(_ => { }, TaskScheduler.Default));
        Assert.True(cts.IsCancellationRequested);

        using var periodic = new PeriodicTimer(Ms(5), provider);
        for (int i = 0; i < 3; i++)
        {
            Assert.True(await TestUtil.WithTimeout(periodic.WaitForNextTickAsync().AsTask()));
        }

        var never = new TaskCompletionSource<int>();
        await Assert.ThrowsAsync<TimeoutException>(() => TestUtil.WithTimeout(never.Task.WaitAsync(Ms(10), provider)));

        // A wheel of its own on the system clock, disposed with a timer pending: the timer's Change says false.
        var wheel = new TimerWheel(TimeProvider.System);
        ITimer timer = wheel.AsTimeProvider().CreateTimer(_ => { }, null, TimeSpan.FromMinutes(10), Infinite);
        wheel.Dispose();
        Assert.False(timer.Change(Ms(1), Infinite));
        timer.Dispose();
        await timer.DisposeAsync();
    }

    /// <summary>One operation on an <see cref="ITimer"/>, and what it gave: a result, or an exception's type and parameter.</summary>
    private static string Outcome(Func<object?> operation)
    {
        try
        {
            return "returned " + (operation() ?? "void");
        }
        catch (ArgumentException ex)
        {
            return "threw " + ex.GetType().Name + "(" + ex.ParamName + ")";
        }
        catch (Exception ex)
        {
            return "threw " + ex.GetType().Name;
        }
    }

    public static IEnumerable<object[]> Scripts() =>
    [
        ["change(5,∞)"],
        ["change(∞,∞)"],
        ["change(0,0)"],
        ["change(5,3)", "change(∞,3)"],
        ["change(-2,∞)"],
        ["change(5,-2)"],
        ["change(max,∞)"],
        ["change(max+1,∞)"],
        ["change(5,max+1)"],
        ["dispose", "change(5,∞)"],
        ["dispose", "change(∞,∞)"],
        ["dispose", "dispose", "change(5,∞)"],
        ["dispose", "disposeasync", "change(0,0)"],
        ["disposeasync", "dispose", "change(5,3)"],
        ["dispose", "change(-2,∞)"],
        ["dispose", "change(max+1,∞)"],
        ["change(∞,∞)", "dispose", "change(5,∞)"],
    ];

    /// <summary>
    /// Each script of Change, Dispose and DisposeAsync calls, on a timer of <see cref="TimeProvider.System"/> and on one of
    /// the wheel's provider, created with the same arguments: every step returns the same or throws the same exception
    /// for the same parameter (due times and periods in whole milliseconds: fractions are where the two differ, below).
    /// </summary>
    [Theory]
    [MemberData(nameof(Scripts))]
    public void ChangeAndDispose_AnswerAsTimeProviderSystems(params string[] script)
    {
        using var wheel = new TimerWheel(TimeProvider.System);
        foreach (TimeSpan due in new[] { TimeSpan.FromMinutes(10), Infinite })
        {
            ITimer bcl = TimeProvider.System.CreateTimer(_ => { }, null, due, Infinite);
            ITimer ours = wheel.AsTimeProvider().CreateTimer(_ => { }, null, due, Infinite);
            try
            {
                foreach (string step in script)
                {
                    Assert.Equal(Outcome(() => Apply(bcl, step)), Outcome(() => Apply(ours, step)));
                }
            }
            finally
            {
                bcl.Dispose();
                ours.Dispose();
            }
        }
    }

    public static IEnumerable<object[]> BadCreations() =>
    [
        [false, 5.0, -1.0],
        [true, -2.0, -1.0],
        [true, 5.0, -2.0],
        [true, 4294967295.0, -1.0],
        [true, 5.0, 4294967295.0],
        [true, 4294967294.0, 4294967294.0],
    ];

    /// <summary>CreateTimer's checks side by side with <see cref="TimeProvider.System"/>'s (-1 ms is infinite).</summary>
    [Theory]
    [MemberData(nameof(BadCreations))]
    public void CreateTimer_ChecksItsArgumentsAsTimeProviderSystem(bool withCallback, double dueMs, double periodMs)
    {
        using var wheel = new TimerWheel(TimeProvider.System);
        TimerCallback? callback = withCallback ? _ => { } : null;
        TimeSpan due = dueMs == -1 ? Infinite : Ms(dueMs);
        TimeSpan period = periodMs == -1 ? Infinite : Ms(periodMs);
        var made = new List<ITimer>();
        string Create(TimeProvider provider)
            => Outcome(() =>
            {
                made.Add(provider.CreateTimer(callback!, null, due, period));
                return "a timer";
            });
        try
        {
            Assert.Equal(Create(TimeProvider.System), Create(wheel.AsTimeProvider()));
        }
        finally
        {
            made.ForEach(t => t.Dispose());
        }
        TestUtil.SpinUntil(() => wheel.PendingCount == 0); // the wheel's thread lets go of a disposed timer after the call

    }

    /// <summary>
    /// Where the two differ, as documented: the BCL truncates a span to whole milliseconds before checking it, the wheel
    /// rounds it up (never early) and refuses a negative one other than infinite, with a message naming the range.
    /// </summary>
    [Fact]
    public void FractionalMilliseconds_AreRoundedUp_AndSmallNegativesRefused()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        int fired = 0;
        using ITimer timer = wheel.AsTimeProvider().CreateTimer(_ => fired++, null, Ms(1.5), Infinite);
        clock.Advance(Ms(1));
        Assert.Equal(0, fired); // the BCL's would be due at 1 ms
        clock.Advance(Ms(1));
        Assert.Equal(1, fired);

        var refused = Assert.Throws<ArgumentOutOfRangeException>(() => timer.Change(Ms(-0.5), Infinite));
        Assert.Equal("dueTime", refused.ParamName);
        Assert.Contains("Timeout.InfiniteTimeSpan", refused.Message, StringComparison.Ordinal);
        using ITimer bcl = TimeProvider.System.CreateTimer(_ => { }, null, Infinite, Infinite);
        Assert.True(bcl.Change(Ms(-1.5), Infinite)); // the BCL takes it as infinite
    }

    private static object? Apply(ITimer timer, string step)
    {
        static TimeSpan Span(string s) => s switch
        {
            "∞" => Timeout.InfiniteTimeSpan,
            "max" => TimerWheel.MaxDelay,
            "max+1" => TimerWheel.MaxDelay + TimeSpan.FromMilliseconds(1),
            _ => Ms(double.Parse(s, System.Globalization.CultureInfo.InvariantCulture)),
        };
        switch (step)
        {
            case "dispose":
                timer.Dispose();
                return null;
            case "disposeasync":
                ValueTask disposing = timer.DisposeAsync();
                Assert.True(disposing.IsCompleted, "DisposeAsync of a timer with no callback running completes at once");
                disposing.GetAwaiter().GetResult();
                return null;
            default:
                string[] args = step["change(".Length..^1].Split(',');
                return timer.Change(Span(args[0]), Span(args[1]));
        }
    }

    private static readonly AsyncLocal<string?> s_local = new();

    [Fact]
    public void Callback_RunsInTheCreatorsExecutionContext_ManualClock()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var seen = new List<string?>();
        s_local.Value = "creator";
        using ITimer timer = wheel.AsTimeProvider().CreateTimer(_ =>
        {
            seen.Add(s_local.Value);
            s_local.Value = "callback"; // stays inside the callback's context
        }, null, Ms(1), Ms(1));
        s_local.Value = "advancer";
        clock.Advance(Ms(1));
        clock.Advance(Ms(1));
        Assert.Equal(new[] { "creator", "creator" }, seen);
        Assert.Equal("advancer", s_local.Value);
        s_local.Value = null;
    }

    [Fact]
    public void Callback_WithFlowSuppressed_RunsInTheFiringThreadsContext_ManualClock()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        string? seen = "unset";
        s_local.Value = "creator";
        ITimer timer;
        using (ExecutionContext.SuppressFlow())
        {
            timer = wheel.AsTimeProvider().CreateTimer(_ => seen = s_local.Value, null, Ms(1), Infinite);
        }
        s_local.Value = "advancer";
        clock.Advance(Ms(1));
        Assert.Equal("advancer", seen); // nothing captured: as is, on the thread that fires it (as FakeTimeProvider's)
        timer.Dispose();
        s_local.Value = null;
    }

    [Fact]
    public async Task Callback_RunsInTheCreatorsExecutionContext_SystemClock_AsTimeProviderSystems()
    {
        var seen = new TaskCompletionSource<(string? Bcl, string? Ours)>();
        string? bclSeen = null;
        using var bclFired = new ManualResetEventSlim();
        s_local.Value = "creator";
        using ITimer bcl = TimeProvider.System.CreateTimer(_ => { bclSeen = s_local.Value; bclFired.Set(); }, null, Ms(1), Infinite);
        using ITimer ours = TimerWheel.Default.AsTimeProvider().CreateTimer(_ =>
        {
            bclFired.Wait(TimeSpan.FromSeconds(10));
            seen.TrySetResult((bclSeen, s_local.Value));
        }, null, Ms(1), Infinite);
        s_local.Value = null;
        (string? b, string? o) = await TestUtil.WithTimeout(seen.Task);
        Assert.Equal("creator", b);
        Assert.Equal(b, o);
    }

    [Fact]
    public void Dispose_NoCallbackStartsAfterItReturns_EvenOneTheWheelHadTaken()
    {
        // A callback of a timer that another one's callback disposes, both due in the same pass: the wheel has taken both
        // (they run in deadline order on the thread that advances the clock), but the second never starts.
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        TimeProvider provider = wheel.AsTimeProvider();
        int secondRan = 0;
        ITimer? second = null;
        using ITimer first = provider.CreateTimer(_ => second!.Dispose(), null, Ms(1), Infinite);
        second = provider.CreateTimer(_ => secondRan++, null, Ms(2), Infinite);
        clock.Advance(Ms(5));
        Assert.Equal(0, secondRan);
        Assert.False(second.Change(Ms(1), Infinite));
    }

    /// <summary>
    /// A provider timer due in 1 ms whose callback sets <paramref name="entered"/> and then blocks until
    /// <paramref name="release"/> is set (at most 30 s): a callback that is running while the test acts.
    /// </summary>
    internal static ITimer CreateBlockingTimer(TimerWheel wheel, ManualResetEventSlim entered, ManualResetEventSlim release)
        => wheel.AsTimeProvider().CreateTimer(_ =>
        {
            entered.Set();
            release.Wait(TimeSpan.FromSeconds(30));
        }, null, Ms(1), Infinite);

    [Fact]
    public async Task DisposeAsync_CompletesWhenTheRunningCallbackEnds()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var entered = new ManualResetEventSlim();
        using var release = new ManualResetEventSlim();
        ITimer timer = CreateBlockingTimer(wheel, entered, release);
        Task advancing = Task.Run(() => clock.Advance(Ms(1)));
        Assert.True(entered.Wait(TimeSpan.FromSeconds(30)));
        ValueTask disposing = timer.DisposeAsync();
        Assert.False(disposing.IsCompleted, "completed while the callback runs");
        Assert.False(timer.Change(Ms(1), Infinite));
        ValueTask again = timer.DisposeAsync();
        release.Set();
        await TestUtil.WithTimeout(disposing.AsTask());
        await TestUtil.WithTimeout(again.AsTask());
        await TestUtil.WithTimeout(advancing);
        Assert.True(timer.DisposeAsync().IsCompleted);
    }

    [Fact]
    public void CreateTimer_BadInputAndDisposedWheel_ThrowClearly()
    {
        var wheel = new TimerWheel(new ManualClock());
        TimeProvider provider = wheel.AsTimeProvider();
        Assert.Equal("callback", Assert.Throws<ArgumentNullException>(() => provider.CreateTimer(null!, null, Ms(1), Infinite)).ParamName);
        Assert.Equal("period", Assert.Throws<ArgumentOutOfRangeException>(() => provider.CreateTimer(_ => { }, null, Ms(1), Ms(-5))).ParamName);
        ITimer pending = provider.CreateTimer(_ => { }, null, Ms(1), Infinite);
        wheel.Dispose();
        var ex = Assert.Throws<ObjectDisposedException>(() => provider.CreateTimer(_ => { }, null, Ms(1), Infinite));
        Assert.Contains("TimerWheel", ex.Message, StringComparison.Ordinal);
        Assert.False(pending.Change(Ms(1), Infinite)); // ended by the wheel: false, as after its own Dispose
        Assert.Throws<ArgumentOutOfRangeException>(() => pending.Change(Ms(-5), Infinite));
        pending.Dispose();
        pending.Dispose();
        Assert.Equal(provider.GetTimestamp(), ((ManualClock)wheel.TimeProvider).GetTimestamp()); // the time still reads
    }

    [Fact]
    public void DisposedTimer_IsNotHeldByTheWheel_NorIsAStoppedOne()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        TimeProvider provider = wheel.AsTimeProvider();
        WeakReference disposedState = CreateAndDrop(provider, dispose: true, due: TimeSpan.FromMinutes(1), out WeakReference disposedTimer);
        WeakReference stoppedState = CreateAndDrop(provider, dispose: false, due: Infinite, out WeakReference stoppedTimer);
        clock.Advance(Ms(1)); // the wheel's pass lets go of the disposed timer's node
        Assert.Equal(0, TestUtil.CountAliveAfterCollection(new[] { disposedState, disposedTimer, stoppedState, stoppedTimer }));
    }

    [Fact]
    public void ArmedTimer_NeverDisposed_IsHeldUntilItFires_AsTimeProviderSystems()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        int fired = 0;
        WeakReference state = CreateAndDrop(wheel.AsTimeProvider(), dispose: false, due: Ms(10), out WeakReference timer, () => fired++);
        Assert.Equal(2, TestUtil.CountAliveAfterCollection(new[] { state, timer }));
        clock.Advance(Ms(10));
        Assert.Equal(1, fired);
        Assert.Equal(0, TestUtil.CountAliveAfterCollection(new[] { state, timer }));
    }

    [System.Runtime.CompilerServices.MethodImpl(System.Runtime.CompilerServices.MethodImplOptions.NoInlining)]
    private static WeakReference CreateAndDrop(TimeProvider provider, bool dispose, TimeSpan due, out WeakReference timerReference, Action? onFire = null)
    {
        var state = new object();
        ITimer timer = provider.CreateTimer(_ => onFire?.Invoke(), state, due, Infinite);
        if (dispose)
        {
            timer.Dispose();
        }
        timerReference = new WeakReference(timer);
        return new WeakReference(state);
    }
}

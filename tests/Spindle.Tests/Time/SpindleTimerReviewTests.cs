using System;
using System.Collections.Generic;
using System.Linq;
using System.Threading;

namespace SpindleLib.Tests.Time;

/// <summary>
/// An adversarial review of <see cref="SpindleTimer"/> (review54): each test here failed before the commit that added it.
/// </summary>
public class SpindleTimerReviewTests
{
    private static TimeSpan Ms(long ms) => TimeSpan.FromMilliseconds(ms);

    private static readonly Action<object?> Record = static s =>
    {
        var (order, name) = ((List<string>, string))s!;
        order.Add(name);
    };

    /// <summary>
    /// Callback timers changed since the last pass (here: created while the provider's thread was late), on a wheel that
    /// held nothing else, fire in deadline order, and after a delay due before them, as a <see cref="ManualClock"/>'s
    /// callbacks are documented to ("one at a time, in deadline order"). The change inbox is a stack, and the pass used
    /// to move an empty shard's time to now before settling it, so every one was already due and fired at once, newest
    /// first, before the delays of the same pass joined: B (5 ms), A (3 ms), then the delay (1 ms).
    /// </summary>
    [Fact]
    public void ChangedTimers_OnAnEmptyWheel_FireInDeadlineOrder_WithTheDelaysOfTheSamePass()
    {
        var clock = new DeferredClock();
        using var wheel = new TimerWheel(clock);
        var order = new List<string>();
        wheel.Delay(1).ContinueWithForTest(() => order.Add("delay 1"));
        using SpindleTimer a = wheel.CreateTimer(Record, (order, "timer 3"), Ms(3));
        using SpindleTimer b = wheel.CreateTimer(Record, (order, "timer 5"), Ms(5));
        using SpindleTimer c = wheel.CreateTimer(Record, (order, "timer 4"), Ms(4));
        clock.MoveWithoutFiring(Ms(10)); // the provider's thread is late: one pass covers all four
        clock.RunDue();
        Assert.Equal(new[] { "delay 1", "timer 3", "timer 4", "timer 5" }, order);
    }

    /// <summary>
    /// Timers changed to the same tick fire in the order they were changed (as delays due at the same millisecond fire in
    /// the order they were started), whether or not the wheel held other timers: the stack's newest used to fire first.
    /// </summary>
    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public void ChangedTimers_DueAtOneTick_FireInTheOrderTheyWereChanged(bool wheelHoldsAnother)
    {
        var clock = new DeferredClock();
        using var wheel = new TimerWheel(clock);
        var order = new List<string>();
        using SpindleTimer far = wheel.CreateTimer(Record, (order, "far"), wheelHoldsAnother ? Ms(1000) : Timeout.InfiniteTimeSpan);
        clock.RunDue();
        using SpindleTimer first = wheel.CreateTimer(Record, (order, "first"), Ms(2));
        using SpindleTimer second = wheel.CreateTimer(Record, (order, "second"), Ms(2));
        using SpindleTimer third = wheel.CreateTimer(Record, (order, "third"), Ms(2));
        clock.MoveWithoutFiring(Ms(10));
        clock.RunDue();
        Assert.Equal(new[] { "first", "second", "third" }, order);
    }

    /// <summary>
    /// A timer that the wheel's Dispose ended (armed, pushed back, or stopped) refuses a later Change with the message that
    /// names the wheel, never with the one for a timer its user disposed (which tells the user to stop it with Change
    /// instead of disposing it: advice for a mistake they did not make). The armed ones' nodes were recycled by the
    /// wheel's Dispose, which lost what had ended them. The user's Dispose after that is quiet, and lets the node go to the
    /// pool; a copy of the handle then acts on nothing.
    /// </summary>
    [Fact]
    public void WheelDispose_ALaterChangeOfAnyOfItsTimers_NamesTheWheel_AndTheUsersDisposeLetsTheNodeGo()
    {
        var clock = new ManualClock();
        var wheel = new TimerWheel(clock);
        var order = new List<string>();
        SpindleTimer armed = wheel.CreateTimer(Record, (order, "armed"), Ms(10), Ms(10));
        SpindleTimer pushed = wheel.CreateTimer(Record, (order, "pushed"), Ms(10));
        pushed.Change(Ms(500), Timeout.InfiniteTimeSpan);
        SpindleTimer pulled = wheel.CreateTimer(Record, (order, "pulled"), Ms(500));
        SpindleTimer stopped = wheel.CreateTimer(Record, (order, "stopped"), Timeout.InfiniteTimeSpan);
        wheel.Dispose();
        clock.Advance(Ms(1000));
        Assert.Empty(order);
        foreach (SpindleTimer timer in new[] { armed, pushed, pulled, stopped })
        {
            var ex = Assert.Throws<ObjectDisposedException>(() => timer.Change(Ms(1), Timeout.InfiniteTimeSpan));
            Assert.Contains("TimerWheel has been disposed", ex.Message, StringComparison.Ordinal);
        }
        foreach (SpindleTimer timer in new[] { armed, pushed, pulled, stopped })
        {
            SpindleTimer copy = timer;
            timer.Dispose();
            copy.Dispose(); // idempotent
            var ex = Assert.Throws<ObjectDisposedException>(() => copy.Change(Ms(1), Timeout.InfiniteTimeSpan));
            Assert.DoesNotContain("TimerWheel has been disposed", ex.Message, StringComparison.Ordinal);
        }
    }

    /// <summary>
    /// Users dispose (and create, and change) timers while their wheel is disposed: each node is recycled once, by whichever
    /// of the user's Dispose and the wheel's last let-go comes second (a Debug build asserts a second recycle), so the
    /// pool never hands one node to two timers: afterwards, 3,000 new timers on a fresh wheel each fire exactly once, with
    /// their own state.
    /// </summary>
    [Fact]
    public void UsersDisposeRacingTheWheelsDispose_RecyclesEachNodeOnce()
    {
        var deadline = DateTime.UtcNow + TimeSpan.FromSeconds(TestUtil.StressTimeout(8));
        for (int round = 0; round < TestUtil.Stress(30) && DateTime.UtcNow < deadline; round++)
        {
            var wheel = new TimerWheel(TimeProvider.System);
            var threads = new Thread[3];
            int wrong = 0;
            using var started = new CountdownEvent(threads.Length);
            for (int t = 0; t < threads.Length; t++)
            {
                int seed = round * 7 + t;
                threads[t] = new Thread(() =>
                {
                    var random = new Random(seed);
                    var timers = new SpindleTimer[16];
                    try
                    {
                        for (int i = 0; i < timers.Length; i++)
                        {
                            timers[i] = wheel.CreateTimer(static _ => { }, null, Ms(random.Next(3)));
                        }
                        started.Signal();
                        for (int n = 0; ; n++)
                        {
                            int i = random.Next(timers.Length);
                            switch (random.Next(4))
                            {
                                case 0:
                                    timers[i].Dispose();
                                    timers[i] = wheel.CreateTimer(static _ => { }, null, Ms(random.Next(3)));
                                    break;
                                case 1:
                                    timers[i].Change(Ms(random.Next(3)), Timeout.InfiniteTimeSpan);
                                    break;
                                case 2:
                                    timers[i].Change(Ms(1 + random.Next(3)), Ms(1));
                                    break;
                                default:
                                    timers[i].Change(Ms(50_000), Timeout.InfiniteTimeSpan); // pushed back
                                    break;
                            }
                        }
                    }
                    catch (ObjectDisposedException)
                    {
                    }
                    foreach (SpindleTimer timer in timers)
                    {
                        if (timer != default)
                        {
                            timer.Dispose();
                        }
                    }
                    // The nodes this thread's Dispose calls recycled are in its own pool: new timers get them, and each must
                    // be this use's alone (a node recycled while the disposed wheel still held it would be ended by it).
                    var clock = new ManualClock();
                    using var fresh = new TimerWheel(clock);
                    var fired = new int[timers.Length];
                    for (int i = 0; i < timers.Length; i++)
                    {
                        timers[i] = fresh.CreateTimer(static s => Interlocked.Increment(ref ((int[])((object[])s!)[0])[(int)((object[])s!)[1]]), new object[] { fired, i }, Ms(1000));
                    }
                    Thread.Sleep(2); // the disposed wheel's last passes run meanwhile
                    for (int i = 0; i < timers.Length; i++)
                    {
                        timers[i].Change(Ms(1 + i % 3), Timeout.InfiniteTimeSpan);
                    }
                    clock.Advance(Ms(5));
                    if (Array.Exists(fired, f => f != 1))
                    {
                        Interlocked.Increment(ref wrong);
                    }
                    foreach (SpindleTimer timer in timers)
                    {
                        timer.Dispose();
                    }
                });
                threads[t].Start();
            }
            started.Wait();
            Thread.Sleep(random(round));
            wheel.Dispose();
            foreach (Thread t in threads)
            {
                Assert.True(t.Join(TimeSpan.FromSeconds(TestUtil.StressTimeout(30))), "a thread never saw the wheel's disposal");
            }
            Assert.True(SpinWait.SpinUntil(() => wheel.PendingCount == 0, TimeSpan.FromSeconds(10)), $"{wheel.PendingCount} timers left in a disposed wheel");
            Assert.Equal(0, Volatile.Read(ref wrong));
        }

        var clock = new ManualClock();
        using var fresh = new TimerWheel(clock);
        const int Count = 3000;
        var fires = new int[Count];
        var handles = new SpindleTimer[Count];
        for (int i = 0; i < Count; i++)
        {
            handles[i] = fresh.CreateTimer(static s => Interlocked.Increment(ref ((int[])((object[])s!)[0])[(int)((object[])s!)[1]]), new object[] { fires, i }, Ms(1 + i % 7));
        }
        clock.Advance(Ms(10));
        Assert.All(fires, f => Assert.Equal(1, f));
        Assert.Equal(Count, new HashSet<SpindleTimer>(handles).Count);
        foreach (SpindleTimer handle in handles)
        {
            handle.Dispose();
        }

        static int random(int round) => round % 4;
    }

    /// <summary>
    /// On the system clock, a timer pulled forward to now from another thread while the wheel's thread sleeps towards the
    /// timer's old deadline (60 s away) fires promptly, not then: the Change's push lowers the wheel's wake-up and kicks its
    /// thread. Also when the timer was first stopped and the pull forward finds it still in the change inbox (its Change is
    /// then one CAS that wakes nothing: the stop's own kick brings the pass).
    /// </summary>
    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public void SystemClock_PulledForwardWhileTheThreadSleeps_FiresPromptly(bool stoppedFirst)
    {
        using var wheel = new TimerWheel(TimeProvider.System);
        using var fired = new ManualResetEventSlim();
        using SpindleTimer timer = wheel.CreateTimer(static s => ((ManualResetEventSlim)s!).Set(), fired, TimeSpan.FromSeconds(60));
        Assert.True(SpinWait.SpinUntil(() => wheel.PendingCount == 1, TimeSpan.FromSeconds(10)), "the timer was never linked");
        Thread.Sleep(20); // the thread now sleeps towards the timer's deadline
        var changer = new Thread(() =>
        {
            if (stoppedFirst)
            {
                timer.Change(Timeout.InfiniteTimeSpan, Timeout.InfiniteTimeSpan);
            }
            timer.Change(TimeSpan.Zero, Timeout.InfiniteTimeSpan);
        });
        changer.Start();
        changer.Join();
        Assert.True(fired.Wait(TimeSpan.FromSeconds(TestUtil.StressTimeout(5))), "a pull forward to now waited for the old deadline");
    }

    /// <summary>
    /// A timer pushed back to <see cref="TimerWheel.MaxDelay"/> (one CAS) is re-linked when the wheel reaches its old
    /// slot, stays counted, and fires at the new tick, not a millisecond before (held: kept as coverage of the lazy
    /// re-link at the far end of the wheel's range).
    /// </summary>
    [Fact]
    public void PushedBackToMaxDelay_IsRelinkedAtItsOldTick_AndFiresAtTheNewOne()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        int fired = 0;
        using SpindleTimer timer = wheel.CreateTimer(_ => fired++, null, Ms(10));
        clock.Advance(Ms(5));
        timer.Change(TimerWheel.MaxDelay, Timeout.InfiniteTimeSpan); // due at 5 ms + MaxDelay
        clock.Advance(Ms(5)); // the old tick: re-linked there
        Assert.Equal(0, fired);
        Assert.Equal(1, wheel.PendingCount);
        clock.Advance(TimerWheel.MaxDelay - Ms(6));
        Assert.Equal(0, fired);
        clock.Advance(Ms(1));
        Assert.Equal(1, fired);
        Assert.Equal(0, wheel.PendingCount);
    }

    private sealed class Link
    {
        public SpindleTimer Timer;
        public int Id;
        public required List<int> Log;
        public required TimerWheel Wheel;
    }

    /// <summary>
    /// A one-shot callback that disposes its own timer and creates the next one, inside the wheel's pass on a
    /// <see cref="ManualClock"/>: the dispose recycles the node at once (the pass let go of it before the callback), the
    /// create rents it again from the same thread's pool, and each of the 51 links fires once, in order (held: kept as
    /// coverage of a node reused inside the pass that fired its previous use).
    /// </summary>
    [Fact]
    public void OneShotCallback_DisposesItsTimerAndCreatesTheNext_EachLinkFiresOnceInOrder()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var log = new List<int>();
        Action<object?> callback = null!;
        callback = s =>
        {
            var link = (Link)s!;
            link.Log.Add(link.Id);
            link.Timer.Dispose();
            if (link.Id < 50)
            {
                var next = new Link { Id = link.Id + 1, Log = link.Log, Wheel = link.Wheel };
                next.Timer = link.Wheel.CreateTimer(callback, next, Ms(link.Id % 3));
            }
        };
        var first = new Link { Log = log, Wheel = wheel };
        first.Timer = wheel.CreateTimer(callback, first, Ms(1));
        for (int i = 0; i < 200; i++)
        {
            clock.Advance(Ms(1));
        }
        Assert.Equal(Enumerable.Range(0, 51), log);
        Assert.Equal(0, wheel.PendingCount);
    }
}

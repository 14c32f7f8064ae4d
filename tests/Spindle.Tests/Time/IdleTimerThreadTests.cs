using System;
using System.Runtime.CompilerServices;
using System.Threading;
using Xunit;

namespace SpindleLib.Tests.Time;

/// <summary>
/// A wheel on the system clock is driven by a thread of its own, which roots it. An editor that starts and stops play
/// sessions in one process, each with a wheel of its own (so that disposing it cancels the session's timers), and a
/// session that ends without that Dispose, kept the wheel and its idle thread for the life of the process: 200
/// sessions, 200 "Spindle Timer" threads and 200 wheels (a user's review, /tmp/user7-wheels). A BCL timer that is not
/// scheduled is not rooted; now a timer thread with nothing planned ends after <c>ThreadTimerDriver.IdleExitMs</c>, and
/// the next timer starts another.
/// </summary>
[Collection(IdleTimerThreadCollection.Name)]
public class IdleTimerThreadTests
{
    /// <summary>Sets <c>ThreadTimerDriver.IdleExitMs</c> until the returned value is disposed.</summary>
    private static IdleExit WithIdleExit(int ms) => new(ms);

    private readonly struct IdleExit : IDisposable
    {
        private readonly int _old;

        public IdleExit(int ms)
        {
            _old = ThreadTimerDriver.IdleExitMs;
            ThreadTimerDriver.IdleExitMs = ms;
        }

        public void Dispose() => ThreadTimerDriver.IdleExitMs = _old;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    private static WeakReference UseAWheelAndDropIt()
    {
        var wheel = new TimerWheel(TimeProvider.System);
        for (int i = 0; i < 3; i++)
        {
            TestUtil.WithTimeout(wheel.Delay(1)).Wait();
        }
        return new WeakReference(wheel);
    }

    [Fact]
    public void AWheelOnTheSystemClock_DroppedWithoutDispose_IsCollectedOnceIdle()
    {
        using IdleExit idle = WithIdleExit(20);
        WeakReference[] wheels = new WeakReference[10];
        for (int i = 0; i < wheels.Length; i++)
        {
            wheels[i] = UseAWheelAndDropIt();
        }
        TestUtil.SpinUntil(() =>
        {
            GC.Collect();
            GC.WaitForPendingFinalizers();
            return Array.TrueForAll(wheels, w => !w.IsAlive);
        }, () => Array.FindAll(wheels, w => w.IsAlive).Length + " of 10 dropped wheels still alive (rooted by their timer threads)", seconds: 10);
    }

    [Fact]
    public void AWheelWhoseThreadEndedWhenIdle_StartsAnother_ForItsNextTimer()
    {
        using IdleExit idle = WithIdleExit(10);
        using var wheel = new TimerWheel(TimeProvider.System);
        var driver = (ThreadTimerDriver)wheel.Driver;
        for (int round = 0; round < 5; round++)
        {
            TestUtil.WithTimeout(wheel.Delay(2)).Wait();
            Assert.True(driver.ThreadCount <= 1, driver.ThreadCount + " threads");
            TestUtil.SpinUntil(() => driver.ThreadCount == 0, () => driver.ThreadCount + " threads", seconds: 10);
        }
        // A wheel with a timer pending keeps its thread (and so stays alive until the timer fires).
        using var cts = new CancellationTokenSource();
        SpindleTask far = wheel.Delay(TimeSpan.FromMinutes(10), cts.Token);
        TestUtil.SpinUntil(() => wheel.Describe() == "main: count=1 linked=1", wheel.Describe);
        Thread.Sleep(100); // ten idle periods: the thread must not end while the timer is pending (a check of absence)
        Assert.Equal(1, driver.ThreadCount);
        cts.Cancel();
        Assert.True(far.SuppressCancellationThrow().GetAwaiter().GetResult());
    }

    [Fact]
    public void TheDefaultWheelsThread_StaysWhenIdle()
    {
        var driver = (ThreadTimerDriver)TimerWheel.Default.Driver;
        TestUtil.WithTimeout(Spindle.Delay(1)).Wait(); // off the workers: the main shard, driven by the timer thread
        using IdleExit idle = WithIdleExit(5);
        TestUtil.WithTimeout(Spindle.Delay(1)).Wait();
        Thread.Sleep(100); // twenty idle periods of another wheel (a check of absence)
        Assert.Equal(1, driver.ThreadCount);
    }

#if DEBUG
    /// <summary>
    /// A timer started just as the idle thread gives its wheel up (after it cleared its claim, before it looked for a
    /// kick): the kick must not be lost. Either the kick starts a thread or the old one takes the wheel back; one thread
    /// goes on, and the timer fires.
    /// </summary>
    [Fact]
    public void ATimerStartedAsTheIdleThreadGivesUp_Fires_AndOneThreadGoesOn()
    {
        using IdleExit idle = WithIdleExit(5);
        using var wheel = new TimerWheel(TimeProvider.System);
        var driver = (ThreadTimerDriver)wheel.Driver;
        SpindleTask started = default;
        int armed = 0;
        int hooked = 0;
        ThreadTimerDriver.TestHookGivenUp = d =>
        {
            if (d == driver && Interlocked.Exchange(ref armed, 0) == 1)
            {
                started = wheel.Delay(1);
                Interlocked.Increment(ref hooked);
            }
        };
        try
        {
            for (int round = 0; round < 20; round++)
            {
                // Armed before the round's timer: under load the thread may go idle and give up before this thread
                // would have armed the hook after the timer, and then no thread is left to give up.
                Volatile.Write(ref armed, 1);
                TestUtil.WithTimeout(wheel.Delay(1)).Wait();
                TestUtil.SpinUntil(() => Volatile.Read(ref hooked) == round + 1, () => "hooked " + hooked, seconds: 10);
                TestUtil.WithTimeout(started).Wait();
                TestUtil.SpinUntil(() => driver.ThreadCount <= 1, () => driver.ThreadCount + " threads");
            }
        }
        finally
        {
            ThreadTimerDriver.TestHookGivenUp = null;
        }
    }

    /// <summary>
    /// Dispose as the idle thread gives its wheel up (after it cleared its claim, before it looked for a kick), and kicks
    /// after the Dispose (an insert that passed the disposed check just before it): every thread ends, and none is left
    /// waiting (review of stop 42; passed before its fix too).
    /// </summary>
    [Fact]
    public void DisposeAsTheIdleThreadGivesUp_ThenKicks_EveryThreadEnds()
    {
        using IdleExit idle = WithIdleExit(5);
        for (int round = 0; round < 10; round++)
        {
            var wheel = new TimerWheel(TimeProvider.System);
            var driver = (ThreadTimerDriver)wheel.Driver;
            int hooked = 0;
            ThreadTimerDriver.TestHookGivenUp = d =>
            {
                if (d == driver && Interlocked.Exchange(ref hooked, 1) == 0)
                {
                    // On the giving-up thread: it must still end, though the Dispose set its event (it takes the
                    // wheel back, then sees the wheel stopped).
                    wheel.Dispose();
                }
            };
            try
            {
                TestUtil.WithTimeout(wheel.Delay(1)).Wait();
                TestUtil.SpinUntil(() => Volatile.Read(ref hooked) == 1, () => "the thread never gave up", seconds: 10);
                TestUtil.SpinUntil(() => driver.ThreadCount == 0, () => driver.ThreadCount + " threads after Dispose", seconds: 10);
                Assert.Throws<ObjectDisposedException>(() => wheel.Delay(1));
                for (int k = 0; k < 3; k++)
                {
                    driver.Kick(); // a kick that raced the Dispose: a thread may start, and ends at once
                    TestUtil.SpinUntil(() => driver.ThreadCount == 0, () => driver.ThreadCount + " threads after a late kick", seconds: 10);
                }
            }
            finally
            {
                ThreadTimerDriver.TestHookGivenUp = null;
            }
        }
    }

    /// <summary>
    /// A timer thread that could not start (Thread.Start threw: out of memory, past a thread limit) left the wheel's claim
    /// taken with no thread behind it: the timer whose kick failed, and every later one, never fired, since every later
    /// kick found the claim taken (found by the review of stop 42: with idle exit a created wheel starts a thread after
    /// each quiet spell, not once). The failure is reported; the timer still fires, started by a later try: the pass that
    /// follows the failed kick (one failure), or the next timer's kick (a second failure, in that pass's try too).
    /// </summary>
    [Theory]
    [InlineData(false, 1)]
    [InlineData(false, 2)]
    [InlineData(true, 1)]
    [InlineData(true, 2)]
    public void AThreadThatCouldNotStart_IsStartedAgain_AndTheTimersFire(bool restart, int failures)
    {
        using IdleExit idle = WithIdleExit(10);
        using var wheel = new TimerWheel(TimeProvider.System);
        var driver = (ThreadTimerDriver)wheel.Driver;
        if (restart)
        {
            TestUtil.WithTimeout(wheel.Delay(1)).Wait();
            TestUtil.SpinUntil(() => driver.ThreadCount == 0, () => driver.ThreadCount + " threads", seconds: 10);
        }
        var failure = new OutOfMemoryException("review42: the timer thread could not start");
        int left = failures;
        ThreadTimerDriver.TestHookStartingThread = d =>
        {
            if (d == driver && Interlocked.Decrement(ref left) >= 0)
            {
                throw failure;
            }
        };
        try
        {
            var reports = UnobservedReports.Observe(e => e == failure, () =>
            {
                SpindleTask first = wheel.Delay(5);
                // Due later than the first: it lowers no wake time, so it kicks nothing once the first is planned.
                SpindleTask later = wheel.Delay(30);
                TestUtil.WithTimeout(first, 10).Wait();
                TestUtil.WithTimeout(later, 10).Wait();
            });
            Assert.Equal(failures, reports.Count);
            Assert.True(Volatile.Read(ref left) <= 0, "the hook failed fewer starts than planned");
        }
        finally
        {
            ThreadTimerDriver.TestHookStartingThread = null;
        }
        Assert.True(driver.ThreadCount <= 1, driver.ThreadCount + " threads");
        TestUtil.SpinUntil(() => driver.ThreadCount == 0, () => driver.ThreadCount + " threads", seconds: 10);
    }
#endif

    /// <summary>Timers started from several threads while the wheel's thread keeps ending and starting: every one fires.</summary>
    [Fact]
    public void TimersStartedWhileTheThreadComesAndGoes_AllFire()
    {
        using IdleExit idle = WithIdleExit(1);
        using var wheel = new TimerWheel(TimeProvider.System);
        var driver = (ThreadTimerDriver)wheel.Driver;
        int fired = 0;
        const int PerThread = 200;
        var threads = new Thread[2];
        for (int t = 0; t < threads.Length; t++)
        {
            int seed = t;
            threads[t] = new Thread(() =>
            {
                var random = new Random(seed);
                for (int i = 0; i < PerThread; i++)
                {
                    TestUtil.WithTimeout(wheel.Delay(1)).Wait();
                    Interlocked.Increment(ref fired);
                    Thread.SpinWait(random.Next(20_000)); // start the next one at a varying point of the thread's idle wait
                }
            });
            threads[t].Start();
        }
        foreach (Thread thread in threads)
        {
            thread.Join();
        }
        Assert.Equal(threads.Length * PerThread, fired);
        TestUtil.SpinUntil(() => driver.ThreadCount == 0, () => driver.ThreadCount + " threads");
    }
}

/// <summary>The idle-exit tests change <c>ThreadTimerDriver.IdleExitMs</c>, a static: they run one at a time.</summary>
[CollectionDefinition(Name, DisableParallelization = true)]
public sealed class IdleTimerThreadCollection
{
    public const string Name = "Idle timer thread";
}

using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Time;

/// <summary>
/// Several threads Change and Dispose shared callback timers (and create new ones in place of the disposed) while
/// another thread drives the wheel (<see cref="TimerChurnStress{TTimer}"/>, through <see cref="SpindleTimer"/>: a Change
/// of a disposed timer throws <see cref="ObjectDisposedException"/>). After Dispose returned, at most one callback of
/// that timer starts on a manual clock (the one the wheel had already taken); on the system clock the callbacks run on
/// the workers, where several taken callbacks may still be queued when Dispose returns, so that check does not apply.
/// </summary>
[Collection(SequentialCollection.Name)]
public class SpindleTimerStressTests
{
    private sealed class Churn : TimerChurnStress<SpindleTimer>
    {
        private static readonly Action<object?> s_callback = OnFire;

        protected override SpindleTimer Create(TimerWheel wheel, Cell cell, TimeSpan due) => wheel.CreateTimer(s_callback, cell, due);

        protected override bool Change(SpindleTimer timer, TimeSpan due)
        {
            try
            {
                timer.Change(due, Timeout.InfiniteTimeSpan);
                return true;
            }
            catch (ObjectDisposedException)
            {
                return false;
            }
        }

        protected override void Dispose(SpindleTimer timer, int way) => timer.Dispose();

        protected override int FiresAfterDisposeAllowed(bool manual) => manual ? 1 : int.MaxValue;
    }

    [Fact]
    public void ManualClock_ChangeDisposeAndFiringRace_NothingLostNothingTwice() => new Churn().Run(manual: true, TestUtil.Stress(40_000));

    [Fact]
    public void SystemClock_ChangeDisposeAndFiringRace_NothingLostNothingTwice() => new Churn().Run(manual: false, TestUtil.Stress(20_000));

    /// <summary>
    /// Threads keep moving their timers (Change pulls forward and re-arms go through the change inbox) while the wheel is
    /// disposed: every thread's next Change throws <see cref="ObjectDisposedException"/>, nothing fires once the disposal
    /// has settled, and nothing is left in the wheel, whether a Change landed before the disposing pass, in it, or after.
    /// </summary>
    [Fact]
    public void WheelDispose_WhileThreadsChangeTimers_EndsThemAll()
    {
        for (int round = 0; round < TestUtil.Stress(20); round++)
        {
            var wheel = new TimerWheel(TimeProvider.System);
            int fires = 0;
            var threads = new Thread[4];
            var ended = new bool[threads.Length];
            using var started = new CountdownEvent(threads.Length);
            for (int t = 0; t < threads.Length; t++)
            {
                int index = t;
                threads[t] = new Thread(() =>
                {
                    var timers = new SpindleTimer[8];
                    for (int i = 0; i < timers.Length; i++)
                    {
                        timers[i] = wheel.CreateTimer(_ => Interlocked.Increment(ref fires), null, TimeSpan.FromMilliseconds(i % 3));
                    }
                    started.Signal();
                    try
                    {
                        for (int n = 0; ; n++)
                        {
                            timers[n % timers.Length].Change(TimeSpan.FromMilliseconds(n % 3), Timeout.InfiniteTimeSpan);
                        }
                    }
                    catch (ObjectDisposedException)
                    {
                        ended[index] = true;
                    }
                    foreach (SpindleTimer timer in timers)
                    {
                        timer.Dispose(); // quiet after the wheel's Dispose
                    }
                });
                threads[t].Start();
            }
            started.Wait();
            Thread.Sleep(5);
            wheel.Dispose();
            foreach (Thread t in threads)
            {
                Assert.True(t.Join(TimeSpan.FromSeconds(TestUtil.StressTimeout(30))), "a thread's Change never saw the disposal");
            }
            Assert.All(ended, Assert.True);
            // A Change that raced the disposing pass asked for another (QueueChange); the thread holding the wheel's drive
            // (maybe its timer thread, finishing a pass it began) runs it, and may not have finished when the changers return.
            Assert.True(SpinWait.SpinUntil(() => wheel.PendingCount == 0, TimeSpan.FromSeconds(10)), $"{wheel.PendingCount} timers left in a disposed wheel");
            // Callbacks the wheel had taken before its Dispose may still be queued on the workers, for as long as a loaded
            // machine holds them off (a fixed 20 ms wait was outrun): the count must stop moving, not grow for ever.
            Assert.True(TestUtil.WaitUntilUnchanged(() => Volatile.Read(ref fires)), "callbacks went on starting after the wheel's Dispose");
        }
    }
}

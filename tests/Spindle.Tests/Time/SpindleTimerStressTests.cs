using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Time;

/// <summary>
/// Several threads Change and Dispose shared callback timers (and create new ones in place of the disposed) while
/// another thread drives the wheel. Checked in closed form: no timer fires more often than it was armed (each arming
/// fires at most once); after Dispose returned, at most one callback of that timer starts (the one the wheel had already
/// taken); once the changers stop, every live timer given a due time fires exactly once; and, all disposed, nothing is
/// left in the wheel. On a <see cref="SpindleTimerStressTests.Run"/> of the system clock the callbacks run on the workers,
/// where several taken callbacks may still be queued when Dispose returns, so only the other checks apply.
/// </summary>
[Collection(SequentialCollection.Name)]
public class SpindleTimerStressTests
{
    private sealed class Cell
    {
        public SpindleTimer Timer;
        public int Armings; // creations and Change calls that gave a due time and returned
        public int Fires;
        public int DisposeReturned;
        public int FiresAfterDispose;
    }

    private static readonly Action<object?> s_callback = static s =>
    {
        var cell = (Cell)s!;
        if (Volatile.Read(ref cell.DisposeReturned) != 0)
        {
            Interlocked.Increment(ref cell.FiresAfterDispose);
        }
        Interlocked.Increment(ref cell.Fires);
    };

    [Fact]
    public void ManualClock_ChangeDisposeAndFiringRace_NothingLostNothingTwice() => Run(manual: true);

    [Fact]
    public void SystemClock_ChangeDisposeAndFiringRace_NothingLostNothingTwice() => Run(manual: false);

    private static void Run(bool manual)
    {
        const int TimerCount = 64;
        const int Changers = 3;
        var clock = manual ? new ManualClock() : null;
        using var wheel = new TimerWheel(clock ?? TimeProvider.System);
        var cells = new Cell[TimerCount];
        var retired = new System.Collections.Concurrent.ConcurrentBag<Cell>();
        for (int i = 0; i < TimerCount; i++)
        {
            cells[i] = NewCell(wheel, TimeSpan.FromMilliseconds(1 + i % 5));
        }
        var stop = 0;
        Exception? failure = null;
        var driver = new Thread(() =>
        {
            while (Volatile.Read(ref stop) == 0)
            {
                if (clock is not null)
                {
                    clock.Advance(TimeSpan.FromMilliseconds(1));
                }
                else
                {
                    Thread.Sleep(1);
                }
            }
        });
        var changers = new Thread[Changers];
        int iterations = TestUtil.Stress(manual ? 40_000 : 20_000);
        for (int t = 0; t < Changers; t++)
        {
            int seed = t;
            changers[t] = new Thread(() =>
            {
                try
                {
                    var random = new Random(seed);
                    for (int n = 0; n < iterations; n++)
                    {
                        int i = random.Next(TimerCount);
                        Cell cell = Volatile.Read(ref cells[i]);
                        int op = random.Next(100);
                        if (op < 3)
                        {
                            // Retire it: this thread disposes it and puts a new timer in its place; others may still hold the old.
                            if (Interlocked.CompareExchange(ref cells[i], NewCell(wheel, TimeSpan.FromMilliseconds(random.Next(0, 4))), cell) is var seen && seen == cell)
                            {
                                cell.Timer.Dispose();
                                Volatile.Write(ref cell.DisposeReturned, 1);
                                retired.Add(cell);
                            }
                        }
                        else
                        {
                            TimeSpan due = op < 10 ? Timeout.InfiniteTimeSpan : TimeSpan.FromMilliseconds(random.Next(0, 6));
                            try
                            {
                                cell.Timer.Change(due, Timeout.InfiniteTimeSpan);
                                if (due != Timeout.InfiniteTimeSpan)
                                {
                                    Interlocked.Increment(ref cell.Armings);
                                }
                            }
                            catch (ObjectDisposedException)
                            {
                                Assert.True(Volatile.Read(ref cells[i]) != cell, "only a retired timer's handle is disposed");
                            }
                        }
                        if ((n & 63) == 0)
                        {
                            Thread.Yield();
                        }
                    }
                }
                catch (Exception ex)
                {
                    failure = ex;
                }
            });
        }
        driver.Start();
        foreach (Thread t in changers)
        {
            t.Start();
        }
        foreach (Thread t in changers)
        {
            Assert.True(t.Join(TimeSpan.FromSeconds(TestUtil.StressTimeout(60))), "a changer hung");
        }
        Volatile.Write(ref stop, 1);
        Assert.True(driver.Join(TimeSpan.FromSeconds(30)), "the driver hung");
        Assert.Null(failure);

        // Quiet now: let everything in flight land, then each live timer, given a due time, fires exactly once.
        Settle(clock, TimeSpan.FromMilliseconds(20));
        var before = new int[TimerCount];
        for (int i = 0; i < TimerCount; i++)
        {
            before[i] = Volatile.Read(ref cells[i].Fires);
            cells[i].Timer.Change(TimeSpan.FromMilliseconds(2), Timeout.InfiniteTimeSpan);
            cells[i].Armings++;
        }
        Settle(clock, TimeSpan.FromMilliseconds(20));
        if (clock is null)
        {
            SpinWait.SpinUntil(() => Array.TrueForAll(cells, c => Volatile.Read(ref c.Fires) > 0) && AllFiredOnce(cells, before), TimeSpan.FromSeconds(10));
        }
        for (int i = 0; i < TimerCount; i++)
        {
            Assert.Equal(before[i] + 1, Volatile.Read(ref cells[i].Fires));
        }
        foreach (Cell cell in cells)
        {
            cell.Timer.Dispose();
            Volatile.Write(ref cell.DisposeReturned, 1);
            retired.Add(cell);
        }
        Assert.Equal(0, wheel.PendingCount);
        Settle(clock, TimeSpan.FromMilliseconds(20));
        int armings = 0;
        int fires = 0;
        foreach (Cell cell in retired)
        {
            Assert.True(cell.Fires <= cell.Armings, $"a timer fired {cell.Fires} times for {cell.Armings} armings");
            if (manual)
            {
                Assert.True(cell.FiresAfterDispose <= 1, $"{cell.FiresAfterDispose} callbacks started after Dispose returned");
            }
            armings += cell.Armings;
            fires += cell.Fires;
        }
        Assert.True(fires > 0 && armings >= fires, $"fires {fires}, armings {armings}");
    }

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
            Thread.Sleep(20); // callbacks the wheel had taken before its Dispose may still be running on the workers
            int settled = Volatile.Read(ref fires);
            Thread.Sleep(30);
            Assert.Equal(settled, Volatile.Read(ref fires));
        }
    }

    private static bool AllFiredOnce(Cell[] cells, int[] before)
    {
        for (int i = 0; i < cells.Length; i++)
        {
            if (Volatile.Read(ref cells[i].Fires) < before[i] + 1)
            {
                return false;
            }
        }
        return true;
    }

    private static Cell NewCell(TimerWheel wheel, TimeSpan due)
    {
        var cell = new Cell { Armings = 1 };
        cell.Timer = wheel.CreateTimer(s_callback, cell, due);
        return cell;
    }

    private static void Settle(ManualClock? clock, TimeSpan time)
    {
        if (clock is not null)
        {
            clock.Advance(time);
        }
        else
        {
            Thread.Sleep(time * 5);
        }
    }
}

using System;
using System.Collections.Concurrent;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Time;

/// <summary>
/// Several threads Change and Dispose (or DisposeAsync) shared timers of <see cref="TimerWheel.AsTimeProvider"/>, and
/// create new ones in place of the disposed, while the wheel fires them. Checked: no timer fires more often than it was
/// armed (each arming fires at most once); no callback starts once DisposeAsync has completed; a Change on a disposed
/// timer returns false and never throws; once the changers stop, every live timer given a due time fires exactly once
/// (nothing lost); and, all disposed, nothing is left in the wheel.
/// </summary>
[Collection(SequentialCollection.Name)]
public class WheelTimeProviderStressTests
{
    private sealed class Cell
    {
        public ITimer Timer = null!;
        public int Armings; // creations and Change calls that gave a due time and returned true
        public int Fires;
        public int Running;
        public int Overlaps;
        public int Disposed; // set once DisposeAsync has completed
        public int FiresAfterDispose;
        public int FalseWhileLive;
    }

    private static readonly TimerCallback s_callback = static s =>
    {
        var cell = (Cell)s!;
        if (Volatile.Read(ref cell.Disposed) != 0)
        {
            Interlocked.Increment(ref cell.FiresAfterDispose);
        }
        if (Interlocked.Increment(ref cell.Running) > 1)
        {
            Interlocked.Increment(ref cell.Overlaps); // one-shot armings: two callbacks of one timer never overlap here... unless one arming fired twice
        }
        Interlocked.Increment(ref cell.Fires);
        Interlocked.Decrement(ref cell.Running);
    };

    [Fact]
    public void ManualClock_ChangeDisposeAndFiringRace_EachArmingFiresAtMostOnce_NothingLost() => Run(manual: true);

    [Fact]
    public void SystemClock_ChangeDisposeAndFiringRace_EachArmingFiresAtMostOnce_NothingLost() => Run(manual: false);

    private static Cell NewCell(TimeProvider provider, TimeSpan due)
    {
        var cell = new Cell { Armings = 1 };
        cell.Timer = provider.CreateTimer(s_callback, cell, due, Timeout.InfiniteTimeSpan);
        return cell;
    }

    private static void Run(bool manual)
    {
        const int TimerCount = 64;
        const int Changers = 3;
        var clock = manual ? new ManualClock() : null;
        using var wheel = new TimerWheel(clock ?? TimeProvider.System);
        TimeProvider provider = wheel.AsTimeProvider();
        var cells = new Cell[TimerCount];
        var retired = new ConcurrentBag<Cell>();
        for (int i = 0; i < TimerCount; i++)
        {
            cells[i] = NewCell(provider, TimeSpan.FromMilliseconds(1 + i % 5));
        }
        int stop = 0;
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
        int iterations = TestUtil.Stress(manual ? 30_000 : 15_000);
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
                            if (Interlocked.CompareExchange(ref cells[i], NewCell(provider, TimeSpan.FromMilliseconds(random.Next(0, 4))), cell) is var seen && seen == cell)
                            {
                                if ((op & 1) == 0)
                                {
                                    cell.Timer.Dispose();
                                    cell.Timer.DisposeAsync().AsTask().Wait(); // and wait for a callback still running
                                }
                                else
                                {
                                    cell.Timer.DisposeAsync().AsTask().Wait();
                                }
                                Volatile.Write(ref cell.Disposed, 1);
                                retired.Add(cell);
                            }
                        }
                        else
                        {
                            TimeSpan due = op < 10 ? Timeout.InfiniteTimeSpan : TimeSpan.FromMilliseconds(random.Next(0, 6));
                            bool changed = cell.Timer.Change(due, Timeout.InfiniteTimeSpan); // never throws, disposed or not
                            if (changed && due != Timeout.InfiniteTimeSpan)
                            {
                                Interlocked.Increment(ref cell.Armings);
                            }
                            if (!changed && Volatile.Read(ref cells[i]) == cell)
                            {
                                Interlocked.Increment(ref cell.FalseWhileLive); // false only for a retired timer
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
        Settle(clock);
        var before = new int[TimerCount];
        for (int i = 0; i < TimerCount; i++)
        {
            before[i] = Volatile.Read(ref cells[i].Fires);
            Assert.True(cells[i].Timer.Change(TimeSpan.FromMilliseconds(2), Timeout.InfiniteTimeSpan));
            cells[i].Armings++;
        }
        Settle(clock);
        if (clock is null)
        {
            SpinWait.SpinUntil(() => AllFiredOnce(cells, before), TimeSpan.FromSeconds(10));
        }
        for (int i = 0; i < TimerCount; i++)
        {
            Assert.Equal(before[i] + 1, Volatile.Read(ref cells[i].Fires));
        }
        foreach (Cell cell in cells)
        {
            cell.Timer.DisposeAsync().AsTask().Wait();
            Volatile.Write(ref cell.Disposed, 1);
            retired.Add(cell);
        }
        Settle(clock);
        Assert.Equal(0, wheel.PendingCount);
        int armings = 0;
        int fires = 0;
        foreach (Cell cell in retired)
        {
            Assert.True(cell.Fires <= cell.Armings, $"a timer fired {cell.Fires} times for {cell.Armings} armings");
            Assert.Equal(0, cell.FiresAfterDispose);
            Assert.Equal(0, cell.FalseWhileLive);
            Assert.False(cell.Timer.Change(TimeSpan.FromMilliseconds(1), Timeout.InfiniteTimeSpan));
            armings += cell.Armings;
            fires += cell.Fires;
        }
        Assert.True(fires > 0 && armings >= fires, $"fires {fires}, armings {armings}");
    }

    private static bool AllFiredOnce(Cell[] cells, int[] before)
    {
        for (int i = 0; i < cells.Length; i++)
        {
            if (Volatile.Read(ref cells[i].Fires) != before[i] + 1)
            {
                return false;
            }
        }
        return true;
    }

    private static void Settle(ManualClock? clock)
    {
        if (clock is not null)
        {
            for (int i = 0; i < 20; i++)
            {
                clock.Advance(TimeSpan.FromMilliseconds(1));
            }
        }
        else
        {
            Thread.Sleep(50);
        }
    }
}

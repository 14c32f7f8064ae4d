using System;
using System.Collections.Concurrent;
using System.Threading;

namespace SpindleLib.Tests.Time;

/// <summary>
/// The shape of the callback timers' stress tests (<see cref="SpindleTimerStressTests"/> through
/// <see cref="SpindleTimer"/>, <see cref="WheelTimeProviderStressTests"/> through <see cref="TimerWheel.AsTimeProvider"/>'s
/// <see cref="ITimer"/>): 64 timers on a wheel of their own; three threads change them at random (a due time of 0–5 ms,
/// or a stop) and retire some (a new timer in the cell's place, the old one disposed by the thread that replaced it,
/// while the others may still hold it), while another thread drives the wheel (advancing a <see cref="ManualClock"/>
/// by 1 ms at a time, or sleeping on the system clock). Checked: no Change fails on a timer that was still in its cell;
/// no timer fires more often than it was armed (each arming fires at most once); no more callbacks start after a
/// timer's disposal returned than <see cref="FiresAfterDisposeAllowed"/>; once the changers stop, every live timer
/// given a due time fires exactly once (nothing lost); and, all disposed, nothing is left in the wheel.
/// </summary>
/// <typeparam name="TTimer">The handle the tests drive.</typeparam>
internal abstract class TimerChurnStress<TTimer>
{
    internal sealed class Cell
    {
        public TTimer Timer = default!;
        public int Armings; // creations and Change calls that gave a due time and succeeded
        public int Fires;
        public int Disposed; // set once the disposal (and any wait it makes) has returned
        public int FiresAfterDispose;
        public int FailedWhileLive; // Change calls that failed on a timer still in its cell
    }

    private const int TimerCount = 64;
    private const int Changers = 3;

    /// <summary>The callback of every timer: its state is its <see cref="Cell"/>.</summary>
    protected static void OnFire(object? state)
    {
        var cell = (Cell)state!;
        if (Volatile.Read(ref cell.Disposed) != 0)
        {
            Interlocked.Increment(ref cell.FiresAfterDispose);
        }
        Interlocked.Increment(ref cell.Fires);
    }

    /// <summary>A timer on <paramref name="wheel"/> whose callback is <see cref="OnFire"/> with <paramref name="cell"/>, due in <paramref name="due"/>, one-shot.</summary>
    protected abstract TTimer Create(TimerWheel wheel, Cell cell, TimeSpan due);

    /// <summary>Moves the timer to <paramref name="due"/> (infinite: stops it), one-shot: true if it did; false for a timer already disposed (which must not be one still in its cell).</summary>
    protected abstract bool Change(TTimer timer, TimeSpan due);

    /// <summary>Disposes the timer by the way <paramref name="way"/> (0 or 1) names, returning once its disposal is complete as that way defines it.</summary>
    protected abstract void Dispose(TTimer timer, int way);

    /// <summary>How many callbacks of a timer may start after its disposal returned (the callback the wheel had already taken, for one).</summary>
    protected abstract int FiresAfterDisposeAllowed(bool manual);

    /// <summary>Runs the race, <paramref name="iterations"/> calls per changer thread, and checks it.</summary>
    public void Run(bool manual, int iterations)
    {
        var clock = manual ? new ManualClock() : null;
        using var wheel = new TimerWheel(clock ?? TimeProvider.System);
        var cells = new Cell[TimerCount];
        var retired = new ConcurrentBag<Cell>();
        for (int i = 0; i < TimerCount; i++)
        {
            cells[i] = NewCell(wheel, TimeSpan.FromMilliseconds(1 + i % 5));
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
                            Cell replacement = NewCell(wheel, TimeSpan.FromMilliseconds(random.Next(0, 4)));
                            if (Interlocked.CompareExchange(ref cells[i], replacement, cell) == cell)
                            {
                                Dispose(cell.Timer, op & 1);
                                Volatile.Write(ref cell.Disposed, 1);
                                retired.Add(cell);
                            }
                            else
                            {
                                Dispose(replacement.Timer, 0); // another thread retired it first
                            }
                        }
                        else
                        {
                            TimeSpan due = op < 10 ? Timeout.InfiniteTimeSpan : TimeSpan.FromMilliseconds(random.Next(0, 6));
                            bool changed = Change(cell.Timer, due);
                            if (changed && due != Timeout.InfiniteTimeSpan)
                            {
                                Interlocked.Increment(ref cell.Armings);
                            }
                            if (!changed && Volatile.Read(ref cells[i]) == cell)
                            {
                                Interlocked.Increment(ref cell.FailedWhileLive); // only a retired timer's Change fails
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
        Settle(clock, cells, retired);
        var before = new int[TimerCount];
        for (int i = 0; i < TimerCount; i++)
        {
            before[i] = Volatile.Read(ref cells[i].Fires);
            Assert.True(Change(cells[i].Timer, TimeSpan.FromMilliseconds(2)), "a live timer's Change failed");
            cells[i].Armings++;
        }
        Settle(clock, cells, retired);
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
            Dispose(cell.Timer, 0);
            Volatile.Write(ref cell.Disposed, 1);
            retired.Add(cell);
        }
        Settle(clock, cells, retired);
        Assert.Equal(0, wheel.PendingCount);
        int armings = 0;
        int fires = 0;
        int allowed = FiresAfterDisposeAllowed(manual);
        foreach (Cell cell in retired)
        {
            Assert.True(cell.Fires <= cell.Armings, $"a timer fired {cell.Fires} times for {cell.Armings} armings");
            Assert.True(cell.FiresAfterDispose <= allowed, $"{cell.FiresAfterDispose} callbacks started after the disposal returned (at most {allowed})");
            Assert.Equal(0, cell.FailedWhileLive);
            Assert.False(Change(cell.Timer, TimeSpan.FromMilliseconds(1)), "a disposed timer's Change succeeded");
            armings += cell.Armings;
            fires += cell.Fires;
        }
        Assert.True(fires > 0 && armings >= fires, $"fires {fires}, armings {armings}");
    }

    private Cell NewCell(TimerWheel wheel, TimeSpan due)
    {
        var cell = new Cell { Armings = 1 };
        cell.Timer = Create(wheel, cell, due);
        return cell;
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

    /// <summary>
    /// Lets what is in flight land: 20 ms of a manual clock, a millisecond at a time; on the system clock, until no timer's
    /// count of callbacks has moved for 250 ms (<see cref="TestUtil.WaitUntilUnchanged"/>: a fixed 100 ms sleep was
    /// outrun under load, a churn callback landing after the quiet check read its counts).
    /// </summary>
    private static void Settle(ManualClock? clock, Cell[] cells, ConcurrentBag<Cell> retired)
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
            Assert.True(TestUtil.WaitUntilUnchanged(() => TotalFires(cells, retired)), "the timers' callbacks never stopped landing");
        }
    }

    private static long TotalFires(Cell[] cells, ConcurrentBag<Cell> retired)
    {
        long total = 0;
        foreach (Cell cell in cells)
        {
            total += Volatile.Read(ref cell.Fires);
        }
        foreach (Cell cell in retired)
        {
            total += Volatile.Read(ref cell.Fires);
        }
        return total;
    }
}

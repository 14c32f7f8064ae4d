using System;
using System.Diagnostics;
using System.Threading;

namespace SpindleLib;

/// <summary>
/// A work-stealing deque: the owning worker pushes and pops at the bottom (LIFO), other threads steal from the top (FIFO).
/// </summary>
/// <remarks>
/// <para>Algorithm: D. Chase and Y. Lev, "Dynamic Circular Work-Stealing Deque", SPAA 2005, with the memory-ordering
/// fixes of N. M. Lê, A. Pop, A. Cohen and F. Zappa Nardelli, "Correct and Efficient Work-Stealing for Weak Memory
/// Models", PPoPP 2013 (a full fence between the owner's bottom store and top load in <see cref="TryPop"/>, and
/// between the thief's top load and bottom load in <see cref="TrySteal"/>).</para>
/// <para>Invariants: only the owner writes <see cref="_bottom"/> and <see cref="_array"/>; <see cref="_top"/> only
/// grows, and only by CAS; the items in [top, bottom) are the deque's contents. When one item is left the owner and
/// thieves race for it with the same CAS on top, so it is taken exactly once. The array only grows; a thief holding
/// the old array reads the same item the new array holds at that index, because growth copies and never clears.</para>
/// <para>Letting go of stolen items: a thief cannot clear the slot it stole from (by then the owner may have wrapped
/// around and filled it again), so the owner does it, for every slot below the top it has seen (<see cref="_clearedTo"/>)
/// when it pushes and when it finds the deque empty. Safe because a thief's CAS takes index t only while top is still t:
/// a thief that read a slot below the owner's top fails its CAS, whatever it read. Only slots from bottom - length on
/// are cleared, so none aliases a live item in [top, bottom). Without this, every stolen item stayed reachable until
/// its slot was reused: a failed job nobody observed was never reported (its finalizer reports it).</para>
/// </remarks>
internal sealed class WorkStealingDeque<T> where T : class
{
    private long _top;
    private long _bottom;
    private const int InitialCapacity = 64;

    private T?[] _array = new T?[InitialCapacity];
    private long _clearedTo; // owner only: every slot below this index has been let go of (see the remarks)

    /// <summary>An estimate of the number of items (exact when called by the owner with no concurrent thief).</summary>
    public int Count => (int)Math.Max(0, Volatile.Read(ref _bottom) - Volatile.Read(ref _top));

    public bool IsEmpty => Volatile.Read(ref _bottom) <= Volatile.Read(ref _top);

    /// <summary>The length of the array (for tests and the trim).</summary>
    internal int Capacity => Volatile.Read(ref _array).Length;

    /// <summary>
    /// Owner only: if the deque is empty and a burst grew its array, replaces the array with one of the first size, giving
    /// the grown one to the GC (<see cref="SpindlePool.Trim"/>, at the worker's next park). Safe for the reason growth is:
    /// the deque is empty (top &gt;= bottom), so no thief can take anything until the owner pushes again, and the owner
    /// publishes the new array before that push's bottom; a thief that reads the new bottom then reads the new array
    /// (the loads are ordered, as in <see cref="TrySteal"/>), and one holding the old array fails its CAS on top, which has
    /// moved past every index it could have read. Chase and Lev shrink their array the same way, by the owner.
    /// </summary>
    internal void ShrinkIfEmpty()
    {
        long top = Volatile.Read(ref _top);
        if (_array.Length == InitialCapacity || top < _bottom)
        {
            return;
        }
        Volatile.Write(ref _array, new T?[InitialCapacity]);
        _clearedTo = Math.Max(_clearedTo, top); // the new array holds nothing to let go of
    }

    /// <summary>Owner only.</summary>
    public void Push(T item)
    {
        long b = _bottom;
        long t = Volatile.Read(ref _top);
        T?[] a = _array;
        if (_clearedTo < t)
        {
            ClearTaken(a, t, b);
        }
        if (b - t >= a.Length)
        {
            a = Grow(a, t, b);
        }
        a[b & (a.Length - 1)] = item;
        Volatile.Write(ref _bottom, b + 1);
    }

    private T?[] Grow(T?[] old, long top, long bottom)
    {
        var a = new T?[old.Length * 2];
        for (long i = top; i < bottom; i++)
        {
            a[i & (a.Length - 1)] = old[i & (old.Length - 1)];
        }
        Volatile.Write(ref _array, a);
        return a;
    }

    /// <summary>
    /// Owner only: clears the slots of the items taken below <paramref name="top"/> (stolen, or popped as the last item),
    /// from bottom - length on, so none aliases a live item (see the remarks).
    /// </summary>
    private void ClearTaken(T?[] a, long top, long bottom)
    {
        long from = Math.Max(_clearedTo, bottom - a.Length);
        for (long i = from; i < top; i++)
        {
            a[i & (a.Length - 1)] = null;
        }
        _clearedTo = top;
    }

    /// <summary>Owner only.</summary>
    public T? TryPop()
    {
        // Empty stays empty until the owner pushes (thieves only raise top), so an empty deque is seen without the fence.
        long top = Volatile.Read(ref _top);
        if (top >= _bottom)
        {
            if (_clearedTo < top)
            {
                ClearTaken(_array, top, _bottom);
            }
            return null;
        }
        long b = _bottom - 1;
        T?[] a = _array;
        Interlocked.Exchange(ref _bottom, b); // full fence: the store to bottom must precede the load of top
        long t = Volatile.Read(ref _top);
        if (t > b)
        {
            Volatile.Write(ref _bottom, b + 1); // empty (a plain 64-bit store could tear on a 32-bit platform, under a thief's read)
            return null;
        }
        int index = (int)(b & (a.Length - 1));
        T? item = a[index];
        if (t == b)
        {
            // Last item: race the thieves for it on top.
            if (Interlocked.CompareExchange(ref _top, t + 1, t) != t)
            {
                item = null;
            }
            // Either way top is now b + 1: slot b is out of every thief's reach, so the deque lets go of the item (a
            // pooled or failed job kept reachable here would not be recycled or reported until the slot was reused).
            a[index] = null;
            Volatile.Write(ref _bottom, b + 1);
            return item;
        }
        a[index] = null; // slot b is out of every thief's reach (thieves only take index < bottom, and top <= b - 1)
        return item;
    }

    /// <summary>Any thread. Returns null when empty or when it lost a race (the caller may try again).</summary>
    public T? TrySteal()
    {
        long t = Volatile.Read(ref _top);
        Interlocked.MemoryBarrier(); // the load of top must precede the load of bottom
        long b = Volatile.Read(ref _bottom);
        if (t >= b)
        {
            return null;
        }
        T?[] a = Volatile.Read(ref _array);
        T? item = a[t & (a.Length - 1)];
        if (Interlocked.CompareExchange(ref _top, t + 1, t) != t)
        {
            return null;
        }
        Debug.Assert(item is not null);
        return item;
    }
}

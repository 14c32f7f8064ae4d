using System;
using System.Threading;

namespace SpindleLib;

/// <summary>An object that can sit in an <see cref="ObjectPool{T}"/>: it carries its own intrusive link.</summary>
internal interface IPoolNode<T> where T : class
{
    ref T? Next { get; }
}

/// <summary>
/// One pool per pooled type: a one-slot per-thread cache in front of a bounded shared stack.
/// </summary>
/// <remarks>
/// <para>The shared stack is an intrusive singly linked list guarded by a CAS gate (<see cref="s_gate"/>), the design
/// UniTask's TaskPool uses. Invariant: <see cref="s_head"/> and <see cref="s_count"/> change only while the gate is
/// held, so the list has no ABA problem. The gate is held for a few instructions and never waited for beyond a few
/// short retries: a thread that still cannot take it allocates (on rent) or drops the object to the GC (on return).
/// No thread can therefore block another, and the cost of contention is at most one allocation.</para>
/// <para>The per-thread slot serves the common case where the thread that returns an object rents the next one
/// (a continuation chain running on one worker), with no interlocked operation at all. Every pooled type's slot lives
/// in one non-generic per-thread array (<see cref="ThreadSlots"/>), indexed by <see cref="s_slotIndex"/>: a
/// <c>[ThreadStatic]</c> field of a generic class goes through a slow runtime helper on each access, while a
/// non-generic one is reached inline.</para>
/// <para>Callers clear every field of an object before returning it, so no result, exception, continuation or
/// <see cref="ExecutionContext"/> survives from one use to the next.</para>
/// </remarks>
internal static class ObjectPool<T> where T : class, IPoolNode<T>
{
    private static readonly int s_slotIndex = ThreadSlots.AllocateIndex();
    private static int s_gate;
    private static T? s_head;
    private static int s_count;

    private static readonly bool s_registered = SpindlePool.Register(typeof(T), static () => Count, static () => Trim());

    /// <summary>The number of objects in the shared stack (per-thread slots are not counted).</summary>
    public static int Count => Volatile.Read(ref s_count);

    public static T? TryRent()
    {
        object? cached = ThreadSlots.Take(s_slotIndex);
        if (cached is not null)
        {
            return (T)cached; // T is a sealed class in every use, so this cast is one type-handle compare
        }
        T? item;
        if (Volatile.Read(ref s_head) is null || !TryTakeGate())
        {
            return null;
        }
        item = s_head;
        if (item is not null)
        {
            s_head = item.Next;
            item.Next = null;
            s_count--;
        }
        Volatile.Write(ref s_gate, 0);
        return item;
    }

    public static void Return(T item)
    {
        if (ThreadSlots.TryPut(s_slotIndex, item))
        {
            return;
        }
        if (s_count >= SpindlePool.MaxRetainedPerType || !TryTakeGate())
        {
            return;
        }
        item.Next = s_head;
        s_head = item;
        s_count++;
        Volatile.Write(ref s_gate, 0);
    }

    /// <summary>A few tries at the gate; the holder releases it within a few instructions.</summary>
    private static bool TryTakeGate()
    {
        for (int attempt = 0; attempt < 4; attempt++)
        {
            if (Interlocked.CompareExchange(ref s_gate, 1, 0) == 0)
            {
                return true;
            }
            Thread.SpinWait(4 << attempt);
        }
        return false;
    }

    private static void Trim()
    {
        _ = s_registered;
        // Trim waits for the gate (it is not on a hot path) so that it always empties the stack.
        SpinWait spin = default;
        while (Interlocked.CompareExchange(ref s_gate, 1, 0) != 0)
        {
            spin.SpinOnce();
        }
        s_head = null;
        s_count = 0;
        Volatile.Write(ref s_gate, 0);
        ThreadSlots.Take(s_slotIndex); // the calling thread's slot too (other threads' slots are theirs alone)
    }
}

/// <summary>
/// Each thread's one-object cache for every pooled type: a non-generic <c>[ThreadStatic]</c> array of slots, indexed
/// by pooled type. Only its own thread touches it, so it needs no synchronisation.
/// </summary>
internal static class ThreadSlots
{
    private static int s_nextIndex = -1;

    [ThreadStatic]
    private static Slot[]? t_slots;

    /// <summary>A wrapper, so that storing into the array needs no covariance check.</summary>
    private struct Slot
    {
        public object? Value;
    }

    public static int AllocateIndex() => Interlocked.Increment(ref s_nextIndex);

    public static object? Take(int index)
    {
        Slot[]? slots = t_slots;
        if (slots is not null && (uint)index < (uint)slots.Length)
        {
            object? value = slots[index].Value;
            slots[index].Value = null;
            return value;
        }
        return null;
    }

    public static bool TryPut(int index, object item)
    {
        Slot[]? slots = t_slots;
        if (slots is null || (uint)index >= (uint)slots.Length)
        {
            slots = Grow(index);
        }
        ref object? slot = ref slots[index].Value;
        if (slot is not null)
        {
            return false;
        }
        slot = item;
        return true;
    }

    private static Slot[] Grow(int index)
    {
        Slot[]? old = t_slots;
        var slots = new Slot[Math.Max(index + 1, Math.Max(16, (old?.Length ?? 0) * 2))];
        old?.CopyTo(slots, 0);
        t_slots = slots;
        return slots;
    }
}

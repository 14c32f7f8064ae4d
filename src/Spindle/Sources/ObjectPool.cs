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
/// held, so the list has no ABA problem. The gate is never waited for: a thread that loses the CAS allocates
/// (on rent) or drops the object to the GC (on return). No thread can therefore block another, and the cost of
/// contention is at most one allocation.</para>
/// <para>The per-thread slot serves the common case where the thread that returns an object rents the next one
/// (a continuation chain running on one worker), with no interlocked operation at all. The slot is a
/// <c>[ThreadStatic]</c> field of the pooled class itself, passed in by reference: a thread-static in this class
/// would be reached from shared generic code (T is a reference type), which goes through a slow runtime helper on
/// every access, while the pooled classes are specialised for their value-type arguments and reach theirs directly.</para>
/// <para>Callers clear every field of an object before returning it, so no result, exception, continuation or
/// <see cref="ExecutionContext"/> survives from one use to the next.</para>
/// </remarks>
internal static class ObjectPool<T> where T : class, IPoolNode<T>
{
    private static int s_gate;
    private static T? s_head;
    private static int s_count;

    static ObjectPool() => SpindlePool.Register(typeof(T), static () => Count, static () => Trim());

    /// <summary>The number of objects in the shared stack (per-thread slots are not counted).</summary>
    public static int Count => Volatile.Read(ref s_count);

    public static T? TryRent(ref T? threadSlot)
    {
        T? item = threadSlot;
        if (item is not null)
        {
            threadSlot = null;
            return item;
        }
        if (Volatile.Read(ref s_head) is null || Interlocked.CompareExchange(ref s_gate, 1, 0) != 0)
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

    public static void Return(T item, ref T? threadSlot)
    {
        if (threadSlot is null)
        {
            threadSlot = item;
            return;
        }
        if (s_count >= SpindlePool.MaxRetainedPerType || Interlocked.CompareExchange(ref s_gate, 1, 0) != 0)
        {
            return;
        }
        item.Next = s_head;
        s_head = item;
        s_count++;
        Volatile.Write(ref s_gate, 0);
    }

    private static void Trim()
    {
        // Trim waits for the gate (it is not on a hot path) so that it always empties the stack.
        SpinWait spin = default;
        while (Interlocked.CompareExchange(ref s_gate, 1, 0) != 0)
        {
            spin.SpinOnce();
        }
        s_head = null;
        s_count = 0;
        Volatile.Write(ref s_gate, 0);
    }
}

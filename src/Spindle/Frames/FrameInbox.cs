using System;
using System.Threading;

namespace SpindleLib;

/// <summary>
/// The hand-off from other threads into a <see cref="FrameLoop"/>: a multi-producer, single-consumer queue that the
/// loop drains at the start of each frame, before anything else in the frame.
/// </summary>
/// <remarks>
/// A producer appends under a lock held for one array store; the loop swaps the whole array out under the same lock and
/// moves the items to their phases outside it. Two arrays alternate, so once they are big enough a hand-off allocates
/// nothing. The lock is the simple, fair choice here: hand-offs arrive at most at the rate threads can produce them,
/// the loop takes the lock once per frame, and nothing handed off can be lost or reordered between producers' own posts.
/// </remarks>
internal sealed class FrameInbox
{
    private readonly object _lock = new();
    private Entry[] _entries = new Entry[16];
    private Entry[] _spare = new Entry[16]; // the consumer's: the array it drained last
    private int _count;

    private struct Entry
    {
        public WorkItem Item;
        public FramePhase Phase;
    }

    /// <summary>Items waiting for the next frame.</summary>
    public int Count => Volatile.Read(ref _count);

    /// <summary>Hands <paramref name="item"/> to the loop, for <paramref name="phase"/>. Any thread.</summary>
    public void Post(WorkItem item, FramePhase phase)
    {
        lock (_lock)
        {
            int n = _count;
            if (n == _entries.Length)
            {
                Array.Resize(ref _entries, n * 2);
            }
            _entries[n].Item = item;
            _entries[n].Phase = phase;
            Volatile.Write(ref _count, n + 1);
        }
    }

    /// <summary>Moves everything handed off so far to the back of its phase's queue, in the order it was posted. Loop thread only.</summary>
    public void Drain()
    {
        if (Volatile.Read(ref _count) == 0)
        {
            return;
        }
        Entry[] batch;
        int count;
        lock (_lock)
        {
            batch = _entries;
            count = _count;
            _entries = _spare;
            _count = 0;
        }
        for (int i = 0; i < count; i++)
        {
            Entry e = batch[i];
            batch[i] = default;
            e.Phase.AddBack(e.Item);
        }
        _spare = batch;
    }
}

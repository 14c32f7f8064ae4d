using System;
using System.Collections.Generic;
using System.Threading;

namespace SpindleLib;

/// <summary>
/// The timers of a wheel that are never due (an infinite delay, a periodic timer whose period is infinite, a deadline
/// past the range of a long), held weakly, so that the wheel's Dispose can still cancel the ones somebody waits on.
/// </summary>
/// <remarks>
/// <para><b>Why weakly.</b> Such a timer can end only by its token or by the wheel's Dispose; nothing the wheel does
/// will ever fire it. A strong hold kept everything its continuation reaches alive until the wheel was disposed: a
/// server session abandoned while it awaited <c>wheel.Delay(Timeout.InfiniteTimeSpan)</c> pinned its state machine, its
/// locals and the timer node for the life of the wheel, where the BCL's <c>Task.Delay(-1)</c> holds nothing (found by a
/// review of the defects left alone, <c>InfiniteDelayLetGoTests</c>). Held weakly, a timer that nobody can reach any more
/// is collected with its waiter; one still reachable is cancelled by Dispose, as before. Nobody could tell the two
/// apart: a waiter that is collected can observe nothing.</para>
/// <para><b>Entries.</b> Each entry is a weak reference to a node and the token of the use it was added for. Nodes are
/// pooled, so an entry goes stale when its use ends (read, let go of by a combinator, cancelled) and the node goes back
/// to the pool or on to another timer; a stale entry is never acted on: Dispose cancels a node only while
/// <see cref="TimerNode.NeverDueOn"/> names this wheel (the node's current use is a never-due timer of this wheel, which
/// Dispose must cancel anyway) and only the entry's own use (<see cref="TimerNode.TryCancelNeverDue"/>). Stale and
/// collected entries are swept when the array fills, and the array doubles only when more than half of it is still
/// live after a sweep, so it stays within twice the most never-due timers ever pending at once, and the weak references
/// are reused: adding allocates only when the array grows.</para>
/// <para><b>Locking.</b> A small lock guards the entries and the closed flag: never-due timers are rare, and no user
/// code runs under it. Invariant: once <see cref="Close"/> has run, no entry is added (<see cref="TryAdd"/> returns
/// false and the caller cancels its timer itself), so every never-due timer a wheel has taken is either in the snapshot
/// that Dispose cancels or cancelled by its caller.</para>
/// </remarks>
internal sealed class NeverDueTimers
{
    private readonly object _lock = new();
    private readonly TimerWheel _wheel;
    private WeakReference<TimerNode>?[] _nodes = new WeakReference<TimerNode>?[4];
    private short[] _uses = new short[4];
    private int _count;
    private bool _closed;

    public NeverDueTimers(TimerWheel wheel) => _wheel = wheel;

    /// <summary>
    /// Holds use <paramref name="use"/> of <paramref name="node"/> weakly. False once the wheel is disposed (<see cref="Close"/>):
    /// the caller then cancels the timer itself.
    /// </summary>
    public bool TryAdd(TimerNode node, short use)
    {
        lock (_lock)
        {
            if (_closed)
            {
                return false;
            }
            node.NeverDueOn = _wheel; // under the lock, so Close's snapshot sees it with the entry
            if (_count == _nodes.Length)
            {
                Sweep();
                if (_count > _nodes.Length / 2)
                {
                    Array.Resize(ref _nodes, _nodes.Length * 2);
                    Array.Resize(ref _uses, _uses.Length * 2);
                }
            }
            WeakReference<TimerNode>? weak = _nodes[_count];
            if (weak is null)
            {
                _nodes[_count] = new WeakReference<TimerNode>(node);
            }
            else
            {
                weak.SetTarget(node); // a swept entry's reference, reused
            }
            _uses[_count] = use;
            _count++;
            return true;
        }
    }

    /// <summary>How many entries still hold a live, pending never-due timer of this wheel (tests and diagnostics).</summary>
    public int LiveCount
    {
        get
        {
            lock (_lock)
            {
                int live = 0;
                for (int i = 0; i < _count; i++)
                {
                    live += TryGetLive(i, out _) ? 1 : 0;
                }
                return live;
            }
        }
    }

    /// <summary>
    /// The wheel's Dispose: closes the list to new timers and cancels, as canceled by the disposal (building no
    /// exception: <see cref="TimerWheel.DisposalToken"/>), every never-due timer still pending that somebody can reach. Continuations run on the calling thread; one that throws is
    /// reported, as the disposing pass reports its own.
    /// </summary>
    public void Close()
    {
        List<(TimerNode Node, short Use)> pending;
        lock (_lock)
        {
            pending = new(_count);
            _closed = true;
            for (int i = 0; i < _count; i++)
            {
                if (TryGetLive(i, out TimerNode? node))
                {
                    pending.Add((node, _uses[i]));
                }
            }
            _nodes = Array.Empty<WeakReference<TimerNode>?>();
            _uses = Array.Empty<short>();
            _count = 0;
        }
        foreach ((TimerNode node, short use) in pending)
        {
            try
            {
                node.TryCancelNeverDue(_wheel, use);
            }
            catch (Exception ex)
            {
                UnobservedExceptions.Report(ex); // its continuation threw; the node was still completed
            }
        }
    }

    /// <summary>Entry <paramref name="i"/>'s node, if it is alive and still pending in the use the entry was added for. Under the lock.</summary>
    private bool TryGetLive(int i, [System.Diagnostics.CodeAnalysis.NotNullWhen(true)] out TimerNode? node)
        => _nodes[i]!.TryGetTarget(out node) && node.IsNeverDueOf(_wheel, _uses[i]);

    /// <summary>Moves the live entries to the front, and the references of the others after them, for reuse. Under the lock.</summary>
    private void Sweep()
    {
        int live = 0;
        for (int i = 0; i < _count; i++)
        {
            WeakReference<TimerNode> weak = _nodes[i]!;
            if (!TryGetLive(i, out _))
            {
                weak.SetTarget(null!); // holds nothing, weakly or not, until it is reused
                continue;
            }
            _nodes[i] = _nodes[live];
            _nodes[live] = weak;
            _uses[live] = _uses[i];
            live++;
        }
        _count = live;
    }
}

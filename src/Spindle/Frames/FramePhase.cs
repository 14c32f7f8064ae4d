using System;
using System.Runtime.CompilerServices;
using System.Threading;

namespace SpindleLib;

/// <summary>
/// One named phase of a <see cref="FrameLoop"/>'s frame, such as <see cref="FrameLoop.Update"/>. Each frame runs the
/// loop's phases in order; a phase runs the continuations queued for it, first queued first run.
/// </summary>
/// <remarks>
/// <para>Obtain phases from their loop: the four default ones (<see cref="FrameLoop.EarlyUpdate"/>,
/// <see cref="FrameLoop.FixedUpdate"/>, <see cref="FrameLoop.Update"/>, <see cref="FrameLoop.LateUpdate"/>) or those
/// added with <see cref="FrameLoop.AddPhase(string)"/>. A phase belongs to one loop; passing it to another loop's
/// awaits throws <see cref="ArgumentException"/>.</para>
/// <para>Thread-safety: the members of this class only read immutable state and may be called from any thread.</para>
/// </remarks>
public sealed class FramePhase
{
    private const int InitialCapacity = 16;

    // The phase's continuation queue (loop thread only). Double-buffered: Run takes _back as the batch it runs, and what
    // the batch queues to this phase goes to a fresh _back, so it runs at the phase's next run. Each entry carries the
    // first frame it may run in: 0 for the next run (Yield, a hand-off, a due delay), N + 1 for a NextFrame awaited in
    // frame N. A run of frame F leaves the entries marked for a later frame in the queue, in order and ahead of everything
    // queued after them (a NextFrame awaited before its phase ran in this frame, or a phase a host runs more than once a
    // frame); _holdUntil, the latest such mark, lets a run skip that pass when nothing waits for a later frame. _spare is
    // the array the previous run emptied. Both are reused: a frame allocates nothing once they are big enough.
    private Slot[] _back = new Slot[InitialCapacity];
    private int _backCount;
    private long _holdUntil;
    private Slot[] _spare = new Slot[InitialCapacity];

    /// <summary>
    /// A queue slot. Storing an object into an array of a struct needs no covariance check, where storing a
    /// state-machine box into a <c>WorkItem[]</c> walks the box's class hierarchy on every store.
    /// </summary>
    private struct Slot
    {
        public WorkItem? Item;
        public long NotBefore;
    }

    internal FramePhase(FrameLoop loop, string name)
    {
        Loop = loop;
        Name = name;
    }

    /// <summary>The phase's name, unique within its loop.</summary>
    public string Name { get; }

    /// <summary>The loop this phase belongs to.</summary>
    public FrameLoop Loop { get; }

    /// <summary>The phase's position in its loop's frame, from 0 (phases added before it move it along).</summary>
    public int Index { get; internal set; }

    /// <summary>Continuations waiting for this phase's next run, and for a later frame's (for tests and diagnostics).</summary>
    internal int QueuedCount => _backCount;

    /// <summary>Returns the phase's name.</summary>
    public override string ToString() => Name;

    /// <summary>Queues <paramref name="item"/> for the phase's next run.</summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    internal void AddBack(WorkItem item) => Add(item, 0);

    /// <summary>Queues <paramref name="item"/> for the phase's first run in frame <paramref name="frame"/> or later.</summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    internal void AddNotBefore(WorkItem item, long frame)
    {
        Add(item, frame);
        if (frame > _holdUntil)
        {
            _holdUntil = frame;
        }
    }

    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    private void Add(WorkItem item, long notBefore)
    {
        Slot[] items = _back;
        int n = _backCount;
        if ((uint)n >= (uint)items.Length)
        {
            items = Grow(ref _back);
        }
        items[n].Item = item;
        items[n].NotBefore = notBefore;
        _backCount = n + 1;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    private static Slot[] Grow(ref Slot[] items)
    {
        Array.Resize(ref items, items.Length * 2);
        return items;
    }

    /// <summary>
    /// Runs the batch queued for this run, first queued first run. What the batch queues to this phase waits for its
    /// next run. A continuation that throws is reported to <see cref="Spindle.UnobservedException"/> and the batch goes
    /// on. Loop thread only; the loop guards against re-entry.
    /// </summary>
    internal void Run(long frame)
    {
        Slot[] batch = _back;
        int count = _backCount;
        _back = _spare;
        _backCount = 0;
        if (_holdUntil > frame)
        {
            count = HoldBack(batch, count, frame);
        }

        // In the default context (a host thread with no AsyncLocal values, as usual), each item may skip checking the
        // context before itself, and this loop puts the default back after each one that changed it. Otherwise every
        // item switches to its own captured context and back.
#if NET
        if (ContextFlow.IsDefaultNow() || ContextFlow.s_default is null)
        {
            RunItems(batch, 0, count, ContextFlow.s_default is not null);
        }
        else
        {
            // A host with AsyncLocal values, or one that suppresses flow (Capture() is null: nothing to restore): run the
            // batch inside ExecutionContext.Run of the default context, whose exit puts the host's context back whatever
            // the items did. Items that carry no context of their own run in the default context, as on a worker.
            _running = batch;
            _runningCount = count;
            ExecutionContext.Run(ContextFlow.s_default, s_runAllOnDefault, this);
            _running = null;
        }
#else
        // netstandard2.1 cannot put a context back afterwards: the items run inside ExecutionContext.Run, left (which
        // puts the host's context back) and entered again after any item that changed it (ContextFlow.RunRestoring).
        _running = batch;
        _runningCount = count;
        _runningNext = 0;
        while (_runningNext < count)
        {
            ContextFlow.RunRestoring(s_runSome, this);
        }
        _running = null;
#endif
        _spare = batch;
    }

#if NET
    private static readonly System.Threading.ContextCallback s_runAllOnDefault = static o =>
    {
        var phase = (FramePhase)o!;
        phase.RunItems(phase._running!, 0, phase._runningCount, onDefault: true);
    };

    private Slot[]? _running;
    private int _runningCount;
#else
    private static readonly System.Threading.ContextCallback s_runSome = static o =>
    {
        var phase = (FramePhase)o!;
        phase._runningNext = phase.RunItems(phase._running!, phase._runningNext, phase._runningCount, onDefault: false);
    };

    private Slot[]? _running;
    private int _runningCount;
    private int _runningNext;
#endif

    /// <summary>
    /// The batch holds entries marked for a frame after <paramref name="frame"/>: they go back into the queue, in order
    /// (nothing else is in it yet, so they stay ahead of what this run queues), and the rest close up to run now. Returns
    /// how many run now.
    /// </summary>
    [MethodImpl(MethodImplOptions.NoInlining)]
    private int HoldBack(Slot[] batch, int count, long frame)
    {
        _holdUntil = 0;
        int kept = 0;
        for (int i = 0; i < count; i++)
        {
            WorkItem item = batch[i].Item!;
            long notBefore = batch[i].NotBefore;
            batch[i].Item = null;
            if (notBefore > frame)
            {
                AddNotBefore(item, notBefore);
            }
            else
            {
                batch[kept].Item = item;
                kept++;
            }
        }
        return kept;
    }

    /// <summary>
    /// Runs <c>batch[i..count)</c> and returns where it stopped: at <paramref name="count"/>, or, on netstandard2.1, just
    /// after an item (or a fault handler) that changed the thread's context.
    /// </summary>
    private int RunItems(Slot[] batch, int i, int count, bool onDefault)
    {
#if !NET
        System.Threading.ExecutionContext? entered = System.Threading.ExecutionContext.Capture();
#endif
        while (i < count)
        {
            try
            {
                while (i < count)
                {
                    WorkItem item = batch[i].Item!;
                    batch[i].Item = null; // the slot is in cache now; clearing it here saves a second pass
                    i++;
                    if (onDefault)
                    {
                        item.ExecuteOnDefaultContext();
                        ContextFlow.RestoreDefaultIfChanged();
                    }
                    else
                    {
                        item.Execute();
                    }
#if !NET
                    if (ContextFlow.HasChanged(entered))
                    {
                        return i;
                    }
#endif
                }
            }
            catch (Exception ex)
            {
                // A state-machine box never throws (its builder catches); a plain delegate continuation may. Its fault
                // has nowhere else to go, and the rest of the batch must still run, in the default context. Report first:
                // the handlers run here, between two items, and what they leave in the context must be cleared too, or
                // the next item would run in it (it skips its own check: ExecuteOnDefaultContext).
                UnobservedExceptions.Report(ex);
                if (onDefault)
                {
                    ContextFlow.RestoreDefaultIfChanged();
                }
#if !NET
                if (ContextFlow.HasChanged(entered))
                {
                    return i;
                }
#endif
            }
        }
        return i;
    }
}

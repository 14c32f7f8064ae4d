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
    // the batch queues to this phase goes to a fresh _back, so it runs at the phase's next run. _spare is the array the
    // previous run emptied. Both are reused: a frame allocates nothing once they are big enough.
    //
    // A NextFrame entry queued in frame N must not run before frame N + 1, nor at a run of this phase still to come in
    // frame N (the phase may be still to run, or a host may run it more than once a frame). Entries are appended in
    // time order, so those queued in the current frame are a tail of _back: the segment from _segmentStart, queued in
    // frame _segmentFrame. _segmentKind says what it holds: entries for the next run only (Free), NextFrame entries only
    // (Held), or both (Mixed, with the run lengths in order in _runs: positive free, negative held). A run of frame F
    // whose segment is F's puts the segment's NextFrame entries back at the head of the queue, in order; any other run
    // runs everything. Nothing is stored per entry, so a slot stays one reference.
    private const byte Free = 1;
    private const byte Held = 2;
    private const byte Mixed = 3;

    private Slot[] _back = new Slot[InitialCapacity];
    private int _backCount;
    private Slot[] _spare = new Slot[InitialCapacity];
    private long _segmentFrame = -1;
    private int _segmentStart;
    private byte _segmentKind;
    private int[] _runs = Array.Empty<int>();
    private int _runCount;

    /// <summary>
    /// A queue slot. Storing an object into an array of a struct needs no covariance check, where storing a
    /// state-machine box into a <c>WorkItem[]</c> walks the box's class hierarchy on every store.
    /// </summary>
    private struct Slot
    {
        public WorkItem? Item;
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
    internal void AddBack(WorkItem item) => Add(item, Free);

    /// <summary>Queues <paramref name="item"/> for the phase's first run in the next frame.</summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    internal void AddNextFrame(WorkItem item) => Add(item, Held);

    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    private void Add(WorkItem item, byte kind)
    {
        Slot[] items = _back;
        int n = _backCount;
        if ((uint)n >= (uint)items.Length)
        {
            items = Grow(ref _back);
        }
        items[n].Item = item;
        _backCount = n + 1;
        long frame = Loop.CurrentFrame;
        if (frame != _segmentFrame)
        {
            _segmentFrame = frame;
            _segmentStart = n;
            _segmentKind = kind;
        }
        else if (kind != _segmentKind)
        {
            NoteMixed(n, kind);
        }
    }

    /// <summary>The current frame's segment holds entries of both kinds: keep the run lengths (rare: uniform segments keep none).</summary>
    [MethodImpl(MethodImplOptions.NoInlining)]
    private void NoteMixed(int n, byte kind)
    {
        if (_segmentKind != Mixed)
        {
            // Uniform until now: one run of everything before this entry.
            _runCount = 0;
            PushRun(_segmentKind == Free ? n - _segmentStart : _segmentStart - n);
            _segmentKind = Mixed;
        }
        int step = kind == Free ? 1 : -1;
        int last = _runs[_runCount - 1];
        if ((last > 0) == (step > 0))
        {
            _runs[_runCount - 1] = last + step;
        }
        else
        {
            PushRun(step);
        }
    }

    private void PushRun(int length)
    {
        if (_runCount == _runs.Length)
        {
            Array.Resize(ref _runs, Math.Max(4, _runs.Length * 2));
        }
        _runs[_runCount++] = length;
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
        byte segment = _segmentFrame == frame ? _segmentKind : (byte)0;
        int segmentStart = _segmentStart;
        int runCount = _runCount;
        _segmentFrame = -1;
        _segmentKind = 0;
        _runCount = 0;
        if (segment >= Held)
        {
            count = HoldBack(batch, count, segmentStart, segment, runCount);
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
        while (_runningNext < count || Loop.HasNested)
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
    /// The batch's tail from <paramref name="segmentStart"/> was queued in this frame and holds NextFrame entries: they
    /// go back into the queue, in order (nothing else is in it yet, so they stay ahead of what this run queues), and the
    /// rest close up to run now. Returns how many run now.
    /// </summary>
    [MethodImpl(MethodImplOptions.NoInlining)]
    private int HoldBack(Slot[] batch, int count, int segmentStart, byte segment, int runCount)
    {
        int kept = segmentStart;
        if (segment == Held)
        {
            for (int i = segmentStart; i < count; i++)
            {
                WorkItem item = batch[i].Item!;
                batch[i].Item = null;
                AddNextFrame(item);
            }
            return kept;
        }
        // Mixed. The held entries go back as a uniform segment, so the run lengths read here are not written meanwhile.
        int[] runs = _runs;
        int next = segmentStart;
        for (int r = 0; r < runCount; r++)
        {
            int length = runs[r];
            bool held = length < 0;
            for (int k = held ? -length : length; k > 0; k--)
            {
                WorkItem item = batch[next].Item!;
                batch[next].Item = null;
                next++;
                if (held)
                {
                    AddNextFrame(item);
                }
                else
                {
                    batch[kept++].Item = item;
                }
            }
        }
        System.Diagnostics.Debug.Assert(next == count, "the runs cover the segment");
        return kept;
    }

    /// <summary>
    /// Runs <c>batch[i..count)</c> and returns where it stopped: at <paramref name="count"/>, or, on netstandard2.1, just
    /// after an item (or a fault handler) that changed the thread's context. Each item starts under the host's
    /// SynchronizationContext (the one the thread had when the batch began): one an item installed and left behind (a
    /// resumed method that set it and suspended) is taken down after it, as a worker does after each item, or the next
    /// items and the host would run under it and their BCL awaits would post there.
    /// </summary>
    private int RunItems(Slot[] batch, int i, int count, bool onDefault)
    {
#if !NET
        System.Threading.ExecutionContext? entered = System.Threading.ExecutionContext.Capture();
#endif
        System.Threading.SynchronizationContext? sync = System.Threading.SynchronizationContext.Current;
        FrameLoop loop = Loop;
        while (i < count || loop.HasNested)
        {
            try
            {
                while (true)
                {
                    WorkItem item;
                    if (loop.HasNested)
                    {
                        // A chain of completions an item started went past the nesting bound (FrameLoop.DeferNested): it
                        // goes on here, before the next item.
                        item = loop.TakeNested();
                    }
                    else if (i < count)
                    {
                        item = batch[i].Item!;
                        batch[i].Item = null; // the slot is in cache now; clearing it here saves a second pass
                        i++;
                    }
                    else
                    {
                        break;
                    }
                    if (onDefault)
                    {
                        item.ExecuteOnDefaultContext();
                        ContextFlow.RestoreDefaultIfChanged();
                    }
                    else
                    {
                        item.Execute();
                    }
                    ContextFlow.RestoreSynchronizationContext(sync);
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
                ContextFlow.RestoreSynchronizationContext(sync);
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

using System;

namespace SpindleLib;

/// <summary>
/// A waiter that is its own continuation: a source stores the object itself (registered with <see cref="s_moveNext"/>
/// as the marker) and its completion resumes it with one virtual call, with no delegate to invoke and no state to keep.
/// State-machine boxes and combinator slots are direct waiters; as work items they can also be queued as they are.
/// </summary>
internal abstract class DirectWaiter : WorkItem
{
    /// <summary>
    /// The continuation every Spindle source invokes for a direct waiter, with the waiter itself as the state. A source
    /// built on <see cref="SourceCore{TResult}"/> recognises it and stores the waiter alone (one CAS); any other source
    /// keeps the pair and calls it.
    /// </summary>
    internal static readonly Action<object?> s_moveNext = static o => ((DirectWaiter)o!).MoveNext();

    /// <summary>Resumes the waiter: its source has completed (or it was queued to run).</summary>
    public abstract void MoveNext();
}

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

    /// <summary>
    /// The continuation a user's <see cref="ISpindleSource"/> is handed instead of <see cref="s_moveNext"/>
    /// (<see cref="RegisterOnUsersSource"/>): it runs the waiter only if the waiter still waits for that source, and
    /// refuses a second run with an exception naming the misuse.
    /// </summary>
    private static readonly Action<object?> s_moveNextOnce = static o => ((DirectWaiter)o!).MoveNextOnce();

    /// <summary>
    /// Sets (<paramref name="owed"/> true) or takes (false) the mark "a user's source owes this waiter its one run"; a
    /// take returns whether it was set, and changes nothing when it was not: set by a registration on a user's source (<see cref="RegisterOnUsersSource"/>) before
    /// the source sees the continuation, taken by the run (<see cref="MoveNextOnce"/>) or by a registration that threw.
    /// The exchange is the claim: of two runs of one registration (in turn or racing) exactly one finds the mark. Kept
    /// in a field the waiter has anyway where it can (a box's pool link, unused while the box is rented), since a field of
    /// its own would add 8 bytes to every pending async method's box (104 to 112, measured). Spindle's own sources run a
    /// waiter once by construction (their completion core's one CAS): they neither set nor take it.
    /// </summary>
    private protected abstract bool ExchangeRunOwed(bool owed);

    /// <summary>Resumes the waiter: its source has completed (or it was queued to run).</summary>
    public abstract void MoveNext();

    /// <summary>
    /// True for a source that is not Spindle's own: a user's implementation of <see cref="ISpindleSource"/>, which runs
    /// the continuation it is handed itself. Every Spindle source reads quietly (<see cref="IQuietSource"/>) or, for a
    /// task scope's outcome, can be let go of (<see cref="IDetachableSource"/>); both interfaces are internal, so a
    /// user's source implements neither. One interface test on the awaits of Spindle's own sources, which it passes.
    /// </summary>
    internal static bool IsUsersSource(ISpindleSource source) => source is not IQuietSource && source is not IDetachableSource;

    /// <summary>
    /// Registers this waiter on a user's source (<see cref="IsUsersSource"/>), whose completion may run the waiter twice
    /// (misuse that <see cref="ISpindleSource.OnCompleted"/>'s contract forbids): a second run would resume an async
    /// method a second time from the same await (running its code twice), or resume it at a later await it had not
    /// reached, or, once the method finished and its box was reused, run another call's method out of turn; a combinator's
    /// slot would count its input twice. The continuation handed over refuses any run after the first (or after a
    /// registration that threw), on the thread that runs it, and leaves the waiter alone. A second run comes too late to
    /// be caught only when the waiter waits on a user's source again by then (the same one, or another).
    /// </summary>
    internal void RegisterOnUsersSource(ISpindleSource source, short token)
    {
        // Published before the source can see the continuation: it may run it inline, or hand it to another thread.
        ExchangeRunOwed(true);
        try
        {
            source.OnCompleted(s_moveNextOnce, this, token);
        }
        catch
        {
            // The registration failed (a stale token, the source's own error): nothing is owed, and a run of the
            // continuation the source may have kept is refused.
            ExchangeRunOwed(false);
            throw;
        }
    }

    private void MoveNextOnce()
    {
        if (!ExchangeRunOwed(false))
        {
            ThrowHelper.ThrowContinuationRunTwice();
        }
        MoveNext();
    }
}

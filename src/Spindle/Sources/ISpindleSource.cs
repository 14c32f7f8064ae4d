using System;
using System.Diagnostics.CodeAnalysis;
using System.Runtime.CompilerServices;
using System.Runtime.ExceptionServices;
using System.Threading;
using System.Threading.Tasks;
using System.Threading.Tasks.Sources;

namespace SpindleLib;

/// <summary>The state of a Spindle source for one version token.</summary>
public enum SpindleTaskStatus
{
    /// <summary>The operation has not completed yet.</summary>
    Pending = 0,
    /// <summary>The operation completed successfully.</summary>
    Succeeded = 1,
    /// <summary>The operation completed with an exception.</summary>
    Faulted = 2,
    /// <summary>The operation was canceled: its result throws an <see cref="System.OperationCanceledException"/> (a <see cref="System.Threading.Tasks.TaskCanceledException"/> when Spindle canceled it for a token, as a canceled <see cref="System.Threading.Tasks.Task"/>'s await throws).</summary>
    Canceled = 3,
}

/// <summary>
/// The one awaitable contract of Spindle. Every awaitable object in Spindle implements it, and also
/// <see cref="IValueTaskSource"/>, so that <c>AsValueTask()</c> is free.
/// </summary>
/// <remarks>
/// <para>A source may be pooled. Each use of a pooled source carries a <c>short</c> version token; calling any member
/// with a token that is not the current one is misuse and throws <see cref="InvalidOperationException"/>.</para>
/// <para>A source supports exactly one continuation per version. <see cref="IValueTaskSource.GetResult(short)"/>
/// consumes the result: for a pooled source it returns the object to its pool.</para>
/// </remarks>
public interface ISpindleSource : IValueTaskSource
{
    /// <summary>Gets the status of the operation identified by <paramref name="token"/>.</summary>
    /// <exception cref="InvalidOperationException">The token is stale: the task was already awaited.</exception>
    new SpindleTaskStatus GetStatus(short token);

    /// <summary>
    /// Schedules <paramref name="continuation"/> to run with <paramref name="state"/> when the operation completes.
    /// The continuation runs on the thread that completes the source (after a bounded nesting depth it is
    /// dispatched to the workers instead, or, when that thread is running a <see cref="FrameLoop"/>'s frame or phase,
    /// queued to it: it runs on the loop thread as soon as the phase's current item returns, before the next). No <see cref="System.Threading.ExecutionContext"/> or
    /// <see cref="System.Threading.SynchronizationContext"/> is captured.
    /// </summary>
    /// <remarks>
    /// <para><b>For an implementer.</b> The continuation may run inline: inside this call, before it returns, when the
    /// use has completed already (it completed between the caller's <see cref="GetStatus"/> and this call), and inside
    /// your completion, on the completing thread. Spindle's own sources do both. Spindle's awaiter, WhenAll/WhenAny,
    /// <c>WithTimeout</c> and <c>Preserve</c> accept either, or a continuation queued elsewhere: they call this method
    /// holding no lock, and expect the continuation to run at once. Three rules: run it exactly once per use; run it only
    /// once <see cref="GetStatus"/> reports the use completed (it reads the use at once, with
    /// <see cref="IValueTaskSource.GetResult(short)"/>); and never while you hold a lock of your own, since it runs the
    /// awaiting code, which may call your primitive again (decide the completion under your lock, then run it after
    /// releasing it). A continuation run a second time throws <see cref="InvalidOperationException"/> on
    /// the thread that runs it and resumes nothing (Spindle's awaiter, WhenAll/WhenAny, <c>Preserve</c> and a scope's child
    /// refuse it), unless by then the waiter waits on a source of yours again. Spindle bounds the depth of its own inline runs (a chain of completions that resume code that completes
    /// the next) by queueing past 32 nested runs; a source that runs the continuation itself is outside that count, so
    /// where your completions can chain, wrap a <see cref="Promise{T}"/> (whose completion keeps the bound) or queue
    /// the continuation (<c>ThreadPool.UnsafeQueueUserWorkItem(continuation, state, preferLocal: true)</c>).</para>
    /// </remarks>
    /// <exception cref="ArgumentNullException"><paramref name="continuation"/> is null (Spindle's own sources check; an implementer should too).</exception>
    /// <exception cref="InvalidOperationException">The token is stale, or a continuation is already registered.</exception>
    void OnCompleted(Action<object?> continuation, object? state, short token);
}

/// <summary>The awaitable contract of Spindle for operations that produce a <typeparamref name="T"/>.</summary>
/// <typeparam name="T">The result type.</typeparam>
public interface ISpindleSource<T> : ISpindleSource, IValueTaskSource<T>
{
    /// <summary>Gets the status of the operation identified by <paramref name="token"/>.</summary>
    /// <exception cref="InvalidOperationException">The token is stale: the task was already awaited.</exception>
    new SpindleTaskStatus GetStatus(short token);

    /// <summary>
    /// Gets the result of the operation identified by <paramref name="token"/>, consuming it. Spindle's own sources block
    /// until the operation completes if it has not yet.
    /// </summary>
    /// <exception cref="InvalidOperationException">The token is stale: the task was already awaited.</exception>
    new T GetResult(short token);
}

/// <summary>
/// A source whose waiter may leave before the operation completes: a combinator whose race is decided detaches from its
/// other inputs instead of waiting for them, so the inputs' owners can reuse them at once (a promise can be reset, a
/// signal waited on again) and the combinator goes back to its pool at once.
/// </summary>
internal interface IDetachableSource
{
    /// <summary>
    /// Takes back <paramref name="waiter"/>, registered on the current use: it will never run. What becomes of the use is
    /// the source's own business (a promise is left pending until it is reset, an async method's box observes itself, a
    /// signal's wait ends without consuming a set), but a fault nobody reads is still reported, never lost.
    /// </summary>
    /// <returns>
    /// <see cref="DetachOutcome.Detached"/>; <see cref="DetachOutcome.Completed"/> when the operation has completed or is
    /// completing and reading it is harmless and repeatable (a promise, a signal's wait), so that the caller may read it
    /// at once rather than leave it to the waiter, which runs later; <see cref="DetachOutcome.NotWaiting"/> otherwise (the
    /// waiter is not registered yet or any more, or it will read the completed operation itself).
    /// </returns>
    DetachOutcome TryDetach(DirectWaiter waiter);

    /// <summary>
    /// Abandons use <paramref name="token"/>, which nobody awaits, as a detach would (a combinator settled by an input
    /// that had already finished, without registering on the others). False if it cannot (awaited, finished, another
    /// use, or a kind that must be observed instead, as an async method is by <see cref="SpindleTask.Forget"/>).
    /// </summary>
    bool TryAbandon(short token);
}

/// <summary>
/// A source whose completed use a read does not consume (a promise, a preserved task, a task made failed, a task
/// scope's wait), so that
/// <see cref="SpindleTask.Forget"/> can meet the same completion more than once: its fault is reported once per
/// completion, by whichever report claims it first.
/// </summary>
internal interface IRereadableSource
{
    /// <summary>
    /// Claims the report of use <paramref name="token"/>'s fault: true the first time, false once it was claimed (its
    /// fault was reported already). True when the use is no longer current (reset meanwhile): nothing is left to compare
    /// with, and a fault is never dropped on a guess.
    /// </summary>
    bool TryClaimFaultReport(short token);
}

/// <summary>
/// The one rule for every report of a fault read from an input nobody else reads (a forgotten task, a combinator's
/// loser): once per completion.
/// </summary>
internal static class FaultReport
{
    // The BCL tasks whose fault was reported. A Task completes once, so the task object is its completion: an entry is
    // added once (the add is the claim: the table's own lock makes the test-and-add atomic) and lives as long as the task
    // (the table holds its keys weakly). Touched only on the path that reports a BCL task's fault.
    private static readonly ConditionalWeakTable<Task, object> s_reportedTasks = new();

    /// <summary>
    /// True if the fault of <paramref name="origin"/>'s completion is to be reported now: always, unless a read does not
    /// consume the origin and the same completion was reported already. That is a Spindle source whose read does not
    /// consume it (<see cref="IRereadableSource"/>, use <paramref name="token"/>), or a BCL <see cref="Task"/> (one
    /// completion: the same task passed twice to a combinator, or lost by two, is reported once). Call it only for a
    /// fault that is reported (not a cancellation), so that a claim is never spent on nothing.
    /// </summary>
    public static bool Claim(object? origin, short token) => origin switch
    {
        IRereadableSource rereadable => rereadable.TryClaimFaultReport(token),
        Task task => ClaimTask(task),
        _ => true,
    };

    /// <summary>
    /// True for an origin whose one completion more than one read may meet (a Spindle source a read does not consume, or a
    /// BCL task), so that its fault's report is claimed (<see cref="Claim"/>) and a copy of it is recognised.
    /// </summary>
    public static bool IsRereadable([NotNullWhen(true)] object? origin) => origin is IRereadableSource || origin is Task;

    private static bool ClaimTask(Task task)
    {
#if NET
        return s_reportedTasks.TryAdd(task, s_reportedTasks);
#else
        lock (s_reportedTasks)
        {
            if (s_reportedTasks.TryGetValue(task, out _))
            {
                return false;
            }
            s_reportedTasks.Add(task, s_reportedTasks);
            return true;
        }
#endif
    }

    /// <summary>True for a failure that is reported: a fault, not a cancellation (an outcome).</summary>
    public static bool IsFault([NotNullWhen(true)] ExceptionDispatchInfo? failure)
        => failure is not null && failure.SourceException is not OperationCanceledException;
}

/// <summary>
/// The claim of a source whose one completion is never reset (a <c>FromException</c> task, a preserved task, a scope's
/// outcome): the first <see cref="TryTake"/> wins, every later one, on any thread, loses.
/// </summary>
/// <remarks>
/// Lock-free: the classic atomic test-and-set (one <see cref="Interlocked.Exchange(ref int, int)"/>). Invariant:
/// <see cref="_taken"/> goes from 0 to 1 once and never back, so exactly one caller ever sees 0. A source that is reset
/// keeps its claim in its completion core's word instead (SourceCore's ReportedBit), which each version step drops.
/// </remarks>
internal struct ReportOnce
{
    private int _taken;

    public bool TryTake() => Interlocked.Exchange(ref _taken, 1) == 0;
}

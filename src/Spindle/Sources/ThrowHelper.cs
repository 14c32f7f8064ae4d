using System;
using System.Diagnostics;
using System.Diagnostics.CodeAnalysis;
using System.Runtime.ExceptionServices;
using System.Threading;

namespace SpindleLib;

/// <summary>Throw sites kept out of hot methods so those stay small enough to inline.</summary>
[StackTraceHidden]
internal static class ThrowHelper
{
    internal const string AwaitOnceMessage =
        "This Spindle task was already awaited, was passed to Forget(), or was let go of by a combinator that ended without it " +
        "(a WhenAny that another input won, a WithTimeout or WithCancellation whose timeout or token came first, a WhenAll " +
        "decided by its token or timeout), or it is a Promise's task and the promise was Reset() since the task was taken " +
        "(a promise's task belongs to one use: take promise.Task again after each Reset()). " +
        "A pooled Spindle task can be awaited exactly once, because its source returns to " +
        "the pool when its result is read. Call Preserve() on the task to get one that can be awaited many times; Preserve() " +
        "itself takes the task's one await, so call it once, where the task is made, and give the preserved task to every " +
        "waiter; to wait for the same task turn after turn (an overall deadline, a long-running operation raced in a loop), " +
        "preserve it once, before the loop, and pass the preserved task each turn.";

    /// <summary>
    /// The second-awaiter error: another awaiter is registered on this use. A combinator that ended without a source it
    /// cannot let go of (a <see cref="Spindle.Run(Action)"/> task, a combined task) is such an awaiter until the source
    /// finishes, which is what a loop that hands the same task to a combinator every turn meets on its second turn.
    /// </summary>
    internal const string SecondAwaiterMessage =
        "This Spindle task already has an awaiter: it is awaited elsewhere, or a combinator that ended without it (a WhenAny " +
        "it lost, a WithTimeout or WithCancellation whose timeout or token came first) still waits for it, since a task it " +
        "cannot let go of (a Spindle.Run task, a combined task) is read when it finishes. A Spindle task supports one await " +
        "at a time; call Preserve() on the task to await it from several places, or to wait for it turn after turn. " +
        "Preserve() itself takes the task's one await, so call it once, where the task is made (before the loop), and give " +
        "the preserved task to every waiter (each turn).";

    /// <summary>
    /// The last await-once error this thread threw (<see cref="ThrowStaleToken"/>, <see cref="ThrowAlreadyAwaited"/>): a
    /// Spindle source throws them before it registers anything, so an async method's builder that catches one from an
    /// awaiter's OnCompleted knows that no continuation was left behind (<see cref="IsRefusedRegistration"/>). Written
    /// only on those throw paths.
    /// </summary>
    [ThreadStatic]
    private static Exception? t_lastRefusal;

    [DoesNotReturn]
    public static void ThrowStaleToken() => throw Refusal(new InvalidOperationException(AwaitOnceMessage));

    [DoesNotReturn]
    public static void ThrowAlreadyAwaited() => throw Refusal(new InvalidOperationException(SecondAwaiterMessage));

    /// <summary>
    /// Marks <paramref name="exception"/> as this thread's last refusal. A read that built its lazy cancellation and then
    /// found its token stale (misuse: the use was reset or read meanwhile) throws this instead of the cancellation: it
    /// lets go of the thread's record of that build (<see cref="LazyCancellation.Drop"/>), which held the token's source
    /// alive on an idle thread.
    /// </summary>
    private static Exception Refusal(Exception exception)
    {
        LazyCancellation.Drop();
        return t_lastRefusal = exception;
    }

    /// <summary>
    /// The marks a refusal leaves on this thread: <see cref="t_lastRefusal"/>, and the record of a lazy cancellation that
    /// <see cref="LazyCancellation.Drop"/> lets go of. Saved and put back by a read that must change nothing, a debugger's
    /// display (<see cref="DebuggerText.TryStatus"/>).
    /// </summary>
    public static (Exception? LastRefusal, ExceptionDispatchInfo? Built) SaveRefusalMarks() => (t_lastRefusal, LazyCancellation.LastBuilt);

    /// <summary>Puts back the marks <see cref="SaveRefusalMarks"/> saved.</summary>
    public static void RestoreRefusalMarks((Exception? LastRefusal, ExceptionDispatchInfo? Built) marks)
    {
        t_lastRefusal = marks.LastRefusal;
        LazyCancellation.LastBuilt = marks.Built;
    }

    /// <summary>
    /// True if <paramref name="exception"/> is the await-once error a Spindle source threw on this thread, before
    /// registering anything (the registration was refused, so no continuation is left registered). Clears the mark.
    /// </summary>
    public static bool IsRefusedRegistration(Exception exception)
    {
        bool refused = ReferenceEquals(exception, t_lastRefusal);
        t_lastRefusal = null;
        return refused;
    }

    /// <summary>
    /// True if <paramref name="exception"/> is the await-once error a Spindle source threw on this thread; unlike
    /// <see cref="IsRefusedRegistration"/>, leaves the mark in place.
    /// </summary>
    public static bool IsLastRefusal(Exception exception) => ReferenceEquals(exception, t_lastRefusal);

    /// <summary>
    /// The message of a refusal of an awaiter's <c>OnCompleted(Action)</c> (the await-once errors) with the name of the
    /// async method whose await it refused. Only code that is not a Spindle async method registers that way, above all
    /// the BCL's builders (<c>async Task</c>: every ASP.NET Core handler, a twenty-fifth user's review, docs/decisions.md
    /// section 53); a trace of their frames says nothing of which await to fix, so the message does.
    /// </summary>
    public static string RefusedAwaitMessage(InvalidOperationException refusal, Action continuation)
        => refusal.Message + " The refused await is in " + AwaitingMethodOf(continuation) + ".";

    /// <summary>Throws a refused await's error (<see cref="RefusedAwaitMessage"/>), marked as a refusal: nothing was registered.</summary>
    [DoesNotReturn]
    public static void ThrowRefusedAwait(string message) => throw Refusal(new InvalidOperationException(message));

    /// <summary>
    /// The state machine a builder's continuation resumes, or null: the builders hand over their box's MoveNext, and the
    /// box's type (<c>AsyncStateMachineBox&lt;TStateMachine&gt;</c>) is generic over the state machine.
    /// </summary>
    public static Type? StateMachineOf(Action continuation)
    {
        if (continuation.Target is { } target)
        {
            foreach (Type argument in target.GetType().GetGenericArguments())
            {
                if (typeof(System.Runtime.CompilerServices.IAsyncStateMachine).IsAssignableFrom(argument))
                {
                    return argument;
                }
            }
        }
        return null;
    }

    /// <summary>The async method a builder's continuation resumes (<see cref="StateMachineOf"/>); any other continuation is named by its own method.</summary>
    private static string AwaitingMethodOf(Action continuation)
    {
        if (StateMachineOf(continuation) is { } stateMachine)
        {
            return TaskTracker.MethodNameOf(stateMachine);
        }
        System.Reflection.MethodInfo method = continuation.Method;
        return method.DeclaringType is { } type ? (type.FullName ?? type.Name).Replace('+', '.') + "." + method.Name : method.Name;
    }

    /// <summary>
    /// The exception a Spindle task canceled by <paramref name="cancellationToken"/> throws: a
    /// <see cref="System.Threading.Tasks.TaskCanceledException"/> (an <see cref="OperationCanceledException"/>) carrying
    /// the token, as the await of a canceled BCL task throws (<c>Task.Delay</c>, <c>WaitAsync</c>,
    /// <c>TaskCompletionSource.SetCanceled</c>), so code that catches either type behaves as it did over Task.
    /// </summary>
    public static OperationCanceledException Canceled(CancellationToken cancellationToken)
        => new System.Threading.Tasks.TaskCanceledException(CanceledMessage, null, cancellationToken);

    private const string CanceledMessage = "A task was canceled.";

    /// <summary>
    /// A user's <see cref="ISpindleSource"/> ran a continuation it no longer owed: a second time, or after its
    /// <c>OnCompleted</c> threw (<see cref="DirectWaiter.RegisterOnUsersSource"/>).
    /// </summary>
    [DoesNotReturn]
    public static void ThrowContinuationRunTwice() => throw new InvalidOperationException(
        "An ISpindleSource ran a continuation it had already run (or one whose OnCompleted call threw). A source runs the " +
        "continuation handed to OnCompleted exactly once per use: a second run would resume the awaiting code again. " +
        "Make taking the continuation the one claim (clear it, under your lock or with an Interlocked.Exchange, before " +
        "running it), or wrap a pooled Promise, whose completion runs it once.");

    public static void ThrowNotCompleted() => throw new InvalidOperationException(
        "The Spindle task has not completed yet. Await it (or call GetAwaiter().GetResult(), which blocks) instead of reading its result directly.");

    [DoesNotReturn]
    public static void ThrowInvalidOperation(string message) => throw new InvalidOperationException(message);

    [DoesNotReturn]
    public static void ThrowArgumentNull(string paramName) => throw new ArgumentNullException(paramName);

    [DoesNotReturn]
    public static void ThrowArgumentOutOfRange(string paramName, string message) => throw new ArgumentOutOfRangeException(paramName, message);
}

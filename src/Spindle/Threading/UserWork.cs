using System;
using System.Runtime.CompilerServices;

namespace SpindleLib;

/// <summary>
/// Runs a user's delegate or job whose exception is rethrown later, elsewhere (at the await of a
/// <see cref="Spindle.Run(Action)"/> task, a job handle's <c>Complete()</c> or await), and catches it. Deliberately not
/// <c>[StackTraceHidden]</c>, and never inlined: the runtime prints "--- End of stack trace from previous location ---"
/// after the last frame of a rethrown exception's earlier trace only if that frame is shown, and that frame is the one
/// that caught it. With the catch in a hidden runner the marker was lost, and a job that failed on a worker read as if
/// the method awaiting it had called it: <c>at App.Job.Execute()</c>, then <c>at App.Main()</c> at its
/// <c>Complete()</c>. So one Spindle frame shows, as <c>ExecutionContext.RunFromThreadPoolDispatchLoop</c> does in a
/// <c>Task.Run</c> trace, and the marker after it says the work ran elsewhere.
/// </summary>
internal static class UserWork
{
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static Exception? Run(Action work)
    {
        try
        {
            work();
            return null;
        }
        catch (Exception ex)
        {
            return ex;
        }
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    public static Exception? Run<TResult>(Func<TResult> work, out TResult result)
    {
        try
        {
            result = work();
            return null;
        }
        catch (Exception ex)
        {
            result = default!;
            return ex;
        }
    }

    /// <summary>As <see cref="Run(Action)"/>, for work given a state (<c>Spindle.Run(action, state)</c>).</summary>
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static Exception? Run(Action<object?> work, object? state)
    {
        try
        {
            work(state);
            return null;
        }
        catch (Exception ex)
        {
            return ex;
        }
    }

    /// <summary>As <see cref="Run{TResult}(Func{TResult}, out TResult)"/>, for work given a state.</summary>
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static Exception? Run<TResult>(Func<object?, TResult> work, object? state, out TResult result)
    {
        try
        {
            result = work(state);
            return null;
        }
        catch (Exception ex)
        {
            result = default!;
            return ex;
        }
    }

    /// <summary>Runs a job struct in place (a constrained call, specialised per job type: no boxing, no copy).</summary>
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static Exception? Execute<TJob>(ref TJob job) where TJob : struct, IJob
    {
        try
        {
            job.Execute();
            return null;
        }
        catch (Exception ex)
        {
            return ex;
        }
    }
}

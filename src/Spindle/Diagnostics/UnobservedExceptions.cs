using System;
using System.Threading;

namespace SpindleLib;

/// <summary>Routes faults that nobody awaits to <see cref="Spindle.UnobservedException"/>.</summary>
internal static class UnobservedExceptions
{
    public static event Action<Exception>? Handlers;

    public static void Report(Exception exception)
    {
        SpindleMetrics.ExceptionReported();
        // The handlers run in the default ExecutionContext, as TaskScheduler.UnobservedTaskException's do (on the finalizer
        // thread). The reporting thread is often running other code's context: the thread that completed a forgotten
        // promise or a combinator's losing input runs the completer's, so a handler that logs with the current request's
        // trace id (an AsyncLocal, Activity.Current) would tag the fault with another request's. What a handler sets
        // stays inside that run, and never reaches the reporting thread (a worker's loop, a completer's code): the reporting
        // thread is in the position of a helping waiter running an item that is not its own.
        // And no SynchronizationContext, as on the finalizer thread. A report is rare: on Mono, where the helper cannot tell
        // the reporting thread's context from the default, it enters a copy of the default (an allocation) anyway.
        WorkerPool.RunKeepingContext(s_runHandlers, exception, enterDefaultEvenIfUnsure: true);
    }

    private static readonly ContextCallback s_runHandlers = static o => RunHandlers((Exception)o!);

    private static void RunHandlers(Exception exception)
    {
        // The handlers attached now get this report: one attached or detached meanwhile (even by a handler) changes only
        // later reports. A field-like event's add and remove are lock-free and publish a new delegate, so this read is a
        // consistent list.
        Action<Exception>? handlers = Handlers;
        if (handlers is null)
        {
            // Never swallowed: with no handler attached, the fault is written to standard error.
            WriteToStandardError("Spindle: unobserved exception (attach a handler to Spindle.UnobservedException to handle these): " + Describe(exception));
            return;
        }
        foreach (Action<Exception> handler in handlers.GetInvocationList())
        {
            try
            {
                handler(exception);
            }
            catch (Exception handlerFailure)
            {
                // A failing handler must not stop the others or kill the reporting thread (a worker's loop, the finalizer
                // thread), but neither its failure nor the fault it may not have recorded may vanish: both go where a
                // fault goes with no handler.
                WriteToStandardError("Spindle: a Spindle.UnobservedException handler threw " + Describe(handlerFailure)
                    + Environment.NewLine + "while handling this unobserved exception: " + Describe(exception));
            }
        }
    }

    /// <summary>
    /// The exception's text, or its type's name if making the text throws (a ToString or Message override may): this
    /// runs on the reporting thread, a worker's loop or the finalizer thread, which nothing may throw into.
    /// </summary>
    private static string Describe(Exception exception)
    {
        try
        {
            return exception.ToString();
        }
        catch (Exception)
        {
            return exception.GetType().FullName + " (its text could not be made: its ToString threw)";
        }
    }

    private static void WriteToStandardError(string message)
    {
        try
        {
            Console.Error.WriteLine(message);
        }
        catch (Exception)
        {
            // Standard error itself failed; there is nowhere left to report to.
        }
    }
}

using System;

namespace SpindleLib;

/// <summary>Routes faults that nobody awaits to <see cref="Spindle.UnobservedException"/>.</summary>
internal static class UnobservedExceptions
{
    public static event Action<Exception>? Handlers;

    public static void Report(Exception exception)
    {
        SpindleMetrics.ExceptionReported();
        Action<Exception>? handlers = Handlers;
        if (handlers is null)
        {
            // Never swallowed: with no handler attached, the fault is written to standard error.
            try
            {
                Console.Error.WriteLine("Spindle: unobserved exception (attach a handler to Spindle.UnobservedException to handle these): " + exception);
            }
            catch (Exception)
            {
                // Standard error itself failed; there is nowhere left to report to.
            }
            return;
        }
        foreach (Action<Exception> handler in handlers.GetInvocationList())
        {
            try
            {
                handler(exception);
            }
            catch (Exception)
            {
                // A failing handler must not stop the others or kill the reporting thread.
            }
        }
    }
}

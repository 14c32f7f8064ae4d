using System.Threading;

namespace SpindleLib;

/// <summary>Removing a cancellation registration the way every Spindle wait does.</summary>
internal static class CancellationRegistrations
{
    /// <summary>
    /// Unregisters and clears <paramref name="registration"/>; if its callback is already running on another thread,
    /// waits for that callback to finish. The wait matters: a pooled or reused source whose registration is dropped
    /// may start a new use at once, and a callback still in flight from the old use would otherwise cancel the new one
    /// (a token check cannot close that window: the callback may pass the check just before the source is reused).
    /// The wait is paid only when cancellation and completion actually race; a callback running on the calling thread
    /// (a continuation run inline by the cancellation itself) is not waited for.
    /// Returns false when the callback had already started (it has run, or is running on this very thread), so that a
    /// pooled owner whose callback touches it after the continuation can decline to be reused; true otherwise.
    /// </summary>
    public static bool Drop(ref CancellationTokenRegistration registration)
    {
        CancellationTokenRegistration r = registration;
        registration = default;
#if NET
        if (r.Unregister() || !r.Token.CanBeCanceled)
        {
            return true;
        }
        r.Dispose();
        return false;
#else
        r.Dispose(); // waits for a callback in flight (unless called from inside it)
        return true;
#endif
    }
}

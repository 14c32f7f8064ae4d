using System.Threading;

namespace SpindleLib;

/// <summary>Removing a cancellation registration the way every Spindle wait does: without blocking on a callback in flight.</summary>
internal static class CancellationRegistrations
{
    /// <summary>
    /// Unregisters and clears <paramref name="registration"/>. On .NET, Unregister does not wait for a callback that is
    /// already running; callers make such a late callback harmless by checking its token against the current wait's.
    /// Returns false when the callback has run or may still be running (it was not removed in time), so that a pooled
    /// owner can decline to be reused; true when it can no longer run (removed, or nothing was registered).
    /// </summary>
    public static bool Drop(ref CancellationTokenRegistration registration)
    {
        CancellationTokenRegistration r = registration;
        registration = default;
#if NET
        return r.Unregister() || !r.Token.CanBeCanceled;
#else
        r.Dispose(); // waits for a callback in flight (unless called from inside it)
        return true;
#endif
    }
}

using System.Threading;

namespace SpindleLib;

/// <summary>Removing a cancellation registration the way every Spindle wait does: without blocking on a callback in flight.</summary>
internal static class CancellationRegistrations
{
    /// <summary>
    /// Unregisters and clears <paramref name="registration"/>. On .NET, Unregister does not wait for a callback that is
    /// already running; callers make such a late callback harmless by checking its token against the current wait's.
    /// </summary>
    public static void Drop(ref CancellationTokenRegistration registration)
    {
        CancellationTokenRegistration r = registration;
        registration = default;
#if NET
        r.Unregister();
#else
        r.Dispose();
#endif
    }
}

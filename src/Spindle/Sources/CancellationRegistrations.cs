using System.Threading;

namespace SpindleLib;

/// <summary>Adding and removing a cancellation registration the way every Spindle wait does.</summary>
internal static class CancellationRegistrations
{
#if NET
    /// <summary>
    /// Registers <paramref name="callback"/> without capturing the caller's ExecutionContext: it runs in the context of
    /// whoever cancels, as every Spindle continuation it completes brings its own. The token is passed to the callback.
    /// </summary>
    [System.Runtime.CompilerServices.MethodImpl(System.Runtime.CompilerServices.MethodImplOptions.AggressiveInlining)]
    public static CancellationTokenRegistration Register(CancellationToken token, System.Action<object?, CancellationToken> callback, object state)
        => token.UnsafeRegister(callback, state);
#else
    /// <summary>
    /// Registers <paramref name="callback"/> (netstandard2.1 has no UnsafeRegister). On Mono, whose captures are not
    /// stable (<see cref="ContextFlow.CaptureIsStable"/>), a captured context is a new object, and it carries the
    /// caller's SynchronizationContext into the callback and into the continuations the callback completes: there the
    /// registration is made under <see cref="ExecutionContext.SuppressFlow"/> (unless flow is already suppressed:
    /// suppressing it twice throws on Mono and before .NET 8). On .NET Core a capture of the default context is free
    /// and carries no SynchronizationContext, while SuppressFlow would allocate, so it registers as it is. The callback
    /// gets no token here: it reads the one its wait stored.
    /// </summary>
    public static CancellationTokenRegistration Register(CancellationToken token, System.Action<object?> callback, object state)
    {
        if (ContextFlow.CaptureIsStable || ExecutionContext.IsFlowSuppressed())
        {
            return token.Register(callback, state);
        }
        using (ExecutionContext.SuppressFlow())
        {
            return token.Register(callback, state);
        }
    }
#endif

    /// <summary>
    /// Unregisters and clears <paramref name="registration"/>; if its callback is already running on another thread,
    /// waits for that callback to finish. The wait matters: a pooled or reused source whose registration is dropped
    /// may start a new use at once, and a callback still in flight from the old use would otherwise cancel the new one
    /// (a token check cannot close that window: the callback may pass the check just before the source is reused).
    /// The wait is paid only when cancellation and completion actually race; a callback running on the calling thread
    /// (a continuation run inline by the cancellation itself) is not waited for: an owner whose callback touches it
    /// after that continuation must not be reused until the callback returns (<c>Combinator.RunCancel</c>).
    /// </summary>
    public static void Drop(ref CancellationTokenRegistration registration)
    {
        CancellationTokenRegistration r = registration;
        registration = default;
#if NET
        if (!r.Unregister() && r.Token.CanBeCanceled)
        {
            r.Dispose(); // the callback has started: waits for it unless it is running on this thread
        }
#else
        r.Dispose(); // waits for a callback in flight (unless called from inside it)
#endif
    }
}

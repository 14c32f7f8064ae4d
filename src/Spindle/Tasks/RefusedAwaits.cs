using System;
using System.Diagnostics;
using System.Runtime.CompilerServices;
using System.Threading;

namespace SpindleLib;

/// <summary>
/// A second await of a Spindle task from a BCL async method (<c>async Task</c>, <c>async ValueTask</c>, a pooled
/// <c>ValueTask</c> builder's, <c>async void</c>) faults that method instead of ending the process.
/// </summary>
/// <remarks>
/// <para>The awaiter's <c>OnCompleted</c> refuses the registration (the await-once errors: nothing is registered). The
/// BCL's builders rethrow an exception from <c>OnCompleted</c> on the thread pool, which ends the process: one
/// singleton promise's task awaited by two requests at once ended an ASP.NET Core service (docs/decisions.md sections
/// 52, 53 and 55). Spindle's own builder delivers the refusal at the await, since its call to <c>OnCompleted</c> sits
/// inside the state machine's <c>try</c>; a BCL builder's does not, so the refusal is delivered through the method's
/// resumption instead: the continuation (the builder's box, whose <c>MoveNext</c> reads the awaiter before anything
/// else) is queued to the thread pool with a record of the refused use (source and token) on that thread, and the
/// awaiter's <c>GetResult</c> finds the record and throws the refusal in place of reading the source. The method
/// faults with it, as an <c>async SpindleTask</c> method does, and its caller sees it.</para>
/// <para>Why not let the resumed read go to the source: the refused await does not own the use. The source may still be
/// pending (a read would block the thread), or completed for the awaiter that owns it (a read would take that
/// awaiter's result, and for a pooled source give the source back to its pool under it). The record is matched by
/// source and token, and taken by the first read that matches, on that thread only.</para>
/// <para>Only a BCL builder's box is resumed so (<see cref="IsBclBuilderContinuation"/>): its <c>MoveNext</c> calls
/// <c>GetResult</c> on this awaiter first, synchronously, on the thread that invokes it. Any other continuation may read
/// later or elsewhere, so it gets the refusal thrown from <c>OnCompleted</c>, as before. On Mono (Unity), whose BCL
/// builder hands over a runner that is not generic over the state machine, the refusal is thrown as before.</para>
/// <para>The cost on every await: <c>GetResult</c> reads <see cref="RefusedAwaitGate.Queued"/>, a static that is not zero only while
/// a refused resumption is queued or running (docs/decisions.md section 55 has the A/B figures).</para>
/// </remarks>
[StackTraceHidden] // the refusal's trace starts at the await
internal static class RefusedAwaits
{
    /// <summary>Refused resumptions queued or running now (tests read it back to zero).</summary>
    internal static int Queued => Volatile.Read(ref RefusedAwaitGate.Queued);

    /// <summary>The refused use this thread's refused resumption is about to read; taken by the read that matches it.</summary>
    [ThreadStatic]
    private static Resumption? t_resuming;

    private sealed class Resumption(object source, short token, string message, Action continuation)
    {
        public readonly object Source = source;
        public readonly short Token = token;
        public readonly string Message = message;
        public readonly Action Continuation = continuation;
    }

    private static readonly WaitCallback s_resume = static state =>
    {
        var resumption = (Resumption)state!;
#if DEBUG
        TestHookBeforeResume?.Invoke(resumption.Source);
#endif
        t_resuming = resumption;
        try
        {
            resumption.Continuation();
        }
        finally
        {
            t_resuming = null; // a continuation that did not read (not expected of a BCL builder's box) leaves nothing behind
            Interlocked.Decrement(ref RefusedAwaitGate.Queued);
        }
    };

#if DEBUG
    /// <summary>
    /// Tests only: runs on the thread pool as a refused resumption starts, before its read, with the refused use's
    /// source: a test holds it there until the source has completed (<c>RefusedAwaitFromBclMethodTests</c>).
    /// </summary>
    internal static Action<object>? TestHookBeforeResume;
#endif

    /// <summary>
    /// Handles a refused registration of <paramref name="continuation"/> on use <paramref name="token"/> of
    /// <paramref name="source"/>: if the continuation is a BCL builder's, queues its resumption with the refusal for its
    /// read, and returns; otherwise throws the refusal, naming the awaiting method.
    /// </summary>
    public static void OnRefused(InvalidOperationException refusal, Action continuation, object source, short token, bool flowContext)
    {
        string message = ThrowHelper.RefusedAwaitMessage(refusal, continuation);
        if (!IsBclBuilderContinuation(continuation))
        {
            ThrowHelper.ThrowRefusedAwait(message); // a caller that is not a builder's box gets it here
        }
        ThrowHelper.IsRefusedRegistration(refusal); // the refusal is handled: clear this thread's mark
        var resumption = new Resumption(source, token, message, continuation);
        Interlocked.Increment(ref RefusedAwaitGate.Queued); // before the queue, whose hand-over orders it before the resumed read
        if (flowContext)
        {
            ThreadPool.QueueUserWorkItem(s_resume, resumption);
        }
        else
        {
            ThreadPool.UnsafeQueueUserWorkItem(s_resume, resumption);
        }
    }

    /// <summary>Throws the refusal if this thread is resuming a refused await of use <paramref name="token"/> of <paramref name="source"/>.</summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public static void ThrowIfRefused(object source, short token)
    {
        if (Volatile.Read(ref RefusedAwaitGate.Queued) != 0)
        {
            ThrowIfResumingRefused(source, token);
        }
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    private static void ThrowIfResumingRefused(object source, short token)
    {
        if (t_resuming is { } resumption && ReferenceEquals(resumption.Source, source) && resumption.Token == token)
        {
            t_resuming = null;
            ThrowHelper.ThrowRefusedAwait(resumption.Message);
        }
    }

    /// <summary>
    /// True if <paramref name="continuation"/> is a BCL async method builder's box (CoreCLR's
    /// <c>AsyncTaskMethodBuilder&lt;T&gt;.AsyncStateMachineBox&lt;TStateMachine&gt;</c>, which also serves
    /// <c>async ValueTask</c> and <c>async void</c>, or <c>PoolingAsyncValueTaskMethodBuilder</c>'s box): a type of the
    /// core library, generic over the state machine.
    /// </summary>
    internal static bool IsBclBuilderContinuation(Action continuation)
        => continuation.Target is { } target && target.GetType().Assembly == typeof(object).Assembly
            && ThrowHelper.StateMachineOf(continuation) is not null;
}

/// <summary>
/// The gate every Spindle await's <c>GetResult</c> reads (<see cref="RefusedAwaits.ThrowIfRefused"/>): refused
/// resumptions queued or running, zero but for a misuse. In a class of its own, with no other static, so that the read
/// is one load from a fixed address.
/// </summary>
internal static class RefusedAwaitGate
{
    /// <summary>Refused resumptions queued or running: while it is zero, <see cref="RefusedAwaits.ThrowIfRefused"/> reads nothing else.</summary>
    internal static int Queued;
}

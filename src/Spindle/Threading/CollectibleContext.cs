using System;
using System.Threading;
#if NET
using System.Runtime.Loader;
#endif

namespace SpindleLib;

/// <summary>
/// Stops Spindle's process-wide machinery when the <c>AssemblyLoadContext</c> that loaded Spindle itself is collectible
/// and starts unloading (Godot 4's .NET editor unloads the game's context, with the Spindle it loaded, on every rebuild).
/// Without this, three roots kept such a context alive for the life of the process (<c>docs/decisions.md</c> section 55): the
/// shared pool's worker threads, which never exit; <see cref="TimerWheel.Default"/>'s timer thread, which never ends
/// when idle; and Spindle's <c>Meter</c>, which the runtime's list of meters holds, with callbacks into Spindle code.
/// </summary>
/// <remarks>
/// <para><b>When.</b> <see cref="EnsureSubscribed"/> runs at the points that create one of the three roots (the shared
/// pool's creation, <see cref="TimerWheel.Default"/>'s creation, the meter's creation), never on a hot path: after the
/// first call it is one volatile read. It looks at the context once. In the default context, or any that is not
/// collectible, it subscribes nothing (<see cref="State"/> is <see cref="NotCollectible"/>). On netstandard2.1
/// (Unity, Mono) there is no such context and it does nothing at all.</para>
/// <para><b>What the Unloading handler does</b> (on the thread that called <c>Unload()</c>, the editor's main thread): it
/// signals the threads and returns, joining none. The shared pool is disposed: each worker finishes the item it is
/// running and exits; items still queued to the workers are dropped. <see cref="TimerWheel.Default"/>'s driver is
/// disposed, so its thread ends after the pass it may be running; timers still pending on it, and on the workers' own
/// shards, are dropped, not completed: the code awaiting them never resumes and its <c>finally</c> blocks never run (it is
/// the code being unloaded; completing them as cancelled would run it during the unload). The meter is disposed.</para>
/// <para><b>After it</b>, Spindle stays stopped in that context: a call that needs the workers or a timer on the system
/// clock (<see cref="Spindle.Run(Action)"/>, <see cref="Spindle.Yield"/>, a delay or timeout on
/// <see cref="TimerWheel.Default"/> or on a created wheel on <see cref="TimeProvider.System"/>, a continuation handed to
/// the workers, a blocking wait that would help them, a job's <c>Schedule</c>) throws <see cref="ObjectDisposedException"/>
/// saying the context is unloading, rather than restart threads that would pin the context again, or queue work that
/// nothing runs. A job scheduled before and ready only afterwards runs only if a thread waits on it (<c>Complete()</c>
/// runs it itself).</para>
/// <para><b>At process exit</b> the runtime raises every context's Unloading before <c>AppDomain.ProcessExit</c> (a
/// collectible context's before the default one's, as a throwaway host showed), and nothing the handler can see tells
/// that from an <c>Unload()</c>: Spindle stops then too, and a ProcessExit handler of that context's code that starts
/// Spindle work gets the exception (README, "Spindle in a collectible AssemblyLoadContext"; decisions section 56).</para>
/// </remarks>
internal static class CollectibleContext
{
    /// <summary><see cref="State"/>: nothing has created a root yet.</summary>
    internal const int Unchecked = 0;

    /// <summary><see cref="State"/>: Spindle's context is not collectible (or this is not .NET): nothing is subscribed.</summary>
    internal const int NotCollectible = 1;

    /// <summary><see cref="State"/>: subscribed to the collectible context's Unloading event.</summary>
    internal const int Subscribed = 2;

    // Invariant: moves from Unchecked to one of the two others once (a CAS), so the handler is added at most once.
    private static int s_state;

    // Set by the Unloading handler before it stops anything (a volatile write, then a full fence). A creation of a root
    // publishes it, then reads this (TimerWheel.InitDefault, Scheduler.InitDefault): either it sees the flag and stops
    // what it created, or the handler's later reads see the root and stop it.
    private static volatile bool s_unloading;

#if NET
    private static string? s_contextName;
#else
    private const string? s_contextName = null;
#endif

    /// <summary>Where the subscription stands: <see cref="Unchecked"/>, <see cref="NotCollectible"/> or <see cref="Subscribed"/>.</summary>
    internal static int State => Volatile.Read(ref s_state);

    /// <summary>True once the Unloading handler has begun: Spindle refuses new work (see the class remarks).</summary>
    internal static bool IsUnloading => s_unloading;

    /// <summary>Subscribes to the Unloading event of Spindle's own context if it is collectible; checks only once.</summary>
    internal static void EnsureSubscribed()
    {
        if (Volatile.Read(ref s_state) == Unchecked)
        {
            Subscribe();
        }
    }

    private static void Subscribe()
    {
#if NET
        AssemblyLoadContext? context = AssemblyLoadContext.GetLoadContext(typeof(CollectibleContext).Assembly);
        bool collectible = context is { IsCollectible: true };
        if (Interlocked.CompareExchange(ref s_state, collectible ? Subscribed : NotCollectible, Unchecked) == Unchecked && collectible)
        {
            s_contextName = context!.Name;
            context.Unloading += static _ => StopForUnload();
        }
#else
        Interlocked.CompareExchange(ref s_state, NotCollectible, Unchecked);
#endif
    }

    /// <summary>
    /// The Unloading handler (tests call it too): stops the workers, <see cref="TimerWheel.Default"/>'s thread and the
    /// meter, without waiting for any thread. Idempotent.
    /// </summary>
    internal static void StopForUnload()
    {
        s_unloading = true;
        Interlocked.MemoryBarrier(); // the store above before the reads below (see s_unloading)
        // Workers: the slot refuses to create a pool from now on and disposes the one it has (each worker ends after its
        // current item). Then the default scheduler is forgotten, so the next read of Scheduler.Default finds the pool
        // disposed and throws (Scheduler.InitDefault), instead of queuing to workers that have gone.
        WorkerPool.SharedSlot.Close();
        Scheduler.ForgetDefaultForUnload();
        // The default wheel's thread: its driver ends it after the pass it may be running. Its pending timers are dropped.
        TimerWheel.DefaultIfCreated?.Driver.Dispose();
        // The meter: the runtime's list of meters lets go of it and of its callbacks.
        SpindleMetrics.DisposeForUnload();
    }

    /// <summary>Throws the exception a call made after the Unloading handler throws.</summary>
    internal static void ThrowUnloading() => throw new ObjectDisposedException("Spindle",
        $"Spindle has stopped: the collectible AssemblyLoadContext '{s_contextName}' that loaded it is unloading. Its worker threads and " +
        "TimerWheel.Default's timer thread were ended by the context's Unloading event, and work still queued to them was dropped; " +
        "code of an unloading context cannot start new Spindle work.");
}

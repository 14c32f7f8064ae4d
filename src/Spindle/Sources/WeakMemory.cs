using System.Runtime.CompilerServices;
using System.Threading;
#if NET
using System.Runtime.Intrinsics.X86;
#else
using System.Runtime.InteropServices;
#endif

namespace SpindleLib;

/// <summary>
/// The fence a seqlock-style protocol needs between ordinary accesses and a later access of its version word, paid only
/// where the processor may reorder them.
/// </summary>
/// <remarks>
/// A seqlock reader reads the data and then checks the version again; its writer steps the version and then writes the
/// data. Each needs its two steps kept in order: load before load (the reader), store before store (the writer). .NET's
/// memory model gives that only to a full fence (<see cref="Interlocked.MemoryBarrier"/>): a volatile read orders what
/// follows it, not what precedes it, and a volatile write the converse. x86 and x64 keep loads in order with loads and
/// stores with stores in hardware (total store order), and RyuJIT does not move memory accesses across a volatile one,
/// so there the fence is nothing (the test is a JIT-time constant); elsewhere (ARM64) it is a full fence. The pattern is
/// Lameter's seqlock (Linux's <c>read_seqcount_retry</c> with its <c>smp_rmb</c>, and <c>write_seqcount_begin</c> with
/// its <c>smp_wmb</c>).
/// </remarks>
internal static class WeakMemory
{
#if !NET
    private static readonly bool s_ordered =
        RuntimeInformation.ProcessArchitecture is Architecture.X64 or Architecture.X86;
#endif

    /// <summary>
    /// Keeps the loads before it ahead of the loads after it, and the stores before it ahead of the stores after it: a
    /// full fence on a processor that may reorder them, nothing on x86/x64.
    /// </summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public static void Fence()
    {
#if NET
        if (X86Base.IsSupported)
        {
            return;
        }
#else
        if (s_ordered)
        {
            return;
        }
#endif
        Interlocked.MemoryBarrier();
    }
}

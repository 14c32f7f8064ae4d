using System;
using System.Threading;

namespace SpindleLib;

/// <summary>
/// Whether busy-waiting with pause instructions can help: only when another processor can run the thread being waited
/// for. With one processor (a container limited to one CPU, or a process pinned to one core) a spinning thread only keeps
/// that thread off the CPU until the OS preempts it, so every Spindle wait that spins yields or sleeps at once there
/// instead, as .NET's own <c>SpinWait</c> does on a single processor.
/// </summary>
internal static class Spinning
{
    /// <summary>
    /// True when <see cref="Environment.ProcessorCount"/> (the processors this process may use: its affinity and its
    /// container's CPU limit count) is above 1.
    /// </summary>
    public static readonly bool Helps = Environment.ProcessorCount > 1;

    /// <summary>
    /// Waits a moment for another thread: <paramref name="iterations"/> pause instructions where another processor can
    /// run that thread (<see cref="Thread.SpinWait(int)"/>), a yield of the processor where it cannot.
    /// </summary>
    public static void Pause(int iterations)
    {
        if (Helps)
        {
            Thread.SpinWait(iterations);
        }
        else
        {
            Thread.Yield();
        }
    }
}

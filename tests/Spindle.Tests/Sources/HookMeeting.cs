using System;
using System.Threading;

namespace SpindleLib.Tests.Sources;

/// <summary>
/// Two threads that meet at a test hook of the library, round after round, and leave it at about the same moment: each
/// waits for the other to arrive, then one of the two, in turn, spins for a number of iterations that sweeps through the
/// rounds, so that what follows the hook on each thread (a read, change and write of a shared count, if a mutant made it
/// one) meets the other's at every small offset. For a race whose two sides a frame, a combinator's let-go or a wheel's
/// pass reach at times too far apart for <see cref="ContinuationRacer"/>'s spins to line them up. Waits yield on one
/// processor, as the racer's do (<see cref="ContinuationRacer.Pause"/>). Used with <see cref="RaceRounds"/> by
/// <c>FrameWaiterReleaseRaceTests</c>, <c>LoopDelayLetGoRaceTests</c> and others (<c>grep HookMeeting</c>).
/// </summary>
internal sealed class HookMeeting
{
    private readonly int[] _arrived = [-1, -1];
    private int _missed = -1;

    /// <summary>The last round in which a side waited 10 s for the other in vain (-1 if none): a hook must not throw into the library.</summary>
    public int Missed => Volatile.Read(ref _missed);

    /// <summary>Side <paramref name="side"/> (0 or 1) arrives for round <paramref name="round"/>, waits for the other, then spins its share of the sweep.</summary>
    public void Arrive(int side, int round)
    {
        Volatile.Write(ref _arrived[side], round);
        if (!WaitFor(1 - side, round))
        {
            Volatile.Write(ref _missed, round);
            return;
        }
        int jitter = round % 8; // 0 to 3 spins, on one side or the other
        ContinuationRacer.Spin(jitter % 2 == side ? jitter / 2 : 0);
    }

    /// <summary>Waits until side <paramref name="side"/> has arrived for round <paramref name="round"/>; false after 10 s.</summary>
    public bool WaitFor(int side, int round)
    {
        long until = Environment.TickCount64 + 10_000;
        while (Volatile.Read(ref _arrived[side]) != round)
        {
            if (Environment.TickCount64 > until)
            {
                return false;
            }
            ContinuationRacer.Pause();
        }
        return true;
    }
}

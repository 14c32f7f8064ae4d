using System;
using System.Collections.Concurrent;
using System.Threading;

namespace SpindleLib.Tests.Time;

/// <summary>
/// Spreads a Barrier-forced race over its window. Racer 0 also runs the rounds' before/after steps, so it leaves the
/// barrier first, and one side tends to win every round; delaying each racer in turn by a sweeping spin (no sleep)
/// makes both orders, and the near-ties between them, happen.
/// </summary>
internal static class RaceJitter
{
    /// <summary>Call at the start of racer <paramref name="racer"/>'s step (0 or 1) in round <paramref name="round"/>.</summary>
    public static void Delay(int round, int racer)
    {
        if (round % 2 == racer)
        {
            Thread.SpinWait(round / 2 % 64 * 40);
        }
    }

    /// <summary>
    /// A timeout race's racer 0: after its jitter, advances <paramref name="clock"/> by <paramref name="by"/> (to the
    /// deadline the round's wait was given).
    /// </summary>
    public static Action<int> AdvancesTheClock(ManualClock clock, TimeSpan by) => round =>
    {
        Delay(round, 0);
        clock.Advance(by);
    };

    /// <summary>
    /// A timeout race's racer 1: after its jitter, finishes the input, with a success (<paramref name="succeed"/>) in the
    /// rounds whose <c>round / 2</c> is even, and otherwise with a new fault (<paramref name="fail"/>), entered in
    /// <paramref name="made"/> before it is set: so every racer is delayed in both kinds of round, and
    /// <paramref name="made"/>'s count is the number of fault rounds.
    /// </summary>
    public static Action<int> FinishesTheInput(Action<int> succeed, Action<Exception> fail, ConcurrentQueue<Exception> made) => round =>
    {
        Delay(round, 1);
        if (round / 2 % 2 == 0)
        {
            succeed(round);
        }
        else
        {
            var fault = new FormatException("round " + round);
            made.Enqueue(fault);
            fail(fault);
        }
    };
}

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
}

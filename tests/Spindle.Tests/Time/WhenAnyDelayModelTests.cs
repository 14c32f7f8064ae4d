using System;
using System.Linq;
using CsCheck;
using Microsoft.Extensions.Time.Testing;

namespace SpindleLib.Tests.Time;

/// <summary>
/// Races of delays (CsCheck, which shrinks a failure to a smallest race): WhenAny over delays of random lengths on
/// one wheel (Microsoft's FakeTimeProvider, advanced by random steps that may jump past several deadlines at once), with
/// a promise that may win first. The delay with the earliest deadline wins (the lowest index among delays due at
/// the same millisecond, as they fire in the order they were started), and once the race is decided its losing delays
/// have left the wheel (nothing pending) and the promise can be reset.
/// </summary>
public class WhenAnyDelayModelTests
{
    private const long TicksPerMs = TimeSpan.TicksPerMillisecond;

    private static readonly Gen<(long[] Delays, long[] Steps, int PromiseAtStep)> Cases = Gen.Select(
        Gen.Frequency((3, Gen.Long[1, 30 * TicksPerMs]), (2, Gen.Long[1, 200].Select(static ms => ms * TicksPerMs)), (1, Gen.Long[1, 100_000 * TicksPerMs])).Array[1, 6],
        Gen.Frequency((3, Gen.Long[0, 5 * TicksPerMs]), (2, Gen.Long[0, 100 * TicksPerMs]), (1, Gen.Long[0, 200_000 * TicksPerMs])).Array[1, 12],
        Gen.Int[-1, 12]);

    [Fact]
    public void RandomRaces_TheEarliestDeadlineWins_AndTheLosersLeaveTheWheel()
        => Cases.Sample((long[] delays, long[] steps, int promiseAtStep) => { Run(delays, steps, promiseAtStep); }, iter: TestUtil.Stress(400),
            print: static c => $"delays [{string.Join(" ", c.Item1.Select(static t => TimeSpan.FromTicks(t).TotalMilliseconds))}] ms, steps [{string.Join(" ", c.Item2.Select(static t => TimeSpan.FromTicks(t).TotalMilliseconds))}] ms, promise at step {c.Item3}");

    private static void Run(long[] delays, long[] steps, int promiseAtStep)
    {
        var time = new FakeTimeProvider();
        using var wheel = new TimerWheel(time);
        time.Advance(TimeSpan.FromTicks(3_333)); // the race starts a third of a millisecond into the wheel's grid
        long start = 3_333;
        long[] dueMs = delays.Select(d => (start + d + TicksPerMs - 1) / TicksPerMs).ToArray();
        var promise = new Promise();
        SpindleTask[] inputs = delays.Select(d => wheel.Delay(TimeSpan.FromTicks(d))).Append(promise.Task).ToArray();
        SpindleTask<int> race = SpindleTask.WhenAny(inputs);
        int promiseIndex = delays.Length;
        long elapsed = start;
        int expected = -1;
        for (int step = 0; step < steps.Length && expected < 0; step++)
        {
            if (step == promiseAtStep)
            {
                promise.SetResult();
                expected = promiseIndex;
                break;
            }
            time.Advance(TimeSpan.FromTicks(steps[step]));
            elapsed += steps[step];
            long nowMs = elapsed / TicksPerMs;
            long first = dueMs.Min();
            if (first <= nowMs)
            {
                expected = Array.IndexOf(dueMs, first); // the lowest index among the earliest
            }
            Assert.True(race.IsCompleted == (expected >= 0), $"at {nowMs} ms the race is {(race.IsCompleted ? "decided" : "open")}, the earliest deadline is {first} ms");
        }
        if (expected < 0)
        {
            promise.SetResult(); // nothing was due: the promise ends the race
            expected = promiseIndex;
        }
        Assert.Equal(expected, race.GetAwaiter().GetResult());
        time.Advance(TimeSpan.Zero); // the pass the let-go delays asked for
        Assert.Equal(0, wheel.PendingCount);
        promise.Reset();
    }
}

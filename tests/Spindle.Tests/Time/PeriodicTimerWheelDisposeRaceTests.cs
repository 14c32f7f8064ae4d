using System;
using System.Threading;
using System.Threading.Tasks;
using Xunit;
using Xunit.Abstractions;

namespace SpindleLib.Tests.Time;

/// <summary>
/// A periodic timer's wait racing its wheel's Dispose (review of stop 42, which made that wait's message name the fix):
/// exactly one outcome each round. The wait either throws at the call, the disposed-wheel error naming the fix, or
/// returns a task that completes with false (the wheel can never tick again); it never hangs, never ticks (its period is
/// an hour), and leaves nothing in the wheel. On the system clock the wheel's timer thread may be ending or starting at
/// the same time (idle exit).
/// </summary>
public class PeriodicTimerWheelDisposeRaceTests(ITestOutputHelper output)
{
    private readonly ITestOutputHelper _output = output;

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task AWaitRacingItsWheelsDispose_HasExactlyOneOutcome(bool systemClock)
    {
        TimerWheel wheel = null!;
        SpindlePeriodicTimer timer = null!;
        SpindleTask<bool> wait = default;
        bool gotTask = false;
        ObjectDisposedException? thrown = null;
        int threw = 0;
        int returnedFalse = 0;
        int ran = await Race.Run(TestUtil.Stress(2_000),
            before: _ =>
            {
                wheel = new TimerWheel(systemClock ? TimeProvider.System : new ManualClock());
                timer = new SpindlePeriodicTimer(TimeSpan.FromHours(1), wheel);
                wait = default;
                gotTask = false;
                thrown = null;
            },
            after: round =>
            {
                if (thrown is not null)
                {
                    Assert.Contains("Dispose the timer with its wheel", thrown.Message, StringComparison.Ordinal);
                    Assert.False(gotTask, "round " + round + ": threw and returned a task");
                    threw++;
                }
                else
                {
                    Assert.False(TestUtil.WithTimeout(wait, 10).GetAwaiter().GetResult(), "round " + round + ": ticked");
                    returnedFalse++;
                }
                Assert.Equal(0, wheel.PendingCount);
                timer.Dispose();
            },
            round =>
            {
                if (round % 2 == 0)
                {
                    Thread.SpinWait(round % 64 * 10);
                }
                try
                {
                    wait = timer.WaitForNextTickAsync();
                    gotTask = true;
                }
                catch (ObjectDisposedException ex)
                {
                    thrown = ex;
                }
            },
            round =>
            {
                if (round % 2 == 1)
                {
                    Thread.SpinWait(round % 64 * 10); // spreads the Dispose over the wait's call, and the wait's over it
                }
                wheel.Dispose();
            });
        Assert.Equal(ran, threw + returnedFalse);
        _output.WriteLine($"{ran} rounds: {threw} threw at the call, {returnedFalse} returned false");
    }
}

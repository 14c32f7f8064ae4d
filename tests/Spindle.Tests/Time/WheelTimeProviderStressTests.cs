using System;
using System.Threading;

namespace SpindleLib.Tests.Time;

/// <summary>
/// Several threads Change and Dispose (or DisposeAsync) shared timers of <see cref="TimerWheel.AsTimeProvider"/>, and
/// create new ones in place of the disposed, while the wheel fires them (<see cref="TimerChurnStress{TTimer}"/>, through
/// <see cref="ITimer"/>). Beside that shape's checks: no callback starts once DisposeAsync has completed, and a Change on
/// a disposed timer returns false and never throws.
/// </summary>
[Collection(SequentialCollection.Name)]
public class WheelTimeProviderStressTests
{
    private sealed class Churn : TimerChurnStress<ITimer>
    {
        private static readonly TimerCallback s_callback = OnFire;

        protected override ITimer Create(TimerWheel wheel, Cell cell, TimeSpan due) => wheel.AsTimeProvider().CreateTimer(s_callback, cell, due, Timeout.InfiniteTimeSpan);

        protected override bool Change(ITimer timer, TimeSpan due) => timer.Change(due, Timeout.InfiniteTimeSpan); // never throws, disposed or not

        protected override void Dispose(ITimer timer, int way)
        {
            if (way == 0)
            {
                timer.Dispose();
            }
            timer.DisposeAsync().AsTask().Wait(); // after a Dispose, or alone: waits for a callback still running
        }

        protected override int FiresAfterDisposeAllowed(bool manual) => 0;
    }

    [Fact]
    public void ManualClock_ChangeDisposeAndFiringRace_EachArmingFiresAtMostOnce_NothingLost() => new Churn().Run(manual: true, TestUtil.Stress(30_000));

    [Fact]
    public void SystemClock_ChangeDisposeAndFiringRace_EachArmingFiresAtMostOnce_NothingLost() => new Churn().Run(manual: false, TestUtil.Stress(15_000));
}

using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Tasks;

/// <summary>A set and a cancellation racing for a signal wait: exactly one ends it, and a set is never lost.</summary>
public class SignalStressTests
{
    // One Set and one cancellation race for a registered wait (optionally re-waited inline, optionally dispatched):
    // exactly one ends it; a cancelled wait leaves the set for the next wait; the continuation runs once.
    [Theory]
    [InlineData(false, false)]
    [InlineData(true, false)]
    [InlineData(false, true)]
    public async Task SetRacesCancel_RegisteredWait_ExactlyOneWins_NoSetLost(bool dispatch, bool register)
    {
        var s = new Signal(false, dispatch);
        CancellationTokenSource cts = null!;
        SpindleTask wait = default;
        int ran = 0;
        await TestUtil.WithTimeout(Race.Run(TestUtil.Stress(20_000),
            before: round =>
            {
                cts = new CancellationTokenSource();
                ran = 0;
                wait = s.WaitAsync(cts.Token);
                if (register)
                {
                    wait.GetAwaiter().UnsafeOnCompleted(() => Interlocked.Increment(ref ran));
                }
            },
            after: round =>
            {
                SpinWait.SpinUntil(() => wait.Status != SpindleTaskStatus.Pending, TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds));
                SpindleTaskStatus st = wait.Status;
                if (register)
                {
                    SpinWait.SpinUntil(() => Volatile.Read(ref ran) != 0, TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds));
                    Assert.Equal(1, Volatile.Read(ref ran));
                }
                Exception? e = Record.Exception(() => wait.GetAwaiter().GetResult());
                if (st == SpindleTaskStatus.Succeeded)
                {
                    Assert.Null(e);
                    Assert.False(s.IsSet, $"round {round}: a set that released the wait also stayed set");
                }
                else
                {
                    Assert.Equal(SpindleTaskStatus.Canceled, st);
                    Assert.IsAssignableFrom<OperationCanceledException>(e);
                    Assert.True(s.IsSet, $"round {round}: the set that lost to the cancellation was lost");
                    s.Reset();
                }
                Assert.False(s.HasWaiter);
                cts.Dispose();
            },
            _ => s.Set(),
            _ => cts.Cancel()), 120);
    }
}

using System;
using System.Threading;
using System.Threading.Tasks;
using Xunit;

namespace SpindleLib.Tests.Threading;

/// <summary>
/// The semaphore a worker parks on (docs/decisions.md section 42): it replaced <see cref="SemaphoreSlim"/>, whose wait
/// yields the processor 130 times before it blocks, and keeps its counting: each release is one permit, taken by one wait.
/// </summary>
public class ParkingSemaphoreTests
{
    [Fact]
    public void APermitReleasedBeforeTheWait_IsTakenAtOnce_AndOnlyOnce()
    {
        var gate = new ParkingSemaphore();
        gate.Release();
        Assert.True(gate.Wait(0));
        Assert.False(gate.Wait(0)); // taken
        Assert.False(gate.Wait(1));
    }

    [Fact]
    public void Permits_AreCounted()
    {
        var gate = new ParkingSemaphore();
        gate.Release();
        gate.Release();
        Assert.True(gate.Wait(0));
        Assert.True(gate.Wait(Timeout.Infinite));
        Assert.False(gate.Wait(0));
    }

    [Fact]
    public void ATimedWaitThatRunsOut_TakesNoPermit_AndALaterReleaseIsKept()
    {
        var gate = new ParkingSemaphore();
        Assert.False(gate.Wait(20));
        gate.Release();
        Assert.True(gate.Wait(0));
    }

    [Theory]
    [InlineData(Timeout.Infinite)]
    [InlineData(60_000)]
    public async Task AReleaseWhileTheWaiterBlocks_WakesIt(int milliseconds)
    {
        var gate = new ParkingSemaphore();
        var waiting = new ManualResetEventSlim(false);
        bool took = false;
        var waiter = new Thread(() =>
        {
            waiting.Set();
            took = gate.Wait(milliseconds);
        });
        waiter.Start();
        waiting.Wait();
        TestUtil.SpinUntil(() => (waiter.ThreadState & ThreadState.WaitSleepJoin) != 0);
        gate.Release();
        Assert.True(await Task.Run(() => waiter.Join(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds))), "the release did not wake the waiter");
        Assert.True(took);
        Assert.False(gate.Wait(0));
    }
}

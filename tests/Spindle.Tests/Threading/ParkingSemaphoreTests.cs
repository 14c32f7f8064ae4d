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

    /// <summary>
    /// Review45: releases from three threads at once against the one waiter, whose waits alternate between taking at once,
    /// short timed waits that often run out (and may see a permit arrive at the very end of their wait), and waits with no
    /// limit: every permit is taken exactly once, none is lost (a lost one hangs the last wait) and none is made up.
    /// </summary>
    [Fact]
    public async Task ReleasesFromManyThreads_AgainstTimedAndUntimedWaits_EveryPermitIsTakenOnce()
    {
        const int Releasers = 3;
        const int PerReleaser = 20_000;
        var gate = new ParkingSemaphore();
        int taken = 0;
        int timedOut = 0;
        Task waiter = TestUtil.RunOnThread(() =>
        {
            var random = new Random(45);
            while (taken < Releasers * PerReleaser)
            {
                int mode = random.Next(4);
                bool took = mode switch
                {
                    0 => gate.Wait(0),
                    1 => gate.Wait(1),
                    2 => gate.Wait(random.Next(1, 3)),
                    _ => gate.Wait(Timeout.Infinite),
                };
                if (took)
                {
                    taken++;
                }
                else
                {
                    timedOut++;
                }
            }
        }, "parking waiter");
        var releasers = new Task[Releasers];
        for (int r = 0; r < Releasers; r++)
        {
            int seed = r;
            releasers[r] = TestUtil.RunOnThread(() =>
            {
                var random = new Random(seed);
                for (int i = 0; i < PerReleaser; i++)
                {
                    gate.Release();
                    if (random.Next(64) == 0)
                    {
                        Thread.Sleep(random.Next(0, 2)); // now and then the waiter runs dry and blocks
                    }
                    else
                    {
                        Thread.SpinWait(random.Next(0, 200));
                    }
                }
            }, "parking releaser " + r);
        }
        await TestUtil.WithTimeout(Task.WhenAll(releasers));
        await TestUtil.WithTimeout(waiter);
        Assert.Equal(Releasers * PerReleaser, taken);
        Assert.False(gate.Wait(0)); // none made up
        Assert.True(timedOut > 0, "no wait ever ran out: the timed path was not exercised");
    }
}

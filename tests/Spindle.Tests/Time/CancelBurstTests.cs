using System;
using System.Diagnostics;
using System.Threading;

namespace SpindleLib.Tests.Time;

/// <summary>
/// Many delays of the system clock's main shard (started off the workers) cancelled at once by one token. Found by a
/// user's review (500,000 such delays, one <c>Cancel()</c>): every cancellation found the cancel inbox empty, because the
/// wheel's thread emptied it as soon as it woke, and woke that thread again, a futex wake and a pass per delay, a fifth
/// of the cancelling thread's time. The thread now waits a tick (<see cref="1"/>) before a
/// pass that only releases, so a burst costs a pass per millisecond, and every cancelled delay still leaves the wheel.
/// </summary>
public class CancelBurstTests
{
    private const int Count = 2_000;

    /// <summary>
    /// The delays are cancelled one after another, each followed by a little work (about 50 µs of spinning: the
    /// continuation a cancelled await runs, which in the review's program threw and caught the cancellation), as a token
    /// with many registrations cancels them. With no work between them, the thread could not wake between two
    /// cancellations often enough to show the defect on every run.
    /// </summary>
    [Fact]
    public void ABurstOfCancellations_SharesPasses_InsteadOfWakingTheTimerThreadForEach()
    {
        using var wheel = new TimerWheel(TimeProvider.System); // a thread-driven wheel of its own: nothing else makes passes
        var tokens = new CancellationTokenSource[Count];
        var delays = new SpindleTask[Count];
        for (int i = 0; i < Count; i++)
        {
            tokens[i] = new CancellationTokenSource();
            delays[i] = wheel.Delay(TimeSpan.FromMinutes(10), tokens[i].Token);
        }
        // Only the first delay kicked the thread (the others are due no earlier): they wait in the insert inbox, and the
        // first pass the burst brings on links them.
        Assert.Equal(Count, wheel.PendingCount);
        long before = wheel.PassCount;
        var elapsed = Stopwatch.StartNew();

        long work = Stopwatch.Frequency / 20_000; // 50 µs
        foreach (CancellationTokenSource cts in tokens)
        {
            cts.Cancel(); // its callback runs here; no continuation is registered yet
            long until = Stopwatch.GetTimestamp() + work;
            while (Stopwatch.GetTimestamp() < until)
            {
            }
        }

        TestUtil.SpinUntil(() => wheel.PendingCount == 0, wheel.Describe);
        long ms = elapsed.ElapsedMilliseconds;
        long passes = wheel.PassCount - before;
        // A pass that only releases follows a wait of at least a tick, so there are at most about as many as milliseconds
        // went by; before, there was about one per cancellation whenever the thread got a core between two of them.
        Assert.True(passes <= 2 + ms / ThreadTimerDriver.ReleaseLagMs, $"{passes} passes in {ms} ms for {Count} cancellations");
        foreach (SpindleTask delay in delays)
        {
            Assert.Equal(SpindleTaskStatus.Canceled, delay.Status);
            Assert.Throws<System.Threading.Tasks.TaskCanceledException>(() => delay.GetAwaiter().GetResult());
        }
        Assert.Equal("main: count=0 linked=0", wheel.Describe());
        foreach (CancellationTokenSource cts in tokens)
        {
            cts.Dispose();
        }
    }
}

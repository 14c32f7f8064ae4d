using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// Misuse of a signal gives an exception or leaves the real wait intact, never a silent hang: a second WaitAsync racing
/// the first, and a second read of a pending wait. Found by a review of the one-word signal.
/// </summary>
public class SignalMisuseTests
{
    private static readonly TimeSpan Bound = TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds);

    // Wait A's WaitAsync is held after arming (its DropRegistration waits for the previous wait's cancellation callback,
    // which is running the previous wait's continuation). A Set completes A's armed wait; wait B then arms, is not
    // rejected, and A's late writes to the shared cancellation state clobber B's: cancelling B's token never ends B.
    [Fact]
    public void WaitRacingAnotherWaitAsync_IsRejectedOrStaysCancellable()
    {
        var s = new Signal();
        using var cts0 = new CancellationTokenSource();
        using var ctsA = new CancellationTokenSource();
        using var ctsB = new CancellationTokenSource();
        using var entered = new ManualResetEventSlim();
        using var release = new ManualResetEventSlim();
        SpindleTask t0 = s.WaitAsync(cts0.Token);
        t0.GetAwaiter().UnsafeOnCompleted(() => { entered.Set(); release.Wait(); });
        var canceller = Task.Run(() => cts0.Cancel()); // the callback runs t0's continuation, which blocks
        Assert.True(entered.Wait(Bound));

        SpindleTask tA = default;
        var waiterA = Task.Run(() => { tA = s.WaitAsync(ctsA.Token); });
        SpinWait.SpinUntil(() => s.HasWaiter, Bound); // A has armed and is now held in DropRegistration
        Assert.True(s.HasWaiter);
        s.Set(); // completes A's armed wait: the signal is idle

        SpindleTask tB;
        try
        {
            tB = s.WaitAsync(ctsB.Token); // a second wait racing A's WaitAsync: the commit says it is rejected
        }
        catch (InvalidOperationException)
        {
            release.Set();
            return; // rejected: fine
        }
        release.Set();
        Assert.True(waiterA.Wait(Bound));
        Assert.True(canceller.Wait(Bound));
        Assert.Equal(SpindleTaskStatus.Pending, tB.Status);
        ctsB.Cancel();
        // A hang, not speed: with the defect B never ends, so the suite's default bound (it was 2 s) tells the two apart
        // on a loaded machine too, as do the waits above (they were 10 s).
        Assert.True(SpinWait.SpinUntil(() => tB.Status != SpindleTaskStatus.Pending, Bound),
            "B was accepted, and cancelling its token no longer ends it (a hang for its awaiter)");
    }

    // A misused second read of a pending wait (GetResult while another awaiter is registered) throws, as it must, but
    // its finally drops the registration of the wait that is still pending: the real awaiter can no longer be cancelled.
    [Fact]
    public void MisusedGetResult_DoesNotDropThePendingWaitsCancellation()
    {
        var s = new Signal();
        using var cts = new CancellationTokenSource();
        SpindleTask t = s.WaitAsync(cts.Token);
        bool ran = false;
        t.GetAwaiter().UnsafeOnCompleted(() => ran = true);
        Assert.Throws<InvalidOperationException>(() => t.GetAwaiter().GetResult());
        cts.Cancel();
        Assert.True(ran, "the first awaiter was not cancelled: its registration was dropped by the misused read");
    }
}

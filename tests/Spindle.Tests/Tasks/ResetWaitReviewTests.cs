using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// Review of stop 45's change to <see cref="Promise{T}.Reset"/> (it waits out a completer that claimed a use nobody awaits,
/// marked in the claiming CAS, instead of throwing): the interleavings the change's own tests left open. A fault claimed
/// by token on a use a combinator let go of is reported once, by the completer after its publication, even when the
/// reset that waited for it has moved the promise on before the report's claim looks at the word; and a let-go use that
/// is awaited again is claimed from Waiting, unmarked, so a reset meeting that claim is still refused (the awaiter it would
/// race reads the outcome).
/// </summary>
public sealed class ResetWaitReviewTests
{
    private sealed class LateReplyFault(string message) : Exception(message)
    {
    }

#if DEBUG
    /// <summary>
    /// A late fault by token on a let-go use, held between its claim and its publication (the Debug hook) while the owner
    /// resets: the reset waits, then resets; the completer's report, made after its publication (held there by a second
    /// hook until the reset has moved the promise on), finds the use reset (TryClaimFaultReport: not the current use) and
    /// reports anyway: the fault is reported exactly once, and the next use
    /// is clean.
    /// </summary>
    [Fact]
    public void Reset_WaitingOutALateFaultOnALetGoUse_TheFaultIsReportedOnce_AndTheNextUseIsClean()
    {
        var promise = new Promise<int>();
        SpindleTask<int> old = promise.Task;
        short token = promise.Token;
        Assert.Equal(0, SpindleTask.WhenAny(SpindleTask.FromResult(1), old).GetAwaiter().GetResult().Index); // decided at the call: the use is let go of
        var fault = new LateReplyFault("review45: a late fault by token");
        using var reports = UnobservedReports.Start(UnobservedReports.Own.Instances(fault));
        bool resetBeforeTheReport = false;
        SourceCoreTestHooks.AbandonedPublished = () =>
        {
            SourceCoreTestHooks.AbandonedPublished = null;
            // Held after the publication until the waiting reset has moved the promise on, before the report's claim.
            TestUtil.SpinUntil(() => promise.Token != token, () => "the reset did not move on once the completer had published");
            resetBeforeTheReport = true;
        };
        bool set;
        Exception? reset;
        try
        {
            (set, reset) = ResetRaceTests.CompleteWhileAResetMeetsTheClaim(promise, () => promise.TrySetException(token, fault), resetWaits: true);
        }
        finally
        {
            SourceCoreTestHooks.AbandonedPublished = null;
        }

        Assert.True(resetBeforeTheReport);
        Assert.True(set);
        Assert.Null(reset);
        Assert.Single(reports.Reports); // made on the completing thread, before its TrySetException returned
        Assert.NotEqual(token, promise.Token);
        Assert.False(promise.IsCompleted);
        Assert.Throws<InvalidOperationException>(() => old.GetAwaiter().GetResult());
        Assert.False(promise.TrySetException(token, new LateReplyFault("review45: a second late fault")));
        Assert.True(promise.TrySetResult(7));
        Assert.Equal(7, promise.Task.GetAwaiter().GetResult());
        Assert.Single(reports.Reports);
    }

    /// <summary>
    /// A use a combinator let go of and its owner then awaited again (a promise's use may be) is claimed from Waiting: no
    /// mark, so a reset meeting the claim is refused, before it writes anything, and the awaiter runs once and reads the
    /// outcome. Were the claim marked (say, for the Abandoned the word held before the await), the reset would wait and
    /// clear the fields that awaiter is about to read (section 41's forced run read 0 for 42).
    /// </summary>
    [Fact]
    public void Reset_MeetingACompleterOfALetGoUseAwaitedAgain_IsRefused_AndTheAwaiterReadsTheOutcome()
    {
        var promise = new Promise<int>();
        SpindleTask<int> old = promise.Task;
        short token = promise.Token;
        Assert.Equal(0, SpindleTask.WhenAny(SpindleTask.FromResult(1), old).GetAwaiter().GetResult().Index);
        var awaiting = ResetRaceTests.RecordedRead.On(old);

        (bool set, Exception? reset) = ResetRaceTests.CompleteWhileAResetMeetsTheClaim(promise, () => promise.TrySetResult(token, 42), resetWaits: false);

        Assert.True(set);
        Assert.Equal(SourceCore<VoidResult>.ResetWhileCompletingMessage, Assert.IsType<InvalidOperationException>(reset).Message);
        Assert.Equal(1, awaiting.Ran);
        Assert.Equal(42, awaiting.Read);
        Assert.Equal(token, promise.Token);
        promise.Reset();
        Assert.False(promise.IsCompleted);
    }
#endif

    /// <summary>
    /// The actor's late faulting reply at full speed: each round lets the promise's use go (a WhenAny decided at the call),
    /// hands its token to a replier thread that fails it by token, and resets at once, racing the reply. No reset is
    /// refused; no reply lands on a later use (the promise is pending after every reset, and the next round finds it so);
    /// and every fault a reply claimed is reported exactly once, none that it did not claim.
    /// </summary>
    [Fact]
    public async Task LateFaultsByToken_RacingTheOwnersReset_NoResetRefused_EveryClaimedFaultReportedOnce()
    {
        const int Rounds = 20_000;
        var promise = new Promise<int>();
        int published = -1; // the round whose token the replier may use
        int answered = -1; // the last round the replier tried
        short shared = 0;
        int claimed = 0;
        using var reports = UnobservedReports.Start(UnobservedReports.Own.Type<LateReplyFault>());
        Task replier = TestUtil.RunOnThread(() =>
        {
            for (int round = 0; round < Rounds; round++)
            {
                while (Volatile.Read(ref published) < round)
                {
                    Thread.SpinWait(1);
                }
                if (promise.TrySetException(Volatile.Read(ref shared), new LateReplyFault("review45: a late fault")))
                {
                    claimed++;
                }
                Volatile.Write(ref answered, round);
            }
        }, "late replier");
        int refused = 0;
        int landedLater = 0;
        var random = new Random(45);
        for (int round = 0; round < Rounds; round++)
        {
            if (promise.IsCompleted)
            {
                landedLater++;
            }
            Assert.Equal(0, SpindleTask.WhenAny(SpindleTask.FromResult(1), promise.Task).GetAwaiter().GetResult().Index);
            Volatile.Write(ref shared, promise.Token);
            Volatile.Write(ref published, round);
            if (round % 16 == 0)
            {
                // Every sixteenth reply lands before the reset, so a fault is claimed on every machine: on one
                // processor the replier may never run inside the spin below, and the race alone would claim none.
                while (Volatile.Read(ref answered) < round)
                {
                    Thread.Yield();
                }
            }
            else
            {
                Thread.SpinWait(random.Next(0, 200)); // the reply lands before, during or after the reset
            }
            try
            {
                promise.Reset();
            }
            catch (InvalidOperationException)
            {
                refused++;
            }
            while (Volatile.Read(ref answered) < round)
            {
                Thread.SpinWait(1);
            }
        }
        await TestUtil.WithTimeout(replier);
        Assert.Equal(0, refused);
        Assert.Equal(0, landedLater);
        Assert.Equal(claimed, reports.Reports.Count);
        Assert.True(claimed > 0, "no reply claimed its use: the race was never run");
    }
}

#if DEBUG
using System;
using System.Threading;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// A combinator gives back the set of a signal's wait it holds (a WhenAny's losing wait, or the winner of a WhenAny that
/// threw) while the caller has already started its next wait (the caller's error: the wait is still the combinator's),
/// a zero-timeout one that armed nothing and is ending the old wait's registration under the core's arming mark. The
/// Debug hook <c>Signal.TestHookUnderArmingMark</c> runs the combinator in that window. Before, the give-back refused a
/// word with the mark: the zero-timeout wait had returned false and the set reached nobody, lost without a trace (both
/// cases failed 3 of 3 runs: "the set ... was lost"). Now the set is given back under the mark, which is carried, so the
/// signal is set once the zero-timeout wait has ended, and a third wait in the window is still refused.
/// </summary>
public sealed class SignalGiveBackUnderArmingTests
{
    /// <summary>
    /// A wait that holds a registration (so the next wait ends it under the arming mark), completed by a set nobody has
    /// read: its set is the one a combinator may give back.
    /// </summary>
    private static SpindleTask CompletedUnreadWait(Signal signal, CancellationTokenSource cts)
    {
        SpindleTask wait = signal.WaitAsync(cts.Token);
        signal.Set();
        Assert.True(wait.IsCompleted);
        return wait;
    }

    /// <summary>
    /// Runs a zero-timeout wait on <paramref name="signal"/> with <paramref name="underMark"/> run under its arming mark,
    /// and checks what every case shares: the zero-timeout wait found the signal idle, a third wait in the window was
    /// refused (the mark was kept), and afterwards the given-back set is the signal's, once, for the next wait.
    /// </summary>
    private static void ZeroTimeoutWaitWith(Signal signal, SpindleTask old, Action underMark, string giver)
    {
        int ran = 0;
        Exception? third = null;
        Signal.TestHookUnderArmingMark = s =>
        {
            if (s != signal)
            {
                return;
            }
            Signal.TestHookUnderArmingMark = null;
            ran++;
            underMark();
            third = Record.Exception(() => signal.WaitAsync());
        };
        bool tookSet;
        try
        {
            tookSet = signal.WaitAsync(TimeSpan.Zero).GetAwaiter().GetResult();
        }
        finally
        {
            Signal.TestHookUnderArmingMark = null;
        }
        Assert.Equal(1, ran);
        Assert.False(tookSet); // the signal was idle when it looked: the set was the old wait's, held by the combinator
        Assert.IsType<InvalidOperationException>(third); // the zero-timeout wait still held the mark
        Assert.True(signal.IsSet, $"the set {giver} gave back under the zero-timeout wait's arming mark was lost");
        Assert.Throws<InvalidOperationException>(() => old.GetAwaiter().GetResult()); // given back: the old wait's token is stale
        SpindleTask next = signal.WaitAsync();
        Assert.True(next.IsCompleted, "the next wait did not take the given-back set");
        next.GetAwaiter().GetResult();
        Assert.False(signal.IsSet); // one set, handed out once
    }

    [Fact]
    public void ASettledWhenAnysLosingWait_GivenBackUnderAZeroTimeoutWaitsMark_KeepsItsSet()
    {
        var signal = new Signal();
        using var cts = new CancellationTokenSource();
        SpindleTask wait = CompletedUnreadWait(signal, cts);
        int winner = -1;
        ZeroTimeoutWaitWith(
            signal,
            wait,
            () => winner = SpindleTask.WhenAny(SpindleTask.CompletedTask, wait).GetAwaiter().GetResult(),
            "a settled WhenAny's losing wait");
        Assert.Equal(0, winner);
    }

    [Fact]
    public void AFailedWhenAnysWinningWait_GivenBackUnderAZeroTimeoutWaitsMark_KeepsItsSet()
    {
        var signal = new Signal();
        using var cts = new CancellationTokenSource();
        SpindleTask wait = CompletedUnreadWait(signal, cts);
        var other = new Promise();
        SpindleTask awaited = other.Task;
        awaited.Forget(); // pending, and it already has its one awaiter: the WhenAny throws after reading its winner
        ZeroTimeoutWaitWith(
            signal,
            wait,
            () => Assert.Throws<InvalidOperationException>(() => SpindleTask.WhenAny(wait, awaited)),
            "a failed WhenAny's winning wait");
        other.SetResult();
    }
}
#endif

using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// A signal wait that a WhenAny let go of never reads as signalled: its token goes stale, so a second await of it is the
/// await-once error, as for a promise. Found by a review of the one-word signal (it read as Succeeded).
/// </summary>
[Collection(SequentialCollection.Name)]
public class SignalLetGoTests
{
    // A signal wait that lost a WhenAny (detached after registration) and was never set.
    [Fact]
    public void DetachedLoser_IsNotReportedAsSucceeded()
    {
        var signal = new Signal();
        var other = new Promise();
        SpindleTask wait = signal.WaitAsync();
        SpindleTask<int> any = SpindleTask.WhenAny(wait, other.Task);
        other.SetResult();
        Assert.Equal(1, any.GetAwaiter().GetResult());
        Assert.False(signal.IsSet);
        // Nobody set the signal: the losing wait must not read as having been signalled.
        Assert.NotEqual(SpindleTaskStatus.Succeeded, SafeStatus(wait));
    }

    [Fact]
    public void DetachedLoser_SecondAwait_IsTheAwaitOnceError()
    {
        var signal = new Signal();
        var other = new Promise();
        SpindleTask wait = signal.WaitAsync();
        SpindleTask<int> any = SpindleTask.WhenAny(wait, other.Task);
        other.SetResult();
        Assert.Equal(1, any.GetAwaiter().GetResult());
        // As for a promise (WhenAny_DetachedLoser_CannotBeAwaitedAgainInTheSameUse): never a silent success.
        bool ran = false;
        Exception? e = Record.Exception(() => wait.GetAwaiter().UnsafeOnCompleted(() => ran = true));
        Assert.True(e is InvalidOperationException, $"second await: no exception; continuation ran={ran}");
    }

    // Settled without a combinator (an input already finished): the pending signal wait is abandoned (TryAbandon).
    [Fact]
    public void AbandonedLoser_IsNotReportedAsSucceeded()
    {
        var signal = new Signal();
        SpindleTask wait = signal.WaitAsync();
        SpindleTask<int> any = SpindleTask.WhenAny(SpindleTask.CompletedTask, wait);
        Assert.Equal(0, any.GetAwaiter().GetResult());
        Assert.NotEqual(SpindleTaskStatus.Succeeded, SafeStatus(wait));
        Exception? e = Record.Exception(() => wait.GetAwaiter().GetResult());
        Assert.True(e is InvalidOperationException, "GetResult of the abandoned wait returned as if signalled");
    }

    // The WhenAny's own token cancels the wait; the signal wait (whose own token was cancelled too) reads as succeeded.
    [Fact]
    public void WhenAnyCancelled_SignalWaitOnSameToken_IsNotReportedAsSucceeded()
    {
        var signal = new Signal();
        using var cts = new CancellationTokenSource();
        SpindleTask wait = signal.WaitAsync(cts.Token);
        SpindleTask<int> any = SpindleTask.WhenAny([wait, new Promise().Task], cts.Token);
        cts.Cancel();
        Assert.ThrowsAny<OperationCanceledException>(() => any.GetAwaiter().GetResult());
        Assert.NotEqual(SpindleTaskStatus.Succeeded, SafeStatus(wait));
    }

    private static SpindleTaskStatus? SafeStatus(SpindleTask t)
    {
        try
        {
            return t.Status;
        }
        catch (InvalidOperationException)
        {
            return null;
        }
    }
}

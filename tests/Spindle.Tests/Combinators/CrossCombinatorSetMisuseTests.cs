using System;
using System.Collections.Concurrent;
using System.Threading;
using Xunit.Abstractions;
using static SpindleLib.Tests.UnobservedReports;

namespace SpindleLib.Tests.Combinators;

/// <summary>
/// Misuse across two combinators: a signal's wait held by a pending combinator (a WhenAny, or a WhenAll with a token,
/// which may give a set back) is also passed to a WhenAny settled at the call, at the instant the wait has completed and
/// the holder's slot has not read it yet (Debug hook <c>CombinatorCore.TestHookBeforeInputRead</c>). Whatever the order,
/// the one set is handed out at most once (to the holder, or kept on the signal for its next wait), the misuse surfaces
/// as an exception the caller sees (a throwing call, a faulted combined task, or a report of a combined task that nobody
/// can read), and nothing stays registered: the holder completes, its other input can be reset, and the signal takes a
/// new wait.
/// </summary>
#if DEBUG // every case drives a Debug-only hook (a Release build has no such class; its output helper would be unread)
[Collection(SequentialCollection.Name)] // process-wide hooks, and UnobservedException
public class CrossCombinatorSetMisuseTests(ITestOutputHelper output)
{
    public enum Holder
    {
        /// <summary>A pending WhenAny(wait, promise): the set resumes its slot, which wins with the wait.</summary>
        WhenAny,

        /// <summary>A pending WhenAll(wait, promise) with a token, then the promise succeeds.</summary>
        WhenAllCompleted,

        /// <summary>A pending WhenAll(wait, promise) with a token, then the token cancels it.</summary>
        WhenAllCancelled,
    }

    public enum Position
    {
        /// <summary>The settled WhenAny's winner is a finished task; the held wait loses (read and let go of).</summary>
        Loser,

        /// <summary>The held wait wins the settled WhenAny, whose other input is awaited elsewhere, so the call throws.</summary>
        WinnerOfAThrowingCall,
    }

    [Theory]
    [InlineData(Holder.WhenAny, Position.Loser)]
    [InlineData(Holder.WhenAllCompleted, Position.Loser)]
    [InlineData(Holder.WhenAllCancelled, Position.Loser)]
    [InlineData(Holder.WhenAny, Position.WinnerOfAThrowingCall)]
    [InlineData(Holder.WhenAllCompleted, Position.WinnerOfAThrowingCall)]
    [InlineData(Holder.WhenAllCancelled, Position.WinnerOfAThrowingCall)]
    public void AWaitHeldByAPendingCombinator_PassedToASettledWhenAnyBeforeTheHolderReadsIt_IsHandedOutOnce_AndTheMisuseIsSeen(
        Holder holder, Position position)
    {
        var signal = new Signal();
        var other = new Promise();
        using var cts = new CancellationTokenSource();
        SpindleTask wait = signal.WaitAsync();
        SpindleTask otherTask = other.Task;
        SpindleTask<int> any = default;
        SpindleTask all = default;
        if (holder == Holder.WhenAny)
        {
            any = SpindleTask.WhenAny(wait, otherTask);
            Assert.False(any.IsCompleted);
        }
        else
        {
            all = SpindleTask.WhenAll([wait, otherTask], cts.Token);
            Assert.False(all.IsCompleted);
        }
        var elsewhere = new Promise();
        SpindleTask awaitedElsewhere = elsewhere.Task;
        if (position == Position.WinnerOfAThrowingCall)
        {
            awaitedElsewhere.Forget(); // pending, and it already has its one awaiter: letting go of it throws
        }

        bool ran = false;
        Exception? settledThrew = null;
        int settledWinner = -1;
        CombinatorCore.TestHookBeforeInputRead = index =>
        {
            if (index != 0 || ran)
            {
                return;
            }
            ran = true;
            // The misuse: the wait is the pending combinator's, and is passed to a WhenAny that settles at the call.
            settledThrew = Record.Exception(() => settledWinner = position == Position.Loser
                ? SpindleTask.WhenAny(SpindleTask.CompletedTask, wait).GetAwaiter().GetResult()
                : SpindleTask.WhenAny(wait, awaitedElsewhere).GetAwaiter().GetResult());
        };
        Exception? holderError = null;
        bool holderWonWithTheWait = false;
        ConcurrentQueue<Exception> reported;
        try
        {
            reported = Observe(Own.Any(Own.AwaitOnceErrors(), Own.ReportedOnTestThreads()), () =>
            {
                signal.Set(); // completes the wait and resumes the holder's slot, inline: the hook runs before its read
                CombinatorCore.TestHookBeforeInputRead = null;
                switch (holder)
                {
                    case Holder.WhenAny:
                        holderError = Record.Exception(() => holderWonWithTheWait = any.GetAwaiter().GetResult() == 0);
                        break;
                    case Holder.WhenAllCompleted:
                        other.SetResult();
                        holderError = Record.Exception(() => all.GetAwaiter().GetResult());
                        holderWonWithTheWait = holderError is null;
                        break;
                    default:
                        cts.Cancel();
                        holderError = Record.Exception(() => all.GetAwaiter().GetResult());
                        Assert.IsAssignableFrom<OperationCanceledException>(holderError);
                        holderError = null; // the cancellation is the outcome, not the misuse
                        break;
                }
            });
        }
        finally
        {
            CombinatorCore.TestHookBeforeInputRead = null;
        }
        Assert.True(ran, "the hook did not run");
        string seen = "settled call: " + (settledThrew?.Message ?? "returned " + settledWinner) + "; holder: "
            + (holderError?.Message ?? (holderWonWithTheWait ? "had the set" : "no error")) + "; signal set: " + signal.IsSet
            + "; reported: " + string.Join(" | ", reported);
        output.WriteLine(seen);

        // One set: the holder had it (its wait read as a success) or the signal keeps it, never both, never neither.
        Assert.True(holderWonWithTheWait != signal.IsSet, "the one set was handed out " + ((holderWonWithTheWait ? 1 : 0) + (signal.IsSet ? 1 : 0)) + " times: " + seen);

        // The misuse is an exception somebody sees, and only the await-once error.
        bool thrownToACaller = settledThrew is InvalidOperationException || holderError is InvalidOperationException;
        Assert.True(thrownToACaller || !reported.IsEmpty, "the misuse went unnoticed: " + seen);
        Assert.True(settledThrew is null or InvalidOperationException, seen);
        Assert.True(holderError is null or InvalidOperationException, seen);
        foreach (Exception e in reported)
        {
            Assert.True(e is InvalidOperationException, "an unexpected report: " + seen);
        }

        // Nothing stays registered: the signal takes a new wait, and the promises can be reset.
        if (holder != Holder.WhenAllCompleted)
        {
            other.Reset(); // let go of by the holder
        }
        bool kept = signal.IsSet;
        SpindleTask next = signal.WaitAsync();
        Assert.Equal(kept, next.IsCompleted);
        if (!next.IsCompleted)
        {
            signal.Set();
        }
        next.GetAwaiter().GetResult();
        elsewhere.SetResult();
    }
}
#endif

using System;
using System.Collections.Concurrent;
using System.Linq;
using System.Runtime.CompilerServices;
using System.Threading;
using System.Threading.Tasks;
using static SpindleLib.Tests.Combinators.CombinatorTestSupport;
using static SpindleLib.Tests.UnobservedReports;

namespace SpindleLib.Tests.Combinators;

/// <summary>
/// Observation of BCL inputs' faults: by the combined task (WhenAll), by Spindle.UnobservedException (WhenAny's
/// losers), and never left to TaskScheduler.UnobservedTaskException. Process-wide events: these run alone.
/// </summary>
[Collection(SequentialCollection.Name)]
public class CombinatorBclObservationTests
{
    /// <summary>Runs <paramref name="body"/>, then collects, and returns the faults TaskScheduler reported as unobserved.</summary>
    private static ConcurrentQueue<Exception> UnobservedTaskFaults(Action body)
    {
        var seen = new ConcurrentQueue<Exception>();
        EventHandler<UnobservedTaskExceptionEventArgs> handler = (_, e) =>
        {
            foreach (Exception inner in e.Exception.InnerExceptions)
            {
                seen.Enqueue(inner);
            }
        };
        TaskScheduler.UnobservedTaskException += handler;
        try
        {
            body();
            for (int i = 0; i < 3; i++)
            {
                GC.Collect();
                GC.WaitForPendingFinalizers();
            }
        }
        finally
        {
            TaskScheduler.UnobservedTaskException -= handler;
        }
        return seen;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    private static void WhenAllOverAlreadyFaulted(Exception a, Exception b)
    {
        Task fa = Task.FromException(a);
        Task fb = Task.FromException(b);
        SpindleTask all = SpindleTask.WhenAll(fa, fb);
        Assert.Throws(a.GetType(), () => all.GetAwaiter().GetResult());
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    private static void WhenAllOverFaultingLater(Exception a, Exception b)
    {
        var sa = new TaskCompletionSource();
        var sb = new TaskCompletionSource();
        SpindleTask all = SpindleTask.WhenAll(sa.Task, sb.Task);
        sa.SetException(a);
        sb.SetException(b);
        // Which one is rethrown is not asserted here: see WhenAll_BclInputsFailInOrder_RethrowsTheFirstToFail.
        Exception? thrown = Record.Exception(() => TestUtil.WithTimeout(all).GetAwaiter().GetResult());
        Assert.True(ReferenceEquals(thrown, a) || ReferenceEquals(thrown, b), $"threw {thrown}");
    }

    [Fact]
    public void WhenAll_BclInputsThatFailWhilePending_EveryFaultIsObserved()
    {
        var a = new InvalidTimeZoneException("pending a " + Guid.NewGuid());
        var b = new FormatException("pending b " + Guid.NewGuid());
        ConcurrentQueue<Exception> leaked = UnobservedTaskFaults(() => WhenAllOverFaultingLater(a, b));
        Assert.DoesNotContain(leaked, e => ReferenceEquals(e, a) || ReferenceEquals(e, b));
    }

    [Fact]
    public void WhenAll_BclInputsAlreadyFaulted_EveryFaultIsObserved()
    {
        var a = new InvalidTimeZoneException("already a " + Guid.NewGuid());
        var b = new FormatException("already b " + Guid.NewGuid());
        ConcurrentQueue<Exception> leaked = UnobservedTaskFaults(() => WhenAllOverAlreadyFaulted(a, b));
        Assert.DoesNotContain(leaked, e => ReferenceEquals(e, a) || ReferenceEquals(e, b));
    }

    [Fact]
    public void WhenAny_BclLoserFailingLater_NoInputCompleteAtTheCall_ReportedOnce()
    {
        var winner = new TaskCompletionSource();
        var loser = new TaskCompletionSource();
        var error = new InvalidTimeZoneException("loser");
        var watch = UnobservedReports.Start(Own.Instances(error));
        ConcurrentQueue<Exception> reported = watch.Reports;
        using (watch)
        {
            SpindleTask<int> any = SpindleTask.WhenAny(winner.Task, loser.Task);
            winner.SetResult();
            Assert.Equal(0, TestUtil.WithTimeout(any).GetAwaiter().GetResult());
            loser.SetException(error);
            // The BCL may schedule the combinator's continuation (it does under xUnit's synchronization context).
            TestUtil.SpinUntil(() => reported.Contains(error));
            Thread.Sleep(20); // and a second report, if there were one, would show up
        }
        // Only this test's error is kept (the watch claims its instance): a late report from another test's work may land
        // in the window (seen once).
        Assert.Equal(1, reported.Count(e => e == error));
    }

    [Fact]
    public void WhenAny_BclLoserFailingLater_AnInputAlreadyCompleteAtTheCall_ReportedOnce()
    {
        var loser = new TaskCompletionSource();
        var error = new InvalidTimeZoneException("loser");
        var watch = UnobservedReports.Start(Own.Instances(error));
        ConcurrentQueue<Exception> reported = watch.Reports;
        using (watch)
        {
            SpindleTask<int> any = SpindleTask.WhenAny(Task.CompletedTask, loser.Task);
            Assert.Equal(0, any.GetAwaiter().GetResult());
            loser.SetException(error);
            // Allow for a scheduled (not inline) continuation: the wait catches a lost report, so it is the suite's
            // default, not 500 ms (a loaded machine can hold a scheduled continuation back that long: a false failure).
            TestUtil.SpinUntil(() => reported.Contains(error));
            Thread.Sleep(20); // and a second report, if there were one, would show up (as in the case above)
        }
        Assert.Equal(1, reported.Count(e => e == error)); // only this test's error counts (see above)
    }

    [Fact]
    public async Task WhenAll_BclInputsFailInOrder_RethrowsTheFirstToFail()
    {
        int wrong = 0;
        for (int i = 0; i < 200; i++)
        {
            var a = new InvalidTimeZoneException("first");
            var b = new FormatException("second");
            var sa = new TaskCompletionSource();
            var sb = new TaskCompletionSource();
            SpindleTask all = SpindleTask.WhenAll(sa.Task, sb.Task);
            sa.SetException(a);
            sb.SetException(b);
            Exception? thrown = await Record.ExceptionAsync(() => TestUtil.WithTimeout(all));
            if (!ReferenceEquals(thrown, a))
            {
                wrong++;
            }
        }
        Assert.True(wrong == 0, $"{wrong} of 200 rounds rethrew the input that failed second");
    }
}

using System;
using System.Collections.Concurrent;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using static SpindleLib.Tests.Combinators.CombinatorTestSupport;
using static SpindleLib.Tests.UnobservedReports;

namespace SpindleLib.Tests.Combinators;

/// <summary>
/// A combination whose registration throws (the caller's error) reports nothing besides: the exception the caller got is
/// not also sent to UnobservedException, nor is a WhenAll's own timeout. Found by a review of the abandon path.
/// Sequential: the tests watch UnobservedException.
/// </summary>
[Collection(SequentialCollection.Name)]
public class CombinatorMisuseReportTests
{
    private static string Show(ConcurrentQueue<Exception> q) => string.Join(" | ", q.Select(e => e.GetType().Name + ": " + e.Message));

    // The exception thrown to the caller must not also go to UnobservedException.
    [Fact]
    public void WhenAny_PreCancelledToken_SameTaskTwice_ThrownErrorNotAlsoReported()
    {
        // An async method's task (a pooled box): passed twice, it is refused. (A promise's task passed twice to a
        // combination settled by its token is let go of twice, which is harmless: the same use may be awaited again.)
        var p = new Promise();
        SpindleTask t = Await(p);
        using var cts = new CancellationTokenSource();
        cts.Cancel();
        InvalidOperationException? thrown = null;
        ConcurrentQueue<Exception> reported = Observe(Own.ReportedOnTestThreads(), () =>
        {
            thrown = Assert.Throws<InvalidOperationException>(() => SpindleTask.WhenAny([t, t], cts.Token));
        });
        Assert.True(reported.IsEmpty, "reported: " + Show(reported) + " ; thrown same? " + reported.Contains(thrown));
    }

    [Fact]
    public void WhenAll_PreCancelledToken_SameTaskTwice_ThrownErrorNotAlsoReported()
    {
        // An async method's task (a pooled box): passed twice, it is refused. (A promise's task passed twice to a
        // combination settled by its token is let go of twice, which is harmless: the same use may be awaited again.)
        var p = new Promise();
        SpindleTask t = Await(p);
        using var cts = new CancellationTokenSource();
        cts.Cancel();
        InvalidOperationException? thrown = null;
        ConcurrentQueue<Exception> reported = Observe(Own.ReportedOnTestThreads(), () =>
        {
            thrown = Assert.Throws<InvalidOperationException>(() => SpindleTask.WhenAll([t, t], cts.Token));
        });
        Assert.True(reported.IsEmpty, "reported: " + Show(reported) + " ; thrown same? " + reported.Contains(thrown));
    }

    [Fact]
    public void WithTimeoutZero_InputAwaitedElsewhere_NothingReported()
    {
        var p = new Promise();
        SpindleTask awaited = p.Task;
        awaited.Forget();
        ConcurrentQueue<Exception> reported = Observe(Own.ReportedOnTestThreads(), () =>
        {
            Assert.Throws<InvalidOperationException>(() => awaited.WithTimeout(TimeSpan.Zero));
        });
        p.SetResult();
        Assert.True(reported.IsEmpty, "reported: " + Show(reported));
    }

    [Fact]
    public void WhenAllTimeout_LaterInputAwaitedElsewhere_TimeoutLater_NothingReported()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var a = new Promise();
        var b = new Promise();
        SpindleTask awaited = b.Task;
        awaited.Forget();
        ConcurrentQueue<Exception> reported = Observe(Own.ReportedOnTestThreads(), () =>
        {
            Assert.Throws<InvalidOperationException>(() => SpindleTask.WhenAll([a.Task, awaited], new WhenAllOptions { Timeout = TimeSpan.FromSeconds(1), Timers = wheel }));
            clock.Advance(TimeSpan.FromSeconds(2));
        });
        b.SetResult();
        Assert.True(reported.IsEmpty, "reported: " + Show(reported));
    }

    // Tuple WhenAny has no settle-at-once path: a finished first input wins inline, then the second registration throws.
    [Fact]
    public void TupleWhenAny_FirstInputFinished_SecondAwaitedElsewhere_ThrownErrorNotAlsoReported()
    {
        var p = new Promise<int>();
        SpindleTask<int> awaited = p.Task;
        awaited.Forget();
        ConcurrentQueue<Exception> reported = Observe(Own.ReportedOnTestThreads(), () =>
        {
            Assert.Throws<InvalidOperationException>(() => SpindleTask.WhenAny(SpindleTask.FromResult(1), awaited));
        });
        p.SetResult(2);
        Assert.True(reported.IsEmpty, "reported: " + Show(reported));
    }
}

using System;
using System.Collections.Concurrent;
using System.Linq;
using System.Runtime.CompilerServices;
using System.Threading;
using System.Threading.Tasks;
using static SpindleLib.Tests.UnobservedReports;

namespace SpindleLib.Tests.Diagnostics;

/// <summary>
/// The test helper every test that watches Spindle.UnobservedException goes through (<see cref="UnobservedReports"/>):
/// another test's report, raised on another thread while the body runs (a worker, the finalizer thread), neither counts
/// nor hides the test's own. Sequential: its own reports would be dropped by the other tests' watches, but it raises
/// reports on purpose, and no test should have to see them.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class UnobservedReportsTests
{
    private static readonly TimeSpan Bound = TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds);

    /// <summary>Reports <paramref name="error"/> from a new thread, as another test's late work would, and waits for it.</summary>
    private static void ReportFromAnotherThread(Exception error)
    {
        var thread = new Thread(() => UnobservedExceptions.Report(error)) { IsBackground = true, Name = "another test's late work" };
        thread.Start();
        Assert.True(thread.Join(Bound), "the foreign reporter did not finish");
    }

    [Fact]
    public void AForeignReportOnAnotherThreadDuringTheBody_IsNotCounted_AndTheTestsOwnIs()
    {
        var mine = new InvalidTimeZoneException("mine");
        var foreign = new Exception("foreign");
        var lookalike = new InvalidTimeZoneException("mine"); // same type and message, another instance: not this test's
        UnobservedReports watch = Start(Own.Instances(mine));
        using (watch)
        {
            ReportFromAnotherThread(foreign);
            UnobservedExceptions.Report(mine);
            ReportFromAnotherThread(lookalike);
        }
        Assert.Same(mine, Assert.Single(watch.Reports));
        Assert.Equal(new Exception[] { foreign, lookalike }, watch.Dropped.ToArray());
    }

    [Fact]
    public void ExpectingNothing_AForeignReportDoesNotFailIt_ButItsOwnErrorStillDoes_EvenWrapped()
    {
        var mine = new InvalidTimeZoneException("mine");
        ConcurrentQueue<Exception> quiet = Observe(Own.Instances(mine), () => ReportFromAnotherThread(new Exception("foreign")));
        Assert.Empty(quiet);

        // Its own error, reported inside an aggregate from another thread: another test's report cannot contain it.
        var wrapped = new AggregateException(new FormatException("other"), mine);
        ConcurrentQueue<Exception> loud = Observe(Own.Instances(mine), () => ReportFromAnotherThread(wrapped));
        Assert.Same(wrapped, Assert.Single(loud)); // kept as it arrived, so a test expecting the bare instance still fails
    }

    [Fact]
    public void MarkerClaims_KeepOnlyTheTestsMarker()
    {
        ConcurrentQueue<Exception> byMessage = Observe(Own.Message("UnobservedReportsTests marker"), () =>
        {
            ReportFromAnotherThread(new InvalidOperationException("UnobservedReportsTests marker"));
            ReportFromAnotherThread(new InvalidOperationException("another test's message"));
        });
        Assert.Equal("UnobservedReportsTests marker", Assert.Single(byMessage).Message);

        ConcurrentQueue<Exception> byType = Observe(Own.Type<OnlyHere>(), () =>
        {
            ReportFromAnotherThread(new OnlyHere());
            ReportFromAnotherThread(new InvalidOperationException("foreign"));
        });
        Assert.IsType<OnlyHere>(Assert.Single(byType));
    }

    private sealed class OnlyHere() : Exception("thrown only by UnobservedReportsTests");

    [Fact]
    public void ReportedOnTestThreads_ClaimsThisThreadAndTheThreadsItStarts_NotAnotherThreadNorAWorker()
    {
        var inline = new InvalidOperationException("made by the library, inline"); // stands for an error it cannot name
        var started = new InvalidOperationException("on a thread this test started");
        var onWorker = new InvalidOperationException("on a worker");
        var foreign = new InvalidOperationException("on another thread");
        ConcurrentQueue<Exception> reported = Observe(Own.ReportedOnTestThreads(), () =>
        {
            UnobservedExceptions.Report(inline);
            Assert.True(TestUtil.RunOnThread(() => UnobservedExceptions.Report(started)).Wait(Bound));
            ReportFromAnotherThread(foreign);
            Assert.True(TestUtil.AwaitAsync(Spindle.Run(() => UnobservedExceptions.Report(onWorker))).Wait(Bound));
        });
        Assert.Equal(new Exception[] { inline, started }, reported.ToArray());
    }

    /// <summary>Reports <paramref name="error"/> from its finalizer: another test's unobserved job failure, collected late.</summary>
    private sealed class ReportsWhenFinalized(Exception error)
    {
        ~ReportsWhenFinalized() => UnobservedExceptions.Report(error);
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    private static void Drop(Exception error) => _ = new ReportsWhenFinalized(error);

    [Fact]
    public void AReportFromTheFinalizerThread_IsNotCounted_WhateverTheClaim()
    {
        var foreign = new InvalidOperationException("reported by a finalizer");
        var watch = Start(Own.Any(Own.ReportedOnTestThreads(), Own.Cancellations()));
        using (watch)
        {
            Drop(foreign);
            Assert.True(TestUtil.PollHelping(() =>
            {
                GC.Collect();
                GC.WaitForPendingFinalizers();
                return watch.Dropped.Contains<Exception>(foreign);
            }, Bound), "the finalizer never ran");
        }
        Assert.Empty(watch.Reports);
    }

    [Fact]
    public void AfterTheBody_NothingIsRecorded()
    {
        var late = new InvalidTimeZoneException("after the body");
        UnobservedReports watch = Start(Own.Instances(late));
        watch.Dispose();
        Action<Exception> swallow = static _ => { }; // a report with no handler goes to standard error
        Spindle.UnobservedException += swallow;
        try
        {
            UnobservedExceptions.Report(late);
        }
        finally
        {
            Spindle.UnobservedException -= swallow;
        }
        Assert.Empty(watch.Reports);
        Assert.Empty(watch.Dropped);
    }
}

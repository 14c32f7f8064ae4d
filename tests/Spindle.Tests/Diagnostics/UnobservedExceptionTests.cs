using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Linq;
using System.Threading;

namespace SpindleLib.Tests.Diagnostics;

/// <summary>
/// Spindle.UnobservedException as a reporting channel: each fault reaches each handler once, from any number of threads,
/// while handlers come and go; a failing handler neither stops the others nor disappears without a trace. Process-wide
/// (the event, standard error), so run alone.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class UnobservedExceptionTests
{
    /// <summary>Runs <paramref name="action"/> with standard error captured, and returns what was written to it.</summary>
    /// <summary>Forgets a task faulted with <paramref name="message"/> while only <paramref name="handler"/> is attached; returns what went to standard error.</summary>
    private static string ForgetFaultWith(Action<Exception> handler, string message)
    {
        Spindle.UnobservedException += handler;
        try
        {
            return CaptureStandardError(() => SpindleTask.FromException(new TimeZoneNotFoundException(message)).Forget());
        }
        finally
        {
            Spindle.UnobservedException -= handler;
        }
    }

    private static string CaptureStandardError(Action action)
    {
        TextWriter previous = Console.Error;
        using var sink = new StringWriter();
        Console.SetError(TextWriter.Synchronized(sink));
        try
        {
            action();
        }
        finally
        {
            Console.SetError(previous);
        }
        return sink.ToString();
    }

    /// <summary>
    /// A handler that throws is skipped so the others still run, but its exception vanished: with it the only handler,
    /// neither the fault nor the handler's own failure was seen anywhere, against "it is never swallowed". Both go to
    /// standard error now. (Found by a review.)
    /// </summary>
    [Fact]
    public void AHandlerThatThrows_ItsFailureAndTheFaultGoToStandardError()
    {
        string written = ForgetFaultWith(_ => throw new InvalidProgramException("the handler's own bug"), "the fault");

        Assert.Contains("the handler's own bug", written, StringComparison.Ordinal);
        Assert.Contains("the fault", written, StringComparison.Ordinal);
    }

    [Fact]
    public void AHandlerThatDoesNotThrow_WritesNothingToStandardError()
    {
        int seen = 0;
        // Counts only this test's fault (ForgetFaultWith makes it with this message): the event is process-wide, and
        // another test's late report may arrive meanwhile. This test is about the event itself, so it keeps a raw handler.
        string written = ForgetFaultWith(e => seen += e is TimeZoneNotFoundException { Message: "handled" } ? 1 : 0, "handled");

        Assert.Equal(1, seen);
        Assert.DoesNotContain("handled", written, StringComparison.Ordinal);
    }

    /// <summary>
    /// Many threads report at once while another thread attaches and detaches a second handler: the handler attached
    /// throughout sees every fault exactly once, and the other sees none twice.
    /// </summary>
    [Fact]
    public void ReportsFromManyThreadsWhileHandlersComeAndGo_EachFaultReachesAHandlerOnce()
    {
        const int Threads = 4;
        int perThread = TestUtil.Stress(5000);
        var steady = new ConcurrentDictionary<Exception, int>();
        var transient = new ConcurrentDictionary<Exception, int>();
        var faults = Enumerable.Range(0, Threads).Select(t => Enumerable.Range(0, perThread)
            .Select(i => (Exception)new TimeZoneNotFoundException($"fault {t}.{i}")).ToArray()).ToArray();
        // Only this test's faults are counted: another test's late report may arrive meanwhile (and one exception can
        // be reported twice there, for two completions). Raw handlers: the event itself is under test.
        var mine = new HashSet<Exception>(faults.SelectMany(f => f));
        Action<Exception> steadyHandler = e =>
        {
            if (mine.Contains(e))
            {
                steady.AddOrUpdate(e, 1, (_, n) => n + 1);
            }
        };
        Action<Exception> transientHandler = e =>
        {
            if (mine.Contains(e))
            {
                transient.AddOrUpdate(e, 1, (_, n) => n + 1);
            }
        };
        Spindle.UnobservedException += steadyHandler;
        int stop = 0;
        try
        {
            var churn = new Thread(() =>
            {
                while (Volatile.Read(ref stop) == 0)
                {
                    Spindle.UnobservedException += transientHandler;
                    Spindle.UnobservedException -= transientHandler;
                }
            });
            churn.Start();
            var reporters = faults.Select(mine => new Thread(() =>
            {
                foreach (Exception e in mine)
                {
                    SpindleTask.FromException(e).Forget();
                }
            })).ToList();
            reporters.ForEach(t => t.Start());
            reporters.ForEach(t => t.Join());
            Volatile.Write(ref stop, 1);
            churn.Join();
        }
        finally
        {
            Spindle.UnobservedException -= steadyHandler;
            Spindle.UnobservedException -= transientHandler;
        }

        Exception[] all = faults.SelectMany(f => f).ToArray();
        Assert.All(all, e => Assert.Equal(1, steady.TryGetValue(e, out int n) ? n : 0));
        Assert.All(transient, kv => Assert.Equal(1, kv.Value));
    }

    private static async SpindleTask FailAfter(Promise promise, Exception error)
    {
        await promise.Task;
        throw error;
    }

    /// <summary>
    /// Forgotten async methods that fault when another thread completes what they wait for, with the task tracker
    /// switched on and off meanwhile: each fault is reported exactly once, none lost, none twice.
    /// </summary>
    [Fact]
    public void ForgottenMethodsFaultingOnOtherThreadsWhileTrackingToggles_EachFaultIsReportedExactlyOnce()
    {
        const int Threads = 2;
        int perThread = TestUtil.Stress(3000);
        var counts = new ConcurrentDictionary<Exception, int>();
        Action<Exception> handler = e => counts.AddOrUpdate(e, 1, (_, n) => n + 1);
        var faults = Enumerable.Range(0, Threads).Select(t => Enumerable.Range(0, perThread)
            .Select(i => (Exception)new TimeZoneNotFoundException($"fault {t}.{i}")).ToArray()).ToArray();
        var toComplete = new BlockingCollection<Promise>();
        Spindle.UnobservedException += handler;
        int stop = 0;
        try
        {
            var completer = new Thread(() =>
            {
                foreach (Promise p in toComplete.GetConsumingEnumerable())
                {
                    p.SetResult();
                }
            });
            var toggler = new Thread(() =>
            {
                while (Volatile.Read(ref stop) == 0)
                {
                    SpindleDiagnostics.TrackTasks = !SpindleDiagnostics.TrackTasks;
                    SpindleDiagnostics.GetTrackedTasks();
                }
            });
            completer.Start();
            toggler.Start();
            var starters = faults.Select(mine => new Thread(() =>
            {
                foreach (Exception e in mine)
                {
                    var promise = new Promise();
                    FailAfter(promise, e).Forget();
                    toComplete.Add(promise);
                }
            })).ToList();
            starters.ForEach(t => t.Start());
            starters.ForEach(t => t.Join());
            toComplete.CompleteAdding();
            completer.Join();
            Volatile.Write(ref stop, 1);
            toggler.Join();
        }
        finally
        {
            Spindle.UnobservedException -= handler;
            SpindleDiagnostics.TrackTasks = false;
        }

        Assert.All(faults.SelectMany(f => f), e => Assert.Equal(1, counts.TryGetValue(e, out int n) ? n : 0));
    }

    /// <summary>An exception whose text cannot be made: writing it to standard error must not throw into the reporter.</summary>
    private sealed class UnprintableException : Exception
    {
        public override string ToString() => throw new InvalidOperationException("ToString failed");

        public override string Message => throw new InvalidOperationException("Message failed");
    }

    [Fact]
    public void AFaultThatCannotBePrinted_WithNoHandler_DoesNotThrowIntoTheReporter()
    {
        Exception? thrown = null;
        CaptureStandardError(() => thrown = Record.Exception(() => SpindleTask.FromException(new UnprintableException()).Forget()));
        Assert.Null(thrown);
    }

    [Fact]
    public void AHandlerThatThrowsAnExceptionThatCannotBePrinted_DoesNotThrowIntoTheReporterNorStopTheOthers()
    {
        int others = 0;
        var fault = new UnprintableException();
        Action<Exception> throwing = _ => throw new UnprintableException();
        Action<Exception> counting = e => others += ReferenceEquals(e, fault) ? 1 : 0; // this test's report only
        Spindle.UnobservedException += throwing;
        Spindle.UnobservedException += counting;
        Exception? thrown = null;
        try
        {
            CaptureStandardError(() => thrown = Record.Exception(() => SpindleTask.FromException(fault).Forget()));
        }
        finally
        {
            Spindle.UnobservedException -= throwing;
            Spindle.UnobservedException -= counting;
        }
        Assert.Null(thrown);
        Assert.Equal(1, others);
    }

    /// <summary>
    /// A handler that attaches another handler, or detaches itself, while a fault is being reported: the report goes to
    /// the handlers attached when it started, and the next one to those attached then.
    /// </summary>
    [Fact]
    public void AHandlerThatAttachesOrDetachesDuringAReport_ChangesOnlyLaterReports()
    {
        int late = 0;
        int once = 0;
        // The handlers act on this test's two reports only: another test's late report may arrive meanwhile.
        var first = new TimeZoneNotFoundException("first");
        var second = new TimeZoneNotFoundException("second");
        Action<Exception> lateHandler = e => late += ReferenceEquals(e, second) ? 1 : 0;
        Action<Exception>? onceHandler = null;
        onceHandler = e =>
        {
            if (!ReferenceEquals(e, first))
            {
                return;
            }
            once++;
            Spindle.UnobservedException -= onceHandler;
            Spindle.UnobservedException += lateHandler;
        };
        Spindle.UnobservedException += onceHandler;
        try
        {
            SpindleTask.FromException(first).Forget();
            Assert.Equal((1, 0), (once, late));

            SpindleTask.FromException(second).Forget();
            Assert.Equal((1, 1), (once, late));
        }
        finally
        {
            Spindle.UnobservedException -= onceHandler;
            Spindle.UnobservedException -= lateHandler;
        }
    }

    /// <summary>Attaching a null handler changes nothing, as for any .NET event: with no real handler, standard error still gets the fault.</summary>
    [Fact]
    public void ANullHandler_IsIgnored()
    {
        Spindle.UnobservedException += null;
        string written = CaptureStandardError(() => SpindleTask.FromException(new TimeZoneNotFoundException("no real handler")).Forget());
        Spindle.UnobservedException -= null;

        Assert.Contains("no real handler", written, StringComparison.Ordinal);
    }

    /// <summary>A worker's work item that throws with nobody to tell is reported once, and the worker carries on.</summary>
    [Fact]
    public void AWorkItemThatThrows_IsReportedOnceAndTheWorkerCarriesOn()
    {
        var error = new TimeZoneNotFoundException("thrown on a worker");
        var seen = new ConcurrentQueue<Exception>();
        Action<Exception> handler = e =>
        {
            if (e == error)
            {
                seen.Enqueue(e);
            }
        };
        Spindle.UnobservedException += handler;
        try
        {
            Spindle.Run(() => throw error).Forget();
            TestUtil.SpinUntil(() => !seen.IsEmpty);
            Spindle.Run(() => { }).GetAwaiter().GetResult(); // the workers still run work
            Thread.Sleep(50);
        }
        finally
        {
            Spindle.UnobservedException -= handler;
        }
        Assert.Single(seen);
    }
}

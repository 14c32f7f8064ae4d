using System;
using System.Collections.Concurrent;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using Xunit.Abstractions;

namespace SpindleLib.Tests;

/// <summary>
/// The one way a test watches <see cref="Spindle.UnobservedException"/>: for the duration of a body, keeping only the
/// reports the test can claim as its own.
/// </summary>
/// <remarks>
/// The event is process-wide, and other tests' reports arrive at any time: a failed job's holder reports from the
/// finalizer thread whenever the GC runs it, a forgotten task may fault after its test ended, a timer continuation may
/// run late. A count or emptiness of "whatever arrived" can therefore fail, or pass wrongly, because of another test.
/// So a test names what is its own (see <see cref="Own"/>): the exception instances it created, a marker it chose (a
/// unique message, a dedicated exception type), or, for an error it cannot know the instance of, a property that no
/// other test's report can have. "Its own" is decided by what the test controls, never by what arrived, so a test that
/// expects nothing still fails when its own code reports something. A report counts as own when it, or an exception it
/// contains (an <see cref="AggregateException"/>'s inner exceptions, an inner-exception chain), is claimed: no other
/// test's report can contain this test's instance. The reports kept are the reports as they arrived (an aggregate stays
/// an aggregate), so a test that expects its instance itself still fails on a wrapper. Dropped reports go to
/// <see cref="Dropped"/> and, when given, to the test's output, for diagnosis.
/// </remarks>
internal sealed class UnobservedReports : IDisposable
{
    private readonly Func<Exception, bool> _isOwn;
    private readonly Action<Exception>? _onOwn;
    private readonly ITestOutputHelper? _output;
    private readonly Action<Exception> _handler;

    private UnobservedReports(Func<Exception, bool> isOwn, Action<Exception>? onOwn, ITestOutputHelper? output)
    {
        _isOwn = isOwn ?? throw new ArgumentNullException(nameof(isOwn));
        _onOwn = onOwn;
        _output = output;
        _handler = Record;
        Spindle.UnobservedException += _handler;
    }

    /// <summary>The reports claimed as the test's own, in arrival order.</summary>
    public ConcurrentQueue<Exception> Reports { get; } = new();

    /// <summary>The reports that were not the test's own (another test's late reports), for diagnosis only.</summary>
    public ConcurrentQueue<Exception> Dropped { get; } = new();

    /// <summary>
    /// Starts watching until <see cref="Dispose"/>: for a test whose handler must do something on each own report
    /// (<paramref name="onOwn"/>, which runs on the reporting thread after the report is recorded).
    /// </summary>
    public static UnobservedReports Start(Func<Exception, bool> isOwn, Action<Exception>? onOwn = null, ITestOutputHelper? output = null)
        => new(isOwn, onOwn, output);

    /// <summary>Runs <paramref name="body"/> while watching, and returns the test's own reports.</summary>
    public static ConcurrentQueue<Exception> Observe(Func<Exception, bool> isOwn, Action body, ITestOutputHelper? output = null)
    {
        using UnobservedReports watch = Start(isOwn, output: output);
        body();
        return watch.Reports;
    }

    /// <summary>As <see cref="Observe(Func{Exception, bool}, Action, ITestOutputHelper?)"/>; the body gets the own reports as they arrive.</summary>
    public static ConcurrentQueue<Exception> Observe(Func<Exception, bool> isOwn, Action<ConcurrentQueue<Exception>> body, ITestOutputHelper? output = null)
    {
        using UnobservedReports watch = Start(isOwn, output: output);
        body(watch.Reports);
        return watch.Reports;
    }

    /// <summary>As <see cref="Observe(Func{Exception, bool}, Action, ITestOutputHelper?)"/>, for an asynchronous body, which gets the own reports as they arrive.</summary>
    public static async Task<ConcurrentQueue<Exception>> ObserveAsync(Func<Exception, bool> isOwn, Func<ConcurrentQueue<Exception>, Task> body, ITestOutputHelper? output = null)
    {
        using UnobservedReports watch = Start(isOwn, output: output);
        await body(watch.Reports);
        return watch.Reports;
    }

    /// <summary>Stops watching: later reports, own or not, are not recorded.</summary>
    public void Dispose() => Spindle.UnobservedException -= _handler;

    private void Record(Exception report)
    {
        if (IsOwn(report, 0))
        {
            Reports.Enqueue(report);
            _onOwn?.Invoke(report);
            return;
        }
        Dropped.Enqueue(report);
        try
        {
            _output?.WriteLine("UnobservedReports: dropped a report that is not this test's own: " + report.GetType().FullName);
        }
        catch (InvalidOperationException)
        {
            // The test has ended (the output no longer takes lines); the report stays in Dropped.
        }
    }

    /// <summary>True when the test claims <paramref name="report"/> or an exception it contains.</summary>
    private bool IsOwn(Exception report, int depth)
    {
        bool claimed;
        try
        {
            claimed = _isOwn(report);
        }
        catch (Exception)
        {
            // A claim that cannot be decided (a Message or property getter of the report threw) is not made: the
            // report is dropped. Claims by instance, type or thread never throw, and no test's own marker throws.
            claimed = false;
        }
        if (claimed)
        {
            return true;
        }
        if (depth >= 32)
        {
            return false; // a cycle or an absurdly deep chain: no claim hides that deep
        }
        if (report is AggregateException aggregate)
        {
            return aggregate.InnerExceptions.Any(inner => inner is not null && IsOwn(inner, depth + 1));
        }
        return report.InnerException is { } inner2 && IsOwn(inner2, depth + 1);
    }

    /// <summary>The ways a test claims a report as its own.</summary>
    public static class Own
    {
        /// <summary>The mark of the test that owns this thread (see <see cref="ReportedOnTestThreads"/>).</summary>
        [ThreadStatic]
        private static object? t_mark;

        /// <summary>The calling thread's mark, for a thread the test starts to adopt (<see cref="TestUtil.RunOnThread"/>).</summary>
        internal static object? ThreadMark
        {
            get => t_mark;
            set => t_mark = value;
        }

        /// <summary>Exactly these exception instances (the ones the test created).</summary>
        public static Func<Exception, bool> Instances(params Exception[] mine)
        {
            Exception[] copy = (Exception[])mine.Clone();
            return e => Array.Exists(copy, m => ReferenceEquals(m, e));
        }

        /// <summary>
        /// The instances in <paramref name="made"/> when the report arrives: for a test that creates its exceptions as it
        /// goes (one per round), adding each before it can be reported.
        /// </summary>
        public static Func<Exception, bool> InstancesIn(ConcurrentQueue<Exception> made)
            => e => made.Any(m => ReferenceEquals(m, e));

        /// <summary>
        /// An exception of <typeparamref name="T"/>: only for a type the test (or its class) alone throws, a dedicated,
        /// usually private, exception type.
        /// </summary>
        public static Func<Exception, bool> Type<T>()
            where T : Exception
            => e => e is T;

        /// <summary>An exception whose message is exactly <paramref name="marker"/>: a message no other test uses.</summary>
        public static Func<Exception, bool> Message(string marker)
            => e =>
            {
                try
                {
                    return string.Equals(e.Message, marker, StringComparison.Ordinal);
                }
                catch (Exception)
                {
                    return false; // a Message that throws is no marker this test chose
                }
            };

        /// <summary>
        /// A cancellation by the token <paramref name="token"/> returns when the report arrives (a token of the test's own
        /// source, or one the test captured from the code under test); a token that cannot be canceled names nothing.
        /// </summary>
        public static Func<Exception, bool> CanceledBy(Func<CancellationToken> token)
            => e => e is OperationCanceledException oce && token() is { CanBeCanceled: true } mine && oce.CancellationToken == mine;

        /// <summary>
        /// Any cancellation (an <see cref="OperationCanceledException"/>), for a test whose own cancellations carry no
        /// token of its own (SetCanceled() without one), so that no instance or token can name them. Spindle does not
        /// report a cancellation (ForgetTests.Forget_CanceledTask_IsNotReported), and no test throws one from a work item
        /// or continuation, the only place where a thrown cancellation would be reported as any exception is: a
        /// cancellation report in such a test is its own code's, or a defect worth failing on whoever caused it.
        /// </summary>
        public static Func<Exception, bool> Cancellations() => e => e is OperationCanceledException;

        /// <summary>
        /// Any report made on one of the test's own threads while the watch is on: the thread that makes this claim, and
        /// the threads it starts through <see cref="TestUtil.RunOnThread"/> (a <see cref="Race"/>'s racers) after it. For
        /// an error of the test's own objects whose instance it cannot know (an await-once or misuse error the library
        /// makes and reports inline, in the test's own call or in a continuation that call runs). Another test's late
        /// report comes from the finalizer thread, a worker, a timer's thread or a pool thread, never from these, which
        /// run only this test's code. The one way in is a body that waits by running queued work (a GetResult of a pending
        /// task helps run jobs): the claim suits a body whose waits are on completed tasks, or whose helping cannot report.
        /// The mark is a thread-static, not an AsyncLocal: marking the ExecutionContext would take the test out of the
        /// default context, whose fast paths many tests exercise. So a report made after an await on a pool thread or a
        /// worker is not claimed this way: claim such reports by instance, marker or message.
        /// </summary>
        public static Func<Exception, bool> ReportedOnTestThreads()
        {
            if (TestUtil.OnSpindleWorker)
            {
                return static _ => false; // a worker runs every test's work: it is nobody's own thread
            }
            var mark = new object();
            t_mark = mark;
            return _ => ReferenceEquals(t_mark, mark);
        }

        /// <summary>
        /// Spindle's await-once errors (the stale read of a task already read, a second awaiter): for a race test whose
        /// own objects could be read stale by a continuation the library runs on a worker, off the test's threads, where
        /// <see cref="ReportedOnTestThreads"/> cannot see it. The property is the message, which another test's report could
        /// carry only if that test broke the await-once rule on purpose and left the error to be reported, or if the
        /// library read something stale there too (a defect): no test does the former (its misuse tests take the error
        /// at the call, or assert that none is reported), and the latter is worth failing on.
        /// </summary>
        public static Func<Exception, bool> AwaitOnceErrors()
            => e => e is InvalidOperationException
                && (e.Message == ThrowHelper.AwaitOnceMessage || e.Message.StartsWith("This Spindle task already has an awaiter.", StringComparison.Ordinal));

        /// <summary>
        /// The instances the test created, and anything reported on its threads (<see cref="ReportedOnTestThreads"/>): for a
        /// test that asserts the whole of what its code reported (nothing, or exactly these), so that an error its own
        /// objects make (an await-once or misuse error) still fails it.
        /// </summary>
        public static Func<Exception, bool> InstancesOrOnTestThreads(params Exception[] mine) => Any(Instances(mine), ReportedOnTestThreads());

        /// <summary>Any of the given claims (one that throws on a report does not stop the others).</summary>
        public static Func<Exception, bool> Any(params Func<Exception, bool>[] claims)
        {
            Func<Exception, bool>[] copy = (Func<Exception, bool>[])claims.Clone();
            return e => Array.Exists(copy, c => Decide(c, e));
        }

        private static bool Decide(Func<Exception, bool> claim, Exception report)
        {
            try
            {
                return claim(report);
            }
            catch (Exception)
            {
                return false; // see IsOwn: a claim that cannot be decided is not made
            }
        }
    }
}

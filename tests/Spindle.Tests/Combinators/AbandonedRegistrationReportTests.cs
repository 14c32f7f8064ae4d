using System;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using static SpindleLib.Tests.Combinators.CombinatorTestSupport;
using static SpindleLib.Tests.UnobservedReports;

namespace SpindleLib.Tests.Combinators;

/// <summary>
/// A tuple WhenAll or WhenAny whose registration of an input throws (the input was already awaited elsewhere) hands the
/// caller that exception and reads the combined task itself; a failure of an earlier input that the combined task carries
/// is reported to <see cref="Spindle.UnobservedException"/>, since nobody else will see it. A fault is reported once per
/// completion, though: an input whose read does not consume it (a promise's task, a task made failed) claims that report,
/// so a Forget() of the same input, before or after, reports nothing more. Before, that read reported without claiming
/// (found by the review of the defects left alone), and the same completion was reported twice.
/// Sequential: Spindle.UnobservedException is process-wide (reports are counted by identity, too).
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class AbandonedRegistrationReportTests
{
    public enum Input
    {
        Promise,
        FromException,
    }

    public enum Combinator
    {
        SpanWhenAll,
        SpanWhenAllWithToken,
        TupleWhenAll,
        TupleWhenAllWithToken,
        TupleWhenAny,
    }

    /// <summary>
    /// Runs a combinator over a failed input and a task already awaited elsewhere (its registration throws), with the
    /// failed input forgotten before or after; returns how many times the failed input's fault was reported.
    /// </summary>
    private static int ReportsOfTheEarlierFault(Input kind, Combinator combinator, bool forgetFirst)
    {
        var error = new InvalidOperationException("the earlier input's failure");
        var reported = Observe(Own.Instances(error), () =>
        {
            var failing = new Promise<int>();
            failing.SetException(error);
            SpindleTask<int> input = kind == Input.Promise ? failing.Task : SpindleTask.FromException<int>(error);
            var other = new Promise<int>();
            SpindleTask<int> awaitedElsewhere = other.Task;
            awaitedElsewhere.GetAwaiter().OnCompleted(static () => { });
            if (forgetFirst)
            {
                input.Forget(); // reports the fault, and claims that report
            }
            using var cts = new CancellationTokenSource();
            InvalidOperationException thrown = Assert.Throws<InvalidOperationException>(() =>
            {
                _ = combinator switch
                {
                    Combinator.SpanWhenAll => SpindleTask.WhenAll([input, awaitedElsewhere]).AsSpindleTask(),
                    Combinator.SpanWhenAllWithToken => SpindleTask.WhenAll([input, awaitedElsewhere], cts.Token).AsSpindleTask(),
                    Combinator.TupleWhenAll => SpindleTask.WhenAll(input, awaitedElsewhere).AsSpindleTask(),
                    Combinator.TupleWhenAllWithToken => SpindleTask.WhenAll(input, awaitedElsewhere, cts.Token).AsSpindleTask(),
                    _ => SpindleTask.WhenAny(input, awaitedElsewhere).AsSpindleTask(),
                };
            });
            Assert.NotSame(error, thrown); // the await-once error, which the caller got
            if (!forgetFirst)
            {
                input.Forget(); // a promise's task can still be forgotten: its fault is reported, unless already claimed
            }
            other.SetResult(1);
        });
        return reported.Count(e => ReferenceEquals(e, error));
    }

    [Theory]
    [InlineData(Input.Promise, Combinator.SpanWhenAll, false)]
    [InlineData(Input.Promise, Combinator.SpanWhenAll, true)]
    [InlineData(Input.Promise, Combinator.SpanWhenAllWithToken, false)]
    [InlineData(Input.Promise, Combinator.SpanWhenAllWithToken, true)]
    [InlineData(Input.Promise, Combinator.TupleWhenAll, false)]
    [InlineData(Input.Promise, Combinator.TupleWhenAll, true)]
    [InlineData(Input.Promise, Combinator.TupleWhenAllWithToken, false)]
    [InlineData(Input.Promise, Combinator.TupleWhenAllWithToken, true)]
    [InlineData(Input.Promise, Combinator.TupleWhenAny, false)]
    [InlineData(Input.Promise, Combinator.TupleWhenAny, true)]
    [InlineData(Input.FromException, Combinator.SpanWhenAll, false)]
    [InlineData(Input.FromException, Combinator.SpanWhenAll, true)]
    [InlineData(Input.FromException, Combinator.SpanWhenAllWithToken, false)]
    [InlineData(Input.FromException, Combinator.SpanWhenAllWithToken, true)]
    [InlineData(Input.FromException, Combinator.TupleWhenAll, false)]
    [InlineData(Input.FromException, Combinator.TupleWhenAll, true)]
    [InlineData(Input.FromException, Combinator.TupleWhenAllWithToken, false)]
    [InlineData(Input.FromException, Combinator.TupleWhenAllWithToken, true)]
    [InlineData(Input.FromException, Combinator.TupleWhenAny, false)]
    [InlineData(Input.FromException, Combinator.TupleWhenAny, true)]
    public void TheEarlierInputsFault_IsReportedOnce_WithAForgetOfItBeforeOrAfter(Input kind, Combinator combinator, bool forgetFirst)
        => Assert.Equal(1, ReportsOfTheEarlierFault(kind, combinator, forgetFirst));

    /// <summary>An aggregating WhenAll reports each earlier failure it carries, once per completion too.</summary>
    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public void Aggregating_TheEarlierInputsFault_IsReportedOnce_WithAForgetOfItBeforeOrAfter(bool forgetFirst)
    {
        var error = new InvalidOperationException("the earlier input's failure");
        var reported = Observe(Own.Instances(error), () =>
        {
            var failing = new Promise();
            failing.SetException(error);
            var other = new Promise();
            SpindleTask awaitedElsewhere = other.Task;
            awaitedElsewhere.GetAwaiter().OnCompleted(static () => { });
            if (forgetFirst)
            {
                failing.Task.Forget();
            }
            Assert.Throws<InvalidOperationException>(
                () => SpindleTask.WhenAll([failing.Task, awaitedElsewhere], new WhenAllOptions { AggregateExceptions = true }));
            if (!forgetFirst)
            {
                failing.Task.Forget();
            }
            other.SetResult();
        });
        Assert.Equal(1, reported.Count(e => ReferenceEquals(e, error)));
    }

    /// <summary>
    /// An aggregating WhenAll carries every exception of a BCL task that faulted with several (here through a task made
    /// failed with it, which a read does not consume): the completion's report gives each once. Before, the first was
    /// matched to its completion, whose report gave them all, and the second was reported again on its own
    /// ("e1=1 e2=2").
    /// </summary>
    [Fact]
    public void Aggregating_ABclTaskWithSeveralExceptions_EachIsReportedOnce()
    {
        var e1 = new InvalidOperationException("the bcl task's first");
        var e2 = new InvalidOperationException("the bcl task's second");
        var reported = Observe(Own.Instances(e1, e2), () =>
        {
            SpindleTask failed = SpindleTask.WhenAll(new[] { Task.WhenAll(Task.FromException(e1), Task.FromException(e2)) });
            var other = new Promise();
            SpindleTask awaitedElsewhere = other.Task;
            awaitedElsewhere.GetAwaiter().OnCompleted(static () => { });
            Assert.Throws<InvalidOperationException>(
                () => SpindleTask.WhenAll([failed, awaitedElsewhere], new WhenAllOptions { AggregateExceptions = true }));
            failed.Forget(); // its report was claimed: nothing more
            other.SetResult();
        });
        Assert.Equal("e1=1 e2=1", "e1=" + reported.Count(e => e == e1) + " e2=" + reported.Count(e => e == e2));
    }

    /// <summary>
    /// Two tasks made failed with one exception object are two completions, reported twice, as two BCL tasks are
    /// (<c>BclTaskReportOnceTests</c>). Before, the second copy of the exception met the first task's claim: reported once.
    /// </summary>
    [Fact]
    public void Aggregating_TwoFailedTasksWithOneException_AreTwoCompletions_ReportedTwice()
    {
        var error = new InvalidOperationException("one exception, two completions");
        var reported = Observe(Own.Instances(error), () =>
        {
            var other = new Promise();
            SpindleTask awaitedElsewhere = other.Task;
            awaitedElsewhere.GetAwaiter().OnCompleted(static () => { });
            Assert.Throws<InvalidOperationException>(() => SpindleTask.WhenAll(
                [SpindleTask.FromException(error), SpindleTask.FromException(error), awaitedElsewhere],
                new WhenAllOptions { AggregateExceptions = true }));
            other.SetResult();
        });
        Assert.Equal(2, reported.Count(e => ReferenceEquals(e, error)));
    }

    private static async SpindleTask Fails(Exception error, SpindleTask gate)
    {
        await gate;
        throw error;
    }

    /// <summary>An earlier input whose read consumes it (an async method) has nothing to claim: its fault is still reported, once.</summary>
    [Fact]
    public void AnEarlierAsyncMethodsFault_IsStillReported()
    {
        var error = new InvalidOperationException("the earlier input's failure");
        var gate = new Promise();
        var reported = Observe(Own.Instances(error), () =>
        {
            SpindleTask failing = Fails(error, gate.Task);
            var other = new Promise();
            SpindleTask awaitedElsewhere = other.Task;
            awaitedElsewhere.GetAwaiter().OnCompleted(static () => { });
            Assert.Throws<InvalidOperationException>(() => SpindleTask.WhenAll([failing, awaitedElsewhere]));
            gate.SetResult(); // the method fails now, on this thread: the last input, read by the abandoned combination
            other.SetResult();
        });
        Assert.Equal(1, reported.Count(e => ReferenceEquals(e, error)));
    }

    /// <summary>
    /// A WhenAll without aggregation whose registration failed carries only its lowest index's fault, but every earlier
    /// input's failure was read by it (an async method's read consumes it): nobody else will see the second one either,
    /// and a WhenAll that its token decides reports every stored failure. Found by the review of stop 31's changes: only
    /// the first was reported, the second was lost ("e1=1 e2=0").
    /// </summary>
    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public void NotAggregating_EveryEarlierAsyncMethodsFault_IsReported(bool failBeforeTheCall)
    {
        var e1 = new InvalidOperationException("the first earlier input's failure");
        var e2 = new InvalidOperationException("the second earlier input's failure");
        var gate1 = new Promise();
        var gate2 = new Promise();
        var reported = Observe(Own.Instances(e1, e2), () =>
        {
            if (failBeforeTheCall)
            {
                gate1.SetResult();
                gate2.SetResult();
            }
            SpindleTask first = Fails(e1, gate1.Task);
            SpindleTask second = Fails(e2, gate2.Task);
            var other = new Promise();
            SpindleTask awaitedElsewhere = other.Task;
            awaitedElsewhere.GetAwaiter().OnCompleted(static () => { });
            Assert.Throws<InvalidOperationException>(() => SpindleTask.WhenAll([first, second, awaitedElsewhere]));
            if (!failBeforeTheCall)
            {
                gate1.SetResult(); // both methods fail now, on this thread: the abandoned combination reads them
                gate2.SetResult();
            }
            other.SetResult();
        });
        Assert.Equal("e1=1 e2=1", "e1=" + reported.Count(e => e == e1) + " e2=" + reported.Count(e => e == e2));
    }

    /// <summary>The same for a WhenAny's losers is the loser's path; a tuple WhenAll without aggregation, as the span's.</summary>
    [Fact]
    public void NotAggregating_Tuple_EveryEarlierAsyncMethodsFault_IsReported()
    {
        var e1 = new InvalidOperationException("the first earlier input's failure");
        var e2 = new InvalidOperationException("the second earlier input's failure");
        var gate1 = new Promise();
        var gate2 = new Promise();
        var reported = Observe(Own.Instances(e1, e2), () =>
        {
            SpindleTask first = Fails(e1, gate1.Task);
            SpindleTask second = Fails(e2, gate2.Task);
            var other = new Promise<int>();
            SpindleTask<int> awaitedElsewhere = other.Task;
            awaitedElsewhere.GetAwaiter().OnCompleted(static () => { });
            Assert.Throws<InvalidOperationException>(() => SpindleTask.WhenAll(first, second, awaitedElsewhere));
            gate1.SetResult();
            gate2.SetResult();
            other.SetResult(1);
        });
        Assert.Equal("e1=1 e2=1", "e1=" + reported.Count(e => e == e1) + " e2=" + reported.Count(e => e == e2));
    }
}

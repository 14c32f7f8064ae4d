using System;
using System.Collections.Concurrent;
using System.Linq;
using System.Threading.Tasks;
using static SpindleLib.Tests.UnobservedReports;

namespace SpindleLib.Tests.Combinators;

/// <summary>
/// A BCL task input that faulted with several exceptions (a <c>Task.WhenAll</c>'s, or a TaskCompletionSource given a
/// list): a WhenAll that aggregates gives every one of them, in order, as <c>Task.WhenAll</c> does, whether the inputs had
/// finished when it was called or finished later; a WhenAll that does not aggregate throws the first, as an await of
/// the BCL's does; and a losing WhenAny input's are all reported. (Found by the combinator review: only the first was
/// kept.) The UnobservedException event is process-wide: these tests run alone.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class BclSeveralFaultsTests
{
    private static readonly WhenAllOptions Aggregate = new() { AggregateExceptions = true };

    private static Exception[] Faults(string prefix, int n) => Enumerable.Range(0, n).Select(i => (Exception)new InvalidOperationException(prefix + i)).ToArray();

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public void WhenAllAggregating_GivesEveryExceptionOfEveryInput_InOrder(bool pending)
    {
        Exception[] a = Faults("a", 2), t = Faults("t", 2), c = Faults("c", 1);
        var gateA = new TaskCompletionSource[] { new(), new() };
        var tcs = new TaskCompletionSource();
        var promise = new Promise();
        Task whenAll = Task.WhenAll(gateA.Select(async (g, i) => { await g.Task; throw a[i]; }));
        if (!pending)
        {
            Finish();
        }
        SpindleTask all = SpindleTask.WhenAll([SpindleTask.WhenAll([whenAll], Aggregate, default), SpindleTask.WhenAll([tcs.Task], Aggregate, default), promise.Task], Aggregate, default);
        if (pending)
        {
            Finish();
        }
        var e = Assert.Throws<AggregateException>(() => all.GetAwaiter().GetResult());
        // The inner WhenAlls aggregated their BCL inputs' exceptions; the outer one flattens nothing it was not given:
        Assert.Equal(3, e.InnerExceptions.Count);
        Assert.Equal(a, Assert.IsType<AggregateException>(e.InnerExceptions[0]).InnerExceptions);
        Assert.Equal(t, Assert.IsType<AggregateException>(e.InnerExceptions[1]).InnerExceptions);
        Assert.Same(c[0], e.InnerExceptions[2]);

        void Finish()
        {
            gateA[0].SetResult();
            gateA[1].SetResult();
            tcs.SetException(t);
            promise.SetException(c[0]);
        }
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public void WhenAllAggregating_OverBclTasks_MatchesTaskWhenAll(bool pending)
    {
        Exception[] t1 = Faults("x", 3), t2 = Faults("y", 2);
        var first = new TaskCompletionSource<int>();
        var second = new TaskCompletionSource<int>();
        var ok = new TaskCompletionSource<int>();
        if (!pending)
        {
            Finish();
        }
        SpindleTask<int[]> all = SpindleTask.WhenAll([first.Task, ok.Task, second.Task], Aggregate, default);
        if (pending)
        {
            Finish();
        }
        var e = Assert.Throws<AggregateException>(() => all.GetAwaiter().GetResult());
        Exception bcl = Task.WhenAll(first.Task, ok.Task, second.Task).Exception!;
        Assert.Equal(t1.Concat(t2), e.InnerExceptions);
        Assert.Equal(((AggregateException)bcl).InnerExceptions, e.InnerExceptions);

        // Without the option, the first exception of the first failed input, as `await Task.WhenAll(...)` throws.
        SpindleTask<int[]> plain = SpindleTask.WhenAll([first.Task, ok.Task, second.Task]);
        Assert.Same(t1[0], Assert.Throws<InvalidOperationException>(() => plain.GetAwaiter().GetResult()));

        void Finish()
        {
            first.SetException(t1);
            ok.SetResult(1);
            second.SetException(t2);
        }
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public void WhenAny_ALosingBclInputWithSeveralExceptions_ReportsEveryOne(bool pending)
    {
        Exception[] lost = Faults("lost", 3);
        var loser = new TaskCompletionSource();
        var winner = new TaskCompletionSource();
        var watch = UnobservedReports.Start(Own.Instances(lost));
        ConcurrentQueue<Exception> reported = watch.Reports;
        using (watch)
        {
            if (!pending)
            {
                winner.SetResult();
                loser.SetException(lost);
            }
            SpindleTask<int> any = SpindleTask.WhenAny([winner.Task, loser.Task]);
            if (pending)
            {
                winner.SetResult();
                // The BCL may run the winner's continuation later (it does not promise to run it inline): the loser fails
                // only once the race is decided, or it could win.
                Assert.True(TestUtil.PollHelping(() => any.IsCompleted, TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)));
                loser.SetException(lost);
            }
            Assert.Equal(0, any.GetAwaiter().GetResult());
            Assert.True(TestUtil.PollHelping(() => lost.All(reported.Contains), TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)),
                "reported: " + string.Join(", ", reported.Select(e => e.Message)));
        }
    }
}

using System;
using System.Linq;
using System.Threading.Tasks;
using static SpindleLib.Tests.Combinators.CombinatorTestSupport;
using static SpindleLib.Tests.UnobservedReports;

namespace SpindleLib.Tests.Combinators;

/// <summary>
/// A task that a read does not consume (a promise's, a task made failed, a preserved task, a BCL task) may be passed to a
/// WhenAny twice. Finished and faulted, the first copy wins and carries the fault to the awaiter; the other copy is the
/// same completion, so it is not a loser with a fault of its own to report. Before, the losing copy was forgotten, and
/// its fault went to Spindle.UnobservedException although the awaiter got it. One completion is reported at most once,
/// and not at all when the awaiter gets it. Sequential: Spindle.UnobservedException is process-wide.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class WhenAnyRepeatedInputReportTests
{
    public enum Input
    {
        Promise,
        FromException,
        Preserved,
        TypedPromise,
        BclTask,
    }

    private static readonly InvalidOperationException Error = new("the one fault");

    private static SpindleTask WhenAnyOfTheSameFaultedInputTwice(Input kind, Promise promise, Promise<int> typed)
    {
        promise.SetException(Error);
        typed.SetException(Error);
        switch (kind)
        {
            case Input.Promise:
                return SpindleTask.WhenAny(promise.Task, promise.Task).AsSpindleTask();
            case Input.FromException:
                SpindleTask failed = SpindleTask.FromException(Error);
                return SpindleTask.WhenAny(failed, failed).AsSpindleTask();
            case Input.Preserved:
                SpindleTask preserved = Await(promise).Preserve();
                return SpindleTask.WhenAny(preserved, preserved).AsSpindleTask();
            case Input.TypedPromise:
                return SpindleTask.WhenAny(typed.Task, typed.Task).AsSpindleTask();
            default:
                Task bcl = Task.FromException(Error);
                return SpindleTask.WhenAny(bcl, bcl).AsSpindleTask();
        }
    }

    [Theory]
    [InlineData(Input.Promise)]
    [InlineData(Input.FromException)]
    [InlineData(Input.Preserved)]
    [InlineData(Input.TypedPromise)]
    [InlineData(Input.BclTask)]
    public void SameFaultedInputTwice_TheAwaiterGetsTheFault_AndNothingIsReported(Input kind)
    {
        Exception? awaited = null;
        var reported = Observe(Own.Instances(Error), () =>
        {
            SpindleTask any = WhenAnyOfTheSameFaultedInputTwice(kind, new Promise(), new Promise<int>());
            awaited = Assert.Throws<InvalidOperationException>(() => any.GetAwaiter().GetResult());
        });
        Assert.Same(Error, awaited);
        Assert.Equal(0, reported.Count(e => e == Error));
    }

    /// <summary>Nobody awaits the WhenAny, which is forgotten: its one completion is reported once.</summary>
    [Theory]
    [InlineData(Input.Promise)]
    [InlineData(Input.FromException)]
    [InlineData(Input.BclTask)]
    public void SameFaultedInputTwice_WhenAnyForgotten_IsReportedOnce(Input kind)
    {
        var reported = Observe(Own.Instances(Error), () => WhenAnyOfTheSameFaultedInputTwice(kind, new Promise(), new Promise<int>()).Forget());
        Assert.Equal(1, reported.Count(e => e == Error));
    }

    /// <summary>
    /// A pending BCL task passed twice goes to a combinator, which registers both copies: when the task faults, one copy
    /// wins and the other loses to the same completion.
    /// </summary>
    [Fact]
    public async Task SamePendingBclTaskTwice_FaultingLater_TheAwaiterGetsTheFault_AndNothingIsReported()
    {
        Exception? awaited = null;
        var reported = await ObserveAsync(Own.Instances(Error), async _ =>
        {
            var source = new TaskCompletionSource();
            SpindleTask<int> any = SpindleTask.WhenAny(source.Task, source.Task);
            Assert.False(any.IsCompleted);
            source.SetException(Error); // runs both copies' continuations here, in turn: the winner's, then the loser's
            awaited = await TestUtil.Catch(() => TestUtil.WithTimeout(any));
        });
        Assert.Same(Error, awaited);
        Assert.Equal(0, reported.Count(e => e == Error));
    }

    /// <summary>A different faulted input that loses is still a completion of its own: it is reported.</summary>
    [Fact]
    public void TwoDifferentFaultedPromises_TheLoserIsStillReported()
    {
        var loserError = new InvalidOperationException("the loser's");
        var reported = Observe(Own.Instances(Error, loserError), () =>
        {
            var a = new Promise();
            var b = new Promise();
            a.SetException(Error);
            b.SetException(loserError);
            Assert.Throws<InvalidOperationException>(() => SpindleTask.WhenAny(a.Task, b.Task, a.Task).GetAwaiter().GetResult());
        });
        Assert.Equal(0, reported.Count(e => e == Error));
        Assert.Equal(1, reported.Count(e => e == loserError));
    }
}

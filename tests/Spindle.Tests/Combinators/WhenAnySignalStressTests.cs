using System;
using System.Threading;
using System.Threading.Tasks;
using static SpindleLib.Tests.Combinators.CombinatorTestSupport;
using static SpindleLib.Tests.UnobservedReports;

namespace SpindleLib.Tests.Combinators;

/// <summary>
/// A WhenAny over a signal wait and a promise, with a set, the WhenAny's cancellation and the other input racing: the
/// signal is reusable afterwards and nothing is reported. Sequential: it watches UnobservedException.
/// </summary>
[Collection(SequentialCollection.Name)]
public class WhenAnySignalStressTests
{
    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task WhenAnySignal_SetCancelAndOtherRace_SignalReusableNothingReported(bool dispatch)
    {
        var s = new Signal(false, dispatch);
        var other = new Promise();
        CancellationTokenSource cts = null!;
        SpindleTask<int> any = default;
        var reported = await ObserveAsync(Own.Any(Own.ReportedOnTestThreads(), Own.Cancellations()), async q => await TestUtil.WithTimeout(Race.Run(TestUtil.Stress(10_000),
            before: round =>
            {
                cts = new CancellationTokenSource();
                other.Reset();
                s.Reset();
                any = SpindleTask.WhenAny(s.WaitAsync(cts.Token), other.Task);
            },
            after: round =>
            {
                Exception? e = Record.Exception(() => any.GetAwaiter().GetResult());
                Assert.True(e is null or OperationCanceledException, $"round {round}: {e}");
                Assert.False(s.HasWaiter, $"round {round}: left waiting");
                using var c2 = new CancellationTokenSource();
                SpindleTask next = s.WaitAsync(c2.Token); // takes a kept set, or arms
                if (!next.IsCompleted)
                {
                    c2.Cancel();
                    Assert.Equal(SpindleTaskStatus.Canceled, next.Status);
                }
                Record.Exception(() => next.GetAwaiter().GetResult());
                cts.Dispose();
            },
            _ => other.SetResult(),
            _ => s.Set(),
            _ => cts.Cancel()), 120));
        Assert.Empty(reported);
    }
}

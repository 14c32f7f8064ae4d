using System;
using System.Collections.Concurrent;
using System.Threading;
using System.Threading.Tasks;
using static SpindleLib.Tests.UnobservedReports;

namespace SpindleLib.Tests.Combinators;

/// <summary>
/// A promise's use let go of by a WhenAny and awaited again at the same instant, from three threads: the WhenAny's
/// decision (its other input completes), a new await of the promise's task, and the promise's completion with a fault.
/// The new await is refused (the WhenAny still held it) or registered; a registered continuation runs exactly once; the
/// fault reaches the WhenAny, the new awaiter or the unobserved-exception event, never nobody, and is reported at most
/// once. Races the CAS from Abandoned to Registering (SourceCore.AwaitAfterLetGoBit) against the detach and the
/// completion.
/// </summary>
[Collection(SequentialCollection.Name)] // UnobservedException is process-wide
public class RacedEveryTurnStressTests
{
    private sealed class Fault : Exception
    {
        public Fault(int round) : base("RacedEveryTurnStressTests round " + round) => Round = round;

        public int Round { get; }
    }

    [Fact]
    public async Task LetGo_AwaitAgain_AndFault_AtOnce_TheFaultReachesSomebody_AndEachContinuationRunsOnce()
    {
        var stop = new Promise();
        var other = new Promise();
        SpindleTask<int> any = default;
        SpindleTask stopTask = default;
        bool registered = false;
        int ran = 0;
        Exception? readByAwaiter = null;
        int reportedBefore = 0;
        ConcurrentQueue<Exception> reported = await ObserveAsync(e => e is Fault, async q => await TestUtil.WithTimeout(Race.Run(TestUtil.Stress(5_000),
            before: round =>
            {
                stop.Reset();
                other.Reset();
                stopTask = stop.Task;
                registered = false;
                ran = 0;
                readByAwaiter = null;
                reportedBefore = q.Count;
                any = SpindleTask.WhenAny(other.Task, stopTask);
            },
            after: round =>
            {
                Exception? byAny = Record.Exception(() => any.GetAwaiter().GetResult());
                Assert.True(byAny is null || (byAny is Fault f && f.Round == round), $"round {round}: the WhenAny threw {byAny}");
                Assert.Equal(registered ? 1 : 0, Volatile.Read(ref ran));
                int reports = q.Count - reportedBefore;
                Assert.True(reports <= 1, $"round {round}: reported {reports} times");
                bool reached = byAny is not null || readByAwaiter is not null || reports == 1;
                Assert.True(reached, $"round {round}: the fault reached nobody (registered: {registered})");
            },
            round => other.SetResult(),
            round =>
            {
                try
                {
                    stopTask.GetAwaiter().UnsafeOnCompleted(() =>
                    {
                        readByAwaiter = Record.Exception(() => stopTask.GetAwaiter().GetResult());
                        Interlocked.Increment(ref ran);
                    });
                    registered = true;
                }
                catch (InvalidOperationException e) when (e.Message.Contains("already has an awaiter", StringComparison.Ordinal))
                {
                    // The WhenAny still held the use: refused, nothing registered.
                }
            },
            round => stop.SetException(new Fault(round))), 120));
        Assert.True(reported.Count <= TestUtil.Stress(5_000));
    }
}

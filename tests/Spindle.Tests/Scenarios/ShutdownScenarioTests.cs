using System;
using System.Collections.Concurrent;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Scenarios;

/// <summary>
/// A server's shutdown with a deadline, as users write it: the scope's WaitAsync raced against a delay (WhenAny) or given
/// a timeout (WithTimeout); when the deadline wins, the scope is disposed, and a child that fails after that is still
/// reported exactly once: to <see cref="Spindle.UnobservedException"/> (the WaitAsync that would have thrown it was let
/// go of) or by the disposal, never both and never neither.
/// </summary>
[Collection(SequentialCollection.Name)] // counts the process-wide UnobservedException reports of its own fault
public sealed class ShutdownScenarioTests
{
    private sealed class LateFault() : Exception("a child failed after the shutdown deadline");

    private static async SpindleTask FailsWhenReleased(Promise release, LateFault fault, CancellationToken _)
    {
        await release.Task; // ignores the scope's token, as a child stuck in a call that cannot be cancelled does
        throw fault;
    }

    [Theory]
    [InlineData("WhenAny")]
    [InlineData("WithTimeout")]
    public async Task ShutdownDeadlineWins_ThenAChildFails_ReportedExactlyOnce(string how)
    {
        // This run's own fault (or an aggregate of it): a Theory's other case cannot count here.
        var fault = new LateFault();
        var watch = UnobservedReports.Start(UnobservedReports.Own.Instances(fault));
        ConcurrentQueue<Exception> reports = watch.Reports;
        using (watch)
        {
            var clock = new ManualClock();
            using var wheel = new TimerWheel(clock);
            var release = new Promise();
            var scope = new TaskScope(CancellationToken.None);
            scope.Run(token => FailsWhenReleased(release, fault, token));

            SpindleTask deadline = how == "WhenAny"
                ? Deadline(SpindleTask.WhenAny(scope.WaitAsync(), wheel.Delay(TimeSpan.FromSeconds(5))))
                : scope.WaitAsync().WithTimeout(TimeSpan.FromSeconds(5), wheel, CancellationToken.None);
            clock.Advance(TimeSpan.FromSeconds(5));
            bool timedOut = false;
            try
            {
                await TestUtil.WithTimeout(deadline);
            }
            catch (TimeoutException)
            {
                timedOut = true;
            }
            Assert.True(how == "WhenAny" || timedOut);

            ValueTask disposal = scope.DisposeAsync(); // cancels the token, which the stuck child does not answer
            Assert.False(disposal.IsCompleted);
            release.SetResult();
            Exception? thrown = null;
            try
            {
                await TestUtil.WithTimeout(disposal.AsTask());
            }
            catch (LateFault e)
            {
                thrown = e;
            }
            int total = reports.Count + (thrown is null ? 0 : 1);
            Assert.True(total == 1, "the late fault was reported " + reports.Count + " time(s) to UnobservedException and " + (thrown is null ? "not thrown" : "thrown") + " by the disposal");
        }
    }

    private static async SpindleTask Deadline(SpindleTask<int> race)
    {
        int winner = await race;
        Assert.Equal(1, winner);
    }
}

using System;
using System.Collections.Concurrent;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// What Preserve()'s documentation says of a fault nobody reads: unreported, unless the preserved task is passed to
/// Forget(), which reports it once, whether it faults before or after. Sequential: it watches Spindle.UnobservedException.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class PreserveForgetTests
{
    private static async SpindleTask Fails(Promise gate, Exception fault)
    {
        await gate.Task;
        throw fault;
    }

    [Fact]
    public void PreservedTask_NeverAwaited_ReportsNothing_PassedToForget_ReportsItsFaultOnce()
    {
        Exception[] faults = [new InvalidTimeZoneException("preserved fault"), new InvalidTimeZoneException("preserved fault"), new InvalidTimeZoneException("preserved fault")];
        var watch = UnobservedReports.Start(UnobservedReports.Own.InstancesOrOnTestThreads(faults));
        ConcurrentQueue<Exception> reported = watch.Reports;
        using (watch)
        {
            var dropped = new Promise();
            _ = Fails(dropped, faults[0]).Preserve();
            dropped.SetResult();
            Assert.Empty(reported);

            var later = new Promise();
            SpindleTask pending = Fails(later, faults[1]).Preserve();
            pending.Forget();
            later.SetResult();
            Assert.IsType<InvalidTimeZoneException>(Assert.Single(reported));

            var before = new Promise();
            SpindleTask done = Fails(before, faults[2]).Preserve();
            before.SetResult();
            done.Forget();
            Assert.Equal(2, reported.Count);
        }
    }
}

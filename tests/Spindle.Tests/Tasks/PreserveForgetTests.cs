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
    private static async SpindleTask Fails(Promise gate)
    {
        await gate.Task;
        throw new InvalidTimeZoneException("preserved fault");
    }

    [Fact]
    public void PreservedTask_NeverAwaited_ReportsNothing_PassedToForget_ReportsItsFaultOnce()
    {
        var reported = new ConcurrentQueue<Exception>();
        Action<Exception> handler = reported.Enqueue;
        Spindle.UnobservedException += handler;
        try
        {
            var dropped = new Promise();
            _ = Fails(dropped).Preserve();
            dropped.SetResult();
            Assert.Empty(reported);

            var later = new Promise();
            SpindleTask pending = Fails(later).Preserve();
            pending.Forget();
            later.SetResult();
            Assert.IsType<InvalidTimeZoneException>(Assert.Single(reported));

            var before = new Promise();
            SpindleTask done = Fails(before).Preserve();
            before.SetResult();
            done.Forget();
            Assert.Equal(2, reported.Count);
        }
        finally
        {
            Spindle.UnobservedException -= handler;
        }
    }
}

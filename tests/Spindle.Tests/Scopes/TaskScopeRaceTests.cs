using System;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Scopes;

/// <summary>
/// A scope race that blocks every worker at a barrier, so it runs alone: beside other tests it held workers they
/// needed (and theirs held workers it needed) until a bound expired.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class TaskScopeRaceTests
{
    [Fact]
    public async Task Run_ChildrenFailAtTheSameMomentOnWorkers_EveryFailureKeptExactlyOnce()
    {
        await TestUtil.WithTimeout(Body(), 60);

        static async Task Body()
        {
            int rounds = TestUtil.Stress(1_000);
            for (int round = 0; round < rounds; round++)
            {
                // As many racing children as there are workers: each blocks its worker at the barrier until all are there.
                int racers = WorkerPool.Shared.WorkerCount;
                if (racers < 2)
                {
                    return; // a race needs two workers (SPINDLE_WORKERS=1 runs have none)
                }
                using var barrier = new Barrier(racers);
                var errors = new Exception[racers];
                for (int k = 0; k < racers; k++)
                {
                    errors[k] = new FormatException("child " + k + " of round " + round);
                }
                int finished = 0;
                var scope = new TaskScope();
                foreach (Exception error in errors)
                {
                    scope.Run(async SpindleTask (ct) =>
                    {
                        await Spindle.Yield();
                        try
                        {
                            barrier.SignalAndWait(TimeSpan.FromSeconds(10));
                            throw error;
                        }
                        finally
                        {
                            Interlocked.Increment(ref finished);
                        }
                    });
                }
                Exception thrown = await Assert.ThrowsAnyAsync<Exception>(async () => await scope.WaitAsync());
                Assert.Equal(racers, Volatile.Read(ref finished));
                // A failure that came after the scope was cancelled by another is still a failure (not an
                // OperationCanceledException), so every one is kept, each once.
                var aggregate = Assert.IsType<AggregateException>(thrown);
                Assert.Equal(racers, aggregate.InnerExceptions.Count);
                Assert.Equal(errors.OrderBy(e => e.Message), aggregate.InnerExceptions.OrderBy(e => e.Message));
                await scope.DisposeAsync();
            }
        }
    }
}

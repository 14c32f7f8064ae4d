using System;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Jobs;

/// <summary>
/// Long chains whose links complete inline (combines, empty parallel-fors): when the first job of the chain is the
/// last to finish, the whole chain completes at once, and must not do so by recursion deep enough to overflow the
/// stack of the thread that finishes it.
/// </summary>
/// <remarks>
/// Runs alone: a gated first job holds a worker while the rest of the chain needs another, so a test beside it that
/// holds the other worker stalled it until a bound expired.
/// </remarks>
[Collection(SequentialCollection.Name)]
public class JobDeepChainTests
{
    private const int Links = 100_000;

    [Fact]
    public async Task AccumulatingHandlesWithCombineDependencies_FirstJobFinishesLast_Completes()
    {
        // The common pattern "all = CombineDependencies(all, next)" builds a chain of combine nodes.
        if (WorkerPool.Shared.WorkerCount < 2)
        {
            return; // the gated first job holds the only worker, and the chain's other jobs need one (SPINDLE_WORKERS=1)
        }
        var gate = new Gate();
        var counter = new Counter();
        try
        {
            JobHandle all = new GateJob(gate).Schedule();
            for (int i = 0; i < Links; i++)
            {
                all = JobHandle.CombineDependencies(all, new CountJob(counter).Schedule());
            }
            JobHandle.ScheduleBatchedJobs();
            gate.WaitStarted();
            await JobTestUtil.Bounded(() => TestUtil.SpinUntil(() => counter.Read() == Links));
            gate.Release.Set();
            await JobTestUtil.Bounded(all.Complete);
        }
        finally
        {
            gate.Release.Set();
        }
    }

    [Fact]
    public async Task ChainOfEmptyParallelFors_FirstJobFinishesLast_Completes()
    {
        var gate = new Gate();
        try
        {
            JobHandle h = new GateJob(gate).Schedule();
            int[] none = [];
            for (int i = 0; i < Links; i++)
            {
                h = new IndexCountJob(none).Schedule(0, 1, h);
            }
            JobHandle.ScheduleBatchedJobs();
            gate.WaitStarted();
            gate.Release.Set();
            await JobTestUtil.Bounded(h.Complete);
        }
        finally
        {
            gate.Release.Set();
        }
    }

    [Fact]
    public async Task LongChainOfJobs_FirstOneFails_EveryLinkThrows()
    {
        // The fault travels down the chain without running anything: it must not do so by recursion either.
        var error = new InvalidTimeZoneException("root of a long chain");
        var ran = new Counter();
        JobHandle first = new ThrowJob(error).Schedule();
        JobHandle h = first;
        for (int i = 0; i < Links; i++)
        {
            h = new CountJob(ran).Schedule(h);
        }
        JobHandle last = h;
        Exception? thrown = null;
        await JobTestUtil.Bounded(() => thrown = JobTestUtil.CompleteCatching(last));
        Assert.Same(error, thrown);
        Assert.Same(error, JobTestUtil.CompleteCatching(first));
        Assert.Equal(0, ran.Read());
    }

    [Fact]
    public async Task LongChainOfJobs_Succeeds()
    {
        var ran = new Counter();
        JobHandle h = default;
        for (int i = 0; i < Links; i++)
        {
            h = new CountJob(ran).Schedule(h);
        }
        await JobTestUtil.Bounded(h.Complete);
        Assert.Equal(Links, ran.Read());
    }
}

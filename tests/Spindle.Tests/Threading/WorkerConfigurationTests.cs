using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Threading;

/// <summary>
/// Spindle.ConfigureWorkers and Spindle.WorkerCount: the pool's size is set before it starts, and fixed afterwards.
/// The process-wide pool has started long before these tests run, so the before-start behaviour is checked on private
/// slots of the same kind.
/// </summary>
public sealed class WorkerConfigurationTests
{
    [Theory]
    [InlineData(0)]
    [InlineData(-1)]
    [InlineData(WorkerPool.MaxWorkers + 1)]
    public void ConfigureWorkers_OutOfRange_ThrowsNamingTheRangeAndChangesNothing(int count)
    {
        int before = Spindle.WorkerCount;

        var ex = Assert.Throws<ArgumentOutOfRangeException>(() => Spindle.ConfigureWorkers(count));

        Assert.Equal("workerCount", ex.ParamName);
        Assert.Contains("between 1 and 1024", ex.Message);
        Assert.Equal(before, Spindle.WorkerCount);
    }

    [Fact]
    public void ConfigureWorkers_AfterTheWorkersStarted_WithTheirCount_IsAllowed()
    {
        int running = WorkerPool.Shared.WorkerCount;

        Spindle.ConfigureWorkers(running);

        Assert.Equal(running, Spindle.WorkerCount);
    }

    [Fact]
    public void ConfigureWorkers_AfterTheWorkersStarted_WithAnotherCount_ThrowsSayingWhenToCallIt()
    {
        int running = WorkerPool.Shared.WorkerCount;

        var ex = Assert.Throws<InvalidOperationException>(() => Spindle.ConfigureWorkers(running + 1));

        Assert.Contains($"{running} of them", ex.Message);
        Assert.Contains("before the first Spindle.Run", ex.Message);
        Assert.Equal(running, Spindle.WorkerCount);
        Assert.Equal(running, WorkerPool.Shared.WorkerCount);
    }

    [Fact]
    public void Slot_ConfiguredBeforeFirstUse_StartsThatManyWorkers()
    {
        var slot = new SharedPoolSlot(count => new WorkerPool(count, "config-test worker"));
        slot.Configure(3);
        Assert.Null(slot.IfCreated);
        Assert.Equal(3, slot.WorkerCount); // reading the count does not start the pool
        Assert.Null(slot.IfCreated);

        WorkerPool pool = slot.Get();
        try
        {
            Assert.Equal(3, pool.WorkerCount);
            Assert.Same(pool, slot.Get());
            slot.Configure(3); // the count in force: allowed
            Assert.Throws<InvalidOperationException>(() => slot.Configure(4));
            Assert.Equal(3, slot.WorkerCount);
        }
        finally
        {
            pool.Dispose();
        }
    }

    [Fact]
    public void Slot_NotConfigured_UsesTheDefaultCount()
    {
        var slot = new SharedPoolSlot(count => new WorkerPool(count, "config-test worker"));
        Assert.Equal(WorkerPool.DefaultWorkerCount(), slot.WorkerCount);
        WorkerPool pool = slot.Get();
        try
        {
            Assert.Equal(WorkerPool.DefaultWorkerCount(), pool.WorkerCount);
        }
        finally
        {
            pool.Dispose();
        }
    }

    [Fact]
    public async Task Slot_ConfigureRacingTheFirstUse_EitherWinsWholly()
    {
        int defaultCount = WorkerPool.DefaultWorkerCount();
        int wanted = defaultCount + 3;
        for (int round = 0; round < 20; round++)
        {
            var slot = new SharedPoolSlot(count => new WorkerPool(count, "config-race worker"));
            Exception? configureError = null;
            WorkerPool? pool = null;
            await Race.Run(1, _ => { }, _ => { },
                _ =>
                {
                    try
                    {
                        slot.Configure(wanted);
                    }
                    catch (InvalidOperationException ex)
                    {
                        configureError = ex;
                    }
                },
                _ => pool = slot.Get());
            try
            {
                // Configure first: the pool has the configured size. The pool first: Configure refused, naming the size in force.
                if (configureError is null)
                {
                    Assert.Equal(wanted, pool!.WorkerCount);
                }
                else
                {
                    Assert.Equal(defaultCount, pool!.WorkerCount);
                    Assert.Contains($"{defaultCount} of them", configureError.Message);
                }
            }
            finally
            {
                pool!.Dispose();
            }
        }
    }
}

using System;
using System.Threading;

namespace SpindleLib;

/// <summary>
/// Creates the process-wide worker pool on first use, at the size set by <see cref="Configure"/> if anything set one
/// before, else by the SPINDLE_WORKERS environment variable, else one worker per processor. Once the pool exists its
/// size is fixed: configuring it again to another size is an error, not a silent no-op.
/// </summary>
/// <remarks>Creation and configuration take one lock, so they cannot interleave; reading an existing pool takes none.</remarks>
internal sealed class SharedPoolSlot
{
    private readonly object _lock = new();
    private readonly Func<int, WorkerPool> _create;
    private WorkerPool? _pool;
    private int _configured;
    private bool _closed; // guarded by _lock: set once by Close, and then no pool is ever created again

    public SharedPoolSlot(Func<int, WorkerPool> create) => _create = create;

    /// <summary>The pool, if it has been created.</summary>
    public WorkerPool? IfCreated => Volatile.Read(ref _pool);

    /// <summary>The pool, created now if needed.</summary>
    public WorkerPool Get() => Volatile.Read(ref _pool) ?? Create();

    private WorkerPool Create()
    {
        lock (_lock)
        {
            if (_pool is { } existing)
            {
                return existing;
            }
            if (_closed)
            {
                CollectibleContext.ThrowUnloading();
            }
            CollectibleContext.EnsureSubscribed();
            WorkerPool pool = _create(CountForNewPool());
            Volatile.Write(ref _pool, pool);
            return pool;
        }
    }

    /// <summary>The number of workers the pool has, or will have when it starts.</summary>
    public int WorkerCount
    {
        get
        {
            lock (_lock)
            {
                return _pool?.WorkerCount ?? CountForNewPool();
            }
        }
    }

    /// <summary>
    /// Spindle's collectible context is unloading (<see cref="CollectibleContext.StopForUnload"/>): disposes the pool if
    /// there is one (each worker finishes its current item and exits; queued items are dropped) and creates none from now
    /// on. The disposed pool stays in the slot, so code still running on a worker that reads <see cref="WorkerPool.Shared"/>
    /// gets it, queues to it (dropped) and does not throw on a thread that would not catch it; new work is refused where it
    /// enters, at <see cref="Scheduler.Default"/> (see Scheduler.InitDefault). Takes the lock, so a creation under way
    /// either finished before (and its pool is disposed here) or sees the slot closed and throws.
    /// </summary>
    public void Close()
    {
        WorkerPool? pool;
        lock (_lock)
        {
            _closed = true;
            pool = _pool;
        }
        pool?.Dispose();
    }

    private int CountForNewPool() => _configured > 0 ? _configured : WorkerPool.DefaultWorkerCount();

    /// <summary>Sets the size of the pool before it starts; asking for the size it already has is allowed.</summary>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="workerCount"/> is below 1 or above <see cref="WorkerPool.MaxWorkers"/>.</exception>
    /// <exception cref="InvalidOperationException">The pool has already started with another number of workers.</exception>
    public void Configure(int workerCount)
    {
        if (workerCount < 1 || workerCount > WorkerPool.MaxWorkers)
        {
            ThrowHelper.ThrowArgumentOutOfRange(nameof(workerCount),
                $"The worker count must be between 1 and {WorkerPool.MaxWorkers}; {workerCount} was given. Environment.ProcessorCount ({Environment.ProcessorCount} here) is the default.");
        }
        lock (_lock)
        {
            if (_pool is { } started)
            {
                if (started.WorkerCount != workerCount)
                {
                    ThrowHelper.ThrowInvalidOperation(
                        $"Spindle's workers have already started, {started.WorkerCount} of them, so their number cannot become {workerCount}. " +
                        "Call Spindle.ConfigureWorkers at start-up, before the first Spindle.Run, Delay, job or await that needs a worker.");
                }
                return;
            }
            _configured = workerCount;
        }
    }
}

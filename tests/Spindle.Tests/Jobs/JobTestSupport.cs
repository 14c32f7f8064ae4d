using System;
using System.Collections.Concurrent;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Jobs;

/// <summary>A shared mutable counter that struct jobs can point to.</summary>
internal sealed class Counter
{
    public int Value;

    public int Read() => Volatile.Read(ref Value);

    public void Increment() => Interlocked.Increment(ref Value);
}

/// <summary>A one-way flag that jobs can set and spin on (bounded), without an event to dispose.</summary>
internal sealed class Flag
{
    private int _value;

    public bool IsSet => Volatile.Read(ref _value) != 0;

    public void Set() => Volatile.Write(ref _value, 1);

    public bool Wait(int seconds = TestUtil.DefaultTimeoutSeconds)
    {
        Flag self = this;
        return SpinWait.SpinUntil(() => self.IsSet, TimeSpan.FromSeconds(seconds));
    }
}

/// <summary>A gate a job can wait at: the job signals <see cref="Started"/>, then waits for <see cref="Release"/>.</summary>
/// <remarks>
/// <para>Dispose releases the job; the events are left to the GC, so a job still inside Wait never sees them disposed.</para>
/// <para>A gated job blocks whichever thread runs it, without helping, and that may be a worker: an idle one, or one
/// helping inside Complete() or GetResult(). A test that keeps the gate shut until something that needs a worker has
/// happened (a Spindle.Run item has started, other jobs have run) can deadlock, when the job holds the last free worker,
/// until the job's 30 s bound fails it with a TimeoutException, which its waiters then rethrow "early". Such a test
/// starts what needs a worker before anything can make the gated job visible, and runs alone (SequentialCollection),
/// since another test may hold a worker or flush the (global) batch at any moment.</para>
/// </remarks>
internal sealed class Gate : IDisposable
{
    public readonly ManualResetEventSlim Started = new(false);
    public readonly ManualResetEventSlim Release = new(false);

    public void WaitStarted(int seconds = TestUtil.DefaultTimeoutSeconds)
    {
        if (!Started.Wait(TimeSpan.FromSeconds(seconds)))
        {
            throw new TimeoutException("The gated job did not start within " + seconds + " s.");
        }
    }

    public void Dispose() => Release.Set();
}

/// <summary>Counts its runs.</summary>
internal struct CountJob : IJob
{
    public Counter Counter;

    public CountJob(Counter counter) => Counter = counter;

    public readonly void Execute() => Counter.Increment();
}

/// <summary>Counts its runs, then throws <see cref="Error"/>.</summary>
internal struct ThrowJob : IJob
{
    public Exception Error;
    public Counter? Ran;

    public ThrowJob(Exception error, Counter? ran = null)
    {
        Error = error;
        Ran = ran;
    }

    public readonly void Execute()
    {
        Ran?.Increment();
        throw Error;
    }
}

/// <summary>Signals its gate's Started, waits (bounded) for its Release, then counts its run.</summary>
internal struct GateJob : IJob
{
    public Gate Gate;
    public Counter? Ran;

    public GateJob(Gate gate, Counter? ran = null)
    {
        Gate = gate;
        Ran = ran;
    }

    public readonly void Execute()
    {
        Gate.Started.Set();
        if (!Gate.Release.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)))
        {
            throw new TimeoutException(
                $"GateJob was never released: its gate stayed shut for {TestUtil.DefaultTimeoutSeconds} s, on {Thread.CurrentThread.Name ?? "an unnamed thread"}. " +
                "If the test was waiting for something that needs a worker, this job may have held the last free one (see Gate).");
        }
        Ran?.Increment();
    }
}

/// <summary>Marks itself started (if given a flag), spins (bounded) until released, then marks itself done.</summary>
internal struct HeldJob : IJob
{
#pragma warning disable CS0649 // set only by Debug-only tests (ParallelForRunnerTests' hooks); a Release build of the tests compiles too
    public Flag? Started;
#pragma warning restore CS0649
    public Flag Release;
    public Flag Done;

    public readonly void Execute()
    {
        Started?.Set();
        Release.Wait();
        Done.Set();
    }
}

/// <summary>
/// Increments <c>Hits[index]</c> for every index; given a <c>Dependency</c>, counts in <c>Early</c> every index run
/// before it was set.
/// </summary>
internal struct IndexCountJob : IJobParallelFor
{
    public int[] Hits;
    public Flag? Dependency;
    public Counter? Early;

    public IndexCountJob(int[] hits)
    {
        Hits = hits;
        Dependency = null;
        Early = null;
    }

    public readonly void Execute(int index)
    {
        if (Dependency is { IsSet: false })
        {
            Early!.Increment();
        }
        Interlocked.Increment(ref Hits[index]);
    }
}

/// <summary>
/// Records every batch: <c>BatchHits[start / BatchSize]</c> counts the batch's runs, <c>BatchCounts</c> its count,
/// <c>Misaligned</c> batches whose start is not a multiple of the batch size, and <c>Hits</c> every index covered.
/// </summary>
internal struct BatchRecordJob : IJobParallelForBatch
{
    public int[] Hits;
    public int[] BatchHits;
    public int[] BatchCounts;
    public int BatchSize;
    public Counter Misaligned;

    public readonly void Execute(int startIndex, int count)
    {
        if (startIndex % BatchSize != 0 || count < 1)
        {
            Misaligned.Increment();
            return;
        }
        int batch = startIndex / BatchSize;
        Interlocked.Increment(ref BatchHits[batch]);
        BatchCounts[batch] = count;
        for (int i = startIndex; i < startIndex + count; i++)
        {
            Interlocked.Increment(ref Hits[i]);
        }
    }
}

/// <summary>A handle that a job reads once the test has set it, after scheduling the job (and what depends on it).</summary>
/// <remarks>
/// The read waits until the handle is set: the batch is global, so another test's Complete() or flush, running in
/// parallel, may start the job before the test has stored the handle, which then read as default (a completed handle)
/// and let the job succeed (seen once in CI: "Assert.IsType() Failure: Value is null").
/// </remarks>
internal class HandleSetLater
{
    private JobHandle _handle;
    private volatile bool _set;

    public JobHandle Handle
    {
        get
        {
            Assert.True(SpinWait.SpinUntil(() => _set, TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "the test never set the handle");
            return _handle;
        }
        set
        {
            _handle = value;
            _set = true;
        }
    }
}

/// <summary>
/// Says it started (<c>Flags[0]</c>), then waits until the waiter, once it says it is about to complete this job
/// (<c>Flags[1]</c>), has blocked in Complete().
/// </summary>
internal struct BlockerJob : IJob
{
    public Thread Waiter;
    public int[] Flags;

    public readonly void Execute()
    {
        int[] flags = Flags;
        Thread waiter = Waiter;
        Volatile.Write(ref flags[0], 1);
        TestUtil.SpinUntil(() => Volatile.Read(ref flags[1]) == 1 && (waiter.ThreadState & ThreadState.WaitSleepJoin) != 0);
    }
}

internal static class JobTestUtil
{
    /// <summary>Runs <paramref name="body"/> on a pool thread, failing with <see cref="TimeoutException"/> if it hangs.</summary>
    public static Task Bounded(Action body, int seconds = TestUtil.DefaultTimeoutSeconds)
        => TestUtil.WithTimeout(Task.Run(body), seconds);

    /// <summary>
    /// Makes the calling thread really block in Complete() (park, not only help and spin), and returns the bytes it
    /// allocated in that call. The job is running on a worker before the call, so the caller cannot run it while it
    /// waits, and it holds its worker until the caller is parked. Run alone (the caller helps with any queued job).
    /// </summary>
    public static long BlockInComplete()
    {
        var flags = new int[2];
        JobHandle blocker = new BlockerJob { Waiter = Thread.CurrentThread, Flags = flags }.Schedule();
        JobHandle.ScheduleBatchedJobs();
        TestUtil.SpinUntil(() => Volatile.Read(ref flags[0]) == 1);
        Volatile.Write(ref flags[1], 1);
        long before = GC.GetAllocatedBytesForCurrentThread();
        blocker.Complete();
        return GC.GetAllocatedBytesForCurrentThread() - before;
    }

    /// <summary>Completes the handle and returns the exception it rethrew (or null).</summary>
    public static Exception? CompleteCatching(JobHandle handle)
    {
        try
        {
            handle.Complete();
            return null;
        }
        catch (Exception ex)
        {
            return ex;
        }
    }

    /// <summary>Waits (without helping: IsCompleted only flushes) until the workers have finished the job.</summary>
    public static void WaitByPolling(JobHandle handle, int seconds = TestUtil.DefaultTimeoutSeconds)
        => TestUtil.SpinUntil(() => handle.IsCompleted, seconds);

    /// <summary>
    /// Collects until <paramref name="error"/> is reported (a failed job's holder reports from its finalizer) or the tries
    /// run out; true if it was.
    /// </summary>
    public static bool CollectUntilReported(ConcurrentQueue<Exception> reported, Exception error, int tries)
    {
        for (int i = 0; i < tries; i++)
        {
            // Run a few unrelated jobs so no queue slot or local of a worker still points at the failed node.
            var counter = new Counter();
            var handles = new JobHandle[8];
            for (int k = 0; k < handles.Length; k++)
            {
                handles[k] = new CountJob(counter).Schedule();
            }
            JobHandle.CombineDependencies(handles).Complete();
            GC.Collect();
            GC.WaitForPendingFinalizers();
            GC.Collect();
            if (reported.Any(e => ReferenceEquals(e, error)))
            {
                return true;
            }
            Thread.Sleep(10);
        }
        return false;
    }

    /// <summary>Best effort: waits until every worker of the shared pool is parked (false if they did not within the bound).</summary>
    public static bool WaitForParkedWorkers(int milliseconds)
    {
        WorkerPool pool = WorkerPool.Shared;
        return SpinWait.SpinUntil(() => pool.IdleWorkers >= pool.WorkerCount, milliseconds);
    }
}

/// <summary>
/// The JobWait pool's two Debug counts (waits out of their pool; returns of a wait already in it), taken at a test's start
/// so that its end can check every wait it rented went back to its pool, and none twice. Other tests' waits cannot move
/// them meanwhile: every class that takes one runs alone (SequentialCollection). In a Release build the counts do not
/// exist: a baseline is zero and its checks pass without looking (the test's other assertions still run).
/// </summary>
internal readonly struct JobWaitBaseline
{
    private readonly int _inUse;
    private readonly int _doubleReturns;

    private JobWaitBaseline(int inUse, int doubleReturns)
    {
        _inUse = inUse;
        _doubleReturns = doubleReturns;
    }

    /// <summary>Takes both counts now.</summary>
    public static JobWaitBaseline Take()
#if DEBUG
        => new(Volatile.Read(ref JobWait.InUseForTests), Volatile.Read(ref JobWait.DoubleReturnsForTests));
#else
        => default;
#endif

    /// <summary>How many more JobWaits are out of their pool than at the baseline (0 in a Release build).</summary>
    public int Held
#if DEBUG
        => Volatile.Read(ref JobWait.InUseForTests) - _inUse;
#else
        => 0;
#endif

    /// <summary>
    /// Waits until every JobWait rented since the baseline is back in its pool: a wait goes back when the job's finish
    /// runs its waiter, on a worker, after the job's handle has completed. Fails with <paramref name="failure"/>.
    /// </summary>
    public void WaitUntilAllReturned(string failure)
    {
        JobWaitBaseline self = this;
        TestUtil.SpinUntil(() => self.Held == 0, () => failure);
    }

    /// <summary>Asserts that no JobWait was returned to its pool twice since the baseline.</summary>
    public void AssertNoDoubleReturn()
    {
#if DEBUG
        Assert.Equal(_doubleReturns, Volatile.Read(ref JobWait.DoubleReturnsForTests));
#endif
    }

    /// <summary>Asserts, at the end, that every JobWait rented since the baseline is back in its pool, and none went back twice.</summary>
    public void AssertAllReturnedOnce()
    {
        AssertNoDoubleReturn();
        Assert.Equal(0, Held);
    }
}

/// <summary>
/// A theory that needs at least two Spindle workers: one held by a gated job (or a spinning continuation that must not
/// help, to prove what it checks) while another runs the rest. Skipped, with the reason, where there is one worker (one
/// processor, or SPINDLE_WORKERS=1).
/// </summary>
internal sealed class TwoWorkersTheoryAttribute : TheoryAttribute
{
    public TwoWorkersTheoryAttribute()
    {
        if (Spindle.WorkerCount < 2)
        {
            Skip = $"needs two Spindle workers (one is held by a gated job while another runs the rest); this process has {Spindle.WorkerCount}";
        }
    }
}

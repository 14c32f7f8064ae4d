using System;

namespace SpindleLib;

/// <summary>Schedules struct jobs. Every method is generic over the job type: jobs are never boxed.</summary>
/// <remarks>All methods are thread-safe. Scheduling allocates nothing in steady state: job slots and dependency edges are pooled.
/// Once a collectible <c>AssemblyLoadContext</c> that loaded Spindle is unloading, every Schedule throws
/// <see cref="System.ObjectDisposedException"/>, as <c>Spindle.Run</c> does: the workers have stopped (README, "Spindle in a
/// collectible AssemblyLoadContext").</remarks>
public static class JobExtensions
{
    /// <summary>Schedules <paramref name="job"/> to run after <paramref name="dependsOn"/> (default: no dependency).</summary>
    /// <returns>
    /// The job's handle. A job that is ready when scheduled becomes visible to workers at the next flush (see
    /// <see cref="JobHandle.ScheduleBatchedJobs"/>); one that waits for a dependency is queued when that dependency finishes.
    /// </returns>
    public static JobHandle Schedule<T>(this T job, JobHandle dependsOn = default) where T : struct, IJob
        => JobBatch.Submit(JobNode<T>.Rent(in job), dependsOn);

    /// <summary>
    /// Schedules a parallel-for job over the indices [0, <paramref name="arrayLength"/>), handed out in batches of
    /// <paramref name="innerloopBatchCount"/> indices, after <paramref name="dependsOn"/>.
    /// </summary>
    /// <remarks>
    /// <para><b>Batch size.</b> Each batch is claimed with one atomic step on a cursor the threads share, so a batch costs
    /// about as much as a cache line passed between cores: for indices that each do little, give batches of a few hundred
    /// to a few thousand. On a 2-core VM 10,000,000 indices took 1.55 s in batches of 1, 190–310 ms in batches of 16 and
    /// 9–11 ms in batches of 1,024 (a user's review, <c>docs/decisions.md</c> section 58).</para>
    /// <para><b>Faults.</b> The job fails with the first exception an index throws: the batches not started yet are
    /// skipped, and those already running finish (another exception among them goes to
    /// <see cref="Spindle.UnobservedException"/>). So a failed parallel-for has run some of its indices, not all: what it
    /// writes is partly written. See <see cref="JobHandle"/>'s remarks for how the failure reaches its dependents.</para>
    /// </remarks>
    /// <exception cref="System.ArgumentOutOfRangeException"><paramref name="arrayLength"/> is negative, or <paramref name="innerloopBatchCount"/> is below 1.</exception>
    public static JobHandle Schedule<T>(this T job, int arrayLength, int innerloopBatchCount, JobHandle dependsOn = default) where T : struct, IJobParallelFor
    {
        ValidateRange(arrayLength, innerloopBatchCount, nameof(innerloopBatchCount));
        return JobBatch.Submit(ParallelForNode<T>.Rent(in job, arrayLength, innerloopBatchCount), dependsOn);
    }

    /// <summary>
    /// Schedules a batch job over [0, <paramref name="arrayLength"/>): <see cref="IJobParallelForBatch.Execute(int, int)"/>
    /// runs once per batch of <paramref name="batchSize"/> indices (the last batch may be shorter), after <paramref name="dependsOn"/>.
    /// </summary>
    /// <exception cref="System.ArgumentOutOfRangeException"><paramref name="arrayLength"/> is negative, or <paramref name="batchSize"/> is below 1.</exception>
    public static JobHandle ScheduleBatch<T>(this T job, int arrayLength, int batchSize, JobHandle dependsOn = default) where T : struct, IJobParallelForBatch
    {
        ValidateRange(arrayLength, batchSize, nameof(batchSize));
        return JobBatch.Submit(ParallelForBatchNode<T>.Rent(in job, arrayLength, batchSize), dependsOn);
    }

    /// <summary>
    /// Runs <paramref name="job"/> on the calling thread, now, as Unity's <c>IJobExtensions.Run</c>: a direct call to
    /// <see cref="IJob.Execute"/> on a copy of the job (as scheduling copies it), with no handle, no pooled slot and no
    /// allocation. Its exception, if it throws, propagates to the caller. It waits for nothing: complete what it reads first.
    /// </summary>
    public static void Run<T>(this T job) where T : struct, IJob => job.Execute();

    /// <summary>
    /// Runs <paramref name="job"/> for every index of [0, <paramref name="arrayLength"/>) in order, on the calling thread,
    /// now, on one copy of the job (as one batch of that length would), as Unity's <c>IJobParallelForExtensions.Run</c>.
    /// Its exception, if it throws, propagates to the caller, and the indices after the one that threw do not run.
    /// </summary>
    /// <exception cref="System.ArgumentOutOfRangeException"><paramref name="arrayLength"/> is negative.</exception>
    public static void Run<T>(this T job, int arrayLength) where T : struct, IJobParallelFor
    {
        ValidateLength(arrayLength);
        for (int i = 0; i < arrayLength; i++)
        {
            job.Execute(i);
        }
    }

    /// <summary>
    /// Runs <paramref name="job"/> over [0, <paramref name="arrayLength"/>) on the calling thread, now, in batches of
    /// <paramref name="batchSize"/> indices in order (the last may be shorter; none for a length of 0), each on its own copy
    /// of the job as <see cref="ScheduleBatch"/> runs them. The default batch size makes the whole range one call to
    /// <see cref="IJobParallelForBatch.Execute(int, int)"/>, as Unity's <c>IJobParallelForBatchExtensions.RunBatch</c>; pass
    /// the size you schedule with to see the same batches. Its exception, if it throws, propagates to the caller, and the
    /// batches after the one that threw do not run. No handle, no pooled slot, no allocation.
    /// </summary>
    /// <exception cref="System.ArgumentOutOfRangeException"><paramref name="arrayLength"/> is negative, or <paramref name="batchSize"/> is below 1.</exception>
    public static void RunBatch<T>(this T job, int arrayLength, int batchSize = int.MaxValue) where T : struct, IJobParallelForBatch
    {
        ValidateRange(arrayLength, batchSize, nameof(batchSize));
        for (int start = 0; start < arrayLength;)
        {
            int count = Math.Min(batchSize, arrayLength - start); // start + count never passes arrayLength, so never overflows
            T batch = job;
            batch.Execute(start, count);
            start += count;
        }
    }

    /// <summary>Throws unless <paramref name="length"/> (a job's <c>arrayLength</c>) is zero or positive.</summary>
    internal static void ValidateLength(int length)
    {
        if (length < 0)
        {
            ThrowHelper.ThrowArgumentOutOfRange("arrayLength", $"The length must be zero or positive, and was {length}.");
        }
    }

    private static void ValidateRange(int length, int batch, string batchName)
    {
        ValidateLength(length);
        if (batch < 1)
        {
            ThrowHelper.ThrowArgumentOutOfRange(batchName, $"The batch size must be at least 1, and was {batch}. It is how many indices one worker takes at a time; a few hundred to a few thousand suits cheap per-index work.");
        }
    }
}

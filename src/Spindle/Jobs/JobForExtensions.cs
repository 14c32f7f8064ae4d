using System.Diagnostics;

namespace SpindleLib;

/// <summary>
/// Schedules and runs <see cref="IJobFor"/> jobs, as Unity's <c>IJobForExtensions</c>. Generic over the job type: jobs
/// are never boxed. (A class of its own because <see cref="Run{T}(T, int)"/> has the parameters of
/// <see cref="JobExtensions.Run{T}(T, int)"/>, which C# does not allow in one class.)
/// </summary>
/// <remarks>All methods are thread-safe. Scheduling allocates nothing in steady state, as for the other job kinds.</remarks>
public static class JobForExtensions
{
    /// <summary>
    /// Schedules <paramref name="job"/> to run every index of [0, <paramref name="arrayLength"/>) in order, on one thread,
    /// after <paramref name="dependsOn"/> (default: no dependency). It is a plain job: a worker runs it, or a thread that
    /// waits for it in <see cref="JobHandle.Complete"/>.
    /// </summary>
    /// <returns>The job's handle. The job becomes visible to workers as an <see cref="IJob"/> does (see <see cref="JobHandle.ScheduleBatchedJobs"/>).</returns>
    /// <exception cref="System.ArgumentOutOfRangeException"><paramref name="arrayLength"/> is negative.</exception>
    public static JobHandle Schedule<T>(this T job, int arrayLength, JobHandle dependsOn = default) where T : struct, IJobFor
    {
        JobExtensions.ValidateLength(arrayLength);
        return new InOrder<T>(job, arrayLength).Schedule(dependsOn);
    }

    /// <summary>
    /// Schedules <paramref name="job"/> over [0, <paramref name="arrayLength"/>) in batches of
    /// <paramref name="innerloopBatchCount"/> indices that idle workers (and a thread waiting in
    /// <see cref="JobHandle.Complete"/>) claim, after <paramref name="dependsOn"/>: exactly as
    /// <see cref="JobExtensions.Schedule{T}(T, int, int, JobHandle)"/> schedules an <see cref="IJobParallelFor"/>.
    /// </summary>
    /// <returns>The job's handle.</returns>
    /// <exception cref="System.ArgumentOutOfRangeException"><paramref name="arrayLength"/> is negative, or <paramref name="innerloopBatchCount"/> is below 1.</exception>
    public static JobHandle ScheduleParallel<T>(this T job, int arrayLength, int innerloopBatchCount, JobHandle dependsOn = default) where T : struct, IJobFor
        => new AsParallelFor<T>(job).Schedule(arrayLength, innerloopBatchCount, dependsOn);

    /// <summary>
    /// Runs <paramref name="job"/> for every index of [0, <paramref name="arrayLength"/>) in order, on the calling thread,
    /// now, on one copy of the job struct. Its exception, if it throws, propagates to the caller, and the indices after
    /// the one that threw do not run.
    /// </summary>
    /// <exception cref="System.ArgumentOutOfRangeException"><paramref name="arrayLength"/> is negative.</exception>
    public static void Run<T>(this T job, int arrayLength) where T : struct, IJobFor
    {
        JobExtensions.ValidateLength(arrayLength);
        new InOrder<T>(job, arrayLength).Execute();
    }

    /// <summary>An <see cref="IJobFor"/> as one <see cref="IJob"/>: every index in order, on the one copy the job node holds.</summary>
    [StackTraceHidden]
    private struct InOrder<T> : IJob where T : struct, IJobFor
    {
        private T _job;
        private readonly int _length;

        public InOrder(T job, int length)
        {
            _job = job;
            _length = length;
        }

        public void Execute()
        {
            for (int i = 0; i < _length; i++)
            {
                _job.Execute(i); // on the field, not a copy: what one index writes, the next sees
            }
        }
    }

    /// <summary>An <see cref="IJobFor"/> as an <see cref="IJobParallelFor"/>: it shares that kind's node and batches.</summary>
    [StackTraceHidden]
    private struct AsParallelFor<T> : IJobParallelFor where T : struct, IJobFor
    {
        private T _job;

        public AsParallelFor(T job) => _job = job;

        public void Execute(int index) => _job.Execute(index);
    }
}

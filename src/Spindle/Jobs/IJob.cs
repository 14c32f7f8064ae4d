namespace SpindleLib;

/// <summary>
/// A unit of work scheduled with <see cref="JobExtensions.Schedule{T}(T, JobHandle)"/>. Implement it on a struct: the
/// scheduler is generic over the job type, so the job is copied into a pooled slot, never boxed and never wrapped in a
/// delegate, and the JIT specialises the call to <see cref="Execute"/>.
/// </summary>
public interface IJob
{
    /// <summary>Runs the job, on a Spindle worker or on a thread that waits for it in <see cref="JobHandle.Complete"/>.</summary>
    void Execute();
}

/// <summary>
/// A data-parallel job: <see cref="Execute(int)"/> runs once for every index in [0, length). Scheduled with
/// <see cref="JobExtensions.Schedule{T}(T, int, int, JobHandle)"/>; indices are handed out in batches of the inner-loop
/// batch count, and a batch is the unit idle workers claim.
/// </summary>
/// <remarks>Each batch runs on a copy of the job struct, so fields written in <see cref="Execute(int)"/> are per batch.</remarks>
public interface IJobParallelFor
{
    /// <summary>Runs the job for one index.</summary>
    void Execute(int index);
}

/// <summary>
/// A data-parallel job that receives whole batches: <see cref="Execute(int, int)"/> runs once per batch of indices.
/// Scheduled with <see cref="JobExtensions.ScheduleBatch{T}(T, int, int, JobHandle)"/>.
/// </summary>
public interface IJobParallelForBatch
{
    /// <summary>Runs the job for <paramref name="count"/> indices starting at <paramref name="startIndex"/>.</summary>
    void Execute(int startIndex, int count);
}

/// <summary>
/// A job over the indices [0, length), as Unity's <c>IJobFor</c>: <see cref="Execute(int)"/> runs once for every index.
/// <see cref="JobForExtensions.Schedule{T}(T, int, JobHandle)"/> runs every index in order on one thread,
/// <see cref="JobForExtensions.ScheduleParallel{T}(T, int, int, JobHandle)"/> spreads batches over the workers as an
/// <see cref="IJobParallelFor"/> does, and <see cref="JobForExtensions.Run{T}(T, int)"/> runs every index in order on the
/// calling thread, at once.
/// </summary>
/// <remarks>
/// Run in order (Schedule, Run), every index sees one copy of the job struct, so a field written for one index is there
/// for the next; run in parallel, each batch runs on its own copy, as for <see cref="IJobParallelFor"/>.
/// </remarks>
public interface IJobFor
{
    /// <summary>Runs the job for one index.</summary>
    void Execute(int index);
}

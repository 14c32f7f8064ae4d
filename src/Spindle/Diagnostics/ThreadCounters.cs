using System.Collections.Generic;
using System.Threading;

namespace SpindleLib;

/// <summary>
/// Per-thread counts that Spindle's metrics sum on demand, so that counting an event is a plain increment on a field
/// only the counting thread writes: no interlocked operation and no shared cache line on a hot path. The job system
/// also keeps its finish-nesting depth here, so that a finishing job reads one thread-static, not two.
/// </summary>
/// <remarks>
/// <para>Invariant: each instance is written only by its <see cref="Owner"/> thread; readers on other threads see a
/// value that may lag but never tears (a 64-bit field read is atomic on 64-bit runtimes; on a 32-bit one a reader can
/// see a torn value, which only a metric would show, never the library's behaviour).</para>
/// <para>Threads register once, under a lock. A dead thread's final counts fold into <see cref="s_retiredJobs"/> the
/// next time the list is read or a new thread registers, so the list stays as long as the number of live threads that
/// ever counted, and the sum never goes down.</para>
/// </remarks>
internal sealed class ThreadCounters
{
    [System.ThreadStatic]
    private static ThreadCounters? t_current;

    private static readonly object s_lock = new();
    private static readonly List<ThreadCounters> s_threads = new();
    private static long s_retiredJobs;

    /// <summary>How deeply job finishes are nested on this thread (see <c>JobNode.Finish</c>).</summary>
    public int FinishDepth;

    /// <summary>Jobs this thread has finished (run, failed or failed by a dependency).</summary>
    public long JobsCompleted;

    // The jobs whose work this thread is running now, outermost first: a job that waits in Complete() runs others
    // inside its own Execute. A null entry marks a blocking wait that started, inside the job below it, to help: what
    // runs above it is not that job's own code but what the waiting thread picked up (EnterHelpingWait). Only the owner
    // reads it (JobNode.ThrowIfWaitsForARunningJob). Entries past RunningCount are null, so a finished job's node is
    // not kept alive from here. A slot is a struct: storing a job node into a JobNode[] would check array covariance on
    // every store (JobNode is not sealed), as FramePhase's slots note.
    private RunningSlot[] _running = new RunningSlot[4];

    private struct RunningSlot
    {
        public JobNode? Node;
    }

    /// <summary>How many entries of the running-jobs stack are in use.</summary>
    public int RunningCount;

    /// <summary>The deadlock walk this thread reuses (created on its first walk, empty between walks; see <see cref="JobNode.DeadlockWalk"/>).</summary>
    public JobNode.DeadlockWalk? DeadlockWalk;

    /// <summary>Records that <paramref name="node"/>'s work starts running on this thread (null: a helping wait, see <see cref="EnterHelpingWait"/>).</summary>
    public void PushRunning(JobNode? node)
    {
        if (RunningCount == _running.Length)
        {
            System.Array.Resize(ref _running, RunningCount * 2);
        }
        _running[RunningCount++].Node = node;
    }

    /// <summary>Records that the innermost running job's work (or helping wait) has returned.</summary>
    public void PopRunning() => _running[--RunningCount].Node = null;

    /// <summary>The <paramref name="index"/>th entry of the running-jobs stack (0: the outermost); null for a helping wait.</summary>
    public JobNode? RunningAt(int index) => _running[index].Node;

    /// <summary>
    /// Called by a blocking wait before it starts helping (running queued work on this thread): if a job's work is running
    /// here, marks the stack, so that a wait refused in what the thread runs from here on is told apart from one in the
    /// job's own code (<see cref="JobNode.ThrowIfWaitsForARunningJob(JobNode, int)"/>). Returns the counters to pop the
    /// mark from when the wait ends (<c>using</c>), which pops nothing if nothing was marked (no job runs here: the common
    /// case, one thread-static read).
    /// </summary>
    public static HelpingMark EnterHelpingWait()
    {
        if (t_current is not { RunningCount: > 0 } counters)
        {
            return default;
        }
        counters.PushRunning(null);
        return new HelpingMark(counters);
    }

    /// <summary>A helping wait's mark on the running-jobs stack (see <see cref="EnterHelpingWait"/>), popped on dispose.</summary>
    public readonly struct HelpingMark : System.IDisposable
    {
        private readonly ThreadCounters? _counters;

        public HelpingMark(ThreadCounters counters) => _counters = counters;

        public void Dispose() => _counters?.PopRunning();
    }

    public readonly Thread Owner;

    private ThreadCounters(Thread owner) => Owner = owner;

    /// <summary>The calling thread's counters, created and registered on its first use.</summary>
    public static ThreadCounters Current => t_current ?? Register();

    /// <summary>The calling thread's counters if it has any yet (a thread that never ran a job has none).</summary>
    public static ThreadCounters? CurrentIfRegistered => t_current;

    private static ThreadCounters Register()
    {
        var counters = new ThreadCounters(Thread.CurrentThread);
        lock (s_lock)
        {
            PruneDeadThreads();
            s_threads.Add(counters);
        }
        t_current = counters;
        return counters;
    }

    /// <summary>Jobs finished on every thread since the process started.</summary>
    public static long TotalJobsCompleted
    {
        get
        {
            lock (s_lock)
            {
                PruneDeadThreads();
                long total = s_retiredJobs;
                foreach (ThreadCounters c in s_threads)
                {
                    total += Volatile.Read(ref c.JobsCompleted);
                }
                return total;
            }
        }
    }

    private static void PruneDeadThreads()
    {
        // A thread that has ended writes nothing more: its count is final and moves to the retired total.
        for (int i = s_threads.Count - 1; i >= 0; i--)
        {
            ThreadCounters c = s_threads[i];
            if (!c.Owner.IsAlive)
            {
                s_retiredJobs += Volatile.Read(ref c.JobsCompleted);
                s_threads.RemoveAt(i);
            }
        }
    }
}

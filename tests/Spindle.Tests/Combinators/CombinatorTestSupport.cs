using System;
using System.Collections.Concurrent;
using System.Threading;

namespace SpindleLib.Tests.Combinators;

/// <summary>Helpers shared by the WhenAll/WhenAny tests.</summary>
internal static class CombinatorTestSupport
{
    /// <summary>Promises, all pending.</summary>
    public static Promise[] Promises(int n)
    {
        var promises = new Promise[n];
        for (int i = 0; i < n; i++)
        {
            promises[i] = new Promise();
        }
        return promises;
    }

    /// <summary>The current task of each promise.</summary>
    public static SpindleTask[] TasksOf(Promise[] promises)
    {
        var tasks = new SpindleTask[promises.Length];
        for (int i = 0; i < promises.Length; i++)
        {
            tasks[i] = promises[i].Task;
        }
        return tasks;
    }

    /// <summary>
    /// An async method suspended on <paramref name="promise"/>: a pooled, await-once task, so a second read of it throws.
    /// Used to check that the combinator read (consumed) each input.
    /// </summary>
    public static async SpindleTask Await(Promise promise) => await promise.Task;

    /// <summary>True when <paramref name="task"/> was already read (its token is stale: reading its status throws).</summary>
    public static bool WasConsumed(SpindleTask task)
    {
        try
        {
            _ = task.Status;
            return false;
        }
        catch (InvalidOperationException)
        {
            return true;
        }
    }

    /// <summary>Attaches a recording handler to Spindle.UnobservedException for the duration of <paramref name="body"/>.</summary>
    public static ConcurrentQueue<Exception> Observe(Action body)
    {
        var reported = new ConcurrentQueue<Exception>();
        Action<Exception> handler = reported.Enqueue;
        Spindle.UnobservedException += handler;
        try
        {
            body();
        }
        finally
        {
            Spindle.UnobservedException -= handler;
        }
        return reported;
    }

    /// <summary>Counts how many times a continuation registered on a combined task runs.</summary>
    public sealed class ContinuationCounter
    {
        private int _count;

        public ContinuationCounter() => Action = () => Interlocked.Increment(ref _count);

        public Action Action { get; }

        public int Count => Volatile.Read(ref _count);

        public void Reset() => Volatile.Write(ref _count, 0);
    }
}

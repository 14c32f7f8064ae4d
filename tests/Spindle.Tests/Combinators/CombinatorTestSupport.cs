using System;
using System.Runtime.CompilerServices;
using System.Threading;
using System.Threading.Tasks;
using System.Threading.Tasks.Sources;
using Xunit;

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

    /// <summary>Awaits <paramref name="wait"/> and counts its resumption in <paramref name="resumed"/>.</summary>
    public static async SpindleTask AwaitAndCount(SpindleTask wait, StrongBox<int> resumed)
    {
        await wait;
        resumed.Value++;
    }

    /// <summary>An async method that returns <paramref name="value"/> once <paramref name="gate"/> completes.</summary>
    public static async SpindleTask<int> ValueAfter(Promise gate, int value)
    {
        await gate.Task;
        return value;
    }

    /// <summary>An async method that fails with <paramref name="error"/> once <paramref name="gate"/> completes.</summary>
    public static async SpindleTask<int> FailsAfter(Promise gate, Exception error)
    {
        await gate.Task;
        throw error;
    }

    /// <summary>
    /// The signal's set has gone to a reader: the signal is not set again, a new wait does not complete by itself, and
    /// a real set completes it. <paramref name="what"/> names the scenario in the failure message.
    /// </summary>
    public static void AssertTheSetWasHandedOutOnce(Signal signal, string what)
    {
        Assert.False(signal.IsSet, "one Set was handed out twice: " + what + ", and the signal was set again");
        SpindleTask next = signal.WaitAsync();
        Assert.False(next.IsCompleted, "a wait completed with nobody having set the signal since: " + what);
        signal.Set();
        next.GetAwaiter().GetResult();
    }

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

    /// <summary>Counts how many times a continuation registered on a combined task runs.</summary>
    public sealed class ContinuationCounter
    {
        private int _count;

        public ContinuationCounter() => Action = () => Interlocked.Increment(ref _count);

        public Action Action { get; }

        public int Count => Volatile.Read(ref _count);

        public void Reset() => Volatile.Write(ref _count, 0);
    }

    /// <summary>An async method suspended on <paramref name="promise"/>, with a result: a pooled, await-once typed task.</summary>
    public static async SpindleTask<T> Await<T>(Promise<T> promise) => await promise.Task;

    /// <summary>
    /// A resettable <see cref="IValueTaskSource{TResult}"/>, as pooled ValueTask sources are, that counts how often it is
    /// read and registered on. A second read of the same use fails loudly: a ValueTask over a pooled source may be read
    /// only once, because the source is reused after that.
    /// </summary>
    public sealed class CountingValueTaskSource<T> : IValueTaskSource<T>, IValueTaskSource
    {
        private ManualResetValueTaskSourceCore<T> _core; // continuations run inline: deterministic tests
        private int _reads;
        private int _registrations;

        public CountingValueTaskSource() => _core.RunContinuationsAsynchronously = false;

        public int Reads => Volatile.Read(ref _reads);

        public int Registrations => Volatile.Read(ref _registrations);

        public ValueTask<T> Task => new(this, _core.Version);

        public ValueTask UntypedTask => new(this, _core.Version);

        public void SetResult(T result) => _core.SetResult(result);

        public void SetException(Exception error) => _core.SetException(error);

        /// <summary>Starts a new use; the previous one must have been read exactly once.</summary>
        public void Reset()
        {
            _core.Reset();
            Volatile.Write(ref _reads, 0);
            Volatile.Write(ref _registrations, 0);
        }

        public T GetResult(short token)
        {
            if (Interlocked.Increment(ref _reads) > 1)
            {
                throw new InvalidOperationException("read twice: a ValueTask over a pooled source was consumed more than once");
            }
            return _core.GetResult(token);
        }

        void IValueTaskSource.GetResult(short token) => GetResult(token);

        public ValueTaskSourceStatus GetStatus(short token) => _core.GetStatus(token);

        public void OnCompleted(Action<object?> continuation, object? state, short token, ValueTaskSourceOnCompletedFlags flags)
        {
            Interlocked.Increment(ref _registrations);
            _core.OnCompleted(continuation, state, token, flags);
        }
    }
}

#if DEBUG // the pools' return hook exists only in a Debug build of the library (PoolTestHooks)
/// <summary>
/// Every combinator returned to its pool while installed (the pools' Debug hook, process-wide: use it in the sequential
/// collection): the object, the returning thread, and its cancellation state word then.
/// </summary>
internal sealed class CombinatorReturns : IDisposable
{
    private readonly Action<object>? _previous = PoolTestHooks.Returning;

    public readonly System.Collections.Concurrent.ConcurrentQueue<(object Combinator, int Thread, object? CancelState)> Seen = new();

    public CombinatorReturns()
    {
        PoolTestHooks.Returning = o =>
        {
            _previous?.Invoke(o);
            if (o.GetType().Name.StartsWith("Combinator", StringComparison.Ordinal))
            {
                object? state = o.GetType().GetField("_cancelState", System.Reflection.BindingFlags.Instance | System.Reflection.BindingFlags.NonPublic)?.GetValue(o);
                Seen.Enqueue((o, Environment.CurrentManagedThreadId, state));
            }
        };
    }

    /// <summary>How many were returned on thread <paramref name="thread"/>.</summary>
    public int CountOn(int thread)
    {
        int n = 0;
        foreach (var r in Seen)
        {
            if (r.Thread == thread)
            {
                n++;
            }
        }
        return n;
    }

    public void Dispose() => PoolTestHooks.Returning = _previous;
}
#endif

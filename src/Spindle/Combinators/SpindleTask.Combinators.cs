using System;
using System.Collections.Generic;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib;

public readonly partial struct SpindleTask
{
    /// <summary>
    /// A task that completes when every input has. An empty input completes at once. If inputs fail, awaiting rethrows
    /// the first failure (as the BCL does); every input's failure is observed. Allocates nothing in steady state, for
    /// any count; inputs that have all completed already take a path with no combinator at all.
    /// </summary>
    /// <remarks>Each input is awaited by the combinator, so it is consumed: do not await the inputs yourself.</remarks>
    public static SpindleTask WhenAll(params ReadOnlySpan<SpindleTask> tasks)
    {
        int pending = 0;
        foreach (SpindleTask t in tasks)
        {
            if (!t.IsCompleted)
            {
                pending++;
            }
        }
        if (pending == 0)
        {
            return ReadAllCompleted(tasks);
        }
        Combinator<VoidResult> c = Combinator<VoidResult>.Rent(isAny: false, tasks.Length);
        short token = c.Version;
        for (int i = 0; i < tasks.Length; i++)
        {
            SpindleTask t = tasks[i];
            if (t._source is { } s)
            {
                c.Add(i, s, t._token);
            }
            else
            {
                c.Add(i, CompletedSource.Instance, 0);
            }
        }
        return new SpindleTask(c, token);
    }

    /// <summary>As <see cref="WhenAll(ReadOnlySpan{SpindleTask})"/>, for a sequence.</summary>
    /// <exception cref="ArgumentNullException"><paramref name="tasks"/> is null.</exception>
    /// <exception cref="ArgumentException">A task in the sequence is null (the message names its index).</exception>
    public static SpindleTask WhenAll(IEnumerable<SpindleTask> tasks) => WhenAll(ToSpan(tasks));

    /// <summary>
    /// As <see cref="WhenAll(ReadOnlySpan{SpindleTask})"/>, and <paramref name="cancellationToken"/> cancels the wait: the
    /// combined task completes as canceled when it fires first. The inputs are not cancelled by it; they are still read
    /// when they finish, and a failure among them then goes to <see cref="Spindle.UnobservedException"/>. A token that is
    /// already cancelled cancels at once.
    /// </summary>
    public static SpindleTask WhenAll(ReadOnlySpan<SpindleTask> tasks, CancellationToken cancellationToken)
    {
        if (cancellationToken.IsCancellationRequested)
        {
            ForgetAll(tasks);
            return FromCanceled(cancellationToken);
        }
        SpindleTask all = WhenAll(tasks);
        if (all._source is Combinator<VoidResult> c)
        {
            c.CancelWith(cancellationToken);
        }
        return all;
    }

    /// <summary>
    /// As <see cref="WhenAny(ReadOnlySpan{SpindleTask})"/>, and <paramref name="cancellationToken"/> cancels the wait (see
    /// <see cref="WhenAll(ReadOnlySpan{SpindleTask}, CancellationToken)"/>).
    /// </summary>
    /// <exception cref="ArgumentException">The input is empty.</exception>
    public static SpindleTask<int> WhenAny(ReadOnlySpan<SpindleTask> tasks, CancellationToken cancellationToken)
    {
        if (tasks.IsEmpty)
        {
            throw new ArgumentException("WhenAny needs at least one task: with none, nothing could ever complete it.", nameof(tasks));
        }
        if (cancellationToken.IsCancellationRequested)
        {
            ForgetAll(tasks);
            return FromCanceled<int>(cancellationToken);
        }
        SpindleTask<int> any = WhenAny(tasks);
        if (any._source is Combinator<int> c)
        {
            c.CancelWith(cancellationToken);
        }
        return any;
    }

    private static void ForgetAll(ReadOnlySpan<SpindleTask> tasks)
    {
        foreach (SpindleTask t in tasks)
        {
            t.Forget();
        }
    }

    /// <summary>A task that completes when every BCL task has. As <see cref="WhenAll(ReadOnlySpan{SpindleTask})"/>.</summary>
    /// <exception cref="ArgumentException">An input is null (the message names its index).</exception>
    public static SpindleTask WhenAll(params ReadOnlySpan<Task> tasks)
    {
        bool allDone = true;
        for (int i = 0; i < tasks.Length; i++)
        {
            Task t = tasks[i] ?? throw NullInput(i, nameof(tasks));
            allDone &= t.IsCompleted;
        }
        if (allDone)
        {
            Exception? first = null;
            foreach (Task t in tasks)
            {
                if (!t.IsCompletedSuccessfully())
                {
                    // Read every failure (which marks it observed), and keep the lowest index's, as the BCL does.
                    Exception e = FirstException(t);
                    first ??= e;
                }
            }
            return first is null ? default : FromException(first);
        }
        Combinator<VoidResult> c = Combinator<VoidResult>.Rent(isAny: false, tasks.Length);
        short token = c.Version;
        for (int i = 0; i < tasks.Length; i++)
        {
            c.Add(i, tasks[i]);
        }
        return new SpindleTask(c, token);
    }

    /// <summary>As <see cref="WhenAll(ReadOnlySpan{Task})"/>, for a sequence.</summary>
    /// <exception cref="ArgumentNullException"><paramref name="tasks"/> is null.</exception>
    /// <exception cref="ArgumentException">A task in the sequence is null (the message names its index).</exception>
    public static SpindleTask WhenAll(IEnumerable<Task> tasks) => WhenAll(ToSpan(tasks));

    /// <summary>
    /// A task that completes when the first input does, with that input's index. If the first input to finish failed,
    /// awaiting rethrows its exception (the input itself is consumed, so there is nowhere else to see it). The other
    /// inputs are still read when they finish: their failures go to <see cref="Spindle.UnobservedException"/>.
    /// Allocates nothing in steady state, for any count.
    /// </summary>
    /// <exception cref="ArgumentException">The input is empty, as for <c>Task.WhenAny</c>.</exception>
    public static SpindleTask<int> WhenAny(params ReadOnlySpan<SpindleTask> tasks)
    {
        if (tasks.IsEmpty)
        {
            throw new ArgumentException("WhenAny needs at least one task: with none, nothing could ever complete it.", nameof(tasks));
        }
        for (int i = 0; i < tasks.Length; i++)
        {
            if (tasks[i].IsCompleted)
            {
                return CompletedWinner(tasks, i);
            }
        }
        Combinator<int> c = Combinator<int>.Rent(isAny: true, tasks.Length);
        short token = c.Version;
        for (int i = 0; i < tasks.Length; i++)
        {
            c.Add(i, tasks[i]._source!, tasks[i]._token);
        }
        return new SpindleTask<int>(c, token);
    }

    /// <summary>
    /// A task that completes when the first typed input does, with that input's index and result. As
    /// <see cref="WhenAny(ReadOnlySpan{SpindleTask})"/> otherwise (the winner's failure is rethrown; losers are read, and
    /// their failures reported). Allocates nothing in steady state.
    /// </summary>
    /// <exception cref="ArgumentException">The input is empty.</exception>
    public static SpindleTask<(int Index, T Result)> WhenAny<T>(params ReadOnlySpan<SpindleTask<T>> tasks)
    {
        if (tasks.IsEmpty)
        {
            throw new ArgumentException("WhenAny needs at least one task: with none, nothing could ever complete it.", nameof(tasks));
        }
        for (int i = 0; i < tasks.Length; i++)
        {
            if (tasks[i].IsCompleted)
            {
                for (int j = 0; j < tasks.Length; j++)
                {
                    if (j != i)
                    {
                        tasks[j].Forget();
                    }
                }
                try
                {
                    return new SpindleTask<(int, T)>((i, tasks[i].GetAwaiter().GetResult()));
                }
                catch (Exception ex)
                {
                    return FromException<(int, T)>(ex);
                }
            }
        }
        ValueAnyCombinator<T> c = ValueAnyCombinator<T>.Rent(tasks.Length);
        short token = c.Version;
        for (int i = 0; i < tasks.Length; i++)
        {
            c.Add(i, tasks[i]._source!, tasks[i]._token);
        }
        return new SpindleTask<(int, T)>(c, token);
    }

    /// <summary>As <see cref="WhenAny{T}(ReadOnlySpan{SpindleTask{T}})"/>, for a sequence.</summary>
    /// <exception cref="ArgumentNullException"><paramref name="tasks"/> is null.</exception>
    /// <exception cref="ArgumentException">The sequence is empty.</exception>
    public static SpindleTask<(int Index, T Result)> WhenAny<T>(IEnumerable<SpindleTask<T>> tasks) => WhenAny(ToSpan(tasks));

    /// <summary>As <see cref="WhenAny(ReadOnlySpan{SpindleTask})"/>, for a sequence.</summary>
    /// <exception cref="ArgumentNullException"><paramref name="tasks"/> is null.</exception>
    /// <exception cref="ArgumentException">The sequence is empty.</exception>
    public static SpindleTask<int> WhenAny(IEnumerable<SpindleTask> tasks) => WhenAny(ToSpan(tasks));

    /// <summary>
    /// A task that completes when the first BCL task does, with its index. Unlike <c>Task.WhenAny</c>, it makes no
    /// defensive copy of the input and pools its combinator, so it allocates nothing beyond the input tasks themselves.
    /// The winner's exception, if it failed, is rethrown; the BCL tasks themselves remain readable.
    /// </summary>
    /// <exception cref="ArgumentException">The input is empty, or an input is null (the message names its index).</exception>
    public static SpindleTask<int> WhenAny(params ReadOnlySpan<Task> tasks)
    {
        if (tasks.IsEmpty)
        {
            throw new ArgumentException("WhenAny needs at least one task: with none, nothing could ever complete it.", nameof(tasks));
        }
        for (int i = 0; i < tasks.Length; i++)
        {
            Task t = tasks[i] ?? throw NullInput(i, nameof(tasks));
            if (t.IsCompleted)
            {
                for (int j = i + 1; j < tasks.Length; j++)
                {
                    _ = tasks[j] ?? throw NullInput(j, nameof(tasks));
                }
                for (int j = 0; j < tasks.Length; j++)
                {
                    if (j != i)
                    {
                        ObserveLoser(tasks[j]);
                    }
                }
                return t.IsCompletedSuccessfully() ? new SpindleTask<int>(i) : FromException<int>(FirstException(t));
            }
        }
        Combinator<int> c = Combinator<int>.Rent(isAny: true, tasks.Length);
        short token = c.Version;
        for (int i = 0; i < tasks.Length; i++)
        {
            c.Add(i, tasks[i]);
        }
        return new SpindleTask<int>(c, token);
    }

    /// <summary>As <see cref="WhenAny(ReadOnlySpan{Task})"/>, for a sequence.</summary>
    /// <exception cref="ArgumentNullException"><paramref name="tasks"/> is null.</exception>
    /// <exception cref="ArgumentException">The sequence is empty, or contains null.</exception>
    public static SpindleTask<int> WhenAny(IEnumerable<Task> tasks) => WhenAny(ToSpan(tasks));

    private static SpindleTask ReadAllCompleted(ReadOnlySpan<SpindleTask> tasks)
    {
        Exception? first = null;
        foreach (SpindleTask t in tasks)
        {
            try
            {
                t.GetAwaiter().GetResult();
            }
            catch (Exception ex)
            {
                first ??= ex;
            }
        }
        return first is null ? default : FromException(first);
    }

    private static SpindleTask<int> CompletedWinner(ReadOnlySpan<SpindleTask> tasks, int winner)
    {
        for (int j = 0; j < tasks.Length; j++)
        {
            if (j != winner)
            {
                tasks[j].Forget(); // read when it finishes; a failure goes to Spindle.UnobservedException
            }
        }
        try
        {
            tasks[winner].GetAwaiter().GetResult();
            return new SpindleTask<int>(winner);
        }
        catch (Exception ex)
        {
            return FromException<int>(ex);
        }
    }

    /// <summary>
    /// A losing BCL task is still read, as the combinator reads its losers: a failure goes to
    /// <see cref="Spindle.UnobservedException"/>, now or when it happens (allocating a continuation only for a loser that
    /// is still running).
    /// </summary>
    private static void ObserveLoser(Task loser)
    {
        if (loser.IsCompleted)
        {
            ReportLoser(loser);
        }
        else
        {
            loser.ContinueWith(static t => ReportLoser(t), CancellationToken.None, TaskContinuationOptions.ExecuteSynchronously, TaskScheduler.Default);
        }
    }

    private static void ReportLoser(Task loser)
    {
        if (loser.IsFaulted)
        {
            UnobservedExceptions.Report(FirstException(loser));
        }
    }

    private static Exception FirstException(Task t)
        => t.IsCanceled ? new TaskCanceledException(t) : t.Exception!.InnerExceptions[0];

    private static ArgumentException NullInput(int index, string paramName)
        => new($"The task at index {index} is null. Every input to a combinator must be a task.", paramName);

    private static ReadOnlySpan<T> ToSpan<T>(IEnumerable<T> items)
    {
        if (items is null)
        {
            ThrowHelper.ThrowArgumentNull("tasks");
        }
        T[] array = items is T[] a ? a : new List<T>(items).ToArray();
        if (default(T) is null)
        {
            for (int i = 0; i < array.Length; i++)
            {
                if (array[i] is null)
                {
                    throw NullInput(i, "tasks");
                }
            }
        }
        return array;
    }
}

/// <summary>A source that is always complete: stands in for a default (completed) SpindleTask among a combinator's inputs.</summary>
internal sealed class CompletedSource : ISpindleSource
{
    public static readonly CompletedSource Instance = new();

    public SpindleTaskStatus GetStatus(short token) => SpindleTaskStatus.Succeeded;

    System.Threading.Tasks.Sources.ValueTaskSourceStatus System.Threading.Tasks.Sources.IValueTaskSource.GetStatus(short token)
        => System.Threading.Tasks.Sources.ValueTaskSourceStatus.Succeeded;

    public void GetResult(short token)
    {
    }

    public void OnCompleted(Action<object?> continuation, object? state, short token) => Continuations.Invoke(continuation, state);

    public void OnCompleted(Action<object?> continuation, object? state, short token, System.Threading.Tasks.Sources.ValueTaskSourceOnCompletedFlags flags)
        => Continuations.Invoke(continuation, state);
}

internal static class TaskCompat
{
    public static bool IsCompletedSuccessfully(this Task task)
#if NET
        => task.IsCompletedSuccessfully;
#else
        => task.Status == TaskStatus.RanToCompletion;
#endif
}

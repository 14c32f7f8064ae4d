using System;
using System.Collections.Generic;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib;

public readonly partial struct SpindleTask
{
    /// <summary>
    /// A task that completes when the first input does, with that input's index: among inputs already finished at the
    /// call, the lowest index (as <c>Task.WhenAny</c>); otherwise the first to finish, whatever its index (on a frame
    /// loop, of waits due in one frame the first queued or started). If the first input to finish failed,
    /// awaiting rethrows its exception (the input itself is consumed, so there is nowhere else to see it). The other
    /// inputs are let go of as soon as the race is decided (see the remarks); a failure among them goes to
    /// <see cref="Spindle.UnobservedException"/>, once. Allocates nothing in steady state, for any count.
    /// </summary>
    /// <remarks>
    /// <para><b>Losers.</b> As <c>Task.WhenAny</c> removes its continuations from the tasks that lose, WhenAny detaches
    /// from its losing inputs before the combined task completes, where their kind allows it: a <see cref="Promise"/>'s
    /// task is left pending with no awaiter: it can be awaited again (so the same promise can be raced in every turn of a
    /// loop, as a <c>Task</c> can), and its promise can be reset at once (even from the continuation of the await; as
    /// always, the reset must not race with a completion of the promise, so its producer must be done with the old use); a
    /// <see cref="Preserve"/>d task keeps no waiter of the race; a
    /// <see cref="Signal"/>'s wait ends, and a later <see cref="Signal.Set"/> is kept for the next wait; a
    /// <see cref="Spindle.Delay(int, CancellationToken)"/> leaves its timer wheel at once, not at its deadline; a frame-loop
    /// wait (<see cref="FrameLoop.WaitUntil(Func{bool}, CancellationToken)"/> and <c>WaitWhile</c>, whose predicate is not
    /// polled again, but for a poll its phase had already begun when another thread let go,
    /// <see cref="FrameLoop.Delay(TimeSpan, CancellationToken)"/> and <c>DelayFrame</c>, whose timer leaves the loop's wheel
    /// at the next frame's pass, or a converted <see cref="FrameAwaitable"/>) ends; an async
    /// method goes on running, forgotten (see <see cref="Forget"/>). A promise or a signal wait that completed while the
    /// race was being decided is read before the combined task completes. Other inputs (combinators, BCL tasks, other
    /// sources) are read when they finish. The same holds when the wait is cancelled, and when an input had finished already.
    /// Such an input keeps what waits on it until it finishes: a BCL task keeps its continuation, and with it the pooled
    /// combinator, so a loop that races one long-lived BCL task (a shutdown task) turn after turn holds one combinator per
    /// turn until that task finishes. Race a token instead, which every wait drops when it ends: cancel a
    /// <see cref="CancellationTokenSource"/> when the task finishes, and pass its token to the wait
    /// (<see cref="WhenAny(ReadOnlySpan{SpindleTask}, CancellationToken)"/>, <see cref="Signal.WaitAsync(CancellationToken)"/>).
    /// A task that a read does not consume (a promise's, a preserved one, a BCL task) may be passed more than once: a copy
    /// of the winner is not a loser, and its failure, which is the winner's, is not reported.</para>
    /// <para>To bound the wait, time out the combined task: <c>await SpindleTask.WhenAny(a, b).WithTimeout(TimeSpan.FromSeconds(5))</c>
    /// (see <see cref="WithTimeout(TimeSpan, TimerWheel, CancellationToken)"/>; pooled too, so it allocates nothing in steady state).</para>
    /// <para><b>A token</b> goes after the span: <c>WhenAny([a, b], token)</c>. Written after the tasks,
    /// <c>WhenAny(a, b, default)</c> passes a third task, <c>default(SpindleTask)</c>, which is complete, so the race ends
    /// at once with index 2 (the same holds for <see cref="ValueTask"/> inputs; for <see cref="Task"/> inputs it is a null
    /// task, refused). Only the typed tuple forms, such as <see cref="WhenAny{T1, T2}(SpindleTask{T1}, SpindleTask{T2}, CancellationToken)"/>,
    /// take the token after the tasks.</para>
    /// </remarks>
    /// <exception cref="ArgumentException">The input is empty, as for <c>Task.WhenAny</c>.</exception>
    /// <exception cref="InvalidOperationException">An input was already awaited (the await-once error), or a pooled task is passed twice.</exception>
    public static SpindleTask<int> WhenAny(params ReadOnlySpan<SpindleTask> tasks)
        => Combine.Any<SpindleTask, SpindleInput>(tasks, default);

    /// <summary>As <see cref="WhenAny(ReadOnlySpan{SpindleTask})"/>, for a sequence.</summary>
    /// <exception cref="ArgumentNullException"><paramref name="tasks"/> is null.</exception>
    /// <exception cref="ArgumentException">The sequence is empty.</exception>
    public static SpindleTask<int> WhenAny(IEnumerable<SpindleTask> tasks) => WhenAny(Combine.ToSpan(tasks));

    /// <summary>
    /// As <see cref="WhenAny(ReadOnlySpan{SpindleTask})"/>, and <paramref name="cancellationToken"/> cancels the wait (see
    /// <see cref="WhenAll(ReadOnlySpan{SpindleTask}, CancellationToken)"/>).
    /// </summary>
    /// <exception cref="ArgumentException">The input is empty.</exception>
    public static SpindleTask<int> WhenAny(ReadOnlySpan<SpindleTask> tasks, CancellationToken cancellationToken)
        => Combine.Any<SpindleTask, SpindleInput>(tasks, cancellationToken);

    /// <summary>
    /// A task that completes when the first BCL task does, with its index. Unlike <c>Task.WhenAny</c>, it makes no
    /// defensive copy of the input and pools its combinator, so it allocates nothing beyond the input tasks themselves.
    /// The winner's exception, if it failed, is rethrown; the BCL tasks themselves remain readable.
    /// </summary>
    /// <exception cref="ArgumentException">The input is empty, or an input is null (the message names its index).</exception>
    public static SpindleTask<int> WhenAny(params ReadOnlySpan<Task> tasks)
        => Combine.Any<Task, TaskInput>(tasks, default);

    /// <summary>As <see cref="WhenAny(ReadOnlySpan{Task})"/>, for a sequence.</summary>
    /// <exception cref="ArgumentNullException"><paramref name="tasks"/> is null.</exception>
    /// <exception cref="ArgumentException">The sequence is empty, or contains null.</exception>
    public static SpindleTask<int> WhenAny(IEnumerable<Task> tasks) => WhenAny(Combine.ToSpan(tasks));

    /// <summary>
    /// As <see cref="WhenAny(ReadOnlySpan{Task})"/>, and <paramref name="cancellationToken"/> cancels the wait, not the
    /// tasks (see <see cref="WhenAll(ReadOnlySpan{SpindleTask}, CancellationToken)"/>).
    /// </summary>
    /// <exception cref="ArgumentException">The input is empty, or an input is null (the message names its index).</exception>
    public static SpindleTask<int> WhenAny(ReadOnlySpan<Task> tasks, CancellationToken cancellationToken)
        => Combine.Any<Task, TaskInput>(tasks, cancellationToken);

    /// <summary>
    /// A task that completes when the first ValueTask does, with its index. As
    /// <see cref="WhenAny(ReadOnlySpan{SpindleTask})"/>: every ValueTask, winner or loser, is read exactly once (losers when
    /// they finish), so each is consumed.
    /// </summary>
    /// <exception cref="ArgumentException">The input is empty.</exception>
    public static SpindleTask<int> WhenAny(params ReadOnlySpan<ValueTask> tasks)
        => Combine.Any<ValueTask, ValueTaskInput>(tasks, default);

    /// <summary>As <see cref="WhenAny(ReadOnlySpan{ValueTask})"/>, for a sequence.</summary>
    /// <exception cref="ArgumentNullException"><paramref name="tasks"/> is null.</exception>
    /// <exception cref="ArgumentException">The sequence is empty.</exception>
    public static SpindleTask<int> WhenAny(IEnumerable<ValueTask> tasks) => WhenAny(Combine.ToSpan(tasks));

    /// <summary>As <see cref="WhenAny(ReadOnlySpan{ValueTask})"/>, and <paramref name="cancellationToken"/> cancels the wait (not the inputs).</summary>
    /// <exception cref="ArgumentException">The input is empty.</exception>
    public static SpindleTask<int> WhenAny(ReadOnlySpan<ValueTask> tasks, CancellationToken cancellationToken)
        => Combine.Any<ValueTask, ValueTaskInput>(tasks, cancellationToken);

    /// <summary>
    /// A task that completes when the first typed input does, with that input's index and result. As
    /// <see cref="WhenAny(ReadOnlySpan{SpindleTask})"/> otherwise (the winner's failure is rethrown; losers are let go of,
    /// and their failures reported). Allocates nothing in steady state.
    /// </summary>
    /// <exception cref="ArgumentException">The input is empty.</exception>
    /// <exception cref="InvalidOperationException">An input was already awaited (the await-once error), or a pooled task is passed twice.</exception>
    public static SpindleTask<(int Index, T Result)> WhenAny<T>(params ReadOnlySpan<SpindleTask<T>> tasks)
        => Combine.AnyValue<SpindleTask<T>, T, SpindleInput<T>>(tasks, default);

    /// <summary>As <see cref="WhenAny{T}(ReadOnlySpan{SpindleTask{T}})"/>, for a sequence.</summary>
    /// <exception cref="ArgumentNullException"><paramref name="tasks"/> is null.</exception>
    /// <exception cref="ArgumentException">The sequence is empty.</exception>
    public static SpindleTask<(int Index, T Result)> WhenAny<T>(IEnumerable<SpindleTask<T>> tasks) => WhenAny(Combine.ToSpan(tasks));

    /// <summary>As <see cref="WhenAny{T}(ReadOnlySpan{SpindleTask{T}})"/>, and <paramref name="cancellationToken"/> cancels the wait (not the inputs).</summary>
    /// <exception cref="ArgumentException">The input is empty.</exception>
    public static SpindleTask<(int Index, T Result)> WhenAny<T>(ReadOnlySpan<SpindleTask<T>> tasks, CancellationToken cancellationToken)
        => Combine.AnyValue<SpindleTask<T>, T, SpindleInput<T>>(tasks, cancellationToken);

    /// <summary>
    /// A task that completes when the first BCL task does, with its index and result. As
    /// <see cref="WhenAny(ReadOnlySpan{Task})"/> otherwise: no allocation beyond the tasks themselves; the tasks stay readable.
    /// </summary>
    /// <exception cref="ArgumentException">The input is empty, or an input is null (the message names its index).</exception>
    public static SpindleTask<(int Index, T Result)> WhenAny<T>(params ReadOnlySpan<Task<T>> tasks)
        => Combine.AnyValue<Task<T>, T, TaskInput<T>>(tasks, default);

    /// <summary>As <see cref="WhenAny{T}(ReadOnlySpan{Task{T}})"/>, for a sequence.</summary>
    /// <exception cref="ArgumentNullException"><paramref name="tasks"/> is null.</exception>
    /// <exception cref="ArgumentException">The sequence is empty, or contains null.</exception>
    public static SpindleTask<(int Index, T Result)> WhenAny<T>(IEnumerable<Task<T>> tasks) => WhenAny(Combine.ToSpan(tasks));

    /// <summary>As <see cref="WhenAny{T}(ReadOnlySpan{Task{T}})"/>, and <paramref name="cancellationToken"/> cancels the wait (not the tasks).</summary>
    /// <exception cref="ArgumentException">The input is empty, or an input is null (the message names its index).</exception>
    public static SpindleTask<(int Index, T Result)> WhenAny<T>(ReadOnlySpan<Task<T>> tasks, CancellationToken cancellationToken)
        => Combine.AnyValue<Task<T>, T, TaskInput<T>>(tasks, cancellationToken);

    /// <summary>
    /// A task that completes when the first ValueTask does, with its index and result. Every ValueTask is read exactly
    /// once. As <see cref="WhenAny{T}(ReadOnlySpan{SpindleTask{T}})"/> otherwise.
    /// </summary>
    /// <exception cref="ArgumentException">The input is empty.</exception>
    public static SpindleTask<(int Index, T Result)> WhenAny<T>(params ReadOnlySpan<ValueTask<T>> tasks)
        => Combine.AnyValue<ValueTask<T>, T, ValueTaskInput<T>>(tasks, default);

    /// <summary>As <see cref="WhenAny{T}(ReadOnlySpan{ValueTask{T}})"/>, for a sequence.</summary>
    /// <exception cref="ArgumentNullException"><paramref name="tasks"/> is null.</exception>
    /// <exception cref="ArgumentException">The sequence is empty.</exception>
    public static SpindleTask<(int Index, T Result)> WhenAny<T>(IEnumerable<ValueTask<T>> tasks) => WhenAny(Combine.ToSpan(tasks));

    /// <summary>As <see cref="WhenAny{T}(ReadOnlySpan{ValueTask{T}})"/>, and <paramref name="cancellationToken"/> cancels the wait (not the inputs).</summary>
    /// <exception cref="ArgumentException">The input is empty.</exception>
    public static SpindleTask<(int Index, T Result)> WhenAny<T>(ReadOnlySpan<ValueTask<T>> tasks, CancellationToken cancellationToken)
        => Combine.AnyValue<ValueTask<T>, T, ValueTaskInput<T>>(tasks, cancellationToken);

    /// <summary>
    /// Starts every producer with a token that WhenAny owns, and completes when the first of their tasks does, with its
    /// index. As soon as one finishes, the token is cancelled, so the losers stop: this is WhenAny that cancels its losers.
    /// </summary>
    /// <remarks>
    /// <para><b>Starting.</b> Producers are called in order, on the calling thread. Once one has finished (synchronously)
    /// the race is decided and the rest are not called. A producer that throws counts as an input that failed at once.</para>
    /// <para><b>Outcome.</b> As <see cref="WhenAny(ReadOnlySpan{SpindleTask})"/>: the winner's failure is rethrown; the
    /// losers are read when they finish, and a failure among them goes to <see cref="Spindle.UnobservedException"/>,
    /// except the <see cref="OperationCanceledException"/> with which they answer the cancellation.</para>
    /// <para><b>Cancellation.</b> <paramref name="cancellationToken"/> cancels the wait and every producer. If it is
    /// already cancelled, no producer is called.</para>
    /// <para><b>Cost.</b> The combinator is pooled. Cancelling the losers cancels a <see cref="CancellationTokenSource"/>,
    /// which can never be reset, so a call that has losers to cancel allocates one; a call with none (every producer
    /// finished synchronously) keeps it for the next call (on .NET 6 and later: <c>TryReset</c>; on netstandard2.1 a
    /// source is allocated per call). The token is valid for this call only: a producer must not keep it, nor a
    /// registration on it, after its task has finished, since a later call may hand out the same source's token again
    /// and cancel it when that call's race is decided.</para>
    /// </remarks>
    /// <param name="producers">Delegates that each start one task with the token they are given.</param>
    /// <param name="cancellationToken">Cancels the wait and the producers.</param>
    /// <exception cref="ArgumentException"><paramref name="producers"/> is empty, or one of them is null (the message names its index).</exception>
    public static SpindleTask<int> WhenAny(ReadOnlySpan<Func<CancellationToken, SpindleTask>> producers, CancellationToken cancellationToken = default)
        => Combine.AnyOfProducers<SpindleTask, VoidResult, SpindleInput, int>(producers, cancellationToken, CombinedResults.Winner);

    /// <summary>
    /// As <see cref="WhenAny(ReadOnlySpan{Func{CancellationToken, SpindleTask}}, CancellationToken)"/>, for producers of a
    /// typed result: completes with the winner's index and result, and cancels the losers.
    /// </summary>
    /// <param name="producers">Delegates that each start one task with the token they are given.</param>
    /// <param name="cancellationToken">Cancels the wait and the producers.</param>
    /// <exception cref="ArgumentException"><paramref name="producers"/> is empty, or one of them is null (the message names its index).</exception>
    public static SpindleTask<(int Index, T Result)> WhenAny<T>(ReadOnlySpan<Func<CancellationToken, SpindleTask<T>>> producers, CancellationToken cancellationToken = default)
        => Combine.AnyOfProducers<SpindleTask<T>, T, SpindleInput<T>, (int, T)>(producers, cancellationToken, CombinedResults<T>.WinnerAndValue);
}

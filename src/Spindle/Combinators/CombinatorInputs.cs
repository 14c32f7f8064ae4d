using System;
using System.Diagnostics;
using System.Threading.Tasks;

namespace SpindleLib;

/// <summary>
/// What the shared combinator code (<see cref="Combine"/>) needs to know about one kind of input. Implemented by empty
/// structs, so that the JIT compiles the shared code once per kind, with these calls inlined.
/// </summary>
/// <typeparam name="TInput">The input: a Spindle task, a BCL task or a ValueTask.</typeparam>
/// <typeparam name="TValue">What reading it gives: its result, or <see cref="VoidResult"/>.</typeparam>
internal interface IInputKind<TInput, TValue>
{
    /// <summary>True for a null reference (a BCL task): rejected, naming its index.</summary>
    bool IsNull(TInput input);

    /// <summary>True once the input has finished. Never consumes it (a stale Spindle task throws the await-once error).</summary>
    bool IsCompleted(TInput input);

    /// <summary>Reads a completed input, consuming it; throws its failure.</summary>
    TValue Read(TInput input);

    /// <summary>True when a pending input can be left to finish with nobody waiting (a fault then reported) without a combinator.</summary>
    bool ForgetsPending { get; }

    /// <summary>Leaves the input to finish with nobody waiting; only for kinds with <see cref="ForgetsPending"/>.</summary>
    void Forget(TInput input);

    /// <summary>Registers the input as input <paramref name="index"/> of <paramref name="combinator"/>.</summary>
    void Add(CombinatorCore combinator, int index, TInput input);
}

internal readonly struct SpindleInput : IInputKind<SpindleTask, VoidResult>
{
    public bool IsNull(SpindleTask input) => false;

    public bool IsCompleted(SpindleTask input) => input.IsCompleted;

    public VoidResult Read(SpindleTask input)
    {
        input.GetAwaiter().GetResult();
        return default;
    }

    public bool ForgetsPending => true;

    public void Forget(SpindleTask input) => input.Forget();

    public void Add(CombinatorCore combinator, int index, SpindleTask input) => combinator.Add(index, input);
}

internal readonly struct SpindleInput<T> : IInputKind<SpindleTask<T>, T>
{
    public bool IsNull(SpindleTask<T> input) => false;

    public bool IsCompleted(SpindleTask<T> input) => input.IsCompleted;

    public T Read(SpindleTask<T> input) => input.GetAwaiter().GetResult();

    public bool ForgetsPending => true;

    public void Forget(SpindleTask<T> input) => input.Forget();

    public void Add(CombinatorCore combinator, int index, SpindleTask<T> input) => combinator.Add(index, input);
}

internal readonly struct TaskInput : IInputKind<Task, VoidResult>
{
    public bool IsNull(Task input) => input is null;

    public bool IsCompleted(Task input) => input.IsCompleted;

    public VoidResult Read(Task input)
    {
        input.GetAwaiter().GetResult();
        return default;
    }

    /// <summary>A pending BCL task could only be observed with an allocated continuation: the combinator does it instead.</summary>
    public bool ForgetsPending => false;

    public void Forget(Task input) => Debug.Fail("a pending BCL task goes to a combinator");

    public void Add(CombinatorCore combinator, int index, Task input) => combinator.Add(index, input);
}

internal readonly struct TaskInput<T> : IInputKind<Task<T>, T>
{
    public bool IsNull(Task<T> input) => input is null;

    public bool IsCompleted(Task<T> input) => input.IsCompleted;

    public T Read(Task<T> input) => input.GetAwaiter().GetResult();

    public bool ForgetsPending => false;

    public void Forget(Task<T> input) => Debug.Fail("a pending BCL task goes to a combinator");

    public void Add(CombinatorCore combinator, int index, Task<T> input) => combinator.Add(index, input);
}

internal readonly struct ValueTaskInput : IInputKind<ValueTask, VoidResult>
{
    public bool IsNull(ValueTask input) => false;

    public bool IsCompleted(ValueTask input) => input.IsCompleted;

    public VoidResult Read(ValueTask input)
    {
        input.GetAwaiter().GetResult();
        return default;
    }

    /// <summary>A pending ValueTask must be read exactly once when it finishes: only a combinator's slot can do that without allocating.</summary>
    public bool ForgetsPending => false;

    public void Forget(ValueTask input) => Debug.Fail("a pending ValueTask goes to a combinator");

    public void Add(CombinatorCore combinator, int index, ValueTask input) => combinator.Add(index, input);
}

internal readonly struct ValueTaskInput<T> : IInputKind<ValueTask<T>, T>
{
    public bool IsNull(ValueTask<T> input) => false;

    public bool IsCompleted(ValueTask<T> input) => input.IsCompleted;

    public T Read(ValueTask<T> input) => input.GetAwaiter().GetResult();

    public bool ForgetsPending => false;

    public void Forget(ValueTask<T> input) => Debug.Fail("a pending ValueTask goes to a combinator");

    public void Add(CombinatorCore combinator, int index, ValueTask<T> input) => combinator.Add(index, input);
}

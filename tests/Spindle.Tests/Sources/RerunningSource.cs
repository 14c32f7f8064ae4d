using System;
using System.Threading;
using System.Threading.Tasks.Sources;

namespace SpindleLib.Tests.Sources;

/// <summary>
/// A user's source that keeps the one continuation it is handed and can run it any number of times: the misuse its
/// <c>OnCompleted</c> contract forbids (<see cref="ContinuationRunTwiceTests"/>, <c>ChildObserverClaimRaceTests</c>), or
/// run it from another thread the moment it is handed over (<see cref="ContinuationRacer.RunOnceRegistered"/>).
/// </summary>
internal sealed class RerunningSource : ISpindleSource<int>
{
    private Action<object?>? _continuation;
    private object? _state;
    private volatile bool _completed;
    private int _reads;

    /// <summary>How many times the result was read (<c>GetResult</c>).</summary>
    public int Reads => Volatile.Read(ref _reads);

    /// <summary>True once a continuation was handed over.</summary>
    public bool IsRegistered => Volatile.Read(ref _continuation) is not null;

    /// <summary>Iterations <c>OnCompleted</c> spins after keeping the continuation, before it returns to the registrant.</summary>
    public int SpinsAfterRegistration { get; set; }

    public SpindleTask<int> Task => new(this, 3);

    public SpindleTask UntypedTask => new(this, 3);

    /// <summary>Completes the use and runs the continuation (the first, legitimate, run).</summary>
    public void Complete()
    {
        MarkCompleted();
        RunAgain();
    }

    /// <summary>Completes the use without running the continuation, for tests that run it from two threads at once.</summary>
    public void MarkCompleted() => _completed = true;

    /// <summary>Runs the kept continuation (once more after <see cref="Complete"/>: the misuse).</summary>
    public void RunAgain() => _continuation!(_state);

    public void OnCompleted(Action<object?> continuation, object? state, short token)
    {
        Assert.Equal(3, token);
        _state = state;
        Volatile.Write(ref _continuation, continuation); // publishes the state to a thread that waits for it (IsRegistered)
        if (SpinsAfterRegistration > 0)
        {
            Thread.SpinWait(SpinsAfterRegistration);
        }
    }

    public SpindleTaskStatus GetStatus(short token) => _completed ? SpindleTaskStatus.Succeeded : SpindleTaskStatus.Pending;

    public int GetResult(short token)
    {
        Interlocked.Increment(ref _reads);
        return _completed ? 42 : throw new InvalidOperationException("read before completion");
    }

    void IValueTaskSource.GetResult(short token) => GetResult(token);

    ValueTaskSourceStatus IValueTaskSource.GetStatus(short token) => (ValueTaskSourceStatus)GetStatus(token);

    ValueTaskSourceStatus IValueTaskSource<int>.GetStatus(short token) => (ValueTaskSourceStatus)GetStatus(token);

    public void OnCompleted(Action<object?> continuation, object? state, short token, ValueTaskSourceOnCompletedFlags flags)
        => OnCompleted(continuation, state, token);

    /// <summary>
    /// A scope with two children: one on a new <see cref="RerunningSource"/> (<paramref name="source"/>, not completed yet)
    /// and a sibling on <paramref name="sibling"/>, a promise left pending.
    /// </summary>
    public static TaskScope ScopeWithChildAndSibling(out RerunningSource source, out Promise sibling)
    {
        var child = source = new RerunningSource();
        var other = sibling = new Promise();
        var scope = new TaskScope();
        scope.Run(_ => child.UntypedTask);
        scope.Run(_ => other.Task);
        return scope;
    }
}

using System;
using System.Diagnostics;
using System.ComponentModel;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;

namespace SpindleLib;

/// <summary>
/// The async method builder for <see cref="SpindleTask"/>. Used by the compiler; not meant to be called directly.
/// A method that completes without suspending allocates nothing; the first real suspension rents a pooled box.
/// </summary>
[EditorBrowsable(EditorBrowsableState.Never)]
[StructLayout(LayoutKind.Auto)]
public struct SpindleTaskMethodBuilder
{
    // The only field, so the state machine the compiler copies into a box stays small.
    private SpindleBox<VoidResult>? _box;

    /// <summary>Creates a builder.</summary>
    public static SpindleTaskMethodBuilder Create() => default;

    /// <summary>The task for the method being built.</summary>
    public SpindleTask Task => _box is { } box ? new SpindleTask(box, box.Version) : default;

    /// <summary>Runs the state machine's synchronous part.</summary>
    public void Start<TStateMachine>(ref TStateMachine stateMachine) where TStateMachine : IAsyncStateMachine
        => BuilderCore.Start(ref stateMachine);

    /// <summary>Not used: Spindle boxes state machines itself. Refuses null, as the BCL's builders do.</summary>
    /// <exception cref="ArgumentNullException"><paramref name="stateMachine"/> is null.</exception>
    public void SetStateMachine(IAsyncStateMachine stateMachine)
    {
        if (stateMachine is null)
        {
            ThrowHelper.ThrowArgumentNull(nameof(stateMachine));
        }
    }

    /// <summary>Completes the task successfully.</summary>
    public void SetResult() => _box?.SetResult(default);

    /// <summary>Completes the task with an exception (an <see cref="OperationCanceledException"/> cancels it).</summary>
    /// <exception cref="ArgumentNullException"><paramref name="exception"/> is null.</exception>
    public void SetException(Exception exception)
    {
        if (exception is null)
        {
            ThrowHelper.ThrowArgumentNull(nameof(exception));
        }
        if (_box is { } box)
        {
            box.SetException(exception);
        }
        else
        {
            _box = new FaultedBox<VoidResult>(exception);
        }
    }

    /// <summary>Schedules the state machine to move on when the awaiter completes.</summary>
    [StackTraceHidden] // a misuse the awaiter refuses (a second await) points at the user\'s await, not here
    public void AwaitOnCompleted<TAwaiter, TStateMachine>(ref TAwaiter awaiter, ref TStateMachine stateMachine)
        where TAwaiter : INotifyCompletion
        where TStateMachine : IAsyncStateMachine
        => BuilderCore.Await(ref awaiter, BuilderCore.GetBox(ref _box, ref stateMachine));

    /// <summary>Schedules the state machine to move on when the awaiter completes.</summary>
    [StackTraceHidden] // a misuse the awaiter refuses (a second await) points at the user\'s await, not here
    public void AwaitUnsafeOnCompleted<TAwaiter, TStateMachine>(ref TAwaiter awaiter, ref TStateMachine stateMachine)
        where TAwaiter : ICriticalNotifyCompletion
        where TStateMachine : IAsyncStateMachine
        => BuilderCore.AwaitUnsafe(ref awaiter, BuilderCore.GetBox(ref _box, ref stateMachine));
}

/// <summary>The async method builder for <see cref="SpindleTask{T}"/>. Used by the compiler.</summary>
/// <typeparam name="T">The result type.</typeparam>
[EditorBrowsable(EditorBrowsableState.Never)]
[StructLayout(LayoutKind.Auto)]
public struct SpindleTaskMethodBuilder<T>
{
    private SpindleBox<T>? _box;
    private T _result;

    /// <summary>Creates a builder.</summary>
    public static SpindleTaskMethodBuilder<T> Create() => default;

    /// <summary>The task for the method being built.</summary>
    public SpindleTask<T> Task
    {
        get
        {
            if (_box is { } box)
            {
                return new SpindleTask<T>(box, box.Version);
            }
            return new SpindleTask<T>(_result);
        }
    }

    /// <summary>Runs the state machine's synchronous part.</summary>
    public void Start<TStateMachine>(ref TStateMachine stateMachine) where TStateMachine : IAsyncStateMachine
        => BuilderCore.Start(ref stateMachine);

    /// <summary>Not used: Spindle boxes state machines itself. Refuses null, as the BCL's builders do.</summary>
    /// <exception cref="ArgumentNullException"><paramref name="stateMachine"/> is null.</exception>
    public void SetStateMachine(IAsyncStateMachine stateMachine)
    {
        if (stateMachine is null)
        {
            ThrowHelper.ThrowArgumentNull(nameof(stateMachine));
        }
    }

    /// <summary>Completes the task with <paramref name="result"/>.</summary>
    public void SetResult(T result)
    {
        if (_box is { } box)
        {
            box.SetResult(result);
        }
        else
        {
            _result = result;
        }
    }

    /// <summary>Completes the task with an exception (an <see cref="OperationCanceledException"/> cancels it).</summary>
    /// <exception cref="ArgumentNullException"><paramref name="exception"/> is null.</exception>
    public void SetException(Exception exception)
    {
        if (exception is null)
        {
            ThrowHelper.ThrowArgumentNull(nameof(exception));
        }
        if (_box is { } box)
        {
            box.SetException(exception);
        }
        else
        {
            _box = new FaultedBox<T>(exception);
        }
    }

    /// <summary>Schedules the state machine to move on when the awaiter completes.</summary>
    [StackTraceHidden] // a misuse the awaiter refuses (a second await) points at the user\'s await, not here
    public void AwaitOnCompleted<TAwaiter, TStateMachine>(ref TAwaiter awaiter, ref TStateMachine stateMachine)
        where TAwaiter : INotifyCompletion
        where TStateMachine : IAsyncStateMachine
        => BuilderCore.Await(ref awaiter, BuilderCore.GetBox(ref _box, ref stateMachine));

    /// <summary>Schedules the state machine to move on when the awaiter completes.</summary>
    [StackTraceHidden] // a misuse the awaiter refuses (a second await) points at the user\'s await, not here
    public void AwaitUnsafeOnCompleted<TAwaiter, TStateMachine>(ref TAwaiter awaiter, ref TStateMachine stateMachine)
        where TAwaiter : ICriticalNotifyCompletion
        where TStateMachine : IAsyncStateMachine
        => BuilderCore.AwaitUnsafe(ref awaiter, BuilderCore.GetBox(ref _box, ref stateMachine));
}

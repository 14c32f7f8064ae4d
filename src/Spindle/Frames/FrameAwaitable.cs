using System;
using System.Diagnostics;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Threading;
using System.Threading.Tasks.Sources;

namespace SpindleLib;

/// <summary>
/// The awaitable returned by <see cref="FrameLoop.Yield(CancellationToken)"/>, <see cref="FrameLoop.NextFrame(CancellationToken)"/>
/// and <see cref="FrameLoop.SwitchTo(CancellationToken)"/>. Awaiting it from a Spindle async method with no cancelable
/// token queues the method's own state-machine box in the phase, so a frame that resumes any number of such awaits
/// allocates nothing and touches no other object.
/// </summary>
/// <remarks>
/// <para>Await it once, right away (it describes a wait that starts when it is awaited). To pass it to
/// <see cref="SpindleTask.WhenAll(ReadOnlySpan{SpindleTask})"/> or <see cref="SpindleTask.WhenAny(ReadOnlySpan{SpindleTask})"/>,
/// convert it with <see cref="AsSpindleTask"/> (or implicitly): the wait then starts at the conversion.</para>
/// <para><c>default(FrameAwaitable)</c> is already complete.</para>
/// </remarks>
[StructLayout(LayoutKind.Auto)]
public readonly partial struct FrameAwaitable
{
    // _target is the phase for a wait that starts when awaited (_kind Yield, NextFrame or SwitchTo), or, for _kind
    // Source, the source of a wait already started (a pooled waiter, or a completed source), or null when complete.
    private readonly object? _target;
    private readonly short _token;
    private readonly FrameAwaitKind _kind;

    internal FrameAwaitable(FramePhase phase, FrameAwaitKind kind)
    {
        _target = phase;
        _token = 0;
        _kind = kind;
    }

    internal FrameAwaitable(SpindleTask task)
    {
        _target = task._source;
        _token = task._token;
        _kind = FrameAwaitKind.Source;
    }

    /// <summary>Gets the awaiter.</summary>
    public Awaiter GetAwaiter() => new(_target, _token, _kind);

    /// <summary>
    /// Starts the wait now and returns it as a <see cref="SpindleTask"/> (for combinators, or to await it later). Rents
    /// a pooled source unless the wait is already complete (a <see cref="FrameLoop.SwitchTo(CancellationToken)"/> made
    /// on the loop thread).
    /// </summary>
    public SpindleTask AsSpindleTask()
    {
        switch (_kind)
        {
            case FrameAwaitKind.Source:
                return _target is null ? default : new SpindleTask((ISpindleSource)_target, _token);
            case FrameAwaitKind.SwitchTo:
                var phase = (FramePhase)_target!;
                return phase.Loop.IsLoopThread ? default : phase.Loop.StartWaiter(phase, FrameAwaitKind.SwitchTo, default);
            default:
                var p = (FramePhase)_target!;
                return p.Loop.StartWaiter(p, _kind, default);
        }
    }

    /// <summary>Starts the wait and returns it as a <see cref="SpindleTask"/> (see <see cref="AsSpindleTask"/>).</summary>
    public static implicit operator SpindleTask(FrameAwaitable awaitable) => awaitable.AsSpindleTask();

    /// <summary>Awaits a frame-loop wait.</summary>
    [StackTraceHidden]
    public readonly struct Awaiter : ICriticalNotifyCompletion, ISpindleAwaiter
    {
        private readonly object? _target;
        private readonly short _token;
        private readonly FrameAwaitKind _kind;

        internal Awaiter(object? target, short token, FrameAwaitKind kind)
        {
            _target = target;
            _token = token;
            _kind = kind;
        }

        /// <summary>
        /// True when the wait is over: a started wait that has completed, or a <see cref="FrameLoop.SwitchTo(CancellationToken)"/>
        /// awaited on the loop thread. A yield or a next-frame wait is never complete before it is awaited.
        /// </summary>
        public bool IsCompleted => _kind switch
        {
            FrameAwaitKind.Source => _target is not ISpindleSource s || s.GetStatus(_token) != SpindleTaskStatus.Pending,
            FrameAwaitKind.SwitchTo => ((FramePhase)_target!).Loop.IsLoopThread,
            _ => false,
        };

        /// <summary>Ends the await: throws <see cref="OperationCanceledException"/> if the wait was cancelled.</summary>
        /// <remarks>
        /// Called without an await (<c>loop.Yield().GetAwaiter().GetResult()</c>), a <see cref="FrameLoop.Yield(CancellationToken)"/>,
        /// <see cref="FrameLoop.NextFrame(CancellationToken)"/> or <see cref="FrameLoop.SwitchTo(CancellationToken)"/> with no
        /// token that can be cancelled returns at once: that wait starts only when awaited, so nothing was waited for, and the
        /// caller stays on its own thread. One given such a token started at its call: this blocks until it completes
        /// (or throws <see cref="InvalidOperationException"/> on the loop's thread inside a frame, which alone could complete it).
        /// </remarks>
        /// <exception cref="OperationCanceledException">The wait was cancelled.</exception>
        /// <exception cref="InvalidOperationException">A started wait was already read, or is read while pending on the loop's thread inside a frame.</exception>
        public void GetResult()
        {
            if (_kind == FrameAwaitKind.Source && _target is ISpindleSource s)
            {
                s.GetResult(_token);
            }
        }

        /// <summary>As <see cref="GetResult"/>, returning a cancellation instead of throwing it (<see cref="FrameAwaitable.SuppressCancellationThrow"/>).</summary>
        internal bool GetResultOrCanceled() => _kind == FrameAwaitKind.Source && _target is ISpindleSource s && QuietRead.ReadCanceled(s, _token);

        /// <summary>Schedules the continuation, flowing the current <see cref="ExecutionContext"/>.</summary>
        /// <exception cref="ArgumentNullException"><paramref name="continuation"/> is null.</exception>
        /// <exception cref="InvalidOperationException">A wait started with a token already has an awaiter, or was already awaited.</exception>
        public void OnCompleted(Action continuation)
        {
            if (continuation is null)
            {
                ThrowHelper.ThrowArgumentNull(nameof(continuation));
            }
            if (_kind == FrameAwaitKind.Source)
            {
                OnSourceCompleted(continuation, ValueTaskSourceOnCompletedFlags.FlowExecutionContext);
                return;
            }
            ExecutionContext? ec = ExecutionContext.Capture();
            Queue(ec is null
                ? ContinuationWorkItem.Rent(ActionContinuation.s_invoke, continuation)
                : ContinuationWorkItem.Rent(ContextContinuation.s_run, new ContextContinuation(ActionContinuation.s_invoke, continuation, ec)));
        }

        /// <summary>Schedules the continuation without flowing the <see cref="ExecutionContext"/>.</summary>
        /// <exception cref="ArgumentNullException"><paramref name="continuation"/> is null.</exception>
        /// <exception cref="InvalidOperationException">A wait started with a token already has an awaiter, or was already awaited.</exception>
        public void UnsafeOnCompleted(Action continuation)
        {
            if (continuation is null)
            {
                ThrowHelper.ThrowArgumentNull(nameof(continuation));
            }
            if (_kind == FrameAwaitKind.Source)
            {
                OnSourceCompleted(continuation, ValueTaskSourceOnCompletedFlags.None);
                return;
            }
            Queue(ContinuationWorkItem.Rent(ActionContinuation.s_invoke, continuation));
        }

        void ISpindleAwaiter.OnCompletedForBox(StateMachineBoxBase box)
        {
            if (_kind != FrameAwaitKind.Source)
            {
                // The hot path: the box itself goes in the phase's queue; no other object is involved.
                Queue(box);
            }
            else if (_target is ISpindleSource s)
            {
                s.OnCompleted(DirectWaiter.s_moveNext, box, _token);
            }
            else
            {
                box.MoveNext();
            }
        }

        private void Queue(WorkItem item)
        {
            var phase = (FramePhase)_target!;
            phase.Loop.Schedule(item, phase, _kind);
        }

        private void OnSourceCompleted(Action continuation, ValueTaskSourceOnCompletedFlags flags)
        {
            if (_target is ISpindleSource s)
            {
                s.OnCompleted(ActionContinuation.s_invoke, continuation, _token, flags);
            }
            else
            {
                continuation();
            }
        }
    }
}

/// <summary>What a <see cref="FrameAwaitable"/> waits for.</summary>
internal enum FrameAwaitKind : byte
{
    /// <summary>A wait already started: a source and its token (or nothing, when complete).</summary>
    Source = 0,

    /// <summary>The phase's next run.</summary>
    Yield = 1,

    /// <summary>The phase's run in the next frame.</summary>
    NextFrame = 2,

    /// <summary>The loop thread: complete when already there, else the phase's next run in the next frame.</summary>
    SwitchTo = 3,
}

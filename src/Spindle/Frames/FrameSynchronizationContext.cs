using System;
using System.Threading;

namespace SpindleLib;

/// <summary>
/// The context behind <see cref="FrameLoop.SynchronizationContext"/>, whose documentation says what it does: a post
/// takes the path of <see cref="FrameLoop.SwitchTo(CancellationToken)"/> to <see cref="FrameLoop.Update"/>, on a pooled
/// <see cref="PostedCallback"/>.
/// </summary>
internal sealed class FrameSynchronizationContext : SynchronizationContext
{
    private readonly FrameLoop _loop;

    internal FrameSynchronizationContext(FrameLoop loop) => _loop = loop;

    public override void Post(SendOrPostCallback d, object? state)
    {
        if (d is null)
        {
            ThrowHelper.ThrowArgumentNull(nameof(d));
        }
        _loop.Schedule(PostedCallback.Rent(d, state), _loop.Update, FrameAwaitKind.Yield);
    }

    /// <summary>
    /// Runs <paramref name="d"/> at once on the loop thread. From any other thread it throws: waiting there until a frame
    /// runs it would hang for good if no frame ever came, or if the loop thread waited for the caller.
    /// </summary>
    public override void Send(SendOrPostCallback d, object? state)
    {
        if (d is null)
        {
            ThrowHelper.ThrowArgumentNull(nameof(d));
        }
        if (!_loop.IsLoopThread)
        {
            throw new NotSupportedException(
                "Send was called on a FrameLoop's SynchronizationContext from a thread that is not the loop's. Blocking until a frame runs the callback " +
                "could wait for ever; use Post, or await loop.SwitchTo() and run the code there.");
        }
        d(state);
    }

    /// <summary>The context itself: it stands for its loop, and the BCL compares contexts by reference.</summary>
    public override SynchronizationContext CreateCopy() => this;
}

/// <summary>A pooled work item that runs one posted callback in the <see cref="ExecutionContext"/> of its post.</summary>
internal sealed class PostedCallback : WorkItem, IPoolNode<PostedCallback>
{
    private static readonly ContextCallback s_run = static o => ((PostedCallback)o!).Run();

    private SendOrPostCallback? _callback;
    private object? _state;
    private ExecutionContext? _context;
    private PostedCallback? _next;

    ref PostedCallback? IPoolNode<PostedCallback>.Next => ref _next;

    public static PostedCallback Rent(SendOrPostCallback callback, object? state)
    {
        PostedCallback item = ObjectPool<PostedCallback>.TryRent() ?? new PostedCallback();
        item._callback = callback;
        item._state = state;
        item._context = ExecutionContext.Capture();
        return item;
    }

    public override void Execute()
    {
        ExecutionContext? context = _context;
        _context = null;
        if (context is null)
        {
            Run(); // posted with the flow suppressed: it runs in the loop's context, as the BCL's own posts then do
        }
        else if (ContextFlow.CanRunInline(context))
        {
            Run();
            ContextFlow.RestoreDefaultIfChanged();
        }
        else
        {
            ContextFlow.Run(context, s_run, this);
        }
    }

    /// <summary>Clears the item and returns it to its pool, then runs the callback: a callback that throws loses nothing.</summary>
    private void Run()
    {
        SendOrPostCallback callback = _callback!;
        object? state = _state;
        _callback = null;
        _state = null;
        ObjectPool<PostedCallback>.Return(this);
        callback(state);
    }
}

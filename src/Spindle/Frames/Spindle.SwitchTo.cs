using System;
using System.Threading;

namespace SpindleLib;

public static partial class Spindle
{
    /// <summary>
    /// Awaits to continue on <paramref name="loop"/>'s thread: at once if already on it, else in <see cref="FrameLoop.Update"/>
    /// of the next frame to begin (a thread-safe hand-off, never lost). Same as <see cref="FrameLoop.SwitchTo(CancellationToken)"/>;
    /// <see cref="SwitchToWorker"/> leaves the loop again.
    /// </summary>
    /// <param name="loop">The loop to continue on.</param>
    /// <param name="cancellationToken">Cancels the hand-off: it completes at once, on the cancelling thread, with <see cref="OperationCanceledException"/>.</param>
    /// <exception cref="ArgumentNullException"><paramref name="loop"/> is null.</exception>
    public static FrameAwaitable SwitchTo(FrameLoop loop, CancellationToken cancellationToken = default)
    {
        if (loop is null)
        {
            ThrowHelper.ThrowArgumentNull(nameof(loop));
        }
        return loop.SwitchTo(cancellationToken);
    }
}

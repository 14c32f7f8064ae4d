using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// Work that carries no ExecutionContext (queued or suspended under SuppressFlow) runs in the default context, as on a
/// worker: what it sets reaches neither the next item of a frame phase, nor the frame's host, nor a helping waiter.
/// Found by a review: each leaked.
/// </summary>
public sealed class ContextFreeItemLeakTests
{
    private static readonly AsyncLocal<string?> s_local = new();

    private static Task OnDefaultContextThread(Action body)
    {
        using (ExecutionContext.SuppressFlow())
        {
            return TestUtil.RunOnThread(body, "r6");
        }
    }

    private static async SpindleTask SetAfterNextFrame(FrameLoop loop, string value)
    {
        await loop.NextFrame();
        s_local.Value = value;
    }

    private static async SpindleTask RecordAfterNextFrame(FrameLoop loop, string?[] seen)
    {
        await loop.NextFrame();
        seen[0] = s_local.Value;
    }

    /// <summary>
    /// A host with an AsyncLocal of its own (so the phase is not on the default context): a task suspended under
    /// SuppressFlow (no captured context) sets the AsyncLocal when it resumes. It must reach neither the next item
    /// nor the host.
    /// </summary>
    [Fact]
    public async Task Frame_HostWithValues_ContextFreeItemWrites_DoNotLeakToNextItemOrHost()
    {
        string?[] seen = { "not run" };
        string? hostAfter = "not run";
        await TestUtil.WithTimeout(OnDefaultContextThread(() =>
        {
            var loop = new FrameLoop();
            loop.RunFrame();
            SpindleTask setter, recorder;
            using (ExecutionContext.SuppressFlow())
            {
                setter = SetAfterNextFrame(loop, "leak");
                recorder = RecordAfterNextFrame(loop, seen);
            }
            s_local.Value = "host";
            loop.RunFrame();
            hostAfter = s_local.Value;
            setter.GetAwaiter().GetResult();
            recorder.GetAwaiter().GetResult();
        }));

        Assert.Null(seen[0]); // the default context: neither the other item's value nor the host's
        Assert.Equal("host", hostAfter);
    }

    /// <summary>As above, with a host that runs the frame while it suppresses flow (Capture() is null there).</summary>
    [Fact]
    public async Task Frame_HostSuppressingFlow_ContextFreeItemWrites_DoNotLeakToNextItemOrHost()
    {
        string?[] seen = { "not run" };
        string? hostAfter = "not run";
        await TestUtil.WithTimeout(OnDefaultContextThread(() =>
        {
            var loop = new FrameLoop();
            loop.RunFrame();
            SpindleTask setter, recorder;
            using (ExecutionContext.SuppressFlow())
            {
                setter = SetAfterNextFrame(loop, "leak");
                recorder = RecordAfterNextFrame(loop, seen);
                loop.RunFrame();
            }
            hostAfter = s_local.Value;
            setter.GetAwaiter().GetResult();
            recorder.GetAwaiter().GetResult();
        }));

        Assert.Null(seen[0]); // the default context: neither the other item's value nor the host's
        Assert.Null(hostAfter);
    }

    /// <summary>
    /// A worker helps while it waits inside a SuppressFlow block (GetResult on a pending task): the item it runs carries
    /// no context and writes an AsyncLocal. The write must not stay in the waiting code.
    /// </summary>
    [Fact]
    public async Task Helping_WaiterSuppressingFlow_ContextFreeItemWrites_DoNotLeakIntoTheWaiter()
    {
        string? seenByWaiter = await TestUtil.WithTimeout(Spindle.Run(() =>
        {
            s_local.Value = "waiter";
            using (ExecutionContext.SuppressFlow())
            {
                SpindleTask inner = Spindle.Run(() => { s_local.Value = "flow-suppressed item"; });
                inner.GetAwaiter().GetResult(); // helps: runs the item from its own run-next slot
            }
            return s_local.Value;
        }));

        Assert.Equal("waiter", seenByWaiter);
    }
}

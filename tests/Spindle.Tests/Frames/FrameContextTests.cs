using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Frames;

/// <summary>
/// ExecutionContext across a frame phase: what one resumed task sets in an AsyncLocal never reaches the next task the
/// phase runs, nor the host thread that runs the frame; a host thread with AsyncLocal values of its own keeps them, and
/// does not lend them to the tasks. Each test runs on a fresh thread, so that its context is the one it sets up.
/// </summary>
public sealed class FrameContextTests
{
    private static readonly AsyncLocal<string?> s_local = new();

    /// <summary>Runs <paramref name="body"/> on a new thread that starts in the default context (no AsyncLocal values).</summary>
    private static Task OnDefaultContextThread(Action body)
    {
        using (ExecutionContext.SuppressFlow())
        {
            return TestUtil.RunOnThread(body, "frame-context");
        }
    }

    private static async SpindleTask SetAfterEachFrame(FrameLoop loop, string value, int frames)
    {
        for (int f = 0; f < frames; f++)
        {
            await loop.NextFrame();
            s_local.Value = value + f;
        }
    }

    private static async SpindleTask RecordAfterEachFrame(FrameLoop loop, string?[] seen)
    {
        for (int f = 0; f < seen.Length; f++)
        {
            await loop.NextFrame();
            seen[f] = s_local.Value;
        }
    }

    /// <summary>
    /// On a fresh default-context thread: a task that sets the AsyncLocal after each frame, queued before a task that
    /// records it (both start in the default context); then the host sets <paramref name="hostValue"/> and runs the
    /// frames, recording what it sees after each.
    /// </summary>
    private static async Task<(string?[] Seen, string?[] HostSaw)> SetterThenRecorder(int frames, string? hostValue)
    {
        string?[] seen = new string?[frames];
        string?[] hostSaw = new string?[frames];
        await TestUtil.WithTimeout(OnDefaultContextThread(() =>
        {
            var loop = new FrameLoop();
            loop.RunFrame();
            SpindleTask setter = SetAfterEachFrame(loop, "set by the first task, frame ", frames); // queued first: runs first
            SpindleTask recorder = RecordAfterEachFrame(loop, seen);
            if (hostValue is not null)
            {
                s_local.Value = hostValue;
            }
            for (int f = 0; f < frames; f++)
            {
                loop.RunFrame();
                hostSaw[f] = s_local.Value;
            }
            setter.GetAwaiter().GetResult();
            recorder.GetAwaiter().GetResult();
        }));
        return (seen, hostSaw);
    }

    [Fact]
    public async Task ATaskSettingAnAsyncLocal_DoesNotLeakToTheNextTaskOrTheHost()
    {
        (string?[] seen, string?[] hostSaw) = await SetterThenRecorder(frames: 5, hostValue: null);

        Assert.All(seen, Assert.Null);
        Assert.All(hostSaw, Assert.Null);
    }

    [Fact]
    public async Task AHostWithItsOwnAsyncLocal_KeepsIt_AndTasksStartedElsewhereDoNotSeeIt()
    {
        (string?[] seen, string?[] hostSaw) = await SetterThenRecorder(frames: 3, hostValue: "host");

        Assert.All(seen, Assert.Null);
        Assert.All(hostSaw, v => Assert.Equal("host", v));
    }

    [Fact]
    public async Task ATaskStartedWithAnAsyncLocal_SeesItOnEveryFrame_AndOnlyIt()
    {
        string?[] withValue = new string?[3];
        string?[] without = new string?[3];
        await TestUtil.WithTimeout(OnDefaultContextThread(() =>
        {
            var loop = new FrameLoop();
            loop.RunFrame();
            s_local.Value = "captured";
            SpindleTask a = RecordAfterEachFrame(loop, withValue);
            s_local.Value = null;
            SpindleTask b = RecordAfterEachFrame(loop, without);
            loop.RunFrames(3);
            a.GetAwaiter().GetResult();
            b.GetAwaiter().GetResult();
        }));

        Assert.All(withValue, v => Assert.Equal("captured", v));
        Assert.All(without, Assert.Null);
    }

    private sealed class MarkerSyncContext : SynchronizationContext
    {
    }

    private sealed class HostSyncContext : SynchronizationContext
    {
    }

    private static async SpindleTask InstallAfterNextFrame(FrameLoop loop)
    {
        await loop.NextFrame();
        SynchronizationContext.SetSynchronizationContext(new MarkerSyncContext()); // and suspends, leaving it installed
        await loop.NextFrame();
    }

    private static async SpindleTask RecordSyncAfterNextFrame(FrameLoop loop, SynchronizationContext?[] seen)
    {
        await loop.NextFrame();
        seen[0] = SynchronizationContext.Current;
    }

    /// <summary>
    /// A task resumed by a phase installs a SynchronizationContext and suspends, leaving it on the loop thread. The next
    /// task in the same phase, and the host after the frame, must find the host's own (none, or the host's), as a worker
    /// puts its own back after each item and as ExecutionContext.Run does for the BCL: a BCL await in the next task would
    /// otherwise post its continuation to the leftover context. The host is in the default context, has an AsyncLocal of
    /// its own (the phase then runs inside ExecutionContext.Run), or has its own SynchronizationContext.
    /// </summary>
    [Theory]
    [InlineData(false, false)]
    [InlineData(true, false)]
    [InlineData(false, true)]
    public async Task ATaskThatInstallsASynchronizationContext_DoesNotLeaveItForTheNextTaskOrTheHost(bool hostValue, bool hostSync)
    {
        var seen = new SynchronizationContext?[1];
        SynchronizationContext? hostSaw = null;
        SynchronizationContext? host = hostSync ? new HostSyncContext() : null;
        await TestUtil.WithTimeout(OnDefaultContextThread(() =>
        {
            var loop = new FrameLoop();
            loop.RunFrame();
            SpindleTask installer = InstallAfterNextFrame(loop); // queued first: runs first
            SpindleTask recorder = RecordSyncAfterNextFrame(loop, seen);
            if (hostValue)
            {
                s_local.Value = "host";
            }
            SynchronizationContext.SetSynchronizationContext(host);
            loop.RunFrame();
            hostSaw = SynchronizationContext.Current;
            SynchronizationContext.SetSynchronizationContext(null);
            loop.RunFrame();
            installer.GetAwaiter().GetResult();
            recorder.GetAwaiter().GetResult();
        }));

        Assert.Same(host, seen[0]);
        Assert.Same(host, hostSaw);
    }
    private static SpindleTask TimedWait(FrameLoop loop, bool frames)
        => frames ? loop.DelayFrame(1) : loop.Delay(TimeSpan.FromMilliseconds(1));

    private static async SpindleTask InstallAfterTimedWait(FrameLoop loop, bool frames)
    {
        await TimedWait(loop, frames);
        SynchronizationContext.SetSynchronizationContext(new MarkerSyncContext()); // and suspends, leaving it installed
        await TimedWait(loop, frames);
    }

    private static async SpindleTask RecordSyncAfterTimedWait(FrameLoop loop, bool frames, SynchronizationContext?[] seen)
    {
        await TimedWait(loop, frames);
        seen[0] = SynchronizationContext.Current;
    }

    /// <summary>
    /// As above, for waits that expire in one of the loop's timer wheels (a loop-time delay, a frame count): the wheel's
    /// pass only collects the expired waits, and the phase resumes them, so a context the first resumed task leaves
    /// behind is taken down before the next one and before the host gets its thread back.
    /// </summary>
    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task ATaskResumedByATimedWait_ThatInstallsASynchronizationContext_DoesNotLeaveItForTheNextTaskOrTheHost(bool frames)
    {
        var seen = new SynchronizationContext?[1];
        SynchronizationContext? hostSaw = null;
        bool recordedInThatFrame = false;
        await TestUtil.WithTimeout(OnDefaultContextThread(() =>
        {
            var loop = new FrameLoop();
            loop.RunFrame();
            SpindleTask installer = InstallAfterTimedWait(loop, frames); // started first: expires and resumes first
            SpindleTask recorder = RecordSyncAfterTimedWait(loop, frames, seen);
            loop.RunFrame();
            hostSaw = SynchronizationContext.Current;
            recordedInThatFrame = recorder.IsCompleted;
            SynchronizationContext.SetSynchronizationContext(null);
            loop.RunFrames(2);
            installer.GetAwaiter().GetResult();
            recorder.GetAwaiter().GetResult();
        }));

        Assert.True(recordedInThatFrame, "both waits expire in the same frame");
        Assert.Null(seen[0]);
        Assert.Null(hostSaw);
    }
}

using System;
using System.Threading.Tasks;
using BenchmarkDotNet.Attributes;
using BenchmarkDotNet.Configs;
using Microsoft.Extensions.Time.Testing;

namespace SpindleLib.Micro;

/// <summary>
/// A task's timeout, the way an actor's ask waits for its reply: an async method awaits the reply with a timeout, and
/// either the reply comes in time (<c>in-time</c>) or the timeout passes first (<c>timed-out</c>). WithTimeout's timeout
/// is a <see cref="TimeoutException"/> the method catches; TryWithTimeout's is a false. Time is a manual clock advanced
/// by the timeout (a <c>FakeTimeProvider</c> for the BCL's <c>Task.WaitAsync</c>), so each operation is one wait, one
/// completion and one read, all on this thread, with no sleeping. The BCL is the baseline.
/// <c>dotnet run -c Release --project bench/Spindle.Micro -- --filter '*TimeoutBenchmarks*'</c>.
/// </summary>
[MemoryDiagnoser]
[GroupBenchmarksBy(BenchmarkLogicalGroupRule.ByCategory)]
[CategoriesColumn]
public class TimeoutBenchmarks
{
    private static readonly TimeSpan Timeout = TimeSpan.FromMilliseconds(1);

    private readonly ManualClock _clock = new();
    private readonly FakeTimeProvider _fakeTime = new();
    private readonly Promise<int> _reply = new();
    private TimerWheel _wheel = null!;

    [GlobalSetup]
    public void Setup() => _wheel = new TimerWheel(_clock);

    [GlobalCleanup]
    public void Cleanup() => _wheel.Dispose();

    [BenchmarkCategory("timed-out"), Benchmark(Baseline = true)]
    public int TimedOut_Task_WaitAsync_Catch() => AskTask(timesOut: true);

    [BenchmarkCategory("timed-out"), Benchmark]
    public int TimedOut_Spindle_WithTimeout_Catch() => AskSpindle(quiet: false, timesOut: true);

    [BenchmarkCategory("timed-out"), Benchmark]
    public int TimedOut_Spindle_TryWithTimeout() => AskSpindle(quiet: true, timesOut: true);

    [BenchmarkCategory("in-time"), Benchmark(Baseline = true)]
    public int InTime_Task_WaitAsync_Catch() => AskTask(timesOut: false);

    [BenchmarkCategory("in-time"), Benchmark]
    public int InTime_Spindle_WithTimeout_Catch() => AskSpindle(quiet: false, timesOut: false);

    [BenchmarkCategory("in-time"), Benchmark]
    public int InTime_Spindle_TryWithTimeout() => AskSpindle(quiet: true, timesOut: false);

    /// <summary>One ask with the BCL: a new TaskCompletionSource, its task's WaitAsync, then the reply or the timeout.</summary>
    private int AskTask(bool timesOut)
    {
        var reply = new TaskCompletionSource<int>();
        Task<int> ask = AskWaitAsync(reply.Task, _fakeTime);
        if (timesOut)
        {
            _fakeTime.Advance(Timeout);
        }
        else
        {
            reply.SetResult(1);
        }
        return ask.GetAwaiter().GetResult();
    }

    /// <summary>One ask with Spindle: the promise reset, a timed wait of either form, then the reply or the timeout.</summary>
    private int AskSpindle(bool quiet, bool timesOut)
    {
        _reply.Reset();
        SpindleTask<int> ask = quiet ? AskTryWithTimeout(_reply.Task, _wheel) : AskWithTimeout(_reply.Task, _wheel);
        if (timesOut)
        {
            _clock.Advance(Timeout);
        }
        else
        {
            _reply.SetResult(1);
        }
        return ask.GetAwaiter().GetResult();
    }

    /// <summary>The reply, or -1 when it did not come in time.</summary>
    private static async Task<int> AskWaitAsync(Task<int> reply, TimeProvider time)
    {
        try
        {
            return await reply.WaitAsync(Timeout, time).ConfigureAwait(false);
        }
        catch (TimeoutException)
        {
            return -1;
        }
    }

    private static async SpindleTask<int> AskWithTimeout(SpindleTask<int> reply, TimerWheel wheel)
    {
        try
        {
            return await reply.WithTimeout(Timeout, wheel);
        }
        catch (TimeoutException)
        {
            return -1;
        }
    }

    private static async SpindleTask<int> AskTryWithTimeout(SpindleTask<int> reply, TimerWheel wheel)
    {
        (bool answered, int value) = await reply.TryWithTimeout(Timeout, wheel);
        return answered ? value : -1;
    }
}

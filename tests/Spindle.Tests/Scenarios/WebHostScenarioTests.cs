using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Scenarios;

/// <summary>
/// What an ASP.NET Core service relies on when its handlers await Spindle (a twenty-fifth user's review,
/// docs/decisions.md section 53). Minimal-API handlers cannot return a Spindle task, so they are <c>async Task</c>
/// methods (the BCL's builder) awaiting one; the request's token is <c>HttpContext.RequestAborted</c>, which Kestrel
/// cancels when the client goes away, and the exception handler and developer exception page treat an
/// <see cref="OperationCanceledException"/> thrown once that token is cancelled as an aborted request, not an error.
/// A long-poll endpoint awaits the current generation of a broadcast (a <c>Promise.Task.Preserve()</c> shared by every
/// waiter) with a timeout and the request's token; a background service runs a periodic timer until the host's stopping
/// token. These tests model those handlers without a web server (the test project does not reference the web SDK); the
/// review's scratch service ran the same code under Kestrel.
/// </summary>
public sealed class WebHostScenarioTests
{
    private static readonly TimeSpan s_pollTimeout = TimeSpan.FromSeconds(60);

    /// <summary>A long-poll handler, written as ASP.NET Core's handlers are: an <c>async Task</c> awaiting Spindle.</summary>
    private static async Task<long?> Poll(SpindleTask<long> generation, TimerWheel wheel, CancellationToken requestAborted)
    {
        var (published, value) = await generation.TryWithTimeout(s_pollTimeout, wheel, requestAborted);
        return published ? value : null; // null: the handler answers 204 and the client polls again
    }

    [Fact]
    public async Task LongPolls_AbortedClientsLetGoOfTheBroadcast_WithTheirRequestsToken_TheOthersGetThePublish()
    {
        const int Polls = 1_000;
        using var wheel = new TimerWheel(new ManualClock());
        var generation = new Promise<long>();
        SpindleTask<long> shared = generation.Task.Preserve();
        var requests = new CancellationTokenSource[Polls];
        var handlers = new Task<long?>[Polls];
        for (int i = 0; i < Polls; i++)
        {
            requests[i] = new CancellationTokenSource();
            handlers[i] = Poll(shared, wheel, requests[i].Token);
        }
        Assert.Equal(Polls, WaiterCount(shared));
        Assert.Equal(Polls, wheel.PendingCount);

        // Every other client disconnects: Kestrel cancels its RequestAborted.
        for (int i = 1; i < Polls; i += 2)
        {
            requests[i].Cancel();
        }
        for (int i = 1; i < Polls; i += 2)
        {
            Assert.True(handlers[i].IsCanceled, $"poll {i}: {handlers[i].Status}");
            var e = await Assert.ThrowsAnyAsync<OperationCanceledException>(() => handlers[i]);
            Assert.Equal(requests[i].Token, e.CancellationToken); // `catch (OperationCanceledException e) when (e.CancellationToken == ctx.RequestAborted)`
        }
        Assert.Equal(Polls / 2, WaiterCount(shared)); // an aborted poll holds nothing of the broadcast
        Assert.Equal(Polls / 2, wheel.PendingCount); // nor a timer

        generation.SetResult(42);
        for (int i = 0; i < Polls; i += 2)
        {
            Assert.True(handlers[i].IsCompletedSuccessfully, $"poll {i}: {handlers[i].Status}");
            Assert.Equal(42, await handlers[i]);
        }
        Assert.Equal(0, WaiterCount(shared));
        Assert.Equal(0, wheel.PendingCount);
        foreach (var r in requests)
        {
            r.Dispose();
        }
    }

    [Fact]
    public async Task LongPolls_NothingPublished_TimeOutAsAValue_AndLeaveNothingRegistered()
    {
        const int Polls = 200;
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var generation = new Promise<long>();
        SpindleTask<long> shared = generation.Task.Preserve();
        using var request = new CancellationTokenSource();
        var handlers = new Task<long?>[Polls];
        for (int i = 0; i < Polls; i++)
        {
            handlers[i] = Poll(shared, wheel, request.Token);
        }
        clock.Advance(s_pollTimeout - TimeSpan.FromMilliseconds(1));
        Assert.All(handlers, h => Assert.False(h.IsCompleted));
        clock.Advance(TimeSpan.FromMilliseconds(1));
        foreach (var h in handlers)
        {
            Assert.True(h.IsCompletedSuccessfully);
            Assert.Null(await h);
        }
        Assert.Equal(0, WaiterCount(shared));
        Assert.Equal(0, wheel.PendingCount);

        // The next poll of the same generation still gets its publish.
        Task<long?> next = Poll(shared, wheel, request.Token);
        generation.SetResult(7);
        Assert.Equal(7, await next);
    }

    [Fact]
    public async Task MailboxWait_AbortedRequest_ThrowsWithItsToken_AndTheSignalKeepsALaterSet()
    {
        using var wheel = new TimerWheel(new ManualClock());
        var inbox = new Signal();
        using var request = new CancellationTokenSource();
        static async Task<bool> Wait(Signal inbox, TimerWheel wheel, CancellationToken aborted)
            => await inbox.WaitAsync(TimeSpan.FromSeconds(30), wheel, aborted);

        Task<bool> handler = Wait(inbox, wheel, request.Token);
        Assert.True(inbox.HasWaiter);
        request.Cancel();
        var e = await Assert.ThrowsAnyAsync<OperationCanceledException>(() => handler);
        Assert.Equal(request.Token, e.CancellationToken);
        Assert.False(inbox.HasWaiter);
        Assert.Equal(0, wheel.PendingCount);

        inbox.Set(); // a message that arrives after the client left waits for its next poll
        Assert.True(await Wait(inbox, wheel, CancellationToken.None));
    }

    [Fact]
    public async Task BackgroundServiceLoop_StoppingToken_EndsItInsideCancel_AsACanceledTaskCarryingThatToken()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        using var stopping = new CancellationTokenSource();
        int ticks = 0;
        bool ended = false;
        async SpindleTask Loop(CancellationToken token)
        {
            using var timer = new SpindlePeriodicTimer(TimeSpan.FromMilliseconds(5), wheel);
            try
            {
                while (await timer.WaitForNextTickAsync(token))
                {
                    ticks++;
                }
            }
            finally
            {
                ended = true;
            }
        }

        // BackgroundService.ExecuteAsync returns a Task: `=> Loop(stoppingToken).AsTask()`.
        Task execute = Loop(stopping.Token).AsTask();
        clock.Advance(TimeSpan.FromMilliseconds(50));
        Assert.Equal(10, ticks);
        stopping.Cancel(); // the host's StopAsync
        Assert.True(ended);
        Assert.True(execute.IsCanceled, execute.Status.ToString()); // canceled, not faulted: the host logs no error
        var e = await Assert.ThrowsAnyAsync<OperationCanceledException>(() => execute);
        Assert.Equal(stopping.Token, e.CancellationToken);
        Assert.Equal(0, wheel.PendingCount);
        clock.Advance(TimeSpan.FromMilliseconds(50));
        Assert.Equal(10, ticks);
    }

    private static int WaiterCount<T>(SpindleTask<T> preserved)
        => ((PreservedSource<T>)preserved._source!).WaiterCountForTests;
}

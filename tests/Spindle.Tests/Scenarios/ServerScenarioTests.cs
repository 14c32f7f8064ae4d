using System;
using System.Collections.Concurrent;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Scenarios;

/// <summary>
/// A server, as its developer writes it from the README: thousands of sessions, each an async loop draining its queue
/// when its <see cref="Signal"/> is set, with an idle timeout (<c>inbox.WaitAsync(idle, wheel)</c>), closed from outside
/// by its own token, a heartbeat per connection group on a periodic timer, a <see cref="TaskScope"/> per group, BCL awaits
/// inside the sessions, and a WhenAll over the groups' shutdown. Time is a <see cref="ManualClock"/>: only counts are
/// compared. Checks: no message lost (a set coalesces with one not yet taken, so the queue, not the sets, counts
/// messages), every session ends exactly once and for the expected reason, the wheel is empty after shutdown, and each
/// fault is reported exactly once.
/// </summary>
[Collection(SequentialCollection.Name)] // counts the process-wide UnobservedException reports
public sealed class ServerScenarioTests
{
    private const int Groups = 20;
    private const int PerGroup = 100;
    private const int Sessions = Groups * PerGroup;
    private const int MessagesPerSession = 10;
    private const int Poison = -1;
    private static readonly TimeSpan s_idle = TimeSpan.FromSeconds(1);
    private static readonly TimeSpan s_heartbeat = TimeSpan.FromMilliseconds(10);

    private sealed class SessionFault(int session) : Exception("session " + session + " failed on a poison message");

    private enum End { None, Idle, Closed, GroupCancelled, Faulted }

    private sealed class Server(TimerWheel wheel)
    {
        public readonly TimerWheel Wheel = wheel;
        public readonly Signal[] Inboxes = Enumerable.Range(0, Sessions).Select(i => new Signal(false, runContinuationsAsynchronously: i % 2 == 0)).ToArray();
        public readonly ConcurrentQueue<int>[] Queues = Enumerable.Range(0, Sessions).Select(_ => new ConcurrentQueue<int>()).ToArray();
        public readonly CancellationTokenSource[] Closers = Enumerable.Range(0, Sessions).Select(_ => new CancellationTokenSource()).ToArray();
        public readonly int[] Ends = new int[Sessions];
        public readonly End[] Reasons = new End[Sessions];
        public readonly long[] Heartbeats = new long[Groups];
        public readonly ConcurrentQueue<string> Errors = new();
        public long Sent;
        public long Handled;
        public long BclAwaits;

        public void Send(int session, int message)
        {
            Queues[session].Enqueue(message);
            Interlocked.Increment(ref Sent);
            Inboxes[session].Set();
        }

        public async SpindleTask Session(int id, CancellationToken scopeToken)
        {
            End reason = End.None;
            using var linked = CancellationTokenSource.CreateLinkedTokenSource(scopeToken, Closers[id].Token);
            try
            {
                while (true)
                {
                    if (!await Inboxes[id].WaitAsync(s_idle, Wheel, linked.Token))
                    {
                        reason = End.Idle;
                        return;
                    }
                    while (Queues[id].TryDequeue(out int message))
                    {
                        if (message == Poison)
                        {
                            reason = End.Faulted;
                            throw new SessionFault(id);
                        }
                        if (message % 4 == 0)
                        {
                            // BCL interop: a Task-returning API awaited inside a Spindle method, no ConfigureAwait.
                            int echoed = await Task.Run(() => message);
                            if (echoed != message)
                            {
                                Errors.Enqueue("session " + id + ": Task.Run echoed " + echoed);
                            }
                            Interlocked.Increment(ref BclAwaits);
                        }
                        Interlocked.Increment(ref Handled);
                    }
                }
            }
            catch (OperationCanceledException) when (Closers[id].IsCancellationRequested && !scopeToken.IsCancellationRequested)
            {
                reason = End.Closed; // closed from outside: not a failure of the group
            }
            catch (OperationCanceledException) when (scopeToken.IsCancellationRequested)
            {
                reason = End.GroupCancelled;
                throw;
            }
            finally
            {
                Reasons[id] = reason;
                Interlocked.Increment(ref Ends[id]);
            }
        }

        public async SpindleTask Heartbeat(int group, CancellationToken token)
        {
            using var timer = new SpindlePeriodicTimer(s_heartbeat, Wheel);
            while (await timer.WaitForNextTickAsync(token))
            {
                Interlocked.Increment(ref Heartbeats[group]);
            }
        }
    }

    [Fact]
    public async Task ThousandsOfSessions_WithIdleTimeoutsClosesFaultsAndHeartbeats_LoseAndRepeatNothing()
    {
        // What this scenario's own code reports on its own threads, and its sessions' own fault type wherever it is
        // reported (its sessions run on workers, which are nobody's own).
        var watch = UnobservedReports.Start(UnobservedReports.Own.Any(UnobservedReports.Own.ReportedOnTestThreads(), UnobservedReports.Own.Type<SessionFault>()));
        ConcurrentQueue<Exception> unobserved = watch.Reports;
        SpindleDiagnostics.TrackTasks = true;
        try
        {
            await TestUtil.WithTimeout(Serve(unobserved), 60);
            Assert.Empty(ScenarioSupport.TrackedIn(typeof(ServerScenarioTests))); // every session's box went back
        }
        finally
        {
            SpindleDiagnostics.TrackTasks = false;
            watch.Dispose();
        }
    }

    [Fact]
    public async Task BusyHeartbeat_MissedTicksCountAsOne()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var busy = new Promise();
        long beats = 0;
        using var stop = new CancellationTokenSource();

        async SpindleTask Heartbeat()
        {
            using var timer = new SpindlePeriodicTimer(s_heartbeat, wheel);
            while (await timer.WaitForNextTickAsync(stop.Token))
            {
                if (Interlocked.Increment(ref beats) == 1)
                {
                    await busy.Task; // the first beat's work outlasts five periods
                }
            }
        }

        SpindleTask heart = Heartbeat();
        clock.Advance(s_heartbeat);
        Assert.Equal(1, Interlocked.Read(ref beats));
        clock.Advance(5 * s_heartbeat); // ticks 2 to 6 pass while nobody waits
        busy.SetResult();               // the missed ticks count as one: the next wait returns at once, the one after waits
        Assert.Equal(2, Interlocked.Read(ref beats));
        clock.Advance(s_heartbeat);     // tick 7
        Assert.Equal(3, Interlocked.Read(ref beats));
        stop.Cancel();
        await Assert.ThrowsAsync<TaskCanceledException>(() => TestUtil.WithTimeout(heart));
        Assert.Equal(0, wheel.PendingCount);
    }

    private static async Task Serve(ConcurrentQueue<Exception> unobserved)
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var server = new Server(wheel);
        var groupCancel = Enumerable.Range(0, Groups).Select(_ => new CancellationTokenSource()).ToArray();
        var scopes = new TaskScope[Groups];
        for (int g = 0; g < Groups; g++)
        {
            scopes[g] = new TaskScope(groupCancel[g].Token);
            int group = g;
            scopes[g].Run(token => server.Heartbeat(group, token));
            for (int s = 0; s < PerGroup; s++)
            {
                int id = g * PerGroup + s;
                scopes[g].Run(token => server.Session(id, token));
            }
        }

        // Phase 1: a producer thread sends every session its messages, interleaved; every one is handled.
        await TestUtil.RunOnThread(() =>
        {
            for (int m = 1; m <= MessagesPerSession; m++)
            {
                for (int id = 0; id < Sessions; id++)
                {
                    server.Send(id, m);
                }
            }
        }, "producer");
        await WaitFor(() => Interlocked.Read(ref server.Handled) == Sessions * MessagesPerSession, "every message handled");
        Assert.Equal(Sessions * (MessagesPerSession / 4), Interlocked.Read(ref server.BclAwaits));
        Assert.Equal(Sessions + Groups, ScenarioSupport.TrackedIn(typeof(ServerScenarioTests)).Count); // each session and heartbeat waits

        // Heartbeats: ten periods, one Advance each: one tick per period per group.
        for (int i = 0; i < 10; i++)
        {
            clock.Advance(s_heartbeat);
        }
        await WaitFor(() => server.Heartbeats.All(h => Interlocked.Read(ref h) == 10), "ten heartbeats per group");

        // Phase 2: two poison messages in group 0: the group's scope fails with both (or the first; the second session may
        // be cancelled by the first failure before it reads its poison), and cancels its siblings.
        server.Send(3, Poison);
        await WaitFor(() => Volatile.Read(ref server.Ends[3]) == 1, "session 3 failed");
        Exception failure = await TestUtil.Catch(() => scopes[0].WaitAsync().AsTask()); // AsTask() handed to BCL code
        Assert.IsType<SessionFault>(failure);

        // Phase 3: every tenth session of the other groups is closed from outside by its own token.
        for (int id = PerGroup; id < Sessions; id += 10)
        {
            server.Closers[id].Cancel();
        }
        await WaitFor(() => Enumerable.Range(PerGroup, Sessions - PerGroup).Where(i => i % 10 == 0).All(i => Volatile.Read(ref server.Ends[i]) == 1), "closed sessions ended");

        // Phase 4: the idle timeout passes for everyone still open. The clock steps through each deadline on the way, and
        // a heartbeat resumes inline and waits again before the next one: it misses none of the hundred ticks.
        clock.Advance(s_idle);
        await WaitFor(() => server.Heartbeats.Skip(1).All(h => Interlocked.Read(ref h) == 110), () => "a hundred more heartbeats per open group: " + string.Join(",", server.Heartbeats));
        await WaitFor(() => Enumerable.Range(PerGroup, Sessions - PerGroup).All(i => Volatile.Read(ref server.Ends[i]) == 1), "idle sessions ended");

        // Phase 5: shutdown: cancel the groups (their heartbeats), and a WhenAll over the scopes' disposal.
        foreach (CancellationTokenSource cts in groupCancel)
        {
            cts.Cancel();
        }
        await SpindleTask.WhenAll(scopes.Select(s => s.DisposeAsync()));

        Assert.Empty(server.Errors);
        Assert.All(server.Ends, e => Assert.Equal(1, e));
        for (int id = 0; id < Sessions; id++)
        {
            End expected = id == 3 ? End.Faulted : id < PerGroup ? End.GroupCancelled : id % 10 == 0 ? End.Closed : End.Idle;
            Assert.True(expected == server.Reasons[id], "session " + id + " ended " + server.Reasons[id] + ", expected " + expected);
        }
        Assert.Equal(Interlocked.Read(ref server.Sent) - 1, Interlocked.Read(ref server.Handled)); // all but the poison
        Assert.All(server.Inboxes, s => Assert.False(s.HasWaiter));
        Assert.Equal(0, wheel.PendingCount);
        Assert.Empty(unobserved);
    }

    private static Task WaitFor(Func<bool> condition, string what) => WaitFor(condition, () => what);

    // The suite's own bound (a deadline that only proves a hang), not a tighter one of its own: it used 10 s, which a
    // loaded 2-core machine may need (found by stop 34's flake audit, never seen to fail).
    private static Task WaitFor(Func<bool> condition, Func<string> what) => Task.Run(() => TestUtil.SpinUntil(condition, what));
}

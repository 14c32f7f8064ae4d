using System;
using System.Collections.Concurrent;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Scenarios;

/// <summary>
/// A game whose loop runs on its own (<see cref="FrameLoop.Run"/>), with entity behaviours written as plain BCL async
/// code too (<c>Task.Yield</c>, <c>Task.Delay</c>, awaited Spindle tasks through AsValueTask), spawned from the test thread
/// with <c>Spindle.SwitchTo(loop)</c>, each in a scope of its own. Checks: BCL awaits resume on the loop (its
/// SynchronizationContext), every behaviour ends once, and teardown works: entities destroyed, then the loop stopped.
/// </summary>
public sealed class RunLoopScenarioTests
{
    private const int Entities = 200;

    [Fact]
    public async Task BclAndSpindleBehaviours_UnderRun_ResumeOnTheLoop_AndTearDown()
    {
        var loop = new FrameLoop();
        using var stopLoop = new CancellationTokenSource();
        Task running = loop.Run(1000, stopLoop.Token);
        var errors = new ConcurrentQueue<string>();
        var ends = new int[Entities];
        var scopes = new TaskScope[Entities];
        var destroy = new CancellationTokenSource[Entities];
        long frames = 0;

        void Check(bool ok, int id, string where)
        {
            if (!ok)
            {
                errors.Enqueue("entity " + id + " off the loop " + where);
            }
        }

        async SpindleTask SpindleBehaviour(int id, CancellationToken token)
        {
            try
            {
                while (true)
                {
                    await loop.NextFrame(token);
                    Check(loop.IsLoopThread, id, "after NextFrame");
                    await Task.Delay(1, token);
                    Check(loop.IsLoopThread, id, "after Task.Delay (the loop's SynchronizationContext)");
                    Interlocked.Increment(ref frames);
                }
            }
            finally
            {
                Interlocked.Increment(ref ends[id]);
            }
        }

        async SpindleTask Spawn()
        {
            await Spindle.SwitchTo(loop);
            for (int id = 0; id < Entities; id++)
            {
                destroy[id] = new CancellationTokenSource();
                scopes[id] = new TaskScope(destroy[id].Token);
                int entity = id;
                scopes[id].Run(token => SpindleBehaviour(entity, token));
            }
        }

        await TestUtil.WithTimeout(Spawn());
        await TestUtil.WithTimeout(Task.Run(() => TestUtil.SpinUntil(() => Interlocked.Read(ref frames) >= 4 * Entities)));

        // Teardown: destroy every entity (from this thread), wait for their scopes, then stop the loop.
        foreach (CancellationTokenSource d in destroy)
        {
            d.Cancel();
        }
        foreach (TaskScope scope in scopes)
        {
            await TestUtil.WithTimeout(scope.DisposeAsync().AsTask());
        }
        stopLoop.Cancel();
        await TestUtil.WithTimeout(running);

        Assert.Empty(errors);
        Assert.All(ends, e => Assert.Equal(1, e));
    }
}

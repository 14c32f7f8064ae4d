using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Scenarios;

/// <summary>
/// A game, as its developer writes it from the README: a frame loop run by the test thread, hundreds of entity
/// behaviours as async methods (frame awaits, loop delays, WaitUntil raced with a frame timeout in a WhenAny, hops to the
/// workers for a job or a parallel-for and back), entities spawned and destroyed mid-frame, each with its own token and
/// TaskScope. Counts only: every resume on the right thread, nothing run after its entity's scope was disposed, no
/// unexpected unobserved fault, nothing left in the loop, and the loop torn down cleanly.
/// </summary>
[Collection(SequentialCollection.Name)] // counts the process-wide UnobservedException reports
public sealed class GameScenarioTests
{
    private struct SumJob : IJob
    {
        public int[] Data;
        public long[] Result;

        public void Execute()
        {
            long sum = 0;
            foreach (int v in Data)
            {
                sum += v;
            }
            Result[0] = sum;
        }
    }

    private struct DoubleEach : IJobParallelFor
    {
        public int[] Data;

        public void Execute(int index) => Data[index] *= 2;
    }

    private static readonly AsyncLocal<int> s_entity = new();

    private sealed class World(FrameLoop loop)
    {
        public readonly FrameLoop Loop = loop;
        public readonly ConcurrentQueue<string> Errors = new();
        public long Steps;
        public long JobsDone;
        public long Ended;
        public long AfterDispose;
        public bool Flag;

        public void Check(bool condition, string what)
        {
            if (!condition)
            {
                Errors.Enqueue(what + " at " + Loop.Where());
            }
        }
    }

    private sealed class Entity(int id, World world)
    {
        public readonly CancellationTokenSource Cts = new();
        public TaskScope Scope = null!;
        public volatile bool Disposed;
        public int Id => id;

        public void Spawn()
        {
            Scope = new TaskScope(Cts.Token);
            Scope.Run(Behave);
        }

        private async SpindleTask Behave(CancellationToken token)
        {
            FrameLoop loop = world.Loop;
            s_entity.Value = id + 1;
            try
            {
                for (int step = 0; ; step++)
                {
                    await loop.NextFrame(token);
                    Observe("after NextFrame");
                    switch ((step + id) % 5)
                    {
                        case 0:
                            await loop.DelayFrame(1 + id % 3, token);
                            Observe("after DelayFrame");
                            break;
                        case 1:
                            await loop.Delay(TimeSpan.FromMilliseconds(15), token);
                            Observe("after Delay");
                            break;
                        case 2:
                            int winner = await SpindleTask.WhenAny(
                                loop.WaitUntil(world, static w => w.Flag, token),
                                loop.DelayFrame(3, token));
                            Observe("after WhenAny(WaitUntil, DelayFrame) won by " + winner);
                            break;
                        case 3:
                        {
                            await Spindle.SwitchToWorker();
                            var data = new int[64];
                            for (int i = 0; i < data.Length; i++)
                            {
                                data[i] = i;
                            }
                            JobHandle doubled = new DoubleEach { Data = data }.Schedule(data.Length, 8);
                            var result = new long[1];
                            await new SumJob { Data = data, Result = result }.Schedule(doubled);
                            world.Check(result[0] == 2 * (63 * 64 / 2), "entity " + id + ": job sum " + result[0]);
                            Interlocked.Increment(ref world.JobsDone);
                            await Spindle.SwitchTo(loop, token);
                            Observe("after the job and SwitchTo");
                            break;
                        }
                        default:
                        {
                            int heavy = await Spindle.Run(() => id * 2, token);
                            world.Check(heavy == id * 2, "entity " + id + ": Spindle.Run returned " + heavy);
                            await Spindle.SwitchTo(loop, token);
                            Observe("after Spindle.Run and SwitchTo");
                            break;
                        }
                    }
                    Interlocked.Increment(ref world.Steps);
                }
            }
            finally
            {
                Interlocked.Increment(ref world.Ended);
            }
        }

        private void Observe(string where)
        {
            world.Check(world.Loop.IsLoopThread, "entity " + id + " resumed off the loop thread " + where);
            world.Check(s_entity.Value == id + 1, "entity " + id + " lost its AsyncLocal (" + s_entity.Value + ") " + where);
            if (Disposed)
            {
                Interlocked.Increment(ref world.AfterDispose);
            }
        }
    }

    [Fact]
    public async Task Entities_SpawnedAndDestroyedMidFrame_ResumeOnTheLoopAndStopWithTheirScope()
    {
        // What this scenario's own code reports on its own thread, the game loop's (the entities run there).
        var watch = UnobservedReports.Start(UnobservedReports.Own.ReportedOnTestThreads());
        ConcurrentQueue<Exception> unobserved = watch.Reports;
        SpindleDiagnostics.TrackTasks = true;
        try
        {
            await TestUtil.WithTimeout(TestUtil.RunOnThread(() => Play(unobserved), "game loop"));
            Assert.Empty(ScenarioSupport.TrackedIn(typeof(GameScenarioTests)));
        }
        finally
        {
            SpindleDiagnostics.TrackTasks = false;
            watch.Dispose();
        }
    }

    [Fact]
    public async Task ManyRoundsOfEntities_LeaveNoTaskBehind()
    {
        // What this scenario's own code reports on its own thread, the game loop's (the entities run there).
        var watch = UnobservedReports.Start(UnobservedReports.Own.ReportedOnTestThreads());
        ConcurrentQueue<Exception> unobserved = watch.Reports;
        SpindleDiagnostics.TrackTasks = true;
        try
        {
            // Each round is one whole scenario, which the suite's bound covers on a loaded machine (its own waits are bounded
            // too): one bound for all five timed out in a full run beside two CPU hogs, with every round making progress.
            const int Rounds = 5;
            await TestUtil.WithTimeout(TestUtil.RunOnThread(() =>
            {
                for (int round = 0; round < Rounds; round++)
                {
                    Play(unobserved);
                    Assert.Empty(ScenarioSupport.TrackedIn(typeof(GameScenarioTests))); // each round's boxes went back
                }
            }, "game loop"), Rounds * TestUtil.DefaultTimeoutSeconds);
        }
        finally
        {
            SpindleDiagnostics.TrackTasks = false;
            watch.Dispose();
        }
    }

    private static void Play(ConcurrentQueue<Exception> unobserved)
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        var world = new World(loop);
        var live = new List<Entity>();
        var disposals = new List<(Entity Entity, Task Done)>();
        int spawned = 0;
        var killer = new Random(1234);

        // The destroyer: a behaviour of its own, which destroys entities in the middle of Update.
        int toDestroy = 0;
        async SpindleTask Destroyer()
        {
            while (true)
            {
                await loop.NextFrame();
                for (; toDestroy > 0 && live.Count > 0; toDestroy--)
                {
                    Entity victim = live[killer.Next(live.Count)];
                    live.Remove(victim);
                    victim.Cts.Cancel();
                    disposals.Add((victim, DisposeAndMark(victim)));
                }
                if (toDestroy < 0)
                {
                    return;
                }
            }
        }

        static async Task DisposeAndMark(Entity e)
        {
            await e.Scope.DisposeAsync();
            e.Disposed = true;
        }

        SpindleTask destroyer = Destroyer();
        for (int frame = 0; frame < 300; frame++)
        {
            if (frame < 200)
            {
                for (int i = 0; i < 4; i++)
                {
                    var e = new Entity(spawned++, world);
                    e.Spawn();
                    live.Add(e);
                }
                toDestroy = 3;
            }
            else
            {
                toDestroy = live.Count;
            }
            world.Flag = frame % 7 == 0;
            loop.RunFrame();
            Thread.Yield();
            if (frame == 199)
            {
                // Before the teardown, the entities have made progress: more steps than entities, and jobs done. Frames run
                // back to back, and a step may wait for 15 ms of clock or a worker's hop, so on a loaded machine 200 frames
                // were not always enough (748 steps for 800 entities, once): frames go on, without spawning, until so.
                loop.RunUntil(() => Interlocked.Read(ref world.Steps) > spawned && Interlocked.Read(ref world.JobsDone) > 0,
                    TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds));
            }
        }
        toDestroy = -1;
        loop.RunUntil(() => destroyer.IsCompleted, TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds));
        destroyer.GetAwaiter().GetResult();
        loop.RunUntil(() => disposals.TrueForAll(d => d.Done.IsCompleted), TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds));

        Assert.Empty(live);
        Assert.Equal(spawned, disposals.Count);
        foreach ((Entity e, Task done) in disposals)
        {
            done.GetAwaiter().GetResult(); // a destroyed entity's scope ends without a failure
            Assert.Equal(0, e.Scope.RunningChildren);
        }
        Assert.Equal(spawned, Interlocked.Read(ref world.Ended));
        Assert.Empty(world.Errors);
        Assert.Equal(0, Interlocked.Read(ref world.AfterDispose));
        Assert.True(world.JobsDone > 0 && world.Steps > spawned, world.JobsDone + " jobs, " + world.Steps + " steps");
        Assert.Empty(unobserved);

        // Torn down: nothing is waiting in the loop any more, so more frames run nothing and the loop can be dropped.
        long steps = Interlocked.Read(ref world.Steps);
        loop.RunFrames(20);
        Assert.Equal(steps, Interlocked.Read(ref world.Steps));
    }
}

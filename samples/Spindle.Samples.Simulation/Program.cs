using System;
using System.Diagnostics;
using System.Threading;
using SpindleLib;

namespace SpindleLib.Samples.Simulation;

/// <summary>
/// A headless simulation: 100,000 entities, each an async behaviour on one <see cref="FrameLoop"/>. An entity wanders
/// (moving once per frame with NextFrame), rests (a Delay in scaled loop time), then waits until its energy is back
/// (WaitUntil, with the entity as the predicate's state, so no closure). The program drives the loop as a game engine
/// would, one RunFrame per tick at a fixed 60 frames per second, and prints each second how long frames took and what
/// they allocated.
/// </summary>
/// <remarks>
/// Usage: <c>dotnet run -c Release --project samples/Spindle.Samples.Simulation [-- --seconds 10] [--entities 100000]
/// [--fps 60] [--unpaced]</c>. <c>--unpaced</c> runs frames back to back, to see the most frames per second.
/// A loop can also run itself: <c>await loop.Run(60, token)</c> does the same on a thread of its own.
/// </remarks>
public static class Program
{
    public static int Main(string[] args)
    {
        int seconds = 10, entities = 100_000;
        double fps = 60;
        bool paced = true;
        for (int i = 0; i < args.Length; i++)
        {
            switch (args[i])
            {
                case "--seconds" when i + 1 < args.Length: seconds = int.Parse(args[++i]); break;
                case "--entities" when i + 1 < args.Length: entities = int.Parse(args[++i]); break;
                case "--fps" when i + 1 < args.Length: fps = double.Parse(args[++i]); break;
                case "--unpaced": paced = false; break;
                default:
                    Console.Error.WriteLine("usage: [--seconds N] [--entities N] [--fps N] [--unpaced]");
                    return 2;
            }
        }

        // Waits that use pooled objects (a Delay's timer and waiter, a WaitUntil's waiter) return them to Spindle's pools
        // and rent them again frames later. With this many entities, more than the default 4096 per type can be in
        // between at once; keep enough of them that a frame never has to allocate.
        SpindlePool.MaxRetainedPerType = Math.Max(SpindlePool.MaxRetainedPerType, entities);

        var loop = new FrameLoop { FixedDeltaTime = TimeSpan.FromSeconds(1 / fps) };
        loop.RunFrame(); // frame 1: this thread is now the loop thread, so the behaviours start straight in its queues
        var world = new World(loop);
        using var stop = new CancellationTokenSource();

        long startBytes = GC.GetAllocatedBytesForCurrentThread();
        long startTime = Stopwatch.GetTimestamp();
        for (int i = 0; i < entities; i++)
        {
            Behave(new Entity(world, (uint)i * 2654435761u + 1), stop.Token).Forget();
        }
        Console.WriteLine($"Spindle frame loop simulation: {entities:N0} entities at {fps:0.#} fps for {seconds} s ({(paced ? "paced" : "unpaced")})");
        Console.WriteLine($"started the {entities:N0} behaviours in {Stopwatch.GetElapsedTime(startTime).TotalMilliseconds:F1} ms, " +
                          $"{(GC.GetAllocatedBytesForCurrentThread() - startBytes) / (double)entities:F0} B each");
        Console.WriteLine("  time  frames  frame avg   frame max   alloc/frame  gen0  wandering   resting  recovering");

        long frameTicks = (long)(Stopwatch.Frequency / fps);
        long runStart = Stopwatch.GetTimestamp();
        long nextFrame = runStart;
        long nextReport = runStart + Stopwatch.Frequency;
        long end = runStart + seconds * Stopwatch.Frequency;
        var second = new Window();
        var total = new Window();
        while (Stopwatch.GetTimestamp() < end)
        {
            long allocBefore = GC.GetAllocatedBytesForCurrentThread();
            long t0 = Stopwatch.GetTimestamp();
            loop.RunFrame();
            long t1 = Stopwatch.GetTimestamp();
            long allocated = GC.GetAllocatedBytesForCurrentThread() - allocBefore;
            second.Add(t1 - t0, allocated);
            total.Add(t1 - t0, allocated);

            if (t1 >= nextReport)
            {
                Console.WriteLine($"{Stopwatch.GetElapsedTime(runStart).TotalSeconds,5:F0}s {second.Frames,7} {second.AverageMs,7:F3} ms {second.MaxMs,8:F3} ms " +
                                  $"{second.BytesPerFrame,9:F0} B {GC.CollectionCount(0),5} {world.Wandering,10:N0} {world.Resting,9:N0} {world.Recovering,11:N0}");
                second = new Window();
                nextReport += Stopwatch.Frequency;
            }
            if (paced)
            {
                nextFrame += frameTicks;
                long wait = nextFrame - Stopwatch.GetTimestamp();
                if (wait > 0)
                {
                    Thread.Sleep(TimeSpan.FromSeconds(wait / (double)Stopwatch.Frequency));
                }
                else if (-wait > 5 * frameTicks)
                {
                    nextFrame = Stopwatch.GetTimestamp(); // far behind: drop the backlog
                }
            }
        }

        // Stop: cancelling completes every pending Delay and WaitUntil at once; wanderers see the token at their next frame.
        stop.Cancel();
        loop.RunFrame();
        Console.WriteLine($"total: {total.Frames:N0} frames, frame avg {total.AverageMs:F3} ms, max {total.MaxMs:F3} ms, " +
                          $"{total.BytesPerFrame:F1} B allocated per frame, {world.Steps:N0} entity steps, loop time {loop.Time.TotalSeconds:F1} s; " +
                          $"{world.Wandering + world.Resting + world.Recovering:N0} behaviours still running one frame after the stop");
        return 0;
    }

    /// <summary>One entity's behaviour: wander, rest, recover, for as long as the simulation runs.</summary>
    private static async SpindleTask Behave(Entity e, CancellationToken stop)
    {
        FrameLoop loop = e.World.Loop;
        try
        {
            while (!stop.IsCancellationRequested)
            {
                // Wander: one step per frame, for 20 to 100 frames. NextFrame without a token queues this method's own
                // state-machine box: no object at all per frame.
                e.Enter(State.Wandering);
                int steps = 20 + (int)(e.Next() % 81);
                for (int i = 0; i < steps && !stop.IsCancellationRequested; i++)
                {
                    e.Step(loop.DeltaTime);
                    await loop.NextFrame();
                }

                // Rest for 0.2 to 2 s of scaled loop time: a timer in the loop's wheel, nothing polled per frame.
                e.Enter(State.Resting);
                await loop.Delay(TimeSpan.FromMilliseconds(200 + e.Next() % 1800), stop);

                // Recover: wait until energy (which comes back with loop time) is full. The entity is the predicate's
                // state, so the lambda captures nothing and nothing is allocated.
                e.Enter(State.Recovering);
                await loop.WaitUntil(e, static x => x.Energy >= 1.0, stop);
            }
        }
        catch (OperationCanceledException)
        {
            // The simulation stopped while this entity rested or recovered: the wait ended at once.
        }
        e.Enter(State.Stopped);
    }

    /// <summary>Frame times and allocations over a window of frames.</summary>
    private sealed class Window
    {
        public int Frames;
        private long _ticks;
        private long _maxTicks;
        private long _bytes;

        public void Add(long ticks, long bytes)
        {
            Frames++;
            _ticks += ticks;
            _maxTicks = Math.Max(_maxTicks, ticks);
            _bytes += bytes;
        }

        public double AverageMs => Frames == 0 ? 0 : _ticks * 1000.0 / Stopwatch.Frequency / Frames;

        public double MaxMs => _maxTicks * 1000.0 / Stopwatch.Frequency;

        public double BytesPerFrame => Frames == 0 ? 0 : _bytes / (double)Frames;
    }
}

internal enum State
{
    New,
    Wandering,
    Resting,
    Recovering,
    Stopped,
}

/// <summary>What the behaviours share: the loop, and counts by state (touched on the loop thread only).</summary>
internal sealed class World
{
    public World(FrameLoop loop) => Loop = loop;

    public FrameLoop Loop { get; }

    public int Wandering;
    public int Resting;
    public int Recovering;
    public long Steps;

    public void Move(State from, State to)
    {
        Count(from)--;
        Count(to)++;
    }

    private ref int Count(State state)
    {
        switch (state)
        {
            case State.Wandering: return ref Wandering;
            case State.Resting: return ref Resting;
            case State.Recovering: return ref Recovering;
            default: return ref _elsewhere;
        }
    }

    private int _elsewhere;
}

/// <summary>An entity: a position, a heading, energy spent by walking and regained by resting.</summary>
internal sealed class Entity
{
    private const double Speed = 3.0;          // units per second
    private const double EnergyPerStep = 0.01;
    private const double RecoveryPerSecond = 0.5;

    private uint _random;
    private double _x, _y, _dx, _dy, _heading, _energy = 1.0;

    public Entity(World world, uint seed)
    {
        World = world;
        _random = seed == 0 ? 1 : seed;
        _heading = Next() % 360 * Math.PI / 180;
        (_dy, _dx) = Math.SinCos(_heading);
    }

    public World World { get; }

    private State _state;

    /// <summary>When the current rest began (loop time), or MinValue while not resting.</summary>
    public TimeSpan RestStart = TimeSpan.MinValue;

    public void Enter(State state)
    {
        World.Move(_state, state);
        _state = state;
        if (state == State.Resting)
        {
            RestStart = World.Loop.Time;
        }
    }

    /// <summary>Energy now: what was left when the rest began, plus what the rest has brought back since.</summary>
    public double Energy => RestStart == TimeSpan.MinValue
        ? _energy
        : Math.Min(1.0, _energy + (World.Loop.Time - RestStart).TotalSeconds * RecoveryPerSecond);

    /// <summary>A small xorshift generator: one per entity, no shared state.</summary>
    public uint Next()
    {
        uint x = _random;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        _random = x;
        return x;
    }

    public void Step(TimeSpan delta)
    {
        World.Steps++;
        if (RestStart != TimeSpan.MinValue)
        {
            _energy = Energy; // the rest is over
            RestStart = TimeSpan.MinValue;
        }
        uint r = Next();
        if ((r & 15) == 0)
        {
            // Now and then, turn a little.
            _heading += ((int)(r >> 4) % 21 - 10) * 0.05;
            (_dy, _dx) = Math.SinCos(_heading);
        }
        double d = Speed * delta.TotalSeconds;
        _x += _dx * d;
        _y += _dy * d;
        _energy = Math.Max(0, _energy - EnergyPerStep);
    }
}

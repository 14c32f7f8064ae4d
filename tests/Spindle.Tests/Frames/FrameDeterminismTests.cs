using System;
using System.Collections.Generic;
using System.Threading;

namespace SpindleLib.Tests.Frames;

/// <summary>
/// What a lockstep game or a replayable simulation relies on (an eleventh user's review, stop 46): a delay of a frame
/// step that is not a whole number of milliseconds resumes in the frame its deadline says, timed waits due in one frame
/// resume in start order whatever path they took, and a seeded simulation driven by RunFrame gives the same trace every
/// run, with the pools warm or cold and the workers busy with other work.
/// </summary>
public sealed class FrameDeterminismTests
{
    /// <summary>
    /// Until stop 46 a loop's delay was due at its deadline rounded up to the millisecond: with 1/60 s frames (166,666
    /// ticks), <c>Delay(FixedDeltaTime)</c> resumed two frames later, and three steps four, always; with 10 ms frames one.
    /// </summary>
    [Theory]
    [InlineData(60.0)]
    [InlineData(144.0)]
    [InlineData(30.0)]
    [InlineData(100.0)]
    public void Delay_OfWholeSteps_ResumesThatManyFramesLater_WhateverTheStep(double fps)
    {
        var loop = new FrameLoop { FixedDeltaTime = TimeSpan.FromSeconds(1 / fps) };
        loop.RunFrame();
        foreach (FrameTimeKind kind in new[] { FrameTimeKind.Scaled, FrameTimeKind.Unscaled })
        {
            for (int steps = 1; steps <= 4; steps++)
            {
                for (int k = 0; k < 7; k++)
                {
                    long start = loop.FrameCount;
                    long resumed = 0;
                    async SpindleTask Wait()
                    {
                        await loop.Delay(loop.FixedDeltaTime * steps, kind);
                        resumed = loop.FrameCount;
                    }
                    Wait().Forget();
                    loop.RunUntil(() => resumed != 0, maxFrames: 20);
                    Assert.True(start + steps == resumed, $"{fps} fps, {kind}: a delay of {steps} step(s) started in frame {start} resumed in frame {resumed}");
                }
            }
        }
    }

    /// <summary>
    /// A delay whose millisecond has come in a frame that began short of its deadline is held to the next frame; a
    /// cancellation then still completes it at once, and the next frame lets go of it.
    /// </summary>
    [Fact]
    public void Delay_HeldPastItsMillisecond_CancelsAtOnce_AndLeavesNothing()
    {
        var loop = new FrameLoop();
        loop.RunFrame(TimeSpan.Zero);
        using var cts = new CancellationTokenSource();
        SpindleTask held = loop.Delay(TimeSpan.FromTicks(16_700), cts.Token); // due at 1.67 ms
        SpindleTask kept = loop.Delay(TimeSpan.FromTicks(16_700));
        loop.RunFrame(TimeSpan.FromTicks(16_666)); // 1.6666 ms: the 1 ms timers fall due, the deadline has not come
        Assert.False(held.IsCompleted);
        Assert.False(kept.IsCompleted);
        Assert.Equal(2, loop.PendingTimers);
        cts.Cancel();
        Assert.Equal(SpindleTaskStatus.Canceled, held.Status);
        Assert.ThrowsAny<OperationCanceledException>(() => held.GetAwaiter().GetResult());
        loop.RunFrame(TimeSpan.FromTicks(16_666)); // 3.3332 ms
        Assert.True(kept.IsCompleted);
        kept.GetAwaiter().GetResult();
        Assert.Equal(0, loop.PendingTimers);
    }

    /// <summary>
    /// Timed waits that resume in one frame resume in the order they were started, whether their timer fell due in this
    /// frame's pass, was held from an earlier frame for its exact deadline, needed no timer, or counted frames.
    /// </summary>
    [Fact]
    public void TimedWaitsDueInOneFrame_ResumeInStartOrder_WhicheverWayTheyWaited()
    {
        var loop = new FrameLoop { FixedDeltaTime = TimeSpan.FromSeconds(1.0 / 60) };
        loop.RunFrame(TimeSpan.Zero); // frame 1 at 0
        var order = new List<string>();
        async SpindleTask Wait(string name, SpindleTask wait)
        {
            await wait;
            order.Add(name + "@" + loop.FrameCount);
        }
        Wait("frames", loop.DelayFrame(2)).Forget();                                                          // frame 3
        Wait("held", loop.Delay(TimeSpan.FromTicks(167_000))).Forget();                                      // timer at 16 ms (frame 2), held to frame 3
        Wait("unscaled", loop.Delay(TimeSpan.FromMilliseconds(20), FrameTimeKind.Unscaled)).Forget();       // frame 3's pass
        Wait("scaled", loop.Delay(TimeSpan.FromMilliseconds(30))).Forget();                                  // frame 3's pass
        loop.RunFrame(); // frame 2 at 16.6666 ms
        Wait("no timer", loop.Delay(TimeSpan.FromTicks(1))).Forget();                                       // due at 16.6667 ms: frame 3
        Wait("held later", loop.Delay(TimeSpan.FromTicks(166_667), FrameTimeKind.Unscaled)).Forget();       // 33.3333 ms: frame 4
        loop.RunFrame(); // frame 3 at 33.3332 ms
        loop.RunFrame(); // frame 4 at 49.9998 ms
        Assert.Equal(new[] { "frames@3", "held@3", "unscaled@3", "scaled@3", "no timer@3", "held later@4" }, order);
    }

    /// <summary>
    /// A seeded simulation on one loop driven by RunFrame with a 1/60 s step (NextFrame, DelayFrame, scaled and unscaled
    /// delays across time scale changes and a pause, WaitUntil and WaitWhile on shared state, Yields to other phases,
    /// WhenAll and WhenAny of its own sub-behaviours, signals between entities, cancellations from inside a phase) traces
    /// the same events in the same frames, phases and order every run: the first on cold pools, the second on warm ones
    /// with Spindle's workers busy with unrelated work.
    /// </summary>
    [Fact]
    public void SeededSimulation_TracesTheSameEveryRun()
    {
        var cold = new Lockstep(seed: 46, entities: 600);
        (ulong first, long events) = cold.Run(frames: 240);
        Assert.Equal(0, cold.OffLoop);
        using var stop = new CancellationTokenSource();
        var noise = new Thread(() =>
        {
            while (!stop.IsCancellationRequested)
            {
                Spindle.Run(static () => Thread.SpinWait(200)).Forget();
                Thread.SpinWait(100);
            }
        }) { IsBackground = true };
        noise.Start();
        try
        {
            for (int run = 0; run < 2; run++)
            {
                var warm = new Lockstep(seed: 46, entities: 600);
                (ulong again, long againEvents) = warm.Run(frames: 240);
                Assert.Equal(0, warm.OffLoop);
                Assert.Equal(events, againEvents);
                Assert.Equal(first, again);
            }
        }
        finally
        {
            stop.Cancel();
            noise.Join();
        }
        Assert.True(events > 10_000, $"only {events} events traced");
        Assert.NotEqual(first, new Lockstep(seed: 47, entities: 600).Run(frames: 240).Hash); // the trace does depend on the seed
    }

    private sealed class Lockstep
    {
        private readonly FrameLoop _loop = new() { FixedDeltaTime = TimeSpan.FromSeconds(1.0 / 60) };
        private readonly ulong[] _rng;
        private readonly CancellationTokenSource[] _cts;
        private readonly Signal[] _signals;
        private long _counter;
        private int _toggle;
        private ulong _hash = 14695981039346656037UL;
        private long _events;

        public int OffLoop { get; private set; }

        public Lockstep(ulong seed, int entities)
        {
            _rng = new ulong[entities];
            _cts = new CancellationTokenSource[entities];
            _signals = new Signal[entities];
            for (int i = 0; i < entities; i++)
            {
                _rng[i] = seed * 0x9E3779B97F4A7C15UL + (ulong)i * 0xBF58476D1CE4E5B9UL + 1;
                _cts[i] = new CancellationTokenSource();
                _signals[i] = new Signal(false);
            }
        }

        public (ulong Hash, long Events) Run(int frames)
        {
            _loop.RunFrame();
            for (int i = 0; i < _rng.Length; i++)
            {
                Behave(i).Forget();
            }
            Director().Forget();
            for (int f = 0; f < frames; f++)
            {
                long frame = _loop.FrameCount;
                _loop.TimeScale = frame switch { < 60 => 1, < 100 => 0.5, < 140 => 0, < 200 => 1, _ => 1.7 };
                _loop.RunFrame();
            }
            foreach (CancellationTokenSource cts in _cts)
            {
                cts.Cancel();
            }
            _loop.RunFrames(5);
            foreach (CancellationTokenSource cts in _cts)
            {
                cts.Dispose();
            }
            return (_hash, _events);
        }

        private uint Next(int id)
        {
            ulong x = _rng[id];
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            _rng[id] = x;
            return (uint)(x >> 16);
        }

        private void Trace(int id, int what, long detail = 0)
        {
            if (!_loop.IsLoopThread)
            {
                OffLoop++; // an assertion here would fault the entity's task, which nobody reads
            }
            foreach (ulong v in new[] { (ulong)id, (ulong)_loop.FrameCount, (ulong)(_loop.CurrentPhase?.Index ?? -1), (ulong)what, (ulong)detail })
            {
                _hash = (_hash ^ v) * 1099511628211UL;
            }
            _events++;
        }

        private async SpindleTask Director()
        {
            var victims = new Random(7);
            while (_loop.FrameCount < 10_000)
            {
                await _loop.NextFrame(_loop.EarlyUpdate);
                _counter++;
                if (_loop.FrameCount % 7 == 0)
                {
                    _toggle ^= 1;
                }
                if (_loop.FrameCount % 5 == 0)
                {
                    int victim = victims.Next(_cts.Length);
                    Trace(-1, 900, victim);
                    _cts[victim].Cancel();
                }
            }
        }

        private async SpindleTask Behave(int id)
        {
            CancellationToken ct = _cts[id].Token;
            try
            {
                while (true)
                {
                    uint c = Next(id) % 11;
                    Trace(id, (int)c);
                    switch (c)
                    {
                        case 0: await _loop.NextFrame(ct); break;
                        case 1: await _loop.DelayFrame(2 + (int)(Next(id) % 5), ct); break;
                        case 2: await _loop.Delay(TimeSpan.FromTicks(Next(id) % 3_000_000), ct); break;
                        case 3: await _loop.Delay(TimeSpan.FromTicks(Next(id) % 3_000_000), FrameTimeKind.Unscaled, _loop.LateUpdate, ct); break;
                        case 4: await _loop.WaitUntil((this, _counter + 1 + Next(id) % 8), static s => s.Item1._counter >= s.Item2, ct); break;
                        case 5: await _loop.WaitWhile(this, static s => s._toggle == 0, ct); break;
                        case 6:
                            await _loop.Yield(_loop.LateUpdate, ct);
                            Trace(id, 61);
                            await _loop.Yield(_loop.EarlyUpdate, ct);
                            break;
                        case 7: await SpindleTask.WhenAll(Sub(id, 1, ct), Sub(id, 2, ct)); break;
                        case 8: Trace(id, 81, await SpindleTask.WhenAny(Sub(id, 3, ct), Sub(id, 4, ct))); break;
                        case 9:
                            _signals[(id + 1 + (int)(Next(id) % 20)) % _signals.Length].Set();
                            Trace(id, 91, await SpindleTask.WhenAny(_signals[id].WaitAsync(ct), _loop.DelayFrame(6, ct)));
                            break;
                        default: await _loop.Delay(_loop.FixedDeltaTime, ct); break;
                    }
                    Trace(id, 100 + (int)c);
                }
            }
            catch (OperationCanceledException)
            {
                Trace(id, 999);
            }
        }

        private async SpindleTask Sub(int id, int which, CancellationToken ct)
        {
            uint r = Next(id);
            if ((r & 1) == 0)
            {
                await _loop.DelayFrame(1 + (int)(r % 4), ct);
            }
            else
            {
                await _loop.Delay(TimeSpan.FromTicks(r % 1_000_000), FrameTimeKind.Scaled, _loop.FixedUpdate, ct);
            }
            Trace(id, 700 + which);
        }
    }
}

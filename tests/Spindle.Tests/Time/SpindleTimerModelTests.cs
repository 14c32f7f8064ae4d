using System;
using System.Collections.Generic;
using System.Threading;
using CsCheck;
using Microsoft.Extensions.Time.Testing;

namespace SpindleLib.Tests.Time;

/// <summary>
/// Random programs of callback timers (CsCheck, which shrinks a failing program and prints it with its seed): create
/// (one-shot or periodic), Change (later, earlier, Infinite), Dispose and clock moves, checked after every step against
/// the model: a timer given due time d at elapsed time s fires first when the clock reaches ceil((s + d) / 1 ms) ms,
/// never before; a periodic one then every period p (rounded up to the millisecond) from there, each tick once on
/// <see cref="ManualClock"/> (its Advance stops at each due time), the ticks one move covers coalesced into one on
/// <see cref="FakeTimeProvider"/> (its Advance jumps to the end: one late pass); a stopped or disposed timer never fires;
/// and the wheel's <see cref="TimerWheel.PendingCount"/> is the number of armed timers.
/// </summary>
public class SpindleTimerModelTests
{
    private const long TicksPerMs = TimeSpan.TicksPerMillisecond;

    private enum OpKind
    {
        Create,
        CreatePeriodic,
        Change,
        Stop,
        Dispose,
        Advance,
    }

    private readonly record struct Op(OpKind Kind, long Value, int Target)
    {
        public override string ToString() => Kind switch
        {
            OpKind.Stop or OpKind.Dispose => $"{Kind}(#{Target})",
            OpKind.Change => $"Change(#{Target}, {TimeSpan.FromTicks(Value).TotalMilliseconds} ms)",
            OpKind.CreatePeriodic => $"CreatePeriodic({TimeSpan.FromTicks(Value).TotalMilliseconds} ms, every {Target} ms)",
            _ => $"{Kind}({TimeSpan.FromTicks(Value).TotalMilliseconds} ms)",
        };
    }

    private sealed class Model
    {
        public SpindleTimer Timer;
        public long? DueMs; // null: stopped (or disposed)
        public long PeriodMs;
        public bool Disposed;
        public int ExpectedFires;
        public int Fires;
    }

    private static readonly Gen<long> DueTicks = Gen.Frequency(
        (6, Gen.Long[0, 20 * TicksPerMs]),
        (3, Gen.Long[0, 5_000 * TicksPerMs]),
        (2, Gen.Select(Gen.OneOf(63L, 64L, 65L, 4_095L, 4_096L, 4_097L, 262_144L), Gen.Int[-1, 1], static (ms, d) => ms * TicksPerMs + d)),
        (1, Gen.Long[0, TimerWheel.MaxDelay.Ticks]));

    private static readonly Gen<long> AdvanceTicks = Gen.Frequency(
        (6, Gen.Long[0, 3 * TicksPerMs]),
        (4, Gen.Long[0, 100 * TicksPerMs]),
        (2, Gen.Long[0, 300_000 * TicksPerMs]));

    private static readonly Gen<Op[]> Programs = Gen.Frequency(
        (3, DueTicks.Select(static d => new Op(OpKind.Create, d, 0))),
        (2, Gen.Select(DueTicks, Gen.Int[1, 40], static (d, p) => new Op(OpKind.CreatePeriodic, d, p))),
        (5, Gen.Select(DueTicks, Gen.Int[0, 1_000], static (d, i) => new Op(OpKind.Change, d, i))),
        (1, Gen.Int[0, 1_000].Select(static i => new Op(OpKind.Stop, 0, i))),
        (1, Gen.Int[0, 1_000].Select(static i => new Op(OpKind.Dispose, 0, i))),
        (5, AdvanceTicks.Select(static t => new Op(OpKind.Advance, t, 0)))).Array[1, 80];

    private static readonly Action<object?> s_fired = static s => ((Model)s!).Fires++;

    [Fact]
    public void RandomPrograms_OnManualClock_MatchTheModel()
        => Programs.Sample(program =>
        {
            var clock = new ManualClock();
            Run(program, clock, clock.Advance, () => clock.Elapsed.Ticks, coalesces: false);
        }, iter: TestUtil.Stress(400), print: Print);

    [Fact]
    public void RandomPrograms_OnFakeTimeProvider_MatchTheModel()
        => Programs.Sample(program =>
        {
            var time = new FakeTimeProvider();
            long origin = time.GetTimestamp();
            Run(program, time, time.Advance, () => time.GetTimestamp() - origin, coalesces: true);
        }, iter: TestUtil.Stress(400), print: Print);

    private static string Print(Op[] program) => string.Join(", ", program);

    private static void Run(Op[] program, TimeProvider provider, Action<TimeSpan> advance, Func<long> elapsedTicks, bool coalesces)
    {
        var wheel = new TimerWheel(provider);
        var timers = new List<Model>();
        try
        {
            for (int step = 0; step < program.Length; step++)
            {
                Op op = program[step];
                long before = elapsedTicks();
                long dueMs = (before + op.Value + TicksPerMs - 1) / TicksPerMs;
                Model? target = timers.Count > 0 ? timers[op.Target % timers.Count] : null;
                switch (op.Kind)
                {
                    case OpKind.Create:
                    case OpKind.CreatePeriodic:
                        var model = new Model { DueMs = dueMs, PeriodMs = op.Kind == OpKind.CreatePeriodic ? op.Target : 0 };
                        timers.Add(model);
                        model.Timer = wheel.CreateTimer(s_fired, model, TimeSpan.FromTicks(op.Value), TimeSpan.FromMilliseconds(model.PeriodMs));
                        break;
                    case OpKind.Change when target is { Disposed: false }:
                        target.DueMs = dueMs;
                        target.Timer.Change(TimeSpan.FromTicks(op.Value), TimeSpan.FromMilliseconds(target.PeriodMs));
                        break;
                    case OpKind.Stop when target is { Disposed: false }:
                        target.DueMs = null;
                        target.Timer.Change(Timeout.InfiniteTimeSpan, Timeout.InfiniteTimeSpan);
                        break;
                    case OpKind.Dispose when target is not null:
                        target.DueMs = null;
                        target.Disposed = true;
                        target.Timer.Dispose();
                        break;
                    case OpKind.Advance:
                        advance(TimeSpan.FromTicks(op.Value));
                        break;
                }
                long nowMs = elapsedTicks() / TicksPerMs;
                int armed = 0;
                for (int i = 0; i < timers.Count; i++)
                {
                    Model m = timers[i];
                    while (m.DueMs is { } due && due <= nowMs)
                    {
                        m.ExpectedFires++;
                        m.DueMs = m.PeriodMs == 0 ? null
                            : coalesces ? due + ((nowMs - due) / m.PeriodMs + 1) * m.PeriodMs
                            : due + m.PeriodMs;
                    }
                    armed += m.DueMs is null ? 0 : 1;
                    if (m.Fires != m.ExpectedFires)
                    {
                        Assert.Fail($"After step {step} ({op}), at {nowMs} ms: timer #{i} fired {m.Fires} times, expected {m.ExpectedFires} (next due {m.DueMs?.ToString() ?? "never"}).");
                    }
                }
                Assert.Equal(armed, wheel.PendingCount);
            }
        }
        finally
        {
            wheel.Dispose();
        }
        foreach (Model m in timers)
        {
            Assert.Throws<ObjectDisposedException>(() => m.Timer.Change(TimeSpan.FromMilliseconds(1), Timeout.InfiniteTimeSpan));
            m.Timer.Dispose();
        }
        Assert.Equal(0, wheel.PendingCount);
    }
}

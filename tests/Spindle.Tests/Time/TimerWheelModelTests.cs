using System;
using System.Collections.Generic;
using System.Threading;
using CsCheck;
using Microsoft.Extensions.Time.Testing;

namespace SpindleLib.Tests.Time;

/// <summary>
/// Random programs of delays, cancellations and clock moves (CsCheck, which shrinks a failing program to a smallest
/// one and prints it with its seed), run on a wheel and checked after every step against the timing contract's
/// model: a delay of d started at elapsed time s completes exactly when the clock reaches ceil((s + d) / 1 ms) ms
/// (zero completes at once), a cancellation before that completes it as canceled, and nothing else changes. Delays
/// are drawn around the wheel's level boundaries (64^k ms) as well as uniformly, and moves from a tick to months, so
/// cascades, the top level's wrap-around and passes that cover long gaps all come up. Run on Spindle's ManualClock
/// (its Advance stops at each timer's due time) and on Microsoft's FakeTimeProvider (its Advance jumps straight to the
/// end, so one pass covers the whole move).
/// </summary>
public class TimerWheelModelTests
{
    private const long TicksPerMs = TimeSpan.TicksPerMillisecond;

    private enum OpKind
    {
        Start,
        StartCancelable,
        Cancel,
        Advance,
    }

    private readonly record struct Op(OpKind Kind, long Value)
    {
        public override string ToString() => Kind switch
        {
            OpKind.Cancel => $"Cancel(#{Value})",
            _ => $"{Kind}({TimeSpan.FromTicks(Value).TotalMilliseconds} ms)",
        };
    }

    private sealed class Entry(long dueMs, CancellationTokenSource? cts)
    {
        public readonly long DueMs = dueMs; // for a zero delay, the millisecond it started in: it completes at once
        public readonly CancellationTokenSource? Cts = cts;
        public bool Cancelled;
        public SpindleTaskStatus Outcome = SpindleTaskStatus.Pending; // set by the delay's continuation, which reads it

        public void Watch(SpindleTask task, List<Entry> ended)
        {
            SpindleTask.Awaiter awaiter = task.GetAwaiter();
            if (awaiter.IsCompleted)
            {
                End(awaiter);
                return;
            }
            // Runs on the thread that completes the delay: the advancing one, or the cancelling one.
            awaiter.OnCompleted(() => End(awaiter));

            void End(SpindleTask.Awaiter completed)
            {
                Assert.Equal(SpindleTaskStatus.Pending, Outcome); // ends once
                try
                {
                    completed.GetResult();
                    Outcome = SpindleTaskStatus.Succeeded;
                }
                catch (OperationCanceledException)
                {
                    Outcome = SpindleTaskStatus.Canceled;
                }
                ended.Add(this);
            }
        }
    }

    private static readonly long[] BoundaryMs = [1, 63, 64, 65, 4_095, 4_096, 4_097, 262_143, 262_144, 262_145, 16_777_216, 1_073_741_824];

    private static readonly Gen<long> DelayTicks = Gen.Frequency(
        (6, Gen.Long[0, 20 * TicksPerMs]),
        (3, Gen.Long[0, 5_000 * TicksPerMs]),
        (3, Gen.Select(Gen.OneOf(BoundaryMs), Gen.Int[-1, 1], static (ms, d) => ms * TicksPerMs + d)),
        (1, Gen.Long[0, TimerWheel.MaxDelay.Ticks]));

    private static readonly Gen<long> AdvanceTicks = Gen.Frequency(
        (6, Gen.Long[0, 3 * TicksPerMs]),
        (4, Gen.Long[0, 100 * TicksPerMs]),
        (2, Gen.Long[0, 300_000 * TicksPerMs]),
        (1, Gen.Long[0, (1L << 34) * TicksPerMs]));

    private static readonly Gen<Op[]> Programs = Gen.Frequency(
        (4, DelayTicks.Select(static d => new Op(OpKind.Start, d))),
        (3, DelayTicks.Select(static d => new Op(OpKind.StartCancelable, d))),
        (2, Gen.Int[0, 1_000].Select(static i => new Op(OpKind.Cancel, i))),
        (5, AdvanceTicks.Select(static t => new Op(OpKind.Advance, t)))).Array[1, 80];

    [Fact]
    public void RandomPrograms_OnManualClock_MatchTheModel()
        => Programs.Sample(program =>
        {
            var clock = new ManualClock();
            Run(program, clock, clock.Advance, () => clock.Elapsed.Ticks);
        }, iter: TestUtil.Stress(400), print: Print);

    [Fact]
    public void RandomPrograms_OnFakeTimeProvider_MatchTheModel()
        => Programs.Sample(program =>
        {
            var time = new FakeTimeProvider();
            long origin = time.GetTimestamp(); // TimeSpan ticks: its frequency is 10,000,000 a second
            Assert.Equal(TimeSpan.TicksPerSecond, time.TimestampFrequency);
            Run(program, time, time.Advance, () => time.GetTimestamp() - origin);
        }, iter: TestUtil.Stress(400), print: Print);

    private static string Print(Op[] program) => string.Join(", ", program);

    private static void Run(Op[] program, TimeProvider provider, Action<TimeSpan> advance, Func<long> elapsedTicks)
    {
        var wheel = new TimerWheel(provider);
        var entries = new List<Entry>();
        var ended = new List<Entry>();
        try
        {
            for (int step = 0; step < program.Length; step++)
            {
                Op op = program[step];
                switch (op.Kind)
                {
                    case OpKind.Start:
                    case OpKind.StartCancelable:
                        long start = elapsedTicks();
                        long dueMs = op.Value == 0 ? start / TicksPerMs : (start + op.Value + TicksPerMs - 1) / TicksPerMs;
                        CancellationTokenSource? cts = op.Kind == OpKind.StartCancelable ? new CancellationTokenSource() : null;
                        var entry = new Entry(dueMs, cts);
                        entries.Add(entry);
                        entry.Watch(wheel.Delay(TimeSpan.FromTicks(op.Value), cts?.Token ?? default), ended);
                        break;
                    case OpKind.Cancel:
                        if (entries.Count > 0 && entries[(int)(op.Value % entries.Count)] is { Cts: { IsCancellationRequested: false } source } e)
                        {
                            e.Cancelled = e.Outcome == SpindleTaskStatus.Pending; // a delay that has fired stays fired
                            source.Cancel();
                        }
                        break;
                    case OpKind.Advance:
                        advance(TimeSpan.FromTicks(op.Value));
                        break;
                }
                Check(entries, ended, elapsedTicks() / TicksPerMs, step);
            }

            advance(TimeSpan.Zero); // the pass a cancellation asks for takes its node out of the count
            int live = 0;
            foreach (Entry e in entries)
            {
                live += e.Outcome == SpindleTaskStatus.Pending ? 1 : 0;
            }
            Assert.Equal(live, wheel.PendingCount);
        }
        finally
        {
            wheel.Dispose(); // cancels what is still pending: each continuation reads its delay
            foreach (Entry e in entries)
            {
                e.Cts?.Dispose();
            }
        }
        Assert.Equal(entries.Count, ended.Count);
    }

    /// <summary>
    /// Every delay is where the model puts it, and the delays that fired did so in the order of their due
    /// milliseconds (a pass that covers a long gap fires in deadline order too), those due at the same millisecond in
    /// the order they were started.
    /// </summary>
    private static void Check(List<Entry> entries, List<Entry> ended, long nowMs, int step)
    {
        for (int i = 0; i < entries.Count; i++)
        {
            Entry e = entries[i];
            SpindleTaskStatus expected = e.Cancelled ? SpindleTaskStatus.Canceled : nowMs >= e.DueMs ? SpindleTaskStatus.Succeeded : SpindleTaskStatus.Pending;
            if (e.Outcome != expected)
            {
                Assert.Fail($"After step {step}, at {nowMs} ms: delay #{i} (due at {e.DueMs} ms) is {e.Outcome}, expected {expected}.");
            }
        }
        long lastDue = long.MinValue;
        int lastIndex = -1;
        foreach (Entry e in ended)
        {
            if (e.Outcome != SpindleTaskStatus.Succeeded)
            {
                continue;
            }
            int index = entries.IndexOf(e);
            if (e.DueMs < lastDue || e.DueMs == lastDue && index < lastIndex)
            {
                Assert.Fail($"After step {step}: delay #{index} due at {e.DueMs} ms fired after delay #{lastIndex} due at {lastDue} ms.");
            }
            lastDue = e.DueMs;
            lastIndex = index;
        }
    }
}

using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Linq;
using System.Threading;
using CsCheck;
using Microsoft.Extensions.Time.Testing;

namespace SpindleLib.Tests.Combinators;

/// <summary>
/// Random programs over WhenAll and WhenAny of promises (CsCheck, which shrinks a failure to a smallest program):
/// some inputs already finished at the call, then inputs succeeding or failing, the clock moving (WhenAll's timeout,
/// on Microsoft's FakeTimeProvider) and the token being cancelled, in any order. After every step the combined task is
/// checked against a model of the documented contract: WhenAll completes when every input has (with the results, or
/// the lowest-index failure, or all failures when aggregating), or fails with TimeoutException once its deadline
/// passes first, or is cancelled when its token is first; WhenAny completes with the first input to finish (the
/// lowest index among those finished at the call), or is cancelled. Once the combination is decided, every input it
/// let go of can be reset at once. Every failure the awaiter does not get goes to UnobservedException exactly once,
/// whether the combination read it before its decision or let go of the input before it failed; a WhenAll that
/// completed reports none. Sequential: the test watches UnobservedException.
/// </summary>
[Collection(SequentialCollection.Name)]
public class CombinatorModelTests
{
    private const long TicksPerMs = TimeSpan.TicksPerMillisecond;

    private enum OpKind
    {
        Succeed,
        Fail,
        Advance,
        CancelToken,
    }

    private readonly record struct Op(OpKind Kind, int Input, long Ticks)
    {
        public override string ToString() => Kind switch
        {
            OpKind.Succeed or OpKind.Fail => $"{Kind}(#{Input})",
            OpKind.Advance => $"Advance({TimeSpan.FromTicks(Ticks).TotalMilliseconds} ms)",
            _ => Kind.ToString(),
        };
    }

    /// <summary>At the call: 0 pending, 1 succeeded, 2 failed.</summary>
    private sealed record Case(bool Any, int[] AtCall, long? TimeoutTicks, bool Token, bool Aggregate, Op[] Program)
    {
        public override string ToString()
            => $"{(Any ? "WhenAny" : "WhenAll")} over [{string.Join(",", AtCall)}], timeout {(TimeoutTicks is { } t ? TimeSpan.FromTicks(t).TotalMilliseconds + " ms" : "none")}, token {Token}, aggregate {Aggregate}: {string.Join(", ", Program)}";
    }

    private static readonly Gen<Op> Ops = Gen.Frequency(
        (4, Gen.Int[0, 5].Select(static i => new Op(OpKind.Succeed, i, 0))),
        (2, Gen.Int[0, 5].Select(static i => new Op(OpKind.Fail, i, 0))),
        (3, Gen.Long[0, 20 * TicksPerMs].Select(static t => new Op(OpKind.Advance, 0, t))),
        (1, Gen.Const(new Op(OpKind.CancelToken, 0, 0))));

    private static readonly Gen<Case> Cases =
        from any in Gen.Bool
        from atCall in Gen.Frequency((6, Gen.Const(0)), (1, Gen.Const(1)), (1, Gen.Const(2))).Array[1, 6]
        from hasTimeout in Gen.Bool
        from timeout in Gen.Frequency((1, Gen.Const(0L)), (4, Gen.Long[1, 30 * TicksPerMs]))
        from token in Gen.Bool
        from aggregate in Gen.Bool
        from program in Ops.Array[0, 16]
        select new Case(any, atCall, !any && hasTimeout ? timeout : null, token, !any && aggregate, program);

    [Fact]
    public void RandomPrograms_MatchTheModel()
        => Cases.Sample(c =>
        {
            HashSet<Exception>? expected = null;
            var made = new ConcurrentQueue<Exception>(); // this case's input failures: other reports are not this test's
            ConcurrentQueue<Exception> reported = UnobservedReports.Observe(UnobservedReports.Own.InstancesIn(made), () => expected = Run(c, made));
            List<Exception> ours = reported.ToList();
            if (expected is not null)
            {
                Assert.True(expected.SetEquals(ours) && ours.Count == expected.Count,
                    $"reported [{string.Join(", ", ours.Select(static e => e.Message))}], expected [{string.Join(", ", expected.Select(static e => e.Message))}]");
            }
        }, iter: TestUtil.Stress(600), threads: 1);

    private sealed class Input(int index, ConcurrentQueue<Exception> made)
    {
        public readonly int Index = index;
        public readonly ConcurrentQueue<Exception> Made = made;
        public readonly Promise<int> Promise = new();
        public int State; // 0 pending, 1 succeeded, 2 failed
        public Exception? Error;
    }

    /// <summary>Runs one case; returns the failures that must have been reported.</summary>
    private static HashSet<Exception> Run(Case c, ConcurrentQueue<Exception> made)
    {
        var time = new FakeTimeProvider();
        DateTimeOffset start = time.GetUtcNow();
        using var wheel = new TimerWheel(time);
        using var cts = new CancellationTokenSource();
        int n = c.AtCall.Length;
        var inputs = new Input[n];
        var tasks = new SpindleTask<int>[n];
        var finishOrder = new List<int>();
        for (int i = 0; i < n; i++)
        {
            inputs[i] = new Input(i, made);
            tasks[i] = inputs[i].Promise.Task;
        }
        for (int i = 0; i < n; i++)
        {
            Finish(inputs[i], c.AtCall[i], finishOrder); // in index order: the lowest finished index is the "first"
        }
        CancellationToken token = c.Token ? cts.Token : default;
        long deadlineMs = c.TimeoutTicks is { } t ? (t + TicksPerMs - 1) / TicksPerMs : long.MaxValue; // the wheel's time starts at 0

        SpindleTask<int[]> all = default;
        SpindleTask<(int Index, int Result)> any = default;
        if (c.Any)
        {
            any = SpindleTask.WhenAny<int>(tasks, token);
        }
        else
        {
            var options = new WhenAllOptions
            {
                AggregateExceptions = c.Aggregate,
                Timers = wheel,
                Timeout = c.TimeoutTicks is { } timeout ? TimeSpan.FromTicks(timeout) : null,
            };
            all = SpindleTask.WhenAll<int>(tasks, options, token);
        }

        // The model's decision: what decided it, at which step (-1: at the call).
        string? decidedBy = null;
        bool tokenCancelled = false;
        void Decide(int step)
        {
            if (decidedBy is not null)
            {
                return;
            }
            DecideCore();
        }
        void DecideCore()
        {
            if (c.Any)
            {
                if (finishOrder.Count > 0)
                {
                    decidedBy = "input";
                }
                else if (tokenCancelled)
                {
                    decidedBy = "token";
                }
                return;
            }
            bool allDone = finishOrder.Count == n;
            if (allDone)
            {
                decidedBy = "input";
            }
            else if (tokenCancelled)
            {
                decidedBy = "token";
            }
            else if (deadlineMs != long.MaxValue && time.GetUtcNow() - start >= TimeSpan.FromMilliseconds(deadlineMs))
            {
                decidedBy = "timeout";
            }
        }

        Decide(-1);
        Check(c, any, all, decidedBy, inputs, finishOrder, -1);
        for (int step = 0; step < c.Program.Length; step++)
        {
            Op op = c.Program[step];
            switch (op.Kind)
            {
                case OpKind.Succeed:
                case OpKind.Fail:
                    Input input = inputs[op.Input % n];
                    if (input.State == 0)
                    {
                        Finish(input, op.Kind == OpKind.Succeed ? 1 : 2, finishOrder);
                    }
                    break;
                case OpKind.Advance:
                    time.Advance(TimeSpan.FromTicks(op.Ticks));
                    break;
                case OpKind.CancelToken:
                    if (c.Token && !tokenCancelled)
                    {
                        tokenCancelled = true;
                        // The combination may be decided by an input or the timeout at the same step: the model decides
                        // in the order things happened, so the token only decides what is still open.
                        cts.Cancel();
                    }
                    break;
            }
            Decide(step);
            Check(c, any, all, decidedBy, inputs, finishOrder, step);
        }

        // Read the outcome, if decided; otherwise finish every input so that the combination ends, and read it then.
        if (decidedBy is null)
        {
            foreach (Input input in inputs)
            {
                if (input.State == 0)
                {
                    Finish(input, 1, finishOrder);
                }
            }
            Decide(c.Program.Length);
            Check(c, any, all, decidedBy, inputs, finishOrder, c.Program.Length);
        }
        ReadOutcome(c, any, all, decidedBy!, inputs, finishOrder);

        // Decided: the inputs it let go of can start a new use at once.
        foreach (Input input in inputs)
        {
            input.Promise.Reset();
        }

        // Every failure the awaiter did not get is reported, once: by the combinator for an input it read (WhenAny's
        // losers that had finished, a WhenAll's inputs read before its token or timeout decided), by the source itself
        // for an input it let go of that fails later (an abandoned use that fails has nobody to read it). A WhenAll
        // that completed read every input, and its awaiter observes all their failures.
        var expected = new HashSet<Exception>();
        if (decidedBy == "input" && !c.Any)
        {
            return expected;
        }
        for (int k = 0; k < finishOrder.Count; k++)
        {
            Input input = inputs[finishOrder[k]];
            bool rethrown = decidedBy == "input" && k == 0; // WhenAny's winner
            if (input.State == 2 && !rethrown)
            {
                expected.Add(input.Error!);
            }
        }
        return expected;
    }

    private static void Finish(Input input, int state, List<int> finishOrder)
    {
        if (state == 0)
        {
            return;
        }
        input.State = state;
        finishOrder.Add(input.Index);
        if (state == 1)
        {
            input.Promise.SetResult(100 + input.Index);
        }
        else
        {
            input.Error = new InvalidOperationException("input " + input.Index + " failed");
            input.Made.Enqueue(input.Error);
            input.Promise.SetException(input.Error);
        }
    }

    private static void Check(Case c, SpindleTask<(int, int)> any, SpindleTask<int[]> all, string? decidedBy, Input[] inputs, List<int> finishOrder, int step)
    {
        bool completed = c.Any ? any.IsCompleted : all.IsCompleted;
        if (completed != (decidedBy is not null))
        {
            Assert.Fail($"After step {step}: the combined task is {(completed ? "completed" : "pending")}, the model says {(decidedBy is null ? "pending" : "decided by " + decidedBy)}.");
        }
    }

    private static void ReadOutcome(Case c, SpindleTask<(int Index, int Result)> any, SpindleTask<int[]> all, string decidedBy, Input[] inputs, List<int> finishOrder)
    {
        if (decidedBy == "token")
        {
            Assert.ThrowsAny<OperationCanceledException>(() => { _ = c.Any ? any.GetAwaiter().GetResult().Index : all.GetAwaiter().GetResult().Length; });
            return;
        }
        if (decidedBy == "timeout")
        {
            Assert.Throws<TimeoutException>(() => all.GetAwaiter().GetResult());
            return;
        }
        if (c.Any)
        {
            Input winner = inputs[finishOrder[0]];
            if (winner.State == 2)
            {
                Exception e = Assert.Throws<InvalidOperationException>(() => any.GetAwaiter().GetResult());
                Assert.Same(winner.Error, e);
                return;
            }
            (int index, int result) = any.GetAwaiter().GetResult();
            Assert.Equal(winner.Index, index);
            Assert.Equal(100 + winner.Index, result);
            return;
        }
        var failures = new List<Exception>();
        foreach (Input input in inputs)
        {
            if (input.State == 2)
            {
                failures.Add(input.Error!);
            }
        }
        if (failures.Count == 0)
        {
            int[] results = all.GetAwaiter().GetResult();
            for (int i = 0; i < inputs.Length; i++)
            {
                Assert.Equal(100 + i, results[i]);
            }
            return;
        }
        if (c.Aggregate)
        {
            AggregateException e = Assert.Throws<AggregateException>(() => all.GetAwaiter().GetResult());
            Assert.Equal(failures, e.InnerExceptions);
        }
        else
        {
            Exception e = Assert.Throws<InvalidOperationException>(() => all.GetAwaiter().GetResult());
            Assert.Same(failures[0], e);
        }
    }
}

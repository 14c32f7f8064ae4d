using System;
using System.Collections.Concurrent;
using System.Threading;
using System.Threading.Tasks;
using static SpindleLib.Tests.Combinators.CombinatorTestSupport;
using static SpindleLib.Tests.UnobservedReports;

namespace SpindleLib.Tests.Combinators;

/// <summary>
/// The generated tuple forms, for every arity from 2 to 8, over tasks of different types: WhenAll's tuple in argument
/// order, WhenAny's index with the winner's result in its element and defaults elsewhere.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class TupleCombinatorTests
{
    /// <summary>Eight pending tasks of eight types; input k (0-based) completes with the k-th value.</summary>
    private sealed class Inputs
    {
        public readonly Promise<int> P1 = new();
        public readonly Promise<string> P2 = new();
        public readonly Promise<double> P3 = new();
        public readonly Promise<long> P4 = new();
        public readonly Promise<char> P5 = new();
        public readonly Promise<bool> P6 = new();
        public readonly Promise<byte> P7 = new();
        public readonly Promise<decimal> P8 = new();
        public readonly SpindleTask<int> T1;
        public readonly SpindleTask<string> T2;
        public readonly SpindleTask<double> T3;
        public readonly SpindleTask<long> T4;
        public readonly SpindleTask<char> T5;
        public readonly SpindleTask<bool> T6;
        public readonly SpindleTask<byte> T7;
        public readonly SpindleTask<decimal> T8;

        public Inputs()
        {
            T1 = Await(P1);
            T2 = Await(P2);
            T3 = Await(P3);
            T4 = Await(P4);
            T5 = Await(P5);
            T6 = Await(P6);
            T7 = Await(P7);
            T8 = Await(P8);
        }

        public void Complete(int k)
        {
            switch (k)
            {
                case 0: P1.TrySetResult(1); break;
                case 1: P2.TrySetResult("two"); break;
                case 2: P3.TrySetResult(3.5); break;
                case 3: P4.TrySetResult(4L); break;
                case 4: P5.TrySetResult('5'); break;
                case 5: P6.TrySetResult(true); break;
                case 6: P7.TrySetResult(7); break;
                default: P8.TrySetResult(8m); break;
            }
        }

        public void CompleteAll()
        {
            for (int k = 0; k < 8; k++)
            {
                Complete(k);
            }
        }
    }

    public static TheoryData<int> Arities => new() { 2, 3, 4, 5, 6, 7, 8 };

    /// <summary>The arity-n WhenAll over the first n inputs, as an untyped task and a reader of its tuple.</summary>
    private static (SpindleTask Task, Func<object> Read) WhenAllOf(Inputs x, int n)
    {
        switch (n)
        {
            case 2: { var t = SpindleTask.WhenAll(x.T1, x.T2).Preserve(); return (t, () => t.GetAwaiter().GetResult()); }
            case 3: { var t = SpindleTask.WhenAll(x.T1, x.T2, x.T3).Preserve(); return (t, () => t.GetAwaiter().GetResult()); }
            case 4: { var t = SpindleTask.WhenAll(x.T1, x.T2, x.T3, x.T4).Preserve(); return (t, () => t.GetAwaiter().GetResult()); }
            case 5: { var t = SpindleTask.WhenAll(x.T1, x.T2, x.T3, x.T4, x.T5).Preserve(); return (t, () => t.GetAwaiter().GetResult()); }
            case 6: { var t = SpindleTask.WhenAll(x.T1, x.T2, x.T3, x.T4, x.T5, x.T6).Preserve(); return (t, () => t.GetAwaiter().GetResult()); }
            case 7: { var t = SpindleTask.WhenAll(x.T1, x.T2, x.T3, x.T4, x.T5, x.T6, x.T7).Preserve(); return (t, () => t.GetAwaiter().GetResult()); }
            default: { var t = SpindleTask.WhenAll(x.T1, x.T2, x.T3, x.T4, x.T5, x.T6, x.T7, x.T8).Preserve(); return (t, () => t.GetAwaiter().GetResult()); }
        }
    }

    /// <summary>The arity-n WhenAny over the first n inputs.</summary>
    private static (SpindleTask Task, Func<object> Read) WhenAnyOf(Inputs x, int n)
    {
        switch (n)
        {
            case 2: { var t = SpindleTask.WhenAny(x.T1, x.T2).Preserve(); return (t, () => t.GetAwaiter().GetResult()); }
            case 3: { var t = SpindleTask.WhenAny(x.T1, x.T2, x.T3).Preserve(); return (t, () => t.GetAwaiter().GetResult()); }
            case 4: { var t = SpindleTask.WhenAny(x.T1, x.T2, x.T3, x.T4).Preserve(); return (t, () => t.GetAwaiter().GetResult()); }
            case 5: { var t = SpindleTask.WhenAny(x.T1, x.T2, x.T3, x.T4, x.T5).Preserve(); return (t, () => t.GetAwaiter().GetResult()); }
            case 6: { var t = SpindleTask.WhenAny(x.T1, x.T2, x.T3, x.T4, x.T5, x.T6).Preserve(); return (t, () => t.GetAwaiter().GetResult()); }
            case 7: { var t = SpindleTask.WhenAny(x.T1, x.T2, x.T3, x.T4, x.T5, x.T6, x.T7).Preserve(); return (t, () => t.GetAwaiter().GetResult()); }
            default: { var t = SpindleTask.WhenAny(x.T1, x.T2, x.T3, x.T4, x.T5, x.T6, x.T7, x.T8).Preserve(); return (t, () => t.GetAwaiter().GetResult()); }
        }
    }

    private static readonly object[] s_values = [1, "two", 3.5, 4L, '5', true, (byte)7, 8m];

    private static readonly object?[] s_defaults = [0, null, 0.0, 0L, '\0', false, (byte)0, 0m];

    /// <summary>A tuple's elements, the nested rest of an 8-or-more tuple flattened.</summary>
    private static object?[] Elements(object tuple)
    {
        var items = new System.Collections.Generic.List<object?>();
        var t = (System.Runtime.CompilerServices.ITuple)tuple;
        for (int i = 0; i < t.Length; i++)
        {
            items.Add(t[i]);
        }
        return items.ToArray();
    }

    [Theory]
    [MemberData(nameof(Arities))]
    public void WhenAll_TupleForm_CompletesAfterTheLast_ResultsInArgumentOrder(int n)
    {
        var x = new Inputs();
        (SpindleTask task, Func<object> read) = WhenAllOf(x, n);
        for (int k = n - 1; k >= 0; k--)
        {
            Assert.False(task.IsCompleted, $"completed before input {k}");
            x.Complete(k);
        }
        Assert.Equal(s_values[..n], Elements(read()));
        x.CompleteAll();
    }

    [Theory]
    [MemberData(nameof(Arities))]
    public void WhenAny_TupleForm_IndexAndTheWinnersResult_OthersDefault(int n)
    {
        for (int winner = 0; winner < n; winner++)
        {
            var x = new Inputs();
            (SpindleTask task, Func<object> read) = WhenAnyOf(x, n);
            Assert.False(task.IsCompleted);
            x.Complete(winner);
            object?[] expected = new object?[n + 1];
            expected[0] = winner;
            for (int k = 0; k < n; k++)
            {
                expected[k + 1] = k == winner ? s_values[k] : s_defaults[k];
            }
            Assert.Equal(expected, Elements(read()));
            x.CompleteAll(); // the losers
        }
    }

    [Fact]
    public void WhenAll_TupleForm_AllInputsAlreadyComplete_ResultInline()
    {
        SpindleTask<(int, string)> all = SpindleTask.WhenAll(SpindleTask.FromResult(1), TestUtil.CompletesSynchronouslyWithValue(1).ContinueAsString());
        Assert.Null(all._source);
        Assert.Equal((1, "2"), all.GetAwaiter().GetResult());
    }

    [Fact]
    public void WhenAny_TupleForm_AnInputAlreadyComplete_Wins_AndAFailingLoserIsReported()
    {
        var pending = new Promise<string>();
        var fault = new InvalidTimeZoneException("loser");
        (int Index, string Result1, int Result2) result = default;
        ConcurrentQueue<Exception> reported = Observe(Own.InstancesOrOnTestThreads(fault), () =>
        {
            SpindleTask<(int Index, string Result1, int Result2)> any = SpindleTask.WhenAny(Await(pending), SpindleTask.FromResult(5));
            result = any.GetAwaiter().GetResult();
            pending.SetException(fault);
        });
        Assert.Equal((1, null, 5), result);
        Assert.Same(fault, Assert.Single(reported));
    }

    [Fact]
    public async Task WhenAll_TupleForm_FailureAndCancellation()
    {
        var a = new Promise<int>();
        var b = new Promise<string>();
        var error = new FormatException("b failed");
        SpindleTask<(int, string)> all = SpindleTask.WhenAll(Await(a), Await(b));
        b.SetException(error);
        a.SetResult(1);
        Assert.Same(error, await Assert.ThrowsAsync<FormatException>(() => TestUtil.WithTimeout(all)));

        using var cts = new CancellationTokenSource();
        var c = new Promise<int>();
        SpindleTask<(int, int)> cancelled = SpindleTask.WhenAll(Await(c), SpindleTask.FromResult(2), cts.Token);
        cts.Cancel();
        await Assert.ThrowsAnyAsync<OperationCanceledException>(() => TestUtil.WithTimeout(cancelled));
        c.SetResult(1);
    }

    [Fact]
    public void TupleForm_AConsumedInput_ThrowsTheAwaitOnceError_BeforeConsumingTheOthers()
    {
        var p = new Promise<int>();
        SpindleTask<int> consumed = Await(p);
        p.SetResult(1);
        consumed.GetAwaiter().GetResult();
        var other = new Promise<string>();
        SpindleTask<string> fresh = Await(other);
        InvalidOperationException ex = Assert.Throws<InvalidOperationException>(() => SpindleTask.WhenAll(fresh, consumed));
        Assert.Contains("Preserve()", ex.Message, StringComparison.Ordinal);
        Assert.Throws<InvalidOperationException>(() => SpindleTask.WhenAny(fresh, consumed));
        Assert.False(WasConsumed(fresh));
        other.SetResult("still mine");
        Assert.Equal("still mine", fresh.GetAwaiter().GetResult());
    }

    [Fact]
    public void TupleForms_PendingInputs_SteadyStateAllocatesNothing()
    {
        var ints = new Promise<int>();
        var strings = new Promise<string>();
        ints.SetResult(0);
        strings.SetResult("");
        TestUtil.AssertSteadyStateAllocatesNothing(i =>
        {
            ints.Reset();
            strings.Reset();
            SpindleTask<(int, string)> all = SpindleTask.WhenAll(ints.Task, strings.Task);
            strings.SetResult("s");
            ints.SetResult(i);
            if (all.GetAwaiter().GetResult() != (i, "s"))
            {
                throw new InvalidOperationException("wrong tuple");
            }
            ints.Reset();
            strings.Reset();
            SpindleTask<(int Index, int Result1, string Result2)> any = SpindleTask.WhenAny(ints.Task, strings.Task);
            strings.SetResult("w");
            if (any.GetAwaiter().GetResult() != (1, 0, "w"))
            {
                throw new InvalidOperationException("wrong winner");
            }
            ints.SetResult(0);
        }, 1_000);
    }

    [Fact]
    public async Task WhenAny_TupleForm_InputsCompletingAtOnce_ExactlyOneWinner()
    {
        int rounds = TestUtil.Stress(10_000);
        var a = new Promise<int>();
        var b = new Promise<string>();
        var c = new Promise<long>();
        var counter = new ContinuationCounter();
        SpindleTask<(int Index, int Result1, string Result2, long Result3)> any = default;
        int[] wins = new int[3];
        int ran = await TestUtil.WithTimeout(Race.Run(
            rounds,
            before: round =>
            {
                if (round > 0)
                {
                    a.Reset();
                    b.Reset();
                    c.Reset();
                }
                counter.Reset();
                any = SpindleTask.WhenAny(a.Task, b.Task, c.Task);
                any.GetAwaiter().UnsafeOnCompleted(counter.Action);
            },
            after: round =>
            {
                Assert.True(counter.Count == 1, $"round {round}: the awaiter resumed {counter.Count} times");
                (int index, int r1, string r2, long r3) = any.GetAwaiter().GetResult();
                wins[index]++;
                Assert.Equal(index == 0 ? round : 0, r1);
                Assert.Equal(index == 1 ? "b" : null, r2);
                Assert.Equal(index == 2 ? -round : 0L, r3);
            },
            round => a.SetResult(round),
            round => b.SetResult("b"),
            round => c.SetResult(-round)), TestUtil.StressTimeout(60));
        Assert.Equal(ran, wins[0] + wins[1] + wins[2]);
    }
}

internal static class TupleTestExtensions
{
    public static SpindleTask<string> ContinueAsString(this SpindleTask<int> task)
        => task.IsCompleted ? SpindleTask.FromResult(task.GetAwaiter().GetResult().ToString(System.Globalization.CultureInfo.InvariantCulture)) : throw new InvalidOperationException("expected a completed task");
}

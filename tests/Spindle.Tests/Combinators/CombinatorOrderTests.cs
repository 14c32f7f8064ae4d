using System;
using System.Linq;
using System.Threading.Tasks;
using static SpindleLib.Tests.Combinators.CombinatorTestSupport;

namespace SpindleLib.Tests.Combinators;

/// <summary>WhenAny returns the index of the input that finished first; WhenAll completes only after the last input.</summary>
public class CombinatorOrderTests
{
    public static TheoryData<int> Counts => new() { 1, 2, 3, 5, 8, 40 };

    [Theory]
    [MemberData(nameof(Counts))]
    public void WhenAny_OnlyInputKCompletesFirst_ReturnsK(int n)
    {
        for (int k = 0; k < n; k++)
        {
            Promise[] promises = Promises(n);
            SpindleTask<int> any = SpindleTask.WhenAny(TasksOf(promises));
            Assert.False(any.IsCompleted);

            promises[k].SetResult();
            Assert.True(any.IsCompleted, $"n={n}, k={k}: WhenAny did not complete when input {k} did");
            // The losers finish afterwards, in reverse order: they must not change the winner.
            for (int j = n - 1; j >= 0; j--)
            {
                if (j != k)
                {
                    promises[j].SetResult();
                }
            }
            Assert.Equal(k, any.GetAwaiter().GetResult());
        }
    }

    [Theory]
    [MemberData(nameof(Counts))]
    public async Task WhenAny_AwaitedBeforeInputKCompletes_ResumesWithK(int n)
    {
        int k = n / 2;
        Promise[] promises = Promises(n);
        Task<int> awaiting = TestUtil.AwaitAsync(SpindleTask.WhenAny(TasksOf(promises)));
        Assert.False(awaiting.IsCompleted);
        promises[k].SetResult();
        Assert.Equal(k, await TestUtil.WithTimeout(awaiting, 10));
        foreach (Promise p in promises.Where((_, j) => j != k))
        {
            p.SetResult();
        }
    }

    [Theory]
    [MemberData(nameof(Counts))]
    public void WhenAny_PooledInputs_EveryInputIsReadOnceEvenTheLosers(int n)
    {
        int k = n - 1;
        Promise[] promises = Promises(n);
        SpindleTask[] inputs = promises.Select(Await).ToArray();
        SpindleTask<int> any = SpindleTask.WhenAny(inputs);
        promises[k].SetResult();
        Assert.Equal(k, any.GetAwaiter().GetResult());
        Assert.True(WasConsumed(inputs[k]), "the winner was not read");
        for (int j = 0; j < n - 1; j++)
        {
            Assert.False(WasConsumed(inputs[j]), $"loser {j} was read before it finished");
            promises[j].SetResult();
            Assert.True(WasConsumed(inputs[j]), $"loser {j} was not read when it finished");
        }
    }

    [Theory]
    [MemberData(nameof(Counts))]
    public void WhenAll_InputsCompleteInAnyOrder_CompletesOnlyAfterTheLast(int n)
    {
        var rng = new Random(n);
        for (int trial = 0; trial < 5; trial++)
        {
            Promise[] promises = Promises(n);
            SpindleTask[] inputs = promises.Select(Await).ToArray();
            SpindleTask all = SpindleTask.WhenAll(inputs);
            int[] order = Enumerable.Range(0, n).OrderBy(_ => rng.Next()).ToArray();
            for (int step = 0; step < n; step++)
            {
                Assert.False(all.IsCompleted, $"n={n}: completed after only {step} of {n} inputs");
                promises[order[step]].SetResult();
                Assert.True(WasConsumed(inputs[order[step]]), $"input {order[step]} was not read when it finished");
            }
            Assert.True(all.IsCompleted);
            Assert.Equal(SpindleTaskStatus.Succeeded, all.Status);
            all.GetAwaiter().GetResult();
        }
    }

    [Fact]
    public async Task WhenAll_AwaitedWhilePending_ResumesAfterTheLastInput()
    {
        Promise[] promises = Promises(4);
        Task awaiting = TestUtil.AwaitAsync(SpindleTask.WhenAll(TasksOf(promises)));
        for (int i = 0; i < 3; i++)
        {
            promises[i].SetResult();
            Assert.False(awaiting.IsCompleted);
        }
        promises[3].SetResult();
        await TestUtil.WithTimeout(awaiting, 10);
    }

    [Fact]
    public void WhenAll_MixOfCompletedPendingAndDefaultInputs_CompletesAfterThePendingOnes()
    {
        Promise done = new();
        done.SetResult();
        Promise[] pending = Promises(2);
        SpindleTask doneBox = Await(done); // completed synchronously
        SpindleTask[] inputs =
        [
            default,
            pending[0].Task,
            done.Task,
            SpindleTask.CompletedTask,
            Await(pending[1]),
            doneBox,
            default,
        ];
        SpindleTask all = SpindleTask.WhenAll(inputs);
        Assert.False(all.IsCompleted);
        pending[1].SetResult();
        Assert.False(all.IsCompleted);
        pending[0].SetResult();
        Assert.True(all.IsCompleted);
        all.GetAwaiter().GetResult();
        Assert.True(WasConsumed(inputs[4]));
    }

    [Fact]
    public void WhenAll_AllInputsAlreadyCompleteIncludingDefaults_CompletesAtOnce()
    {
        Promise done = new();
        done.SetResult();
        SpindleTask all = SpindleTask.WhenAll(default, done.Task, SpindleTask.CompletedTask, default);
        Assert.True(all.IsCompleted);
        all.GetAwaiter().GetResult();
    }

    [Fact]
    public void WhenAll_OnlyDefaultInputs_CompletesAtOnce()
    {
        SpindleTask all = SpindleTask.WhenAll(default(SpindleTask), default(SpindleTask));
        Assert.True(all.IsCompleted);
        all.GetAwaiter().GetResult();
    }

    [Theory]
    [InlineData(0, 3)]
    [InlineData(2, 3)]
    [InlineData(4, 5)]
    public void WhenAny_OneInputAlreadyCompleted_ReturnsItsIndexAndStillReadsThePendingOnes(int k, int n)
    {
        Promise[] promises = Promises(n);
        promises[k].SetResult();
        SpindleTask[] inputs = promises.Select(Await).ToArray();
        SpindleTask<int> any = SpindleTask.WhenAny(inputs);
        Assert.True(any.IsCompleted);
        Assert.Equal(k, any.GetAwaiter().GetResult());
        // inputs[k] completed synchronously: an async method that never suspended has no source to consume.
        for (int j = 0; j < n; j++)
        {
            if (j != k)
            {
                promises[j].SetResult();
                Assert.True(WasConsumed(inputs[j]), $"pending loser {j} was not read when it finished");
            }
        }
    }

    [Theory]
    [InlineData(0)]
    [InlineData(1)]
    [InlineData(3)]
    public void WhenAny_DefaultInputAmongPendingOnes_ReturnsTheDefaultsIndex(int k)
    {
        Promise[] promises = Promises(4);
        SpindleTask[] inputs = TasksOf(promises);
        inputs[k] = default;
        SpindleTask<int> any = SpindleTask.WhenAny(inputs);
        Assert.True(any.IsCompleted);
        Assert.Equal(k, any.GetAwaiter().GetResult());
        foreach (Promise p in promises)
        {
            p.TrySetResult();
        }
    }

    [Fact]
    public void WhenAny_SeveralInputsAlreadyCompleted_ReturnsOneOfThem()
    {
        Promise[] promises = Promises(5);
        promises[3].SetResult();
        promises[1].SetResult();
        int winner = SpindleTask.WhenAny(TasksOf(promises)).GetAwaiter().GetResult();
        Assert.Contains(winner, new[] { 1, 3 });
        foreach (Promise p in promises)
        {
            p.TrySetResult();
        }
    }

    [Fact]
    public void WhenAny_SingleInput_ReturnsZero()
    {
        var promise = new Promise();
        SpindleTask<int> any = SpindleTask.WhenAny(promise.Task);
        Assert.False(any.IsCompleted);
        promise.SetResult();
        Assert.Equal(0, any.GetAwaiter().GetResult());
    }

    [Fact]
    public void WhenAnyAndWhenAll_EnumerableOverloads_BehaveAsTheSpanOnes()
    {
        Promise[] promises = Promises(3);
        SpindleTask<int> any = SpindleTask.WhenAny(TasksOf(promises).ToList());
        promises[2].SetResult();
        Assert.Equal(2, any.GetAwaiter().GetResult());
        promises[0].SetResult();
        promises[1].SetResult();

        Promise[] more = Promises(3);
        SpindleTask all = SpindleTask.WhenAll(TasksOf(more).Select(t => t)); // a lazy sequence, not a collection
        more[0].SetResult();
        more[2].SetResult();
        Assert.False(all.IsCompleted);
        more[1].SetResult();
        Assert.True(all.IsCompleted);
        all.GetAwaiter().GetResult();
    }

    [Fact]
    public void WhenAll_ManyRoundsOnOneThread_PooledCombinatorNeverCarriesStateOver()
    {
        // A recycled combinator must start clean: no error, count, or winner from the previous use.
        var error = new InvalidTimeZoneException("round error");
        for (int round = 0; round < 200; round++)
        {
            int n = 1 + (round % 7);
            Promise[] promises = Promises(n);
            SpindleTask all = SpindleTask.WhenAll(TasksOf(promises));
            SpindleTask<int> any;
            bool fail = round % 3 == 0;
            for (int i = 0; i < n; i++)
            {
                if (fail && i == n - 1)
                {
                    promises[i].SetException(error);
                }
                else
                {
                    promises[i].SetResult();
                }
            }
            if (fail)
            {
                Assert.Same(error, Assert.Throws<InvalidTimeZoneException>(() => all.GetAwaiter().GetResult()));
            }
            else
            {
                all.GetAwaiter().GetResult();
            }

            Promise[] next = Promises(n);
            any = SpindleTask.WhenAny(TasksOf(next));
            next[round % n].SetResult();
            for (int i = 0; i < n; i++)
            {
                next[i].TrySetResult();
            }
            Assert.Equal(round % n, any.GetAwaiter().GetResult());
        }
    }
}

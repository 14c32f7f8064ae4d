using System;
using System.Collections.Concurrent;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Combinators;

/// <summary>WhenAny over typed Spindle tasks: the winner's index and result.</summary>
[Collection(SequentialCollection.Name)]
public sealed class TypedWhenAnyTests
{
    private static async SpindleTask<T> Await<T>(SpindleTask<T> task) => await task;

    [Theory]
    [InlineData(2, 1)]
    [InlineData(3, 0)]
    [InlineData(8, 7)]
    public async Task WhenAny_OneInputFinishesFirst_ReturnsItsIndexAndResult(int n, int winner)
    {
        var promises = new Promise<string>[n];
        var tasks = new SpindleTask<string>[n];
        for (int i = 0; i < n; i++)
        {
            promises[i] = new Promise<string>();
            tasks[i] = Await(promises[i].Task);
        }
        SpindleTask<(int Index, string Result)> any = SpindleTask.WhenAny(tasks);
        Assert.False(any.IsCompleted);
        promises[winner].SetResult("value " + winner);
        (int index, string result) = await TestUtil.WithTimeout(any.AsTask());
        Assert.Equal(winner, index);
        Assert.Equal("value " + winner, result);
        for (int i = 0; i < n; i++)
        {
            promises[i].TrySetResult("late");
        }
    }

    [Fact]
    public async Task WhenAny_WinnerFails_RethrowsItsExceptionAndALosingFailureIsReportedOnce()
    {
        var winnerError = new FormatException("winner");
        var loserError = new TimeoutException("loser");
        await UnobservedReports.ObserveAsync(UnobservedReports.Own.InstancesOrOnTestThreads(winnerError, loserError), async reported =>
        {
            var a = new Promise<int>();
            var b = new Promise<int>();
            // A collection expression picks the span form; separate arguments would pick the 2-tuple form.
            SpindleTask<(int, int)> any = SpindleTask.WhenAny([Await(a.Task), Await(b.Task)]);
            a.SetException(winnerError);
            Exception thrown = await Assert.ThrowsAsync<FormatException>(() => TestUtil.WithTimeout(any.AsTask()));
            Assert.Same(winnerError, thrown);
            b.SetException(loserError);
            Assert.Equal(new Exception[] { loserError }, reported.ToArray());
        });
    }

    [Fact]
    public void WhenAny_AnInputAlreadyCompleted_ReturnsItWithoutACombinator()
    {
        var pending = new Promise<int>();
        SpindleTask<(int Index, int Result)> any = SpindleTask.WhenAny([Await(pending.Task), SpindleTask.FromResult(42)]);
        Assert.Null(any._source);
        Assert.Equal((1, 42), any.GetAwaiter().GetResult());
        pending.SetResult(1);
    }

    [Fact]
    public void WhenAny_Empty_ThrowsArgumentException()
        => Assert.Throws<ArgumentException>(() => SpindleTask.WhenAny(ReadOnlySpan<SpindleTask<int>>.Empty));

    [Fact]
    public void WhenAny_SteadyState_AllocatesNothing()
    {
        var promises = new[] { new Promise<int>(), new Promise<int>(), new Promise<int>() };
        var inputs = new SpindleTask<int>[3];
        TestUtil.AssertSteadyStateAllocatesNothing(i =>
        {
            for (int k = 0; k < promises.Length; k++)
            {
                promises[k].Reset();
                inputs[k] = promises[k].Task;
            }
            SpindleTask<(int, int)> any = SpindleTask.WhenAny(inputs);
            promises[1].SetResult(i);
            (int index, int result) = any.GetAwaiter().GetResult();
            if (index != 1 || result != i)
            {
                throw new InvalidOperationException("wrong winner");
            }
            promises[0].SetResult(0);
            promises[2].SetResult(0);
        }, 1_000);
    }
}

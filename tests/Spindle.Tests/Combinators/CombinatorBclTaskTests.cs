using System;
using System.Collections.Generic;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Combinators;

/// <summary>WhenAll/WhenAny over BCL tasks: pending, faulted and canceled inputs; the tasks stay readable.</summary>
public class CombinatorBclTaskTests
{
    private static TaskCompletionSource[] Sources(int n, bool async = false)
        => Enumerable.Range(0, n).Select(_ => new TaskCompletionSource(async ? TaskCreationOptions.RunContinuationsAsynchronously : TaskCreationOptions.None)).ToArray();

    private static Task[] TasksOf(TaskCompletionSource[] sources) => sources.Select(s => s.Task).ToArray();

    [Theory]
    [InlineData(1, 0, false)]
    [InlineData(3, 1, false)]
    [InlineData(5, 4, true)]
    public async Task WhenAny_OverTaskCompletionSources_ReturnsTheIndexOfTheFirstAndTasksStayReadable(int n, int k, bool async)
    {
        TaskCompletionSource[] sources = Sources(n, async);
        Task[] tasks = TasksOf(sources);
        SpindleTask<int> any = SpindleTask.WhenAny(tasks);
        Assert.False(any.IsCompleted);
        sources[k].SetResult();
        Assert.Equal(k, await TestUtil.WithTimeout(any, 10));
        foreach (TaskCompletionSource s in sources)
        {
            s.TrySetResult();
        }
        foreach (Task t in tasks)
        {
            await t; // readable any number of times
            await t;
            Assert.True(t.IsCompletedSuccessfully);
        }
    }

    [Fact]
    public async Task WhenAll_OverTaskCompletionSources_CompletesOnlyAfterTheLast()
    {
        TaskCompletionSource[] sources = Sources(4);
        Task[] tasks = TasksOf(sources);
        SpindleTask all = SpindleTask.WhenAll(tasks);
        foreach (int i in new[] { 2, 0, 3 })
        {
            sources[i].SetResult();
            Assert.False(all.IsCompleted);
        }
        sources[1].SetResult();
        await TestUtil.WithTimeout(all, 10);
        Assert.All(tasks, t => Assert.True(t.IsCompletedSuccessfully));
    }

    [Fact]
    public async Task WhenAll_EnumerableOfMixedCompletedAndPendingTasks_CompletesAfterThePendingOnes()
    {
        TaskCompletionSource[] sources = Sources(2, async: true);
        IEnumerable<Task> tasks = new[] { Task.CompletedTask, sources[0].Task, Task.Delay(1), sources[1].Task }.Select(t => t);
        Task awaiting = TestUtil.AwaitAsync(SpindleTask.WhenAll(tasks));
        sources[1].SetResult();
        await Task.Delay(20);
        Assert.False(awaiting.IsCompleted);
        sources[0].SetResult();
        await TestUtil.WithTimeout(awaiting, 10);
    }

    [Fact]
    public async Task WhenAll_FaultedInput_RethrowsItsExceptionAndTheTaskStaysFaulted()
    {
        TaskCompletionSource[] sources = Sources(3);
        Task[] tasks = TasksOf(sources);
        var error = new InvalidTimeZoneException("bcl fault");
        SpindleTask all = SpindleTask.WhenAll(tasks);
        sources[1].SetException(error);
        sources[0].SetResult();
        sources[2].SetResult();
        Exception thrown = await Assert.ThrowsAsync<InvalidTimeZoneException>(() => TestUtil.WithTimeout(all, 10));
        Assert.Same(error, thrown);
        Assert.True(tasks[1].IsFaulted);
        Assert.Same(error, tasks[1].Exception!.InnerException);
        Assert.Same(error, await Assert.ThrowsAsync<InvalidTimeZoneException>(() => tasks[1]));
    }

    [Fact]
    public async Task WhenAll_CanceledInput_RethrowsCancellationAndTheTaskStaysCanceled()
    {
        TaskCompletionSource[] sources = Sources(2);
        Task[] tasks = TasksOf(sources);
        SpindleTask all = SpindleTask.WhenAll(tasks);
        sources[0].SetCanceled();
        sources[1].SetResult();
        await Assert.ThrowsAnyAsync<OperationCanceledException>(() => TestUtil.WithTimeout(all, 10));
        Assert.True(tasks[0].IsCanceled);
        await Assert.ThrowsAnyAsync<OperationCanceledException>(() => tasks[0]);
    }

    [Fact]
    public async Task WhenAll_AlreadyFaultedOrCanceledInputs_FastPathRethrows()
    {
        var error = new InvalidTimeZoneException("already");
        Task faulted = Task.FromException(error);
        Task canceled = Task.FromCanceled(new CancellationToken(true));

        Assert.Same(error, await Assert.ThrowsAsync<InvalidTimeZoneException>(() => TestUtil.WithTimeout(SpindleTask.WhenAll(Task.CompletedTask, faulted), 10)));
        await Assert.ThrowsAnyAsync<OperationCanceledException>(() => TestUtil.WithTimeout(SpindleTask.WhenAll(canceled, Task.CompletedTask), 10));
        Assert.Equal(SpindleTaskStatus.Canceled, SpindleTask.WhenAll(canceled).Status);
        Assert.Equal(SpindleTaskStatus.Faulted, SpindleTask.WhenAll(faulted).Status);
        await TestUtil.WithTimeout(SpindleTask.WhenAll(Task.CompletedTask, Task.CompletedTask), 10);
        Assert.True(faulted.IsFaulted);
        Assert.True(canceled.IsCanceled);
    }

    [Fact]
    public async Task WhenAny_FaultedWinner_RethrowsItsExceptionAndTheTaskStaysReadable()
    {
        TaskCompletionSource[] sources = Sources(2);
        Task[] tasks = TasksOf(sources);
        var error = new InvalidTimeZoneException("winner fault");
        SpindleTask<int> any = SpindleTask.WhenAny(tasks);
        sources[1].SetException(error);
        Assert.Same(error, await Assert.ThrowsAsync<InvalidTimeZoneException>(() => TestUtil.WithTimeout(any, 10)));
        sources[0].SetResult();
        Assert.Same(error, tasks[1].Exception!.InnerException);
        await tasks[0];
    }

    [Fact]
    public async Task WhenAny_CanceledWinner_RethrowsCancellation()
    {
        TaskCompletionSource[] sources = Sources(2);
        SpindleTask<int> any = SpindleTask.WhenAny(TasksOf(sources));
        sources[0].SetCanceled();
        await Assert.ThrowsAnyAsync<OperationCanceledException>(() => TestUtil.WithTimeout(any, 10));
        sources[1].SetResult();
    }

    [Fact]
    public async Task WhenAny_AlreadyCompletedInputs_FastPath()
    {
        var pending = new TaskCompletionSource();
        var error = new InvalidTimeZoneException("already");
        Assert.Equal(1, await TestUtil.WithTimeout(SpindleTask.WhenAny(pending.Task, Task.CompletedTask), 10));
        Assert.Same(error, await Assert.ThrowsAsync<InvalidTimeZoneException>(
            () => TestUtil.WithTimeout(SpindleTask.WhenAny(pending.Task, Task.FromException(error)), 10)));
        await Assert.ThrowsAnyAsync<OperationCanceledException>(
            () => TestUtil.WithTimeout(SpindleTask.WhenAny(Task.FromCanceled(new CancellationToken(true)), pending.Task), 10));
        Assert.Equal(0, await TestUtil.WithTimeout(SpindleTask.WhenAny(new List<Task> { Task.CompletedTask }), 10));
        pending.SetResult();
    }

    [Fact]
    public async Task WhenAny_OverRealAsyncWork_ReturnsTheFastest()
    {
        var never = new TaskCompletionSource();
        Task slow = Task.Delay(TimeSpan.FromSeconds(30));
        Task fast = Task.Delay(1);
        Assert.Equal(2, await TestUtil.WithTimeout(SpindleTask.WhenAny(never.Task, slow, fast), 10));
        never.SetResult();
    }

    [Fact]
    public async Task WhenAll_ManyPooledRoundsOverBclTasks_NeverCarryStateOver()
    {
        var error = new InvalidTimeZoneException("round");
        for (int round = 0; round < 100; round++)
        {
            TaskCompletionSource[] sources = Sources(1 + (round % 5));
            SpindleTask all = SpindleTask.WhenAll(TasksOf(sources));
            bool fail = round % 4 == 1;
            for (int i = 0; i < sources.Length; i++)
            {
                if (fail && i == 0)
                {
                    sources[i].SetException(error);
                }
                else
                {
                    sources[i].SetResult();
                }
            }
            if (fail)
            {
                Assert.Same(error, await Assert.ThrowsAsync<InvalidTimeZoneException>(() => TestUtil.WithTimeout(all, 10)));
            }
            else
            {
                await TestUtil.WithTimeout(all, 10);
            }
        }
    }
}

using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Sources;

public class ContinuationsTests
{
    private static async SpindleTask<int> AddOne(SpindleTask<int> inner) => await inner + 1;

    [Fact]
    public async Task Complete_LongChainOfAwaitingMethods_FinishesWithoutOverflowingTheStack()
    {
        // Each method awaits the previous one, so completing the promise resumes them one inside another. Past the
        // inline depth bound the rest is handed to the workers; without the bound this would overflow the stack.
        const int Length = 100_000;
        var promise = new Promise<int>();
        SpindleTask<int> chain = promise.Task;
        for (int i = 0; i < Length; i++)
        {
            chain = AddOne(chain);
        }

        // A dedicated thread with a small stack makes an unbounded dive fail fast rather than pass by luck.
        await TestUtil.WithTimeout(TestUtil.RunOnThread(() => promise.SetResult(0), "chain completer", maxStackSize: 256 * 1024));

        Assert.Equal(Length, await TestUtil.WithTimeout(chain, 60));
    }

    [Fact]
    public async Task Complete_ChainOfPromisesCompletingEachOtherInline_FinishesWithoutOverflowingTheStack()
    {
        // Continuations that complete the next source from inside themselves: the pattern the depth bound exists for.
        const int Length = 50_000;
        var promises = new Promise[Length + 1];
        for (int i = 0; i <= Length; i++)
        {
            promises[i] = new Promise();
        }
        for (int i = 0; i < Length; i++)
        {
            Promise next = promises[i + 1];
            promises[i].Task.GetAwaiter().UnsafeOnCompleted(() => next.SetResult());
        }
        Task last = TestUtil.AwaitAsync(promises[Length].Task);

        await TestUtil.WithTimeout(TestUtil.RunOnThread(() => promises[0].SetResult(), "chain completer", maxStackSize: 256 * 1024));

        await TestUtil.WithTimeout(last, 60);
    }

    [Fact]
    public void Complete_ShallowChain_RunsEntirelyInlineOnTheCompletingThread()
    {
        const int Length = 10; // well inside the inline depth bound
        var promise = new Promise<int>();
        int thread = Environment.CurrentManagedThreadId;
        int offThread = 0;
        SpindleTask<int> chain = promise.Task;
        for (int i = 0; i < Length; i++)
        {
            chain = AddOneAndCheckThread(chain);
        }

        promise.SetResult(0);

        Assert.Equal(SpindleTaskStatus.Succeeded, chain.Status);
        Assert.Equal(Length, chain.GetAwaiter().GetResult());
        Assert.Equal(0, offThread);

        async SpindleTask<int> AddOneAndCheckThread(SpindleTask<int> inner)
        {
            int value = await inner + 1;
            if (Environment.CurrentManagedThreadId != thread)
            {
                Interlocked.Increment(ref offThread);
            }
            return value;
        }
    }
}

using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// An async method that captured no context (suspended under SuppressFlow) resumes in the default context: what it sets
/// never reaches the thread that completes it, and a helping waiter's values never reach it. Found by a review.
/// </summary>
public sealed class ContextFreeBoxTests
{
    private static readonly AsyncLocal<string?> s_local = new();

    private static Task OnDefaultContextThread(Action body)
    {
        using (ExecutionContext.SuppressFlow())
        {
            return TestUtil.RunOnThread(body, "r6");
        }
    }

    private static async SpindleTask ResumeAndSet(Promise p)
    {
        await p.Task;
        s_local.Value = "leak";
        await Spindle.Yield();
    }

    /// <summary>
    /// A completing thread: an async method suspended under SuppressFlow resumes inline inside SetResult and writes an
    /// AsyncLocal. The completing thread must not see it afterwards.
    /// </summary>
    [Fact]
    public async Task CompletingThread_ContextFreeBoxResumedInline_DoesNotLeakIntoTheCompleter()
    {
        string? after = "not run";
        await TestUtil.WithTimeout(OnDefaultContextThread(() =>
        {
            var p = new Promise();
            SpindleTask t;
            using (ExecutionContext.SuppressFlow())
            {
                t = ResumeAndSet(p);
            }
            p.SetResult();
            after = s_local.Value;
            t.GetAwaiter().GetResult();
        }));

        Assert.Null(after);
    }

    /// <summary>
    /// A worker helps while it waits, with an AsyncLocal of its own: the context-free item it runs must not see the
    /// waiter's value (on a worker's loop it would see none).
    /// </summary>
    [Fact]
    public async Task Helping_ContextFreeItem_DoesNotSeeTheWaitersValue()
    {
        string? seenByItem = await TestUtil.WithTimeout(Spindle.Run(() =>
        {
            s_local.Value = "waiter";
            string? seen = "not run";
            SpindleTask inner;
            using (ExecutionContext.SuppressFlow())
            {
                inner = Spindle.Run(() => { seen = s_local.Value; });
            }
            inner.GetAwaiter().GetResult(); // helps: runs the item from its own run-next slot
            return seen;
        }));

        Assert.Null(seenByItem);
    }
}

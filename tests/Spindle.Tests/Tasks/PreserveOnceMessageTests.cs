using System;
using System.Threading.Tasks;
using Xunit;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// A server that releases many waiters with one promise wrote each waiter as <c>await release.Task.Preserve()</c>: the
/// first call's Preserve() took the task's one await, and every later waiter failed with an error telling it to "call
/// Preserve() on the task to await it from several places", which it had just done (found by the eighth user's review,
/// /tmp/user8-echo: 1,999 of 2,000 idle clients ended at once, each reporting that message). Preserve() consumes the
/// task it is called on; the error now says so and names the fix: call it once, where the task is made, and give the
/// preserved task to every waiter.
/// </summary>
public class PreserveOnceMessageTests
{
    private static async SpindleTask Waiter(SpindleTask release) => await release;

    private static async SpindleTask<int> Pending(Promise gate)
    {
        await gate.Task;
        return 1;
    }

    private static void AssertNamesPreserveOnce(InvalidOperationException e)
    {
        Assert.True(e.Message.Contains("Preserve() itself takes the task's one await", StringComparison.Ordinal)
            && e.Message.Contains("call it once", StringComparison.Ordinal)
            && e.Message.Contains("every waiter", StringComparison.Ordinal),
            "the message does not say that Preserve() is called once and its task shared: " + e.Message);
    }

    [Fact]
    public void APendingPromisesTask_PreservedByEachWaiter_TheSecondCallNamesPreserveOnce()
    {
        var release = new Promise();
        SpindleTask first = Waiter(release.Task.Preserve());
        InvalidOperationException e = Assert.Throws<InvalidOperationException>(() => release.Task.Preserve());
        AssertNamesPreserveOnce(e);

        // The fix the message names: one Preserve(), its task given to every waiter.
        var release2 = new Promise();
        SpindleTask shared = release2.Task.Preserve();
        SpindleTask a = Waiter(shared), b = Waiter(shared), c = Waiter(shared);
        release.SetResult();
        release2.SetResult();
        first.GetAwaiter().GetResult();
        a.GetAwaiter().GetResult();
        b.GetAwaiter().GetResult();
        c.GetAwaiter().GetResult();
    }

    [Fact]
    public void APendingAsyncMethodsTask_PreservedTwice_TheSecondCallNamesPreserveOnce()
    {
        var gate = new Promise();
        SpindleTask<int> task = Pending(gate);
        SpindleTask<int> preserved = task.Preserve();
        InvalidOperationException e = Assert.Throws<InvalidOperationException>(() => task.Preserve());
        AssertNamesPreserveOnce(e);
        gate.SetResult();
        Assert.Equal(1, preserved.GetAwaiter().GetResult());
    }

    [Fact]
    public async Task AFinishedAsyncMethodsTask_PreservedTwice_TheSecondCallNamesPreserveOnce()
    {
        var gate = new Promise();
        SpindleTask<int> task = Pending(gate);
        gate.SetResult();
        TestUtil.SpinUntil(() => task.IsCompleted);
        SpindleTask<int> preserved = task.Preserve();
        Assert.Equal(1, await preserved);
        InvalidOperationException e = Assert.Throws<InvalidOperationException>(() => task.Preserve());
        AssertNamesPreserveOnce(e);
    }
}

using System;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Api;

/// <summary>
/// Misuse of the public API found by a review of every member in PublicAPI.Unshipped.txt: each gets an immediate,
/// clear exception at the call, and leaves the object it was made on working for a correct use afterwards.
/// Sequential: some tests watch Spindle.UnobservedException.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class ApiMisuseReviewTests
{
    // AsTask of a pending task bridged through an async Task method, which registered on the source itself: a source that
    // already had an awaiter threw inside the BCL's builder, which rethrows on the thread pool (Task.ThrowAsync), so the
    // process crashed, and the returned Task never completed.
    [Fact]
    public async Task AsTask_OfAPendingTaskThatAlreadyHasAnAwaiter_ThrowsAtTheCall_AndTheAwaiterStillGetsTheOutcome()
    {
        var typed = new Promise<int>();
        SpindleTask<int> t = typed.Task;
        Task<int> first = t.AsTask();
        InvalidOperationException e1 = Assert.Throws<InvalidOperationException>(() => { _ = t.AsTask(); });
        Assert.Contains("Preserve()", e1.Message, StringComparison.Ordinal);

        var untyped = new Promise();
        SpindleTask u = untyped.Task;
        Task firstUntyped = u.AsTask();
        InvalidOperationException e2 = Assert.Throws<InvalidOperationException>(() => { _ = u.AsTask(); });
        Assert.Contains("Preserve()", e2.Message, StringComparison.Ordinal);

        // A task awaited by a Spindle async method first: AsTask is the second awaiter, and is refused the same way.
        var gate = new Promise<int>();
        SpindleTask<int> g = gate.Task;
        SpindleTask<int> awaiting = Echo(g);
        Assert.Throws<InvalidOperationException>(() => { _ = g.AsTask(); });

        typed.SetResult(7);
        untyped.SetResult();
        gate.SetResult(9);
        Assert.Equal(7, await TestUtil.WithTimeout(first));
        await TestUtil.WithTimeout(firstUntyped);
        Assert.Equal(9, await TestUtil.WithTimeout(awaiting));

        // The promises are intact: a new use bridges as before.
        typed.Reset();
        Task<int> next = typed.Task.AsTask();
        typed.SetResult(8);
        Assert.Equal(8, await TestUtil.WithTimeout(next));
    }

    private static async SpindleTask<int> Echo(SpindleTask<int> task) => await task;
}

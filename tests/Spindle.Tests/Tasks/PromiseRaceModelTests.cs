using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// Targeted races on a void <see cref="Promise"/> (whose success takes the one-CAS path, TrySetVoidResultDeferred, not
/// the typed promises' Completing mark): an async Spindle method's box registering (the direct-waiter path) while another
/// thread completes the promise, with and without runContinuationsAsynchronously. The method must resume exactly once
/// and see success or the exact fault, whichever side wins.
/// </summary>
public sealed class PromiseRaceModelTests
{
    private static int s_resumed;

    private static async SpindleTask<int> AwaitOnce(SpindleTask task)
    {
        try
        {
            await task;
        }
        catch (InvalidTimeZoneException)
        {
            Interlocked.Increment(ref s_resumed);
            return 2;
        }
        Interlocked.Increment(ref s_resumed);
        return 1;
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task VoidPromise_BoxRegistrationRacingCompletion_ResumesExactlyOnceWithTheOutcome(bool runContinuationsAsynchronously)
    {
        var promise = new Promise(runContinuationsAsynchronously);
        var error = new InvalidTimeZoneException("the fault");
        SpindleTask<int> method = default;
        int before = 0;

        int ran = await TestUtil.WithTimeout(Race.Run(
            TestUtil.Stress(4_000),
            before: round =>
            {
                if (round > 0)
                {
                    promise.Reset();
                }
                before = Volatile.Read(ref s_resumed);
            },
            after: round =>
            {
                // Blocks until the method has finished (it may have been queued to a worker).
                int outcome = method.GetAwaiter().GetResult();
                Assert.Equal(round % 3 == 0 ? 2 : 1, outcome);
                Assert.Equal(before + 1, Volatile.Read(ref s_resumed));
                Assert.True(promise.IsCompleted);
            },
            round => method = AwaitOnce(promise.Task),
            round =>
            {
                bool won = round % 3 == 0 ? promise.TrySetException(error) : promise.TrySetResult();
                Assert.True(won);
            }), TestUtil.StressTimeout(60));

        Assert.True(ran > 0);
    }
}

/// <summary>
/// The ExecutionContext across a promise's completion, on the default-context fast path (a box that captured the default
/// context, resumed inline by a completer in the default context, runs without ExecutionContext.Run and restores the
/// default afterwards): what the resumed method sets must not leak into the completer, with or without dispatch.
/// </summary>
public sealed class PromiseDefaultContextTests
{
    private static readonly AsyncLocal<string?> s_local = new();

    private static async SpindleTask<string?> SetAfterResuming(Promise<int> promise, string value)
    {
        string? before = s_local.Value;
        await promise.Task;
        s_local.Value = value;
        return before;
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task Promise_MethodResumedInlineOnTheDefaultContext_ItsAsyncLocalWritesDoNotLeakIntoTheCompleter(bool runContinuationsAsynchronously)
    {
        string? leaked = "not run";
        string? seenBefore = "not run";
        var done = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var thread = new Thread(() =>
        {
            try
            {
                for (int i = 0; i < 100; i++)
                {
                    var promise = new Promise<int>(runContinuationsAsynchronously);
                    SpindleTask<string?> method = SetAfterResuming(promise, "set by use " + i);
                    promise.SetResult(i);
                    seenBefore = method.GetAwaiter().GetResult();
                    leaked = s_local.Value;
                    if (leaked is not null || seenBefore is not null)
                    {
                        break;
                    }
                }
                done.SetResult();
            }
            catch (Exception e)
            {
                done.SetException(e);
            }
        })
        { IsBackground = true };
        thread.UnsafeStart(); // the default context: no AsyncLocal of the test runner's
        await TestUtil.WithTimeout(done.Task);

        Assert.Null(seenBefore);
        Assert.Null(leaked);
    }
}

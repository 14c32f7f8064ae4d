#if DEBUG
using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// A thread blocked reading a promise's task (GetAwaiter().GetResult() while it is pending) is woken inside Set*, but
/// reads the outcome only when it runs again. An owner that resets the promise right after Set* (for its next round)
/// can do so before that read. The read then met the next use's cleared core and returned as a success with a default
/// result: a fault, a cancellation or a value was silently lost. Promise.Reset documents that a reader that comes too
/// late gets the await-once error, as an awaiting continuation does. Found by the bridges review; the Debug-only hooks
/// in BlockingWait put the reset exactly between the wake-up and the read.
/// </summary>
public sealed class BlockingReadResetTests
{
    private static Task<T> BlockedRead<T>(Func<T> read, Action onRegistered, Action onWoke)
        => Task.Factory.StartNew(() =>
        {
            BlockingWait.TestHookRegistered = onRegistered;
            BlockingWait.TestHookWoke = onWoke;
            try
            {
                return read();
            }
            finally
            {
                BlockingWait.TestHookRegistered = null;
                BlockingWait.TestHookWoke = null;
            }
        }, CancellationToken.None, TaskCreationOptions.LongRunning, TaskScheduler.Default);

    [Fact]
    public async Task BlockedReaderOfAFaultedPromise_ResetBeforeItReads_GetsTheAwaitOnceError_NotASuccess()
    {
        var promise = new Promise();
        SpindleTask task = promise.Task;
        using var registered = new ManualResetEventSlim();
        Task<int> reader = BlockedRead(() => { task.GetAwaiter().GetResult(); return 0; }, registered.Set, () => promise.Reset());
        Assert.True(registered.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "the reader never blocked");

        promise.SetException(new InvalidTimeZoneException("lost"));

        Exception error = await Assert.ThrowsAnyAsync<Exception>(() => TestUtil.WithTimeout(reader));
        Assert.IsType<InvalidOperationException>(error);
        Assert.Contains("Preserve()", error.Message, StringComparison.Ordinal);
        Assert.False(promise.IsCompleted); // the reset's next use is untouched
        promise.SetResult();
        promise.Task.GetAwaiter().GetResult();
    }

    [Fact]
    public async Task BlockedReaderOfATypedPromise_ResetBeforeItReads_GetsTheAwaitOnceError_NotADefaultValue()
    {
        var promise = new Promise<string>();
        SpindleTask<string> task = promise.Task;
        using var registered = new ManualResetEventSlim();
        Task<string> reader = BlockedRead(() => task.GetAwaiter().GetResult(), registered.Set, () => promise.Reset());
        Assert.True(registered.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "the reader never blocked");

        promise.SetResult("value");

        Exception error = await Assert.ThrowsAnyAsync<Exception>(() => TestUtil.WithTimeout(reader));
        Assert.IsType<InvalidOperationException>(error);
    }

    [Fact]
    public async Task BlockedReader_NoReset_GetsTheOutcome()
    {
        var promise = new Promise<string>();
        SpindleTask<string> task = promise.Task;
        using var registered = new ManualResetEventSlim();
        Task<string> reader = BlockedRead(() => task.GetAwaiter().GetResult(), registered.Set, () => { });
        Assert.True(registered.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "the reader never blocked");

        promise.SetResult("value");

        Assert.Equal("value", await TestUtil.WithTimeout(reader));
    }
}
#endif

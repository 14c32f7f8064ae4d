using System;
using System.Threading;
using System.Threading.Tasks;
using System.Threading.Tasks.Sources;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// A ValueTask made from a Spindle source that runs its continuations asynchronously, awaited under a
/// SynchronizationContext: the completer posts to the context itself, as <c>ManualResetValueTaskSourceCore</c> does from
/// SetResult, instead of queuing a worker item that would post. Run alone: it holds every worker.
/// </summary>
[Collection(SequentialCollection.Name)]
public class ValueTaskContextSequentialTests
{
    private sealed class CountingContext : SynchronizationContext
    {
        public int Posts;

        public override void Post(SendOrPostCallback d, object? state)
        {
            Interlocked.Increment(ref Posts);
            ThreadPool.QueueUserWorkItem(_ => d(state));
        }
    }

    private sealed class BclSource : IValueTaskSource
    {
        public ManualResetValueTaskSourceCore<bool> Core = new() { RunContinuationsAsynchronously = true };

        public void GetResult(short token) => Core.GetResult(token);

        public ValueTaskSourceStatus GetStatus(short token) => Core.GetStatus(token);

        public void OnCompleted(Action<object?> continuation, object? state, short token, ValueTaskSourceOnCompletedFlags flags)
            => Core.OnCompleted(continuation, state, token, flags);
    }

    /// <summary>Registers what a plain await of <paramref name="task"/> registers, with <paramref name="context"/> current.</summary>
    private static void AwaitUnder(SynchronizationContext context, ValueTask task, Action continuation)
    {
        SynchronizationContext? before = SynchronizationContext.Current;
        SynchronizationContext.SetSynchronizationContext(context);
        try
        {
            task.GetAwaiter().UnsafeOnCompleted(continuation);
        }
        finally
        {
            SynchronizationContext.SetSynchronizationContext(before);
        }
    }

    [Fact]
    public void Reference_Bcl_RunContinuationsAsynchronously_PostsFromSetResult()
    {
        var context = new CountingContext();
        var source = new BclSource();
        AwaitUnder(context, new ValueTask(source, source.Core.Version), () => { });
        source.Core.SetResult(true);
        Assert.Equal(1, Volatile.Read(ref context.Posts));
    }

    [Theory]
    [InlineData("promise")]
    [InlineData("signal")]
    public void DispatchingSource_AwaitedAsValueTaskUnderAContext_PostsFromTheCompleter_WhileEveryWorkerIsBusy(string kind)
    {
        var context = new CountingContext();
        var resumed = new ManualResetEventSlim(false);
        var promise = new Promise(runContinuationsAsynchronously: true);
        var signal = new Signal(initiallySet: false, runContinuationsAsynchronously: true);
        AwaitUnder(context, kind == "promise" ? promise.Task.AsValueTask() : signal.WaitAsync().AsValueTask(), resumed.Set);
        using (new HoldWorkers())
        {
            if (kind == "promise")
            {
                promise.SetResult();
            }
            else
            {
                signal.Set();
            }
            Assert.Equal(1, Volatile.Read(ref context.Posts));
            Assert.True(resumed.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "the continuation never resumed on its context while every worker was busy");
        }
    }
}

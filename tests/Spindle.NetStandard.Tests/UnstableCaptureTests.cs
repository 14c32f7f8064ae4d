using System;
using System.Runtime.CompilerServices;
using System.Threading;
using System.Threading.Tasks;
using SpindleLib.Tests;

namespace SpindleLib.NetStandard.Tests;

/// <summary>
/// Mono (Unity's runtime) returns a new ExecutionContext from every capture, so there <c>ContextFlow.CaptureIsStable</c>
/// is false and the loops that re-enter ExecutionContext.Run after an item changed the context (a worker's, a frame
/// phase's, a helping waiter's) run as they are. That cannot happen on .NET, where these tests run, so they switch the
/// mode on and check that the loops still run everything (a worker once returned at once, for ever, when every capture
/// looked like a change) and that frames still allocate nothing.
/// </summary>
[Collection(SequentialCollection.Name)] // the switch is process-wide
public sealed class UnstableCaptureTests
{
    private static readonly AsyncLocal<string?> s_local = new();

    private sealed class CountingItem : WorkItem
    {
        private readonly Action _action;

        public CountingItem(Action action) => _action = action;

        public override void Execute() => _action();
    }

    [Fact]
    public void CaptureIsStable_OnThisRuntime() => Assert.True(ContextFlow.CaptureIsStable);

    [Fact]
    public void Run_AnAsyncLocalHandlerThatRunsDuringTheContextSwitch_DoesNotDisturbTheOuterRunsCallback()
    {
        // netstandard2.1's ContextFlow.Run passes its callback in thread-statics; switching into the context fires the
        // AsyncLocal's change handler first, and the handler runs a Run of its own.
        int nested = 0;
        int me = Environment.CurrentManagedThreadId;
        var local = new AsyncLocal<string?>(change =>
        {
            if (change.ThreadContextChanged && Environment.CurrentManagedThreadId == me && Volatile.Read(ref nested) == 0)
            {
                Interlocked.Increment(ref nested);
                ContextFlow.Run(ExecutionContext.Capture()!, _ => { }, null);
            }
        });
        local.Value = "in the captured context";
        ExecutionContext captured = ExecutionContext.Capture()!;
        local.Value = null;
        object expected = new();
        object? seen = null;
        string? value = null;

        ContextFlow.Run(captured, state => { seen = state; value = local.Value; }, expected);

        Assert.Equal(1, nested);
        Assert.Same(expected, seen);
        Assert.Equal("in the captured context", value);
    }

    [Fact]
    public async Task Workers_WhenCapturesAreNotStable_RunEveryItemAndHelpWhileWaiting()
    {
        ContextFlow.CaptureIsStable = false;
        var pool = new WorkerPool(2, "unstable-capture worker");
        try
        {
            const int Items = 10_000;
            int ran = 0;
            var done = new TaskCompletionSource<bool>(TaskCreationOptions.RunContinuationsAsynchronously);
            using (ExecutionContext.SuppressFlow())
            {
                for (int i = 0; i < Items; i++)
                {
                    pool.Queue(new CountingItem(() =>
                    {
                        s_local.Value = "set by an item"; // with nothing to compare, the loop cannot notice this and must go on
                        if (Interlocked.Increment(ref ran) == Items)
                        {
                            done.SetResult(true);
                        }
                    }));
                }
            }
            await TestUtil.WithTimeout(done.Task);
            Assert.Equal(Items, Volatile.Read(ref ran));
        }
        finally
        {
            pool.Dispose();
            ContextFlow.CaptureIsStable = true;
        }
    }

    /// <summary>
    /// Spindle.UnobservedException's handlers run in the default context on Mono too (review45). Where captures are not
    /// stable the helping waiter's helper, which the report goes through, cannot tell the reporting thread's context from
    /// the default and ran the handlers as they were: a forgotten promise faulted by a thread serving another request was
    /// reported with that request's AsyncLocal value, and what the handler set stayed in the completer's code after its
    /// SetException returned (the .NET build's UnobservedHandlerContextTests, on Mono's path).
    /// </summary>
    [Fact]
    public async Task UnobservedExceptionHandlers_WhenCapturesAreNotStable_RunInTheDefaultContext_AndWhatTheySetStaysThere()
    {
        var fault = new InvalidOperationException("review45: a report where captures are not stable");
        var seen = new TaskCompletionSource<string?>(TaskCreationOptions.RunContinuationsAsynchronously);
        using var watch = UnobservedReports.Start(e => ReferenceEquals(e, fault), onOwn: _ =>
        {
            seen.TrySetResult(s_local.Value ?? "no value");
            s_local.Value = "set by the handler";
        });
        var promise = new Promise();
        promise.Task.Forget();
        string? after = "not run";
        ContextFlow.CaptureIsStable = false;
        try
        {
            var thread = new Thread(() =>
            {
                s_local.Value = "completer's request";
                promise.SetException(fault);
                after = s_local.Value;
            });
            thread.UnsafeStart();
            thread.Join();
        }
        finally
        {
            ContextFlow.CaptureIsStable = true;
        }
        Assert.Equal("no value", await seen.Task.WaitAsync(TimeSpan.FromSeconds(30)));
        Assert.Equal("completer's request", after);
    }

    [Fact]
    public void Frames_WhenCapturesAreNotStable_ResumeEveryTaskEachFrameAndAllocateNothing()
    {
        ContextFlow.CaptureIsStable = false;
        try
        {
            const int Tasks = 1_000;
            FrameLoop loop = FrameUtil.NewBoundLoop();
            var counts = new int[Tasks];
            var stop = new StrongBox<bool>();
            for (int i = 0; i < Tasks; i++)
            {
                Loop(loop, counts, i, stop).Forget();
            }

            TestUtil.AssertSteadyStateAllocatesNothing(_ => loop.RunFrame(), 50);

            Assert.All(counts, c => Assert.Equal(counts[0], c));
            Assert.True(counts[0] >= 150);
            stop.Value = true;
            loop.RunFrame();
            Assert.Equal(0, loop.QueuedCount);
        }
        finally
        {
            ContextFlow.CaptureIsStable = true;
        }

        static async SpindleTask Loop(FrameLoop loop, int[] counts, int index, StrongBox<bool> stop)
        {
            while (!stop.Value)
            {
                await loop.NextFrame();
                counts[index]++;
            }
        }
    }
}

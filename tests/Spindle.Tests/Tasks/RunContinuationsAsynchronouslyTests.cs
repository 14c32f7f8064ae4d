using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// Sources created with runContinuationsAsynchronously: the completing thread queues the awaiting code to the workers
/// and returns at once, as TaskCreationOptions.RunContinuationsAsynchronously does for a TaskCompletionSource.
/// </summary>
public sealed class RunContinuationsAsynchronouslyTests
{
    /// <summary>Where an awaiting method resumed, and whether the completer had returned by then.</summary>
    private sealed class Resumption
    {
        public readonly ManualResetEventSlim CompleterReturned = new();
        public int ThreadId;
        public bool OnWorker;
        public bool CompleterHadReturned;
        public Exception? Error;

        public void Record()
        {
            ThreadId = Environment.CurrentManagedThreadId;
            OnWorker = TestUtil.OnSpindleWorker;
            // Inline resumption would run inside the completer's call, which can return only after this wait times out.
            CompleterHadReturned = CompleterReturned.Wait(TimeSpan.FromSeconds(10));
        }
    }

    private static async SpindleTask AwaitAndRecord(SpindleTask task, Resumption at)
    {
        try
        {
            await task;
        }
        catch (Exception ex)
        {
            at.Error = ex;
        }
        at.Record();
    }

    private static async SpindleTask<int> AwaitAndRecord(SpindleTask<int> task, Resumption at)
    {
        int result = -1;
        try
        {
            result = await task;
        }
        catch (Exception ex)
        {
            at.Error = ex;
        }
        at.Record();
        return result;
    }

    private static void AssertResumedOnAWorkerAfterTheCompleterReturned(Resumption at)
    {
        Assert.True(at.CompleterHadReturned, "the awaiting code ran inside the completer's call");
        Assert.True(at.OnWorker, "the awaiting code did not run on a Spindle worker");
        // (It may be the completer's own thread, if that is a worker: queued there, it runs after the completer returns.)
    }

    [Fact]
    public async Task Promise_Default_RunsTheAwaiterOnTheCompletingThread()
    {
        var promise = new Promise();
        Assert.False(promise.RunsContinuationsAsynchronously);
        var at = new Resumption();
        at.CompleterReturned.Set(); // inline: the completer cannot have returned, so do not make the awaiter wait for it
        SpindleTask waiting = AwaitAndRecord(promise.Task, at);

        int completer = Environment.CurrentManagedThreadId;
        promise.SetResult();

        Assert.Equal(completer, at.ThreadId);
        await TestUtil.WithTimeout(waiting);
    }

    [Fact]
    public async Task Promise_SetResult_QueuesTheAwaiterToAWorkerAndReturnsFirst()
    {
        var promise = new Promise(runContinuationsAsynchronously: true);
        Assert.True(promise.RunsContinuationsAsynchronously);
        var at = new Resumption();
        SpindleTask waiting = AwaitAndRecord(promise.Task, at);

        promise.SetResult();
        at.CompleterReturned.Set();

        await TestUtil.WithTimeout(waiting);
        AssertResumedOnAWorkerAfterTheCompleterReturned(at);
        Assert.Null(at.Error);
    }

    [Theory]
    [InlineData("result")]
    [InlineData("exception")]
    [InlineData("canceled")]
    public async Task PromiseOfT_EveryKindOfCompletion_IsQueuedToAWorker(string outcome)
    {
        var promise = new Promise<int>(runContinuationsAsynchronously: true);
        for (int use = 0; use < 3; use++)
        {
            promise.Reset(); // the flag outlives every reset
            var at = new Resumption();
            SpindleTask<int> waiting = AwaitAndRecord(promise.Task, at);

            _ = outcome switch
            {
                "result" => promise.TrySetResult(7),
                "exception" => promise.TrySetException(new InvalidOperationException("failed on purpose")),
                _ => promise.TrySetCanceled(),
            };
            at.CompleterReturned.Set();

            int result = await TestUtil.WithTimeout(waiting);
            AssertResumedOnAWorkerAfterTheCompleterReturned(at);
            switch (outcome)
            {
                case "result":
                    Assert.Equal(7, result);
                    Assert.Null(at.Error);
                    break;
                case "exception":
                    Assert.IsType<InvalidOperationException>(at.Error);
                    break;
                default:
                    Assert.IsAssignableFrom<OperationCanceledException>(at.Error);
                    break;
            }
        }
    }

    [Fact]
    public async Task Signal_SetAndCancellation_QueueTheWaiterToAWorker()
    {
        var signal = new Signal(initiallySet: false, runContinuationsAsynchronously: true);
        Assert.True(signal.RunsContinuationsAsynchronously);
        Assert.False(new Signal(initiallySet: true).RunsContinuationsAsynchronously);

        var set = new Resumption();
        SpindleTask waiting = AwaitAndRecord(signal.WaitAsync(), set);
        signal.Set();
        set.CompleterReturned.Set();
        await TestUtil.WithTimeout(waiting);
        AssertResumedOnAWorkerAfterTheCompleterReturned(set);
        Assert.Null(set.Error);

        using var cts = new CancellationTokenSource();
        var cancelled = new Resumption();
        waiting = AwaitAndRecord(signal.WaitAsync(cts.Token), cancelled);
        cts.Cancel();
        cancelled.CompleterReturned.Set();
        await TestUtil.WithTimeout(waiting);
        AssertResumedOnAWorkerAfterTheCompleterReturned(cancelled);
        Assert.IsAssignableFrom<OperationCanceledException>(cancelled.Error);
    }

    [Fact]
    public async Task Promise_AwaitedAsAValueTaskByBclCode_ResumesOffTheCompletingThread()
    {
        var promise = new Promise<int>(runContinuationsAsynchronously: true);
        var release = new ManualResetEventSlim();
        bool completerHadReturned = false;

        async Task<int> BclAwaiter()
        {
            int value = await promise.Task.AsValueTask().ConfigureAwait(false);
            completerHadReturned = release.Wait(TimeSpan.FromSeconds(10));
            return value;
        }

        Task<int> waiting = BclAwaiter();
        promise.SetResult(5);
        release.Set();

        Assert.Equal(5, await TestUtil.WithTimeout(waiting));
        Assert.True(completerHadReturned, "the BCL awaiter ran inside the completer's call");
    }

    private static readonly AsyncLocal<string?> s_local = new();

    private static async SpindleTask<string?> ReadLocalAfter(SpindleTask task)
    {
        s_local.Value = "set before the await";
        await task;
        return s_local.Value;
    }

    [Fact]
    public async Task Promise_DispatchedResumption_StillSeesTheMethodsExecutionContext()
    {
        var promise = new Promise(runContinuationsAsynchronously: true);
        SpindleTask<string?> reading = ReadLocalAfter(promise.Task);

        promise.SetResult();

        Assert.Equal("set before the await", await TestUtil.WithTimeout(reading));
        Assert.Null(s_local.Value); // the method's change did not leak to its caller
    }

    [Fact]
    public void Promise_AlreadyCompleted_IsReadAtOnceWithNoDispatch()
    {
        var promise = new Promise<int>(runContinuationsAsynchronously: true);
        promise.SetResult(3);

        SpindleTask<int> task = promise.Task;

        Assert.True(task.IsCompleted);
        Assert.Equal(3, task.GetAwaiter().GetResult());
    }

    [Theory]
    [InlineData(0, 1)]
    [InlineData(0x7FFF, 0x8000)]
    [InlineData(0xFFFF, 0)]
    [InlineData(0x5_1234, 0x1235)] // a word in the Completed state: the next use is Pending
    [InlineData(int.MaxValue, 1 << 25)] // bit 25, a promise's "awaited again after a let-go" (AwaitAfterLetGoBit), is kept too
    [InlineData(int.MinValue, int.MinValue + 1)]
    [InlineData(int.MinValue | 0xFFFF, int.MinValue)]
    [InlineData(-1, int.MinValue | 1 << 25)]
    [InlineData(1 << 25 | 0x5_0007, 1 << 25 | 8)]
    public void NextVersion_WrapsTheCounterAndKeepsTheFlagBit(int version, int next)
    {
        Assert.Equal(next, SourceCore<VoidResult>.NextVersion(version));
    }

    [Fact]
    public void Flag_SurvivesTheTokenWrappingAround()
    {
        var flagged = new Promise(runContinuationsAsynchronously: true);
        var plain = new Promise();
        for (int i = 0; i < 70_000; i++) // past 65,536 uses: the 16-bit token wraps
        {
            flagged.Reset();
            plain.Reset();
        }
        Assert.True(flagged.RunsContinuationsAsynchronously);
        Assert.False(plain.RunsContinuationsAsynchronously);
        SpindleTask task = flagged.Task;
        flagged.SetResult();
        task.GetAwaiter().GetResult();
    }
}

/// <summary>
/// Sources that run continuations asynchronously, with every worker held: run alone, since holding the workers would
/// stall every other test.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class RunContinuationsAsynchronouslySequentialTests
{
    /// <summary>
    /// A thread blocked in GetResult is not awaiting code: its wake-up only sets an event, so the completer sets it
    /// itself, as the BCL's Task.Wait is woken inline by a RunContinuationsAsynchronously TaskCompletionSource. Queued to
    /// the workers instead, it would wait for a free worker (a thread that is not a worker never runs queued work), and
    /// for ever if the workers wait for the blocked thread.
    /// </summary>
    [Theory]
    [InlineData("promise")]
    [InlineData("signal")]
    public void BlockingGetResult_OnAThreadThatIsNotAWorker_IsWokenByTheCompleterWhileEveryWorkerIsBusy(string kind)
    {
        var promise = new Promise<int>(runContinuationsAsynchronously: true);
        var signal = new Signal(initiallySet: false, runContinuationsAsynchronously: true);
        SpindleTask<int> promiseTask = promise.Task;
        SpindleTask signalTask = signal.WaitAsync();
        using var hold = new HoldWorkers();

        int result = 0;
        var waiter = new Thread(() =>
        {
            if (kind == "promise")
            {
                result = promiseTask.GetAwaiter().GetResult();
            }
            else
            {
                signalTask.GetAwaiter().GetResult();
                result = 5;
            }
        })
        { IsBackground = true, Name = "user thread blocked in GetResult" };
        waiter.Start();
        // Asleep in GetResult, registered on the source (so the completion has a waiter to wake).
        TestUtil.SpinUntil(() => (waiter.ThreadState & ThreadState.WaitSleepJoin) != 0);

        if (kind == "promise")
        {
            promise.SetResult(5);
        }
        else
        {
            signal.Set();
        }

        Assert.True(waiter.Join(TimeSpan.FromSeconds(10)), "the blocked thread's wake-up was queued behind the busy workers");
        Assert.True(hold.StillHolding);
        Assert.Equal(5, result);
    }
}

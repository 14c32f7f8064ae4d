using System;
using System.Runtime.CompilerServices;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// A second pending await of a Spindle task from a BCL async method (an <c>async Task</c>: every ASP.NET Core handler)
/// is refused in the awaiter's <c>OnCompleted</c>. The BCL's builders rethrow an exception from there on the thread
/// pool, which ended a twenty-fifth user's service (docs/decisions.md section 53). Now the refusal faults the method
/// that made the await, as it does for an <c>async SpindleTask</c> method, and names it; the first awaiter is untouched
/// (docs/decisions.md section 55, <c>RefusedAwaits</c>).
/// </summary>
public sealed class RefusedAwaitFromBclMethodTests
{
    private static string NamedIn(string method) => " The refused await is in " + typeof(RefusedAwaitFromBclMethodTests).FullName + "." + method + ".";

    /// <summary>A request handler, as ASP.NET Core's are.</summary>
    private static async Task ServeReady(SpindleTask ready) => await ready;

    private static async Task<int> ServeValue(SpindleTask<int> value) => await value + 1;

    private static async ValueTask<int> ServeValueAsValueTask(SpindleTask<int> value) => await value + 1;

    [AsyncMethodBuilder(typeof(PoolingAsyncValueTaskMethodBuilder<>))]
    private static async ValueTask<int> ServeValuePooled(SpindleTask<int> value) => await value + 1;

    private static async Task<bool> ServeSuppressed(SpindleTask ready) => await ready.SuppressCancellationThrow();

    private static async Task<InvalidOperationException> Refused(Task task)
    {
        await TestUtil.WithTimeout(((Task)task).ContinueWith(static _ => { }, TaskScheduler.Default));
        Assert.True(task.IsFaulted, $"the refused await's method ended {task.Status}, not faulted");
        return Assert.IsType<InvalidOperationException>(task.Exception!.InnerException);
    }

    private static void QueuedReturnsToZero() => TestUtil.SpinUntil(() => RefusedAwaits.Queued == 0, () => $"{RefusedAwaits.Queued} refused resumptions still queued");

    [Fact]
    public async Task SecondPendingAwait_FromAsyncTask_FaultsThatMethod_AndTheFirstGetsTheResult()
    {
        var ready = new Promise();
        Task first = ServeReady(ready.Task);
        Task second = ServeReady(ready.Task); // refused: the first owns the one await
        InvalidOperationException e = await Refused(second);
        Assert.StartsWith(ThrowHelper.SecondAwaiterMessage, e.Message, StringComparison.Ordinal);
        Assert.EndsWith(NamedIn(nameof(ServeReady)), e.Message, StringComparison.Ordinal);
        Assert.False(first.IsCompleted);

        ready.SetResult();
        await TestUtil.WithTimeout(first);
        Assert.True(first.IsCompletedSuccessfully);
        QueuedReturnsToZero();
    }

    [Fact]
    public async Task SecondPendingAwait_FromEachBclBuilder_FaultsThatMethodOnly()
    {
        var value = new Promise<int>();
        Task<int> first = ServeValue(value.Task);
        var refused = new (Task Task, string Method)[]
        {
            (ServeValue(value.Task), nameof(ServeValue)),
            (ServeValueAsValueTask(value.Task).AsTask(), nameof(ServeValueAsValueTask)),
            (ServeValuePooled(value.Task).AsTask(), nameof(ServeValuePooled)),
        };
        foreach ((Task task, string method) in refused)
        {
            InvalidOperationException e = await Refused(task);
            Assert.StartsWith(ThrowHelper.SecondAwaiterMessage, e.Message, StringComparison.Ordinal);
            Assert.EndsWith(NamedIn(method), e.Message, StringComparison.Ordinal);
        }
        value.SetResult(41);
        Assert.Equal(42, await TestUtil.WithTimeout(first));
        QueuedReturnsToZero();
    }

    [Fact]
    public async Task SecondPendingAwait_OfSuppressedCancellation_FaultsThatMethod()
    {
        var ready = new Promise();
        Task<bool> first = ServeSuppressed(ready.Task);
        InvalidOperationException e = await Refused(ServeSuppressed(ready.Task));
        Assert.EndsWith(NamedIn(nameof(ServeSuppressed)), e.Message, StringComparison.Ordinal);
        ready.SetCanceled();
        Assert.True(await TestUtil.WithTimeout(first)); // canceled, as a value, for the awaiter that owned the use
        QueuedReturnsToZero();
    }

    /// <summary>
    /// A pooled async method's task: its box goes back to the pool when the owning awaiter reads it, and is rented again.
    /// The refused await's read must neither block on the pending box nor read its next use.
    /// </summary>
    [Fact]
    public async Task SecondPendingAwait_OfAPooledAsyncMethod_NeverReadsTheBoxOrItsNextUse()
    {
        static async SpindleTask<int> Load(Promise<int> gate) => await gate.Task * 2;

        var gate = new Promise<int>();
        SpindleTask<int> load = Load(gate);
        Task<int> first = ServeValue(load);
        InvalidOperationException e = await Refused(ServeValue(load));
        Assert.StartsWith(ThrowHelper.SecondAwaiterMessage, e.Message, StringComparison.Ordinal);

        gate.SetResult(10);
        Assert.Equal(21, await TestUtil.WithTimeout(first));
        var nextGate = new Promise<int>();
        SpindleTask<int> next = Load(nextGate); // may rent the same box
        nextGate.SetResult(3);
        Assert.Equal(6, await TestUtil.WithTimeout(next));
        QueuedReturnsToZero();
    }

#if DEBUG
    /// <summary>
    /// The refused method's resumption held until the source has completed, and the owner not yet read it: the
    /// resumed read finds the use completed, under the same token, so only the record of the refusal stops it from
    /// taking the owner's value (and from giving the pooled box back under it).
    /// </summary>
    [Fact]
    public async Task RefusedResumption_RunningAfterTheCompletion_NeverTakesTheOwnersValue()
    {
        static async SpindleTask<int> Load(Promise<int> gate) => await gate.Task;

        var gate = new Promise<int>();
        SpindleTask<int> load = Load(gate);
        object source = load._source!;
        SpindleTask<int>.Awaiter owner = load.GetAwaiter();
        using var ownerResumed = new ManualResetEventSlim();
        owner.UnsafeOnCompleted(ownerResumed.Set); // the owner reads later, by hand
        using var completed = new ManualResetEventSlim();
        RefusedAwaits.TestHookBeforeResume = s =>
        {
            if (ReferenceEquals(s, source))
            {
                completed.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)); // no assert: a throw here would end the process
            }
        };
        try
        {
            Task<int> second = ServeValue(load); // refused; its resumption waits in the hook
            gate.SetResult(20);
            Assert.True(ownerResumed.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)));
            completed.Set();
            InvalidOperationException e = await Refused(second);
            Assert.StartsWith(ThrowHelper.SecondAwaiterMessage, e.Message, StringComparison.Ordinal);
            Assert.Equal(20, owner.GetResult());
        }
        finally
        {
            completed.Set();
            RefusedAwaits.TestHookBeforeResume = null;
        }
        QueuedReturnsToZero();
    }
#endif

    /// <summary>An <c>async void</c> method's fault goes where the BCL sends it: to the context it started under.</summary>
    [Fact]
    public async Task SecondPendingAwait_FromAsyncVoid_PostsTheRefusalToItsContext()
    {
        var ready = new Promise();
        var posted = new TaskCompletionSource<(SendOrPostCallback, object?)>(TaskCreationOptions.RunContinuationsAsynchronously);
        var context = new RecordingContext(posted);
        Task first = ServeReady(ready.Task);
        SynchronizationContext? outer = SynchronizationContext.Current;
        SynchronizationContext.SetSynchronizationContext(context);
        try
        {
            HandleReady(ready.Task);
        }
        finally
        {
            SynchronizationContext.SetSynchronizationContext(outer);
        }
        (SendOrPostCallback callback, object? state) = await TestUtil.WithTimeout(posted.Task);
        var e = Assert.Throws<InvalidOperationException>(() => callback(state)); // the BCL's post rethrows the fault
        Assert.EndsWith(NamedIn(nameof(HandleReady)), e.Message, StringComparison.Ordinal);
        ready.SetResult();
        await TestUtil.WithTimeout(first);
        QueuedReturnsToZero();
    }

#pragma warning disable VSTHRD100 // the async void under test
    private static async void HandleReady(SpindleTask ready) => await ready;
#pragma warning restore VSTHRD100

    private sealed class RecordingContext(TaskCompletionSource<(SendOrPostCallback, object?)> posted) : SynchronizationContext
    {
        public override void Post(SendOrPostCallback d, object? state) => posted.TrySetResult((d, state));
    }

    /// <summary>A continuation that is not a BCL builder's may read later or elsewhere: it gets the refusal at once, named.</summary>
    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public void SecondAwaiter_ThatIsNoBuilder_IsRefusedAtOnce_AndNamedByItsMethod(bool flowContext)
    {
        var ready = new Promise<int>();
        bool firstResumed = false;
        ready.Task.GetAwaiter().UnsafeOnCompleted(() => firstResumed = true);
        var awaiter = ready.Task.GetAwaiter();
        var e = Assert.Throws<InvalidOperationException>(() =>
        {
            if (flowContext)
            {
                awaiter.OnCompleted(OnReady);
            }
            else
            {
                awaiter.UnsafeOnCompleted(OnReady);
            }
        });
        Assert.StartsWith(ThrowHelper.SecondAwaiterMessage, e.Message, StringComparison.Ordinal);
        Assert.EndsWith(NamedIn(nameof(OnReady)), e.Message, StringComparison.Ordinal);
        Assert.True(ThrowHelper.IsRefusedRegistration(e)); // still a refusal: nothing was registered
        Assert.Equal(0, RefusedAwaits.Queued);
        ready.SetResult(1);
        Assert.True(firstResumed);
    }

    [Fact]
    public void ABuildersContinuation_IsRecognised_AndAPlainOneIsNot()
    {
        var capture = new Capture();
        _ = CaptureRequest(capture);
        Assert.True(RefusedAwaits.IsBclBuilderContinuation(capture.Continuation!));
        Assert.False(RefusedAwaits.IsBclBuilderContinuation(OnReady));
        Assert.False(RefusedAwaits.IsBclBuilderContinuation(static () => { }));
        capture.Continuation!(); // the captured method goes on from its own await, once
    }

    private sealed class Capture : ICriticalNotifyCompletion
    {
        public Action? Continuation;
        public Capture GetAwaiter() => this;
        public bool IsCompleted => false;
        public void GetResult() { }
        public void OnCompleted(Action continuation) => Continuation = continuation;
        public void UnsafeOnCompleted(Action continuation) => Continuation = continuation;
    }

    private static async Task CaptureRequest(Capture at) => await at;

    private static void OnReady() { }

    /// <summary>Starts <paramref name="second"/> on this thread as another thread runs <paramref name="complete"/>, with a spread of head starts.</summary>
    private static async Task<Task<int>> SecondAwaitRacing(Action complete, Func<Task<int>> second, int round)
    {
        int spins = round % 64 * 8;
        using var go = new Barrier(2);
        Task completer = Task.Run(() =>
        {
            go.SignalAndWait();
            Thread.SpinWait(spins);
            complete();
        });
        go.SignalAndWait();
        Task<int> started = second();
        await TestUtil.WithTimeout(completer);
        return started;
    }

    /// <summary>
    /// The refused await raced with the completion, round after round: the owning awaiter gets its value exactly once; the
    /// second gets the value (it looked after the completion: a promise's task reads until its reset) or the refusal, and
    /// never blocks or gets another round's value.
    /// </summary>
    [Fact]
    public async Task SecondAwait_RacingTheCompletion_OwnerAlwaysGetsItsValue_SecondGetsItOrTheRefusal()
    {
        int rounds = TestUtil.Stress(2_000);
        int refusedCount = 0, readCount = 0;
        var promise = new Promise<int>();
        for (int round = 0; round < rounds; round++)
        {
            SpindleTask<int> task = promise.Task;
            Task<int> first = ServeValue(task);
            int value = round;
            Task<int> second = await SecondAwaitRacing(() => promise.SetResult(value), () => ServeValue(task), round);
            Assert.Equal(round + 1, await TestUtil.WithTimeout(first));
            await TestUtil.WithTimeout(((Task)second).ContinueWith(static _ => { }, TaskScheduler.Default));
            if (second.IsFaulted)
            {
                var e = Assert.IsType<InvalidOperationException>(second.Exception!.InnerException);
                Assert.StartsWith(ThrowHelper.SecondAwaiterMessage, e.Message, StringComparison.Ordinal);
                refusedCount++;
            }
            else
            {
                Assert.Equal(round + 1, second.Result);
                readCount++;
            }
            promise.Reset();
        }
        Assert.Equal(rounds, refusedCount + readCount);
        QueuedReturnsToZero();
    }

    /// <summary>
    /// As above with a pooled async method's task, whose read consumes it: of the two awaiters exactly one gets the value,
    /// and the other an await-once error; nothing is read twice and nothing hangs.
    /// </summary>
    [Fact]
    public async Task SecondAwait_OfAPooledTask_RacingTheCompletion_ExactlyOneGetsTheValue()
    {
        static async SpindleTask<int> Load(Promise<int> gate) => await gate.Task;

        int rounds = TestUtil.Stress(2_000);
        int firstGot = 0, secondGot = 0;
        for (int round = 0; round < rounds; round++)
        {
            var gate = new Promise<int>();
            SpindleTask<int> load = Load(gate);
            Task<int> first = ServeValue(load);
            int value = round;
            Task<int> second = await SecondAwaitRacing(() => gate.SetResult(value), () => ServeValue(load), round);
            int got = 0;
            foreach (Task<int> t in new[] { first, second })
            {
                await TestUtil.WithTimeout(((Task)t).ContinueWith(static _ => { }, TaskScheduler.Default));
                if (t.IsCompletedSuccessfully)
                {
                    Assert.Equal(round + 1, t.Result);
                    got++;
                }
                else
                {
                    var e = Assert.IsType<InvalidOperationException>(t.Exception!.InnerException);
                    Assert.True(e.Message.StartsWith(ThrowHelper.SecondAwaiterMessage, StringComparison.Ordinal)
                        || e.Message.StartsWith(ThrowHelper.AwaitOnceMessage, StringComparison.Ordinal), e.Message);
                }
            }
            Assert.Equal(1, got);
            if (first.IsCompletedSuccessfully)
            {
                firstGot++;
            }
            else
            {
                secondGot++;
            }
        }
        Assert.Equal(rounds, firstGot + secondGot);
        QueuedReturnsToZero();
    }
}

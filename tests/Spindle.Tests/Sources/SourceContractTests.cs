using System;
using System.Collections.Generic;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Sources;

/// <summary>What reading the outcome of a completed use a second time does.</summary>
public enum RereadBehavior
{
    /// <summary>The first read consumed the use (the object went back to its pool): a second read throws.</summary>
    Throws,

    /// <summary>The use stays readable until the object starts its next use (Promise, Signal) or forever (Preserve()).</summary>
    ReturnsSameOutcome,
}

/// <summary>How a kind of source starts its next use, and so what becomes of a task from the previous use.</summary>
public enum RenewalKind
{
    /// <summary>Every use is a new object (Preserve()): earlier tasks stay valid.</summary>
    None,

    /// <summary>The same object is reset explicitly (Promise.Reset()): earlier tasks become stale.</summary>
    Reset,

    /// <summary>The same object starts a new use with the next pending wait (Signal.WaitAsync): earlier tasks become stale.</summary>
    NextWait,

    /// <summary>The object returns to a pool when its result is read, and a later rent reuses it: earlier tasks become stale.</summary>
    PoolReuse,
}

/// <summary>The capabilities of one kind of source, which decide what each contract test expects of it.</summary>
/// <param name="HasValue">The kind produces an int result (SpindleTask&lt;int&gt;); otherwise it is a void SpindleTask.</param>
/// <param name="CanFault">The kind can complete with an arbitrary exception (a Signal cannot: it is set or canceled).</param>
/// <param name="Reread">What a second read of a completed use does.</param>
/// <param name="Renewal">How the next use starts.</param>
/// <param name="MultipleAwaiters">More than one continuation may wait on one use (only Preserve()).</param>
/// <param name="CompletesOnWorker">Completion happens later on a Spindle worker, not inside the call that completes it.</param>
public sealed record SourceCapabilities(
    bool HasValue,
    bool CanFault,
    RereadBehavior Reread,
    RenewalKind Renewal,
    bool MultipleAwaiters,
    bool CompletesOnWorker);

/// <summary>One use of a source under test, with the handles that complete it.</summary>
public abstract class SourceOperation
{
    private readonly CancellationTokenSource _cts = new();

    /// <summary>The token a cancellation of this use carries.</summary>
    public CancellationToken CancellationToken => _cts.Token;

    /// <summary>The use's task, as a void task (for value kinds: the same source and token).</summary>
    public abstract SpindleTask Task { get; }

    /// <summary>The use's typed task (value kinds only).</summary>
    public virtual SpindleTask<int> TypedTask => throw new NotSupportedException("This kind of source produces no value.");

    /// <summary>True for value kinds.</summary>
    public abstract bool HasValue { get; }

    /// <summary>The source object behind the task.</summary>
    public ISpindleSource? Source => Task._source;

    /// <summary>The use's status, read without consuming it.</summary>
    public SpindleTaskStatus Status => Task.Status;

    /// <summary>Completes the use successfully (void kinds ignore the value).</summary>
    public abstract void Succeed(int value);

    /// <summary>Completes the use with <paramref name="exception"/>.</summary>
    /// <exception cref="NotSupportedException">The kind has no way to fault.</exception>
    public virtual void Fault(Exception exception) => throw new NotSupportedException("This kind of source cannot fault.");

    /// <summary>Cancels the use with <see cref="CancellationToken"/>.</summary>
    public void Cancel()
    {
        _cts.Cancel();
        OnCancel(_cts.Token);
    }

    /// <summary>Completes the use as canceled by <paramref name="token"/> (already canceled).</summary>
    protected abstract void OnCancel(CancellationToken token);

    /// <summary>
    /// Reads the outcome synchronously, once the use has completed (waiting, with a timeout, for kinds that complete on
    /// a worker). Null for void kinds.
    /// </summary>
    public int? GetResult()
    {
        TestUtil.SpinUntil(() => Status != SpindleTaskStatus.Pending);
        return ReadBlocking();
    }

    /// <summary>Reads the outcome with awaiter.GetResult(), which blocks while the use is pending. Null for void kinds.</summary>
    public int? ReadBlocking()
    {
        if (HasValue)
        {
            return TypedTask.GetAwaiter().GetResult();
        }
        Task.GetAwaiter().GetResult();
        return null;
    }

    /// <summary>Awaits the use from a BCL async method. Null for void kinds.</summary>
    public async Task<int?> AwaitAsync()
    {
        if (HasValue)
        {
            return await TypedTask;
        }
        await Task;
        return null;
    }

    /// <summary>Awaits the use from an <c>async SpindleTask</c> method. Null for void kinds.</summary>
    public async SpindleTask<int?> AwaitInSpindleMethod()
    {
        if (HasValue)
        {
            return await TypedTask;
        }
        await Task;
        return null;
    }

    /// <summary>Preserves the use (typed for value kinds) and returns a reader of the preserved task.</summary>
    public Func<Task<int?>> Preserve()
    {
        if (HasValue)
        {
            SpindleTask<int> preserved = TypedTask.Preserve();
            return async () => await preserved;
        }
        SpindleTask voidPreserved = Task.Preserve();
        return async () =>
        {
            await voidPreserved;
            return null;
        };
    }
}

/// <summary>
/// The contract every Spindle source kind honors: completion, fault, cancellation, continuations registered before
/// and after completion, the one-awaiter rule, stale tokens and reuse. Each derived class supplies one kind and its
/// <see cref="SourceCapabilities"/>; where a kind's contract differs (a Promise is readable again, a Preserve()d
/// task takes many awaiters, a Signal cannot fault) the test asserts that kind's documented behaviour instead.
/// </summary>
public abstract class SourceContractTests
{
    private static readonly AsyncLocal<string?> s_local = new();

    /// <summary>The kind's capabilities.</summary>
    protected abstract SourceCapabilities Capabilities { get; }

    /// <summary>
    /// Starts the next use. For kinds that reuse one object (Promise: Reset; Signal: the next wait) the previous use
    /// must have completed and been read; for pooled kinds this call may rent the object the previous use returned.
    /// </summary>
    protected abstract SourceOperation Start();

    private static void WaitUntilCompleted(SourceOperation op) => TestUtil.SpinUntil(() => op.Status != SpindleTaskStatus.Pending);

    private void AssertResult(int expected, int? actual)
    {
        if (Capabilities.HasValue)
        {
            Assert.Equal(expected, actual);
        }
        else
        {
            Assert.Null(actual);
        }
    }

    [Fact]
    public void Status_BeforeCompletion_IsPending()
    {
        SourceOperation op = Start();

        Assert.Equal(SpindleTaskStatus.Pending, op.Status);
        Assert.False(op.Task.IsCompleted);
        Assert.False(op.Task.GetAwaiter().IsCompleted);

        op.Succeed(1);
        AssertResult(1, op.GetResult());
    }

    [Fact]
    public void Succeed_ReadAfterCompletion_StatusSucceededAndResultReturned()
    {
        SourceOperation op = Start();

        op.Succeed(42);
        WaitUntilCompleted(op);

        Assert.Equal(SpindleTaskStatus.Succeeded, op.Status);
        Assert.Equal(SpindleTaskStatus.Succeeded, op.Status); // reading the status does not consume the use
        Assert.True(op.Task.GetAwaiter().IsCompleted);
        AssertResult(42, op.GetResult());
    }

    [Fact]
    public async Task Succeed_AwaitedBeforeCompletion_ResumesWithResult()
    {
        SourceOperation op = Start();
        Task<int?> awaiting = op.AwaitAsync();
        Assert.False(awaiting.IsCompleted);

        op.Succeed(7);

        AssertResult(7, await TestUtil.WithTimeout(awaiting));
    }

    [Fact]
    public async Task Succeed_AwaitedFromAsyncSpindleMethod_ResumesWithResult()
    {
        SourceOperation op = Start();
        SpindleTask<int?> awaiting = op.AwaitInSpindleMethod();
        Assert.Equal(SpindleTaskStatus.Pending, awaiting.Status);

        op.Succeed(8);

        AssertResult(8, await TestUtil.WithTimeout(awaiting));
    }

    [Fact]
    public async Task Fault_Awaited_ThrowsTheOriginalExceptionObject()
    {
        SourceOperation op = Start();
        var error = new InvalidTimeZoneException("contract fault");
        if (!Capabilities.CanFault)
        {
            // This kind has no fault path (a Signal wait ends only by Set or by cancellation): the harness refuses,
            // and the use is unaffected by the attempt.
            Assert.Throws<NotSupportedException>(() => op.Fault(error));
            Assert.Equal(SpindleTaskStatus.Pending, op.Status);
            op.Succeed(1);
            AssertResult(1, op.GetResult());
            return;
        }
        Task<int?> awaiting = op.AwaitAsync();

        op.Fault(error);

        var thrown = await Assert.ThrowsAsync<InvalidTimeZoneException>(() => TestUtil.WithTimeout(awaiting));
        Assert.Same(error, thrown);
    }

    [Fact]
    public void Fault_ReadAfterCompletion_StatusFaultedAndGetResultThrowsOriginal()
    {
        SourceOperation op = Start();
        var error = new InvalidTimeZoneException("contract fault");
        if (!Capabilities.CanFault)
        {
            Assert.Throws<NotSupportedException>(() => op.Fault(error));
            op.Succeed(1);
            AssertResult(1, op.GetResult());
            return;
        }

        op.Fault(error);
        WaitUntilCompleted(op);

        Assert.Equal(SpindleTaskStatus.Faulted, op.Status);
        Assert.Same(error, Assert.Throws<InvalidTimeZoneException>(() => op.GetResult()));
    }

    [Fact]
    public async Task Cancel_Awaited_ThrowsOperationCanceledCarryingTheToken()
    {
        SourceOperation op = Start();
        Task<int?> awaiting = op.AwaitAsync();

        op.Cancel();

        var thrown = await Assert.ThrowsAnyAsync<OperationCanceledException>(() => TestUtil.WithTimeout(awaiting));
        Assert.Equal(op.CancellationToken, thrown.CancellationToken);
    }

    [Fact]
    public void Cancel_ReadAfterCompletion_StatusCanceled()
    {
        SourceOperation op = Start();

        op.Cancel();
        WaitUntilCompleted(op);

        Assert.Equal(SpindleTaskStatus.Canceled, op.Status);
        var thrown = Assert.ThrowsAny<OperationCanceledException>(() => op.GetResult());
        Assert.Equal(op.CancellationToken, thrown.CancellationToken);
    }

    [Fact]
    public void OnCompleted_RegisteredBeforeCompletion_RunsExactlyOnceOnTheCompletingThread()
    {
        SourceOperation op = Start();
        int runs = 0;
        int runThread = 0;
        op.Task.GetAwaiter().UnsafeOnCompleted(() =>
        {
            runThread = Environment.CurrentManagedThreadId;
            Interlocked.Increment(ref runs);
        });
        Assert.Equal(0, Volatile.Read(ref runs));

        op.Succeed(5);

        if (Capabilities.CompletesOnWorker)
        {
            TestUtil.SpinUntil(() => Volatile.Read(ref runs) > 0);
        }
        else
        {
            // The thread that completes the source runs the continuation, inside the completing call.
            Assert.Equal(1, Volatile.Read(ref runs));
            Assert.Equal(Environment.CurrentManagedThreadId, runThread);
        }
        AssertResult(5, op.GetResult());
        Assert.Equal(1, Volatile.Read(ref runs));
    }

    [Fact]
    public void OnCompleted_RegisteredAfterCompletion_RunsSynchronouslyOnTheRegisteringThread()
    {
        SourceOperation op = Start();
        op.Succeed(6);
        WaitUntilCompleted(op);
        int runs = 0;
        int runThread = 0;

        op.Task.GetAwaiter().UnsafeOnCompleted(() =>
        {
            runThread = Environment.CurrentManagedThreadId;
            runs++;
        });

        Assert.Equal(1, runs);
        Assert.Equal(Environment.CurrentManagedThreadId, runThread);
        AssertResult(6, op.GetResult());
    }

    /// <summary>The context-flowing OnCompleted runs the continuation under the registrant's ExecutionContext.</summary>
    [Fact]
    public virtual async Task OnCompleted_FlowingOverload_RunsUnderTheRegistrantsExecutionContext()
    {
        SourceOperation op = Start();
        string? seen = "not run";
        using var ran = new ManualResetEventSlim();
        s_local.Value = "registrant";
        op.Task.GetAwaiter().OnCompleted(() =>
        {
            seen = s_local.Value;
            ran.Set();
        });
        s_local.Value = null;

        await TestUtil.WithTimeout(TestUtil.RunOnThread(() =>
        {
            s_local.Value = "completer";
            op.Succeed(1);
        }));

        Assert.True(ran.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)));
        Assert.Equal("registrant", seen);
        AssertResult(1, op.GetResult());
    }

    [Fact]
    public void OnCompleted_SecondAwaiterWhilePending_FollowsTheAwaiterContract()
    {
        SourceOperation op = Start();
        int firstRuns = 0;
        int secondRuns = 0;
        op.Task.GetAwaiter().UnsafeOnCompleted(() => Interlocked.Increment(ref firstRuns));

        if (Capabilities.MultipleAwaiters)
        {
            op.Task.GetAwaiter().UnsafeOnCompleted(() => Interlocked.Increment(ref secondRuns));
        }
        else
        {
            var ex = Assert.Throws<InvalidOperationException>(
                () => op.Task.GetAwaiter().UnsafeOnCompleted(() => Interlocked.Increment(ref secondRuns)));
            Assert.Contains("Preserve()", ex.Message, StringComparison.Ordinal);
        }
        op.Succeed(9);

        // The rejected second awaiter did not disturb the first: it still runs, exactly once.
        TestUtil.SpinUntil(() => Volatile.Read(ref firstRuns) == 1
            && (!Capabilities.MultipleAwaiters || Volatile.Read(ref secondRuns) == 1));
        AssertResult(9, op.GetResult());
        Assert.Equal(1, Volatile.Read(ref firstRuns));
        Assert.Equal(Capabilities.MultipleAwaiters ? 1 : 0, Volatile.Read(ref secondRuns));
    }

    [Fact]
    public async Task GetResult_ReadAgainAfterAwait_FollowsTheRereadContract()
    {
        SourceOperation op = Start();
        op.Succeed(3);
        AssertResult(3, await TestUtil.WithTimeout(op.AwaitAsync()));

        if (Capabilities.Reread == RereadBehavior.Throws)
        {
            var ex = Assert.Throws<InvalidOperationException>(() => op.GetResult());
            Assert.Contains("Preserve()", ex.Message, StringComparison.Ordinal);
            Assert.Throws<InvalidOperationException>(() => op.Status);
            Assert.Throws<InvalidOperationException>(() => op.Task.GetAwaiter().UnsafeOnCompleted(() => { }));
            // Awaiting it again from an async method surfaces the same error there.
            var awaited = await Assert.ThrowsAsync<InvalidOperationException>(() => TestUtil.WithTimeout(op.AwaitInSpindleMethod()));
            Assert.Contains("Preserve()", awaited.Message, StringComparison.Ordinal);
        }
        else
        {
            Assert.Equal(SpindleTaskStatus.Succeeded, op.Status);
            AssertResult(3, op.GetResult());
            AssertResult(3, await TestUtil.WithTimeout(op.AwaitAsync()));
        }
    }

    [Fact]
    public void Start_NextUseAfterPreviousWasRead_PreviousTaskFollowsTheRenewalContract()
    {
        SourceOperation first = Start();
        first.Succeed(1);
        AssertResult(1, first.GetResult());

        SourceOperation second = Start();

        switch (Capabilities.Renewal)
        {
            case RenewalKind.None:
                Assert.NotSame(first.Source, second.Source);
                AssertResult(1, first.GetResult());
                break;
            case RenewalKind.Reset:
            case RenewalKind.NextWait:
            case RenewalKind.PoolReuse:
                // Same object, next use. For a pooled kind the object went back to this thread's pool slot when the
                // first use was read and the second use rented it again: where a stale token could corrupt a live use.
                Assert.Same(first.Source, second.Source);
                Assert.NotEqual(first.Task._token, second.Task._token);
                Assert.Throws<InvalidOperationException>(() => first.Status);
                var read = Assert.Throws<InvalidOperationException>(() => first.GetResult());
                Assert.Contains("Preserve()", read.Message, StringComparison.Ordinal);
                int staleRuns = 0;
                Assert.Throws<InvalidOperationException>(() => first.Task.GetAwaiter().UnsafeOnCompleted(() => staleRuns++));

                // The stale attempts left the live use alone: it is pending, completes, and runs only its own continuation.
                Assert.Equal(SpindleTaskStatus.Pending, second.Status);
                int liveRuns = 0;
                second.Task.GetAwaiter().UnsafeOnCompleted(() => Interlocked.Increment(ref liveRuns));
                second.Succeed(2);
                TestUtil.SpinUntil(() => Volatile.Read(ref liveRuns) == 1);
                Assert.Equal(0, staleRuns);
                AssertResult(2, second.GetResult());
                return;
            default:
                throw new InvalidOperationException("unknown renewal kind");
        }
        second.Succeed(2);
        AssertResult(2, second.GetResult());
    }

    [Fact]
    public void Start_ManySequentialUses_EachUseSeesOnlyItsOwnOutcome()
    {
        int cycles = TestUtil.Stress(600);
        var sources = new HashSet<ISpindleSource>(ReferenceEqualityComparer.Instance);
        int sameAsPrevious = 0;
        ISpindleSource? previous = null;

        for (int i = 0; i < cycles; i++)
        {
            SourceOperation op = Start();
            ISpindleSource source = op.Source!;
            sources.Add(source);
            if (ReferenceEquals(source, previous))
            {
                sameAsPrevious++;
            }
            previous = source;
            Assert.Equal(SpindleTaskStatus.Pending, op.Status);

            int continuationRuns = 0;
            bool before = (i & 1) == 0;
            if (before)
            {
                op.Task.GetAwaiter().UnsafeOnCompleted(() => Interlocked.Increment(ref continuationRuns));
            }
            int outcome = i % 3;
            if (outcome == 1 && !Capabilities.CanFault)
            {
                outcome = 0;
            }
            Exception? error = outcome == 1 ? new InvalidTimeZoneException("cycle " + i) : null;
            switch (outcome)
            {
                case 0:
                    op.Succeed(i);
                    break;
                case 1:
                    op.Fault(error!);
                    break;
                default:
                    op.Cancel();
                    break;
            }
            WaitUntilCompleted(op);
            if (!before)
            {
                op.Task.GetAwaiter().UnsafeOnCompleted(() => Interlocked.Increment(ref continuationRuns));
            }
            TestUtil.SpinUntil(() => Volatile.Read(ref continuationRuns) == 1);

            switch (outcome)
            {
                case 0:
                    Assert.Equal(SpindleTaskStatus.Succeeded, op.Status);
                    AssertResult(i, op.GetResult());
                    break;
                case 1:
                    Assert.Equal(SpindleTaskStatus.Faulted, op.Status);
                    Assert.Same(error, Assert.Throws<InvalidTimeZoneException>(() => op.GetResult()));
                    break;
                default:
                    Assert.Equal(SpindleTaskStatus.Canceled, op.Status);
                    var oce = Assert.ThrowsAny<OperationCanceledException>(() => op.GetResult());
                    Assert.Equal(op.CancellationToken, oce.CancellationToken);
                    break;
            }
            Assert.Equal(1, Volatile.Read(ref continuationRuns));
        }

        if (Capabilities.Renewal == RenewalKind.None)
        {
            Assert.Equal(cycles, sources.Count);
        }
        else
        {
            // The uses really did share objects: most cycles reused the previous cycle's object.
            Assert.True(sameAsPrevious >= cycles / 2, $"only {sameAsPrevious} of {cycles} cycles reused the previous object");
        }
    }

    [Fact]
    public async Task GetResult_WhilePending_BlocksUntilCompleted()
    {
        SourceOperation op = Start();
        int? result = null;
        int returned = 0;
        var reader = new Thread(() =>
        {
            result = op.ReadBlocking();
            Volatile.Write(ref returned, 1);
        })
        {
            IsBackground = true,
            Name = "blocked reader",
        };
        reader.Start();

        // The reader is inside GetResult, blocked (or helping run queued work) rather than throwing.
        TestUtil.SpinUntil(() => (reader.ThreadState & ThreadState.WaitSleepJoin) != 0 || Volatile.Read(ref returned) != 0);
        Assert.Equal(0, Volatile.Read(ref returned));
        Assert.True(reader.IsAlive);

        op.Succeed(11);

        await TestUtil.WithTimeout(Task.Run(() => reader.Join()));
        Assert.Equal(1, Volatile.Read(ref returned));
        AssertResult(11, result);
    }

    [Fact]
    public async Task AsValueTask_AwaitedBeforeCompletion_CompletesWithTheOutcome()
    {
        SourceOperation op = Start();
        Task<int?> awaiting = op.HasValue ? AwaitTyped(op.TypedTask.AsValueTask()) : AwaitVoid(op.Task.AsValueTask());

        op.Succeed(12);

        AssertResult(12, await TestUtil.WithTimeout(awaiting));

        static async Task<int?> AwaitTyped(ValueTask<int> vt) => await vt;

        static async Task<int?> AwaitVoid(ValueTask vt)
        {
            await vt;
            return null;
        }
    }

    [Fact]
    public async Task AsTask_ConvertedWhilePending_CarriesSuccess()
    {
        SourceOperation op = Start();
        Task converted = op.HasValue ? op.TypedTask.AsTask() : op.Task.AsTask();
        Assert.False(converted.IsCompleted);

        op.Succeed(13);

        await TestUtil.WithTimeout(converted);
        if (op.HasValue)
        {
            Assert.Equal(13, await (Task<int>)converted);
        }
    }

    [Fact]
    public async Task AsTask_ConvertedWhilePending_CarriesTheOriginalFault()
    {
        SourceOperation op = Start();
        Task converted = op.HasValue ? op.TypedTask.AsTask() : op.Task.AsTask();
        var error = new InvalidTimeZoneException("as task");
        if (!Capabilities.CanFault)
        {
            Assert.Throws<NotSupportedException>(() => op.Fault(error));
            op.Succeed(1);
            await TestUtil.WithTimeout(converted);
            return;
        }

        op.Fault(error);

        Assert.Same(error, await Assert.ThrowsAsync<InvalidTimeZoneException>(() => TestUtil.WithTimeout(converted)));
        Assert.True(converted.IsFaulted);
    }

    [Fact]
    public async Task AsTask_ConvertedWhilePending_CanceledUseGivesCanceledTask()
    {
        SourceOperation op = Start();
        Task converted = op.HasValue ? op.TypedTask.AsTask() : op.Task.AsTask();

        op.Cancel();

        await Assert.ThrowsAnyAsync<OperationCanceledException>(() => TestUtil.WithTimeout(converted));
        Assert.True(converted.IsCanceled);
    }

    [Fact]
    public async Task Preserve_AwaitersBeforeAndAfterCompletion_AllSeeTheResult()
    {
        SourceOperation op = Start();
        Func<Task<int?>> read = op.Preserve();
        Task<int?> before1 = read();
        Task<int?> before2 = read();

        op.Succeed(14);

        AssertResult(14, await TestUtil.WithTimeout(before1));
        AssertResult(14, await TestUtil.WithTimeout(before2));
        AssertResult(14, await TestUtil.WithTimeout(read()));
        AssertResult(14, await TestUtil.WithTimeout(read()));
    }

    [Fact]
    public async Task Preserve_FaultedOrCanceled_EveryAwaiterGetsTheSameException()
    {
        SourceOperation op = Start();
        Func<Task<int?>> read = op.Preserve();
        Task<int?> before = read();

        if (Capabilities.CanFault)
        {
            var error = new InvalidTimeZoneException("preserved fault");
            op.Fault(error);
            Assert.Same(error, await Assert.ThrowsAsync<InvalidTimeZoneException>(() => TestUtil.WithTimeout(before)));
            Assert.Same(error, await Assert.ThrowsAsync<InvalidTimeZoneException>(() => TestUtil.WithTimeout(read())));
            Assert.Same(error, await Assert.ThrowsAsync<InvalidTimeZoneException>(() => TestUtil.WithTimeout(read())));
        }
        else
        {
            op.Cancel();
            var first = await Assert.ThrowsAnyAsync<OperationCanceledException>(() => TestUtil.WithTimeout(before));
            var second = await Assert.ThrowsAnyAsync<OperationCanceledException>(() => TestUtil.WithTimeout(read()));
            Assert.Same(first, second);
        }
    }
}

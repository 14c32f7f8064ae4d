using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// Async Spindle methods and the BCL: SynchronizationContext (none captured, none left behind), where a forgotten
/// method's fault is reported, and the OperationCanceledException contract. Sequential: some tests watch
/// UnobservedException, which is process-wide.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class AsyncMethodInteropTests
{
    private static readonly AsyncLocal<int> s_local = new();

    /// <summary>A SynchronizationContext that counts posts and runs them on a thread of its own.</summary>
    private sealed class CountingContext : SynchronizationContext
    {
        public int Posts;
        public int Sends;

        public override void Post(SendOrPostCallback d, object? state)
        {
            Interlocked.Increment(ref Posts);
            var t = new Thread(() =>
            {
                SetSynchronizationContext(this);
                d(state);
            })
            { IsBackground = true };
            t.Start();
        }

        public override void Send(SendOrPostCallback d, object? state)
        {
            Interlocked.Increment(ref Sends);
            d(state);
        }
    }

    private static T OnThreadWith<T>(SynchronizationContext? context, Func<T> body)
    {
        T result = default!;
        Exception? error = null;
        var t = new Thread(() =>
        {
            SynchronizationContext.SetSynchronizationContext(context);
            try
            {
                result = body();
            }
            catch (Exception e)
            {
                error = e;
            }
        })
        { IsBackground = true };
        t.Start();
        Assert.True(t.Join(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "the thread hung");
        if (error is not null)
        {
            throw new InvalidOperationException("the thread failed", error);
        }
        return result;
    }

    // ---------------------------------------------------------------- no SynchronizationContext captured

    [Fact]
    public void AwaitInSpindleMethod_OnThreadWithContext_ResumesOnTheCompletingThreadWithoutPosting()
    {
        var sc = new CountingContext();
        var p = new Promise<int>();
        int resumedOn = 0;
        SynchronizationContext? seen = sc;
        SpindleTask<int> t = OnThreadWith(sc, () => Method(p));
        int completer = Environment.CurrentManagedThreadId;
        SynchronizationContext.SetSynchronizationContext(null);
        p.SetResult(5);

        Assert.Equal(6, t.GetAwaiter().GetResult());
        Assert.Equal(0, sc.Posts);
        Assert.Equal(completer, resumedOn);
        Assert.Null(seen);

        async SpindleTask<int> Method(Promise<int> promise)
        {
            Assert.Same(sc, SynchronizationContext.Current);
            int v = await promise.Task;
            resumedOn = Environment.CurrentManagedThreadId;
            seen = SynchronizationContext.Current;
            return v + 1;
        }
    }

    [Fact]
    public void AwaitFromBclAsyncMethod_OnThreadWithContext_NoContextCaptured()
    {
        var sc = new CountingContext();
        var p = new Promise<int>();
        int resumedOn = 0;
        Task<int> t = OnThreadWith(sc, () => Method(p));
        int completer = Environment.CurrentManagedThreadId;
        SynchronizationContext.SetSynchronizationContext(null);
        p.SetResult(5);

        Assert.True(t.IsCompleted);
        Assert.Equal(5, t.Result);
        Assert.Equal(0, sc.Posts);
        Assert.Equal(completer, resumedOn);

        async Task<int> Method(Promise<int> promise)
        {
            int v = await promise.Task;
            resumedOn = Environment.CurrentManagedThreadId;
            return v;
        }
    }

    [Fact]
    public async Task BclAwaitInSpindleMethod_OnThreadWithContext_PostsBackAsTheBclDoes()
    {
        var sc = new CountingContext();
        SynchronizationContext? seen = null;
        SpindleTask t = OnThreadWith(sc, () => Method());
        await TestUtil.WithTimeout(t);

        Assert.Equal(1, sc.Posts);
        Assert.Same(sc, seen);

        async SpindleTask Method()
        {
            await Task.Delay(1);
            seen = SynchronizationContext.Current;
        }
    }

    [Fact]
    public async Task BclAwaitConfigureAwaitFalseInSpindleMethod_DoesNotPost()
    {
        var sc = new CountingContext();
        SpindleTask t = OnThreadWith(sc, () => Method());
        await TestUtil.WithTimeout(t);
        Assert.Equal(0, sc.Posts);

        static async SpindleTask Method() => await Task.Delay(1).ConfigureAwait(false);
    }

    // ---------------------------------------------------------------- a ValueTask made from a Spindle task

    public static TheoryData<string> PendingKinds => new() { "promise", "async method", "WhenAll", "Preserve", "Spindle.Run", "delay" };

    /// <summary>A pending Spindle task of the given kind as a ValueTask, and what completes it.</summary>
    private static (ValueTask Task, Action Complete) Pending(string kind)
    {
        var p = new Promise();
        switch (kind)
        {
            case "promise":
                return (p.Task.AsValueTask(), p.SetResult);
            case "async method":
                return (Awaiting(p).AsValueTask(), p.SetResult);
            case "WhenAll":
                var other = new Promise();
                return (SpindleTask.WhenAll(p.Task, other.Task).AsValueTask(), () => { other.SetResult(); p.SetResult(); });
            case "Preserve":
                return (p.Task.Preserve().AsValueTask(), p.SetResult);
            case "Spindle.Run":
                var gate = new ManualResetEventSlim(false);
                return (Spindle.Run(() => { gate.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)); }).AsValueTask(), gate.Set);
            default:
                var go = new ManualResetEventSlim(false);
                return (DelayAfter(go).AsValueTask(), go.Set);
        }

        static async SpindleTask Awaiting(Promise promise) => await promise.Task;

        static async SpindleTask DelayAfter(ManualResetEventSlim go)
        {
            await Spindle.Yield();
            go.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds));
            await Spindle.Delay(TimeSpan.FromMilliseconds(1));
        }
    }

    /// <summary>
    /// A ValueTask made from a Spindle task keeps the BCL's contract for a ValueTask: a plain <c>await</c> of it resumes
    /// on the awaiting code's SynchronizationContext (UI thread, Unity's main thread), as an await of a Task or of a
    /// <c>ManualResetValueTaskSourceCore</c>'s ValueTask does. (Awaited directly, a Spindle task captures nothing.)
    /// </summary>
    [Theory]
    [MemberData(nameof(PendingKinds))]
    public async Task AwaitAsValueTask_OnThreadWithContext_PostsBackAsTheBclDoes(string kind)
    {
        var sc = new CountingContext();
        (ValueTask pending, Action complete) = Pending(kind);
        SynchronizationContext? seen = null;
        Task t = OnThreadWith(sc, () => Method(pending));
        complete();
        await TestUtil.WithTimeout(t);

        Assert.Equal(1, sc.Posts);
        Assert.Same(sc, seen);

        async Task Method(ValueTask task)
        {
            await task;
            seen = SynchronizationContext.Current;
        }
    }

    [Theory]
    [MemberData(nameof(PendingKinds))]
    public async Task AwaitAsValueTaskConfigureAwaitFalse_OnThreadWithContext_DoesNotPost(string kind)
    {
        var sc = new CountingContext();
        (ValueTask pending, Action complete) = Pending(kind);
        SynchronizationContext? seen = sc;
        Task t = OnThreadWith(sc, () => Method(pending));
        complete();
        await TestUtil.WithTimeout(t);

        Assert.Equal(0, sc.Posts);
        Assert.NotSame(sc, seen); // resumed where the task completed, with that thread's context

        async Task Method(ValueTask task)
        {
            await task.ConfigureAwait(false);
            seen = SynchronizationContext.Current;
        }
    }

    /// <summary>With no SynchronizationContext, a plain await of the ValueTask resumes on the caller's TaskScheduler when that is not the default.</summary>
    [Fact]
    public async Task AwaitAsValueTask_UnderANonDefaultTaskScheduler_ResumesOnIt()
    {
        var scheduler = new ConcurrentExclusiveSchedulerPair().ExclusiveScheduler;
        var p = new Promise<int>();
        TaskScheduler? seen = null;
        // The method runs on the scheduler up to its await, which registers before StartNew's task completes.
        Task<int> t = await TestUtil.WithTimeout(Task.Factory.StartNew(() => Method(p), CancellationToken.None, TaskCreationOptions.None, scheduler));
        p.SetResult(41);

        Assert.Equal(42, await TestUtil.WithTimeout(t));
        Assert.Same(scheduler, seen);

        async Task<int> Method(Promise<int> promise)
        {
            int v = await promise.Task.AsValueTask();
            seen = TaskScheduler.Current;
            return v + 1;
        }
    }

    // ---------------------------------------------------------------- nothing left behind on the completing thread

    /// <summary>
    /// The BCL's own behaviour, as a reference: an async Task method resumed inline by TrySetResult that installs a
    /// SynchronizationContext and suspends again does not leave it on the completing thread (ExecutionContext.RunInternal
    /// puts the thread's back).
    /// </summary>
    [Fact]
    public void Reference_BclAsyncMethodResumedInline_InstallsContext_CompleterKeepsItsOwn()
    {
        SynchronizationContext? after = OnThreadWith<SynchronizationContext?>(null, () =>
        {
            var first = new TaskCompletionSource<int>();
            var second = new TaskCompletionSource<int>();
            Task t = Method(first.Task, second.Task);
            first.SetResult(1); // resumes Method inline here
            SynchronizationContext? now = SynchronizationContext.Current;
            SynchronizationContext.SetSynchronizationContext(null);
            second.SetResult(2);
            return now;
        });
        Assert.Null(after);

        static async Task Method(Task<int> a, Task<int> b)
        {
            await a.ConfigureAwait(false);
            SynchronizationContext.SetSynchronizationContext(new CountingContext());
            await b.ConfigureAwait(false);
        }
    }

    /// <summary>
    /// The same with a Spindle method: the completing thread must not come back from SetResult with a context the method
    /// installed. (Workers put theirs back after each item, and Spindle.Run's delegate's is taken down; the inline resume
    /// of a box on the default-context fast path did not.)
    /// </summary>
    [Fact]
    public void SpindleMethodResumedInline_InstallsContext_CompleterKeepsItsOwn()
    {
        SynchronizationContext? after = OnThreadWith<SynchronizationContext?>(null, () =>
        {
            var first = new Promise<int>();
            var second = new Promise<int>();
            SpindleTask t = Method(first, second);
            first.SetResult(1); // resumes Method inline here
            SynchronizationContext? now = SynchronizationContext.Current;
            SynchronizationContext.SetSynchronizationContext(null);
            second.SetResult(2);
            t.GetAwaiter().GetResult();
            return now;
        });
        Assert.Null(after);

        static async SpindleTask Method(Promise<int> a, Promise<int> b)
        {
            await a.Task;
            SynchronizationContext.SetSynchronizationContext(new CountingContext());
            await b.Task;
        }
    }

    /// <summary>The ExecutionContext half of the same: an AsyncLocal the resumed method sets never reaches the completer.</summary>
    [Fact]
    public void SpindleMethodResumedInline_SetsAsyncLocal_CompleterKeepsItsOwn()
    {
        (int plain, int withValue) = OnThreadWith<(int, int)>(null, () =>
        {
            var a1 = new Promise<int>();
            var b1 = new Promise<int>();
            SpindleTask t1 = Method(a1, b1);
            a1.SetResult(1); // the completer is on the default context: the fast path
            int plain = s_local.Value;
            b1.SetResult(1);
            t1.GetAwaiter().GetResult();

            s_local.Value = 7; // the completer has a context of its own: ExecutionContext.Run
            var a2 = new Promise<int>();
            var b2 = new Promise<int>();
            SpindleTask t2 = Method(a2, b2);
            a2.SetResult(1);
            int withValue = s_local.Value;
            b2.SetResult(1);
            t2.GetAwaiter().GetResult();
            return (plain, withValue);
        });
        Assert.Equal(0, plain);
        Assert.Equal(7, withValue);

        static async SpindleTask Method(Promise<int> a, Promise<int> b)
        {
            await a.Task;
            s_local.Value = 99;
            await b.Task;
        }
    }

    // ---------------------------------------------------------------- cancellation

    [Theory]
    [InlineData(false, false)]
    [InlineData(false, true)]
    [InlineData(true, false)]
    [InlineData(true, true)]
    public async Task ThrowOperationCanceled_WithAndWithoutToken_StatusCanceled_TheSameObjectEverywhere(bool withToken, bool suspends)
    {
        using var cts = new CancellationTokenSource();
        cts.Cancel();
        var oce = withToken ? new OperationCanceledException("stop", cts.Token) : new OperationCanceledException("stop");

        // Status, and await
        SpindleTask<int> t = Method(oce, suspends);
        // Helping: after the awaits above, this may run on a worker, the only one on one processor.
        Assert.True(TestUtil.PollHelping(() => t.IsCompleted, TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)));
        Assert.Equal(SpindleTaskStatus.Canceled, t.Status);
        Assert.Same(oce, Assert.ThrowsAny<OperationCanceledException>(() => t.GetAwaiter().GetResult()));

        // AsTask: a canceled Task carrying the very exception and its token
        Task<int> task = Method(oce, suspends).AsTask();
        OperationCanceledException fromTask = await Assert.ThrowsAnyAsync<OperationCanceledException>(() => task);
        Assert.Same(oce, fromTask);
        Assert.Equal(TaskStatus.Canceled, task.Status);

        // AsValueTask
        OperationCanceledException fromVt = await Assert.ThrowsAnyAsync<OperationCanceledException>(async () => await Method(oce, suspends).AsValueTask());
        Assert.Same(oce, fromVt);

        // Preserve, twice
        SpindleTask<int> p = Method(oce, suspends).Preserve();
        Assert.True(TestUtil.PollHelping(() => p.IsCompleted, TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)));
        Assert.Equal(SpindleTaskStatus.Canceled, p.Status);
        Assert.Same(oce, Assert.ThrowsAny<OperationCanceledException>(() => p.GetAwaiter().GetResult()));
        Assert.Same(oce, Assert.ThrowsAny<OperationCanceledException>(() => p.GetAwaiter().GetResult()));

        // Forget: not reported
        var watch = UnobservedReports.Start(UnobservedReports.Own.InstancesOrOnTestThreads(oce));
        ConcurrentQueue<Exception> reported = watch.Reports;
        using (watch)
        {
            SpindleTask<int> f = Method(oce, suspends);
            f.Forget();
            await Task.Delay(suspends ? 50 : 0);
        }
        Assert.Empty(reported);

        static async SpindleTask<int> Method(Exception e, bool suspends)
        {
            if (suspends)
            {
                await Spindle.Yield();
            }
            throw e;
        }
    }

    // ---------------------------------------------------------------- Forget: where the fault is reported

    /// <summary>
    /// Forget's contract: the fault is reported "on the thread that completes the task", inline, like a blocked
    /// thread's wake-up (decisions.md, section 11). A chain of nested methods each resumed inline by the one it awaits
    /// reaches the inline bound (Continuations.MaxInlineDepth) somewhere; whichever method of the chain is the forgotten
    /// one, its fault must be reported on the thread that completed it, before that completion returns.
    /// </summary>
    [Fact]
    public void Forget_FaultCompletedDeepInAnInlineChain_ReportedOnTheCompletingThreadBeforeItReturns()
    {
        var failures = new List<string>();
        for (int depth = 24; depth <= 40; depth++)
        {
            var error = new InvalidTimeZoneException("deep " + depth);
            var p = new Promise();
            int completedOn = 0;
            int reportedOn = 0;
            bool reportedBeforeReturn = false;
            bool inThrow = false;
            Action<Exception> handler = e =>
            {
                if (ReferenceEquals(e, error))
                {
                    reportedOn = Environment.CurrentManagedThreadId;
                    reportedBeforeReturn = Volatile.Read(ref inThrow);
                }
            };
            Spindle.UnobservedException += handler;
            try
            {
                Outer(depth, p, error, id => completedOn = id).Forget();
                int me = Environment.CurrentManagedThreadId;
                Volatile.Write(ref inThrow, true);
                p.SetResult(); // resumes the chain inline, as far as the bound allows
                Volatile.Write(ref inThrow, false);
                TestUtil.SpinUntil(() => Volatile.Read(ref reportedOn) != 0, 10);
                if (reportedOn != completedOn)
                {
                    failures.Add($"depth {depth}: completed on thread {completedOn} (the test thread is {me}), reported on {reportedOn}");
                }
                else if (completedOn == me && !reportedBeforeReturn)
                {
                    failures.Add($"depth {depth}: completed inline but reported after SetResult returned");
                }
            }
            finally
            {
                Spindle.UnobservedException -= handler;
            }
        }
        Assert.True(failures.Count == 0, string.Join("\n", failures));

        static async SpindleTask Outer(int depth, Promise p, Exception error, Action<int> completedOn)
        {
            await Chain(depth - 1, p);
            completedOn(Environment.CurrentManagedThreadId);
            throw error;
        }

        static async SpindleTask Chain(int n, Promise p)
        {
            if (n == 0)
            {
                await p.Task;
            }
            else
            {
                await Chain(n - 1, p);
            }
        }
    }

    // ---------------------------------------------------------------- a throwing awaiter registration

    /// <summary>
    /// An await whose registration throws (a second await of a pending task: the "already has an awaiter" error) faults the
    /// awaiting method with that error, after its box was rented: the method's task carries it, and the box goes back to
    /// the pool clean (the next use of the same method works).
    /// </summary>
    [Fact]
    public void AwaitRegistrationThrows_MethodFaultsWithTheError_BoxReusable()
    {
        for (int i = 0; i < 50; i++)
        {
            var p = new Promise<int>();
            SpindleTask<int> shared = p.Task;
            SpindleTask<int> first = AwaitIt(shared, 0);
            SpindleTask<int> second = AwaitIt(shared, 0);
            Assert.Equal(SpindleTaskStatus.Faulted, second.Status);
            var e = Assert.Throws<InvalidOperationException>(() => second.GetAwaiter().GetResult());
            Assert.Contains("Preserve()", e.Message, StringComparison.Ordinal);
            p.SetResult(i);
            Assert.Equal(i, first.GetAwaiter().GetResult());
        }

        // The failure after a real suspension (the box rented on an earlier await)
        for (int i = 0; i < 50; i++)
        {
            var gate = new Promise<int>();
            var p = new Promise<int>();
            SpindleTask<int> shared = p.Task;
            SpindleTask<int> first = AwaitIt(shared, 0);
            SpindleTask<int> second = AwaitAfter(gate, shared);
            gate.SetResult(1);
            Assert.Equal(SpindleTaskStatus.Faulted, second.Status);
            Assert.Throws<InvalidOperationException>(() => second.GetAwaiter().GetResult());
            p.SetResult(i);
            Assert.Equal(i, first.GetAwaiter().GetResult());
        }

        static async SpindleTask<int> AwaitIt(SpindleTask<int> t, int add) => await t + add;

        static async SpindleTask<int> AwaitAfter(Promise<int> gate, SpindleTask<int> t)
        {
            await gate.Task;
            return await t;
        }
    }
}

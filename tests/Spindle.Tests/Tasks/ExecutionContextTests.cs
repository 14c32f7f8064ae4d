using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Tasks;

public class ExecutionContextTests
{
    private static readonly AsyncLocal<string?> s_local = new();

    private static async SpindleTask<string?> SetThenYield(string value)
    {
        s_local.Value = value;
        await Spindle.Yield();
        return s_local.Value;
    }

    [Fact]
    public async Task Await_AsyncLocalSetBeforeYield_VisibleAfterResuming()
    {
        string? value = await TestUtil.WithTimeout(SetThenYield("before"));

        Assert.Equal("before", value);
    }

    private static async SpindleTask<string?> ReadAfter(Promise gate)
    {
        await gate.Task;
        return s_local.Value;
    }

    [Fact]
    public async Task Await_CallersAsyncLocal_FlowsIntoTheResumedMethod()
    {
        var gate = new Promise();
        s_local.Value = "caller";
        SpindleTask<string?> task = ReadAfter(gate);
        s_local.Value = null;

        await TestUtil.WithTimeout(TestUtil.RunOnThread(() =>
        {
            s_local.Value = "completer";
            gate.SetResult();
        }));

        Assert.Equal("caller", await TestUtil.WithTimeout(task));
    }

    /// <summary>One async method, so every call uses the same pooled box type.</summary>
    private static async SpindleTask<string?> MaybeSetThenAwait(Promise gate, string? setInside)
    {
        if (setInside is not null)
        {
            s_local.Value = setInside;
        }
        await gate.Task;
        return s_local.Value;
    }

    [Fact]
    public async Task PooledBox_AsyncLocalSetInOneUse_NeverVisibleInTheNextUseOfTheSameBox()
    {
        int rounds = TestUtil.Stress(200);

        // On one dedicated thread, whose context has no value: each box goes back to this thread's pool slot when
        // its task is read, and the next call rents that very box.
        await TestUtil.WithTimeout(TestUtil.RunOnThread(() =>
        {
            int reused = 0;
            for (int i = 0; i < rounds; i++)
            {
                var secretGate = new Promise();
                SpindleTask<string?> secret = MaybeSetThenAwait(secretGate, "secret " + i);
                ISpindleSource box = secret._source!;
                Assert.Null(s_local.Value); // the method's change did not leak into the caller
                CompleteGate(secretGate, i);
                Assert.Null(s_local.Value); // nor into the completing thread, when that is this one
                Assert.Equal("secret " + i, secret.GetAwaiter().GetResult());

                var plainGate = new Promise();
                SpindleTask<string?> plain = MaybeSetThenAwait(plainGate, null);
                if (ReferenceEquals(box, plain._source))
                {
                    reused++;
                }
                CompleteGate(plainGate, i + 1);
                Assert.Null(plain.GetAwaiter().GetResult());
            }
            Assert.True(reused >= rounds / 2, $"the box was reused in only {reused} of {rounds} rounds");
        }, "async-local flow"));

        // Rotate where the box resumes: inline on this thread, on another thread, on a worker.
        static void CompleteGate(Promise gate, int i)
        {
            switch (i % 3)
            {
                case 0:
                    gate.SetResult();
                    break;
                case 1:
                    TestUtil.RunOnThread(gate.SetResult, "gate completer").GetAwaiter().GetResult();
                    break;
                default:
                    Spindle.Run(gate.SetResult).GetAwaiter().GetResult();
                    break;
            }
        }
    }

    private static async SpindleTask ChangeWithoutSuspending(bool suspend)
    {
        s_local.Value = "inner";
        if (suspend)
        {
            await Spindle.Yield();
        }
    }

    private static async SpindleTask ChangeAndSuspend(Promise gate)
    {
        s_local.Value = "inner";
        await gate.Task;
        s_local.Value = "inner after resume";
    }

    [Fact]
    public void AsyncMethod_ChangesAsyncLocalAndCompletesSynchronously_CallerKeepsItsValue()
    {
        s_local.Value = "outer";
        try
        {
            ChangeWithoutSuspending(suspend: false).GetAwaiter().GetResult();

            Assert.Equal("outer", s_local.Value);
        }
        finally
        {
            s_local.Value = null;
        }
    }

    [Fact]
    public async Task AsyncMethod_ChangesAsyncLocalAndSuspends_CallerKeepsItsValueBeforeAndAfterTheAwait()
    {
        s_local.Value = "outer";
        var gate = new Promise();

        SpindleTask task = ChangeAndSuspend(gate);
        Assert.Equal("outer", s_local.Value);
        gate.SetResult(); // resumes the method inline on this thread
        Assert.Equal("outer", s_local.Value);
        await TestUtil.WithTimeout(task);

        Assert.Equal("outer", s_local.Value);
    }

    [Fact]
    public async Task Run_CallersAsyncLocal_FlowsIntoEveryOverload()
    {
        s_local.Value = "caller";

        string? fromAction = null;
        await TestUtil.WithTimeout(Spindle.Run(() => { fromAction = s_local.Value; }));
        string? fromFunc = await TestUtil.WithTimeout(Spindle.Run(() => s_local.Value));
        string? fromAsync = await TestUtil.WithTimeout(Spindle.Run(async () =>
        {
            await Spindle.Yield();
            return s_local.Value;
        }));

        Assert.Equal("caller", fromAction);
        Assert.Equal("caller", fromFunc);
        Assert.Equal("caller", fromAsync);
    }

    [Fact]
    public async Task Run_DelegateChangesAsyncLocal_NotVisibleToLaterItemsOrTheCaller()
    {
        int rounds = 200;
        for (int i = 0; i < rounds; i++)
        {
            await TestUtil.WithTimeout(Spindle.Run(() => { s_local.Value = "leak"; }));
            Assert.Null(s_local.Value);
            Assert.Null(await TestUtil.WithTimeout(Spindle.Run(() => s_local.Value)));
        }
    }

    private static async SpindleTask SetAcrossYields(int yields)
    {
        for (int i = 0; i < yields; i++)
        {
            await Spindle.Yield();
            s_local.Value = "set by a method resumed on a worker";
        }
    }

    [Fact]
    public void DefaultContextProbe_RunWhileFlowIsSuppressed_StillFindsTheDefault()
    {
        // ContextFlow.s_default is found once, by whichever thread first touches ContextFlow: a frame host's phase, or a
        // box resumed on a completing thread, may do so inside a SuppressFlow block. A null default would turn every
        // "put the default back" (the worker loop's, a frame phase's) into nothing, for the life of the process.
        var probe = typeof(Spindle).Assembly.GetType("SpindleLib.ContextFlow")!
            .GetMethod("CaptureDefault", System.Reflection.BindingFlags.NonPublic | System.Reflection.BindingFlags.Static)!;
        object? found;
        using (ExecutionContext.SuppressFlow())
        {
            found = probe.Invoke(null, null);
        }

        Assert.NotNull(ContextFlow.s_default);
        Assert.Same(ContextFlow.s_default, found);
    }

    [Fact]
    public async Task WorkerItems_QueuedFromTheDefaultContext_DoNotLeakAsyncLocalsToLaterItems()
    {
        // Queued from a thread with no AsyncLocal values, the items and boxes take the workers' fast path (no context
        // switch); the worker must still put the default back after each one.
        string? leaked = "not run";
        Task thread;
        using (ExecutionContext.SuppressFlow()) // the thread starts with no context of ours: the default
        {
            thread = TestUtil.RunOnThread(Body);
        }
        await TestUtil.WithTimeout(thread);
        Assert.Null(leaked);

        void Body()
        {
            leaked = null;
            for (int round = 0; round < 200 && leaked is null; round++)
            {
                Spindle.Run(() => { s_local.Value = "leak"; }).GetAwaiter().GetResult();
                SetAcrossYields(3).GetAwaiter().GetResult();
                leaked = Spindle.Run(() => s_local.Value).GetAwaiter().GetResult();
            }
        }
    }

    [Fact]
    public async Task WorkerItems_QueuedWithFlowSuppressed_DoNotLeakAsyncLocalsToEachOther()
    {
        // Items queued under SuppressFlow carry no context and run in the worker's own: each writes an AsyncLocal, and
        // the worker must put its context back after each one, or the next such item would start with the value. (On
        // netstandard2.1, with no ExecutionContext.Restore, the worker's loop leaves and re-enters ExecutionContext.Run.)
        const int Items = 400;
        var seen = new string?[Items];
        var done = new Promise();
        int remaining = Items;
        using (ExecutionContext.SuppressFlow())
        {
            for (int i = 0; i < Items; i++)
            {
                int index = i;
                Spindle.Run(() =>
                {
                    seen[index] = s_local.Value;
                    s_local.Value = "leak";
                    if (Interlocked.Decrement(ref remaining) == 0)
                    {
                        done.SetResult();
                    }
                }).Forget();
            }
        }
        await TestUtil.WithTimeout(done.Task);

        Assert.All(seen, Assert.Null);
        Assert.Null(s_local.Value);
    }

    [Fact]
    public async Task GetResult_HelpingRunsAFlowSuppressedItem_ItemsAsyncLocalWritesDoNotLeakIntoTheWaiter()
    {
        string? seenByWaiter = await TestUtil.WithTimeout(Spindle.Run(() =>
        {
            s_local.Value = "waiter";
            SpindleTask inner;
            using (ExecutionContext.SuppressFlow())
            {
                inner = Spindle.Run(() => { s_local.Value = "flow-suppressed item"; });
            }
            inner.GetAwaiter().GetResult(); // the worker helps: it runs the item it just queued to its own run-next slot
            return s_local.Value;
        }));

        Assert.Equal("waiter", seenByWaiter);
    }
}

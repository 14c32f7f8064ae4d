using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Threading;
using System.Threading.Tasks;
using static SpindleLib.Tests.Combinators.CombinatorTestSupport;

namespace SpindleLib.Tests.Frames;

/// <summary>
/// <see cref="FrameLoop.SynchronizationContext"/>: BCL awaits in loop code resume on the loop thread, in Update, as they do
/// under Unity's and Godot's main-thread contexts; posts from any thread are never lost, keep each thread's order, flow
/// the poster's ExecutionContext, report a throwing callback and allocate nothing in steady state.
/// </summary>
public sealed class FrameSynchronizationContextTests
{
    private static readonly AsyncLocal<string?> s_local = new();

    [Fact]
    public async Task Run_InstallsTheLoopsContext_SoABclAwaitInLoopCodeResumesOnTheLoop()
    {
        var loop = new FrameLoop();
        using var cts = new CancellationTokenSource();
        Task run = loop.Run(1000, cts.Token);
        try
        {
            var resumed = new List<(bool OnLoop, string? Phase)>();
            async Task Behaviour()
            {
                await loop.SwitchTo();
                Assert.Same(loop.SynchronizationContext, SynchronizationContext.Current);
                for (int i = 0; i < 3; i++)
                {
                    await Task.Delay(1); // completes on a timer thread: the continuation is posted back to the loop
                    resumed.Add((loop.IsLoopThread, loop.CurrentPhase?.Name));
                    await Task.Run(() => { }); // completes on a thread-pool thread
                    resumed.Add((loop.IsLoopThread, loop.CurrentPhase?.Name));
                    await Task.Yield(); // posts to the current context: the loop
                    resumed.Add((loop.IsLoopThread, loop.CurrentPhase?.Name));
                }
            }
            Task behaviour = Task.Run(Behaviour);
            await TestUtil.WithTimeout(behaviour);
            Assert.Equal(9, resumed.Count);
            Assert.All(resumed, r => Assert.Equal((true, "Update"), r));
        }
        finally
        {
            cts.Cancel();
            await TestUtil.WithTimeout(run);
        }
    }

    [Fact]
    public void Post_FromAnotherThread_RunsInUpdateOfTheNextFrame_NeverBefore()
    {
        var loop = new FrameLoop();
        loop.RunFrame(); // the calling thread is the loop thread
        var ran = new List<(long Frame, string? Phase)>();
        TestUtil.RunOnThread(() => loop.SynchronizationContext.Post(_ => ran.Add((loop.FrameCount, loop.CurrentPhase?.Name)), null))
            .GetAwaiter().GetResult();
        Assert.Empty(ran); // queued, not run on the posting thread
        loop.RunFrame();
        Assert.Equal(new[] { (2L, (string?)"Update") }, ran);
    }

    [Fact]
    public void Post_WhileNoFrameRuns_IsKeptForTheNextFrame_AndAPostFromInsideAFrameRunsAtUpdatesNextRun()
    {
        var loop = new FrameLoop();
        var ran = new List<string>();
        loop.SynchronizationContext.Post(_ => ran.Add("before any frame"), null);
        _ = EarlyPoster();
        loop.RunFrame();
        Assert.Equal(new[] { "before any frame", "posted in EarlyUpdate, run in Update" }, ran);

        ran.Clear();
        _ = LatePoster();
        loop.RunFrame(); // LateUpdate posts: Update has run in this frame
        Assert.Empty(ran);
        loop.RunFrame();
        Assert.Equal(new[] { "posted in LateUpdate, run in the next frame's Update" }, ran);

        async SpindleTask EarlyPoster()
        {
            await loop.Yield(loop.EarlyUpdate);
            loop.SynchronizationContext.Post(_ => ran.Add($"posted in EarlyUpdate, run in {loop.CurrentPhase?.Name}"), null);
        }

        async SpindleTask LatePoster()
        {
            await loop.Yield(loop.LateUpdate);
            long frame = loop.FrameCount;
            loop.SynchronizationContext.Post(_ => ran.Add($"posted in LateUpdate, run in {(loop.FrameCount == frame + 1 ? "the next frame's" : "another frame's")} {loop.CurrentPhase?.Name}"), null);
        }
    }

    [Fact]
    public async Task Posts_FromManyThreads_RunOnceEach_OnTheLoopThread_InEachThreadsOrder()
    {
        var loop = new FrameLoop();
        const int Threads = 4;
        int perThread = TestUtil.Stress(20_000);
        var last = new int[Threads];
        Array.Fill(last, -1);
        int runs = 0;
        int wrongThread = 0;
        int outOfOrder = 0;
        using var cts = new CancellationTokenSource();
        Task run = loop.Run(1000, cts.Token);
        try
        {
            var producers = new Task[Threads];
            for (int t = 0; t < Threads; t++)
            {
                int producer = t;
                producers[t] = TestUtil.RunOnThread(() =>
                {
                    for (int i = 0; i < perThread; i++)
                    {
                        int n = i;
                        loop.SynchronizationContext.Post(_ =>
                        {
                            if (!loop.IsLoopThread)
                            {
                                wrongThread++;
                            }
                            if (last[producer] != n - 1)
                            {
                                outOfOrder++;
                            }
                            last[producer] = n;
                            runs++; // only the loop thread writes these
                        }, null);
                    }
                });
            }
            await TestUtil.WithTimeout(Task.WhenAll(producers));
            TestUtil.SpinUntil(() => Volatile.Read(ref runs) == Threads * perThread);
        }
        finally
        {
            cts.Cancel();
            await TestUtil.WithTimeout(run);
        }
        Assert.Equal(Threads * perThread, runs);
        Assert.Equal(0, wrongThread);
        Assert.Equal(0, outOfOrder);
        Assert.All(last, l => Assert.Equal(perThread - 1, l));
    }

    [Fact]
    public void Post_FlowsThePostersExecutionContext_AndTheLoopThreadKeepsNoneOfIt()
    {
        var loop = new FrameLoop();
        var seen = new List<string?>();
        TestUtil.RunOnThread(() =>
        {
            s_local.Value = "poster's";
            loop.SynchronizationContext.Post(_ => seen.Add(s_local.Value), null);
            using (ExecutionContext.SuppressFlow())
            {
                loop.SynchronizationContext.Post(_ => seen.Add(s_local.Value), null);
            }
        }).GetAwaiter().GetResult();
        loop.SynchronizationContext.Post(_ => seen.Add(s_local.Value), null); // this thread's: none
        loop.RunFrame();
        Assert.Equal(new[] { "poster's", null, null }, seen);
        Assert.Null(s_local.Value);
    }

    [Fact]
    public void ACallbackThatThrows_IsReported_AndTheLoopGoesOn()
    {
        var loop = new FrameLoop();
        var ran = new List<int>();
        var fault = new InvalidTimeZoneException("posted fault");
        ConcurrentQueue<Exception> reported = UnobservedReports.Observe(UnobservedReports.Own.InstancesOrOnTestThreads(fault), () =>
        {
            loop.SynchronizationContext.Post(_ => ran.Add(1), null);
            loop.SynchronizationContext.Post(_ => throw fault, null);
            loop.SynchronizationContext.Post(_ => ran.Add(3), null);
            loop.RunFrame();
            loop.SynchronizationContext.Post(_ => ran.Add(4), null);
            loop.RunFrame();
        });
        Assert.Equal(new[] { 1, 3, 4 }, ran);
        Exception only = Assert.Single(reported);
        Assert.Equal("posted fault", Assert.IsType<InvalidTimeZoneException>(only).Message);
    }

    [Fact]
    public void Send_RunsAtOnceOnTheLoopThread_AndIsRefusedElsewhere_AndNullCallbacksAreRejected()
    {
        var loop = new FrameLoop();
        SynchronizationContext context = loop.SynchronizationContext;
        Assert.Throws<ArgumentNullException>("d", () => context.Post(null!, null));
        Assert.Throws<ArgumentNullException>("d", () => context.Send(null!, null));

        var ex = Assert.Throws<NotSupportedException>(() => context.Send(_ => { }, null)); // no frame yet: not the loop thread
        Assert.Contains("Post", ex.Message);
        loop.RunFrame();
        int sent = 0;
        context.Send(s => sent = (int)s!, 42); // the loop thread, between frames
        Assert.Equal(42, sent);
        TestUtil.RunOnThread(() => Assert.Throws<NotSupportedException>(() => context.Send(_ => sent = -1, null))).GetAwaiter().GetResult();
        Assert.Equal(42, sent);
        Assert.Same(context, context.CreateCopy());
    }

    [Fact]
    public void Post_AndTheFrameThatRunsIt_AllocateNothingInSteadyState_AndTheItemLetsGoOfTheState()
    {
        var loop = new FrameLoop();
        SynchronizationContext context = loop.SynchronizationContext;
        int count = 0;
        SendOrPostCallback increment = _ => count++;
        object state = new();
        TestUtil.AssertSteadyStateAllocatesNothing(_ =>
        {
            context.Post(increment, state);
            loop.RunFrame();
        }, 1_000);
        Assert.True(count > 1_000);

        WeakReference posted = PostAndRun(loop);
        GC.Collect();
        GC.WaitForPendingFinalizers();
        Assert.False(posted.IsAlive, "a pooled post item kept its state after it ran");

        static WeakReference PostAndRun(FrameLoop loop)
        {
            var state = new object();
            loop.SynchronizationContext.Post(static _ => { }, state);
            loop.RunFrame();
            return new WeakReference(state);
        }
    }
}

using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Frames;

/// <summary>Awaits made on other threads: hand-offs to the loop are never lost, and resume on the loop thread.</summary>
public sealed class FrameThreadingTests
{
    [Fact]
    public async Task SwitchTo_FromWorkersUnderLoad_LosesNothing()
    {
        const int Producers = 8;
        int iterations = TestUtil.Stress(2_000);
        var loop = new FrameLoop();
        var arrived = new int[Producers, iterations]; // written on the loop thread only
        int offLoop = 0;
        int background = 0;
        int hops = 0; // hand-offs that arrived, for the wait below

        // Load: tasks that live on the loop and resume every frame while the hand-offs pour in.
        async SpindleTask Resident(Stopper stop)
        {
            await loop.SwitchTo();
            while (!stop.Stopped)
            {
                await loop.NextFrame();
                background++;
            }
        }

        async SpindleTask Producer(int p)
        {
            using var cts = new CancellationTokenSource();
            for (int i = 0; i < iterations; i++)
            {
                await Spindle.SwitchToWorker();
                if (i % 2 == 0)
                {
                    await loop.SwitchTo();
                }
                else
                {
                    await Spindle.SwitchTo(loop, cts.Token); // the pooled-waiter path
                }
                if (!loop.IsLoopThread)
                {
                    Interlocked.Increment(ref offLoop);
                }
                arrived[p, i]++;
                Interlocked.Increment(ref hops);
            }
            await Spindle.SwitchToWorker();
        }

        var stop = new Stopper();
        IDisposable stopper = FrameUtil.RunOnThread(loop, out Task running);
        using (stopper)
        {
            for (int r = 0; r < 100; r++)
            {
                Resident(stop).Forget();
            }
            var producers = new SpindleTask[Producers];
            for (int p = 0; p < Producers; p++)
            {
                int me = p;
                producers[p] = Spindle.Run(() => Producer(me));
            }
            // Bounded by a stall, not by the whole run: 16,000 hand-offs, each waiting for a frame of a loop thread that a
            // loaded two-core machine schedules rarely, outran a fixed 30 s in a full run beside two CPU hogs, while a lost
            // hand-off stops the count for good.
            await TestUtil.WithStallTimeout(
                TestUtil.AwaitAsync(SpindleTask.WhenAll(producers)),
                () => Volatile.Read(ref hops),
                () => $"{Volatile.Read(ref hops)} of {Producers * iterations} hand-offs arrived");
            stop.Stopped = true;
        }
        await TestUtil.WithTimeout(running);
        Assert.Equal(0, offLoop);
        for (int p = 0; p < Producers; p++)
        {
            for (int i = 0; i < iterations; i++)
            {
                Assert.Equal(1, arrived[p, i]);
            }
        }
        Assert.True(background > 0);
    }

    private sealed class Stopper
    {
        public volatile bool Stopped;
    }

    [Fact]
    public async Task BclAsyncMethods_OnManyThreads_SwitchToTheLoopAndBack()
    {
        const int Threads = 4;
        const int Iterations = 500;
        var loop = new FrameLoop();
        int onLoop = 0; // loop thread only
        async Task HopMany()
        {
            for (int i = 0; i < Iterations; i++)
            {
                await loop.SwitchTo(loop.LateUpdate);
                Assert.True(loop.IsLoopThread);
                Assert.Equal("LateUpdate", loop.CurrentPhase?.Name);
                onLoop++;
                await Task.Yield(); // back to the thread pool
            }
        }

        IDisposable stopper = FrameUtil.RunOnThread(loop, out Task running);
        using (stopper)
        {
            var tasks = new Task[Threads];
            for (int t = 0; t < Threads; t++)
            {
                tasks[t] = Task.Run(HopMany);
            }
            await TestUtil.WithTimeout(Task.WhenAll(tasks));
        }
        await TestUtil.WithTimeout(running);
        Assert.Equal(Threads * Iterations, onLoop);
    }

    [Fact]
    public async Task AwaitsFromAnotherThread_WhileTheLoopIsNotRunning_WaitForTheNextFrame()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        var resumed = new string?[6];
        var threads = new int[6];
        async SpindleTask Record(int i, SpindleTask wait)
        {
            await wait;
            resumed[i] = loop.Where();
            threads[i] = Environment.CurrentManagedThreadId;
        }

        async SpindleTask Direct(int i)
        {
            await loop.NextFrame(); // awaited directly: the box is handed off
            resumed[i] = loop.Where();
            threads[i] = Environment.CurrentManagedThreadId;
        }

        await TestUtil.WithTimeout(TestUtil.RunOnThread(() =>
        {
            Record(0, loop.Yield()).Forget();
            Record(1, loop.NextFrame(loop.EarlyUpdate)).Forget();
            Record(2, loop.DelayFrame(1)).Forget();
            Record(3, loop.WaitUntil(() => true)).Forget(); // not checked off the loop thread: first checked in frame 2
            Record(4, loop.SwitchTo(loop.FixedUpdate)).Forget();
            Direct(5).Forget();
        }));
        Assert.All(resumed, Assert.Null);
        Assert.Equal(6, loop.QueuedCount);

        int loopThread = Environment.CurrentManagedThreadId; // after the await: the test may go on on another thread
        loop.RunFrame(); // frame 2, on this thread, which becomes the loop thread
        Assert.Equal(new[] { "2/Update", "2/EarlyUpdate", "2/Update", "2/Update", "2/FixedUpdate", "2/Update" }, resumed);
        Assert.All(threads, t => Assert.Equal(loopThread, t));
        Assert.Equal(0, loop.QueuedCount);
    }

    [Fact]
    public async Task DelaysStartedOnAnotherThread_CountFromTheLoopTimeAtTheCall()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop(); // frame 1, 10 ms
        long delayFrame = 0, framesFrame = 0;
        int delayThread = 0;
        async SpindleTask Record(SpindleTask wait, bool isDelay)
        {
            await wait;
            if (isDelay)
            {
                delayFrame = loop.FrameCount;
                delayThread = Environment.CurrentManagedThreadId;
            }
            else
            {
                framesFrame = loop.FrameCount;
            }
        }

        await TestUtil.WithTimeout(TestUtil.RunOnThread(() =>
        {
            Record(loop.Delay(TimeSpan.FromMilliseconds(25)), true).Forget(); // due at 35 ms: frame 4
            Record(loop.DelayFrame(3), false).Forget();                       // frame 4
        }));
        loop.RunFrames(3);
        Assert.Equal(4, loop.FrameCount);
        Assert.Equal(4, delayFrame);
        Assert.Equal(4, framesFrame);
        Assert.Equal(Environment.CurrentManagedThreadId, delayThread);
    }

    [Fact]
    public async Task WaitStartedOnAnotherThread_ResumesOnTheLoop_EvenIfAwaitedAfterItCouldHaveCompleted()
    {
        // Started on another thread, a wait completes only once it is awaited, so its awaiting code always runs on the
        // loop thread: here the frames that could have completed it run before the await.
        FrameLoop loop = FrameUtil.NewBoundLoop();
        SpindleTask next = default, until = default;
        FrameAwaitable handOff = default;
        using var cts = new CancellationTokenSource();
        await TestUtil.WithTimeout(TestUtil.RunOnThread(() =>
        {
            next = loop.NextFrame(cts.Token).AsSpindleTask();
            until = loop.WaitUntil(() => true);
            handOff = loop.SwitchTo(cts.Token);
        }));
        loop.RunFrames(3);
        Assert.False(next.IsCompleted);
        Assert.False(until.IsCompleted);
        int[] threads = new int[3];
        await TestUtil.WithTimeout(TestUtil.RunOnThread(() =>
        {
            async SpindleTask Await(int i, SpindleTask t)
            {
                await t;
                threads[i] = Environment.CurrentManagedThreadId;
            }

            async SpindleTask AwaitHandOff()
            {
                await handOff;
                threads[2] = Environment.CurrentManagedThreadId;
            }

            Await(0, next).Forget();
            Await(1, until).Forget();
            AwaitHandOff().Forget();
        }));
        loop.RunFrame();
        Assert.All(threads, t => Assert.Equal(Environment.CurrentManagedThreadId, t));
        Assert.Equal(0, loop.QueuedCount);
    }

    [Fact]
    public async Task Run_OnItsOwnThread_ResumesHandOffsThere_AndStopsWithItsToken()
    {
        var loop = new FrameLoop();
        using var cts = new CancellationTokenSource();
        Task run = loop.Run(1000, cts.Token);
        Assert.Throws<InvalidOperationException>(() => { _ = loop.Run(60, CancellationToken.None); });

        await loop.SwitchTo();
        Assert.Equal("Spindle FrameLoop", Thread.CurrentThread.Name);
        Assert.True(loop.IsLoopThread);
        Assert.Equal("Update", loop.CurrentPhase?.Name);
        long frame = loop.FrameCount;
        await loop.NextFrame();
        Assert.Equal(frame + 1, loop.FrameCount);
        Assert.Equal(TimeSpan.FromMilliseconds(1), loop.DeltaTime); // the fixed timestep
        await Spindle.SwitchToWorker();
        Assert.False(loop.IsLoopThread);
        Assert.Throws<InvalidOperationException>(() => loop.RunFrame());

        cts.Cancel();
        await TestUtil.WithTimeout(run);
        Assert.Equal(TaskStatus.RanToCompletion, run.Status);

        // Stopped: the loop can be run again, by hand.
        long stoppedAt = loop.FrameCount;
        loop.RunFrame();
        Assert.Equal(stoppedAt + 1, loop.FrameCount);
    }
}

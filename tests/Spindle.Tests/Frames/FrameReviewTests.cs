using System;
using System.Collections.Generic;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Frames;

/// <summary>Defects found by a review of the frame loop, each with the test that showed it.</summary>
public sealed class FrameReviewTests
{
    /// <summary>
    /// Run started while another thread is in the middle of a frame cannot take the loop: its thread's first frame is
    /// refused and the task faults. That refusal must leave the loop as it was: the thread running the frame is still
    /// the loop thread, for the rest of its frame and after it.
    /// </summary>
    [Fact]
    public void Run_RefusedBecauseAFrameIsRunning_LeavesThatThreadTheLoopThread()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        Task? run = null;
        bool? loopThreadAfterRun = null;
        string? switchedAt = null;
        async SpindleTask StartRunFromInsideAFrame()
        {
            await loop.Yield();
            using var cts = new CancellationTokenSource();
            run = loop.Run(60, cts.Token);
            // This frame is still running, so Run's thread cannot begin one: wait until Run has given up.
            ((IAsyncResult)run).AsyncWaitHandle.WaitOne(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds));
            loopThreadAfterRun = loop.IsLoopThread;
            await loop.SwitchTo(); // on the loop thread: continues at once, in this phase
            switchedAt = loop.Where();
        }

        StartRunFromInsideAFrame().Forget();
        loop.RunFrame(); // frame 2
        Assert.NotNull(run);
        Assert.True(run!.IsFaulted);
        Assert.IsType<InvalidOperationException>(run.Exception!.InnerException);
        Assert.True(loopThreadAfterRun);
        Assert.Equal("2/Update", switchedAt);
        Assert.True(loop.IsLoopThread);
    }

    /// <summary>
    /// A blocking read of a pending wait on the loop, on the thread running a frame of it, would block for ever (only
    /// that thread can run the frame the wait needs): it throws at once, and the wait is left intact, so awaiting it
    /// afterwards still resumes in the frame it asked for.
    /// </summary>
    [Fact]
    public void BlockingReadOfAPendingWait_InsideAFrameOfItsLoop_ThrowsAndLeavesTheWait()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        Exception? blocked = null;
        string? resumedAt = null;
        async SpindleTask Body()
        {
            await loop.Yield(); // frame 2, Update
            SpindleTask wait = loop.DelayFrame(2);
            blocked = Record.Exception(() => wait.GetAwaiter().GetResult());
            await wait;
            resumedAt = loop.Where();
        }

        Body().Forget();
        loop.RunFrames(3);
        Assert.IsType<InvalidOperationException>(blocked);
        Assert.Contains("Await it instead", blocked!.Message);
        Assert.Equal("4/Update", resumedAt);
    }

    /// <summary>
    /// Phases added from two threads at once land where each call asked: a chain of phases each added after the last
    /// stays in order right after Update while another thread adds phases at the front. The anchor's place was read
    /// before the add took its lock, so an add that waited for the other thread's inserted next to a stale place.
    /// </summary>
    [Fact]
    public void AddPhaseAfter_RacingAddsElsewhere_InsertsRightAfterItsAnchor()
    {
        const int Adds = 1500;
        var loop = new FrameLoop();
        int defaults = loop.Phases.Count;
        var chain = new FramePhase[Adds];
        using var start = new Barrier(2);
        var a = new Thread(() =>
        {
            start.SignalAndWait();
            FramePhase last = loop.Update;
            for (int i = 0; i < Adds; i++)
            {
                last = chain[i] = loop.AddPhaseAfter(last, "A" + i);
            }
        });
        var b = new Thread(() =>
        {
            start.SignalAndWait();
            for (int i = 0; i < Adds; i++)
            {
                loop.AddPhaseBefore(loop.Phases[0], "B" + i);
            }
        });
        a.Start();
        b.Start();
        Assert.True(a.Join(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)));
        Assert.True(b.Join(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)));

        IReadOnlyList<FramePhase> phases = loop.Phases;
        Assert.Equal(defaults + 2 * Adds, phases.Count);
        int update = loop.Update.Index;
        for (int i = 0; i < Adds; i++)
        {
            Assert.Same(chain[i], phases[update + 1 + i]);
        }
        for (int i = 0; i < phases.Count; i++)
        {
            Assert.Equal(i, phases[i].Index);
        }
    }
}

#if DEBUG
/// <summary>Races of the frame loop's timed waits, forced open through a Debug-only hook (sequential: the hook is static).</summary>
[Collection(SequentialCollection.Name)]
public sealed class FrameTimerRaceTests
{
    /// <summary>
    /// A delay started on another thread whose timer falls due before its waiter listens to it (that thread preempted
    /// between the two) reaches the loop as any wait from another thread does. It was added to the frame's list of
    /// expired waits from that thread, racing the loop thread's own pass over the list, and waits were lost. The hook
    /// holds the starting thread until its timer has fired, while the loop runs frames back to back, each with delays of
    /// its own falling due.
    /// </summary>
    [Fact]
    public void DelayFromAnotherThread_DueBeforeItsWaiterListens_IsNeverLost()
    {
        // Up to 1500 delays, each one the forced race. Past Race.Budget no more start once MinDelays have: each waits for
        // the loop thread to run its frames, and on a loaded machine (two busy loops beside it at a load of 17) 1500 did
        // not fit in the 30 s the starter was given.
        const int Delays = 1500;
        const int MinDelays = 200;
        int startedDelays = 0;
        var loop = new FrameLoop { FixedDeltaTime = FrameUtil.Step };
        using var stop = new CancellationTokenSource();
        int resumed = 0;
        int resumedOffLoop = 0;
        Thread? starter = null;
        FrameLoop.TestHookAfterTimerStarted = timer =>
        {
            if (Thread.CurrentThread == starter)
            {
                SpinWait.SpinUntil(() => timer.IsCompleted, TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds));
            }
        };
        try
        {
            var loopThread = new Thread(() =>
            {
                loop.RunFrame();
                for (int i = 0; i < 64; i++)
                {
                    Rearm(loop, stop.Token).Forget();
                }
                while (!stop.IsCancellationRequested)
                {
                    loop.RunFrame();
                }
            }) { IsBackground = true };
            var budget = System.Diagnostics.Stopwatch.StartNew();
            starter = new Thread(() =>
            {
                for (int i = 0; i < Delays && (i < MinDelays || budget.Elapsed < Race.Budget); i++)
                {
                    One().Forget();
                    Volatile.Write(ref startedDelays, i + 1);
                }
            }) { IsBackground = true };
            loopThread.Start();
            starter.Start();
            Assert.True(starter.Join(Race.Budget + TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)),
                $"the starter had started {Volatile.Read(ref startedDelays)} delays");
            int started = Volatile.Read(ref startedDelays);
            Assert.True(SpinWait.SpinUntil(() => Volatile.Read(ref resumed) == started, TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), // a lost wait never resumes
                $"{started - Volatile.Read(ref resumed)} of {started} delays never resumed");
            Assert.True(started >= MinDelays, $"only {started} delays started");
            Assert.Equal(0, resumedOffLoop);
            stop.Cancel();
            Assert.True(loopThread.Join(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)));
        }
        finally
        {
            FrameLoop.TestHookAfterTimerStarted = null;
            stop.Cancel();
        }

        async SpindleTask One()
        {
            await loop.DelayFrame(2);
            if (!loop.IsLoopThread)
            {
                Interlocked.Increment(ref resumedOffLoop);
            }
            Interlocked.Increment(ref resumed);
        }
    }

    /// <summary>
    /// A frame delay started on another thread counts from a frame no earlier than the frame count it sees: one started
    /// by a thread that has seen frame N begin, with <c>DelayFrame(2)</c>, resumes in frame N + 2 or later, never in
    /// N + 1. The frame count was published before the frame clock the delays' wheel reads was moved on, so a delay
    /// started in between counted from frame N - 1. The hook starts it in that moment.
    /// </summary>
    [Fact]
    public void DelayFrameFromAnotherThread_StartedAsAFrameBegins_NeverResumesEarly()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop(); // frame 1 has run on this thread
        long seen = -1;
        long resumedIn = -1;
        Exception? failure = null;
        int fired = 0;
        FrameLoop.TestHookFramePublished = l =>
        {
            if (l != loop || l.FrameCount != 3 || Interlocked.Exchange(ref fired, 1) != 0)
            {
                return;
            }
            var other = new Thread(() =>
            {
                try
                {
                    seen = loop.FrameCount;
                    Wait().Forget();
                }
                catch (Exception ex)
                {
                    failure = ex;
                }
            });
            other.Start();
            other.Join();
        };
        try
        {
            loop.RunUntil(() => Volatile.Read(ref resumedIn) >= 0, maxFrames: 20);
        }
        finally
        {
            FrameLoop.TestHookFramePublished = null;
        }
        Assert.Null(failure);
        Assert.Equal(3, seen);
        Assert.True(resumedIn >= seen + 2, $"DelayFrame(2) started by a thread that saw frame {seen} resumed in frame {resumedIn}");

        async SpindleTask Wait()
        {
            await loop.DelayFrame(2);
            Volatile.Write(ref resumedIn, loop.FrameCount);
        }
    }

    /// <summary>
    /// A delay resumes in the first frame that begins at or past its deadline, even after another thread's cancellation
    /// asked the loop's clock for a pass at the moment a frame had decided to run one. The wheel's driver took the request
    /// for a pass (its "kick") as used by that pass, and the pass the request then asked for, in the next frame and before
    /// the wheel's next deadline, for a timer firing early: a timer that truncates due times to whole milliseconds, so it
    /// rounded every later due time up to the millisecond. With loop time at a fraction of a millisecond (frames of
    /// 16.67 ms) the wheel's passes then came late, and delays resumed a frame after their deadline. The hook cancels the
    /// delay on another thread in that moment.
    /// </summary>
    [Fact]
    public void Delay_AfterACancellationFromAnotherThreadAsAPassBegan_StillResumesInTheFrameOfItsDeadline()
    {
        var loop = new FrameLoop();
        loop.RunFrame(TimeSpan.Zero); // frame 1 at loop time 0: this thread is the loop thread
        SpindleTask fires = loop.Delay(TimeSpan.FromMilliseconds(10)); // due in frame 2: that frame runs a pass
        SpindleTask measured = loop.Delay(TimeSpan.FromMilliseconds(16));
        using var cts = new CancellationTokenSource();
        SpindleTask cancelled = loop.Delay(TimeSpan.FromMilliseconds(500), cts.Token);
        Thread loopThread = Thread.CurrentThread;
        int hooked = 0;
        LoopClock.TestHookPassDecided = _ =>
        {
            if (Thread.CurrentThread != loopThread || Interlocked.Exchange(ref hooked, 1) != 0)
            {
                return;
            }
            var canceller = new Thread(() => cts.Cancel()) { IsBackground = true };
            canceller.Start();
            Assert.True(canceller.Join(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)));
        };
        try
        {
            loop.RunFrame(TimeSpan.FromTicks(105_000)); // frame 2 at 10.5 ms: the 10 ms delay's pass, and the cancellation
        }
        finally
        {
            LoopClock.TestHookPassDecided = null;
        }
        Assert.Equal(1, hooked);
        Assert.True(fires.IsCompleted);
        Assert.Equal(SpindleTaskStatus.Canceled, cancelled.Status);
        loop.RunFrame(TimeSpan.FromMilliseconds(1)); // frame 3 at 11.5 ms
        Assert.False(measured.IsCompleted);
        loop.RunFrame(TimeSpan.FromTicks(47_000)); // frame 4 at 16.2 ms: past the 16 ms deadline
        Assert.True(measured.IsCompleted, "a 16 ms delay had not resumed in the frame that began at loop time " + loop.Time.TotalMilliseconds + " ms");
    }

    private static async SpindleTask Rearm(FrameLoop loop, CancellationToken stop)
    {
        while (!stop.IsCancellationRequested)
        {
            await loop.DelayFrame(2);
        }
    }
}
#endif

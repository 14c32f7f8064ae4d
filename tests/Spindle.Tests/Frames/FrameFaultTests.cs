using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Threading.Tasks;
using static SpindleLib.Tests.Combinators.CombinatorTestSupport;
using static SpindleLib.Tests.UnobservedReports;

namespace SpindleLib.Tests.Frames;

/// <summary>
/// A continuation that throws does not stop the loop: the fault reaches the awaiting code, or Spindle.UnobservedException.
/// Sequential: the event is process-wide.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class FrameFaultTests
{
    [Fact]
    public void DelegateContinuationThatThrows_IsReported_AndThePhaseGoesOn()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        var ran = new List<string>();
        var boom = new InvalidTimeZoneException("boom");
        ConcurrentQueue<Exception> reported = Observe(Own.InstancesOrOnTestThreads(boom), () =>
        {
            async SpindleTask After(string name)
            {
                await loop.Yield();
                ran.Add(name);
            }

            After("before").Forget();
            loop.Yield().GetAwaiter().UnsafeOnCompleted(() => throw boom);
            loop.NextFrame().GetAwaiter().OnCompleted(() => ran.Add("delegate"));
            After("after").Forget();
            loop.RunFrame();
            Assert.Equal(new[] { "before", "delegate", "after" }, ran);

            // The loop carries on as before.
            After("next frame").Forget();
            loop.RunFrame();
        });
        Assert.Equal(new[] { "before", "delegate", "after", "next frame" }, ran);
        Assert.Same(boom, Assert.Single(reported));
    }

    private static readonly System.Threading.AsyncLocal<string?> s_local = new();

    [Fact]
    public async Task AHandlerThatSetsAnAsyncLocal_DoesNotLendItToTheNextTaskInThePhase()
    {
        // On a host in the default context the phase lets each task skip its own context check, and puts the default
        // back after each one. The report of a throwing continuation runs the handler between two tasks: whatever the
        // handler leaves in the context must be cleared before the next task runs, as a task's own writes are.
        string? seen = "not run";
        string? hostSaw = "not run";
        ConcurrentQueue<Exception>? reported = null;
        Task thread;
        using (System.Threading.ExecutionContext.SuppressFlow()) // the thread starts in the default context
        {
            thread = TestUtil.RunOnThread(() =>
            {
                int me = Environment.CurrentManagedThreadId;
                var loop = new FrameLoop();
                loop.RunFrame();
                async SpindleTask Record()
                {
                    await loop.Yield();
                    seen = s_local.Value;
                }

                Action<Exception> setter = _ =>
                {
                    if (Environment.CurrentManagedThreadId == me)
                    {
                        s_local.Value = "set by the handler";
                    }
                };
                Spindle.UnobservedException += setter;
                try
                {
                    // Claimed by instance only: marking the flow would take the thread out of the default context.
                    var boom = new InvalidTimeZoneException("boom");
                    reported = Observe(Own.Instances(boom), () =>
                    {
                        loop.Yield().GetAwaiter().UnsafeOnCompleted(() => throw boom);
                        Record().Forget(); // captured the default context
                        loop.RunFrame();
                    });
                }
                finally
                {
                    Spindle.UnobservedException -= setter;
                }
                hostSaw = s_local.Value;
            }, "frame-handler-context");
        }
        await TestUtil.WithTimeout(thread);
        Assert.Single(reported!);
        Assert.Null(seen);
        Assert.Null(hostSaw);
    }

    [Fact]
    public void AsyncMethodThatThrowsAfterAFrame_FaultsItsTask_ForTheAwaitingCode()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        int othersResumed = 0;
        var fails = new InvalidTimeZoneException("fails");
        async SpindleTask Fails()
        {
            await loop.NextFrame();
            throw fails;
        }

        async SpindleTask<string> Awaits()
        {
            try
            {
                await Fails();
                return "no exception";
            }
            catch (InvalidTimeZoneException e)
            {
                return e.Message + " at " + loop.Where();
            }
        }

        async SpindleTask Other()
        {
            await loop.NextFrame();
            othersResumed++;
        }

        ConcurrentQueue<Exception> reported = Observe(Own.InstancesOrOnTestThreads(fails), () =>
        {
            Other().Forget();
            SpindleTask<string> awaiting = Awaits();
            Other().Forget();
            loop.RunFrame();
            Assert.True(awaiting.IsCompleted);
            Assert.Equal("fails at 2/Update", awaiting.GetAwaiter().GetResult());
        });
        Assert.Equal(2, othersResumed);
        Assert.Empty(reported);
    }

    [Fact]
    public void ForgottenTaskThatThrows_IsReported()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        var forgotten = new InvalidTimeZoneException("forgotten");
        async SpindleTask Fails()
        {
            await loop.DelayFrame(2);
            throw forgotten;
        }

        ConcurrentQueue<Exception> reported = Observe(Own.InstancesOrOnTestThreads(forgotten), () =>
        {
            Fails().Forget();
            loop.RunFrames(3);
        });
        Assert.Equal("forgotten", Assert.Single(reported).Message);
    }

    [Fact]
    public void BclTaskThatThrowsAfterAFrame_FaultsThatTask()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        var fault = new InvalidTimeZoneException("task");
        async Task Fails()
        {
            await loop.NextFrame();
            throw fault;
        }

        ConcurrentQueue<Exception> reported = Observe(Own.InstancesOrOnTestThreads(fault), () =>
        {
            Task task = Fails();
            loop.RunFrame();
            Assert.True(task.IsFaulted);
            Assert.IsType<InvalidTimeZoneException>(task.Exception!.InnerException);
        });
        Assert.Empty(reported);
    }

    [Fact]
    public void PredicateThatThrows_FaultsTheWait_AndOtherWaitsGoOn()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        int polls = 0;
        bool Throws()
        {
            if (++polls == 3)
            {
                throw new InvalidTimeZoneException("predicate");
            }
            return false;
        }

        bool ready = false;
        SpindleTask faulty = loop.WaitUntil(Throws);
        SpindleTask fine = loop.WaitUntil(() => ready);
        loop.RunFrame(); // second check
        Assert.False(faulty.IsCompleted);
        loop.RunFrame(); // third: throws
        Assert.Equal(SpindleTaskStatus.Faulted, faulty.Status);
        Assert.Equal("predicate", Assert.Throws<InvalidTimeZoneException>(() => faulty.GetAwaiter().GetResult()).Message);
        ready = true;
        loop.RunFrame();
        Assert.True(fine.IsCompleted);
        fine.GetAwaiter().GetResult();
        Assert.Equal(3, polls);
    }

    [Fact]
    public void PredicateThatThrowsAtTheFirstCheck_ReturnsAFaultedTask()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        SpindleTask task = loop.WaitWhile(0, static _ => throw new InvalidTimeZoneException("first"));
        Assert.Equal(SpindleTaskStatus.Faulted, task.Status);
        Assert.Equal(0, loop.QueuedCount);
    }
}

using System;
using System.Threading;

using SpindleLib.Tests.Sources;

namespace SpindleLib.Tests.Frames;

#if DEBUG // the waiter's test hooks exist only in a Debug build of the library
/// <summary>
/// A pooled frame-loop waiter is held by its consumer and by the phase queue it sits in, and the last of the two to let
/// go recycles it (<c>FrameWaiter.Release</c>, an interlocked decrement). A WhenAny that another input decides lets go of
/// the wait as its consumer, on that input's thread, while the loop thread, whose phase has reached the wait, finds it
/// abandoned and lets go as the queue: both at once. A count made of a read and a store lost one of the two when they
/// met, and the waiter was never recycled (a leak from its pool each time); mutation testing (mut52, F1) found no test
/// that failed with it. The two let-gos lie too far apart in their paths (a frame's start, a combinator's decision) to
/// meet by timing alone on a loaded machine, so the waiter's Debug hooks line them up: the phase waits just before it
/// polls the wait, and the WhenAny just after it abandoned it, for each other, and then they go on at once, at an offset
/// that sweeps through the rounds (<see cref="HookMeeting"/>). Each round checks that the waiter went back to its pool.
/// Run alone: its threads must run at once, and the hooks are process-wide.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class FrameWaiterReleaseRaceTests
{
    [Fact]
    public void AWaitLetGoOfByAWhenAnyAsItsPhaseReachesIt_GoesBackToItsPool()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        var meeting = new HookMeeting();
        FrameWaiter? target = null;
        int current = -1;
        var race = new RaceRounds("FrameWaiterReleaseRaceTests", TestUtil.Stress(10_000))
        {
            TimeCap = TimeSpan.FromSeconds(5),
            ClearHooks = () =>
            {
                FrameWaiter.TestHookBeforePoll = null;
                FrameWaiter.TestHookAfterAbandoned = null;
            },
        };
        FrameWaiter.TestHookBeforePoll = w => Meet(w, 0);     // the loop thread, as the queue
        FrameWaiter.TestHookAfterAbandoned = w => Meet(w, 1); // the WhenAny's thread, as the consumer
        race.Run(round =>
        {
            var work = new Promise();
            // A yield that returns a task (frame count 0): a pooled waiter, queued for the next frame's Update.
            SpindleTask wait = loop.DelayFrame(0);
            FrameWaiter waiter = (FrameWaiter)wait._source!;
            Volatile.Write(ref target, waiter);
            Volatile.Write(ref current, round);
            SpindleTask<int> any = SpindleTask.WhenAny(work.Task, wait);
            (Exception? mine, Exception? theirs) = race.Racer.RunBothAtOnce(round, loop.RunFrame, work.SetResult);
            Assert.Null(mine);
            Assert.Null(theirs);
            Assert.Equal(0, any.GetAwaiter().GetResult()); // the promise won: the phase found the wait abandoned
            // Both holders have let go: the last recycled the waiter, which clears its phase on the way to its pool.
            if (waiter.Phase is not null)
            {
                race.Fail("the waiter was never recycled");
            }
        });
        Assert.True(meeting.Missed == -1, $"round {meeting.Missed}: the queue and the consumer did not both reach their hook within 10 s");
        race.AssertNone("a frame waiter let go of on two threads at once leaked from its pool");

        void Meet(FrameWaiter w, int side)
        {
            if (w == Volatile.Read(ref target))
            {
                meeting.Arrive(side, Volatile.Read(ref current));
            }
        }
    }
}
#endif

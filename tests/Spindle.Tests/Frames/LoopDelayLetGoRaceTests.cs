using System;
using System.Reflection;
using System.Threading;

using SpindleLib.Tests.Sources;

namespace SpindleLib.Tests.Frames;

#if DEBUG // the timer node's test hook exists only in a Debug build of the library
/// <summary>
/// A loop delay's timer node, stopped by a combinator that let go of the delay, is held by the wheel's owner (until its
/// pass takes the node out of the cancel inbox) and by its consumer (the combinator's thread), and the second of the two
/// to let go recycles it (<c>TimerNode.ReleaseFromWheel</c>, an interlocked increment). A frame's pass that drains the
/// cancel inbox as the combinator lets go makes them let go at once. A count made of a read and a store lost one of the
/// two when they met, and the node was never recycled (a leak from its pool each time); mutation testing (mut52, T2)
/// found no test that failed with it. The consumer lets go a few stores after it pushes the node, the owner some way into
/// a pass that must begin after that push: too close to meet by timing alone, so the node's Debug hook lines them up
/// (<see cref="HookMeeting"/>): the consumer waits there for the frame's pass, and the two then count at an offset that
/// sweeps through the rounds. Each round checks that the node went back to its pool. Run alone: its threads must run at
/// once, and the hook is process-wide.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class LoopDelayLetGoRaceTests
{
    private static readonly FieldInfo s_timer = typeof(FrameWaiter).GetField("_timer", BindingFlags.Instance | BindingFlags.NonPublic)!;

    [Fact]
    public void ALoopDelayLetGoOfAsAFramesPassDrainsItsWheel_ItsTimerNodeGoesBackToItsPool()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        int loopThread = Environment.CurrentManagedThreadId;
        var meeting = new HookMeeting();
        TimerNode? target = null;
        int current = -1;
        var race = new RaceRounds("LoopDelayLetGoRaceTests", TestUtil.Stress(10_000))
        {
            TimeCap = TimeSpan.FromSeconds(5),
            ClearHooks = () => TimerNode.TestHookBeforeReleaseFromWheel = null,
        };
        // Side 0: the wheel's owner (this thread, in the frame's pass); side 1: the consumer (the WhenAny's thread).
        TimerNode.TestHookBeforeReleaseFromWheel = node =>
        {
            if (node == Volatile.Read(ref target))
            {
                meeting.Arrive(Environment.CurrentManagedThreadId == loopThread ? 0 : 1, Volatile.Read(ref current));
            }
        };
        race.Run(round =>
        {
            int r = round;
            var work = new Promise();
            // A timer in the loop's frame wheel (its insert inbox: this thread is between frames).
            SpindleTask delay = loop.DelayFrame(1000);
            var node = (TimerNode)s_timer.GetValue(delay._source)!;
            Volatile.Write(ref target, node);
            Volatile.Write(ref current, round);
            SpindleTask<int> any = SpindleTask.WhenAny(work.Task, delay);
            // The WhenAny's thread stops the timer (pushed to the cancel inbox, which asks for a pass) and waits at the
            // hook; this thread then runs the frame whose pass takes the node out and lets go of it too.
            (Exception? mine, Exception? theirs) = race.Racer.RunBothAtOnce(round, () =>
            {
                if (meeting.WaitFor(1, r))
                {
                    loop.RunFrame();
                }
            }, work.SetResult);
            Assert.Null(mine);
            Assert.Null(theirs);
            Assert.Equal(0, any.GetAwaiter().GetResult());
            // Both holders have let go: the last recycled the node, which leaves it in no shard.
            if (node.Shard is not null)
            {
                race.Fail($"the stopped timer's node was never recycled ({loop.PendingTimers} timers pending)");
            }
        });
        Assert.True(meeting.Missed == -1, $"round {meeting.Missed}: the wheel's owner and the consumer did not both reach the hook within 10 s");
        race.AssertNone("a timer node let go of by its wheel and its consumer at once leaked from its pool");
    }
}
#endif

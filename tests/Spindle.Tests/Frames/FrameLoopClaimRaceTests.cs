using System;
using System.Diagnostics;
using System.Threading;

using SpindleLib.Tests.Sources;

namespace SpindleLib.Tests.Frames;

/// <summary>
/// A frame loop runs on one thread at a time: a step (a frame, BeginFrame, RunPhase) claims it with a compare-exchange
/// (<c>FrameLoop.Claim</c>), and a second thread's call meanwhile is refused. A claim made of a read and a store let two
/// threads that called at the same moment both run a frame, at once, over the same phases and wheels; mutation testing
/// (mut52, F4) found no test that failed with it. Here two threads call <see cref="FrameLoop.RunFrame()"/> at once, round
/// after round, and the frame that runs a hand-off posted before the round waits, inside its frame, for the other
/// thread's call to end: that call must have been refused, since the loop was claimed all along (the first frame to
/// begin after the post runs it, so a frame that ran wholly before it would have run the hand-off itself). Uses
/// <see cref="ContinuationRacer"/>. Run alone: its threads must run at once.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class FrameLoopClaimRaceTests
{
    private const int Running = 0, Ran = 1, Refused = 2, Threw = 3;

    [Fact]
    public void TwoThreadsRunningAFrameAtOnce_OneIsRefusedWhileTheOtherRunsIt()
    {
        var loop = new FrameLoop();
        var outcomes = new int[2]; // this thread's call, the racer's
        int me = Environment.CurrentManagedThreadId;
        int refusals = 0;
        var race = new RaceRounds("FrameLoopClaimRaceTests", TestUtil.Stress(20_000)) { TimeCap = TimeSpan.FromSeconds(3) };
        race.Run(round =>
        {
            outcomes[0] = outcomes[1] = Running;
            string? seen = null;
            // Runs in the Update of the first frame to begin after the post, on the thread running it.
            loop.SynchronizationContext.Post(_ =>
            {
                int other = Environment.CurrentManagedThreadId == me ? 1 : 0;
                var limit = Stopwatch.StartNew();
                int outcome;
                while ((outcome = Volatile.Read(ref outcomes[other])) == Running && limit.Elapsed < TimeSpan.FromSeconds(10))
                {
                    Thread.Yield();
                }
                seen = outcome switch
                {
                    Running => "the other thread's call had not ended after 10 s",
                    Ran => "the other thread ran a whole frame meanwhile",
                    Threw => "the other thread's call threw something other than the refusal",
                    _ => null,
                };
            }, null);
            (Exception? mine, Exception? theirs) = race.Racer.RunBothAtOnce(round, () => RunFrame(loop, outcomes, 0), () => RunFrame(loop, outcomes, 1));
            Assert.True(mine is null && theirs is null, $"round {round}: a call threw something other than the refusal: {mine ?? theirs}");
            refusals += outcomes[0] == Refused || outcomes[1] == Refused ? 1 : 0;
            if (seen is not null)
            {
                race.Fail($"while a frame ran, {seen}");
            }
        });
        race.AssertNone($"two threads ran frames of one loop at once ({refusals} rounds had a call refused)");
    }

    /// <summary>
    /// Runs a frame, and records whether it ran or was refused as another thread's frame was running. Any other exception
    /// goes to the round: a refusal that said the call came from inside a frame, given to the loop thread of an earlier
    /// round while the claimant had not yet taken the loop over, fails it (that thread was in no frame).
    /// </summary>
    private static void RunFrame(FrameLoop loop, int[] outcomes, int side)
    {
        try
        {
            loop.RunFrame();
            Volatile.Write(ref outcomes[side], Ran);
        }
        catch (InvalidOperationException ex) when (ex.Message.StartsWith("Another thread is running a frame", StringComparison.Ordinal))
        {
            Volatile.Write(ref outcomes[side], Refused);
        }
        finally
        {
            Interlocked.CompareExchange(ref outcomes[side], Threw, Running);
        }
    }
}

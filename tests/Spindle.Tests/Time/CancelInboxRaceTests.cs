using System;
using System.Collections.Generic;
using System.Threading;

namespace SpindleLib.Tests.Time;

/// <summary>
/// Two threads cancelling delays of one shard at the same moment: both push onto its cancel inbox, a Treiber stack whose
/// push is one CAS on the head (<see cref="WheelShard.PushCancel"/>). A push that read the head, linked its node under it
/// and wrote the head back with a plain store (no CAS) overwrote the other thread's push made in between: that node left
/// the inbox before the owner saw it, so its timer stayed linked and counted until its deadline (ten minutes here), and
/// was never recycled. The delay itself still read as cancelled (its core was completed before the push), so only the
/// wheel's count shows the loss. Mutation testing (mut51) found no test that such a push failed. A test of its own
/// class, run alone: its two threads must run at once, on the two cores a small machine has.
/// </summary>
[Collection(SequentialCollection.Name)]
public class CancelInboxRaceTests
{
    private const int Count = 4_000; // delays a round; an even number of chunks of each thread's half
    private const int ChunkSize = 40; // delays a token: a chunk each thread cancels at the same moment as the other its own
    private const int Chunks = Count / 2 / ChunkSize;
    private const int Rounds = 10;

    /// <summary>
    /// Each round starts <see cref="Count"/> ten-minute delays on a wheel of its own (one shard, the main one: started off
    /// the workers, they all go there), and two threads cancel interleaved halves of them (the even ones and the odd ones)
    /// at once. Each half is registered on tokens of <see cref="ChunkSize"/> delays, and the threads cancel their tokens
    /// in lockstep, each waiting for the other to reach the same chunk first: a token's cancellation runs its callbacks in
    /// a loop, one push per delay, so the two threads push onto the one inbox as fast as they can, interleaved, whatever
    /// the scheduler does between chunks (started once, with a Barrier, one thread's half had all run before the other
    /// woke, and the pushes never met). Every cancelled delay must leave the wheel (its count reaches 0 within a bounded
    /// wait), read as cancelled, and run its continuation exactly once.
    /// </summary>
    [Fact]
    public void TwoThreadsCancellingHalvesAtOnce_LoseNoCancellation_AndTheWheelEmpties()
    {
        using var wheel = new TimerWheel(TimeProvider.System); // a thread-driven wheel of its own: one shard, one owner
        for (int round = 0; round < Rounds; round++)
        {
            // tokens[side][chunk]: delay i is cancelled by thread i % 2, in its chunk (i / 2) / ChunkSize.
            var tokens = new CancellationTokenSource[2][];
            for (int side = 0; side < 2; side++)
            {
                tokens[side] = new CancellationTokenSource[Chunks];
                for (int chunk = 0; chunk < Chunks; chunk++)
                {
                    tokens[side][chunk] = new CancellationTokenSource();
                }
            }
            var delays = new SpindleTask[Count];
            var ran = new int[Count];
            for (int i = 0; i < Count; i++)
            {
                delays[i] = wheel.Delay(TimeSpan.FromMinutes(10), tokens[i % 2][i / 2 / ChunkSize].Token);
                int index = i;
                delays[i].GetAwaiter().UnsafeOnCompleted(() => Interlocked.Increment(ref ran[index]));
            }
            Assert.Equal(Count, wheel.PendingCount);

            var reached = new int[2] { -1, -1 }; // the chunk each thread is about to cancel
            Exception? otherError = null;
            var other = new Thread(() =>
            {
                try
                {
                    CancelInLockstep(tokens, reached, side: 1, round);
                }
                catch (Exception ex)
                {
                    otherError = ex;
                }
            });
            other.Start();
            CancelInLockstep(tokens, reached, side: 0, round);
            Assert.True(other.Join(TimeSpan.FromSeconds(60)), $"round {round}: the other cancelling thread did not return");
            Assert.Null(otherError);

            // A cancelled timer leaves the count on the wheel's next pass, which the first cancellation kicked (within about
            // a millisecond). Far more than that is allowed for a loaded machine; a lost push never leaves (due in 10 min).
            long pending = -1;
            TestUtil.SpinUntil(
                () => (pending = wheel.PendingCount) == 0,
                () => $"round {round}: {pending} of {Count} cancelled delays are still counted in the wheel (a cancellation lost from the cancel inbox leaves its timer linked until its deadline); {wheel.Describe()}",
                seconds: 20);
            TestUtil.SpinUntil(
                () => Array.TrueForAll(ran, r => r != 0),
                () => $"round {round}: the continuations of {Array.FindAll(ran, r => r == 0).Length} cancelled delays did not run",
                seconds: 20);

            var wrong = new List<string>();
            for (int i = 0; i < Count; i++)
            {
                if (Volatile.Read(ref ran[i]) != 1 || delays[i].Status != SpindleTaskStatus.Canceled)
                {
                    wrong.Add($"delay {i}: continuation ran {ran[i]} times, status {delays[i].Status}");
                }
            }
            Assert.True(wrong.Count == 0, $"round {round}: {wrong.Count} delays wrong: " + string.Join("; ", wrong.GetRange(0, Math.Min(10, wrong.Count))));
            foreach (SpindleTask delay in delays)
            {
                Assert.Throws<System.Threading.Tasks.TaskCanceledException>(() => delay.GetAwaiter().GetResult());
            }
            Assert.Equal("main: count=0 linked=0", wheel.Describe());
            foreach (CancellationTokenSource[] side in tokens)
            {
                foreach (CancellationTokenSource cts in side)
                {
                    cts.Dispose();
                }
            }
        }
    }

    /// <summary>
    /// Cancels <paramref name="side"/>'s tokens in order, each once the other thread has reached the same chunk: a spin,
    /// so that both start it within a fraction of a microsecond (a thread woken from a wait starts hundreds of
    /// microseconds late), yielding only if the other thread does not come soon (it was preempted).
    /// </summary>
    private static void CancelInLockstep(CancellationTokenSource[][] tokens, int[] reached, int side, int round)
    {
        long until = Environment.TickCount64 + 60_000;
        for (int chunk = 0; chunk < Chunks; chunk++)
        {
            Volatile.Write(ref reached[side], chunk);
            var spin = new SpinWait();
            while (Volatile.Read(ref reached[1 - side]) < chunk)
            {
                if (Environment.TickCount64 > until)
                {
                    throw new TimeoutException($"round {round}: the other cancelling thread did not reach chunk {chunk} within 60 s");
                }
                spin.SpinOnce(sleep1Threshold: -1);
            }
            tokens[side][chunk].Cancel();
        }
    }
}

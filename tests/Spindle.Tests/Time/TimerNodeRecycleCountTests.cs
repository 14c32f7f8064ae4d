using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Time;

#if DEBUG // the pools' return hook exists only in a Debug build of the library (PoolTestHooks)
/// <summary>
/// A cancelled delay's node has two holders, the wheel's owner and the consumer, and the second of them to let go
/// returns it to the pool, once (<c>TimerNode</c>'s count of holders that let go). A count that lost an increment leaves
/// the node out of the pool for good (nothing else notices: the wheel's pending count and the consumer's read are
/// unchanged), and one that took an increment twice, or that another write to the same word clobbered, returns it twice
/// (two later delays then share it). This test counts the returns themselves, through the pools' Debug hook: each
/// cancelled delay returns its node exactly once, while two threads push delays onto one shard's insert inbox and
/// cancel them (the consumer's let-go, inline in the cancel) and the owner's passes let go of them (on a
/// <see cref="ManualClock"/> a kick runs its pass inline, so every return happens on this test's threads, and those
/// alone are counted: leftovers of earlier tests on other wheels return nodes on other threads).
/// </summary>
[Collection(SequentialCollection.Name)] // the pools' hook is process-wide
public sealed class TimerNodeRecycleCountTests
{
    private const int PerThread = 2_000;
    private const int ChunkSize = 20; // delays a token

    [ThreadStatic]
    private static bool t_counted;

    [Fact]
    public void CancelledDelays_PushedAndCancelledOnTwoThreadsAtOnce_EachReturnTheirNodeToThePoolOnce()
    {
        int returned = 0;
        Action<object>? previous = PoolTestHooks.Returning;
        PoolTestHooks.Returning = o =>
        {
            previous?.Invoke(o);
            if (t_counted && o is TimerNode)
            {
                Interlocked.Increment(ref returned);
            }
        };
        try
        {
            var clock = new ManualClock();
            using var wheel = new TimerWheel(clock);
            int rounds = TestUtil.Stress(4);
            for (int round = 0; round < rounds; round++)
            {
                Volatile.Write(ref returned, 0);
                var ran = new int[2 * PerThread];
                var canceled = new int[2 * PerThread];
                var errors = new Exception?[2];
                using var start = new Barrier(2);
                var threads = new Thread[2];
                for (int side = 0; side < 2; side++)
                {
                    int s = side;
                    threads[s] = new Thread(() =>
                    {
                        t_counted = true;
                        try
                        {
                            start.SignalAndWait();
                            for (int chunk = 0; chunk < PerThread / ChunkSize; chunk++)
                            {
                                using var cts = new CancellationTokenSource();
                                for (int j = 0; j < ChunkSize; j++)
                                {
                                    int index = s * PerThread + chunk * ChunkSize + j;
                                    SpindleTask delay = wheel.Delay(TimeSpan.FromMinutes(10), cts.Token);
                                    delay.GetAwaiter().UnsafeOnCompleted(() =>
                                    {
                                        try
                                        {
                                            delay.GetAwaiter().GetResult();
                                        }
                                        catch (TaskCanceledException)
                                        {
                                            Interlocked.Increment(ref canceled[index]);
                                        }
                                        Interlocked.Increment(ref ran[index]);
                                    });
                                }
                                cts.Cancel(); // the consumers let go here, inline; the owner in the pass this kicks
                            }
                        }
                        catch (Exception ex)
                        {
                            errors[s] = ex;
                        }
                    })
                    { IsBackground = true, Name = "delays " + s };
                    threads[s].Start();
                }
                foreach (Thread thread in threads)
                {
                    Assert.True(thread.Join(TimeSpan.FromSeconds(TestUtil.StressTimeout(60))), $"round {round}: a thread did not return");
                }
                Assert.Null(errors[0]);
                Assert.Null(errors[1]);

                t_counted = true;
                try
                {
                    clock.Advance(TimeSpan.FromMilliseconds(1)); // a pass on this thread: anything the kicks left is released
                }
                finally
                {
                    t_counted = false;
                }
                for (int i = 0; i < ran.Length; i++)
                {
                    Assert.True(ran[i] == 1 && canceled[i] == 1, $"round {round}: delay {i} ran {ran[i]} times, read as cancelled {canceled[i]} times");
                }
                Assert.Equal(0, wheel.PendingCount);
                Assert.True(Volatile.Read(ref returned) == 2 * PerThread,
                    $"round {round}: {2 * PerThread} cancelled delays returned {returned} nodes to the pool: a node was recycled twice (more) or never (fewer)");
            }
        }
        finally
        {
            PoolTestHooks.Returning = previous;
        }
    }
}
#endif

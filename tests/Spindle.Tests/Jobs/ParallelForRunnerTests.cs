using System;
using System.Diagnostics;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Jobs;

/// <summary>
/// A parallel-for's runner is part of its node, waits in a queue without a reference, and serves every use of the
/// node (JobNodes.cs, ParallelNode.Runner). These two races were found by a review of that change; each test failed
/// before its fix. Run alone: they hold workers and rely on the node being reused by the same thread's pool.
/// </summary>
[Collection(SequentialCollection.Name)]
public class ParallelForRunnerTests
{
    /// <summary>
    /// A use that becomes ready while the node's runner still waits in a queue relies on that runner. If it waited in a
    /// busy worker's own queue, a thread waiting in Complete() for a dependent could not reach it, and nothing ran the
    /// use until that worker was free: the runner always goes to the shared queue.
    /// </summary>
    [Fact]
    public async Task FireAndForgetParallelFor_ItsDependentCompletes_WhileTheWorkerThatQueuedItsRunnerIsBusy()
    {
        await JobTestUtil.Bounded(() =>
        {
            using var others = new HoldWorkers(WorkerPool.Shared.WorkerCount - 1);
            var release = new ManualResetEventSlim(false);
            var scheduled = new ManualResetEventSlim(false);
            JobHandle first = default;
            var hits1 = new int[64];
            SpindleTask busy = Spindle.Run(() =>
            {
                first = new IndexCountJob { Hits = hits1 }.Schedule(64, 1);
                JobHandle.ScheduleBatchedJobs(); // made ready on this worker: its runner is queued from here
                scheduled.Set();
                release.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)); // then this worker stays busy
            });
            try
            {
                Assert.True(scheduled.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "the scheduling item never ran");
                first.Complete(); // this thread runs every batch; the node goes back to this thread's pool
                Assert.Equal(64, hits1.Sum());

                var hits2 = new int[64];
                JobHandle second = new IndexCountJob { Hits = hits2 }.Schedule(64, 1); // most often the same node, not awaited
                var ran = new Counter();
                JobHandle dependent = new CountJob(ran).Schedule(second);
                var clock = Stopwatch.StartNew();
                Task waiter = Task.Run(dependent.Complete);
                // The defect blocks until the release below: the default bound (it was 5 s; a Task.Run can start late).
                bool done = waiter.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds));
                long ms = clock.ElapsedMilliseconds;
                string pool = WorkerPool.Shared.Describe();
                release.Set();
                Assert.True(waiter.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "the dependent never completed");
                Assert.True(done, $"Complete() on the dependent made no progress for {ms} ms while the worker that queued the runner was busy ({pool}; same node: {ReferenceEquals(first.Node, second.Node)})");
                Assert.Equal(64, hits2.Sum());
                Assert.Equal(1, ran.Read());
            }
            finally
            {
                release.Set();
                TestUtil.WithTimeout(busy).GetAwaiter().GetResult();
            }
        });
    }

    /// <summary>
    /// The runner always waits in the jobs' shared queue. Workers take from the injection queue (Spindle.Run from other
    /// threads) first; while a main thread kept that one full, a fire-and-forget parallel-for made ready on a worker did
    /// not run at all, though an IJob made ready by the same finish ran at once. A worker's fair look now starts at the
    /// jobs' queue.
    /// </summary>
    [Fact]
    public async Task ParallelForMadeReadyOnAWorker_Runs_WhileAnotherThreadKeepsTheInjectionQueueFull()
    {
        await JobTestUtil.Bounded(() =>
        {
            int outstanding = 0;
            int stop = 0;
            var producer = new Thread(() =>
            {
                while (Volatile.Read(ref stop) == 0)
                {
                    if (Volatile.Read(ref outstanding) < 20_000)
                    {
                        Interlocked.Increment(ref outstanding);
                        Spindle.Run(() =>
                        {
                            var spin = Stopwatch.StartNew();
                            while (spin.Elapsed.TotalMilliseconds < 0.02)
                            {
                            }
                            Interlocked.Decrement(ref outstanding);
                        }).Forget();
                    }
                    else
                    {
                        Thread.Sleep(1);
                    }
                }
            })
            { IsBackground = true, Name = "injection flood" };
            producer.Start();
            try
            {
                Assert.True(SpinWait.SpinUntil(() => Volatile.Read(ref outstanding) > 10_000, TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "the backlog never built");
                var hits = new int[64];
                var sibling = new Counter();
                Spindle.Run(() =>
                {
                    JobHandle a = new CountJob(new Counter()).Schedule();
                    new IndexCountJob { Hits = hits }.Schedule(64, 8, a); // fire and forget: no thread waits in Complete()
                    new CountJob(sibling).Schedule(a); // made ready by the same finish
                    JobHandle.ScheduleBatchedJobs();
                }).Forget();
                Assert.True(SpinWait.SpinUntil(() => sibling.Read() == 1, TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "the IJob sibling never ran");
                Assert.True(
                    SpinWait.SpinUntil(() => hits.Sum() == 64, TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), // the flood goes on until then
                    $"the parallel-for ran {hits.Sum()} of 64 indices in {TestUtil.DefaultTimeoutSeconds} s while the injection queue stayed full; {WorkerPool.Shared.Describe()}");
            }
            finally
            {
                Volatile.Write(ref stop, 1);
                producer.Join();
            }
        });
    }

#if DEBUG
    /// <summary>
    /// The thread that makes a use ready holds no reference. If it read the node's version after marking the use ready,
    /// a waiting thread could run every batch, finish and recycle the node in between, and the runner would be
    /// published for the next use, not rented yet; reading the finished use's stale ready flag, it would then run the
    /// next use's batches before that use's dependency finished. Two Debug-only hooks stand in for the two preemptions
    /// (the ready-making thread after it marked the use ready; the runner between its reads of the ready flag and the
    /// cursor). The version is now published before the use is marked ready.
    /// </summary>
    [Fact]
    public async Task ThreadMakingAUseReady_IsPreemptedUntilTheNodeIsRecycled_TheRunnerNeverRunsTheNextUseEarly()
    {
        await JobTestUtil.Bounded(() =>
        {
            var early = new Counter();
            var started0 = new Flag();
            var release0 = new Flag();
            JobHandle d0 = new HeldJob { Started = started0, Release = release0, Done = new Flag() }.Schedule();
            var hits1 = new int[64];
            // One batch each: no fan-out, so the thread that runs the batch finishes the use and takes the node back into
            // its own pool, where the next Schedule on this thread rents it again.
            JobHandle p = new IndexCountJob { Hits = hits1 }.Schedule(64, 64, d0);
            var node = (ParallelNode)p.Node!;
            int version = p.Version;
            var rented = new Flag();
            int hookA = 0;
            int hookB = 0;
            ParallelNode.TestHookAfterReady = n =>
            {
                if (n == node && WorkerPool.Shared.IsWorkerThread && Interlocked.Exchange(ref hookA, 1) == 0)
                {
                    SpinWait.SpinUntil(() => n.Version != version, TimeSpan.FromSeconds(10)); // until this use is recycled
                }
            };
            ParallelNode.TestHookHelpAfterReadyRead = (n, v) =>
            {
                if (n == node && v == version + 1 && WorkerPool.Shared.IsWorkerThread && Interlocked.Exchange(ref hookB, 1) == 0)
                {
                    rented.Wait(10); // until the next use is rented
                }
            };
            try
            {
                JobHandle.ScheduleBatchedJobs();
                Assert.True(started0.Wait(), "the first dependency did not start on a worker");
                release0.Set();
                p.Complete(); // this thread runs the batches as soon as the use is marked ready, and recycles the node
                Assert.Equal(64, hits1.Sum());

                var started1 = new Flag();
                var release1 = new Flag();
                var done1 = new Flag();
                JobHandle d1 = new HeldJob { Started = started1, Release = release1, Done = done1 }.Schedule();
                var hits2 = new int[64];
                JobHandle after = new IndexCountJob { Hits = hits2, Dependency = done1, Early = early }.Schedule(64, 64, d1);
                Assert.Same(node, after.Node); // the race needs the node reused, which this thread's pool does
                JobHandle.ScheduleBatchedJobs();
                rented.Set();
                Thread.Sleep(200);
                int earlyWhileHeld = early.Read();
                release1.Set();
                after.Complete();
                Assert.True(earlyWhileHeld == 0 && early.Read() == 0, $"{early.Read()} indices of the next use ran before its dependency finished");
                Assert.Equal(64, hits2.Sum());
            }
            finally
            {
                ParallelNode.TestHookAfterReady = null;
                ParallelNode.TestHookHelpAfterReadyRead = null;
                release0.Set();
            }
        });
    }
#endif
}

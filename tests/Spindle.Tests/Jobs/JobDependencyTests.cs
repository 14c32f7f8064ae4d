using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Jobs;

/// <summary>
/// Dependency order: every job runs exactly once, and only after every job it depends on (directly, through
/// CombineDependencies, or through an empty parallel-for) has finished. Checked with global sequence stamps.
/// </summary>
public class JobDependencyTests
{
    private static long s_sequence;

    /// <summary>One random DAG: per node its kind, its dependencies, its run counts and its first and last stamp.</summary>
    private sealed class Dag
    {
        public readonly int Size;
        public readonly int[] Kind; // 0: IJob, 1: IJobParallelFor, 2: IJobParallelForBatch
        public readonly int[] Length;
        public readonly int[][] Deps;
        public readonly int[][] Hits; // per node, per index (an IJob has one index)
        public readonly long[] MinStamp;
        public readonly long[] MaxStamp;

        public Dag(int size)
        {
            Size = size;
            Kind = new int[size];
            Length = new int[size];
            Deps = new int[size][];
            Hits = new int[size][];
            MinStamp = new long[size];
            MaxStamp = new long[size];
            Array.Fill(MinStamp, long.MaxValue);
        }

        public void Hit(int node, int index)
        {
            // A stamp as the run starts (the node's first one must follow its dependencies' last), one as it ends.
            long stamp = Interlocked.Increment(ref s_sequence);
            Interlocked.Increment(ref Hits[node][index]);
            long seen = Volatile.Read(ref MinStamp[node]);
            while (stamp < seen)
            {
                long prior = Interlocked.CompareExchange(ref MinStamp[node], stamp, seen);
                if (prior == seen)
                {
                    break;
                }
                seen = prior;
            }
            stamp = Interlocked.Increment(ref s_sequence);
            seen = Volatile.Read(ref MaxStamp[node]);
            while (stamp > seen)
            {
                long prior = Interlocked.CompareExchange(ref MaxStamp[node], stamp, seen);
                if (prior == seen)
                {
                    break;
                }
                seen = prior;
            }
        }

        /// <summary>Null if the DAG ran correctly, else what went wrong.</summary>
        public string? Verify()
        {
            // The latest stamp a node "stands for": its own, or (for an empty parallel-for, which runs nothing) its dependencies'.
            var effectiveMax = new long[Size];
            for (int j = 0; j < Size; j++)
            {
                for (int i = 0; i < Hits[j].Length; i++)
                {
                    if (Hits[j][i] != 1)
                    {
                        return $"node {j} (kind {Kind[j]}, length {Length[j]}) index {i} ran {Hits[j][i]} times";
                    }
                }
                long depMax = 0;
                foreach (int d in Deps[j])
                {
                    depMax = Math.Max(depMax, effectiveMax[d]);
                }
                if (Hits[j].Length == 0)
                {
                    effectiveMax[j] = depMax;
                    continue;
                }
                if (MinStamp[j] <= depMax)
                {
                    return $"node {j} (kind {Kind[j]}) started at stamp {MinStamp[j]}, before a dependency (of {string.Join(",", Deps[j])}) finished at stamp {depMax}";
                }
                effectiveMax[j] = MaxStamp[j];
            }
            return null;
        }
    }

    private struct DagJob : IJob
    {
        public Dag Dag;
        public int Node;

        public readonly void Execute() => Dag.Hit(Node, 0);
    }

    private struct DagForJob : IJobParallelFor
    {
        public Dag Dag;
        public int Node;

        public readonly void Execute(int index) => Dag.Hit(Node, index);
    }

    private struct DagBatchJob : IJobParallelForBatch
    {
        public Dag Dag;
        public int Node;

        public readonly void Execute(int startIndex, int count)
        {
            for (int i = startIndex; i < startIndex + count; i++)
            {
                Dag.Hit(Node, i);
            }
        }
    }

    private static JobHandle Combine(JobHandle[] handles, int[] deps, Random rng)
    {
        switch (deps.Length)
        {
            case 0:
                return default;
            case 1:
                return handles[deps[0]];
            case 2:
                return JobHandle.CombineDependencies(handles[deps[0]], handles[deps[1]]);
            case 3:
                return rng.Next(2) == 0
                    ? JobHandle.CombineDependencies(handles[deps[0]], handles[deps[1]], handles[deps[2]])
                    : JobHandle.CombineDependencies(JobHandle.CombineDependencies(handles[deps[0]], handles[deps[1]]), handles[deps[2]]);
            default:
                var list = new JobHandle[deps.Length + rng.Next(2)];
                for (int i = 0; i < deps.Length; i++)
                {
                    list[i] = handles[deps[i]];
                }
                // Sometimes a default handle in the list too: it is no dependency.
                return JobHandle.CombineDependencies(list);
        }
    }

    /// <summary>Builds, schedules, completes and verifies one random DAG of 2-20 jobs.</summary>
    private static void RunOneDag(Random rng)
    {
        int n = rng.Next(2, 21);
        var dag = new Dag(n);
        var handles = new JobHandle[n];
        var hasDependents = new bool[n];
        var candidates = new List<int>(n);
        for (int j = 0; j < n; j++)
        {
            int depCount = j == 0 ? 0 : rng.Next(Math.Min(j, 5) + 1);
            candidates.Clear();
            for (int k = 0; k < j; k++)
            {
                candidates.Add(k);
            }
            var deps = new int[depCount];
            for (int k = 0; k < depCount; k++)
            {
                int pick = rng.Next(candidates.Count);
                deps[k] = candidates[pick];
                candidates.RemoveAt(pick);
                hasDependents[deps[k]] = true;
            }
            dag.Deps[j] = deps;
            JobHandle dependsOn = Combine(handles, deps, rng);

            int roll = rng.Next(10);
            if (roll < 7)
            {
                dag.Kind[j] = 0;
                dag.Hits[j] = new int[1];
                handles[j] = new DagJob { Dag = dag, Node = j }.Schedule(dependsOn);
            }
            else
            {
                int length = rng.Next(4) == 0 ? 0 : rng.Next(1, 48);
                int batch = rng.Next(1, 9);
                dag.Kind[j] = roll < 9 ? 1 : 2;
                dag.Length[j] = length;
                dag.Hits[j] = new int[length];
                handles[j] = roll < 9
                    ? new DagForJob { Dag = dag, Node = j }.Schedule(length, batch, dependsOn)
                    : new DagBatchJob { Dag = dag, Node = j }.ScheduleBatch(length, batch, dependsOn);
            }
            if (rng.Next(4) == 0)
            {
                JobHandle.ScheduleBatchedJobs();
            }
        }

        switch (rng.Next(3))
        {
            case 0:
                // Every handle, in a random order.
                foreach (int j in Shuffled(n, rng))
                {
                    handles[j].Complete();
                }
                break;
            case 1:
                // One handle for all of them.
                JobHandle.CombineDependencies(handles).Complete();
                break;
            default:
                // Only the sinks: every other job is an ancestor of one, so it must have run too.
                foreach (int j in Shuffled(n, rng))
                {
                    if (!hasDependents[j])
                    {
                        handles[j].Complete();
                    }
                }
                break;
        }

        foreach (JobHandle h in handles)
        {
            Assert.True(h.IsCompleted);
        }
        string? problem = dag.Verify();
        if (problem is not null)
        {
            Assert.Fail(problem + " (DAG deps: " + string.Join(" | ", Array.ConvertAll(dag.Deps, d => string.Join(",", d))) + ")");
        }
    }

    private static int[] Shuffled(int n, Random rng)
    {
        var order = new int[n];
        for (int i = 0; i < n; i++)
        {
            order[i] = i;
        }
        rng.Shuffle(order);
        return order;
    }

    private static void RunDags(int count, int seed)
    {
        var rng = new Random(seed);
        for (int i = 0; i < count; i++)
        {
            try
            {
                RunOneDag(rng);
            }
            catch (Exception ex) when (ex is not Xunit.Sdk.XunitException)
            {
                throw new InvalidOperationException($"DAG {i} (seed {seed}) failed: {ex.Message}", ex);
            }
            catch (Xunit.Sdk.XunitException ex)
            {
                throw new InvalidOperationException($"DAG {i} (seed {seed}): {ex.Message}", ex);
            }
        }
    }

    [Fact]
    public async Task RandomDags_EveryJobRunsOnceAndAfterAllItsDependencies()
    {
        // 10,000 DAGs: a quarter from each of two plain threads, a quarter from each of two workers (Spindle.Run).
        int total = TestUtil.Stress(10_000);
        int quarter = total / 4;
        int baseSeed = Environment.TickCount;
        var sw = Stopwatch.StartNew();
        Task plain1 = TestUtil.RunOnThread(() => RunDags(quarter, baseSeed), "dag producer 1");
        Task plain2 = TestUtil.RunOnThread(() => RunDags(quarter, baseSeed + 1), "dag producer 2");
        Task worker1 = TestUtil.AwaitAsync(Spindle.Run(() => RunDags(quarter, baseSeed + 2)));
        Task worker2 = TestUtil.AwaitAsync(Spindle.Run(() => RunDags(total - 3 * quarter, baseSeed + 3)));
        await TestUtil.WithTimeout(Task.WhenAll(plain1, plain2, worker1, worker2), TestUtil.StressTimeout(60));
        Assert.True(sw.Elapsed < TimeSpan.FromSeconds(TestUtil.StressTimeout(60)));
    }

    [Fact]
    public async Task Chain_RunsInOrder()
    {
        await JobTestUtil.Bounded(() =>
        {
            const int Length = 2_000;
            var dag = new Dag(Length);
            JobHandle previous = default;
            for (int j = 0; j < Length; j++)
            {
                dag.Deps[j] = j == 0 ? [] : [j - 1];
                dag.Hits[j] = new int[1];
                previous = new DagJob { Dag = dag, Node = j }.Schedule(previous);
            }
            previous.Complete();
            Assert.Null(dag.Verify());
        });
    }

    [Fact]
    public async Task FanOutFanIn_JoinRunsAfterEveryBranch()
    {
        await JobTestUtil.Bounded(() =>
        {
            const int Branches = 300;
            var dag = new Dag(Branches + 2);
            var branchHandles = new JobHandle[Branches];
            dag.Deps[0] = [];
            dag.Hits[0] = new int[1];
            JobHandle root = new DagJob { Dag = dag, Node = 0 }.Schedule();
            var all = new int[Branches];
            for (int b = 0; b < Branches; b++)
            {
                int node = b + 1;
                all[b] = node;
                dag.Deps[node] = [0];
                dag.Hits[node] = new int[1];
                branchHandles[b] = new DagJob { Dag = dag, Node = node }.Schedule(root);
            }
            dag.Deps[Branches + 1] = all;
            dag.Hits[Branches + 1] = new int[1];
            JobHandle join = new DagJob { Dag = dag, Node = Branches + 1 }.Schedule(JobHandle.CombineDependencies(branchHandles));
            JobHandle.ScheduleBatchedJobs();
            join.Complete();
            Assert.Null(dag.Verify());
        });
    }

    [Fact]
    public async Task FanOut_BranchesRecycledWhileTheRootStillNotifiesTheRest_EachRunsOnce()
    {
        // A job hangs its own edge (kept with its node) on its single dependency's waiter list. While the root's finish
        // walks 300 such edges, the branches it has made ready run on other threads, finish, and their nodes are rented
        // again by a thread scheduling chains of the same job type, whose own edges go onto other lists. A lost or doubled
        // run would show in the hit counts. (The narrowest window, the walk touching an edge a few instructions after
        // queuing its branch, needs the walker preempted right there; with the edge released before, it does not exist:
        // see FinishCore.)
        await JobTestUtil.Bounded(() =>
        {
            using var stop = new CancellationTokenSource();
            Exception? churnError = null;
            var churn = new Thread(() =>
            {
                try
                {
                    while (!stop.IsCancellationRequested)
                    {
                        var chainDag = new Dag(50);
                        JobHandle previous = default;
                        for (int node = 0; node < 50; node++)
                        {
                            chainDag.Deps[node] = node == 0 ? [] : [node - 1];
                            chainDag.Hits[node] = new int[1];
                            previous = new DagJob { Dag = chainDag, Node = node }.Schedule(previous);
                        }
                        previous.Complete();
                        if (chainDag.Verify() is { } error)
                        {
                            throw new InvalidOperationException("churn chain: " + error);
                        }
                    }
                }
                catch (Exception ex)
                {
                    churnError = ex;
                }
            }) { IsBackground = true, Name = "churn" };
            churn.Start();
            try
            {
                const int Branches = 300;
                for (int round = 0; round < TestUtil.Stress(100); round++)
                {
                    var dag = new Dag(Branches + 1);
                    dag.Deps[0] = [];
                    dag.Hits[0] = new int[1];
                    JobHandle root = new DagJob { Dag = dag, Node = 0 }.Schedule();
                    var branches = new JobHandle[Branches];
                    for (int b = 0; b < Branches; b++)
                    {
                        dag.Deps[b + 1] = [0];
                        dag.Hits[b + 1] = new int[1];
                        branches[b] = new DagJob { Dag = dag, Node = b + 1 }.Schedule(root);
                    }
                    JobHandle.ScheduleBatchedJobs();
                    foreach (JobHandle branch in branches)
                    {
                        branch.Complete();
                    }
                    Assert.Null(dag.Verify());
                }
            }
            finally
            {
                stop.Cancel();
                churn.Join();
            }
            Assert.Null(churnError);
        });
    }

    [Fact]
    public async Task ParallelForBetweenJobs_RunsAfterItsDependencyAndBeforeItsDependent()
    {
        await JobTestUtil.Bounded(() =>
        {
            for (int round = 0; round < 50; round++)
            {
                var dag = new Dag(3);
                dag.Deps[0] = [];
                dag.Hits[0] = new int[1];
                dag.Deps[1] = [0];
                dag.Hits[1] = new int[10_000];
                dag.Deps[2] = [1];
                dag.Hits[2] = new int[1];
                JobHandle first = new DagJob { Dag = dag, Node = 0 }.Schedule();
                JobHandle middle = round % 2 == 0
                    ? new DagForJob { Dag = dag, Node = 1 }.Schedule(10_000, 64, first)
                    : new DagBatchJob { Dag = dag, Node = 1 }.ScheduleBatch(10_000, 64, first);
                new DagJob { Dag = dag, Node = 2 }.Schedule(middle).Complete();
                Assert.Null(dag.Verify());
            }
        });
    }

    [Fact]
    public async Task DependencyCompletedBeforeScheduling_DependentStillRuns()
    {
        await JobTestUtil.Bounded(() =>
        {
            var counter = new Counter();
            JobHandle first = new CountJob(counter).Schedule();
            first.Complete();
            JobHandle second = new CountJob(counter).Schedule(first);
            JobHandle third = new CountJob(counter).Schedule(JobHandle.CombineDependencies(first, second));
            third.Complete();
            Assert.Equal(3, counter.Read());
        });
    }

    [Fact]
    public void DefaultHandle_IsCompleteAndIsNoDependency()
    {
        JobHandle none = default;
        Assert.True(none.IsCompleted);
        none.Complete();
        Assert.True(none.GetAwaiter().IsCompleted);
        Assert.True(none.AsSpindleTask().IsCompleted);
        Assert.Equal(default, JobHandle.CombineDependencies(none, none));
        Assert.Equal(default, JobHandle.CombineDependencies(none, none, none));
        Assert.Equal(default, JobHandle.CombineDependencies(ReadOnlySpan<JobHandle>.Empty));
        Assert.Equal(default, JobHandle.CombineDependencies(new JobHandle[10]));

        var counter = new Counter();
        new CountJob(counter).Schedule(none).Complete();
        Assert.Equal(1, counter.Read());
    }

    [Fact]
    public async Task CombineDependencies_OfOnePendingHandleAndCompletedOnes_CompletesWithIt()
    {
        // Completed first: Complete() helps, and would run (and block in) the gated job if it were already queued.
        JobHandle done = new CountJob(new Counter()).Schedule();
        done.Complete();
        using var gate = new Gate();
        var counter = new Counter();
        JobHandle pending = new GateJob(gate, counter).Schedule();

        JobHandle[] combos =
        [
            JobHandle.CombineDependencies(pending, done),
            JobHandle.CombineDependencies(done, pending),
            JobHandle.CombineDependencies(default, pending, done),
            JobHandle.CombineDependencies([done, default, pending, done]),
            JobHandle.CombineDependencies(pending, pending),
            JobHandle.CombineDependencies([pending, pending, pending]),
        ];
        JobHandle.ScheduleBatchedJobs();
        gate.WaitStarted();
        foreach (JobHandle combo in combos)
        {
            Assert.False(combo.IsCompleted);
        }
        gate.Release.Set();
        await JobTestUtil.Bounded(() =>
        {
            foreach (JobHandle combo in combos)
            {
                combo.Complete();
                Assert.Equal(1, counter.Read());
            }
        });
    }

    /// <summary>No cap on the handles one combine takes (there was one at 4,096; Unity has none): 10,000 and 100,000.</summary>
    [Theory]
    [InlineData(4096)]
    [InlineData(10_000)]
    [InlineData(100_000)]
    public async Task CombineDependencies_ManyHandles_WaitsForEveryHandle(int count)
    {
        await JobTestUtil.Bounded(() =>
        {
            var counter = new Counter();
            var handles = new JobHandle[count];
            for (int i = 0; i < handles.Length; i++)
            {
                handles[i] = new CountJob(counter).Schedule();
            }
            JobHandle all = JobHandle.CombineDependencies(handles);
            var after = new Counter();
            JobHandle last = new CountJob(after).Schedule(all);
            last.Complete();
            Assert.Equal(handles.Length, counter.Read());
            Assert.Equal(1, after.Read());
        });
    }

    /// <summary>100,000 entries: default handles, the same pending handle repeated, and completed ones, mixed.</summary>
    [Fact]
    public async Task CombineDependencies_100000Entries_OneHandleRepeated_WaitsForIt()
    {
        await JobTestUtil.Bounded(() =>
        {
            var ran = new Counter();
            var gate = new Gate();
            JobHandle gated;
            JobHandle all;
            JobHandle done = new CountJob(ran).Schedule();
            done.Complete();
            try
            {
                gated = new GateJob(gate, ran).Schedule();
                var handles = new JobHandle[100_000];
                for (int i = 0; i < handles.Length; i++)
                {
                    handles[i] = (i % 3) switch { 0 => gated, 1 => done, _ => default };
                }
                all = JobHandle.CombineDependencies(handles);
                JobHandle.ScheduleBatchedJobs();
                Assert.False(all.IsCompleted);
            }
            finally
            {
                gate.Dispose();
            }
            all.Complete();
            Assert.True(gated.IsCompleted);
            Assert.Equal(2, ran.Read());
        });
    }

    [Fact]
    public async Task CompletedHandle_StaysCompleted_AndCompleteIsIdempotent()
    {
        await JobTestUtil.Bounded(() =>
        {
            var counter = new Counter();
            JobHandle h = new CountJob(counter).Schedule();
            h.Complete();
            h.Complete();
            Assert.True(h.IsCompleted);
            Assert.Equal(1, counter.Read());
        });
    }
}

using System;
using System.Collections.Generic;
using System.Linq;
using System.Threading;
using CsCheck;

namespace SpindleLib.Tests.Jobs;

/// <summary>
/// Random job graphs with failing jobs (CsCheck, which shrinks a failure to a smallest graph), run on the workers and
/// checked against a model of the documented fault contract: a job runs exactly once if none of the jobs it depends
/// on, directly or not, failed, and never otherwise; Complete() on a job's handle rethrows the job's own exception if
/// it ran and failed, else one of its failed dependencies' (it completes with the same exception), and returns if
/// nothing upstream failed. Dependencies are single handles, CombineDependencies of two or three, or of a span.
/// Handles are completed in a random order, some before the flush (Complete flushes).
/// </summary>
public class JobFaultModelTests
{
    /// <summary>One job: the earlier jobs it depends on, and whether it throws.</summary>
    private readonly record struct Node(int[] Deps, bool Fails)
    {
        public override string ToString() => $"[{string.Join(",", Deps)}]{(Fails ? "!" : "")}";
    }

    private sealed class Graph
    {
        public required Node[] Nodes;
        public required Exception[] Errors;
        public required int[] Runs;
    }

    private struct ModelJob : IJob
    {
        public Graph Graph;
        public int Index;

        public readonly void Execute()
        {
            Interlocked.Increment(ref Graph.Runs[Index]);
            if (Graph.Nodes[Index].Fails)
            {
                throw Graph.Errors[Index];
            }
        }
    }

    private static readonly Gen<(Node[] Nodes, int Seed)> Cases = Gen.Select(
        Gen.Int[1, 16].SelectMany(static n => Gen.Select(
            Gen.Int[0, 1_000_000].Array[n], // per node, the seed of its dependency set
            Gen.Frequency((6, Gen.Const(false)), (1, Gen.Const(true))).Array[n],
            static (depSeeds, fails) =>
            {
                var nodes = new Node[depSeeds.Length];
                for (int i = 0; i < nodes.Length; i++)
                {
                    var rng = new Random(depSeeds[i]);
                    int count = i == 0 ? 0 : rng.Next(Math.Min(i, 4) + 1);
                    nodes[i] = new Node(Enumerable.Range(0, i).OrderBy(_ => rng.Next()).Take(count).OrderBy(static d => d).ToArray(), fails[i]);
                }
                return nodes;
            })),
        Gen.Int);

    [Fact]
    public void RandomGraphs_WithFailingJobs_MatchTheModel()
        => Cases.Sample((Node[] nodes, int seed) => { Run(nodes, seed); }, iter: TestUtil.Stress(200), threads: 1,
            print: static c => string.Join(" ", c.Item1.Select(static (n, i) => $"{i}{n}")) + $" (order seed {c.Item2})");

    private static void Run(Node[] nodes, int seed)
    {
        int n = nodes.Length;
        var graph = new Graph
        {
            Nodes = nodes,
            Errors = Enumerable.Range(0, n).Select(static i => (Exception)new InvalidOperationException("job " + i + " failed")).ToArray(),
            Runs = new int[n],
        };

        // The model: a job is poisoned when one of the jobs upstream of it failed; the exceptions it may complete with.
        var upstreamFailures = new HashSet<int>[n];
        for (int i = 0; i < n; i++)
        {
            upstreamFailures[i] = new HashSet<int>();
            foreach (int d in nodes[i].Deps)
            {
                upstreamFailures[i].UnionWith(upstreamFailures[d]);
                if (nodes[d].Fails && upstreamFailures[d].Count == 0)
                {
                    upstreamFailures[i].Add(d); // a dependency that ran and failed
                }
            }
        }

        var rng = new Random(seed);
        var handles = new JobHandle[n];
        for (int i = 0; i < n; i++)
        {
            JobHandle dependsOn = Combine(nodes[i].Deps.Select(d => handles[d]).ToArray(), rng);
            handles[i] = new ModelJob { Graph = graph, Index = i }.Schedule(dependsOn);
            if (rng.Next(8) == 0)
            {
                CheckComplete(i); // completing a handle flushes the batch
            }
        }
        JobHandle.ScheduleBatchedJobs();
        foreach (int i in Enumerable.Range(0, n).OrderBy(_ => rng.Next()))
        {
            CheckComplete(i);
        }
        for (int i = 0; i < n; i++)
        {
            int expected = upstreamFailures[i].Count == 0 ? 1 : 0;
            Assert.True(graph.Runs[i] == expected, $"job {i} ran {graph.Runs[i]} times, expected {expected}");
        }

        void CheckComplete(int i)
        {
            Exception? thrown = JobTestUtil.CompleteCatching(handles[i]);
            if (upstreamFailures[i].Count > 0)
            {
                Assert.True(thrown is not null && upstreamFailures[i].Any(f => ReferenceEquals(graph.Errors[f], thrown)),
                    $"job {i}: Complete threw {thrown?.Message ?? "nothing"}, expected one of [{string.Join(", ", upstreamFailures[i])}]'s exceptions");
            }
            else if (nodes[i].Fails)
            {
                Assert.True(ReferenceEquals(graph.Errors[i], thrown), $"job {i}: Complete threw {thrown?.Message ?? "nothing"}, expected its own exception");
            }
            else
            {
                Assert.True(thrown is null, $"job {i}: Complete threw {thrown?.Message}, expected nothing");
            }
        }
    }

    private static JobHandle Combine(JobHandle[] deps, Random rng) => deps.Length switch
    {
        0 => default,
        1 => deps[0],
        2 when rng.Next(2) == 0 => JobHandle.CombineDependencies(deps[0], deps[1]),
        3 when rng.Next(2) == 0 => JobHandle.CombineDependencies(deps[0], deps[1], deps[2]),
        _ => JobHandle.CombineDependencies(deps),
    };
}

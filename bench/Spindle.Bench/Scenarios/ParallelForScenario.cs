using System;
using System.Collections.Concurrent;
using System.Threading.Tasks;
using SpindleLib.Bench.Harness;

namespace SpindleLib.Bench.Scenarios;

/// <summary>
/// What the job systems of seeds 000 and 001 are for: a compute-bound kernel over 4M elements, as a plain loop, with
/// Parallel.For, and as a Spindle IJobParallelFor.
/// </summary>
public sealed class ParallelForScenario : Scenario
{
    private const int BatchSize = 16 * 1024;

    public override string Id => "parallel-for";

    public override string Title => "a compute-bound kernel over 4M elements";

    public override string Seed => "000, 001";

    public override string Baseline => "Loop";

    public override string Notes =>
        "Kernel per element: a degree-6 polynomial by Horner's rule (12 floating-point operations), then sqrt(p × p + 1) (3 more), reading one float array and " +
        "writing another. Loop: a plain for loop on one thread. ParallelFor: Parallel.For(0, n, i => kernel), the idiom (a delegate call per element). " +
        $"ParallelForRanges: the BCL's fastest form, Parallel.ForEach over Partitioner.Create(0, n, {BatchSize}) with a plain loop over each range. Spindle: an IJobParallelFor struct, " +
        $"batches of {BatchSize} indices, Schedule + Complete (the calling thread helps). Every system writes the same results: each round's last element " +
        "is checked (and cleared for the next round) inside the timed region; after its measured rounds each system computes once more, untimed, into an " +
        "output filled with NaN, and every element is compared with the kernel's own result.";

    public override void Run(BenchContext context)
    {
        int n = context.Pick(64 * 1024, 4 * 1024 * 1024, 4 * 1024 * 1024);
        var input = new float[n];
        var output = new float[n];
        var expected = new float[n];
        for (int i = 0; i < n; i++)
        {
            input[i] = (i % 1000) * 0.001f;
            expected[i] = Kernel(input[i]);
        }
        string caseName = $"n={n}";

        Measure(context, caseName, "Loop", output, expected, () =>
        {
            for (int i = 0; i < input.Length; i++)
            {
                output[i] = Kernel(input[i]);
            }
        });

        Measure(context, caseName, "ParallelFor", output, expected, () => Parallel.For(0, input.Length, i => output[i] = Kernel(input[i])));

        // The BCL at its best: ranges of Spindle's batch size, so a delegate call per range, not per element.
        Measure(context, caseName, "ParallelForRanges", output, expected, () => Parallel.ForEach(Partitioner.Create(0, input.Length, BatchSize), range =>
        {
            for (int i = range.Item1; i < range.Item2; i++)
            {
                output[i] = Kernel(input[i]);
            }
        }));

        var job = new KernelJob { Input = input, Output = output };
        Measure(context, caseName, "Spindle", output, expected, () => job.Schedule(input.Length, BatchSize).Complete());
    }

    /// <summary>
    /// Measures one system's <paramref name="compute"/> (each round checks and clears the last element, an O(1) check
    /// every system pays alike), then, untimed, runs it once more into an output filled with NaN and checks every
    /// element, so that a system that skipped part of the range cannot pass.
    /// </summary>
    private static void Measure(BenchContext context, string caseName, string system, float[] output, float[] expected, Action compute)
    {
        float expectedLast = expected[^1];
        context.MeasureOperations(caseName, system, output.Length, () =>
        {
            compute();
            CheckLast(system, output, expectedLast);
        }, "ns_per_element", "bytes_per_op");

        Array.Fill(output, float.NaN);
        compute();
        Check(system, output, expected);
    }

    /// <summary>The per-round check: the last element was computed; it is cleared so that the next round must compute it again.</summary>
    private static void CheckLast(string system, float[] output, float expectedLast)
    {
        if (output[^1] != expectedLast)
        {
            throw new InvalidOperationException($"parallel-for: {system} did not compute the last element.");
        }
        Array.Clear(output, output.Length - 1, 1);
    }

    /// <summary>The full check: every element of <paramref name="output"/> equals <paramref name="expected"/>'s.</summary>
    internal static void Check(string system, float[] output, float[] expected)
    {
        for (int i = 0; i < expected.Length; i++)
        {
            if (output[i] != expected[i])
            {
                throw new InvalidOperationException(
                    $"parallel-for: {system} wrote {output[i]} at index {i} of {expected.Length}, not {expected[i]}: part of the range was not computed.");
            }
        }
    }

    private static float Kernel(float x)
    {
        float p = ((((((0.5f * x + 0.25f) * x - 1.5f) * x + 2f) * x - 0.75f) * x + 1.25f) * x) + 3f;
        return MathF.Sqrt(p * p + 1f);
    }

    private struct KernelJob : IJobParallelFor
    {
        public float[] Input;
        public float[] Output;

        public readonly void Execute(int index) => Output[index] = Kernel(Input[index]);
    }
}

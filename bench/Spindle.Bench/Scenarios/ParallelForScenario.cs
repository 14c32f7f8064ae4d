using System;
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
        "Kernel per element: a degree-6 polynomial by Horner's rule and a square root (13 floating-point operations), reading one float array and " +
        "writing another. Loop: a plain for loop on one thread. ParallelFor: Parallel.For(0, n, i => kernel). Spindle: an IJobParallelFor struct, " +
        $"batches of {BatchSize} indices, Schedule + Complete (the calling thread helps). Every system writes the same results, checked after each round.";

    public override void Run(BenchContext context)
    {
        int n = context.Pick(64 * 1024, 4 * 1024 * 1024, 4 * 1024 * 1024);
        var input = new float[n];
        var output = new float[n];
        for (int i = 0; i < n; i++)
        {
            input[i] = (i % 1000) * 0.001f;
        }
        float expectedLast = Kernel(input[n - 1]);
        string caseName = $"n={n}";

        context.MeasureOperations(caseName, "Loop", n, () =>
        {
            for (int i = 0; i < input.Length; i++)
            {
                output[i] = Kernel(input[i]);
            }
            Check(output, expectedLast);
        }, "ns_per_element", "bytes_per_op");

        context.MeasureOperations(caseName, "ParallelFor", n, () =>
        {
            Parallel.For(0, input.Length, i => output[i] = Kernel(input[i]));
            Check(output, expectedLast);
        }, "ns_per_element", "bytes_per_op");

        var job = new KernelJob { Input = input, Output = output };
        context.MeasureOperations(caseName, "Spindle", n, () =>
        {
            job.Schedule(input.Length, BatchSize).Complete();
            Check(output, expectedLast);
        }, "ns_per_element", "bytes_per_op");
    }

    private static void Check(float[] output, float expectedLast)
    {
        if (output[^1] != expectedLast)
        {
            throw new InvalidOperationException("parallel-for: the last element was not computed.");
        }
        Array.Clear(output, output.Length - 1, 1);
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

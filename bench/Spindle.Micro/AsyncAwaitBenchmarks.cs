using System.Threading.Tasks;
using BenchmarkDotNet.Attributes;
using BenchmarkDotNet.Configs;

using SpindleLib.Bench.Scenarios;

namespace SpindleLib.Micro;

/// <summary>
/// BenchmarkDotNet cross-check of the Spindle.Bench scenario "asyncawait": the same operations, measured by
/// BenchmarkDotNet with the BCL as the baseline and allocations counted on all threads.
/// </summary>
[MemoryDiagnoser]
[GroupBenchmarksBy(BenchmarkLogicalGroupRule.ByCategory)]
[CategoriesColumn]
public class AsyncAwaitBenchmarks
{
    private readonly Promise _promise = new();
    private readonly AwaitSubjects.ResettableValueTaskSource _valueSource = new();

    [BenchmarkCategory("completed"), Benchmark(Baseline = true)]
    public void Completed_Task()
    {
        var tcs = new TaskCompletionSource();
        tcs.SetResult();
        AwaitSubjects.AwaitTask(tcs.Task).GetAwaiter().GetResult();
    }

    [BenchmarkCategory("completed"), Benchmark]
    public void Completed_ValueTask()
    {
        _valueSource.Reset();
        _valueSource.SetResult();
        AwaitSubjects.AwaitValueTask(_valueSource.Task).GetAwaiter().GetResult();
    }

    [BenchmarkCategory("completed"), Benchmark]
    public void Completed_Spindle()
    {
        _promise.Reset();
        _promise.SetResult();
        AwaitSubjects.AwaitSpindle(_promise.Task).GetAwaiter().GetResult();
    }

    [BenchmarkCategory("pending"), Benchmark(Baseline = true)]
    public void Pending_Task()
    {
        var tcs = new TaskCompletionSource();
        Task t = AwaitSubjects.AwaitTask(tcs.Task);
        tcs.SetResult();
        t.GetAwaiter().GetResult();
    }

    [BenchmarkCategory("pending"), Benchmark]
    public void Pending_ValueTask()
    {
        _valueSource.Reset();
        ValueTask t = AwaitSubjects.AwaitValueTask(_valueSource.Task);
        _valueSource.SetResult();
        t.GetAwaiter().GetResult();
    }

    [BenchmarkCategory("pending"), Benchmark]
    public void Pending_Spindle()
    {
        _promise.Reset();
        SpindleTask t = AwaitSubjects.AwaitSpindle(_promise.Task);
        _promise.SetResult();
        t.GetAwaiter().GetResult();
    }
}

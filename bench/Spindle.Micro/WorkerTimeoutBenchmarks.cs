using System;
using System.Threading.Tasks;
using BenchmarkDotNet.Attributes;

namespace SpindleLib.Micro;

/// <summary>
/// A timeout answered in time, as a server's asks meet it: on a Spindle worker, on the system clock. An async method
/// awaits its reply with a 5 s timeout, and the reply comes at once on the same thread, so the timer is armed and then
/// cancelled before it can fire. Spindle's is <c>WithTimeout</c> on <see cref="TimerWheel.Default"/> (the timer goes into
/// the worker's own shard, and the worker takes it out again at once); the BCL's is <c>Task.WaitAsync(TimeSpan)</c> on
/// <see cref="TimeProvider.System"/>; the plain await with no timeout is the floor both add to. Each invocation runs
/// <see cref="Asks"/> asks inside one item on a worker, so the hop to the worker is spread over them.
/// <c>dotnet run -c Release --project bench/Spindle.Micro -- --filter '*WorkerTimeoutBenchmarks*'</c>.
/// </summary>
[MemoryDiagnoser]
public class WorkerTimeoutBenchmarks
{
    /// <summary>The asks one invocation runs on a worker.</summary>
    public const int Asks = 10_000;

    private static readonly TimeSpan Timeout = TimeSpan.FromSeconds(5);

    private readonly Promise<int> _reply = new();
    private readonly Func<int> _plain;
    private readonly Func<int> _spindle;
    private readonly Func<int> _bcl;

    public WorkerTimeoutBenchmarks()
    {
        _plain = () => RunAsks(static reply => AwaitPlain(reply));
        _spindle = () => RunAsks(static reply => AwaitWithTimeout(reply));
        _bcl = RunBclAsks;
    }

    [Benchmark(Baseline = true, OperationsPerInvoke = Asks)]
    public int Task_WaitAsync_OnWorker() => Spindle.Run(_bcl).GetAwaiter().GetResult();

    [Benchmark(OperationsPerInvoke = Asks)]
    public int Spindle_WithTimeout_OnWorker() => Spindle.Run(_spindle).GetAwaiter().GetResult();

    [Benchmark(OperationsPerInvoke = Asks)]
    public int Spindle_NoTimeout_OnWorker() => Spindle.Run(_plain).GetAwaiter().GetResult();

    private int RunAsks(Func<SpindleTask<int>, SpindleTask<int>> ask)
    {
        int sum = 0;
        for (int i = 0; i < Asks; i++)
        {
            _reply.Reset();
            SpindleTask<int> asked = ask(_reply.Task);
            _reply.SetResult(1);
            sum += asked.GetAwaiter().GetResult();
        }
        return sum;
    }

    private static int RunBclAsks()
    {
        int sum = 0;
        for (int i = 0; i < Asks; i++)
        {
            var reply = new TaskCompletionSource<int>();
            Task<int> asked = AwaitWaitAsync(reply.Task);
            reply.SetResult(1);
            sum += asked.GetAwaiter().GetResult();
        }
        return sum;
    }

    private static async SpindleTask<int> AwaitPlain(SpindleTask<int> reply) => await reply;

    private static async SpindleTask<int> AwaitWithTimeout(SpindleTask<int> reply)
    {
        try
        {
            return await reply.WithTimeout(Timeout);
        }
        catch (TimeoutException)
        {
            return -1;
        }
    }

    private static async Task<int> AwaitWaitAsync(Task<int> reply)
    {
        try
        {
            return await reply.WaitAsync(Timeout).ConfigureAwait(false);
        }
        catch (TimeoutException)
        {
            return -1;
        }
    }
}

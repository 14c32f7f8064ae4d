using System;
using System.Collections.Concurrent;
using System.Diagnostics;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Scopes;

/// <summary>
/// Code that starts children for the caller (a <see cref="TaskScope"/>'s <c>Run</c> and <c>RunTask</c>, WhenAny's
/// producers) keeps the BCL's ExecutionContext contract, as <c>Task.Run</c> or a called async method do: each child
/// starts with the AsyncLocal values and <c>Activity.Current</c> of the code that started it, keeps what it sets across
/// its own awaits, and what it sets reaches neither its siblings nor the starting code, before or after the scope's
/// wait. ContextFlowMatrixTests covers the awaits themselves; this covers the starters, with many requests at once.
/// </summary>
public class ChildContextTests
{
    private static readonly AsyncLocal<int> s_request = new();

    private sealed class Failures
    {
        private readonly ConcurrentQueue<string> _seen = new();
        private int _checks;

        public int Checks => Volatile.Read(ref _checks);

        public void Check(int expected, Activity? activity, string where)
        {
            Interlocked.Increment(ref _checks);
            int value = s_request.Value;
            Activity? current = Activity.Current;
            if (value != expected || current != activity)
            {
                _seen.Enqueue($"{where}: expected request {expected}, saw {value}; activity {(current == activity ? "right" : "wrong")}");
            }
        }

        public void AssertNone() => Assert.True(_seen.IsEmpty, string.Join(Environment.NewLine, _seen));
    }

    private static async SpindleTask Request(int id, Failures failures)
    {
        s_request.Value = id;
        using var activity = new Activity("user10 request").Start();
        await using (var scope = new TaskScope(CancellationToken.None))
        {
            for (int c = 0; c < 2; c++)
            {
                int child = -(id * 10 + c);
                scope.Run(async token =>
                {
                    failures.Check(id, activity, "scope child at its start");
                    s_request.Value = child;
                    await Spindle.Delay(1, token);
                    failures.Check(child, activity, "scope child after its await");
                    await Spindle.Yield();
                    failures.Check(child, activity, "scope child after a yield");
                });
                scope.RunTask(async token =>
                {
                    failures.Check(id, activity, "scope Task child at its start");
                    s_request.Value = child - 5;
                    await Task.Delay(1, token);
                    failures.Check(child - 5, activity, "scope Task child after its await");
                });
                failures.Check(id, activity, "starter after Run");
            }
            await scope.WaitAsync();
            failures.Check(id, activity, "starter after WaitAsync");
        }
        failures.Check(id, activity, "starter after the scope's disposal");

        int winner = await SpindleTask.WhenAny(
        [
            async token =>
            {
                failures.Check(id, activity, "WhenAny producer at its start");
                s_request.Value = -1;
                await Spindle.Delay(1, token);
                failures.Check(-1, activity, "WhenAny producer after its await");
            },
            async token =>
            {
                failures.Check(id, activity, "WhenAny producer at its start");
                try
                {
                    await Spindle.Delay(TimeSpan.FromSeconds(30), token);
                }
                catch (OperationCanceledException)
                {
                }
                failures.Check(id, activity, "cancelled WhenAny producer");
            },
        ], CancellationToken.None);
        Assert.Equal(0, winner);
        failures.Check(id, activity, "starter after WhenAny of producers");
    }

    [Fact]
    public async Task ChildrenStartInTheStartersContext_AndWhatTheySetReachesNeitherSiblingsNorTheStarter()
    {
        var failures = new Failures();
        var requests = new Task[500];
        for (int i = 0; i < requests.Length; i++)
        {
            int id = i + 1;
            using (ExecutionContext.SuppressFlow())
            {
                requests[i] = Task.Run(() => Request(id, failures).AsTask());
            }
        }
        await Task.WhenAll(requests).WaitAsync(TimeSpan.FromSeconds(120));
        failures.AssertNone();
        // 14 checks in the scope and 4 around the producers, of which the cancelled producer's last may come later.
        Assert.True(failures.Checks >= requests.Length * 17, $"only {failures.Checks} checks ran");
    }
}

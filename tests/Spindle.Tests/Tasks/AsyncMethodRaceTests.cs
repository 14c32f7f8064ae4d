using System;
using System.Collections.Concurrent;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// Races on async methods' pooled boxes: a box completing on one thread while another registers on it (await, Preserve,
/// Forget, AsTask, AsValueTask); two threads reading the same completed task (exactly one wins, and the box is never
/// handed to two methods); many methods suspended and completed from several threads. Sequential: long races, and
/// UnobservedException is process-wide.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class AsyncMethodRaceTests
{
    private static async SpindleTask<int> Suspends(Promise<int> p, int add) => await p.Task + add;

    private static async SpindleTask SuspendsVoid(Promise<int> p) => await p.Task;

    private sealed class Seen
    {
        public int Runs;
        public int Value;
        public Exception? Error;

        public void Set(Func<int> read)
        {
            try
            {
                Value = read();
            }
            catch (Exception e)
            {
                Error = e;
            }
            Interlocked.Increment(ref Runs);
        }
    }

    [Fact]
    public async Task BoxCompletes_WhileAnotherThreadConsumesIt_EachConsumerRunsOnceWithTheOutcome()
    {
        var made = new ConcurrentQueue<Exception>(); // each round's fault, added before it can be reported
        var watch = UnobservedReports.Start(UnobservedReports.Own.Any(UnobservedReports.Own.InstancesIn(made), UnobservedReports.Own.ReportedOnTestThreads()));
        ConcurrentQueue<Exception> reported = watch.Reports;
        try
        {
            Promise<int> p = null!;
            SpindleTask<int> t = default;
            Seen seen = null!;
            Exception error = null!;
            Task? bridged = null;
            SpindleTask<int> preserved = default;
            int ran = await Race.Run(TestUtil.Stress(3000),
                before: round =>
                {
                    p = new Promise<int>();
                    t = Suspends(p, 1);
                    seen = new Seen();
                    error = new InvalidTimeZoneException("round " + round);
                    made.Enqueue(error);
                    bridged = null;
                },
                after: round =>
                {
                    bool faults = round % 2 == 1;
                    int kind = round / 2 % 5;
                    if (kind == 3)
                    {
                        TestUtil.SpinUntil(() => bridged!.IsCompleted, 10);
                        seen.Set(() => ((Task<int>)bridged!).GetAwaiter().GetResult());
                    }
                    else if (kind == 1)
                    {
                        TestUtil.SpinUntil(() => Volatile.Read(ref seen.Runs) > 0, 10);
                        // a second await of the preserved task sees the same outcome
                        var again = new Seen();
                        again.Set(() => preserved.GetAwaiter().GetResult());
                        Assert.Equal(seen.Value, again.Value);
                        Assert.Same(seen.Error, again.Error);
                    }
                    else if (kind == 2)
                    {
                        TestUtil.SpinUntil(() => !faults || reported.Any(e => ReferenceEquals(e, error)), 10);
                        Assert.Equal(faults ? 1 : 0, reported.Count(e => ReferenceEquals(e, error)));
                        Assert.Equal(faults ? 1 : 0, reported.Count);
                        reported.Clear();
                        return;
                    }
                    TestUtil.SpinUntil(() => Volatile.Read(ref seen.Runs) > 0, 10);
                    Thread.Sleep(0);
                    Assert.Equal(1, Volatile.Read(ref seen.Runs));
                    if (faults)
                    {
                        Assert.Same(error, seen.Error);
                    }
                    else
                    {
                        Assert.Null(seen.Error);
                        Assert.Equal(round + 1, seen.Value);
                    }
                    Assert.Empty(reported);
                },
                round =>
                {
                    if (round % 2 == 1)
                    {
                        p.SetException(error);
                    }
                    else
                    {
                        p.SetResult(round);
                    }
                },
                round =>
                {
                    switch (round / 2 % 5)
                    {
                        case 0:
                        {
                            SpindleTask<int>.Awaiter a = t.GetAwaiter();
                            if (a.IsCompleted)
                            {
                                seen.Set(a.GetResult);
                            }
                            else
                            {
                                a.UnsafeOnCompleted(() => seen.Set(a.GetResult));
                            }
                            break;
                        }
                        case 1:
                        {
                            preserved = t.Preserve();
                            SpindleTask<int>.Awaiter a = preserved.GetAwaiter();
                            if (a.IsCompleted)
                            {
                                seen.Set(a.GetResult);
                            }
                            else
                            {
                                a.OnCompleted(() => seen.Set(a.GetResult));
                            }
                            break;
                        }
                        case 2:
                            t.Forget();
                            break;
                        case 3:
                            bridged = t.AsTask();
                            break;
                        default:
                        {
                            System.Runtime.CompilerServices.ValueTaskAwaiter<int> a = t.AsValueTask().GetAwaiter();
                            if (a.IsCompleted)
                            {
                                seen.Set(a.GetResult);
                            }
                            else
                            {
                                a.UnsafeOnCompleted(() => seen.Set(a.GetResult));
                            }
                            break;
                        }
                    }
                });
            Assert.True(ran > 0);
        }
        finally
        {
            watch.Dispose();
        }
    }

    /// <summary>
    /// Two threads read the same completed task at once (the caller's mistake): exactly one gets the result, the other
    /// the await-once error, and the box goes to the pool once: each thread then runs methods of the same type, whose
    /// boxes come from that pool, and each sees only its own results.
    /// </summary>
    [Fact]
    public async Task TwoThreadsReadTheSameCompletedTask_ExactlyOneWins_AndNoBoxIsHandedOutTwice()
    {
        SpindleTask<int> t = default;
        int wins = 0;
        int errors = 0;
        int mixups = 0;
        Action<int> racer(int me) => round =>
        {
            try
            {
                if (t.GetAwaiter().GetResult() == round + 1)
                {
                    Interlocked.Increment(ref wins);
                }
            }
            catch (InvalidOperationException e) when (e.Message.Contains("Preserve()", StringComparison.Ordinal))
            {
                Interlocked.Increment(ref errors);
            }
            for (int i = 0; i < 4; i++)
            {
                var p = new Promise<int>();
                SpindleTask<int> mine = Suspends(p, 0);
                int expect = me * 1_000_000 + round * 10 + i;
                p.SetResult(expect);
                if (mine.GetAwaiter().GetResult() != expect)
                {
                    Interlocked.Increment(ref mixups);
                }
            }
        };
        int ran = await Race.Run(TestUtil.Stress(3000),
            before: round =>
            {
                var p = new Promise<int>();
                t = Suspends(p, 1);
                p.SetResult(round); // completed, not yet read: its box is still out of the pool
            },
            after: round =>
            {
                Assert.Equal(round + 1, wins);
                Assert.Equal(round + 1, errors);
            },
            racer(1), racer(2));
        Assert.True(ran > 0);
        Assert.Equal(0, mixups);
    }

    /// <summary>
    /// Many methods suspended at once, on promises completed from three threads in a shuffled order, each awaited by a
    /// Spindle method (void and typed): every awaiter runs once with its own method's result.
    /// </summary>
    [Fact]
    public async Task ManyMethodsCompletedFromSeveralThreads_EachAwaiterRunsOnceWithItsOwnResult()
    {
        const int N = 96;
        var rng = new Random(12345);
        for (int round = 0; round < TestUtil.Stress(60); round++)
        {
            var promises = new Promise<int>[N];
            var counts = new int[N];
            var values = new int[N];
            var consumers = new SpindleTask[N];
            for (int i = 0; i < N; i++)
            {
                promises[i] = new Promise<int>();
                consumers[i] = (i % 3) switch
                {
                    0 => Consume(Suspends(promises[i], i), i, counts, values),
                    1 => ConsumeVoid(SuspendsVoid(promises[i]), i, counts, values),
                    _ => Consume(RunSuspends(promises[i], i), i, counts, values),
                };
            }
            int[] order = Enumerable.Range(0, N).OrderBy(_ => rng.Next()).ToArray();
            using var go = new Barrier(3);
            Task[] completers = Enumerable.Range(0, 3).Select(k => TestUtil.RunOnThread(() =>
            {
                go.SignalAndWait();
                for (int j = k; j < N; j += 3)
                {
                    int i = order[j];
                    promises[i].SetResult(1000 + i);
                }
            })).ToArray();
            await TestUtil.WithTimeout(Task.WhenAll(completers));
            await TestUtil.WithTimeout(SpindleTask.WhenAll(consumers).AsTask());
            for (int i = 0; i < N; i++)
            {
                Assert.Equal(1, counts[i]);
                int expect = i % 3 == 1 ? -1 : 1000 + i + i;
                Assert.Equal(expect, values[i]);
            }
        }

        static SpindleTask<int> RunSuspends(Promise<int> p, int i) => Spindle.Run(() => Suspends(p, i));

        static async SpindleTask Consume(SpindleTask<int> t, int i, int[] counts, int[] values)
        {
            values[i] = await t;
            Interlocked.Increment(ref counts[i]);
        }

        static async SpindleTask ConsumeVoid(SpindleTask t, int i, int[] counts, int[] values)
        {
            await t;
            values[i] = -1;
            Interlocked.Increment(ref counts[i]);
        }
    }

    /// <summary>
    /// A forgotten method that suspends on a promise completed by another thread while the test thread forgets it: its
    /// fault is reported exactly once, whichever side wins, and a success never.
    /// </summary>
    [Fact]
    public async Task ForgetRacingCompletion_FaultReportedExactlyOnce()
    {
        var made = new ConcurrentQueue<Exception>(); // each round's fault, added before it can be reported
        var watch = UnobservedReports.Start(UnobservedReports.Own.Any(UnobservedReports.Own.InstancesIn(made), UnobservedReports.Own.ReportedOnTestThreads()));
        ConcurrentQueue<Exception> reported = watch.Reports;
        try
        {
            Promise<int> p = null!;
            SpindleTask t = default;
            Exception error = null!;
            int ran = await Race.Run(TestUtil.Stress(3000),
                before: round =>
                {
                    p = new Promise<int>();
                    t = Wrapper(p, round % 3 == 0);
                    error = new InvalidTimeZoneException("r" + round);
                    made.Enqueue(error);
                },
                after: round =>
                {
                    bool faults = round % 3 != 2;
                    if (faults)
                    {
                        TestUtil.SpinUntil(() => !reported.IsEmpty, 10);
                    }
                    Thread.Sleep(0);
                    Assert.Equal(faults ? 1 : 0, reported.Count);
                    if (faults)
                    {
                        Assert.True(reported.TryDequeue(out Exception? e));
                        Assert.Same(error, e);
                    }
                },
                round =>
                {
                    if (round % 3 != 2)
                    {
                        p.SetException(error);
                    }
                    else
                    {
                        p.SetResult(1);
                    }
                },
                round => t.Forget());
            Assert.True(ran > 0);
        }
        finally
        {
            watch.Dispose();
        }

        static async SpindleTask Wrapper(Promise<int> p, bool typedInner)
        {
            if (typedInner)
            {
                await Suspends(p, 0);
            }
            else
            {
                await p.Task;
            }
        }
    }
}

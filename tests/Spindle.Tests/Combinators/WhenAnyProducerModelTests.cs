using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using CsCheck;
using static SpindleLib.Tests.Combinators.CombinatorTestSupport;
using static SpindleLib.Tests.UnobservedReports;

namespace SpindleLib.Tests.Combinators;

/// <summary>
/// WhenAny over producers, against a model of its documented contract (CsCheck programs, shrunk on failure): producers
/// called in order until the race is decided; the first to finish wins (its result or its own exception); the token
/// handed to the producers is cancelled once the race is decided if some producer is still running, and then each
/// producer still registered on it sees exactly one cancellation, the winner none; a producer that throws counts as an
/// input that failed at once; losers' faults, other than the cancellation they answer with, are reported once; the
/// caller's token cancels the wait with an exception carrying that token. Producers can re-enter: cancel the caller's
/// token, or complete an earlier producer, from inside their own call. Plus a threaded race of completions and the
/// caller's cancellation, checked for exactly one outcome and per-producer cancellation counts.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class WhenAnyProducerModelTests
{
    private enum Behavior
    {
        SyncOk,
        SyncThrow,
        SyncFaulted,
        Coop,             // pending; answers the token with OperationCanceledException
        CoopFault,        // pending; answers the token with a fault of its own
        Stubborn,         // pending; ignores the token
        CancelCaller,     // cancels the caller's token from inside its call, then returns a Coop wait
        ResolveEarlier,   // completes the first earlier producer still running from inside its call, then returns a Coop wait
    }

    private enum EventKind
    {
        FinishOk,
        FinishFail,
        CancelCaller,
    }

    private readonly record struct Ev(EventKind Kind, int Producer)
    {
        public override string ToString() => Kind == EventKind.CancelCaller ? "CancelCaller" : $"{Kind}(#{Producer})";
    }

    private sealed record Program(Behavior[] Producers, Ev[] Events)
    {
        public override string ToString() => $"[{string.Join(", ", Producers)}] then [{string.Join(", ", Events)}]";
    }

    private static readonly Gen<Behavior> Behaviors = Gen.Frequency(
        (2, Gen.Const(Behavior.SyncOk)),
        (1, Gen.Const(Behavior.SyncThrow)),
        (1, Gen.Const(Behavior.SyncFaulted)),
        (4, Gen.Const(Behavior.Coop)),
        (2, Gen.Const(Behavior.CoopFault)),
        (2, Gen.Const(Behavior.Stubborn)),
        (1, Gen.Const(Behavior.CancelCaller)),
        (1, Gen.Const(Behavior.ResolveEarlier)));

    private static readonly Gen<Ev> Events = Gen.Frequency(
        (4, Gen.Int[0, 5].Select(static i => new Ev(EventKind.FinishOk, i))),
        (3, Gen.Int[0, 5].Select(static i => new Ev(EventKind.FinishFail, i))),
        (1, Gen.Const(new Ev(EventKind.CancelCaller, 0))));

    private static readonly Gen<Program> Programs =
        Gen.Select(Behaviors.Array[1, 6], Events.Array[0, 8], static (p, e) => new Program(p, e));

    [Fact]
    public void RandomPrograms_MatchTheModel()
        => Programs.Sample(Run, iter: TestUtil.Stress(3000), threads: 1, print: static p => p.ToString());

    /// <summary>The state of one producer in the real run.</summary>
    private sealed class P
    {
        public Behavior B;
        public bool Called;
        public bool Pending;            // returned a pending task that has not finished
        public bool Ended;              // its task has finished (or it finished synchronously)
        public Promise Gate = new();
        public int Callbacks;           // how many times the token callback it registered ran
        public bool Registered;         // registered on the token, not yet unregistered
        public Exception? Fault;        // the fault it finished with, if any
    }

    /// <summary>The model: what the contract says happens, from the same program.</summary>
    private sealed class Model
    {
        private readonly Behavior[] _b;
        public readonly bool[] Called;
        public readonly bool[] Ended;
        public readonly int[] Callbacks;
        public readonly bool[] Reported;
        public int Winner = -1;          // -1 undecided; int.MaxValue: the caller's token
        public bool WinnerFaulted;
        public bool TokenCancelled;

        public Model(Behavior[] b)
        {
            _b = b;
            Called = new bool[b.Length];
            Ended = new bool[b.Length];
            Callbacks = new int[b.Length];
            Reported = new bool[b.Length];
        }

        private bool Running(int j) => Called[j] && !Ended[j];

        private void CancelToken()
        {
            if (TokenCancelled)
            {
                return;
            }
            TokenCancelled = true;
            for (int j = 0; j < _b.Length; j++)
            {
                if (Running(j))
                {
                    Callbacks[j]++;
                    if (_b[j] != Behavior.Stubborn)
                    {
                        Ended[j] = true; // answers the token; a loser, as the race is decided
                        if (_b[j] == Behavior.CoopFault)
                        {
                            Reported[j] = true;
                        }
                    }
                }
            }
        }

        /// <summary>Producer j's task finished now.</summary>
        public void Finish(int j, bool faulted)
        {
            Ended[j] = true;
            if (Winner == -1)
            {
                Winner = j;
                WinnerFaulted = faulted;
                bool othersRunning = false;
                for (int k = 0; k < _b.Length; k++)
                {
                    othersRunning |= Running(k);
                }
                if (othersRunning)
                {
                    CancelToken();
                }
            }
            else if (faulted)
            {
                Reported[j] = true;
            }
        }

        public void CancelCaller()
        {
            if (Winner == -1)
            {
                Winner = int.MaxValue;
                CancelToken();
            }
        }

        public void Start(int n)
        {
            for (int i = 0; i < n && Winner == -1; i++)
            {
                Called[i] = true;
                switch (_b[i])
                {
                    case Behavior.SyncOk:
                        Finish(i, false);
                        break;
                    case Behavior.SyncThrow:
                    case Behavior.SyncFaulted:
                        Finish(i, true);
                        break;
                    case Behavior.CancelCaller:
                        CancelCaller(); // counts this producer as running: it registers on a cancelled token
                        break;
                    case Behavior.ResolveEarlier:
                        for (int j = 0; j < i; j++)
                        {
                            if (Running(j))
                            {
                                Finish(j, false);
                                break;
                            }
                        }
                        break;
                }
                if (TokenCancelled && Running(i) && _b[i] != Behavior.Stubborn && !Ended[i])
                {
                    // Not reached: CancelToken ended it. Kept for clarity.
                    Ended[i] = true;
                }
            }
        }

        public void Event(Ev ev, int n)
        {
            if (ev.Kind == EventKind.CancelCaller)
            {
                CancelCaller();
                return;
            }
            int j = ev.Producer % n;
            if (Running(j))
            {
                Finish(j, ev.Kind == EventKind.FinishFail);
            }
        }

        public void FinishAll()
        {
            for (int j = 0; j < _b.Length; j++)
            {
                if (Running(j))
                {
                    Finish(j, false);
                }
            }
        }
    }

    private static void Run(Program program)
    {
        int n = program.Producers.Length;
        var ps = program.Producers.Select(static b => new P { B = b }).ToArray();
        using var caller = new CancellationTokenSource();
        CancellationToken producerToken = default;
        var model = new Model(program.Producers);

        async SpindleTask PendingBody(int i, CancellationToken ct)
        {
            P p = ps[i];
            bool cooperative = p.B != Behavior.Stubborn;
            try
            {
                using (ct.Register(() =>
                {
                    p.Callbacks++;
                    if (cooperative)
                    {
                        p.Gate.TrySetCanceled(ct);
                    }
                }))
                {
                    p.Registered = true;
                    try
                    {
                        await p.Gate.Task;
                    }
                    catch (OperationCanceledException) when (p.B == Behavior.CoopFault)
                    {
                        throw p.Fault = new InvalidOperationException($"producer {i} faulted on cancellation");
                    }
                    finally
                    {
                        p.Registered = false;
                    }
                }
            }
            finally
            {
                p.Ended = true;
                p.Pending = false;
            }
        }

        var producers = new Func<CancellationToken, SpindleTask>[n];
        for (int i = 0; i < n; i++)
        {
            int pIndex = i;
            producers[i] = ct =>
            {
                producerToken = ct;
                int index = pIndex;
                P p = ps[index];
                p.Called = true;
                switch (p.B)
                {
                    case Behavior.SyncOk:
                        p.Ended = true;
                        return SpindleTask.CompletedTask;
                    case Behavior.SyncThrow:
                        p.Ended = true;
                        throw p.Fault = new InvalidOperationException($"producer {index} threw");
                    case Behavior.SyncFaulted:
                        p.Ended = true;
                        return SpindleTask.FromException(p.Fault = new InvalidOperationException($"producer {index} faulted"));
                    case Behavior.CancelCaller:
                        caller.Cancel();
                        break;
                    case Behavior.ResolveEarlier:
                        for (int j = 0; j < index; j++)
                        {
                            if (ps[j].Pending && !ps[j].Ended)
                            {
                                ps[j].Gate.TrySetResult();
                                break;
                            }
                        }
                        break;
                }
                p.Pending = true;
                return PendingBody(index, ct);
            };
        }

        void Compare(string at)
        {
            for (int i = 0; i < n; i++)
            {
                Assert.True(ps[i].Called == model.Called[i], $"{at}: producer #{i} was {(ps[i].Called ? "" : "not ")}called; the model says the opposite");
                Assert.True(ps[i].Ended == (model.Ended[i] || !model.Called[i]) || !ps[i].Called, $"{at}: producer #{i} has {(ps[i].Ended ? "" : "not ")}ended; the model says the opposite");
                Assert.True(ps[i].Callbacks == model.Callbacks[i], $"{at}: producer #{i} saw {ps[i].Callbacks} cancellations of its token; the model says {model.Callbacks[i]}");
            }
            bool cancelled = producerToken.IsCancellationRequested;
            Assert.True(cancelled == model.TokenCancelled, $"{at}: the producers' token is {(cancelled ? "" : "not ")}cancelled; the model says the opposite");
        }

        SpindleTask<int> any = default;
        // The producers' faults, and whatever else this case's own calls report inline (which the last check refuses).
        ConcurrentQueue<Exception> reported = Observe(Own.Any(e => ps.Any(p => ReferenceEquals(p.Fault, e)), Own.ReportedOnTestThreads()), () =>
        {
            any = SpindleTask.WhenAny(producers, caller.Token);
            model.Start(n);
            Compare("after WhenAny returned");
            for (int e = 0; e < program.Events.Length; e++)
            {
                Ev ev = program.Events[e];
                if (ev.Kind == EventKind.CancelCaller)
                {
                    caller.Cancel();
                }
                else
                {
                    P p = ps[ev.Producer % n];
                    if (p.Pending && !p.Ended)
                    {
                        if (ev.Kind == EventKind.FinishOk)
                        {
                            p.Gate.TrySetResult();
                        }
                        else
                        {
                            p.Gate.TrySetException(p.Fault = new InvalidOperationException($"producer {ev.Producer % n} failed"));
                        }
                    }
                }
                model.Event(ev, n);
                Compare($"after event {e} ({ev})");
                Assert.True(any.IsCompleted == (model.Winner != -1), $"after event {e} ({ev}): the combined task is {(any.IsCompleted ? "" : "not ")}complete; the model says the opposite");
            }
            // Let every producer still running finish, so that every loser is read.
            foreach (P p in ps)
            {
                if (p.Pending && !p.Ended)
                {
                    p.Gate.TrySetResult();
                }
            }
            model.FinishAll();
            Compare("after every producer finished");
        });

        for (int i = 0; i < n; i++)
        {
            Assert.False(ps[i].Registered, $"producer #{i} is still registered on the token");
        }
        Assert.True(any.IsCompleted, "the combined task did not complete with every producer finished");
        Exception? thrown = null;
        int index = -1;
        try
        {
            index = any.GetAwaiter().GetResult();
        }
        catch (Exception e)
        {
            thrown = e;
        }

        if (model.Winner == int.MaxValue)
        {
            var oce = Assert.IsAssignableFrom<OperationCanceledException>(thrown);
            Assert.True(oce.CancellationToken == caller.Token, "the cancelled wait carries another token than the caller's");
        }
        else if (model.WinnerFaulted)
        {
            Assert.True(thrown is not null && ReferenceEquals(thrown, ps[model.Winner].Fault),
                $"the winner #{model.Winner} faulted, but the wait threw {thrown?.GetType().Name}: {thrown?.Message} (returned {index})");
        }
        else
        {
            Assert.True(thrown is null && index == model.Winner, $"the winner is #{model.Winner}, but the wait returned {index} / threw {thrown}");
        }

        // Exactly the losers' own faults are reported, each once.
        var reportedList = reported.ToList();
        for (int i = 0; i < n; i++)
        {
            int times = ps[i].Fault is { } f ? reportedList.Count(r => ReferenceEquals(r, f)) : 0;
            Assert.True(times == (model.Reported[i] ? 1 : 0), $"producer #{i}'s fault was reported {times} times; the model says {(model.Reported[i] ? 1 : 0)}");
        }
        Assert.True(reportedList.All(r => ps.Any(p => ReferenceEquals(p.Fault, r))), $"reported something no producer threw: {string.Join("; ", reportedList)}");
    }

    private static bool IsSync(Behavior b) => b is Behavior.SyncOk or Behavior.SyncThrow or Behavior.SyncFaulted;

    // ---- Threaded races -------------------------------------------------------------------------------------------

    /// <summary>
    /// Producers finish on other threads while the caller's token is cancelled from yet another: exactly one outcome;
    /// the winner never sees the cancellation; every producer sees it at most once; a cancelled wait carries the caller's
    /// token; nothing but the losers' own faults is reported, and each of those once.
    /// </summary>
    [Fact]
    public async Task Race_CompletionsAndTheCallersCancellation_ExactlyOneOutcome()
    {
        int rounds = TestUtil.Stress(3000);
        const int N = 4;
        var stats = new int[3];
        var made = new ConcurrentQueue<Exception>(); // each round's fault 0, added before it is set
        ConcurrentQueue<Exception> reported = await ObserveAsync(Own.Any(Own.InstancesIn(made), Own.ReportedOnTestThreads()), async reportedSoFar =>
        {
            for (int round = 0; round < rounds; round++)
            {
                var gates = new Promise[N];
                var callbacks = new int[N];
                var faults = new Exception?[N];
                var ended = new int[N];
                for (int i = 0; i < N; i++)
                {
                    gates[i] = new Promise();
                }
                using var caller = new CancellationTokenSource();
                async SpindleTask Body(int i, CancellationToken ct)
                {
                    try
                    {
                        using (ct.Register(() =>
                        {
                            Interlocked.Increment(ref callbacks[i]);
                            gates[i].TrySetCanceled(ct);
                        }))
                        {
                            await gates[i].Task;
                        }
                    }
                    finally
                    {
                        Volatile.Write(ref ended[i], 1);
                    }
                }
                var producers = new Func<CancellationToken, SpindleTask>[N];
                for (int i = 0; i < N; i++)
                {
                    int pIndex = i;
                    producers[i] = ct => Body(pIndex, ct);
                }
                SpindleTask<int> any = SpindleTask.WhenAny(producers, caller.Token);
                int seed = round;
                using var go = new ManualResetEventSlim(false);
                var threads = new Task[3];
                threads[0] = TestUtil.RunOnThread(() =>
                {
                    go.Wait();
                    if (seed % 3 == 0)
                    {
                        gates[0].TrySetResult();
                    }
                    else
                    {
                        faults[0] = new InvalidOperationException("fault 0 round " + seed);
                        made.Enqueue(faults[0]!);
                        gates[0].TrySetException(faults[0]!);
                    }
                });
                threads[1] = TestUtil.RunOnThread(() =>
                {
                    go.Wait();
                    gates[1 + (seed % 3)].TrySetResult();
                });
                threads[2] = TestUtil.RunOnThread(() =>
                {
                    go.Wait();
                    if (seed % 2 == 0)
                    {
                        caller.Cancel();
                    }
                });
                go.Set();
                await Task.WhenAll(threads);
                Exception? thrown = null;
                int index = -1;
                try
                {
                    index = await any;
                }
                catch (Exception e)
                {
                    thrown = e;
                }
                for (int i = 0; i < N; i++)
                {
                    gates[i].TrySetResult();
                    Assert.True(Volatile.Read(ref ended[i]) == 1, $"round {round}: producer {i} never ended");
                    Assert.True(callbacks[i] <= 1, $"round {round}: producer {i} saw {callbacks[i]} cancellations");
                }
                if (thrown is OperationCanceledException oce && !ReferenceEquals(thrown, faults[0]))
                {
                    stats[2]++;
                    Assert.True(oce.CancellationToken == caller.Token, $"round {round}: the exception carries another token than the caller's");
                    Assert.True(caller.IsCancellationRequested);
                }
                else
                {
                    int w = thrown is null ? index : ReferenceEquals(thrown, faults[0]) ? 0 : -1;
                    Assert.True(w >= 0, $"round {round}: unexpected outcome {thrown}");
                    stats[w == 0 ? 0 : 1]++;
                    Assert.True(callbacks[w] == 0, $"round {round}: the winner #{w} saw the token's cancellation");
                    // Every other producer was running when the race was decided (only threads 0 and 1 finish any):
                    // each saw the cancellation exactly once.
                    for (int i = 0; i < N; i++)
                    {
                        if (i != w && i != 0 && i != 1 + (seed % 3))
                        {
                            Assert.True(callbacks[i] == 1, $"round {round}: loser #{i} saw {callbacks[i]} cancellations, expected one");
                        }
                    }
                }
                // The fault of producer 0, if it lost, is reported once; nothing else is.
                if (faults[0] is { } f && !ReferenceEquals(f, thrown))
                {
                    // Was it finished by its fault (not cancelled first)? Then it must be reported.
                    // Either way, it is never reported twice.
                    Assert.True(reportedSoFar.Count(r => ReferenceEquals(r, f)) <= 1, $"round {round}: fault reported twice");
                }
            }
        });
        foreach (Exception r in reported)
        {
            Assert.IsType<InvalidOperationException>(r);
            Assert.StartsWith("fault 0", r.Message);
        }
        Assert.True(stats[0] + stats[1] + stats[2] == rounds);
    }
}

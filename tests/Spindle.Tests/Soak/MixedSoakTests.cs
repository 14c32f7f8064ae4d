using System;
using System.Collections.Concurrent;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Soak;

/// <summary>
/// Every part of Spindle at once, as an application uses them: hundreds of async sessions on the workers, each doing a
/// random mix of signal waits (set by a dedicated thread; timed, cancelled, raced in a WhenAny), delays (some cancelled),
/// <c>Spindle.Run</c> in its forms, WhenAll (aggregating, with failures), WhenAny that cancels its losers, reused
/// promises, WithTimeout and WithCancellation, periodic timers, job chains and parallel-fors, hops onto a running frame
/// loop (frames, loop-time delays, predicates) and back, the BCL bridges, task scopes whose children fail, preserved
/// tasks and forgotten faults. Each feature has its own stress
/// test; this one looks for what only their interaction can break. Each operation checks its own outcome; at the end,
/// every count must match what the sessions expected (nothing lost, nothing run twice), every session's AsyncLocal must
/// have flowed through every await, each forgotten fault must have been reported once, and nothing may stay in the
/// timer wheels. No timing is asserted: delays are real, but only their outcomes are checked.
/// </summary>
[Collection(SequentialCollection.Name)] // counts the process-wide UnobservedException reports of its own fault type
public sealed class MixedSoakTests
{
    private const int Operations = 20;

    private static readonly AsyncLocal<int> s_session = new();

    /// <summary>The fault the sessions raise on purpose: counted by type, so no other test's exception counts.</summary>
    private sealed class SoakFault(int session) : Exception("soak fault of session " + session);

    private struct CountJob : IJob
    {
        public StrongBox<long> Counter;

        public void Execute() => Interlocked.Increment(ref Counter.Value);
    }

    private struct CountEach : IJobParallelFor
    {
        public StrongBox<long> Counter;

        public void Execute(int index) => Interlocked.Increment(ref Counter.Value);
    }

    private sealed class StrongBox<T>
    {
        public T Value = default!;
    }

    /// <summary>What the sessions did and what they expect; compared with what happened at the end.</summary>
    private sealed class Ledger
    {
        public readonly long[] Done = new long[Operations];
        public int[] Current = [];
        public readonly ConcurrentQueue<string> Errors = new();
        public readonly StrongBox<long> JobRuns = new();
        public long JobsExpected;
        public long ForgottenFaults;
        public long ChildrenRun;
        public long ChildrenExpected;

        public void Check(bool condition, int session, string what)
        {
            if (!condition)
            {
                Errors.Enqueue("session " + session + ": " + what);
            }
        }
    }

    private sealed class Session(int id, Ledger ledger, FrameLoop loop, ConcurrentQueue<Signal> toSet)
    {
        private readonly Signal _inbox = new();
        private readonly Promise<int> _reply = new();
        private readonly Random _random = new(id * 7919 + 17);

        public async SpindleTask Run(int iterations)
        {
            await Spindle.SwitchToWorker();
            s_session.Value = id;
            for (int i = 0; i < iterations; i++)
            {
                int op = _random.Next(Operations);
                Volatile.Write(ref ledger.Current[id], op);
                try
                {
                    await Step(op);
                }
                catch (Exception e)
                {
                    ledger.Errors.Enqueue("session " + id + ", operation " + op + ": unexpected " + e);
                }
                ledger.Check(s_session.Value == id, id, "AsyncLocal lost after operation " + op + " (" + s_session.Value + ")");
                Interlocked.Increment(ref ledger.Done[op]);
            }
            Volatile.Write(ref ledger.Current[id], -1);
        }

        private async SpindleTask Step(int op)
        {
            switch (op)
            {
                case 0: // a signal set by the signaller thread, before or after the wait starts
                    toSet.Enqueue(_inbox);
                    await _inbox.WaitAsync();
                    break;
                case 1: // a timed wait nobody sets: it times out, and the signal stays idle
                    ledger.Check(!await _inbox.WaitAsync(TimeSpan.FromMilliseconds(_random.Next(0, 3))), id, "a timed wait took a set nobody made");
                    ledger.Check(!_inbox.IsSet && !_inbox.HasWaiter, id, "the signal is not idle after a timed wait");
                    break;
                case 2: // a delay, or a long one cancelled from a worker
                    if (_random.Next(2) == 0)
                    {
                        await Spindle.Delay(_random.Next(0, 4));
                    }
                    else
                    {
                        using var cts = new CancellationTokenSource();
                        SpindleTask delay = Spindle.Delay(TimeSpan.FromMinutes(5), cts.Token);
                        Spindle.Run(cts.Cancel).Forget();
                        await ExpectCanceled(delay, "a cancelled delay");
                    }
                    break;
                case 3: // Spindle.Run of a function, and of an async function that yields
                    int x = _random.Next(1000);
                    ledger.Check(await Spindle.Run(() => x * 2) == x * 2, id, "Spindle.Run returned another result");
                    ledger.Check(await Spindle.Run(async () => { await Spindle.Yield(); return x + 1; }) == x + 1, id, "an async Spindle.Run returned another result");
                    break;
                case 4: // WhenAll, aggregating, over mixed inputs, some of which fail
                    await WhenAllStep();
                    break;
                case 5: // WhenAny that cancels its losers: one quick producer, the others long delays
                    int winner = _random.Next(3);
                    int index = await SpindleTask.WhenAny(
                    [
                        ct => winner == 0 ? Spindle.Run(() => { }) : Spindle.Delay(TimeSpan.FromMinutes(5), ct),
                        ct => winner == 1 ? Spindle.Run(() => { }) : Spindle.Delay(TimeSpan.FromMinutes(5), ct),
                        ct => winner == 2 ? Spindle.Run(() => { }) : Spindle.Delay(TimeSpan.FromMinutes(5), ct),
                    ], default);
                    ledger.Check(index == winner, id, "WhenAny chose input " + index + ", not " + winner);
                    break;
                case 6: // a chain of jobs, awaited
                    var job = new CountJob { Counter = ledger.JobRuns };
                    int length = _random.Next(1, 5);
                    JobHandle handle = default;
                    for (int k = 0; k < length; k++)
                    {
                        handle = job.Schedule(handle);
                    }
                    Interlocked.Add(ref ledger.JobsExpected, length);
                    await handle;
                    break;
                case 7: // onto the frame loop, a frame or two there, and back to the workers
                    await Spindle.SwitchTo(loop);
                    ledger.Check(loop.IsLoopThread, id, "SwitchTo(loop) resumed off the loop thread");
                    long frame = loop.FrameCount;
                    await (_random.Next(2) == 0 ? loop.NextFrame() : loop.DelayFrame(2));
                    ledger.Check(loop.IsLoopThread && loop.FrameCount > frame, id, "a frame wait resumed off the loop or in the same frame");
                    await Spindle.SwitchToWorker();
                    ledger.Check(!loop.IsLoopThread, id, "SwitchToWorker stayed on the loop thread");
                    break;
                case 8: // a scope whose children may fail: the first failure cancels the rest, and comes out at disposal
                    await ScopeStep();
                    break;
                case 9: // a preserved task, awaited twice
                    SpindleTask<int> preserved = Spindle.Run(async () => { await Spindle.Delay(_random.Next(0, 2)); return id; }).Preserve();
                    ledger.Check(await preserved == id && await preserved == id, id, "a preserved task read another result");
                    break;
                case 10: // a forgotten fault, reported through UnobservedException
                    Interlocked.Increment(ref ledger.ForgottenFaults);
                    FailAfterYield(id).Forget();
                    break;
                case 11: // a signal's wait racing a delay in a WhenAny: a set the losing wait took is given back, never lost
                    toSet.Enqueue(_inbox);
                    if (await SpindleTask.WhenAny([_inbox.WaitAsync(), Spindle.Delay(_random.Next(0, 3))]) == 1)
                    {
                        ledger.Check(!_inbox.HasWaiter, id, "a WhenAny left its losing signal wait behind");
                        await _inbox.WaitAsync(); // the delay won: this round's set is kept by the signal, or still to come
                    }
                    break;
                case 12: // a reused promise, completed from a worker
                    _reply.Reset();
                    int value = _random.Next();
                    Spindle.Run(() => _reply.SetResult(value)).Forget();
                    ledger.Check(await _reply.Task == value, id, "a reset promise gave another use's result");
                    break;
                case 13: // WithTimeout: a long delay times out; a quick run does not
                    try
                    {
                        await Spindle.Delay(TimeSpan.FromMinutes(5)).WithTimeout(TimeSpan.FromMilliseconds(_random.Next(0, 3)));
                        ledger.Check(false, id, "a 5-minute delay beat a timeout of a few milliseconds");
                    }
                    catch (TimeoutException)
                    {
                    }
                    ledger.Check(await Spindle.Run(() => id).WithTimeout(TimeSpan.FromMinutes(5)) == id, id, "WithTimeout changed a result");
                    break;
                case 14: // WithCancellation of a pending promise, cancelled from a worker: the promise stays usable
                    _reply.Reset();
                    using (var cts = new CancellationTokenSource())
                    {
                        SpindleTask<int> bounded = _reply.Task.WithCancellation(cts.Token);
                        Spindle.Run(cts.Cancel).Forget();
                        await ExpectCanceled(bounded, "a cancelled WithCancellation");
                    }
                    _reply.Reset();
                    _reply.SetResult(id);
                    ledger.Check(await _reply.Task == id, id, "a promise let go of by WithCancellation did not work again");
                    break;
                case 15: // a periodic timer's ticks, then disposal
                    using (var timer = new SpindlePeriodicTimer(TimeSpan.FromMilliseconds(1), TimerWheel.Default))
                    {
                        ledger.Check(await timer.WaitForNextTickAsync() && await timer.WaitForNextTickAsync(), id, "a periodic timer stopped ticking");
                    }
                    break;
                case 16: // loop time and a predicate on the frame loop, then back
                    await Spindle.SwitchTo(loop);
                    long start = loop.FrameCount;
                    await loop.Delay(TimeSpan.FromMilliseconds(_random.Next(0, 3)));
                    await loop.WaitUntil((loop, start), static s => s.loop.FrameCount >= s.start + 2);
                    ledger.Check(loop.IsLoopThread && loop.FrameCount >= start + 2, id, "WaitUntil resumed before its predicate held, or off the loop");
                    await Spindle.SwitchToWorker();
                    break;
                case 17: // the BCL bridges: AsTask and AsValueTask awaited inside a Spindle method
                    ledger.Check(await Spindle.Run(() => id).AsTask() == id, id, "AsTask changed a result");
                    ledger.Check(await Spindle.Run(async () => { await Spindle.Yield(); return id; }).AsValueTask() == id, id, "AsValueTask changed a result");
                    break;
                case 18: // a parallel-for, awaited
                    int indices = _random.Next(1, 200);
                    Interlocked.Add(ref ledger.JobsExpected, indices);
                    await new CountEach { Counter = ledger.JobRuns }.Schedule(indices, _random.Next(1, 16));
                    break;
                case 19: // a signal wait cancelled from a worker: the signal is idle after it, and the next set is not lost
                    using (var cts = new CancellationTokenSource())
                    {
                        SpindleTask wait = _inbox.WaitAsync(cts.Token);
                        Spindle.Run(cts.Cancel).Forget();
                        try
                        {
                            await wait;
                            ledger.Check(false, id, "a cancelled signal wait completed without a set");
                        }
                        catch (OperationCanceledException)
                        {
                        }
                    }
                    ledger.Check(!_inbox.HasWaiter && !_inbox.IsSet, id, "a cancelled wait left its signal waited on, or set");
                    toSet.Enqueue(_inbox);
                    await _inbox.WaitAsync();
                    break;
            }
        }

        private async SpindleTask WhenAllStep()
        {
            int count = _random.Next(2, 7);
            var inputs = new SpindleTask[count];
            int faults = 0;
            var promise = new Promise();
            SpindleTask shared = promise.Task.Preserve(); // read by several of the inputs' slots
            for (int k = 0; k < count; k++)
            {
                int kind = _random.Next(4);
                if (kind == 3 && faults == 0 && _random.Next(2) == 0)
                {
                    faults++;
                    inputs[k] = Spindle.Run(new Action(() => throw new SoakFault(id)));
                }
                else
                {
                    inputs[k] = kind switch
                    {
                        0 => Spindle.Run(() => { }),
                        1 => Spindle.Delay(_random.Next(0, 3)),
                        2 => shared,
                        _ => Spindle.Run(async () => await Spindle.Yield()),
                    };
                }
            }
            Spindle.Run(promise.SetResult).Forget();
            try
            {
                await SpindleTask.WhenAll(inputs, new WhenAllOptions { AggregateExceptions = true }, default);
                ledger.Check(faults == 0, id, "WhenAll succeeded over a failed input");
            }
            catch (AggregateException e)
            {
                ledger.Check(faults == 1 && e.InnerExceptions.Count == 1 && e.InnerExceptions[0] is SoakFault, id, "WhenAll's aggregate holds " + e.InnerExceptions.Count + " exceptions, not " + faults);
            }
        }

        private async SpindleTask ScopeStep()
        {
            int children = _random.Next(1, 5);
            int failing = _random.Next(children + 1) - 1; // -1: none fails
            var scope = new TaskScope();
            for (int k = 0; k < children; k++)
            {
                bool fails = k == failing;
                Interlocked.Increment(ref ledger.ChildrenExpected);
                scope.Run(async ct =>
                {
                    Interlocked.Increment(ref ledger.ChildrenRun);
                    ledger.Check(s_session.Value == id, id, "a scope's child did not inherit the session's AsyncLocal");
                    if (fails)
                    {
                        await Spindle.Yield();
                        throw new SoakFault(id);
                    }
                    try
                    {
                        await Spindle.Delay(TimeSpan.FromMilliseconds(_random.Next(0, 3)), ct);
                    }
                    catch (OperationCanceledException) when (ct.IsCancellationRequested)
                    {
                        // a sibling failed first: the scope cancelled this child, as it must
                    }
                });
            }
            try
            {
                await scope.DisposeAsync();
                ledger.Check(failing < 0, id, "a scope with a failed child completed successfully");
            }
            catch (SoakFault)
            {
                ledger.Check(failing >= 0, id, "a scope with no failing child failed");
            }
        }

        private SpindleTask ExpectCanceled<T>(SpindleTask<T> task, string what) => ExpectCanceled(task.AsSpindleTask(), what);

        private async SpindleTask ExpectCanceled(SpindleTask task, string what)
        {
            try
            {
                await task;
                ledger.Check(false, id, what + " completed successfully");
            }
            catch (OperationCanceledException)
            {
            }
        }

        private static async SpindleTask FailAfterYield(int session)
        {
            await Spindle.Yield();
            throw new SoakFault(session);
        }
    }

    [Fact]
    public async Task ManySessions_MixingEveryFeature_LoseAndRepeatNothing()
    {
        int sessions = TestUtil.Stress(400);
        const int Iterations = 60;
        var ledger = new Ledger { Current = new int[sessions] };
        long reported = 0;
        void OnUnobserved(Exception e)
        {
            if (e is SoakFault)
            {
                Interlocked.Increment(ref reported);
            }
        }

        long timersBefore = TimerWheel.Default.PendingCount;
        var loop = new FrameLoop();
        using var stop = new CancellationTokenSource();
        Task loopRun = loop.Run(1000, stop.Token);
        var toSet = new ConcurrentQueue<Signal>();
        Task signaller = TestUtil.RunOnThread(() =>
        {
            while (!stop.IsCancellationRequested)
            {
                if (toSet.TryDequeue(out Signal? signal))
                {
                    signal.Set();
                }
                else
                {
                    Thread.Yield();
                }
            }
        }, "soak signaller");

        Spindle.UnobservedException += OnUnobserved;
        try
        {
            SpindleTask[] running = Enumerable.Range(0, sessions)
                .Select(i => new Session(i, ledger, loop, toSet).Run(Iterations))
                .ToArray();
            try
            {
                await TestUtil.WithTimeout(SpindleTask.WhenAll(running), TestUtil.StressTimeout(120));
            }
            catch (TimeoutException)
            {
                var stuck = ledger.Current.Select((op, session) => (op, session)).Where(p => p.op >= 0).ToArray();
                throw new TimeoutException(stuck.Length + " sessions did not finish; (session, operation): "
                    + string.Join(", ", stuck.Take(20).Select(p => "(" + p.session + ", " + p.op + ")"))
                    + "; errors so far: " + string.Join(" | ", ledger.Errors.Take(5)));
            }

            Assert.Empty(ledger.Errors);
            Assert.Equal((long)sessions * Iterations, ledger.Done.Sum());
            Assert.All(ledger.Done, n => Assert.True(n > 0, "an operation never ran: the mix is not what it claims"));
            Assert.Equal(Volatile.Read(ref ledger.JobsExpected), Volatile.Read(ref ledger.JobRuns.Value));
            Assert.Equal(ledger.ChildrenExpected, Volatile.Read(ref ledger.ChildrenRun));
            Assert.True(
                TestUtil.PollHelping(() => Volatile.Read(ref reported) >= ledger.ForgottenFaults, TimeSpan.FromSeconds(TestUtil.StressTimeout(30))),
                "forgotten faults reported: " + reported + " of " + ledger.ForgottenFaults);
            Assert.Equal(ledger.ForgottenFaults, Volatile.Read(ref reported)); // once each, never twice
            // Every delay fired or was cancelled, and WhenAny's losers were cancelled: nothing stays in the wheels.
            Assert.True(
                TestUtil.PollHelping(() => TimerWheel.Default.PendingCount <= timersBefore, TimeSpan.FromSeconds(TestUtil.StressTimeout(30))),
                "timers left pending: " + (TimerWheel.Default.PendingCount - timersBefore));
        }
        finally
        {
            Spindle.UnobservedException -= OnUnobserved;
            stop.Cancel();
        }
        await TestUtil.WithTimeout(loopRun);
        await TestUtil.WithTimeout(signaller);
    }
}

using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using CsCheck;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// Random programs on one <see cref="Promise"/> or one <see cref="Promise{T}"/>, each with runContinuationsAsynchronously
/// false and true (CsCheck, which shrinks a failure to a smallest program), checked after every step against a model of
/// the documented contract:
/// <list type="bullet">
/// <item>TrySet* complete a pending use and return true, else return false and change nothing; Set* throw
/// InvalidOperationException when the use is completed; a null exception is ArgumentNullException.</item>
/// <item>Reset starts a new use (pending again) unless an await on the current, pending use is registered (the await, a
/// Preserve, a Forget observer, a combinator still attached): then it throws and changes nothing. A use a combinator
/// let go of may be reset while pending.</item>
/// <item>A task taken before a Reset is stale: Status, await, GetResult, Preserve, Forget and WhenAny all throw the
/// await-once InvalidOperationException (naming Preserve), never another use's outcome.</item>
/// <item>One awaiter at a time: a second await of a pending use throws the "already has an awaiter" error naming
/// Preserve; a use a combinator let go of has no awaiter, and may be awaited again. A completed use may be read any
/// number of times until Reset.</item>
/// <item>Every awaiter (OnCompleted, UnsafeOnCompleted, AsValueTask, an async Spindle method, Preserve's awaiters, a
/// WhenAny or WhenAll over the task and another promise) runs exactly once and sees the use's outcome: the value, the
/// very exception object, or an OperationCanceledException carrying the token. With runContinuationsAsynchronously the
/// awaiting code runs on a worker, never on the completing thread; without it, on the completing thread. The flowing
/// forms run under the registrant's ExecutionContext, and nothing a continuation sets leaks into the completer.</item>
/// <item>A continuation that throws: inline, the exception reaches the completer after the use completed; dispatched, it
/// goes to Spindle.UnobservedException.</item>
/// <item>Faults nobody will read (a forgotten task, a use a combinator let go of and nobody awaited since) are reported to
/// Spindle.UnobservedException exactly once, at completion; cancellations are not reported. A completed use's fault is
/// reported once by Forget and those reports together: forgetting it again reports nothing more.</item>
/// </list>
/// The UnobservedException event is process-wide, so this runs alone.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class PromiseModelTests
{
    private enum Op
    {
        TakeTask,
        TrySetResult,
        TrySetException,
        TrySetCanceled,
        SetResult,
        SetException,
        SetCanceled,
        SetNullException,
        CompleteOnOtherThread,
        Reset,
        Await,
        AwaitThrowing,
        ReadNow,
        ReadBlockingWhileOtherThreadCompletes,
        Status,
        Preserve,
        Forget,
        WhenAny,
        WhenAllCancelable,
        OtherInputCompletes,
        CancelCombinator,
    }

    private enum AwaitForm
    {
        OnCompleted,
        UnsafeOnCompleted,
        ValueTask,
        AsyncMethod,
    }

    private readonly record struct Step(Op Op, int Arg)
    {
        public override string ToString() => Op + "(" + Arg + ")";
    }

    private static readonly Gen<Step> Steps = Gen.Select(
        Gen.Frequency(
            (4, Gen.Const(Op.TakeTask)),
            (3, Gen.Const(Op.TrySetResult)),
            (2, Gen.Const(Op.TrySetException)),
            (2, Gen.Const(Op.TrySetCanceled)),
            (2, Gen.Const(Op.SetResult)),
            (1, Gen.Const(Op.SetException)),
            (1, Gen.Const(Op.SetCanceled)),
            (1, Gen.Const(Op.SetNullException)),
            (2, Gen.Const(Op.CompleteOnOtherThread)),
            (4, Gen.Const(Op.Reset)),
            (6, Gen.Const(Op.Await)),
            (1, Gen.Const(Op.AwaitThrowing)),
            (2, Gen.Const(Op.ReadNow)),
            (1, Gen.Const(Op.ReadBlockingWhileOtherThreadCompletes)),
            (2, Gen.Const(Op.Status)),
            (2, Gen.Const(Op.Preserve)),
            (2, Gen.Const(Op.Forget)),
            (2, Gen.Const(Op.WhenAny)),
            (2, Gen.Const(Op.WhenAllCancelable)),
            (2, Gen.Const(Op.OtherInputCompletes)),
            (2, Gen.Const(Op.CancelCombinator))),
        Gen.Int[0, 11],
        (op, arg) => new Step(op, arg));

    private static readonly Gen<(bool Typed, bool Async, Step[] Program)> Cases
        = Gen.Select(Gen.Bool, Gen.Bool, Steps.Array[1, 30]);

    private static readonly AsyncLocal<int> s_flowed = new();

    [Fact]
    public void RandomPrograms_MatchTheModel()
        => Cases.Sample(c => Run(c.Typed, c.Async, c.Program), iter: TestUtil.Stress(400), threads: 1,
            print: static c => $"{(c.Typed ? "Promise<int>" : "Promise")}(runContinuationsAsynchronously: {c.Async}): {string.Join(", ", c.Program)}");

    // ---- the outcomes an awaiter can see

    private enum Kind
    {
        Value,
        Fault,
        Canceled,
        Stale,
        AlreadyAwaited,
        ArgumentNull,
        AlreadyCompleted,
    }

    private readonly record struct Outcome(Kind Kind, int Value = 0, Exception? Error = null, CancellationToken Token = default)
    {
        public static Outcome Of(Exception e) => e switch
        {
            InvalidOperationException ioe when ioe.Message == ThrowHelper.AwaitOnceMessage => new(Kind.Stale, Error: e),
            InvalidOperationException ioe when ioe.Message.Contains("already has an awaiter", StringComparison.Ordinal)
                && ioe.Message.Contains("Preserve()", StringComparison.Ordinal) => new(Kind.AlreadyAwaited, Error: e),
            InvalidOperationException ioe when ioe.Message.Contains("already completed", StringComparison.Ordinal) => new(Kind.AlreadyCompleted, Error: e),
            OperationCanceledException oce => new(Kind.Canceled, Error: e, Token: oce.CancellationToken),
            ArgumentNullException => new(Kind.ArgumentNull, Error: e),
            _ => new(Kind.Fault, Error: e),
        };

        public bool Matches(Outcome actual) => Kind == actual.Kind && Kind switch
        {
            Kind.Value => Value == actual.Value,
            Kind.Fault => ReferenceEquals(Error, actual.Error),
            Kind.Canceled => Token == actual.Token,
            _ => true,
        };

        public override string ToString() => Kind switch
        {
            Kind.Value => "value " + Value,
            Kind.Fault => "fault " + Error?.Message,
            Kind.Canceled => "canceled" + (Token.CanBeCanceled ? " (with a token)" : ""),
            _ => Kind + (Error is null ? "" : ": " + Error.GetType().Name + ": " + Error.Message),
        };
    }

    /// <summary>One awaiter: how many times its code ran, what it saw, where, and under which context.</summary>
    private sealed class Record
    {
        private static int s_nextId;

        public readonly int Id = Interlocked.Increment(ref s_nextId);
        public readonly string What;
        public bool FlowsContext;
        public bool Throws; // the continuation throws after recording (AwaitThrowing)
        public Exception? Thrown;
        public int Runs;
        public int Thread = -1;
        public int SeenContext = int.MinValue;
        private Outcome _actual;
        public Outcome? Expected; // set by the model once the awaiter must have run
        public bool ExpectOnCompleter; // ran inline on the test thread (or the completing thread), not on a worker
        public int CompleterThread = -1;
        public bool AnyThread; // a race between a worker and the test thread decides where it runs

        public Record(string what) => What = what;

        public Outcome Actual => _actual;

        public void Finish(Func<int> read)
        {
            Outcome o;
            try
            {
                o = new Outcome(Kind.Value, read());
            }
            catch (Exception e)
            {
                o = Outcome.Of(e);
            }
            FinishWith(o);
        }

        public void FinishWith(Outcome o)
        {
            _actual = o;
            Thread = Environment.CurrentManagedThreadId;
            SeenContext = s_flowed.Value;
            Interlocked.Increment(ref Runs);
            if (Throws)
            {
                throw Thrown = new InvalidTimeZoneException(Marker + "a continuation threw (record " + Id + ")");
            }
        }
    }

    // ---- the two subjects behind one interface

    private abstract class Held
    {
        public int Use;

        public abstract SpindleTaskStatus Status { get; }

        public abstract int Read();

        public abstract void Await(AwaitForm form, Record r);

        public abstract Held Preserve();

        public abstract void Forget();

        public abstract SpindleTask Untyped { get; }
    }

    private sealed class HeldVoid(SpindleTask task) : Held
    {
        public override SpindleTaskStatus Status => task.Status;

        public override int Read()
        {
            task.GetAwaiter().GetResult();
            return 0;
        }

        public override void Await(AwaitForm form, Record r)
        {
            switch (form)
            {
                case AwaitForm.OnCompleted:
                case AwaitForm.UnsafeOnCompleted:
                {
                    SpindleTask.Awaiter a = task.GetAwaiter();
                    if (a.IsCompleted)
                    {
                        r.Finish(Read);
                        return;
                    }
                    Action c = () => r.Finish(Read);
                    if (form == AwaitForm.OnCompleted)
                    {
                        a.OnCompleted(c);
                    }
                    else
                    {
                        a.UnsafeOnCompleted(c);
                    }
                    return;
                }
                case AwaitForm.ValueTask:
                {
                    // ConfigureAwait(false): the completing thread, as the model expects (a plain await would post to the test's context)
                    System.Runtime.CompilerServices.ConfiguredValueTaskAwaitable.ConfiguredValueTaskAwaiter a = task.AsValueTask().ConfigureAwait(false).GetAwaiter();
                    if (a.IsCompleted)
                    {
                        r.Finish(() => { a.GetResult(); return 0; });
                        return;
                    }
                    a.OnCompleted(() => r.Finish(() => { a.GetResult(); return 0; }));
                    return;
                }
                default:
                    AwaitInMethod(task, r).Forget();
                    return;
            }
        }

        private static async SpindleTask AwaitInMethod(SpindleTask task, Record r)
        {
            Outcome o;
            try
            {
                await task;
                o = new Outcome(Kind.Value);
            }
            catch (Exception e)
            {
                o = Outcome.Of(e);
            }
            r.FinishWith(o);
            s_flowed.Value = -r.Id; // must not leak into the completer
        }

        public override Held Preserve() => new HeldVoid(task.Preserve());

        public override void Forget() => task.Forget();

        public override SpindleTask Untyped => task;
    }

    private sealed class HeldInt(SpindleTask<int> task) : Held
    {
        public override SpindleTaskStatus Status => task.Status;

        public override int Read() => task.GetAwaiter().GetResult();

        public override void Await(AwaitForm form, Record r)
        {
            switch (form)
            {
                case AwaitForm.OnCompleted:
                case AwaitForm.UnsafeOnCompleted:
                {
                    SpindleTask<int>.Awaiter a = task.GetAwaiter();
                    if (a.IsCompleted)
                    {
                        r.Finish(a.GetResult);
                        return;
                    }
                    Action c = () => r.Finish(a.GetResult);
                    if (form == AwaitForm.OnCompleted)
                    {
                        a.OnCompleted(c);
                    }
                    else
                    {
                        a.UnsafeOnCompleted(c);
                    }
                    return;
                }
                case AwaitForm.ValueTask:
                {
                    // ConfigureAwait(false): the completing thread, as the model expects (a plain await would post to the test's context)
                    System.Runtime.CompilerServices.ConfiguredValueTaskAwaitable<int>.ConfiguredValueTaskAwaiter a = task.AsValueTask().ConfigureAwait(false).GetAwaiter();
                    if (a.IsCompleted)
                    {
                        r.Finish(a.GetResult);
                        return;
                    }
                    a.OnCompleted(() => r.Finish(a.GetResult));
                    return;
                }
                default:
                    AwaitInMethod(task, r).Forget();
                    return;
            }
        }

        private static async SpindleTask AwaitInMethod(SpindleTask<int> task, Record r)
        {
            Outcome o;
            try
            {
                o = new Outcome(Kind.Value, await task);
            }
            catch (Exception e)
            {
                o = Outcome.Of(e);
            }
            r.FinishWith(o);
            s_flowed.Value = -r.Id;
        }

        public override Held Preserve() => new HeldInt(task.Preserve());

        public override void Forget() => task.Forget();

        public override SpindleTask Untyped => task;
    }

    private sealed class Subject(bool typed, bool async)
    {
        private readonly Promise _void = new(async);
        private readonly Promise<int> _int = new(async);

        public bool IsCompleted => typed ? _int.IsCompleted : _void.IsCompleted;

        public Held Take() => typed ? new HeldInt(_int.Task) : new HeldVoid(_void.Task);

        public bool TrySetResult(int v) => typed ? _int.TrySetResult(v) : _void.TrySetResult();

        public bool TrySetException(Exception e) => typed ? _int.TrySetException(e) : _void.TrySetException(e);

        public bool TrySetCanceled(CancellationToken t) => typed ? _int.TrySetCanceled(t) : _void.TrySetCanceled(t);

        public void SetResult(int v)
        {
            if (typed)
            {
                _int.SetResult(v);
            }
            else
            {
                _void.SetResult();
            }
        }

        public void SetException(Exception e)
        {
            if (typed)
            {
                _int.SetException(e);
            }
            else
            {
                _void.SetException(e);
            }
        }

        public void SetCanceled(CancellationToken t)
        {
            if (typed)
            {
                _int.SetCanceled(t);
            }
            else
            {
                _void.SetCanceled(t);
            }
        }

        public void Reset()
        {
            if (typed)
            {
                _int.Reset();
            }
            else
            {
                _void.Reset();
            }
        }

        public bool RunsAsync => typed ? _int.RunsContinuationsAsynchronously : _void.RunsContinuationsAsynchronously;
    }

    /// <summary>What holds the current use's one await slot.</summary>
    private enum Waiter
    {
        None,
        Awaiter, // an await, a Preserve, a Forget observer or a combinator: Reset throws, a second await throws
        Abandoned, // a combinator let go of it: Reset allowed, may be awaited again (and is then an Awaiter's or Forgotten)
        Forgotten, // as Awaiter, and a fault is reported
    }

    private sealed class Combo
    {
        public required bool IsAny;
        public required Promise Other;
        public required CancellationTokenSource Cts;
        public required Record Record;
        public int? AttachedUse; // the use it waits on, while that use is pending
        public Outcome? PromiseOutcome; // the promise input's outcome, once read
        public int OutcomeUse; // the use PromiseOutcome is the outcome of
        public bool OtherDone;
        public bool PromiseDispatched; // the promise input's slot was queued to a worker when the promise completed
    }

    /// <summary>Begins the message of every exception this test's programs throw: no other test's message begins so.</summary>
    private const string Marker = "PromiseModelTests: ";

    private static void Run(bool typed, bool async, Step[] program)
    {
        // The program's own faults, by the messages only this test gives them, and whatever is reported on its thread: the model
        // checks that nothing else was reported, so the claim must take in anything this program could report.
        var watch = UnobservedReports.Start(UnobservedReports.Own.Any(
            static e => e is InvalidTimeZoneException && e.Message.StartsWith(Marker, StringComparison.Ordinal),
            UnobservedReports.Own.ReportedOnTestThreads()));
        using (watch)
        {
            RunCore(typed, async, program, watch.Reports);
        }
    }

    private static void RunCore(bool typed, bool async, Step[] program, ConcurrentQueue<Exception> reported)
    {
        var subject = new Subject(typed, async);
        Assert.Equal(async, subject.RunsAsync);
        int me = Environment.CurrentManagedThreadId;
        s_flowed.Value = 0;

        // The model.
        int use = 0;
        Outcome? outcome = null; // null while pending
        Waiter waiter = Waiter.None;
        var held = new List<Held>();
        var records = new List<Record>();
        var all = new List<Record>();
        var expectedReports = new List<Exception>();
        bool faultReported = false; // the current use's fault went to UnobservedException through Forget or a let-go
        var pendingRecords = new List<Record>(); // awaiting the current use's completion
        Combo? combo = null;

        Outcome ValueOutcome(int v) => new(Kind.Value, typed ? v : 0);

        void Complete(Outcome o, int completer)
        {
            outcome = o;
            foreach (Record r in pendingRecords)
            {
                r.Expected = o;
                r.ExpectOnCompleter = !async;
                r.CompleterThread = completer;
            }
            pendingRecords.Clear();
            if (waiter == Waiter.Forgotten || waiter == Waiter.Abandoned)
            {
                if (o.Kind == Kind.Fault)
                {
                    expectedReports.Add(o.Error!);
                    faultReported = true;
                }
            }
            waiter = Waiter.None;
            if (combo is { AttachedUse: { } u } c && u == use)
            {
                c.AttachedUse = null;
                c.PromiseOutcome = o;
                c.OutcomeUse = use;
                c.PromiseDispatched = async;
                if (c.IsAny || c.OtherDone)
                {
                    Finish(c, o.Kind == Kind.Value ? new Outcome(Kind.Value, 0) : o, completer, inline: !async);
                }
            }
        }

        void Finish(Combo c, Outcome o, int completer, bool inline)
        {
            c.Record.Expected = o;
            c.Record.ExpectOnCompleter = inline;
            c.Record.CompleterThread = completer;
            combo = null;
        }

        for (int step = 0; step < program.Length; step++)
        {
            Step s = program[step];
            string at = $"step {step} ({s})";
            int value = 1000 * (step + 1) + s.Arg;
            var error = new InvalidTimeZoneException(Marker + $"fault of step {step}");
            using var cts = new CancellationTokenSource();
            CancellationToken token = s.Arg % 2 == 0 ? default : cts.Token;
            Held? target = held.Count == 0 ? null : held[s.Arg % held.Count];
            bool stale = target is not null && target.Use != use;
            AwaitForm form = (AwaitForm)(s.Arg % 4);

            // What an await of the target must see at once, or null if it waits for the completion.
            Outcome? AwaitNow()
            {
                if (stale)
                {
                    return new Outcome(Kind.Stale);
                }
                if (outcome is { } done)
                {
                    return done;
                }
                return waiter is Waiter.None or Waiter.Abandoned ? null : new Outcome(Kind.AlreadyAwaited);
            }

            Outcome Try(Action a)
            {
                try
                {
                    a();
                    return new Outcome(Kind.Value);
                }
                catch (Exception e)
                {
                    return Outcome.Of(e);
                }
            }

            void ExpectThrow(Kind kind, Action a)
            {
                Outcome o = Try(a);
                Assert.True(o.Kind == kind, $"{at}: expected {kind}, got {o}");
            }

            void Completion(Func<bool> tryComplete, Outcome o, bool throwing)
            {
                bool pending = outcome is null;
                // A continuation that throws while running inline reaches the completer (after the use completed).
                Record? thrower = !async && pending ? pendingRecords.FirstOrDefault(r => r.Throws) : null;
                bool returned = false;
                Outcome result = Try(() => returned = tryComplete());
                if (pending)
                {
                    Complete(o, me);
                }
                if (thrower is not null)
                {
                    Assert.True(result.Kind == Kind.Fault && ReferenceEquals(result.Error, thrower.Thrown),
                        $"{at}: the inline continuation's exception did not reach the completer: {result}");
                    // Awaiters after the thrower may not have run: a single waiter per use, so there are none.
                    return;
                }
                if (throwing)
                {
                    Assert.True(pending ? result.Kind == Kind.Value : result.Kind == Kind.AlreadyCompleted, $"{at}: Set* on a {(pending ? "pending" : "completed")} use gave {result}");
                }
                else
                {
                    Assert.True(result.Kind == Kind.Value, $"{at}: TrySet* threw {result}");
                    Assert.True(returned == pending, $"{at}: TrySet* returned {returned} on a {(pending ? "pending" : "completed")} use");
                }
            }

            switch (s.Op)
            {
                case Op.TakeTask:
                {
                    Held h = subject.Take();
                    h.Use = use;
                    if (held.Count >= 4)
                    {
                        held[s.Arg % 4] = h;
                    }
                    else
                    {
                        held.Add(h);
                    }
                    break;
                }
                case Op.TrySetResult:
                    Completion(() => subject.TrySetResult(value), ValueOutcome(value), throwing: false);
                    break;
                case Op.TrySetException:
                    Completion(() => subject.TrySetException(error), new Outcome(Kind.Fault, Error: error), throwing: false);
                    break;
                case Op.TrySetCanceled:
                    Completion(() => subject.TrySetCanceled(token), new Outcome(Kind.Canceled, Token: token), throwing: false);
                    break;
                case Op.SetResult:
                    Completion(() => { subject.SetResult(value); return true; }, ValueOutcome(value), throwing: true);
                    break;
                case Op.SetException:
                    Completion(() => { subject.SetException(error); return true; }, new Outcome(Kind.Fault, Error: error), throwing: true);
                    break;
                case Op.SetCanceled:
                    Completion(() => { subject.SetCanceled(token); return true; }, new Outcome(Kind.Canceled, Token: token), throwing: true);
                    break;
                case Op.SetNullException:
                    ExpectThrow(Kind.ArgumentNull, () => subject.TrySetException(null!));
                    ExpectThrow(Kind.ArgumentNull, () => subject.SetException(null!));
                    break;
                case Op.CompleteOnOtherThread:
                {
                    if (pendingRecords.Any(r => r.Throws))
                    {
                        break; // its exception would end the other thread
                    }
                    bool pending = outcome is null;
                    bool returned = false;
                    int other = -1;
                    var thread = new Thread(() =>
                    {
                        other = Environment.CurrentManagedThreadId;
                        returned = subject.TrySetResult(value);
                    });
                    thread.Start();
                    Assert.True(thread.Join(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), $"{at}: the completing thread hung");
                    Assert.True(returned == pending, $"{at}: TrySetResult on another thread returned {returned}");
                    if (pending)
                    {
                        Complete(ValueOutcome(value), other);
                    }
                    break;
                }
                case Op.Reset:
                {
                    if (combo is { PromiseDispatched: true })
                    {
                        // The WhenAll still waits for its other input, and its read of this use was queued to a worker when
                        // the promise completed: it may not have happened yet, so a reset now would race an await (the
                        // caller's error, see PromiseCombinatorReadTests).
                        break;
                    }
                    bool allowed = outcome is not null || waiter is Waiter.None or Waiter.Abandoned;
                    Outcome r = Try(subject.Reset);
                    if (allowed)
                    {
                        Assert.True(r.Kind == Kind.Value, $"{at}: Reset threw {r}");
                        use++;
                        outcome = null;
                        waiter = Waiter.None;
                        faultReported = false;
                    }
                    else
                    {
                        Assert.True(r.Kind == Kind.AlreadyCompleted || (r.Error is InvalidOperationException && r.Error.Message.Contains("pending", StringComparison.Ordinal)),
                            $"{at}: Reset with an await pending gave {r}");
                    }
                    break;
                }
                case Op.Await:
                case Op.AwaitThrowing:
                {
                    if (target is null)
                    {
                        break;
                    }
                    bool throwing = s.Op == Op.AwaitThrowing;
                    if (throwing && form == AwaitForm.AsyncMethod)
                    {
                        form = AwaitForm.UnsafeOnCompleted;
                    }
                    Outcome? now = AwaitNow();
                    var r = new Record(form + " of use " + target.Use)
                    {
                        FlowsContext = form is AwaitForm.OnCompleted or AwaitForm.ValueTask or AwaitForm.AsyncMethod,
                        Throws = throwing && now is null, // only a continuation that waits: inline at once, it would throw here
                    };
                    records.Add(r);
                    all.Add(r);
                    s_flowed.Value = r.Id;
                    Outcome sync;
                    try
                    {
                        sync = Try(() => target.Await(form, r));
                    }
                    finally
                    {
                        s_flowed.Value = 0;
                    }
                    if (now is { } immediate)
                    {
                        if (immediate.Kind is Kind.Stale or Kind.AlreadyAwaited && form != AwaitForm.AsyncMethod)
                        {
                            Assert.True(immediate.Matches(sync), $"{at}: the await threw {sync}, the model says {immediate}");
                            records.Remove(r);
                        all.Remove(r);
                            Assert.Equal(0, r.Runs);
                        }
                        else
                        {
                            Assert.True(sync.Kind == Kind.Value, $"{at}: the await threw {sync}");
                            r.Expected = immediate;
                            r.ExpectOnCompleter = true;
                            r.CompleterThread = me;
                        }
                    }
                    else
                    {
                        Assert.True(sync.Kind == Kind.Value, $"{at}: the await threw {sync}");
                        pendingRecords.Add(r);
                        waiter = Waiter.Awaiter;
                    }
                    break;
                }
                case Op.ReadNow:
                {
                    if (target is null)
                    {
                        break;
                    }
                    Outcome? now = AwaitNow();
                    if (now is null)
                    {
                        break; // it would block: see ReadBlockingWhileOtherThreadCompletes
                    }
                    int v = 0;
                    Outcome got = Try(() => v = target.Read());
                    if (got.Kind == Kind.Value)
                    {
                        got = new Outcome(Kind.Value, v);
                    }
                    Assert.True(now.Value.Matches(got), $"{at}: GetResult gave {got}, the model says {now}");
                    break;
                }
                case Op.ReadBlockingWhileOtherThreadCompletes:
                {
                    if (target is null || pendingRecords.Any(r => r.Throws))
                    {
                        break;
                    }
                    Outcome? now = AwaitNow();
                    if (now is not null)
                    {
                        break; // ReadNow covers it
                    }
                    var thread = new Thread(() =>
                    {
                        Thread.Sleep(s.Arg % 3);
                        subject.TrySetResult(value);
                    });
                    thread.Start();
                    int v = 0;
                    Outcome got = Try(() => v = target.Read());
                    Assert.True(thread.Join(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), $"{at}: the completing thread hung");
                    Assert.True(got.Kind == Kind.Value && v == ValueOutcome(value).Value, $"{at}: the blocked GetResult gave {got} / {v}");
                    Complete(ValueOutcome(value), -1);
                    break;
                }
                case Op.Status:
                    break; // checked after every step below
                case Op.Preserve:
                {
                    if (target is null)
                    {
                        break;
                    }
                    Outcome? now = AwaitNow();
                    Held? preserved = null;
                    Outcome sync = Try(() => preserved = target.Preserve());
                    if (now is { Kind: Kind.Stale or Kind.AlreadyAwaited } refused)
                    {
                        Assert.True(refused.Matches(sync), $"{at}: Preserve gave {sync}, the model says {refused}");
                        break;
                    }
                    Assert.True(sync.Kind == Kind.Value, $"{at}: Preserve threw {sync}");
                    if (now is null)
                    {
                        waiter = Waiter.Awaiter;
                    }
                    // Two awaiters of the preserved task: both see the outcome, each once.
                    for (int k = 0; k < 2; k++)
                    {
                        var r = new Record("awaiter " + k + " of a Preserve of use " + target.Use) { FlowsContext = true };
                        records.Add(r);
                    all.Add(r);
                        s_flowed.Value = r.Id;
                        try
                        {
                            Outcome reg = Try(() => preserved!.Await(AwaitForm.OnCompleted, r));
                            Assert.True(reg.Kind == Kind.Value, $"{at}: awaiting the preserved task threw {reg}");
                        }
                        finally
                        {
                            s_flowed.Value = 0;
                        }
                        if (now is { } done)
                        {
                            r.Expected = done;
                            r.ExpectOnCompleter = true;
                            r.CompleterThread = me;
                        }
                        else
                        {
                            pendingRecords.Add(r);
                        }
                    }
                    break;
                }
                case Op.Forget:
                {
                    if (target is null)
                    {
                        break;
                    }
                    Outcome? now = AwaitNow();
                    Outcome sync = Try(target.Forget);
                    if (now is { Kind: Kind.Stale or Kind.AlreadyAwaited } refused)
                    {
                        Assert.True(refused.Matches(sync), $"{at}: Forget gave {sync}, the model says {refused}");
                        break;
                    }
                    Assert.True(sync.Kind == Kind.Value, $"{at}: Forget threw {sync}");
                    if (now is { Kind: Kind.Fault } fault)
                    {
                        if (!faultReported)
                        {
                            expectedReports.Add(fault.Error!); // once per completion
                            faultReported = true;
                        }
                    }
                    else if (now is null)
                    {
                        waiter = Waiter.Forgotten;
                    }
                    break;
                }
                case Op.WhenAny:
                case Op.WhenAllCancelable:
                {
                    if (target is null || combo is not null)
                    {
                        break;
                    }
                    bool isAny = s.Op == Op.WhenAny;
                    Outcome? now = AwaitNow();
                    var c = new Combo
                    {
                        IsAny = isAny,
                        Other = new Promise(),
                        Cts = new CancellationTokenSource(),
                        Record = new Record((isAny ? "WhenAny" : "WhenAll") + " over use " + target.Use) { FlowsContext = true },
                    };
                    Record r = c.Record;
                    records.Add(r);
                    all.Add(r);
                    s_flowed.Value = r.Id;
                    Outcome sync;
                    try
                    {
                        sync = Try(() =>
                        {
                            if (isAny)
                            {
                                new HeldInt(SpindleTask.WhenAny([target.Untyped, c.Other.Task], c.Cts.Token)).Await(AwaitForm.OnCompleted, r);
                            }
                            else
                            {
                                new HeldVoid(SpindleTask.WhenAll([target.Untyped, c.Other.Task], c.Cts.Token)).Await(AwaitForm.OnCompleted, r);
                            }
                        });
                    }
                    finally
                    {
                        s_flowed.Value = 0;
                    }
                    if (now is { Kind: Kind.Stale or Kind.AlreadyAwaited } refused)
                    {
                        Assert.True(sync.Kind == Kind.Stale || sync.Kind == Kind.AlreadyAwaited, $"{at}: the combinator over a {refused.Kind} task gave {sync}");
                        records.Remove(r);
                        all.Remove(r);
                        break;
                    }
                    Assert.True(sync.Kind == Kind.Value, $"{at}: the combinator threw {sync}");
                    if (now is { } done)
                    {
                        c.PromiseOutcome = done;
                        c.OutcomeUse = use;
                        if (isAny)
                        {
                            r.Expected = done.Kind == Kind.Value ? new Outcome(Kind.Value, 0) : done;
                            r.ExpectOnCompleter = true;
                            r.CompleterThread = me;
                            break;
                        }
                    }
                    else
                    {
                        c.AttachedUse = use;
                        waiter = Waiter.Awaiter;
                    }
                    combo = c;
                    break;
                }
                case Op.OtherInputCompletes:
                case Op.CancelCombinator:
                {
                    if (combo is not { } c || (s.Op == Op.OtherInputCompletes && c.OtherDone))
                    {
                        break;
                    }
                    if (s.Op == Op.OtherInputCompletes)
                    {
                        c.Other.SetResult();
                        c.OtherDone = true;
                    }
                    else
                    {
                        c.Cts.Cancel();
                    }
                    bool decided = s.Op == Op.CancelCombinator || c.IsAny || c.PromiseOutcome is not null;
                    if (!decided)
                    {
                        break;
                    }
                    if (c.AttachedUse is not null)
                    {
                        waiter = Waiter.Abandoned; // let go of
                    }
                    else if (s.Op == Op.CancelCombinator && c.PromiseOutcome is { Kind: Kind.Fault } unread)
                    {
                        // The cancelled WhenAll will never rethrow it: reported, once per completion. A Forget of the same
                        // use may have reported it already, or will find it reported; a use reset since is reported.
                        if (c.OutcomeUse != use)
                        {
                            expectedReports.Add(unread.Error!);
                        }
                        else if (!faultReported)
                        {
                            expectedReports.Add(unread.Error!);
                            faultReported = true;
                        }
                    }
                    Outcome o = s.Op == Op.CancelCombinator ? new Outcome(Kind.Canceled, Token: c.Cts.Token)
                        : c.IsAny ? new Outcome(Kind.Value, 1)
                        : c.PromiseOutcome!.Value.Kind == Kind.Value ? new Outcome(Kind.Value, 0) : c.PromiseOutcome.Value;
                    // The other promise and the token complete it inline, unless the promise input's own (dispatched) read
                    // may still be running on a worker: then whichever finishes last completes it.
                    c.Record.AnyThread = c.PromiseDispatched;
                    Finish(c, o, me, inline: !c.PromiseDispatched);
                    break;
                }
            }

            // ---- checks after every step
            Assert.True(s_flowed.Value == 0, $"{at}: a continuation's ExecutionContext leaked into the test thread ({s_flowed.Value})");
            Assert.True(subject.IsCompleted == (outcome is not null), $"{at}: IsCompleted is {subject.IsCompleted}, the model says {outcome is not null}");
            foreach (Held h in held)
            {
                if (h.Use != use)
                {
                    Assert.Throws<InvalidOperationException>(() => h.Status);
                    continue;
                }
                SpindleTaskStatus expected = outcome switch
                {
                    null => SpindleTaskStatus.Pending,
                    { Kind: Kind.Value } => SpindleTaskStatus.Succeeded,
                    { Kind: Kind.Canceled } => SpindleTaskStatus.Canceled,
                    _ => SpindleTaskStatus.Faulted,
                };
                Assert.True(h.Status == expected, $"{at}: a task of the current use has status {h.Status}, the model says {expected}");
            }
            foreach (Record r in records)
            {
                if (r.Expected is not { } expectedOutcome)
                {
                    Assert.True(Volatile.Read(ref r.Runs) == 0, $"{at}: {r.What} ran before its use completed, seeing {r.Actual}");
                    continue;
                }
                if (!r.ExpectOnCompleter)
                {
                    Assert.True(SpinWait.SpinUntil(() => Volatile.Read(ref r.Runs) > 0, TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), $"{at}: {r.What} never ran");
                }
                Assert.True(Volatile.Read(ref r.Runs) == 1, $"{at}: {r.What} ran {r.Runs} times");
                Assert.True(expectedOutcome.Matches(r.Actual), $"{at}: {r.What} saw {r.Actual}, the model says {expectedOutcome}");
                if (r.AnyThread)
                {
                }
                else if (r.ExpectOnCompleter && r.CompleterThread != -1)
                {
                    Assert.True(r.Thread == r.CompleterThread, $"{at}: {r.What} ran on thread {r.Thread}, not on the completing thread {r.CompleterThread}");
                }
                else if (!r.ExpectOnCompleter)
                {
                    Assert.True(r.Thread != me, $"{at}: {r.What} ran on the completing thread of a promise that runs continuations asynchronously");
                }
                if (r.FlowsContext)
                {
                    Assert.True(r.SeenContext == r.Id, $"{at}: {r.What} ran under context {r.SeenContext}, not its registrant's {r.Id}");
                }
                if (r.Throws && async)
                {
                    // Dispatched: the worker reports what the continuation threw.
                    Assert.True(SpinWait.SpinUntil(() => reported.Contains(r.Thrown!), TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)),
                        $"{at}: the exception thrown by the dispatched {r.What} was not reported");
                    expectedReports.Add(r.Thrown!);
                    r.Throws = false;
                }
            }
            records.RemoveAll(r => r.Expected is not null && r.Runs == 1 && !r.Throws);
            Exception[] seenReports = reported.ToArray();
            Assert.True(seenReports.Length == expectedReports.Count && seenReports.All(expectedReports.Contains),
                $"{at}: UnobservedException saw [{string.Join("; ", seenReports.Select(e => e.GetType().Name + ": " + e.Message))}], the model says [{string.Join("; ", expectedReports.Select(e => e.Message))}]");
        }

        // Ends whatever still waits, so nothing stays registered, and checks nothing ran twice meanwhile.
        Thread.Sleep(async ? 5 : 0);
        foreach (Record r in all)
        {
            Assert.True(Volatile.Read(ref r.Runs) == (r.Expected is null ? 0 : 1), $"end: {r.What} ran {r.Runs} times");
        }
    }
}

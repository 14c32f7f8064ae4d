using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Linq;
using System.Reflection;
using System.Threading;
using System.Threading.Tasks;
using CsCheck;

namespace SpindleLib.Tests.Sources;

/// <summary>
/// The object pools driven through the public API only: async Spindle methods that suspend on a promise rent a
/// state-machine box, and reading their task (or the method finishing after Forget) returns it. Random programs
/// (CsCheck, which shrinks a failure to a smallest program) on one thread are checked after every step against a model of
/// the pool as <see cref="SpindlePool"/>'s remarks document it: a per-thread stack of up to 32 objects, trading 16 at a
/// time with a shared stack capped by <see cref="SpindlePool.MaxRetainedPerType"/>; a thread whose stack runs dry takes
/// the whole shared stack, and this test's thread, none of Spindle's own, keeps 16 of it and gives the rest back (no
/// other thread refills the shared stack meanwhile); <see cref="SpindlePool.Trim"/> empties the shared stack and the caller's own. The model
/// predicts which object each rent hands out, so it checks that no object is handed out twice at once, that a returned
/// box keeps nothing of its use (state machine, ExecutionContext, result, exception, continuation), that the cap is
/// respected (lowering it keeps what is pooled), that a task read twice returns nothing twice, and the counts. A second
/// test runs rent/return across threads (boxes rented on one thread, completed on another, read on a third) and checks
/// that no box is ever live twice and every method sees its own result. The cap and Trim are process-wide: run alone.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class PoolModelTests
{
    private sealed class Payload(int value)
    {
        public int Value { get; } = value;
    }

    private static readonly AsyncLocal<string> s_flowed = new();

    /// <summary>The method whose boxes the single-thread model follows (its box type is used nowhere else).</summary>
    private static async SpindleTask<Payload> Suspend(Promise<int> promise, int add)
    {
        s_flowed.Value = "use " + add; // kept in the box's ExecutionContext across the await: must not survive the use
        int v = await promise.Task;
        return new Payload(v + add);
    }

    /// <summary>The method of the cross-thread test (a box type of its own).</summary>
    private static async SpindleTask<int> SuspendAcross(Promise<int> promise, int add) => await promise.Task + add;

    private enum Op
    {
        Start,
        Succeed,
        Fail,
        Read,
        ReadTwice,
        Forget,
        SetCap,
        Trim,
        StartMany,
        ReadAll,
    }

    private readonly record struct Step(Op Op, int Arg)
    {
        public override string ToString() => Op + "(" + Arg + ")";
    }

    private static readonly int[] Caps = [0, 8, 16, 17, 31, 32, 48, 4096];

    private static readonly Gen<Step[]> Programs = Gen.Select(
        Gen.Frequency(
            (6, Gen.Const(Op.Start)),
            (4, Gen.Const(Op.Succeed)),
            (1, Gen.Const(Op.Fail)),
            (4, Gen.Const(Op.Read)),
            (1, Gen.Const(Op.ReadTwice)),
            (2, Gen.Const(Op.Forget)),
            (1, Gen.Const(Op.SetCap)),
            (1, Gen.Const(Op.Trim)),
            (1, Gen.Const(Op.StartMany)),
            (1, Gen.Const(Op.ReadAll))),
        Gen.Int[0, 63],
        (op, arg) => new Step(op, arg)).Array[1, 40];

    /// <summary>One call of <see cref="Suspend"/>: its promise, task and box, and what the model knows of it.</summary>
    private sealed class Call
    {
        public required Promise<int> Promise;
        public required SpindleTask<Payload> Task;
        public required object Box;
        public required int Add;
        public int? Value; // the promise's value once it succeeded
        public Exception? Error; // the promise's fault
        public bool Forgotten;
        public bool Done => Value is not null || Error is not null;
    }

    [Fact]
    public void RandomProgramsOnOneThread_MatchThePoolModel()
    {
        int cap = SpindlePool.MaxRetainedPerType;
        try
        {
            Programs.Sample(Run, iter: TestUtil.Stress(1_000), threads: 1, print: static p => string.Join(", ", p));
        }
        finally
        {
            SpindlePool.MaxRetainedPerType = cap;
        }
    }

    private static void Run(Step[] program)
    {
        // A forgotten fault is reported (to standard error when nobody listens): listen, to keep the output clean.
        Action<Exception> ignore = static _ => { };
        Spindle.UnobservedException += ignore;
        try
        {
            RunCore(program);
        }
        finally
        {
            Spindle.UnobservedException -= ignore;
        }
    }

    private static void RunCore(Step[] program)
    {
        SpindlePool.MaxRetainedPerType = 4096;
        SpindlePool.Trim(); // the model starts empty: this thread's stack and the shared one
        Type? boxType = null;
        int cap = 4096;
        int retainedWhenLowered = 0; // lowering the cap keeps what is pooled
        var local = new List<object>(); // index 0: the top
        var shared = new List<object>(); // index 0: the head
        var live = new List<Call>();
        var seen = new HashSet<object>(ReferenceEqualityComparer.Instance);
        var returnedOnce = new HashSet<object>(ReferenceEqualityComparer.Instance);

        object? ModelRent()
        {
            if (local.Count > 0)
            {
                object top = local[0];
                local.RemoveAt(0);
                return top;
            }
            if (shared.Count == 0)
            {
                return null;
            }
            // A plain thread keeps one chunk of the shared stack and gives the rest back (ObjectPool.KeepAChunk): the
            // first 16 in the shared stack's order, the rest staying in theirs.
            int kept = Math.Min(shared.Count, 16);
            object first = shared[0];
            local.AddRange(shared.Skip(1).Take(kept - 1));
            shared.RemoveRange(0, kept);
            return first;
        }

        void ModelReturn(object box)
        {
            local.Insert(0, box);
            if (local.Count > 32)
            {
                List<object> chunk = local.GetRange(16, 16);
                local.RemoveRange(16, 16);
                if (shared.Count + 16 <= cap)
                {
                    shared.InsertRange(0, chunk);
                }
            }
        }

        for (int step = 0; step < program.Length; step++)
        {
            Step s = program[step];
            string at = $"step {step} ({s})";
            Call? target = live.Count == 0 ? null : live[s.Arg % live.Count];

            void Start(int add)
            {
                var promise = new Promise<int>();
                object? expected = ModelRent();
                SpindleTask<Payload> task = Suspend(promise, add);
                object box = task._source!;
                boxType ??= box.GetType();
                if (expected is not null)
                {
                    Assert.True(ReferenceEquals(expected, box), $"{at}: the rent handed out another box than the pool's next one");
                }
                else
                {
                    Assert.True(!seen.Contains(box), $"{at}: the pool, empty by the model, handed out a box it had before");
                }
                Assert.True(live.TrueForAll(c => !ReferenceEquals(c.Box, box)), $"{at}: a box was handed out while another call still holds it");
                seen.Add(box);
                returnedOnce.Remove(box);
                live.Add(new Call { Promise = promise, Task = task, Box = box, Add = add });
            }

            void Returned(Call c)
            {
                Assert.True(returnedOnce.Add(c.Box), $"{at}: a box was returned twice");
                live.Remove(c);
                ModelReturn(c.Box);
                AssertCleared(c.Box, at);
            }

            void Complete(Call c, bool succeed)
            {
                if (succeed)
                {
                    c.Value = 10 * step;
                    c.Promise.SetResult(c.Value.Value);
                }
                else
                {
                    c.Error = new InvalidTimeZoneException("fault of step " + step);
                    c.Promise.SetException(c.Error);
                }
                Assert.True(c.Forgotten || c.Task.IsCompleted, $"{at}: the method did not finish when its promise completed");
                if (c.Forgotten)
                {
                    Returned(c); // the box read itself on this thread
                }
            }

            void Read(Call c)
            {
                Payload? result = null;
                Exception? thrown = null;
                try
                {
                    result = c.Task.GetAwaiter().GetResult();
                }
                catch (Exception e)
                {
                    thrown = e;
                }
                if (c.Value is { } v)
                {
                    Assert.True(thrown is null && result!.Value == v + c.Add, $"{at}: the read gave {thrown?.Message ?? result!.Value.ToString()}, expected {v + c.Add}");
                }
                else
                {
                    Assert.True(ReferenceEquals(thrown, c.Error), $"{at}: the read threw {thrown?.Message ?? "nothing"}, expected {c.Error!.Message}");
                }
                Returned(c);
            }

            switch (s.Op)
            {
                case Op.Start:
                    Start(s.Arg);
                    break;
                case Op.StartMany:
                    for (int i = 0; i < 20 + s.Arg; i++)
                    {
                        Start(i);
                    }
                    break;
                case Op.Succeed:
                case Op.Fail:
                    if (target is { Done: false })
                    {
                        Complete(target, s.Op == Op.Succeed);
                    }
                    break;
                case Op.Read:
                case Op.ReadTwice:
                    if (target is { Done: true, Forgotten: false })
                    {
                        Read(target);
                        if (s.Op == Op.ReadTwice)
                        {
                            int before = local.Count;
                            Assert.Throws<InvalidOperationException>(() => target.Task.GetAwaiter().GetResult());
                            Assert.Throws<InvalidOperationException>(() => target.Task.Status);
                            Assert.Equal(before, local.Count);
                        }
                    }
                    break;
                case Op.ReadAll:
                    foreach (Call c in live.ToArray())
                    {
                        if (!c.Done)
                        {
                            Complete(c, succeed: true);
                        }
                        if (!c.Forgotten)
                        {
                            Read(c);
                        }
                    }
                    break;
                case Op.Forget:
                    if (target is { Forgotten: false })
                    {
                        target.Task.Forget();
                        target.Forgotten = true;
                        if (target.Done)
                        {
                            Returned(target); // read at once
                        }
                    }
                    break;
                case Op.SetCap:
                {
                    int next = Caps[s.Arg % Caps.Length];
                    if (next < cap)
                    {
                        retainedWhenLowered = Math.Max(retainedWhenLowered, shared.Count);
                    }
                    cap = next;
                    SpindlePool.MaxRetainedPerType = next;
                    break;
                }
                case Op.Trim:
                    SpindlePool.Trim();
                    local.Clear();
                    shared.Clear();
                    retainedWhenLowered = 0;
                    break;
            }

            // ---- checks after every step
            if (boxType is not null)
            {
                Assert.True(SharedCount(boxType) == shared.Count, $"{at}: the shared stack holds {SharedCount(boxType)}, the model says {shared.Count}");
                Assert.True(LocalCount(boxType) == local.Count, $"{at}: this thread's stack holds {LocalCount(boxType)}, the model says {local.Count}");
                Assert.True(shared.Count <= Math.Max(cap, retainedWhenLowered), $"{at}: the shared stack holds {shared.Count} past the cap {cap}");
                Assert.True(SpindlePool.RetainedCount >= shared.Count, $"{at}: RetainedCount {SpindlePool.RetainedCount} is less than this one pool's {shared.Count}");
            }
            var distinct = new HashSet<object>(live.Select(c => c.Box), ReferenceEqualityComparer.Instance);
            Assert.True(distinct.Count == live.Count, $"{at}: two live calls share a box");
            Assert.True(live.TrueForAll(c => !local.Contains(c.Box) && !shared.Contains(c.Box)), $"{at}: a live box is in the pool");
        }

        // Ends every call, so nothing is left waiting on a promise.
        foreach (Call c in live.ToArray())
        {
            if (!c.Done)
            {
                c.Promise.SetResult(0);
            }
            if (!c.Forgotten)
            {
                ReadAtTheEnd(c.Task, c.Error);
            }
        }

        static void ReadAtTheEnd(SpindleTask<Payload> task, Exception? error)
        {
            try
            {
                task.GetAwaiter().GetResult();
                Assert.Null(error);
            }
            catch (InvalidTimeZoneException e)
            {
                Assert.Same(error, e);
            }
        }
    }

    private static int SharedCount(Type boxType)
        => (int)typeof(ObjectPool<>).MakeGenericType(boxType).GetProperty("Count", BindingFlags.Public | BindingFlags.NonPublic | BindingFlags.Static)!.GetValue(null)!;

    private static int LocalCount(Type boxType)
        => (int)typeof(ObjectPool<>).MakeGenericType(boxType).GetProperty("LocalCount", BindingFlags.Public | BindingFlags.NonPublic | BindingFlags.Static)!.GetValue(null)!;

    /// <summary>A pooled box keeps nothing of its last use.</summary>
    private static void AssertCleared(object box, string at)
    {
        const BindingFlags Instance = BindingFlags.Public | BindingFlags.NonPublic | BindingFlags.Instance;
        Type type = box.GetType();
        object stateMachine = type.GetField("StateMachine", Instance)!.GetValue(box)!;
        Assert.True(stateMachine.Equals(Activator.CreateInstance(stateMachine.GetType())), $"{at}: a pooled box kept its state machine (locals, awaiters)");
        Assert.True(typeof(StateMachineBoxBase).GetField("_context", Instance)!.GetValue(box) is null, $"{at}: a pooled box kept its ExecutionContext");
        Type? spindleBox = type;
        while (spindleBox!.GetField("_core", Instance | BindingFlags.DeclaredOnly) is null)
        {
            spindleBox = spindleBox.BaseType;
        }
        object core = spindleBox.GetField("_core", Instance | BindingFlags.DeclaredOnly)!.GetValue(box)!;
        foreach (string field in new[] { "_continuation", "_stateOrError", "_result" })
        {
            object? value = core.GetType().GetField(field, Instance)!.GetValue(core);
            Assert.True(value is null, $"{at}: a pooled box's core kept {field} = {value}");
        }
        int word = (int)core.GetType().GetField("_word", Instance)!.GetValue(core)!;
        Assert.True((word & (7 << 16)) == 0, $"{at}: a pooled box's core is not pending (word {word:X})");
    }

    [Fact]
    public async Task RentAndReturnAcrossThreads_NoBoxIsEverLiveTwice_AndEachCallSeesItsOwnResult()
    {
        // Three kinds of thread: starters rent boxes (a call suspends on its promise), completers resume them (the method
        // finishes on the completer's thread), readers read the tasks (the box returns to the reader's pool stack). So
        // boxes circulate between threads' stacks through the shared one, under a small cap that makes chunks drop.
        int cap = SpindlePool.MaxRetainedPerType;
        Type boxType = typeof(ObjectPool<>).MakeGenericType(BoxTypeOfSuspendAcross());
        SpindlePool.MaxRetainedPerType = 48;
        try
        {
            int calls = TestUtil.Stress(100_000);
            var toComplete = new BlockingCollection<(Promise<int> Promise, SpindleTask<int> Task, object Box, int Add)>(256);
            var toRead = new BlockingCollection<(SpindleTask<int> Task, object Box, int Add, int Value)>(256);
            var liveBoxes = new ConcurrentDictionary<object, int>(ReferenceEqualityComparer.Instance);
            int doubleHandOuts = 0;
            int wrongResults = 0;
            int forgotten = 0;

            Task starter(int id) => TestUtil.RunOnThread(() =>
            {
                for (int i = id; i < calls; i += 2)
                {
                    var promise = new Promise<int>();
                    SpindleTask<int> task = SuspendAcross(promise, i);
                    object box = task._source!;
                    if (!liveBoxes.TryAdd(box, i))
                    {
                        Interlocked.Increment(ref doubleHandOuts);
                    }
                    toComplete.Add((promise, task, box, i));
                }
            }, "starter " + id);

            Task completer = TestUtil.RunOnThread(() =>
            {
                foreach (var (promise, task, box, add) in toComplete.GetConsumingEnumerable())
                {
                    int value = add * 3;
                    if (add % 7 == 0)
                    {
                        // Forgotten: the box reads itself on this thread as the method finishes.
                        Assert.True(liveBoxes.TryRemove(box, out _));
                        task.Forget();
                        Interlocked.Increment(ref forgotten);
                        promise.SetResult(value);
                        continue;
                    }
                    promise.SetResult(value);
                    toRead.Add((task, box, add, value));
                }
                toRead.CompleteAdding();
            }, "completer");

            Task reader(int id) => TestUtil.RunOnThread(() =>
            {
                foreach (var (task, box, add, value) in toRead.GetConsumingEnumerable())
                {
                    // Off the live set before the read: the read returns the box, and another thread may rent it at once.
                    if (!liveBoxes.TryRemove(box, out int owner) || owner != add)
                    {
                        Interlocked.Increment(ref doubleHandOuts);
                    }
                    if (task.GetAwaiter().GetResult() != value + add)
                    {
                        Interlocked.Increment(ref wrongResults);
                    }
                }
            }, "reader " + id);

            Task starters = Task.WhenAll(starter(0), starter(1));
            Task readers = Task.WhenAll(reader(0), reader(1));
            await TestUtil.WithTimeout(starters, TestUtil.StressTimeout(60));
            toComplete.CompleteAdding();
            await TestUtil.WithTimeout(Task.WhenAll(completer, readers), TestUtil.StressTimeout(60));

            Assert.Equal(0, doubleHandOuts);
            Assert.Equal(0, wrongResults);
            Assert.Empty(liveBoxes);
            Assert.True(forgotten > 0);
            int shared = (int)boxType.GetProperty("Count", BindingFlags.Public | BindingFlags.NonPublic | BindingFlags.Static)!.GetValue(null)!;
            Assert.InRange(shared, 0, 48);

            SpindlePool.Trim();
            Assert.Equal(0, (int)boxType.GetProperty("Count", BindingFlags.Public | BindingFlags.NonPublic | BindingFlags.Static)!.GetValue(null)!);
            Assert.Equal(0, (int)boxType.GetProperty("LocalCount", BindingFlags.Public | BindingFlags.NonPublic | BindingFlags.Static)!.GetValue(null)!);
        }
        finally
        {
            SpindlePool.MaxRetainedPerType = cap;
        }
    }

    private static Type BoxTypeOfSuspendAcross()
    {
        var promise = new Promise<int>();
        SpindleTask<int> task = SuspendAcross(promise, 0);
        Type type = task._source!.GetType();
        promise.SetResult(0);
        task.GetAwaiter().GetResult();
        return type;
    }
}

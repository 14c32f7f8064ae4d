using System;
using System.Diagnostics;
using System.Diagnostics.Metrics;
using System.Linq;
using System.Reflection;
using System.Reflection.Emit;
using System.Runtime.CompilerServices;
using System.Runtime.Loader;
using System.Threading;

namespace SpindleLib.Tests.Threading;

/// <summary>
/// Spindle loaded in a collectible <see cref="AssemblyLoadContext"/> (Godot 4's .NET editor, on every rebuild) lets the
/// context unload: its Unloading event stops the shared workers, <see cref="TimerWheel.Default"/>'s thread and the meter
/// (<see cref="CollectibleContext"/>; docs/decisions.md section 55 found all three pinning the context for ever). The tests load
/// a second copy of Spindle.dll (the one this project references) into a new collectible context and drive it only
/// through reflection on its public API, from helpers that return nothing of the context's but a
/// <see cref="WeakReference"/>.
/// </summary>
[Collection(SequentialCollection.Name)]
public class CollectibleContextTests
{
    private const string NotOnNetStandard = "netstandard2.1 has no collectible AssemblyLoadContext to unload (Unity, Mono); Spindle subscribes nothing there";

    // A behaviour bound, not a speed: the review measured 46-59 ms for this scenario once the three roots were stopped.
    private static readonly TimeSpan UnloadBound = TimeSpan.FromSeconds(10);

    [NetBuildFact(NotOnNetStandard)]
    public void CollectibleContext_AfterWorkersDelaysPeriodicTimerFrameLoopAndMetrics_Unloads()
    {
        var outcome = new StrongBox<string?>();
        WeakReference context = RunScenarioInCollectibleContext(outcome, callAfterUnloading: false);
        Assert.True(WaitUntilCollected(context), "The collectible context that loaded Spindle was still alive " + UnloadBound + " after Unload(). " + outcome.Value);
        Assert.Equal("subscribed", outcome.Value);
    }

    [NetBuildFact(NotOnNetStandard)]
    public void CollectibleContext_SpindleCallsAfterUnloading_ThrowObjectDisposedSayingTheContextIsUnloading()
    {
        var outcome = new StrongBox<string?>();
        WeakReference context = RunScenarioInCollectibleContext(outcome, callAfterUnloading: true);
        Assert.True(WaitUntilCollected(context), "The collectible context was still alive " + UnloadBound + " after Unload(). " + outcome.Value);
        // A job's Schedule, Run, Delay on Default, Yield and a blocking wait on a pending task: each refuses at once, none
        // hangs (a job scheduled after the unloading was queued to the stopped workers, and an await of it never ended).
        // A cancelled delay runs its continuation on the cancelling thread, as it always does; a continuation handed to
        // the workers by a completion (a promise made with runContinuationsAsynchronously) is dropped, and neither
        // completer sees an exception.
        Assert.Equal("Schedule: ObjectDisposedException unloading; " +
                     "Run: ObjectDisposedException unloading; Delay: ObjectDisposedException unloading; Yield: ObjectDisposedException unloading; " +
                     "Block: ObjectDisposedException unloading; " +
                     "Cancel: no exception; SetResult: no exception; resumed by Cancel 1, by SetResult 0", outcome.Value);
    }

    [Fact]
    public void DefaultContext_NeverSubscribes()
    {
        Spindle.Run(() => { }).GetAwaiter().GetResult();
        Spindle.Delay(1).GetAwaiter().GetResult();
        _ = new FrameLoop();
        Assert.False(AssemblyLoadContext.GetLoadContext(typeof(Spindle).Assembly)!.IsCollectible);
        Assert.Equal(CollectibleContext.NotCollectible, CollectibleContext.State);
        Assert.False(CollectibleContext.IsUnloading);
    }

    [Fact]
    public void WorkerPoolDispose_BusyAndParkedWorkersExitWithoutBeingJoined()
    {
        var pool = new WorkerPool(2, "alc59 dispose worker");
        var threads = new Thread[2];
        using var bothRunning = new Barrier(2);
        using var release = new ManualResetEventSlim();
        using var parkedOneDone = new ManualResetEventSlim();
        pool.Queue(new ActionItem(() =>
        {
            threads[0] = Thread.CurrentThread;
            bothRunning.SignalAndWait();
            release.Wait(); // busy while the pool is disposed
        }));
        pool.Queue(new ActionItem(() =>
        {
            threads[1] = Thread.CurrentThread;
            bothRunning.SignalAndWait();
            parkedOneDone.Set(); // then this worker runs dry and parks
        }));
        Assert.True(parkedOneDone.Wait(UnloadBound));
        pool.Dispose();
        Assert.True(threads[1].Join(UnloadBound), "a worker parked (or about to park) when the pool was disposed did not exit");
        release.Set();
        Assert.True(threads[0].Join(UnloadBound), "a worker busy when the pool was disposed did not exit after its item");
    }

    /// <summary>
    /// Loads Spindle into a new collectible context, runs the scenario there by reflection, and unloads it. Everything of
    /// the context stays in this frame (and in the context's own Unloading handler): only a weak reference leaves it.
    /// </summary>
    [MethodImpl(MethodImplOptions.NoInlining)]
    private static WeakReference RunScenarioInCollectibleContext(StrongBox<string?> outcome, bool callAfterUnloading)
    {
        var alc = new AssemblyLoadContext("alc59 collectible Spindle", isCollectible: true);
        Assembly spindle = alc.LoadFromAssemblyPath(typeof(Spindle).Assembly.Location);
        Assert.NotSame(typeof(Spindle).Assembly, spindle);
        Type api = spindle.GetType("SpindleLib.Spindle", throwOnError: true)!;
        MethodInfo run = api.GetMethod("Run", new[] { typeof(Action) })!;
        MethodInfo delay = api.GetMethod("Delay", new[] { typeof(int), typeof(CancellationToken) })!;
        MethodInfo yield = api.GetMethod("Yield", Type.EmptyTypes)!;

        // Workers (and the meter, which the pool creates).
        int ran = 0;
        for (int i = 0; i < 10; i++)
        {
            Wait(run.Invoke(null, new object[] { (Action)(() => Interlocked.Increment(ref ran)) })!);
        }
        Assert.Equal(10, ran);
        Wait(yield.Invoke(null, null)!);
        // TimerWheel.Default's thread: a delay from this thread (not a worker) goes to its main shard.
        Wait(delay.Invoke(null, new object[] { 5, CancellationToken.None })!);
        // A delay left pending (dropped by the unload) and a periodic timer on Default that ticks and is never disposed.
        _ = delay.Invoke(null, new object[] { 300_000, CancellationToken.None });
        Type periodicType = spindle.GetType("SpindleLib.SpindlePeriodicTimer", throwOnError: true)!;
        Type wheelType = spindle.GetType("SpindleLib.TimerWheel", throwOnError: true)!;
        object periodic = Activator.CreateInstance(periodicType, TimeSpan.FromMilliseconds(2), null)!;
        MethodInfo tick = periodicType.GetMethod("WaitForNextTickAsync", new[] { typeof(CancellationToken) })!;
        for (int i = 0; i < 3; i++)
        {
            Wait(tick.Invoke(periodic, new object[] { CancellationToken.None })!);
        }
        // A frame loop run from this thread.
        object loop = Activator.CreateInstance(spindle.GetType("SpindleLib.FrameLoop", throwOnError: true)!)!;
        MethodInfo runFrame = loop.GetType().GetMethod("RunFrame", Type.EmptyTypes)!;
        for (int i = 0; i < 3; i++)
        {
            runFrame.Invoke(loop, null);
        }
        // A metric read: a listener collects the observable instruments (both copies' meters are named "Spindle").
        long measurements = 0;
        using (var listener = new MeterListener())
        {
            listener.InstrumentPublished = (instrument, l) =>
            {
                if (instrument.Meter.Name == "Spindle")
                {
                    l.EnableMeasurementEvents(instrument);
                }
            };
            listener.SetMeasurementEventCallback<long>((_, _, _, _) => Interlocked.Increment(ref measurements));
            listener.SetMeasurementEventCallback<int>((_, _, _, _) => Interlocked.Increment(ref measurements));
            listener.Start();
            listener.RecordObservableInstruments();
        }
        Assert.True(measurements > 0);
        Assert.NotNull(wheelType.GetProperty("Default")!.GetValue(null));

        Type collectible = spindle.GetType("SpindleLib.CollectibleContext", throwOnError: true)!;
        int state = (int)collectible.GetProperty("State", BindingFlags.NonPublic | BindingFlags.Static)!.GetValue(null)!;
        outcome.Value = state == CollectibleContext.Subscribed ? "subscribed" : "state " + state;

        if (callAfterUnloading)
        {
            // A delay on Default with a continuation waiting, cancelled after the unloading: the completing thread (here
            // the one calling Cancel; in a game, maybe a BCL timer's) hands the continuation to the stopped workers.
            var cts = new CancellationTokenSource();
            object pending = delay.Invoke(null, new object[] { 300_000, cts.Token })!;
            object pendingAwaiter = pending.GetType().GetMethod("GetAwaiter", Type.EmptyTypes)!.Invoke(pending, null)!;
            object blockedOn = delay.Invoke(null, new object[] { 300_000, cts.Token })!;
            int resumedByCancel = 0;
            pendingAwaiter.GetType().GetMethod("OnCompleted", new[] { typeof(Action) })!
                .Invoke(pendingAwaiter, new object[] { (Action)(() => Interlocked.Increment(ref resumedByCancel)) });
            // A promise whose completion hands its waiter to the workers, set after the unloading.
            Type promiseType = spindle.GetType("SpindleLib.Promise", throwOnError: true)!;
            object promise = Activator.CreateInstance(promiseType, new object[] { true })!; // Promise(runContinuationsAsynchronously: true)
            object promised = promiseType.GetProperty("Task")!.GetValue(promise)!;
            object promisedAwaiter = promised.GetType().GetMethod("GetAwaiter", Type.EmptyTypes)!.Invoke(promised, null)!;
            int resumedBySet = 0;
            promisedAwaiter.GetType().GetMethod("OnCompleted", new[] { typeof(Action) })!
                .Invoke(promisedAwaiter, new object[] { (Action)(() => Interlocked.Increment(ref resumedBySet)) });
            // A struct job of the context's own IJob (Spindle.dll has none), emitted into the context, and its Schedule.
            Type jobType = EmitNoOpJob(alc, spindle.GetType("SpindleLib.IJob", throwOnError: true)!);
            Type handleType = spindle.GetType("SpindleLib.JobHandle", throwOnError: true)!;
            MethodInfo schedule = spindle.GetType("SpindleLib.JobExtensions", throwOnError: true)!.GetMethods()
                .Single(m => m.Name == "Schedule" && m.GetParameters().Length == 2)
                .MakeGenericMethod(jobType);
            // Added after Spindle's own handler (subscribed at the first root above), so it runs after it.
            alc.Unloading += _ =>
            {
                outcome.Value =
                    "Schedule: " + Describe(() => schedule.Invoke(null, new[] { Activator.CreateInstance(jobType)!, Activator.CreateInstance(handleType)! })) + "; " +
                    "Run: " + Describe(() => run.Invoke(null, new object[] { (Action)(() => { }) })) +
                    "; Delay: " + Describe(() => delay.Invoke(null, new object[] { 10, CancellationToken.None })) +
                    "; Yield: " + Describe(() => { object awaitable = yield.Invoke(null, null)!; Wait(awaitable); }) +
                    "; Block: " + Describe(() => Wait(blockedOn)) +
                    "; Cancel: " + Describe(cts.Cancel) +
                    "; SetResult: " + Describe(() => promiseType.GetMethod("SetResult", Type.EmptyTypes)!.Invoke(promise, null));
                Thread.Sleep(50);
                outcome.Value += "; resumed by Cancel " + Volatile.Read(ref resumedByCancel) + ", by SetResult " + Volatile.Read(ref resumedBySet);
            };
        }
        alc.Unload();
        return new WeakReference(alc);
    }

    /// <summary>
    /// A public struct that implements <paramref name="jobInterface"/> (the context's <c>IJob</c>) with an empty
    /// <c>Execute</c>, emitted into <paramref name="context"/> (a collectible assembly, unloaded with it).
    /// </summary>
    private static Type EmitNoOpJob(AssemblyLoadContext context, Type jobInterface)
    {
        using (context.EnterContextualReflection())
        {
            AssemblyBuilder assembly = AssemblyBuilder.DefineDynamicAssembly(new AssemblyName("alc61 jobs"), AssemblyBuilderAccess.RunAndCollect);
            TypeBuilder type = assembly.DefineDynamicModule("alc61 jobs").DefineType(
                "NoOpJob", TypeAttributes.Public | TypeAttributes.Sealed | TypeAttributes.SequentialLayout, typeof(ValueType), new[] { jobInterface });
            MethodBuilder execute = type.DefineMethod(
                "Execute", MethodAttributes.Public | MethodAttributes.Virtual | MethodAttributes.Final | MethodAttributes.HideBySig | MethodAttributes.NewSlot,
                typeof(void), Type.EmptyTypes);
            execute.GetILGenerator().Emit(OpCodes.Ret);
            type.DefineMethodOverride(execute, jobInterface.GetMethod("Execute")!);
            return type.CreateType();
        }
    }

    private static string Describe(Action call)
    {
        try
        {
            call();
            return "no exception";
        }
        catch (TargetInvocationException ex) when (ex.InnerException is { } inner)
        {
            return inner.GetType().Name + (inner.Message.Contains("is unloading", StringComparison.Ordinal) ? " unloading" : " (" + inner.Message + ")");
        }
        catch (Exception ex)
        {
            return ex.GetType().Name + (ex.Message.Contains("is unloading", StringComparison.Ordinal) ? " unloading" : " (" + ex.Message + ")");
        }
    }

    /// <summary>Blocks on a task or awaitable of the other copy of Spindle: <c>GetAwaiter().GetResult()</c>, by reflection.</summary>
    private static void Wait(object awaitable)
    {
        object awaiter = awaitable.GetType().GetMethod("GetAwaiter", Type.EmptyTypes)!.Invoke(awaitable, null)!;
        if (awaitable.GetType().Name == "WorkerAwaitable")
        {
            // Spindle.Yield's awaiter has no blocking GetResult: the continuation resumes on a worker.
            bool completed = (bool)awaiter.GetType().GetProperty("IsCompleted")!.GetValue(awaiter)!;
            if (!completed)
            {
                using var resumed = new ManualResetEventSlim();
                awaiter.GetType().GetMethod("OnCompleted", new[] { typeof(Action) })!.Invoke(awaiter, new object[] { (Action)resumed.Set });
                Assert.True(resumed.Wait(UnloadBound));
            }
            return;
        }
        awaiter.GetType().GetMethod("GetResult", Type.EmptyTypes)!.Invoke(awaiter, null);
    }

    /// <summary>Collects until the context is gone, for at most <see cref="UnloadBound"/>.</summary>
    private static bool WaitUntilCollected(WeakReference context)
    {
        var clock = Stopwatch.StartNew();
        while (context.IsAlive)
        {
            if (clock.Elapsed > UnloadBound)
            {
                return false;
            }
            GC.Collect();
            GC.WaitForPendingFinalizers();
            GC.Collect();
            if (context.IsAlive)
            {
                Thread.Sleep(10);
            }
        }
        return true;
    }
}

#if DEBUG
using System;
using System.Reflection;
using System.Threading;
using SpindleLib.Tests.Sources;

namespace SpindleLib.Tests.Scopes;

/// <summary>
/// A scope's child completed on another thread while the scope is still registering its observer: the observer has two
/// holds, the registration's and the continuation's, dropped by the two threads at once, and exactly one of the drops
/// returns it to its pool (seen through the pool's Debug hook, <c>PoolTestHooks.Returning</c>). With the hold count's
/// decrement made a plain <c>--</c> (mutation testing mut53c, mutant T2) a drop was lost, and the observer went to the
/// GC instead of its pool: a plain racer passed with the mutant, so the two drops meet at a Debug hook
/// (<c>TaskScope.TestHookBeforeObserverRelease</c>, through <see cref="HookMeeting"/>). Debug only (the hooks); run alone: its two threads must run at once, and the hook is
/// process-wide.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class ScopeChildObserverReleaseRaceTests
{
    private static readonly Type s_observerType = typeof(TaskScope).GetNestedType("ChildObserver", BindingFlags.NonPublic)!;

    [Fact]
    public void AChildCompletedWhileItsObserverRegisters_ReturnsTheObserverToItsPoolOnce()
    {
        int returned = 0;
        Action<object>? saved = PoolTestHooks.Returning;
        var race = new RaceRounds("ScopeChildObserverReleaseRaceTests", TestUtil.Stress(Spinning.Helps ? 50_000 : 2_000))
        {
            TimeCap = TimeSpan.FromSeconds(5),
            ClearHooks = () =>
            {
                PoolTestHooks.Returning = saved;
                TaskScope.TestHookBeforeObserverRelease = null;
            },
        };
        PoolTestHooks.Returning = o =>
        {
            saved?.Invoke(o);
            if (o.GetType() == s_observerType)
            {
                Interlocked.Increment(ref returned);
            }
        };
        var meeting = new HookMeeting();
        int current = -1;
        Thread test = Thread.CurrentThread;
        Thread? racing = null;
        TaskScope.TestHookBeforeObserverRelease = () =>
        {
            Thread thread = Thread.CurrentThread;
            if (thread == test || thread == racing)
            {
                meeting.Arrive(thread == test ? 0 : 1, Volatile.Read(ref current));
            }
        };
        var scope = new TaskScope();
        race.Run(round =>
        {
            var child = new Promise();
            int before = Volatile.Read(ref returned);
            Volatile.Write(ref current, round);
            // The racing thread completes the child once this thread, its observer registered, is at the drop of the
            // registration's hold; the child's continuation then drops its own there too, and the two meet.
            (Exception? mine, Exception? theirs) = race.Racer.RunOnceReady(
                round,
                () => meeting.WaitFor(0, round),
                spins: 0,
                () =>
                {
                    racing ??= Thread.CurrentThread;
                    child.SetResult();
                },
                () => scope.Run(static (p, _) => p.Task, child));
            Assert.Null(mine);
            Assert.Null(theirs);
            Assert.True(meeting.Missed < 0, $"round {meeting.Missed}: the two drops of the observer's holds never met");
            int returns = Volatile.Read(ref returned) - before;
            if (returns != 1)
            {
                race.Fail($"the child's observer went back to its pool {returns} times");
            }
        });
        Assert.Equal(0, scope.RunningChildren);
        scope.DisposeAsync().AsTask().GetAwaiter().GetResult();
        race.AssertNone("a child completed while its observer registers");
    }
}
#endif

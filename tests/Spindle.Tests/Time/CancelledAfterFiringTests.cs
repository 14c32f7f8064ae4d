using System;
using System.Collections.Concurrent;
using System.Reflection;
using System.Threading;
using System.Threading.Tasks;

using SpindleLib.Tests.Sources;

namespace SpindleLib.Tests.Time;

#if DEBUG // the timer's test hook exists only in a Debug build of the library
/// <summary>
/// A timeout whose wait ends just after its timer fired, before the timer's continuation claims it: the wait's end
/// cancels the timer after firing (<c>TimerCancel.CancelledAfterFiring</c>), reads the node itself, and leaves the
/// continuation to drop its own hold, which it does when it finds the claim taken. Its owner must then not count the
/// continuation's hold as dropped: the owner is still to be touched by that continuation. Both owners that end a wait
/// early and recycle at once when the cancel took the node (a timed <see cref="Signal"/> wait's timeout object, and the
/// one-input WhenAll behind <c>WithTimeout</c>, <c>docs/decisions.md</c> section 58) are driven into that window by the
/// Debug hook before the continuation's claim: the wait ends and is read on another thread while the advancing thread
/// waits in the hook. A mutant that took this outcome for a plain cancel recycled the owner there; the continuation
/// then claimed a cleared timer and threw a NullReferenceException reading its node, which is null once cleared, before
/// it dropped any hold: so the count the test reads stays where the early recycle left it.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class CancelledAfterFiringTests
{
    private static readonly TimeSpan Tick = TimeSpan.FromMilliseconds(1);

    private static readonly FieldInfo s_references = typeof(CombinatorCore).GetField("_references", BindingFlags.Instance | BindingFlags.NonPublic)!;
    private static readonly FieldInfo s_holds = typeof(SignalTimeout).GetField("_holds", BindingFlags.Instance | BindingFlags.NonPublic)!;
    private static readonly FieldInfo s_signalOfTimeout = typeof(SignalTimeout).GetField("_signal", BindingFlags.Instance | BindingFlags.NonPublic)!;
    private static readonly FieldInfo s_waitState = typeof(Signal).GetField("_waitState", BindingFlags.Instance | BindingFlags.NonPublic)!;

    [Fact]
    public void WithTimeout_ItsTaskFinishesAndIsReadAfterTheTimerFired_TheCombinatorIsRecycledOnceByTheContinuation()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var promise = new Promise<int>();
        SpindleTask<int> timed = promise.Task.WithTimeout(Tick, wheel);
        var combinator = (Combinator<int>)timed._source!;
        int referencesAtTheHook = -1;
        Exception? failure = null;
        int read = 0;
        Run(clock, () =>
        {
            // The task finishes on another thread and the combined task is read there, while the timer's continuation
            // waits here: the finish takes the race and cancels the timer after firing.
            try
            {
                promise.SetResult(7);
                read = timed.GetAwaiter().GetResult();
            }
            catch (Exception ex)
            {
                failure = ex;
            }
            referencesAtTheHook = (int)s_references.GetValue(combinator)!;
        }, out ConcurrentQueue<Exception> reports);
        Assert.Null(failure);
        Assert.Equal(7, read); // the task finished first: its CompleteAll claimed the combined task
        Assert.Equal(1, referencesAtTheHook); // the continuation's hold, still held after the reader's
        Assert.Equal(0, (int)s_references.GetValue(combinator)!); // dropped by the continuation, which recycled it
        Assert.Empty(reports);
        Assert.Equal(0, wheel.PendingCount);
    }

    [Fact]
    public void SignalWaitAsync_SetAndReadAfterTheTimerFired_TheTimeoutIsReturnedOnceByTheContinuation()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        var signal = new Signal();
        SpindleTask<bool> wait = signal.WaitAsync(Tick, wheel);
        object state = s_waitState.GetValue(signal)!;
        var timeout = (SignalTimeout)state.GetType().GetField("Timeout")!.GetValue(state)!;
        int holdsAtTheHook = -1;
        Exception? failure = null;
        bool? result = null;
        Run(clock, () =>
        {
            try
            {
                signal.Set();
                result = wait.GetAwaiter().GetResult(); // ends the wait: stops its timer, after it fired
            }
            catch (Exception ex)
            {
                failure = ex;
            }
            holdsAtTheHook = (int)s_holds.GetValue(timeout)!;
        }, out ConcurrentQueue<Exception> reports);
        Assert.Null(failure);
        Assert.True(result, "the set came first: the wait took it");
        Assert.Equal(1, holdsAtTheHook); // the continuation's hold, still held after the signal's
        Assert.Equal(0, (int)s_holds.GetValue(timeout)!);
        Assert.Null(s_signalOfTimeout.GetValue(timeout)); // cleared by the continuation's release, once
        Assert.Empty(reports);
        Assert.Equal(0, wheel.PendingCount);
    }

    /// <summary>
    /// Advances <paramref name="clock"/> by one tick, firing the test's one timer; its continuation, before it claims the
    /// timer, waits on this thread while <paramref name="endTheWait"/> runs on another. Fails if the hook never ran there. <paramref name="reports"/>: the run's unobserved null dereferences (a continuation that read a recycled owner's cleared timer).
    /// </summary>
    private static void Run(ManualClock clock, Action endTheWait, out ConcurrentQueue<Exception> reports)
    {
        int advancing = Environment.CurrentManagedThreadId;
        int hooked = 0;
        using UnobservedReports watch = UnobservedReports.Start(static ex => ex is NullReferenceException);
        TimeoutTimer.TestHookBeforeFiredClaim = () =>
        {
            if (Environment.CurrentManagedThreadId == advancing && Interlocked.Exchange(ref hooked, 1) == 0)
            {
                Assert.True(Task.Run(endTheWait).Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)), "the wait's end did not return");
            }
        };
        try
        {
            clock.Advance(Tick);
        }
        finally
        {
            TimeoutTimer.TestHookBeforeFiredClaim = null;
        }
        Assert.Equal(1, hooked);
        reports = watch.Reports;
    }
}
#endif

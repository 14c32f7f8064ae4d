#if DEBUG
using System;
using System.Runtime.CompilerServices;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// A promise's owner resets it while a holder of the old use's task awaits it at that instant (the race Promise.Reset's
/// remarks allow: such an await "may read either use"). The Debug-only hook in SourceCore.Reset puts the await between
/// the reset's look at the word and its change of it.
/// </summary>
public sealed class ResetRaceTests
{
    /// <summary>
    /// Before, Reset read the word, cleared the fields and stored the next version with a plain write: an await that
    /// registered in between was wiped (its continuation cleared, its Waiting state overwritten by the next use's Pending),
    /// so it was never run and nothing threw: the awaiting code hung for ever (failed 5 of 5 runs: the reset returned,
    /// and the continuation had not run after the promise was set). Now the reset claims the word with a CAS first: the
    /// await that registered keeps its use, the reset is refused (an await is pending), and the set runs it.
    /// </summary>
    [Fact]
    public void AwaitOfThePendingUse_RegisteringAsTheOwnerResets_IsRunOrRefused_NeverLost()
    {
        var promise = new Promise<int>();
        SpindleTask<int> task = promise.Task; // pending, awaited by nobody yet: a reset may start the next use
        int ran = 0;
        Exception? registration = null;
        SourceCoreTestHooks.ResetSawState = () =>
        {
            SourceCoreTestHooks.ResetSawState = null;
            registration = Record.Exception(() => task.GetAwaiter().OnCompleted(() => ran++));
        };
        Exception? reset;
        try
        {
            reset = Record.Exception(() => promise.Reset());
        }
        finally
        {
            SourceCoreTestHooks.ResetSawState = null;
        }
        Assert.Null(registration); // the await registered on the use it held, still current at that instant
        promise.SetResult(5);
        Assert.True(ran == 1 || registration is not null, $"the await that registered was lost (the reset {(reset is null ? "returned" : "threw")})");
        Assert.IsType<InvalidOperationException>(reset); // an await was pending: the reset is refused, as without the race
        Assert.Equal(5, task.GetAwaiter().GetResult());
    }

    /// <summary>
    /// Completes <paramref name="promise"/> with <paramref name="value"/> while another thread resets it between the
    /// completer's claim and its publication (the Debug hook <c>SourceCoreTestHooks.CompletionClaimed</c> holds the
    /// completer there): the set's result, and what the reset threw. See <see cref="CompleteWhileAResetMeetsTheClaim"/>.
    /// </summary>
    private static (bool Set, Exception? Reset) SetWhileAResetMeetsTheClaim(Promise<int> promise, int value, bool resetWaits)
        => CompleteWhileAResetMeetsTheClaim(promise, () => promise.TrySetResult(value), resetWaits);

    /// <summary>
    /// As <see cref="SetWhileAResetMeetsTheClaim"/>, with any completion of the promise's current use (a TrySet* by token,
    /// say). With <paramref name="resetWaits"/> false the completer is held until the reset has returned (it is refused
    /// at once); with it true the completer is held for 200 ms, the reset must not return meanwhile (it waits out the
    /// claim), and it must return once the completer has published.
    /// </summary>
    internal static (bool Set, Exception? Reset) CompleteWhileAResetMeetsTheClaim(Promise<int> promise, Func<bool> complete, bool resetWaits)
    {
        Exception? reset = null;
        int returned = 0;
        bool returnedWhileHeld = false;
        SourceCoreTestHooks.CompletionClaimed = () =>
        {
            SourceCoreTestHooks.CompletionClaimed = null;
            _ = TestUtil.RunOnThread(() =>
            {
                try
                {
                    reset = Record.Exception(promise.Reset);
                }
                finally
                {
                    Volatile.Write(ref returned, 1);
                }
            }, "resetter");
            if (resetWaits)
            {
                Thread.Sleep(200);
                returnedWhileHeld = Volatile.Read(ref returned) == 1;
            }
            else
            {
                TestUtil.SpinUntil(() => Volatile.Read(ref returned) == 1, () => "the reset did not return while the completer held its claim");
            }
        };
        bool set;
        try
        {
            set = complete();
        }
        finally
        {
            SourceCoreTestHooks.CompletionClaimed = null;
        }
        Assert.False(returnedWhileHeld, "the reset returned while the completer still held its claim");
        TestUtil.SpinUntil(() => Volatile.Read(ref returned) == 1, () => "the reset did not return once the completer had published");
        return (set, reset);
    }

    /// <summary>
    /// A reset that meets a completer of a use nobody awaits (pending, or let go of by a combinator) between its claim and
    /// its publication waits for the publication (a few stores: such a completer resumes nobody and runs no user code),
    /// then resets the completed use: the reset returns, the promise is pending on a new use, the old task is stale. Before,
    /// it threw that a completion was racing it (the actor's late reply by token meeting its asker's next Reset, once in
    /// 200,000 asks in stop 44's review); and before that, that "an await on its current use is pending", of a use nobody
    /// awaited.
    /// </summary>
    [Fact]
    public void Reset_MeetingACompleterOfAnUnawaitedUse_WaitsForItsPublication_AndStartsACleanUse()
    {
        var promise = new Promise<int>();
        SpindleTask<int> old = promise.Task;
        short token = promise.Token;
        (bool set, Exception? reset) = SetWhileAResetMeetsTheClaim(promise, 42, resetWaits: true);
        Assert.True(set);
        Assert.Null(reset);
        AssertResetToACleanUse(promise, old, token);
    }

    /// <summary>The same with a use a WhenAny let go of (its waiter left): the reset waits out the claim.</summary>
    [Fact]
    public void Reset_MeetingACompleterOfALetGoUse_WaitsForItsPublication_AndStartsACleanUse()
    {
        var promise = new Promise<int>();
        var other = new Promise<int>();
        SpindleTask<int> old = promise.Task;
        short token = promise.Token;
        SpindleTask<(int Index, int Result1, int Result2)> race = SpindleTask.WhenAny(old, other.Task);
        other.SetResult(1); // the race is decided: the WhenAny lets go of the promise's use
        Assert.Equal(1, race.GetAwaiter().GetResult().Index);
        (bool set, Exception? reset) = CompleteWhileAResetMeetsTheClaim(promise, () => promise.TrySetResult(token, 42), resetWaits: true);
        Assert.True(set);
        Assert.Null(reset);
        AssertResetToACleanUse(promise, old, token);
    }

    /// <summary>A reset that waited out a claim: a new pending use that the old token cannot complete, the old task stale.</summary>
    private static void AssertResetToACleanUse(Promise<int> promise, SpindleTask<int> old, short token)
    {
        Assert.False(promise.IsCompleted);
        Assert.NotEqual(token, promise.Token);
        Assert.Throws<InvalidOperationException>(() => old.GetAwaiter().GetResult()); // the old use is over
        Assert.False(promise.TrySetResult(token, 43));
        Assert.True(promise.TrySetResult(7));
        Assert.Equal(7, promise.Task.GetAwaiter().GetResult());
    }

    /// <summary>
    /// A reset that meets a completer about to resume an awaiter is refused naming that race, before it writes anything:
    /// the awaiter runs once and reads the outcome.
    /// (A reset that waited for the publication and then cleared the fields raced that awaiter's read: a forced run read
    /// 0 for 42, the cleared result taken as a success, in 1 of about 40 runs.)
    /// </summary>
    [Fact]
    public void Reset_MeetingACompleterAboutToResumeAnAwaiter_IsRefused_AndTheAwaiterReadsTheOutcome()
    {
        var promise = new Promise<int>();
        SpindleTask<int> old = promise.Task;
        var awaiting = RecordedRead.On(old);
        (bool set, Exception? reset) = SetWhileAResetMeetsTheClaim(promise, 42, resetWaits: false);
        Assert.True(set);
        Assert.Equal(SourceCore<VoidResult>.ResetWhileCompletingMessage, Assert.IsType<InvalidOperationException>(reset).Message);
        Assert.Equal(1, awaiting.Ran); // run inline by the completer, after its publication
        Assert.Equal(42, awaiting.Read);
        AssertCompletedWith42ThenResetsClean(promise, old);
    }

    /// <summary>An awaiter registered on a task that counts its runs and records what it read: the outcome, or the error.</summary>
    internal sealed class RecordedRead
    {
        public int Ran;
        public object? Read;

        public static RecordedRead On(SpindleTask<int> task)
        {
            var recorded = new RecordedRead();
            SpindleTask<int>.Awaiter awaiter = task.GetAwaiter();
            awaiter.OnCompleted(() =>
            {
                recorded.Ran++;
                try
                {
                    recorded.Read = awaiter.GetResult();
                }
                catch (InvalidOperationException e)
                {
                    recorded.Read = e;
                }
            });
            return recorded;
        }
    }

    /// <summary>The use a refused reset left: completed with 42, read again at will; then a reset starts a clean use.</summary>
    private static void AssertCompletedWith42ThenResetsClean(Promise<int> promise, SpindleTask<int> old)
    {
        Assert.True(promise.IsCompleted);
        Assert.Equal(42, old.GetAwaiter().GetResult());
        promise.Reset();
        Assert.False(promise.IsCompleted);
        Assert.Throws<InvalidOperationException>(() => old.GetAwaiter().GetResult()); // the old use is over
        Assert.True(promise.TrySetResult(7));
        Assert.Equal(7, promise.Task.GetAwaiter().GetResult());
    }

    /// <summary>
    /// The other order: the reset claims the word first, and an await of the old use that arrives during the reset is the
    /// await-once error (its token is stale), never a registration on the next use.
    /// </summary>
    [Fact]
    public void AwaitOfTheOldUse_AfterTheResetClaimed_IsTheAwaitOnceError()
    {
        var promise = new Promise<int>();
        SpindleTask<int> old = promise.Task;
        promise.Reset();
        Assert.Throws<InvalidOperationException>(() => old.GetAwaiter().OnCompleted(() => { }));
        int ran = 0;
        promise.Task.GetAwaiter().OnCompleted(() => ran++);
        promise.SetResult(1);
        Assert.Equal(1, ran);
    }
    /// <summary>
    /// Reads completed use <paramref name="task"/> while its owner resets the promise at the instant the read has checked
    /// its token and seen the use completed, before it reads the outcome (the Debug hook
    /// <c>SourceCoreTestHooks.ReadSawCompleted</c> runs the reset there): what the read returned, or what it threw.
    /// </summary>
    private static object? ReadWhileTheOwnerResets(Action reset, Func<object?> read)
    {
        SourceCoreTestHooks.ReadSawCompleted = () =>
        {
            SourceCoreTestHooks.ReadSawCompleted = null;
            reset();
        };
        try
        {
            return read();
        }
        catch (Exception e)
        {
            return e;
        }
        finally
        {
            SourceCoreTestHooks.ReadSawCompleted = null;
        }
    }

    /// <summary>
    /// A read of a completed use that its owner resets at that instant (a reset racing a read, which the promise's remarks
    /// call misuse: it "may read either use") ends in the await-once error: its token went stale under it. Never the reset's
    /// cleared default as a success, which is neither use's outcome. Before, the read checked the token, the reset cleared the
    /// result and stepped the version, and the read returned the cleared 0 for 42 (failed 3 of 3 runs).
    /// </summary>
    [Fact]
    public void ReadOfACompletedUse_AsTheOwnerResetsIt_IsTheAwaitOnceError_NeverTheClearedDefault()
    {
        var promise = new Promise<int>();
        SpindleTask<int> old = promise.Task;
        promise.SetResult(42);
        object? read = ReadWhileTheOwnerResets(promise.Reset, () => old.GetAwaiter().GetResult());
        Assert.False(read is int, $"the read returned {read} as a success: the reset's cleared result, neither use's outcome");
        Assert.IsType<InvalidOperationException>(read); // the await-once error: the use it held was reset under it
        Assert.False(promise.IsCompleted); // the reset went through: the next use starts clean
        Assert.True(promise.TrySetResult(7));
        Assert.Equal(7, promise.Task.GetAwaiter().GetResult());
    }

    /// <summary>
    /// The same for a faulted use of a promise with no value: the read throws (the await-once error), never returns as if
    /// the use had succeeded. Before, the reset's cleared failure slot read as a success (failed 3 of 3 runs).
    /// </summary>
    [Fact]
    public void ReadOfAFaultedUse_AsTheOwnerResetsIt_NeverReadsAsASuccess()
    {
        var promise = new Promise();
        SpindleTask old = promise.Task;
        promise.SetException(new InvalidTimeZoneException("the old use's fault"));
        object? read = ReadWhileTheOwnerResets(promise.Reset, () =>
        {
            old.GetAwaiter().GetResult();
            return "succeeded";
        });
        Assert.False(read is string, "the faulted use read as a success: the reset's cleared failure slot");
        Assert.IsType<InvalidOperationException>(read);
    }

    /// <summary>Reads <paramref name="old"/> on a thread of its own and waits for it: the result, or the exception the read threw.</summary>
    private static object? ReadOnAnotherThread(SpindleTask<int> old)
    {
        object? read = null;
        TestUtil.RunOnThread(() =>
        {
            try
            {
                read = old.GetAwaiter().GetResult();
            }
            catch (Exception e)
            {
                read = e;
            }
        }, "reader").GetAwaiter().GetResult();
        return read;
    }

    /// <summary>
    /// A reset that starts on a pending use, which a completer faults while the reset claims it (the claim's CAS fails and
    /// it finds the use completed), and a read of the old use on another thread while the reset clears it: the read is the
    /// await-once error, as for a use the reset found completed at once. Before, that path cleared the outcome before the
    /// version moved on, so the read saw the old token and a cleared failure slot, and the faulted use read as a success.
    /// </summary>
    [Fact]
    public void ReadOfAUseCompletedWhileTheResetClaimedIt_AsTheResetClearsIt_IsTheAwaitOnceError()
    {
        var promise = new Promise<int>();
        SpindleTask<int> old = promise.Task;
        object? read = null;
        SourceCoreTestHooks.ResetSawState = () =>
        {
            SourceCoreTestHooks.ResetSawState = null;
            promise.SetException(new InvalidTimeZoneException("the old use's fault")); // completed before the claim's CAS
        };
        SourceCoreTestHooks.ResetClearing = () =>
        {
            SourceCoreTestHooks.ResetClearing = null;
            read = ReadOnAnotherThread(old);
        };
        try
        {
            promise.Reset();
        }
        finally
        {
            SourceCoreTestHooks.ResetSawState = null;
            SourceCoreTestHooks.ResetClearing = null;
        }
        Assert.False(read is int, $"the read of the old use returned {read} as a success while the reset cleared it");
        Assert.IsType<InvalidOperationException>(read);
        Assert.False(promise.IsCompleted); // the reset went through: a new, pending use
    }

    /// <summary>
    /// A second reset that meets the first between its hold and its publication (two threads resetting one promise: misuse)
    /// is refused with a message that names that race, before it writes anything, and the first reset goes through. Before,
    /// it got the "an await is pending" message, which named an await that did not exist (1 of 1 run: that message).
    /// </summary>
    [Fact]
    public void SecondReset_WhileTheFirstHoldsTheWord_IsRefusedNamingAReset_AndTheFirstGoesThrough()
    {
        var promise = new Promise<int>();
        SpindleTask<int> old = promise.Task;
        promise.SetResult(42);
        Exception? second = null;
        SourceCoreTestHooks.ResetClearing = () =>
        {
            SourceCoreTestHooks.ResetClearing = null;
            second = Record.Exception(() => TestUtil.RunOnThread(promise.Reset, "second resetter").GetAwaiter().GetResult());
        };
        try
        {
            promise.Reset();
        }
        finally
        {
            SourceCoreTestHooks.ResetClearing = null;
        }
        Assert.Equal(SourceCore<VoidResult>.ResetWhileHeldMessage, Assert.IsType<InvalidOperationException>(second).Message);
        Assert.False(promise.IsCompleted); // the first reset went through: a new, pending use
        Assert.IsType<InvalidOperationException>(Record.Exception(() => old.GetAwaiter().GetResult())); // the old token is stale
        promise.SetResult(7);
        Assert.Equal(7, promise.Task.GetAwaiter().GetResult());
    }

    /// <summary>
    /// A reset of a completed use preempted while it clears the old outcome (the Debug hook
    /// <c>SourceCoreTestHooks.ResetClearing</c>): a read of the old use on another thread then is the await-once error
    /// (the token went stale before the clearing began), never the half-cleared outcome; and a set of the next use made then
    /// waits for the reset to finish, so the clearing never wipes it. Before, the version moved on only after the clearing:
    /// the read saw the old token, a cleared failure slot, and returned 0 for a faulted use as a success (failed 3 of 3 runs).
    /// </summary>
    [Fact]
    public void ReadOfTheOldUse_WhileTheResetClearsIt_IsTheAwaitOnceError_AndASetOfTheNextUseIsKept()
    {
        var promise = new Promise<int>();
        SpindleTask<int> old = promise.Task;
        promise.SetException(new InvalidTimeZoneException("the old use's fault"));
        object? read = null;
        Task? setter = null;
        bool? set = null;
        SourceCoreTestHooks.ResetClearing = () =>
        {
            SourceCoreTestHooks.ResetClearing = null;
            read = ReadOnAnotherThread(old); // the reader does not wait for the reset: it finishes here
            int started = 0;
            setter = TestUtil.RunOnThread(() =>
            {
                Volatile.Write(ref started, 1);
                set = promise.TrySetResult(7); // the next use's set: it may land while the reset still clears
            }, "setter");
            TestUtil.SpinUntil(() => Volatile.Read(ref started) == 1, () => "the setter did not start");
        };
        try
        {
            promise.Reset();
        }
        finally
        {
            SourceCoreTestHooks.ResetClearing = null;
        }
        Assert.False(read is int, $"the read of the old use returned {read} as a success while the reset cleared it");
        Assert.IsType<InvalidOperationException>(read);
        Assert.NotNull(setter);
        setter!.GetAwaiter().GetResult();
        Assert.True(set); // the next use's set completed it, and the reset's clearing did not wipe it:
        Assert.True(promise.IsCompleted);
        Assert.Equal(7, promise.Task.GetAwaiter().GetResult());
    }
}
#endif

#if DEBUG
using System;
using System.Runtime.CompilerServices;

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
}
#endif

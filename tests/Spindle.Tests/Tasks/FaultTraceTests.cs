using System;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// A fault passed on by a reader (a WhenAll, a WhenAny, a task scope) is rethrown with the trace its source saved when it
/// failed, not with whatever an earlier, unrelated await of the same exception object (a preserved task's, a completed
/// promise's) left on the object. Found by the review of the quiet reads (a helper session): the readers passed on the
/// bare exception and captured it again; they now pass on the source's <c>ExceptionDispatchInfo</c> itself.
/// </summary>
public sealed class FaultTraceTests
{
    private const string NotOnNetStandard = "stack trace content";

    private static async SpindleTask Fails(Promise gate)
    {
        await gate.Task;
        throw new InvalidOperationException("fault");
    }

    /// <summary>Awaits the fault and swallows it: its frame must never show in anybody else's trace.</summary>
    private static async SpindleTask EarlierReader(SpindleTask task)
    {
        try
        {
            await task;
        }
        catch (InvalidOperationException)
        {
        }
    }


    private static async Task<SpindleTask> PreservedFault()
    {
        var gate = new Promise();
        SpindleTask preserved = Fails(gate).Preserve();
        gate.SetResult();
        await EarlierReader(preserved);
        return preserved;
    }

    [NetBuildFact(NotOnNetStandard)]
    public async Task WhenAll_AllCompleted_OfAPreservedFault_DoesNotShowAnEarlierAwaitersFrames()
    {
        SpindleTask preserved = await PreservedFault();
        Exception e = await TestUtil.Catch(async () => await SpindleTask.WhenAll(preserved, SpindleTask.CompletedTask));
        Assert.Contains(nameof(Fails), e.StackTrace, StringComparison.Ordinal);
        Assert.DoesNotContain(nameof(EarlierReader), e.StackTrace, StringComparison.Ordinal);
    }

    [NetBuildFact(NotOnNetStandard)]
    public async Task WhenAll_Pending_OfAPreservedFault_DoesNotShowAnEarlierAwaitersFrames()
    {
        SpindleTask preserved = await PreservedFault();
        var other = new Promise();
        SpindleTask all = SpindleTask.WhenAll(preserved, other.Task);
        other.SetResult();
        Exception e = await TestUtil.Catch(async () => await all);
        Assert.Contains(nameof(Fails), e.StackTrace, StringComparison.Ordinal);
        Assert.DoesNotContain(nameof(EarlierReader), e.StackTrace, StringComparison.Ordinal);
    }

    [NetBuildFact(NotOnNetStandard)]
    public async Task WhenAny_AllCompleted_OfAPreservedFault_DoesNotShowAnEarlierAwaitersFrames()
    {
        SpindleTask preserved = await PreservedFault();
        Exception e = await TestUtil.Catch(async () => await SpindleTask.WhenAny(preserved, new Promise().Task));
        Assert.Contains(nameof(Fails), e.StackTrace, StringComparison.Ordinal);
        Assert.DoesNotContain(nameof(EarlierReader), e.StackTrace, StringComparison.Ordinal);
    }

    [NetBuildFact(NotOnNetStandard)]
    public async Task WhenAll_OfAPromiseReadTwice_DoesNotShowAnEarlierAwaitersFrames()
    {
        var promise = new Promise();
        var gate = new Promise();
        SpindleTask failing = Fails(gate);
        gate.SetResult();
        try
        {
            await failing;
        }
        catch (InvalidOperationException ex)
        {
            promise.SetException(ex); // the promise captures the trace of Fails
        }
        await EarlierReader(promise.Task); // a completed promise's task may be read again until Reset
        Exception e = await TestUtil.Catch(async () => await SpindleTask.WhenAll(promise.Task, SpindleTask.CompletedTask));
        Assert.DoesNotContain(nameof(EarlierReader), e.StackTrace, StringComparison.Ordinal);
    }

    [NetBuildFact(NotOnNetStandard)]
    public async Task TaskScope_OfAPreservedFault_DoesNotShowAnEarlierAwaitersFrames()
    {
        SpindleTask preserved = await PreservedFault();
        Exception e = await TestUtil.Catch(async () =>
        {
            await using var scope = new TaskScope();
            scope.Run(_ => preserved); // the scope's child observer reads the preserved fault quietly
        });
        Assert.DoesNotContain(nameof(EarlierReader), e.StackTrace, StringComparison.Ordinal);
    }
}

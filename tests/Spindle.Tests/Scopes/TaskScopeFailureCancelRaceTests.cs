#if DEBUG
using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Scopes;

/// <summary>
/// A child's failure cancels the scope's token before the child is counted out, so before the scope can complete and its
/// disposal dispose the token's source. Counted out first, a <c>WaitAsync</c> and a disposal on another thread could
/// complete the scope in between: the cancel then found the source disposed, and the token stayed uncancelled though a
/// child had failed (<c>CancellationModelTests</c> caught it once in a fresh-clone CI run; docs/decisions.md section
/// 55). The Debug-only hook stands where that window was: on the failing child's thread, once its failure is kept.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class TaskScopeFailureCancelRaceTests
{
    [Fact]
    public async Task AFailure_CancelsTheToken_EvenWhenWaitAndDisposalCloseTheScopeAsTheChildFinishes()
    {
        var scope = new TaskScope();
        CancellationToken token = scope.Token;
        var gate = new Promise();
        SpindleTask wait = default;
        ValueTask disposal = default;
        bool hooked = false;
        TaskScope.TestHookFailureCancelled = s =>
        {
            if (ReferenceEquals(s, scope))
            {
                hooked = true;
                wait = scope.WaitAsync(); // closes the scope: with the child counted out, it would complete it here
                disposal = scope.DisposeAsync(); // and this would dispose the token's source
            }
        };
        try
        {
            scope.Run(async _ =>
            {
                await gate.Task;
                throw new InvalidOperationException("the child failed");
            });
            gate.SetResult(); // the child resumes inline, here, and fails
        }
        finally
        {
            TaskScope.TestHookFailureCancelled = null;
        }
        Assert.True(hooked);
        Assert.True(token.IsCancellationRequested, "a child failed, but the scope's token was not cancelled");
        Exception fromDisposal = await TestUtil.Catch(async () => await disposal);
        Assert.Equal("the child failed", Assert.IsType<InvalidOperationException>(fromDisposal).Message);
        await TestUtil.Catch(async () => await wait); // read (its failure is the one disposal delivered)
    }
}
#endif

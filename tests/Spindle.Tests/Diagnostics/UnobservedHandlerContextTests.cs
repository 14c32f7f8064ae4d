using System;
using System.Collections.Concurrent;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Diagnostics;

/// <summary>
/// <see cref="Spindle.UnobservedException"/>'s handlers run in the default ExecutionContext, as
/// TaskScheduler.UnobservedTaskException's do. A handler ran in whatever context the reporting thread had: a forgotten
/// promise's fault, set by a thread serving another request, was reported with that request's AsyncLocal values (a
/// server's handler logging the current trace id tagged it with the wrong request), and a value the handler set stayed
/// on the completing thread, in the completer's own code after its SetException returned.
/// </summary>
public class UnobservedHandlerContextTests
{
    private static readonly AsyncLocal<string?> s_local = new();

    private sealed class Marker(string message) : Exception(message)
    {
    }

    private sealed class CompletersSyncContext : SynchronizationContext
    {
    }

    /// <summary>Completes on a thread of its own that has an AsyncLocal value of its own, and returns what it sees after.</summary>
    private static string? CompleteOnAnotherRequestsThread(Action complete)
    {
        string? after = "not run";
        var thread = new Thread(() =>
        {
            s_local.Value = "completer's request";
            SynchronizationContext.SetSynchronizationContext(new CompletersSyncContext());
            complete();
            after = s_local.Value + (SynchronizationContext.Current is CompletersSyncContext ? "" : " (lost its SynchronizationContext)");
        });
        thread.UnsafeStart();
        thread.Join();
        return after;
    }

    private static async Task<(string? HandlerSaw, string? CompleterAfter)> ReportedFrom(Func<Exception, Action> arrange)
    {
        var fault = new Marker("user10 context");
        var seen = new TaskCompletionSource<string?>(TaskCreationOptions.RunContinuationsAsynchronously);
        using var watch = UnobservedReports.Start(e => ReferenceEquals(e, fault), onOwn: _ =>
        {
            seen.TrySetResult((s_local.Value ?? "no value") + (SynchronizationContext.Current is null ? "" : " under the completer's SynchronizationContext"));
            s_local.Value = "set by the handler";
        });
        Action complete = arrange(fault);
        string? completerAfter = CompleteOnAnotherRequestsThread(complete);
        string? handlerSaw = await seen.Task.WaitAsync(TimeSpan.FromSeconds(30));
        return (handlerSaw, completerAfter);
    }

    [Fact]
    public async Task AForgottenPromiseFaultedByAnotherRequest_IsReportedInTheDefaultContext_AndTheHandlersSetStaysInTheHandler()
    {
        (string? handlerSaw, string? completerAfter) = await ReportedFrom(fault =>
        {
            var promise = new Promise();
            s_local.Value = "the request that forgot it";
            promise.Task.Forget();
            s_local.Value = null;
            return () => promise.SetException(fault);
        });
        // Before the fix: "completer's request under the completer's SynchronizationContext", and the completer then saw
        // "set by the handler".
        Assert.Equal("no value", handlerSaw);
        Assert.Equal("completer's request", completerAfter);
    }

    [Fact]
    public async Task AWhenAnyLoserFaultedByAnotherRequest_IsReportedInTheDefaultContext()
    {
        (string? handlerSaw, string? completerAfter) = await ReportedFrom(fault =>
        {
            var loser = new Promise();
            s_local.Value = "the request that lost it";
            SpindleTask<int> any = SpindleTask.WhenAny([SpindleTask.CompletedTask, loser.Task]);
            Assert.Equal(0, any.GetAwaiter().GetResult());
            s_local.Value = null;
            return () => loser.SetException(fault);
        });
        Assert.Equal("no value", handlerSaw);
        Assert.Equal("completer's request", completerAfter);
    }

    [Fact]
    public async Task AForgottenAsyncMethodsFault_IsReportedInTheDefaultContext_NotTheMethodsOwn()
    {
        var fault = new Marker("user10 method");
        var seen = new TaskCompletionSource<string?>(TaskCreationOptions.RunContinuationsAsynchronously);
        using var watch = UnobservedReports.Start(e => ReferenceEquals(e, fault), onOwn: _ => seen.TrySetResult(s_local.Value));
        var gate = new Promise();
        s_local.Value = "the method's request";
        Throws(gate.Task, fault).Forget();
        s_local.Value = null;
        CompleteOnAnotherRequestsThread(() => gate.SetResult());
        // Before the fix: "the method's request" (its completion reported from inside its own context).
        Assert.Null(await seen.Task.WaitAsync(TimeSpan.FromSeconds(30)));
    }

    private static async SpindleTask Throws(SpindleTask gate, Exception fault)
    {
        await gate;
        throw fault;
    }
}

using System;
using System.Runtime.CompilerServices;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// A second await of a pooled task from a BCL async method (an <c>async Task</c>: every ASP.NET Core handler) is refused
/// in the awaiter's <c>OnCompleted</c>, and the BCL's builder rethrows that on the thread pool, which ends the process
/// with a trace of the builder's frames alone. A twenty-fifth user's review (docs/decisions.md section 53) had a singleton
/// promise's task awaited by two requests at once end its service, and nothing in the output said which handler did it:
/// the refusal now names the async method whose await it refused. These tests hand the awaiter a real BCL builder's
/// continuation (captured from an <c>async Task</c> method) instead of letting the builder rethrow it.
/// </summary>
public sealed class RefusedAwaitNamesMethodTests
{
    /// <summary>An awaitable that keeps the continuation a builder hands it.</summary>
    private sealed class Capture : ICriticalNotifyCompletion
    {
        public Action? Continuation;
        public Capture GetAwaiter() => this;
        public bool IsCompleted => false;
        public void GetResult() { }
        public void OnCompleted(Action continuation) => Continuation = continuation;
        public void UnsafeOnCompleted(Action continuation) => Continuation = continuation;
    }

    /// <summary>A request handler, as ASP.NET Core's are: an <c>async Task</c>, here suspended on <paramref name="at"/>.</summary>
    private static async Task ServeReadyRequest(Capture at) => await at;

    private static Action BuilderContinuation(out Capture capture)
    {
        capture = new Capture();
        _ = ServeReadyRequest(capture);
        return capture.Continuation!;
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public void SecondAwaiterFromABclBuilder_TheRefusalNamesTheAwaitingMethod_AndTheFirstAwaiterIsUntouched(bool flowContext)
    {
        var ready = new Promise();
        var first = ready.Task.GetAwaiter();
        bool firstResumed = false;
        first.UnsafeOnCompleted(() => firstResumed = true);
        Action second = BuilderContinuation(out Capture capture);

        var awaiter = ready.Task.GetAwaiter();
        var e = Assert.Throws<InvalidOperationException>(() =>
        {
            if (flowContext)
            {
                awaiter.OnCompleted(second);
            }
            else
            {
                awaiter.UnsafeOnCompleted(second);
            }
        });
        Assert.StartsWith(ThrowHelper.SecondAwaiterMessage, e.Message, StringComparison.Ordinal);
        Assert.EndsWith(" The refused await is in " + typeof(RefusedAwaitNamesMethodTests).FullName + ".ServeReadyRequest.", e.Message, StringComparison.Ordinal);
        Assert.True(ThrowHelper.IsRefusedRegistration(e)); // still a refusal: nothing was registered

        ready.SetResult();
        Assert.True(firstResumed);
        capture.Continuation = null;
        second(); // the handler goes on from its own await, once
    }

    [Fact]
    public void TypedTask_AwaitedAfterItWasRead_FromABclBuilder_NamesTheAwaitingMethod()
    {
        static async SpindleTask<int> Load()
        {
            await Task.Yield();
            return 5;
        }
        SpindleTask<int> load = Load();
        Assert.Equal(5, load.GetAwaiter().GetResult());
        Action continuation = BuilderContinuation(out _);

        var e = Assert.Throws<InvalidOperationException>(() => load.GetAwaiter().UnsafeOnCompleted(continuation));
        Assert.StartsWith(ThrowHelper.AwaitOnceMessage, e.Message, StringComparison.Ordinal);
        Assert.Contains(" The refused await is in " + typeof(RefusedAwaitNamesMethodTests).FullName + ".ServeReadyRequest.", e.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void ContinuationThatIsNoBuilders_IsNamedByItsMethod()
    {
        var ready = new Promise<int>();
        ready.Task.GetAwaiter().UnsafeOnCompleted(static () => { });
        var e = Assert.Throws<InvalidOperationException>(() => ready.Task.GetAwaiter().UnsafeOnCompleted(OnReady));
        Assert.EndsWith(" The refused await is in " + typeof(RefusedAwaitNamesMethodTests).FullName + ".OnReady.", e.Message, StringComparison.Ordinal);
        ready.SetResult(1);
    }

    private static void OnReady() { }
}

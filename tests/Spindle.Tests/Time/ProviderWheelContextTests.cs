using System;
using System.Runtime.CompilerServices;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Time;

/// <summary>
/// A wheel on a <see cref="TimeProvider"/> other than <see cref="TimeProvider.System"/> (a provider that wraps the
/// system's, as a server injects one) is driven by the provider's timer, and such a timer runs its callback in the
/// ExecutionContext of the code that created it. A wheel created inside a request (a per-tenant wheel made on first use)
/// ran every pass, for the wheel's life, in that request's context: a continuation that flows no context (the BCL's
/// contract for UnsafeOnCompleted: it runs in the completer's) saw the request's AsyncLocal values, and the wheel kept
/// them alive. The driver's timers now capture no context, as Task.Delay's and CancelAfter's do.
/// </summary>
public class ProviderWheelContextTests
{
    private static readonly AsyncLocal<object?> s_local = new();

    /// <summary>Behaves as <see cref="TimeProvider.System"/> (the base class's timers) but is not it.</summary>
    private sealed class WrappingProvider : TimeProvider
    {
    }

    private sealed class RequestValue
    {
        public override string ToString() => "the request's value";
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    private static TimerWheel CreateInsideARequest(out WeakReference value)
    {
        // Runs inside its own ExecutionContext.Run, so that the value set here leaves with it.
        TimerWheel? wheel = null;
        WeakReference? weak = null;
        ExecutionContext.Run(ExecutionContext.Capture()!, _ =>
        {
            var requestValue = new RequestValue();
            weak = new WeakReference(requestValue);
            s_local.Value = requestValue;
            wheel = new TimerWheel(new WrappingProvider());
            wheel.Delay(1).Forget(); // the wheel's first use, inside the request
        }, null);
        value = weak!;
        return wheel!;
    }

    [Fact]
    public async Task AContinuationThatFlowsNoContext_CompletedByThePass_DoesNotSeeTheContextTheWheelWasCreatedIn()
    {
        using TimerWheel wheel = CreateInsideARequest(out _);
        Assert.Null(s_local.Value);
        for (int i = 0; i < 20; i++)
        {
            var seen = new TaskCompletionSource<object?>(TaskCreationOptions.RunContinuationsAsynchronously);
            SpindleTask delay = wheel.Delay(2);
            delay.GetAwaiter().UnsafeOnCompleted(() => seen.SetResult(s_local.Value ?? "nothing"));
            object? value = await seen.Task.WaitAsync(TimeSpan.FromSeconds(30));
            // Before the fix: "the request's value", 20 of 20.
            Assert.Equal("nothing", value);
        }
    }

    [Fact]
    public async Task TheWheel_DoesNotKeepAliveTheValuesOfTheContextItWasCreatedIn()
    {
        using TimerWheel wheel = CreateInsideARequest(out WeakReference value);
        await wheel.Delay(2); // a pass has run
        for (int i = 0; i < 5 && value.IsAlive; i++)
        {
            GC.Collect();
            GC.WaitForPendingFinalizers();
        }
        // Before the fix the provider's timer held the request's context, and with it the value, for the wheel's life.
        Assert.False(value.IsAlive, "the wheel's driver keeps the context of the request it was created in alive");
        GC.KeepAlive(wheel);
    }
}

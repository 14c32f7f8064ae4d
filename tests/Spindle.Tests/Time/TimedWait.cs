using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Time;

/// <summary>A task's two timeout forms: <c>WithTimeout</c> (a timeout throws) and <c>TryWithTimeout</c> (a timeout is a result).</summary>
public enum TimeoutForm
{
    /// <summary><c>WithTimeout</c>: a timeout fails the task with a <see cref="TimeoutException"/>.</summary>
    Throwing,

    /// <summary><c>TryWithTimeout</c>: a timeout is false, or <c>(false, default)</c>.</summary>
    Quiet,
}

/// <summary>
/// A timed wait of either form (<see cref="TimeoutForm"/>), on a typed or an untyped task, read as one outcome: the
/// task's result (0 for an untyped task), or null when the timeout won. So that the rules both forms share are tested
/// once, for both: a fault or cancellation of the input, or of the token, throws from <see cref="Read"/> in either form.
/// </summary>
internal readonly struct TimedWait
{
    private readonly SpindleTask _untyped;
    private readonly SpindleTask<int> _typed;
    private readonly SpindleTask<bool> _untypedQuiet;
    private readonly SpindleTask<(bool Completed, int Result)> _typedQuiet;
    private readonly int _kind; // 0: _untyped, 1: _typed, 2: _untypedQuiet, 3: _typedQuiet

    private TimedWait(SpindleTask untyped, SpindleTask<int> typed, SpindleTask<bool> untypedQuiet, SpindleTask<(bool, int)> typedQuiet, int kind)
    {
        _untyped = untyped;
        _typed = typed;
        _untypedQuiet = untypedQuiet;
        _typedQuiet = typedQuiet;
        _kind = kind;
    }

    public static TimedWait Start(TimeoutForm form, SpindleTask<int> task, TimeSpan timeout, TimerWheel? wheel, CancellationToken token = default)
        => form == TimeoutForm.Throwing
            ? new(default, task.WithTimeout(timeout, wheel, token), default, default, 1)
            : new(default, default, default, task.TryWithTimeout(timeout, wheel, token), 3);

    public static TimedWait Start(TimeoutForm form, SpindleTask task, TimeSpan timeout, TimerWheel? wheel, CancellationToken token = default)
        => form == TimeoutForm.Throwing
            ? new(task.WithTimeout(timeout, wheel, token), default, default, default, 0)
            : new(default, default, task.TryWithTimeout(timeout, wheel, token), default, 2);

    public SpindleTaskStatus Status => _kind switch
    {
        0 => _untyped.Status,
        1 => _typed.Status,
        2 => _untypedQuiet.Status,
        _ => _typedQuiet.Status,
    };

    public bool IsCompleted => Status != SpindleTaskStatus.Pending;

    /// <summary>The status a timed-out wait of this form has: faulted (a <see cref="TimeoutException"/>), or succeeded (false).</summary>
    public SpindleTaskStatus TimedOutStatus => _kind < 2 ? SpindleTaskStatus.Faulted : SpindleTaskStatus.Succeeded;

    public void OnCompleted(Action continuation)
    {
        switch (_kind)
        {
            case 0: _untyped.GetAwaiter().UnsafeOnCompleted(continuation); break;
            case 1: _typed.GetAwaiter().UnsafeOnCompleted(continuation); break;
            case 2: _untypedQuiet.GetAwaiter().UnsafeOnCompleted(continuation); break;
            default: _typedQuiet.GetAwaiter().UnsafeOnCompleted(continuation); break;
        }
    }

    /// <summary>
    /// Reads the outcome (once, as an await): the result, or null if the timeout won (the throwing form's
    /// <see cref="TimeoutException"/>, checked to be the timeout's own, or the quiet form's false, whose result is default).
    /// </summary>
    public int? Read()
    {
        try
        {
            switch (_kind)
            {
                case 0:
                    _untyped.GetAwaiter().GetResult();
                    return 0;
                case 1:
                    return _typed.GetAwaiter().GetResult();
                case 2:
                    return _untypedQuiet.GetAwaiter().GetResult() ? 0 : null;
                default:
                    (bool completed, int result) = _typedQuiet.GetAwaiter().GetResult();
                    Assert.True(completed || result == 0, "a timed-out TryWithTimeout's result is not default");
                    return completed ? result : null;
            }
        }
        catch (TimeoutException e) when (_kind < 2)
        {
            Assert.Contains("did not complete within its timeout", e.Message, StringComparison.Ordinal);
            return null;
        }
    }

    /// <summary>As <see cref="Read"/>, awaited from an async method.</summary>
    public async Task<int?> ReadAsync()
    {
        try
        {
            switch (_kind)
            {
                case 0:
                    await _untyped;
                    return 0;
                case 1:
                    return await _typed;
                case 2:
                    return await _untypedQuiet ? 0 : null;
                default:
                    (bool completed, int result) = await _typedQuiet;
                    return completed ? result : null;
            }
        }
        catch (TimeoutException) when (_kind < 2)
        {
            return null;
        }
    }
}

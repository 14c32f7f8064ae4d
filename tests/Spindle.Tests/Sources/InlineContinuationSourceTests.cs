using System;
using System.Threading;
using System.Threading.Tasks;
using System.Threading.Tasks.Sources;

namespace SpindleLib.Tests.Sources;

/// <summary>
/// The <see cref="ISpindleSource"/> contract on inline continuations, as its docs state it: a user's source may run the
/// continuation inline, inside <c>OnCompleted</c> (a use that completed as it registered) and inside its own completion,
/// on the completing thread, as long as it runs it once, after the use reads as completed, and not under a lock of its own.
/// Spindle's awaiter, WhenAll/WhenAny, WithTimeout and Preserve take either, and hold no lock of theirs while they call
/// the source.
/// </summary>
public sealed class InlineContinuationSourceTests
{
    /// <summary>
    /// A source that follows the documented contract the plainest way: one use, no pooling, its own lock held only for
    /// its fields, the continuation run inline after the lock is released. <see cref="CompleteWhenRegistered"/> makes
    /// the registration find the use completed (the race a real source meets between <c>GetStatus</c> and
    /// <c>OnCompleted</c>), so that OnCompleted runs the continuation before it returns.
    /// </summary>
    private sealed class InlineSource : ISpindleSource<int>
    {
        private readonly object _lock = new();
        private Action<object?>? _continuation;
        private object? _state;
        private bool _completed;
        private int _result;

        public int? CompleteWhenRegistered { get; init; }

        public int OnCompletedCalls { get; private set; }

        public int InlineRunsInsideOnCompleted { get; private set; }

        public bool HeldOwnLockWhileRunning { get; private set; }

        public SpindleTask<int> Task => new(this, 0);

        public void SetResult(int value)
        {
            Action<object?>? continuation;
            object? state;
            lock (_lock)
            {
                if (_completed)
                {
                    throw new InvalidOperationException("completed twice");
                }
                _result = value;
                _completed = true;
                continuation = _continuation;
                state = _state;
                _continuation = null;
            }
            Run(continuation, state); // inline, on the completing thread, outside the lock
        }

        public void OnCompleted(Action<object?> continuation, object? state, short token)
        {
            Check(token);
            bool runNow;
            lock (_lock)
            {
                OnCompletedCalls++;
                if (CompleteWhenRegistered is { } value && !_completed)
                {
                    _result = value;
                    _completed = true;
                }
                runNow = _completed;
                if (!runNow)
                {
                    _continuation = continuation;
                    _state = state;
                }
            }
            if (runNow)
            {
                InlineRunsInsideOnCompleted++;
                Run(continuation, state); // inline, before OnCompleted returns
            }
        }

        private void Run(Action<object?>? continuation, object? state)
        {
            if (continuation is null)
            {
                return;
            }
            HeldOwnLockWhileRunning |= Monitor.IsEntered(_lock);
            continuation(state);
        }

        public SpindleTaskStatus GetStatus(short token)
        {
            Check(token);
            lock (_lock)
            {
                return _completed ? SpindleTaskStatus.Succeeded : SpindleTaskStatus.Pending;
            }
        }

        public int GetResult(short token)
        {
            Check(token);
            lock (_lock)
            {
                if (!_completed)
                {
                    throw new InvalidOperationException("read before completion");
                }
                return _result;
            }
        }

        void IValueTaskSource.GetResult(short token) => GetResult(token);

        ValueTaskSourceStatus IValueTaskSource.GetStatus(short token) => (ValueTaskSourceStatus)GetStatus(token);

        ValueTaskSourceStatus IValueTaskSource<int>.GetStatus(short token) => (ValueTaskSourceStatus)GetStatus(token);

        void IValueTaskSource.OnCompleted(Action<object?> continuation, object? state, short token, ValueTaskSourceOnCompletedFlags flags)
            => OnCompleted(continuation, state, token);

        void IValueTaskSource<int>.OnCompleted(Action<object?> continuation, object? state, short token, ValueTaskSourceOnCompletedFlags flags)
            => OnCompleted(continuation, state, token);

        private static void Check(short token)
        {
            if (token != 0)
            {
                throw new InvalidOperationException("stale token");
            }
        }
    }

    private static async SpindleTask<int> AwaitAndAdd(SpindleTask<int> task, int add) => await task + add;

    [Fact]
    public void Await_OfASourceThatRunsTheContinuationInsideOnCompleted_Resumes()
    {
        var source = new InlineSource { CompleteWhenRegistered = 7 };
        SpindleTask<int> resumed = AwaitAndAdd(source.Task, 1);
        Assert.Equal(1, source.InlineRunsInsideOnCompleted);
        Assert.True(resumed.IsCompleted);
        Assert.Equal(8, resumed.GetAwaiter().GetResult());
    }

    [Fact]
    public void Await_OfASourceThatRunsTheContinuationInsideItsCompletion_ResumesOnTheCompletingThread()
    {
        var source = new InlineSource();
        int resumedOn = -1;
        SpindleTask<int> resumed = Resume(source.Task);
        Assert.False(resumed.IsCompleted);
        source.SetResult(5);
        Assert.True(resumed.IsCompleted); // resumed inside SetResult
        Assert.Equal(Environment.CurrentManagedThreadId, resumedOn);
        Assert.Equal(5, resumed.GetAwaiter().GetResult());
        Assert.False(source.HeldOwnLockWhileRunning);

        async SpindleTask<int> Resume(SpindleTask<int> task)
        {
            int value = await task;
            resumedOn = Environment.CurrentManagedThreadId;
            return value;
        }
    }

    [Fact]
    public void WhenAllAndWhenAny_OverSourcesThatRunInline_EitherWay_Complete()
    {
        var early = new InlineSource { CompleteWhenRegistered = 1 };
        var late = new InlineSource();
        SpindleTask<(int, int)> all = SpindleTask.WhenAll(early.Task, late.Task);
        Assert.Equal(1, early.InlineRunsInsideOnCompleted);
        Assert.False(all.IsCompleted);
        late.SetResult(2);
        Assert.Equal((1, 2), all.GetAwaiter().GetResult());

        var a = new InlineSource();
        var b = new InlineSource { CompleteWhenRegistered = 20 };
        SpindleTask<(int Index, int Result)> any = SpindleTask.WhenAny([a.Task, b.Task]);
        Assert.Equal((1, 20), any.GetAwaiter().GetResult());
        a.SetResult(10); // the loser, a source of the user's, is read when it finishes: nothing is left waiting

        var spanInputs = new[] { new InlineSource(), new InlineSource { CompleteWhenRegistered = 4 }, new InlineSource() };
        SpindleTask<int[]> spanAll = SpindleTask.WhenAll([spanInputs[0].Task, spanInputs[1].Task, spanInputs[2].Task]);
        spanInputs[2].SetResult(6);
        spanInputs[0].SetResult(3);
        Assert.Equal(new[] { 3, 4, 6 }, spanAll.GetAwaiter().GetResult());
    }

    [Fact]
    public async Task WithTimeout_OverASourceThatRunsInline_CompletesOrTimesOut_AndReadsTheSourceWhenItFinishes()
    {
        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);

        var registering = new InlineSource { CompleteWhenRegistered = 3 };
        Assert.Equal(3, await registering.Task.WithTimeout(TimeSpan.FromSeconds(1), wheel));

        var inTime = new InlineSource();
        SpindleTask<int> waited = inTime.Task.WithTimeout(TimeSpan.FromSeconds(1), wheel);
        inTime.SetResult(9);
        Assert.Equal(9, await waited);

        var tooLate = new InlineSource();
        SpindleTask<int> timedOut = tooLate.Task.WithTimeout(TimeSpan.FromMilliseconds(10), wheel);
        clock.Advance(TimeSpan.FromMilliseconds(10));
        await Assert.ThrowsAsync<TimeoutException>(async () => await timedOut);
        tooLate.SetResult(1); // read by the let-go combinator now, inline
        Assert.Equal(0, wheel.PendingCount);
    }

    [Fact]
    public void Preserve_OfASourceThatRunsInline_GivesEveryWaiterTheResult()
    {
        var registering = new InlineSource { CompleteWhenRegistered = 11 };
        SpindleTask<int> kept = registering.Task.Preserve();
        Assert.Equal(12, AwaitAndAdd(kept, 1).GetAwaiter().GetResult());
        Assert.Equal(13, AwaitAndAdd(kept, 2).GetAwaiter().GetResult());

        var later = new InlineSource();
        SpindleTask<int> shared = later.Task.Preserve();
        SpindleTask<int> first = AwaitAndAdd(shared, 1);
        SpindleTask<int> second = AwaitAndAdd(shared, 2);
        later.SetResult(20);
        Assert.True(first.IsCompleted && second.IsCompleted); // both resumed inside SetResult
        Assert.Equal(21, first.GetAwaiter().GetResult());
        Assert.Equal(22, second.GetAwaiter().GetResult());
        Assert.Equal(1, later.OnCompletedCalls); // Preserve registers once on the source
    }
}

using System;
using System.Collections.Concurrent;
using System.Runtime.CompilerServices;
using System.Threading;
using System.Threading.Tasks;
using static SpindleLib.Tests.UnobservedReports;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// An awaiter that is not Spindle's and throws from OnCompleted, awaited inside a Spindle async method. Spindle cannot
/// tell whether such an awaiter registered the continuation before it threw, so (as the BCL's builders) it must not
/// fault the method on that exception: a registered continuation would later run the finished state machine again
/// (from its first line) or, once its box was back in the pool, another call's. Found by a review of the bridges.
/// Spindle's own sources refuse a registration before touching anything, so theirs still fault the awaiting method.
/// Spindle.UnobservedException is process-wide, so these run alone.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class ForeignAwaiterTests
{
    /// <summary>An awaitable that is never complete: its OnCompleted keeps the continuation (if told to) and throws.</summary>
    private sealed class ThrowingAwaitable
    {
        public Action? Registered;
        public bool Registers = true;

        /// <summary>What its OnCompleted throws: one instance per awaitable, so that a test can tell its own report.</summary>
        public readonly InvalidCastException Failure = new("the awaiter failed after it registered");

        public Awaiter GetAwaiter() => new(this);

        public readonly struct Awaiter : ICriticalNotifyCompletion
        {
            private readonly ThrowingAwaitable _owner;

            public Awaiter(ThrowingAwaitable owner) => _owner = owner;

            public bool IsCompleted => false;

            public void GetResult()
            {
            }

            public void OnCompleted(Action continuation) => UnsafeOnCompleted(continuation);

            public void UnsafeOnCompleted(Action continuation)
            {
                if (_owner.Registers)
                {
                    _owner.Registered = continuation;
                }
                throw _owner.Failure;
            }
        }
    }

    private static async SpindleTask Method(Promise gate, ThrowingAwaitable awaitable, int[] counts)
    {
        Interlocked.Increment(ref counts[0]); // the method's first line
        await gate.Task;                      // suspended: the method runs in its pooled box from here on
        await awaitable;
        Interlocked.Increment(ref counts[1]); // after the throwing await
    }

    private static async SpindleTask FirstAwaitThrows(ThrowingAwaitable awaitable, int[] counts)
    {
        Interlocked.Increment(ref counts[0]);
        await awaitable; // the first suspension: the state machine is still the caller's copy on the stack
        Interlocked.Increment(ref counts[1]);
    }

    [Fact]
    public void AwaiterThatRegistersAndThenThrows_TheMethodRunsOnce_AndResumesWhenTheContinuationRuns()
    {
        var gate = new Promise();
        var awaitable = new ThrowingAwaitable();
        var counts = new int[2];
        SpindleTask task = default;
        ConcurrentQueue<Exception> reported = Observe(Own.InstancesOrOnTestThreads(awaitable.Failure), () =>
        {
            task = Method(gate, awaitable, counts);
            gate.SetResult();
        });

        Assert.Equal(SpindleTaskStatus.Pending, task.Status);
        Assert.IsType<InvalidCastException>(Assert.Single(reported)); // not lost: reported, as the BCL rethrows it
        Assert.NotNull(awaitable.Registered);

        awaitable.Registered!(); // the awaiter keeps its word after all

        Assert.Equal(1, Volatile.Read(ref counts[0]));
        Assert.Equal(1, Volatile.Read(ref counts[1]));
        Assert.Equal(SpindleTaskStatus.Succeeded, task.Status);
        task.GetAwaiter().GetResult();
    }

    [Fact]
    public void AwaiterThatRegistersAndThenThrows_OnTheFirstSuspension_TheMethodRunsOnce()
    {
        var awaitable = new ThrowingAwaitable();
        var counts = new int[2];
        SpindleTask task = default;
        ConcurrentQueue<Exception> reported = Observe(Own.InstancesOrOnTestThreads(awaitable.Failure), () => task = FirstAwaitThrows(awaitable, counts));

        Assert.Equal(SpindleTaskStatus.Pending, task.Status);
        Assert.IsType<InvalidCastException>(Assert.Single(reported));
        awaitable.Registered!();

        Assert.Equal(1, Volatile.Read(ref counts[0]));
        Assert.Equal(1, Volatile.Read(ref counts[1]));
        task.GetAwaiter().GetResult();
    }

    [Fact]
    public void AwaiterThatRegistersAndThenThrows_ALateContinuationNeverRunsAnotherCallOfTheMethod()
    {
        Spindle.UnobservedException += Ignore;
        try
        {
            var awaitable = new ThrowingAwaitable();
            var counts = new int[2];
            var gate = new Promise();
            SpindleTask first = Method(gate, awaitable, counts);
            gate.SetResult();
            Action late = awaitable.Registered!;

            // Whatever the first call's task shows, a second call of the same method rents a box from the same pool.
            try
            {
                if (first.IsCompleted)
                {
                    first.GetAwaiter().GetResult();
                }
            }
            catch (InvalidCastException)
            {
            }
            var gate2 = new Promise();
            var counts2 = new int[2];
            var awaitable2 = new ThrowingAwaitable();
            SpindleTask second = Method(gate2, awaitable2, counts2);

            late(); // the first call's awaiter calls back

            Assert.Equal(SpindleTaskStatus.Pending, second.Status); // the second call still waits for its gate
            Assert.Equal(1, counts2[0]);
            Assert.Equal(0, counts2[1]);
            Assert.Equal(1, counts[0]);
            Assert.Equal(1, counts[1]);
            first.GetAwaiter().GetResult();
        }
        finally
        {
            Spindle.UnobservedException -= Ignore;
        }
    }

    private static void Ignore(Exception _)
    {
    }

    // ConfigureAwait(false): the test's own thread may have a SynchronizationContext (xunit's), where a plain await of a
    // ValueTask would resume by posting, not inline, and the status checks below would race that post.
    private static async SpindleTask AwaitValueTask(ValueTask task) => await task.ConfigureAwait(false);

    [Fact]
    public void ValueTaskOfASpindleTaskThatAlreadyHasAnAwaiter_AwaitedInASpindleMethod_FaultsThatMethodWithTheAwaitOnceError()
    {
        var promise = new Promise();
        ValueTask valueTask = promise.Task.AsValueTask();
        SpindleTask first = AwaitValueTask(valueTask);

        SpindleTask second = AwaitValueTask(valueTask); // misuse: a Spindle source refuses before it registers anything

        Assert.Equal(SpindleTaskStatus.Faulted, second.Status);
        var error = Assert.Throws<InvalidOperationException>(() => second.GetAwaiter().GetResult());
        Assert.Contains("Preserve()", error.Message, StringComparison.Ordinal);
        promise.SetResult();
        Assert.Equal(SpindleTaskStatus.Succeeded, first.Status);
        first.GetAwaiter().GetResult();
    }
}

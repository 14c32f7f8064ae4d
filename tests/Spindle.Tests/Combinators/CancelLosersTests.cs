using System;
using System.Collections.Concurrent;
using System.Threading;
using System.Threading.Tasks;
using static SpindleLib.Tests.Combinators.CombinatorTestSupport;
using static SpindleLib.Tests.UnobservedReports;

namespace SpindleLib.Tests.Combinators;

/// <summary>
/// WhenAny over producers: the token it hands them is cancelled as soon as one finishes, so the losers stop; their
/// faults (other than the cancellation they answer with) are still reported. Sequential: UnobservedException is
/// process-wide, and the pooling tests rely on this thread's pool.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class CancelLosersTests
{
    /// <summary>A loser that waits until cancelled, then throws a fault of its own while cleaning up.</summary>
    private static async SpindleTask FailsWhenCancelled(Signal signal, CancellationToken token, Exception fault)
    {
        try
        {
            await signal.WaitAsync(token);
        }
        catch (OperationCanceledException)
        {
            throw fault;
        }
    }

    [Fact]
    public void Winner_CancelsTheLosersToken_LosersStop_AndTheirCancellationIsNotReported()
    {
        var winner = new Promise();
        var losers = new[] { new Signal(), new Signal() };
        var tokens = new CancellationToken[3];
        int index = -1;
        ConcurrentQueue<Exception> reported = Observe(Own.Any(Own.ReportedOnTestThreads(), Own.CanceledBy(() => tokens[0])), () =>
        {
            SpindleTask<int> any = SpindleTask.WhenAny(
            [
                ct => { tokens[0] = ct; return losers[0].WaitAsync(ct); },
                ct => { tokens[1] = ct; return Await(winner); },
                ct => { tokens[2] = ct; return losers[1].WaitAsync(ct); },
            ]);
            Assert.False(tokens[0].IsCancellationRequested);
            Assert.True(losers[0].HasWaiter && losers[1].HasWaiter, "every producer started");
            winner.SetResult();
            index = any.GetAwaiter().GetResult();
        });
        Assert.Equal(1, index);
        Assert.True(tokens[0].IsCancellationRequested && tokens[2].IsCancellationRequested, "the losers' token was not cancelled");
        Assert.Equal(tokens[0], tokens[2]);
        Assert.False(losers[0].HasWaiter || losers[1].HasWaiter, "a loser is still waiting");
        Assert.Empty(reported);
    }

    [Fact]
    public void LoserFaultingOnCancellation_IsReportedOnce_WinnerResultUnaffected()
    {
        var winner = new Promise<string>();
        var signal = new Signal();
        var fault = new InvalidTimeZoneException("a loser's cleanup failed");
        (int Index, string Result) result = default;
        ConcurrentQueue<Exception> reported = Observe(Own.InstancesOrOnTestThreads(fault), () =>
        {
            SpindleTask<(int Index, string Result)> any = SpindleTask.WhenAny<string>(
            [
                ct => Await(winner),
                async ct => { await FailsWhenCancelled(signal, ct, fault); return "never"; },
            ]);
            winner.SetResult("won");
            result = any.GetAwaiter().GetResult();
        });
        Assert.Equal((0, "won"), result);
        Assert.Same(fault, Assert.Single(reported));
    }

    [Fact]
    public void WinnerFails_ItsExceptionIsRethrown_AndTheLosersAreStillCancelled()
    {
        var failing = new Promise();
        var loser = new Signal();
        var error = new FormatException("winner failed");
        CancellationToken token = default;
        Exception? thrown = null;
        ConcurrentQueue<Exception> reported = Observe(Own.Any(Own.InstancesOrOnTestThreads(error), Own.CanceledBy(() => token)), () =>
        {
            SpindleTask<int> any = SpindleTask.WhenAny([ct => loser.WaitAsync(token = ct), ct => Await(failing)]);
            failing.SetException(error);
            thrown = Record.Exception(() => any.GetAwaiter().GetResult());
        });
        Assert.Same(error, thrown);
        Assert.True(token.IsCancellationRequested);
        Assert.Empty(reported);
    }

    [Fact]
    public void ProducerThrowingSynchronously_CountsAsAFaultedInput_ThatWinsAndCancelsTheOthers()
    {
        var error = new InvalidOperationException("producer threw");
        var running = new Signal();
        CancellationToken token = default;
        int laterCalls = 0;
        SpindleTask<int> any = SpindleTask.WhenAny(
        [
            ct => running.WaitAsync(token = ct),
            ct => throw error,
            ct => { laterCalls++; return SpindleTask.CompletedTask; },
        ]);
        Assert.Same(error, Record.Exception(() => any.GetAwaiter().GetResult()));
        Assert.True(token.IsCancellationRequested, "the running producer was not cancelled");
        Assert.Equal(0, laterCalls); // the race was decided: the rest are not started
        Assert.False(running.HasWaiter);
    }

    [Fact]
    public void ProducerThrowingAfterAnotherWon_IsNotStarted_AndAThrowingLoserIsReported()
    {
        var winner = new Promise();
        var fault = new FormatException("second producer threw");
        bool thirdCalled = false;
        int index = -1;
        ConcurrentQueue<Exception> reported = Observe(Own.InstancesOrOnTestThreads(fault), () =>
        {
            // Producer 0 finishes synchronously: 1 and 2 are never called.
            SpindleTask<int> sync = SpindleTask.WhenAny([ct => SpindleTask.CompletedTask, ct => throw fault, ct => { thirdCalled = true; return default; }]);
            Assert.Equal(0, sync.GetAwaiter().GetResult());

            // Producer 0 is pending when 1 throws: 1 fails at once and wins; 0 is cancelled.
            var pending = new Signal();
            SpindleTask<int> any = SpindleTask.WhenAny([ct => pending.WaitAsync(ct), ct => throw fault]);
            Assert.Same(fault, Record.Exception(() => any.GetAwaiter().GetResult()));

            // A producer that throws while another is already winning is a losing failure: reported, not lost.
            SpindleTask<int> later = SpindleTask.WhenAny([ct => Await(winner), ct => { winner.SetResult(); throw fault; }]);
            index = later.GetAwaiter().GetResult();
        });
        Assert.False(thirdCalled);
        Assert.Equal(0, index);
        Assert.Same(fault, Assert.Single(reported));
    }

    [Fact]
    public void OuterToken_CancelsTheWaitAndEveryProducer()
    {
        var signals = new[] { new Signal(), new Signal() };
        using var cts = new CancellationTokenSource();
        CancellationToken token = default;
        SpindleTask<int> any = SpindleTask.WhenAny([ct => signals[0].WaitAsync(token = ct), ct => signals[1].WaitAsync(ct)], cts.Token);
        cts.Cancel();
        OperationCanceledException oce = Assert.ThrowsAny<OperationCanceledException>(() => any.GetAwaiter().GetResult());
        Assert.Equal(cts.Token, oce.CancellationToken);
        Assert.True(token.IsCancellationRequested);
        Assert.False(signals[0].HasWaiter || signals[1].HasWaiter);
    }

    [Fact]
    public void OuterTokenAlreadyCancelled_NoProducerIsCalled()
    {
        using var cts = new CancellationTokenSource();
        cts.Cancel();
        int calls = 0;
        SpindleTask<(int, int)> any = SpindleTask.WhenAny<int>([ct => { calls++; return SpindleTask.FromResult(1); }], cts.Token);
        Assert.Equal(SpindleTaskStatus.Canceled, any.Status);
        Assert.Equal(0, calls);
    }

    [Fact]
    public async Task TypedProducers_ReturnTheWinnersIndexAndResult()
    {
        var promises = new[] { new Promise<int>(), new Promise<int>(), new Promise<int>() };
        SpindleTask<(int Index, int Result)> any = SpindleTask.WhenAny<int>([ct => Await(promises[0]), ct => Await(promises[1]), ct => Await(promises[2])]);
        promises[2].SetResult(42);
        Assert.Equal((2, 42), await TestUtil.WithTimeout(any));
        promises[0].SetResult(0);
        promises[1].SetResult(1);
    }

    [Fact]
    public void BadProducers_ThrowArgumentException_NamingTheProblem()
    {
        ArgumentException empty = Assert.Throws<ArgumentException>(() => SpindleTask.WhenAny(ReadOnlySpan<Func<CancellationToken, SpindleTask>>.Empty));
        Assert.Equal("producers", empty.ParamName);
        int calls = 0;
        Func<CancellationToken, SpindleTask<int>>[] withNull = [ct => { calls++; return SpindleTask.FromResult(1); }, null!];
        ArgumentException nullOne = Assert.Throws<ArgumentException>(() => SpindleTask.WhenAny<int>(withNull));
        Assert.Contains("index 1", nullOne.Message, StringComparison.Ordinal);
        Assert.Equal("producers", nullOne.ParamName);
        Assert.Equal(0, calls); // validated before anything started
    }

    private const string NoTryReset = "CancellationTokenSource.TryReset is .NET 6+: each WhenAny over producers takes a new token source (48 B)";

    [NetBuildFact(NoTryReset)]
    public void TokenSource_KeptWhenNothingWasCancelled()
    {
        CancellationToken first = default;
        CancellationToken second = default;
        Assert.Equal(0, SpindleTask.WhenAny([ct => { first = ct; return SpindleTask.CompletedTask; }]).GetAwaiter().GetResult());
        Assert.Equal(0, SpindleTask.WhenAny([ct => { second = ct; return SpindleTask.CompletedTask; }]).GetAwaiter().GetResult());
        Assert.Equal(first, second); // the same pooled source, reset (nothing was left to cancel)
        Assert.False(second.IsCancellationRequested);
    }

    [Fact]
    public void TokenSource_ReplacedAfterACancellation()
    {
        var winner = new Promise();
        var loser = new Signal();
        CancellationToken cancelled = default;
        SpindleTask<int> any = SpindleTask.WhenAny([ct => Await(winner), ct => loser.WaitAsync(cancelled = ct)]);
        winner.SetResult();
        Assert.Equal(0, any.GetAwaiter().GetResult());
        Assert.True(cancelled.IsCancellationRequested);

        CancellationToken next = default;
        Assert.Equal(0, SpindleTask.WhenAny([ct => { next = ct; return SpindleTask.CompletedTask; }]).GetAwaiter().GetResult());
        Assert.False(next.IsCancellationRequested); // a cancelled source is never handed out again
        Assert.NotEqual(cancelled, next);
    }

    private static readonly Func<CancellationToken, SpindleTask<int>>[] s_syncProducers =
    [
        static ct => SpindleTask.FromResult(1),
        static ct => SpindleTask.FromResult(2),
    ];

    [NetBuildFact(NoTryReset)]
    public void ProducersFinishingSynchronously_SteadyStateAllocatesNothing()
    {
        TestUtil.AssertSteadyStateAllocatesNothing(i =>
        {
            if (SpindleTask.WhenAny<int>(s_syncProducers).GetAwaiter().GetResult() != (0, 1))
            {
                throw new InvalidOperationException("wrong winner");
            }
        }, 1_000);
    }
}

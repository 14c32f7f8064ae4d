using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Time;

/// <summary>
/// A wheel's Dispose ends its timers as canceled by <c>TimerWheel.DisposalToken</c> (review53): a caller's token that
/// fires as the wheel is disposed must leave the read naming whichever ended the delay, so that
/// <c>catch (OperationCanceledException ex) when (ex.CancellationToken == myToken)</c> holds exactly when the caller's
/// token won, and a read of a delay the disposal ended names the disposal, never the caller's token.
/// </summary>
public class DisposeTokenRaceTests
{
    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public void CallersTokenThenDispose_TheReadNamesTheCallersToken_DisposeThenToken_TheDisposal(bool infinite)
    {
        for (int order = 0; order < 2; order++)
        {
            var wheel = new TimerWheel(new ManualClock());
            using var cts = new CancellationTokenSource();
            SpindleTask delay = infinite ? wheel.Delay(Timeout.InfiniteTimeSpan, cts.Token) : wheel.Delay(TimeSpan.FromMinutes(10), cts.Token);
            if (order == 0)
            {
                cts.Cancel();
                wheel.Dispose();
            }
            else
            {
                wheel.Dispose();
                cts.Cancel();
            }
            OperationCanceledException e = Assert.ThrowsAny<OperationCanceledException>(() => delay.GetAwaiter().GetResult());
            if (order == 0)
            {
                Assert.Equal(cts.Token, e.CancellationToken);
            }
            else
            {
                Assert.Contains("TimerWheel was disposed", e.Message);
                Assert.NotEqual(cts.Token, e.CancellationToken);
            }
        }
    }

    /// <summary>A combinator over delays its wheel's Dispose ended still says so: its read builds the children's exception.</summary>
    [Fact]
    public async Task Dispose_DelaysUnderCombinators_TheirReadsSayTheWheelWasDisposed()
    {
        var wheel = new TimerWheel(new ManualClock());
        SpindleTask all = SpindleTask.WhenAll(wheel.Delay(TimeSpan.FromMinutes(1)), wheel.Delay(Timeout.InfiniteTimeSpan, new CancellationTokenSource().Token));
        SpindleTask<int> any = SpindleTask.WhenAny(wheel.Delay(TimeSpan.FromMinutes(1)), wheel.Delay(TimeSpan.FromMinutes(2)));
        wheel.Dispose();
        OperationCanceledException e = await Assert.ThrowsAnyAsync<OperationCanceledException>(() => TestUtil.AwaitAsync(all));
        Assert.Contains("TimerWheel was disposed", e.Message);
        e = await Assert.ThrowsAnyAsync<OperationCanceledException>(() => TestUtil.AwaitAsync(any));
        Assert.Contains("TimerWheel was disposed", e.Message);
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task CallersTokenAndDispose_AtOnce_TheReadNamesWhicheverEndedIt(bool infinite)
    {
        TimerWheel? wheel = null;
        CancellationTokenSource? cts = null;
        SpindleTask delay = default;
        int tokenWon = 0;
        int disposalWon = 0;
        string? failure = null;
        int endedOn = 0;   // the thread the delay's continuation ran on: the one whose call ended it
        int cancelledOn = 0;
        int ran = await Race.Run(TestUtil.Stress(1500),
            before: _ =>
            {
                wheel = new TimerWheel(new ManualClock());
                cts = new CancellationTokenSource();
                delay = infinite ? wheel.Delay(Timeout.InfiniteTimeSpan, cts.Token) : wheel.Delay(TimeSpan.FromMinutes(10), cts.Token);
                endedOn = 0;
                delay.GetAwaiter().UnsafeOnCompleted(() => Volatile.Write(ref endedOn, Environment.CurrentManagedThreadId));
            },
            after: round =>
            {
                try
                {
                    delay.GetAwaiter().GetResult();
                    failure ??= "round " + round + ": the delay succeeded";
                }
                catch (OperationCanceledException e)
                {
                    bool disposal = e.Message.Contains("TimerWheel was disposed", StringComparison.Ordinal);
                    bool byToken = Volatile.Read(ref endedOn) == Volatile.Read(ref cancelledOn);
                    if (byToken != (e.CancellationToken == cts!.Token))
                    {
                        failure ??= "round " + round + ": ended by " + (byToken ? "the caller's token" : "the disposal") + ", but the read says \"" + e.Message +
                            "\", its token the caller's: " + (e.CancellationToken == cts.Token);
                    }
                    else if (e.CancellationToken == cts!.Token && !disposal)
                    {
                        tokenWon++;
                    }
                    else if (disposal && e.CancellationToken != cts.Token && !e.CancellationToken.IsCancellationRequested)
                    {
                        disposalWon++;
                    }
                    else
                    {
                        failure ??= "round " + round + ": read " + e.GetType().Name + " \"" + e.Message + "\", its token the caller's: " + (e.CancellationToken == cts.Token);
                    }
                }
                cts!.Dispose();
            },
            round => EndIt(round, 0),
            round => EndIt(round, 1));
        void EndIt(int round, int side)
        {
            // Each side takes each role in turn, and one of the two, in turn, starts a sweeping number of spins late, so
            // that neither the racers' start order nor either call's length decides who wins.
            bool late = (round / 2) % 2 == side;
            if (late)
            {
                Sources.ContinuationRacer.Spin(round / 4 % 400);
            }
            if ((round % 2 == 0) == (side == 0))
            {
                Volatile.Write(ref cancelledOn, Environment.CurrentManagedThreadId);
                cts!.Cancel();
            }
            else
            {
                wheel!.Dispose();
            }
        }
        Assert.True(failure is null, failure + $" (token won {tokenWon}, disposal {disposalWon} of {ran})");
        Assert.Equal(ran, tokenWon + disposalWon); // both outcomes occur (about 890 and 610 of 1,500 in a Debug run)
    }
}

#if DEBUG
using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Tasks;

/// <summary>
/// A review of stop 41's lazy cancellation of a signal's wait (section 38): the cancelling token is kept by the signal
/// (<c>WaitState.CanceledBy</c>) and dropped by its next wait, so a slow read of a cancelled wait may build its exception
/// after the next wait has dropped that token, or after another token has cancelled the next wait. The Debug hook
/// <c>SourceCoreTestHooks.ReadSawCompleted</c> puts the owner's next wait (and its cancellation) inside the read, between
/// its token check and its read of the outcome: the read must then be the await-once error (the use it held is over),
/// never a cancellation naming the next wait's token, nor one naming no token.
/// </summary>
public sealed class LazyCancellationRaceTests
{
    private enum Next
    {
        /// <summary>The next wait is cancelled by another token: the signal then keeps that token.</summary>
        CanceledByAnother,

        /// <summary>The next wait has no token and stays pending: the old wait's token was dropped, and none kept.</summary>
        PendingWithoutToken,

        /// <summary>The next wait took a set that was there: the old wait's token was dropped, and the version moved.</summary>
        TookASet,
    }

    private enum Reader
    {
        Await,
        Suppressed,
        ValueTask,
        AsTask,
    }

    public static TheoryData<int, int> Cases()
    {
        var data = new TheoryData<int, int>();
        for (int next = 0; next < 3; next++)
        {
            for (int reader = 0; reader < 4; reader++)
            {
                data.Add(next, reader);
            }
        }
        return data;
    }

    [Theory]
    [MemberData(nameof(Cases))]
    public void ASlowReadOfACanceledSignalWait_AsTheNextWaitStarts_IsTheAwaitOnceError_NeverAnotherTokensCancellation(int next, int reader)
    {
        var signal = new Signal();
        using var first = new CancellationTokenSource();
        using var second = new CancellationTokenSource();
        SpindleTask old = signal.WaitAsync(first.Token);
        first.Cancel();
        Assert.Equal(SpindleTaskStatus.Canceled, old.Status);
        SpindleTask nextWait = default;
        bool ran = false;
        SourceCoreTestHooks.ReadSawCompleted = () =>
        {
            SourceCoreTestHooks.ReadSawCompleted = null;
            ran = true;
            switch ((Next)next)
            {
                case Next.CanceledByAnother:
                    nextWait = signal.WaitAsync(second.Token);
                    second.Cancel();
                    break;
                case Next.PendingWithoutToken:
                    nextWait = signal.WaitAsync();
                    break;
                default:
                    signal.Set();
                    nextWait = signal.WaitAsync(second.Token);
                    break;
            }
        };
        object? read;
        try
        {
            read = (Reader)reader switch
            {
                Reader.Await => Read(() => old.GetAwaiter().GetResult()),
                Reader.Suppressed => Read(() => old.SuppressCancellationThrow().GetAwaiter().GetResult()),
                Reader.ValueTask => Read(() => old.AsValueTask().GetAwaiter().GetResult()),
                _ => ReadTask(old.AsTask()),
            };
        }
        finally
        {
            SourceCoreTestHooks.ReadSawCompleted = null;
        }
        Assert.True(ran, "the read never reached the hook");
        Assert.False(read is OperationCanceledException, $"the read of the old wait threw a cancellation naming {Describe(read, first, second)}: the next wait's token state leaked into it");
        Assert.False(read is true, "a suppressed read of the old wait returned true though the use it held was over");
        var misuse = Assert.IsType<InvalidOperationException>(read);
        Assert.Equal(ThrowHelper.AwaitOnceMessage, misuse.Message);

        // The next wait is untouched by the old wait's read.
        switch ((Next)next)
        {
            case Next.CanceledByAnother:
                Assert.Equal(second.Token, Assert.Throws<TaskCanceledException>(() => nextWait.GetAwaiter().GetResult()).CancellationToken);
                break;
            case Next.PendingWithoutToken:
                Assert.False(nextWait.IsCompleted);
                signal.Set();
                Assert.True(nextWait.IsCompleted);
                nextWait.GetAwaiter().GetResult();
                break;
            default:
                Assert.True(nextWait.IsCompleted);
                nextWait.GetAwaiter().GetResult();
                break;
        }
    }

    /// <summary>
    /// <c>FromCanceled</c> builds its exception at the first throwing read and keeps it with a CAS: two threads reading the
    /// same task at once (one of them perhaps suppressing, which must never cache the shared "canceled" value) both get
    /// one <see cref="TaskCanceledException"/>, with the token, and every later read that same object.
    /// </summary>
    [Fact]
    public async Task ConcurrentReadsOfOneFromCanceledTask_GetOneExceptionWithTheToken()
    {
        using var cts = new CancellationTokenSource();
        cts.Cancel();
        SpindleTask task = default;
        object? a = null, b = null;
        bool suppressed = false;
        await TestUtil.WithTimeout(Race.Run(TestUtil.Stress(5_000),
            before: _ => task = SpindleTask.FromCanceled(cts.Token),
            after: round =>
            {
                var first = Assert.IsType<TaskCanceledException>(a);
                Assert.Equal(cts.Token, first.CancellationToken);
                if (!suppressed)
                {
                    Assert.Same(first, b);
                }
                Assert.Same(first, Read(() => task.GetAwaiter().GetResult()));
            },
            round => a = Read(() => task.GetAwaiter().GetResult()),
            round =>
            {
                suppressed = round % 2 == 0;
                b = suppressed ? task.SuppressCancellationThrow().GetAwaiter().GetResult() : Read(() => task.GetAwaiter().GetResult());
                if (suppressed)
                {
                    Assert.Equal(true, b);
                }
            }));
    }

    private static object? Read(Func<object?> read)
    {
        try
        {
            return read();
        }
        catch (Exception e)
        {
            return e;
        }
    }

    private static object? Read(Action read) => Read(() => { read(); return null; });

    private static object? ReadTask(Task task)
    {
        try
        {
            task.GetAwaiter().GetResult();
            return null;
        }
        catch (Exception e)
        {
            return e;
        }
    }

    private static string Describe(object? read, CancellationTokenSource first, CancellationTokenSource second)
        => read is OperationCanceledException oce
            ? oce.CancellationToken == first.Token ? "the old wait's token" : oce.CancellationToken == second.Token ? "the next wait's token" : "no token"
            : "nothing";
}

/// <summary>
/// The observer of a forgotten signal wait runs on the thread that ended the wait, after the publication, while the
/// owner may already start its next wait (<see cref="SignalEndedReadTests"/>): it read the wait, and a read that met the
/// next wait's arming was refused as stale, which the observer reported to <see cref="Spindle.UnobservedException"/> as
/// the await-once error, though the owner did nothing wrong and could not have waited for the observer. A signal's wait
/// never faults, so the observer now only ends what the wait holds. Process-wide hooks and a long race: sequential.
/// </summary>
[Collection(SequentialCollection.Name)]
public sealed class ForgottenSignalWaitRaceTests
{
    /// <summary>
    /// A forgotten wait's observer reads the wait on the thread that ends it (the canceller's, or the setter's), after
    /// the publication, when the owner may already start its next wait (<c>SignalEndedReadTests</c>). A wait of a signal
    /// never faults (a set, a timeout, a cancellation), so the observer has nothing to report: its read meeting the next
    /// wait must report nothing either.
    /// </summary>
    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public void AForgottenSignalWaitsObserver_MeetingTheNextWait_ReportsNothing(bool canceled)
    {
        var signal = new Signal();
        using var first = new CancellationTokenSource();
        using var second = new CancellationTokenSource();
        SpindleTask nextWait = default;
        bool ran = false;
        var reports = UnobservedReports.Observe(UnobservedReports.Own.Any(UnobservedReports.Own.ReportedOnTestThreads(), UnobservedReports.Own.CanceledBy(() => first.Token)), () =>
        {
            signal.WaitAsync(first.Token).Forget();
            SourceCoreTestHooks.ReadSawCompleted = () =>
            {
                SourceCoreTestHooks.ReadSawCompleted = null;
                if (ran)
                {
                    return;
                }
                ran = true;
                nextWait = signal.WaitAsync(second.Token); // the owner's next wait, as the observer reads the old one
            };
            // The observer reads the core (it did, before), or only ends what the wait holds (it does now): the next wait
            // arms in whichever window the observer reaches, the one between its token check and its outcome's read, or
            // the one before it takes what the old wait holds.
            Signal.TestHookBeforeEndingRead = s =>
            {
                if (ReferenceEquals(s, signal) && !ran)
                {
                    ran = true;
                    nextWait = signal.WaitAsync(second.Token);
                }
            };
            try
            {
                if (canceled)
                {
                    first.Cancel(); // the observer reads the cancelled wait here
                }
                else
                {
                    signal.Set(); // the observer reads the set wait here
                }
            }
            finally
            {
                SourceCoreTestHooks.ReadSawCompleted = null;
                Signal.TestHookBeforeEndingRead = null;
            }
        });
        Assert.True(ran, "the observer's read never reached the hook");
        Assert.Empty(reports);
        Assert.False(nextWait.IsCompleted);
        second.Cancel();
        Assert.Equal(second.Token, Assert.Throws<TaskCanceledException>(() => nextWait.GetAwaiter().GetResult()).CancellationToken);
    }

    /// <summary>
    /// The same race without a hook: a forgotten wait is cancelled (or set) on one thread, whose observer reads it there,
    /// while the owner starts its next wait as soon as the signal has no waiter. No round reports anything.
    /// </summary>
    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task AForgottenSignalWaitsObserver_RacingTheNextWait_ReportsNothing(bool canceled)
    {
        var signal = new Signal();
        CancellationTokenSource first = new(), next = new();
        SpindleTask nextWait = default;
        int rounds = 0;
        var reports = await UnobservedReports.ObserveAsync(UnobservedReports.Own.AwaitOnceErrors(), async _ =>
        {
            rounds = await TestUtil.WithTimeout(Race.Run(TestUtil.Stress(20_000),
                before: _ =>
                {
                    first.Dispose();
                    next.Dispose();
                    first = new CancellationTokenSource();
                    next = new CancellationTokenSource();
                    signal.WaitAsync(first.Token).Forget();
                },
                after: round =>
                {
                    next.Cancel();
                    Assert.Equal(next.Token, Assert.Throws<TaskCanceledException>(() => nextWait.GetAwaiter().GetResult()).CancellationToken);
                },
                _ =>
                {
                    if (canceled)
                    {
                        first.Cancel();
                    }
                    else
                    {
                        signal.Set();
                    }
                },
                _ =>
                {
                    TestUtil.SpinUntil(() => !signal.HasWaiter);
                    nextWait = signal.WaitAsync(next.Token);
                }));
        });
        first.Dispose();
        next.Dispose();
        Assert.True(reports.IsEmpty, $"{reports.Count} of {rounds} rounds reported the await-once error for a forgotten wait the owner had moved on from");
    }
}
#endif

using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Frames;

/// <summary>Bad input gets an immediate, clear exception, and leaves the loop working.</summary>
public sealed class FrameBadInputTests
{
    [Fact]
    public void RunFrame_FromInsideAFrame_ThrowsInvalidOperation_AndTheLoopGoesOn()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        var errors = new Exception?[3];
        async SpindleTask Reenter()
        {
            await loop.Yield();
            errors[0] = Record.Exception(() => loop.RunFrame());
            errors[1] = Record.Exception(() => loop.RunPhase(loop.LateUpdate));
            errors[2] = Record.Exception(() => loop.BeginFrame(TimeSpan.Zero));
        }

        SpindleTask task = Reenter();
        loop.RunFrame();
        task.GetAwaiter().GetResult();
        foreach (Exception? e in errors)
        {
            Assert.IsType<InvalidOperationException>(e);
            Assert.Contains("inside a frame", e!.Message, StringComparison.Ordinal);
        }
        Assert.Equal(2, loop.FrameCount);
        loop.RunFrame();
        Assert.Equal(3, loop.FrameCount);
    }

    [Fact]
    public void Constructor_WithANullOrBlankName_ThrowsAndNamesTheFix()
    {
        var nullName = Assert.Throws<ArgumentNullException>(() => new FrameLoop(null!));
        Assert.Equal("name", nullName.ParamName);
        Assert.Contains("new FrameLoop()", nullName.Message, StringComparison.Ordinal);
        foreach (string blank in new[] { "", "   ", "\t" })
        {
            var e = Assert.Throws<ArgumentException>(() => new FrameLoop(blank));
            Assert.Equal("name", e.ParamName);
            Assert.Contains("white space", e.Message, StringComparison.Ordinal);
        }
        Assert.Null(new FrameLoop().Name);
        Assert.Equal("match-7", new FrameLoop("match-7").Name);
    }

    /// <summary>A named loop's <see cref="FrameLoop.Run"/> thread carries the name, for a profiler or a dump of a host of many loops.</summary>
    [Fact]
    public async Task Run_OfANamedLoop_NamesItsThreadAfterTheLoop()
    {
        var loop = new FrameLoop("match-7");
        using var cts = new CancellationTokenSource();
        Task run = loop.Run(1000, cts.Token);
        string? threadName = null;
        async SpindleTask OnTheLoop()
        {
            await loop.SwitchTo();
            threadName = Thread.CurrentThread.Name;
        }
        await TestUtil.WithTimeout(OnTheLoop());
        cts.Cancel();
        await TestUtil.WithTimeout(run);
        Assert.Equal("Spindle FrameLoop: match-7", threadName);
    }

    [Fact]
    public async Task RunFrame_WhileAnotherThreadRunsAFrame_ThrowsInvalidOperation()
    {
        var loop = new FrameLoop();
        using var inFrame = new ManualResetEventSlim();
        using var release = new ManualResetEventSlim();
        loop.Yield().GetAwaiter().UnsafeOnCompleted(() =>
        {
            inFrame.Set();
            release.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds));
        });
        Task other = TestUtil.RunOnThread(() => loop.RunFrame());
        Assert.True(inFrame.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)));
        var e = Assert.Throws<InvalidOperationException>(() => loop.RunFrame());
        Assert.Contains("Another thread", e.Message, StringComparison.Ordinal);
        release.Set();
        await TestUtil.WithTimeout(other);
        loop.RunFrame(); // the other thread has finished its frame: this one may run the next
        Assert.Equal(2, loop.FrameCount);
    }

    [Fact]
    public void NegativeCountsAndDelays_ThrowArgumentOutOfRange()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        Assert.Throws<ArgumentOutOfRangeException>(() => loop.DelayFrame(-1));
        Assert.Throws<ArgumentOutOfRangeException>(() => loop.DelayFrame(-1, loop.LateUpdate, new CancellationToken(true)));
        Assert.Throws<ArgumentOutOfRangeException>(() => loop.Delay(TimeSpan.FromTicks(-1)));
        Assert.Throws<ArgumentOutOfRangeException>(() => loop.Delay(TimeSpan.FromMilliseconds(-2), FrameTimeKind.Unscaled));
        Assert.Throws<ArgumentOutOfRangeException>(() => loop.Delay(TimerWheel.MaxDelay + TimeSpan.FromMilliseconds(1)));
        Assert.Throws<ArgumentOutOfRangeException>(() => loop.Delay(TimeSpan.FromSeconds(1), (FrameTimeKind)7));
        Assert.Throws<ArgumentOutOfRangeException>(() => loop.RunFrame(TimeSpan.FromTicks(-1)));
        Assert.Throws<ArgumentOutOfRangeException>(() => loop.BeginFrame(TimeSpan.FromTicks(-1)));
        Assert.Throws<ArgumentOutOfRangeException>(() => loop.FixedDeltaTime = TimeSpan.FromTicks(-1));
        Assert.Throws<ArgumentOutOfRangeException>(() => loop.TimeScale = -0.5);
        Assert.Throws<ArgumentOutOfRangeException>(() => loop.TimeScale = double.NaN);
        Assert.Throws<ArgumentOutOfRangeException>(() => loop.TimeScale = double.PositiveInfinity);
        Assert.Throws<ArgumentOutOfRangeException>(() => { _ = loop.Run(0, CancellationToken.None); });
        Assert.Throws<ArgumentOutOfRangeException>(() => { _ = loop.Run(-60, CancellationToken.None); });
        Assert.Throws<ArgumentOutOfRangeException>(() => { _ = loop.Run(double.NaN, CancellationToken.None); });
        Assert.Throws<ArgumentOutOfRangeException>(() => { _ = loop.Run(double.PositiveInfinity, CancellationToken.None); });
        Assert.Equal(0, loop.QueuedCount);
        Assert.Equal(0, loop.PendingTimers);
        Assert.Equal(1.0, loop.TimeScale);
        Assert.Equal(FrameUtil.Step, loop.FixedDeltaTime);
        loop.RunFrame();
    }

    [Fact]
    public void NullArguments_ThrowArgumentNull()
    {
        var loop = new FrameLoop();
        Assert.Throws<ArgumentNullException>(() => loop.WaitUntil(null!));
        Assert.Throws<ArgumentNullException>(() => loop.WaitWhile(null!, loop.Update));
        Assert.Throws<ArgumentNullException>(() => loop.WaitUntil(1, null!));
        Assert.Throws<ArgumentNullException>(() => loop.WaitWhile(1, null!));
        Assert.Throws<ArgumentNullException>(() => loop.Yield(null!));
        Assert.Throws<ArgumentNullException>(() => loop.NextFrame(null!));
        Assert.Throws<ArgumentNullException>(() => loop.SwitchTo(null!));
        Assert.Throws<ArgumentNullException>(() => loop.DelayFrame(1, null!));
        Assert.Throws<ArgumentNullException>(() => loop.Delay(TimeSpan.Zero, FrameTimeKind.Scaled, null!));
        Assert.Throws<ArgumentNullException>(() => loop.RunPhase(null!));
        Assert.Throws<ArgumentNullException>(() => loop.AddPhaseAfter(null!, "x"));
        Assert.Throws<ArgumentNullException>(() => Spindle.SwitchTo(null!));
        Assert.Throws<ArgumentNullException>(() => loop.Yield().GetAwaiter().UnsafeOnCompleted(null!));
        Assert.Equal(0, loop.QueuedCount);
    }

    [Fact]
    public void AnotherLoopsPhase_ThrowsArgument()
    {
        var loop = new FrameLoop();
        var other = new FrameLoop();
        Assert.Throws<ArgumentException>(() => loop.Yield(other.Update));
        Assert.Throws<ArgumentException>(() => loop.NextFrame(other.Update));
        Assert.Throws<ArgumentException>(() => loop.DelayFrame(3, other.Update));
        Assert.Throws<ArgumentException>(() => loop.Delay(TimeSpan.FromSeconds(1), FrameTimeKind.Scaled, other.Update));
        Assert.Throws<ArgumentException>(() => loop.WaitUntil(() => true, other.Update));
        Assert.Throws<ArgumentException>(() => loop.SwitchTo(other.Update));
        Assert.Throws<ArgumentException>(() => loop.RunPhase(other.Update));
        Assert.Throws<ArgumentException>(() => loop.AddPhaseBefore(other.Update, "x"));
        Assert.Equal(0, loop.QueuedCount);
    }

    // A null name threw ArgumentException (the type .NET keeps for a bad value, not a missing one), where every other
    // null argument of the loop throws ArgumentNullException; the duplicate-name message said what was wrong, not what to do.
    [Fact]
    public void AddPhase_NullName_ThrowsArgumentNullNamingName_EveryOverload_AndAddsNothing()
    {
        var loop = new FrameLoop();
        Assert.Equal("name", Assert.Throws<ArgumentNullException>(() => loop.AddPhase(null!)).ParamName);
        Assert.Equal("name", Assert.Throws<ArgumentNullException>(() => loop.AddPhaseAfter(loop.Update, null!)).ParamName);
        Assert.Equal("name", Assert.Throws<ArgumentNullException>(() => loop.AddPhaseBefore(loop.Update, null!)).ParamName);
        Assert.Equal(4, loop.Phases.Count);
        ArgumentException taken = Assert.Throws<ArgumentException>(() => loop.AddPhaseAfter(loop.Update, "LateUpdate"));
        Assert.Contains("name of its own", taken.Message, StringComparison.Ordinal);
        Assert.Equal(4, loop.Phases.Count);
    }

    // A second Run while one runs said only "already being run"; it now says how to restart a loop.
    [Fact]
    public async Task Run_WhileRunning_ThrowsNamingTheFix_AndTheFirstRunGoesOn()
    {
        var loop = new FrameLoop();
        using var cts = new CancellationTokenSource();
        Task run = loop.Run(1000, cts.Token);
        try
        {
            InvalidOperationException e = Assert.Throws<InvalidOperationException>(() => { _ = loop.Run(60, CancellationToken.None); });
            Assert.Contains("Cancel the running one's token and await its task", e.Message, StringComparison.Ordinal);
            long seen = loop.FrameCount;
            TestUtil.SpinUntil(() => loop.FrameCount > seen + 1);
        }
        finally
        {
            cts.Cancel();
            await TestUtil.WithTimeout(run);
        }
    }

    [Fact]
    public void AddPhase_BadNameOrDuringAFrame_Throws()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        Assert.Equal("name", Assert.Throws<ArgumentException>(() => loop.AddPhase("")).ParamName);
        Assert.Throws<ArgumentException>(() => loop.AddPhase("Update"));
        loop.AddPhase("Render");
        Assert.Throws<ArgumentException>(() => loop.AddPhase("Render"));
        Exception? during = null;
        async SpindleTask Add()
        {
            await loop.Yield();
            during = Record.Exception(() => loop.AddPhase("Physics"));
        }

        Add().Forget();
        loop.RunFrame();
        Assert.IsType<InvalidOperationException>(during);
        Assert.Equal(5, loop.Phases.Count);
    }

    [Fact]
    public void AwaitingAPooledWaitTwice_ThrowsNamingPreserve()
    {
        FrameLoop loop = FrameUtil.NewBoundLoop();
        SpindleTask task = loop.DelayFrame(2);
        loop.RunFrames(2);
        task.GetAwaiter().GetResult();
        var e = Assert.Throws<InvalidOperationException>(() => task.GetAwaiter().GetResult());
        Assert.Contains("Preserve()", e.Message, StringComparison.Ordinal);
    }
}

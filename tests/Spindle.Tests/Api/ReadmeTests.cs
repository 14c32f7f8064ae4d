using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using System.Reflection;
using System.Runtime.CompilerServices;
using System.Text.RegularExpressions;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Api;

/// <summary>
/// Keeps the README true to the code: its C# examples are code that compiles here and does what their comments say,
/// and every member of a Spindle type that it names in backticks (<c>`Spindle.Delay(ms, token)`</c>,
/// <c>`SpindleDiagnostics.TrackTasks`</c>) exists.
/// </summary>
[Collection(SequentialCollection.Name)] // the diagnostics example turns the process-wide task tracker on
public sealed partial class ReadmeTests : IDisposable
{
    public void Dispose()
    {
        SpindleDiagnostics.CaptureStackTraces = false;
        SpindleDiagnostics.TrackTasks = false;
    }

    private static string Readme() => File.ReadAllText(Path.Combine(GeneratedFiles.RepositoryRoot(), "README.md")).Replace("\r\n", "\n", StringComparison.Ordinal);

    private static List<string> CSharpBlocks() => CSharpBlock().Matches(Readme()).Select(m => m.Groups[1].Value).ToList();

    private static string ThisDirectory([CallerFilePath] string path = "") => Path.GetDirectoryName(path)!;

    /// <summary>The code of this file between two marker lines, unindented by <paramref name="indent"/> spaces.</summary>
    private static string MarkedCode(string beginMarker, string endMarker, int indent)
    {
        string source = File.ReadAllText(Path.Combine(ThisDirectory(), "ReadmeTests.cs")).Replace("\r\n", "\n", StringComparison.Ordinal);
        int start = source.IndexOf(beginMarker, StringComparison.Ordinal) + beginMarker.Length;
        int end = source.IndexOf(endMarker, StringComparison.Ordinal);
        return string.Join("\n", source[start..end].Split('\n').Select(l => l.Length >= indent ? l[indent..] : l.TrimStart()));
    }

    [Fact]
    public void FirstExample_IsTheCodeOfReadmeExampleCs_AndReturnsWhatItsCommentsSay()
    {
        string example = CSharpBlocks()[0];
        string file = File.ReadAllText(Path.Combine(ThisDirectory(), "ReadmeExample.cs")).Replace("\r\n", "\n", StringComparison.Ordinal);
        Assert.True(file.EndsWith(example, StringComparison.Ordinal),
            "README.md's first C# example is no longer tests/Spindle.Tests/Api/ReadmeExample.cs: copy the one to the other, so the README shows code that compiles and runs.");

        Assert.Equal(1042, global::Example.DemoAsync().GetAwaiter().GetResult());
    }

    [Fact]
    public void DiagnosticsExample_IsTheCodeBelow_AndListsASuspendedMethod()
    {
        string example = CSharpBlocks()[1];
        Assert.Equal(example, MarkedCode("        // README begin\n", "        // README end\n", indent: 8));

        var output = new StringWriter();
        TextWriter console = Console.Out;
        Console.SetOut(output);
        var promise = new Promise();
        try
        {
            RunDiagnosticsExample(); // turns tracking on (what it lists now is not looked at)
            SpindleTask suspect = WaitFor(promise);
            output.GetStringBuilder().Clear();
            RunDiagnosticsExample();
            promise.SetResult();
            suspect.GetAwaiter().GetResult();
        }
        finally
        {
            Console.SetOut(console);
        }
        Assert.Contains($"{typeof(ReadmeTests).FullName}.{nameof(WaitFor)} (Pending, ", output.ToString(), StringComparison.Ordinal);
        Assert.Contains(nameof(DiagnosticsExample_IsTheCodeBelow_AndListsASuspendedMethod), output.ToString(), StringComparison.Ordinal); // the stack trace
    }

    private static async SpindleTask WaitFor(Promise promise) => await promise.Task;

    private static void RunDiagnosticsExample()
    {
        // README begin
        SpindleDiagnostics.TrackTasks = true;          // from now on, every async SpindleTask method that suspends is listed
        SpindleDiagnostics.CaptureStackTraces = true;  // plus where it first suspended: a stack walk each, for diagnosis only
        // ... run the suspect code ...
        foreach (TrackedTask task in SpindleDiagnostics.GetTrackedTasks())   // oldest first
        {
            Console.WriteLine(task);                   // "MyApp.Session.ReadLoop (Pending, 5230 ms)"; Succeeded = never read
            Console.WriteLine(task.StackTrace);        // where it first suspended, formatted now (a snapshot formats none)
        }
        // README end
    }

    [Fact]
    public async Task RequestReplyExample_IsTheCodeBelow_AndTakesAReplyInTimeOrTimesOutWithoutAThrow()
    {
        string body = MarkedCode("    // README ask begin\n", "    // README ask end\n", indent: 4);
        Assert.Equal(CSharpBlocks()[2], body);

        var clock = new ManualClock();
        using var timers = new TimerWheel(clock);
        var reply = new Promise<int>();
        short sent = 0;

        // Answered in time, after the ask has suspended.
        SpindleTask<int?> ask = AskAsync(reply, t => sent = t, TimeSpan.FromSeconds(1), timers);
        Assert.False(ask.IsCompleted);
        Assert.True(reply.TrySetResult(sent, 42));
        Assert.Equal(42, await ask);

        // Timed out: null, no exception; the late reply, with the old ask's token, completes nothing.
        ask = AskAsync(reply, t => sent = t, TimeSpan.FromSeconds(1), timers);
        short late = sent;
        clock.Advance(TimeSpan.FromMilliseconds(999));
        Assert.False(ask.IsCompleted);
        clock.Advance(TimeSpan.FromMilliseconds(1));
        Assert.True(ask.IsCompleted);
        Assert.Null(await ask);
        Assert.False(reply.TrySetResult(late, 7));

        // Answered inside send, before the wait: no timer at all; the promise is ready for the next ask.
        ask = AskAsync(reply, t => reply.TrySetResult(t, 5), TimeSpan.FromSeconds(1), timers);
        Assert.Equal(5, await ask);
        Assert.Equal(0, timers.PendingCount);
        Assert.False(reply.IsCompleted);
    }

    // README ask begin
    // One ask at a time on a reused promise. `send` hands the request and its token to the replier, which answers with
    // reply.TrySetResult(token, value): an answer to an earlier ask completes nothing.
    static async SpindleTask<int?> AskAsync(Promise<int> reply, Action<short> send, TimeSpan timeout, TimerWheel timers)
    {
        short token = reply.Token;
        try
        {
            send(token);
            var (answered, value) = await reply.Task.TryWithTimeout(timeout, timers);
            if (answered)
                return value;
            if (!reply.TrySetCanceled(token, default))
                return await reply.Task;                  // the reply came after the timeout, before this claim
            return null;                                  // timed out: nothing thrown, nothing allocated
        }
        finally
        {
            reply.Reset();                                // a new use for the next ask
        }
    }
    // README ask end

    [Fact]
    public async Task CancellationExample_IsTheCodeBelow_AndEndsLoopsWithoutAThrow()
    {
        string body = MarkedCode("    // README cancellation begin\n", "    // README cancellation end\n", indent: 4);
        Assert.Equal(CSharpBlocks()[3], body);

        int loopThread = Environment.CurrentManagedThreadId;
        int throwsOnLoopThread = 0;
        EventHandler<System.Runtime.ExceptionServices.FirstChanceExceptionEventArgs> count = (_, e) =>
        {
            if (e.Exception is OperationCanceledException && Environment.CurrentManagedThreadId == loopThread)
            {
                Interlocked.Increment(ref throwsOnLoopThread);
            }
        };
        var loop = new FrameLoop();
        using var unload = new CancellationTokenSource();
        var entities = new Entity[100];
        var runs = new SpindleTask[entities.Length];
        AppDomain.CurrentDomain.FirstChanceException += count;
        try
        {
            for (int i = 0; i < entities.Length; i++)
            {
                entities[i] = new Entity();
                runs[i] = RunEntity(loop, entities[i], unload.Token);
            }
            for (int f = 0; f < 3; f++)
            {
                loop.RunFrame();
            }
            unload.Cancel(); // each loop waits for a frame or for its delay: every one ends
            loop.RunFrame();
            foreach (SpindleTask run in runs)
            {
                Assert.True(run.IsCompleted);
                await run; // ended normally: nothing thrown
            }
        }
        finally
        {
            AppDomain.CurrentDomain.FirstChanceException -= count;
        }
        Assert.Equal(0, Volatile.Read(ref throwsOnLoopThread));
        Assert.All(entities, e => Assert.True(e.Updates >= 1));

        var answered = new Promise<int>();
        SpindleTask<int?> reply = ReplyOrNull(answered);
        answered.SetResult(42);
        Assert.Equal(42, await reply);
        var dropped = new Promise<int>();
        SpindleTask<int?> none = ReplyOrNull(dropped);
        dropped.SetCanceled();
        Assert.Null(await none);
        var failed = new Promise<int>();
        SpindleTask<int?> fault = ReplyOrNull(failed);
        failed.SetException(new InvalidDataException("bad reply"));
        await Assert.ThrowsAsync<InvalidDataException>(async () => await fault);
    }

    private sealed class Entity
    {
        public int Updates;

        public void Update() => Updates++;
    }

    // README cancellation begin
    async SpindleTask RunEntity(FrameLoop loop, Entity e, CancellationToken unload)
    {
        while (true)
        {
            if (await loop.NextFrame(unload).SuppressCancellationThrow())
                return;                                   // unloaded: no exception
            e.Update();
            if (await loop.Delay(TimeSpan.FromSeconds(1), unload).SuppressCancellationThrow())
                return;
        }
    }

    async SpindleTask<int?> ReplyOrNull(Promise<int> request)
    {
        var (canceled, reply) = await request.Task.SuppressCancellationThrow();
        return canceled ? null : reply;                   // a result passes through; a fault still throws
    }
    // README cancellation end

    [Fact]
    public void TimerExample_IsTheCodeBelow_AndClosesAnIdleSession()
    {
        string body = MarkedCode("    // README timer begin\n", "    // README timer end\n", indent: 4);
        Assert.Equal(CSharpBlocks()[5], body);

        var clock = new ManualClock();
        using var timers = new TimerWheel(clock);
        var session = new Session(timers);
        clock.Advance(TimeSpan.FromSeconds(29));
        session.OnMessage(); // pushed back to 59 s
        clock.Advance(TimeSpan.FromSeconds(29));
        Assert.False(session.Closed);
        clock.Advance(TimeSpan.FromSeconds(1));
        Assert.True(session.Closed);
        session.Dispose();
        Assert.Equal(0, timers.PendingCount);
    }

    // README timer begin
    sealed class Session : IDisposable
    {
        private readonly SpindleTimer _idle;

        public Session(TimerWheel timers) =>
            _idle = timers.CreateTimer(static s => ((Session)s!).Closed = true, this, TimeSpan.FromSeconds(30));

        public bool Closed { get; private set; }

        public void OnMessage() => _idle.Change(TimeSpan.FromSeconds(30), Timeout.InfiniteTimeSpan); // one CAS

        public void Dispose() => _idle.Dispose(); // stopped; its node goes back to the pool
    }
    // README timer end

    [Fact]
    public void TimeProviderExample_IsTheCodeBelow_AndCancelsAnIdleSource()
    {
        string body = MarkedCode("        // README timeprovider begin\n", "        // README timeprovider end\n", indent: 8);
        Assert.Equal(CSharpBlocks()[6], body);

        var clock = new ManualClock();
        using var wheel = new TimerWheel(clock);
        // README timeprovider begin
        TimeProvider timers = wheel.AsTimeProvider(); // TimerWheel.Default.AsTimeProvider() for real time
        using var idle = new CancellationTokenSource(TimeSpan.FromSeconds(30), timers); // a session's idle timeout
        idle.CancelAfter(TimeSpan.FromSeconds(30)); // a message pushes it back: one CAS on the wheel's timer
        // README timeprovider end
        clock.Advance(TimeSpan.FromSeconds(20));
        idle.CancelAfter(TimeSpan.FromSeconds(30)); // pushed back to 50 s
        clock.Advance(TimeSpan.FromSeconds(29));
        Assert.False(idle.IsCancellationRequested);
        clock.Advance(TimeSpan.FromSeconds(1));
        Assert.True(idle.IsCancellationRequested);
        Assert.Equal(0, wheel.PendingCount);
    }

    [Fact]
    public async Task UniTaskExample_IsTheCodeBelow_AndDoesWhatItsCommentsSay()
    {
        string body = MarkedCode("    // README unitask begin\n", "    // README unitask end\n", indent: 4);
        Assert.Equal(CSharpBlocks()[4], body);

        var loop = new FrameLoop();
        loop.RunFrame();

        // ForgetWith: the handler sees the fault, and nothing reaches the process-wide handler.
        Exception? seen = null;
        var failing = new Promise();
        ForgetWith(failing.Task, e => seen = e).Forget();
        failing.SetException(new InvalidDataException("effect"));
        Assert.IsType<InvalidDataException>(seen);

        // ClickedWithin: the unscaled timeout runs out during a pause (TimeScale 0); a click in time is true.
        loop.TimeScale = 0;
        var button = new Signal(false);
        SpindleTask<bool> late = ClickedWithin(loop, button, TimeSpan.FromMilliseconds(100), default);
        for (int f = 0; f < 7 && !late.IsCompleted; f++)
        {
            loop.RunFrame(TimeSpan.FromMilliseconds(20));
        }
        Assert.False(await late);
        SpindleTask<bool> inTime = ClickedWithin(loop, button, TimeSpan.FromMilliseconds(100), default);
        loop.RunFrame(TimeSpan.FromMilliseconds(20));
        button.Set();
        Assert.True(await inTime);
        loop.TimeScale = 1;

        // CancelAfter: cancels after 50 ms of unscaled loop time, not before.
        using var cancelled = new CancellationTokenSource();
        CancelAfter(loop, cancelled, TimeSpan.FromMilliseconds(50)).Forget();
        loop.RunFrame(TimeSpan.FromMilliseconds(20));
        loop.RunFrame(TimeSpan.FromMilliseconds(20));
        Assert.False(cancelled.IsCancellationRequested);
        loop.RunFrame(TimeSpan.FromMilliseconds(20));
        loop.RunFrame(TimeSpan.FromMilliseconds(20));
        Assert.True(cancelled.IsCancellationRequested);

        // RunThenBack: the work runs on a worker, and the method continues on the loop thread.
        int workThread = 0;
        bool backOnLoop = false;
        async SpindleTask<int> Caller()
        {
            int r = await RunThenBack(loop, () => { workThread = Environment.CurrentManagedThreadId; return 7; });
            backOnLoop = loop.IsLoopThread;
            return r;
        }
        SpindleTask<int> call = Caller().Preserve();
        for (int f = 0; f < 500 && !call.IsCompleted; f++)
        {
            loop.RunFrame();
            Thread.Sleep(1);
        }
        Assert.Equal(7, await call);
        Assert.True(backOnLoop);
        Assert.NotEqual(Environment.CurrentManagedThreadId, workThread);
    }

    // README unitask begin
    // Forget(exceptionHandler): await in a try/catch, and forget that.
    static async SpindleTask ForgetWith(SpindleTask task, Action<Exception> onError)
    {
        try { await task; }
        catch (Exception error) { onError(error); }
    }

    // A timeout in unscaled loop time (UniTask: .Timeout(t, DelayType.UnscaledDeltaTime)): true for a click in time.
    static async SpindleTask<bool> ClickedWithin(FrameLoop loop, Signal button, TimeSpan timeout, CancellationToken token)
        => await SpindleTask.WhenAny(button.WaitAsync(token), loop.Delay(timeout, FrameTimeKind.Unscaled, token)) == 0;

    // CancelAfterSlim in loop time: cancels the source once unscaled loop time has moved on by the delay.
    static async SpindleTask CancelAfter(FrameLoop loop, CancellationTokenSource source, TimeSpan delay)
    {
        if (!await loop.Delay(delay, FrameTimeKind.Unscaled, source.Token).SuppressCancellationThrow())
            source.Cancel();
    }

    // UniTask.Run resumes on the main thread; Spindle.Run resumes on its worker, so switch back before touching the game.
    static async SpindleTask<int> RunThenBack(FrameLoop loop, Func<int> work)
    {
        int result = await Spindle.Run(work);
        await Spindle.SwitchTo(loop);
        return result;
    }
    // README unitask end

    [Fact]
    public void EveryMemberOfASpindleTypeTheReadmeNames_Exists()
    {
        Dictionary<string, Type> types = typeof(SpindleTask).Assembly.GetExportedTypes()
            .GroupBy(t => t.Name.Split('`')[0])
            .ToDictionary(g => g.Key, g => g.First());
        var missing = new List<string>();
        int checkedCount = 0;
        foreach (Match span in CodeSpan().Matches(Readme()))
        {
            string code = span.Groups[1].Value;
            if (code.Contains('/', StringComparison.Ordinal))
            {
                continue; // a path (bench/Spindle.Bench), not code
            }
            foreach (Match reference in MemberReference().Matches(code))
            {
                if (!types.TryGetValue(reference.Groups[1].Value, out Type? type))
                {
                    continue; // not a Spindle type: Task.WhenAny, ExecutionContext.Run, ...
                }
                string member = reference.Groups[2].Value;
                checkedCount++;
                if (type.GetMember(member, BindingFlags.Public | BindingFlags.Static | BindingFlags.Instance).Length == 0)
                {
                    missing.Add($"`{code}`: {type.Name} has no public member {member}");
                }
            }
        }
        Assert.True(checkedCount > 20, $"only {checkedCount} references found: the pattern no longer matches the README");
        Assert.True(missing.Count == 0, "README.md names members that do not exist:\n  " + string.Join("\n  ", missing));
    }

    [GeneratedRegex(@"```csharp\n(.*?)```", RegexOptions.Singleline)]
    private static partial Regex CSharpBlock();

    [GeneratedRegex(@"`([^`\n]+)`")]
    private static partial Regex CodeSpan();

    // Type.Member, optionally with generic arguments on the type: SpindleTask<T>.FromResult, Spindle.Delay.
    [GeneratedRegex(@"(?<![\w.])([A-Z]\w*)(?:<[^<>]*>)?\.([A-Z]\w*)")]
    private static partial Regex MemberReference();
}

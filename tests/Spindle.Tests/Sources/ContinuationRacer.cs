using System;
using System.Threading;

namespace SpindleLib.Tests.Sources;

/// <summary>
/// Runs two steps at the same moment, one on the calling thread and one on a second thread, round after round: for races
/// whose window is a few instructions (a claim made of one atomic step). The second thread is kept for every round and
/// spins between them, so that its step is never woken from a wait late (two threads released by a Barrier met too
/// seldom to find a claim made of a read and a store, mutation testing mut51 and mut52), and one of the two steps, in
/// turn, first spins for a few iterations that sweep through the rounds, so that the steps meet at every small offset. Or
/// (<see cref="RunOnceReady"/>) the second thread's step waits for a condition the first thread's step makes true, and
/// follows it at once. On one processor a spin never lets the other thread run (two taskset -c 1 runs hung until their
/// timeout, mut51), so there every wait yields instead: the rounds still check their outcome, though the race itself is
/// rare. The forms for a <see cref="RerunningSource"/> race its continuation's runs. The race tests keep one for their
/// whole run through <see cref="RaceRounds"/>, which runs their rounds; some also meet at a test hook through
/// <see cref="HookMeeting"/> (<c>grep RaceRounds</c> lists them). A test that uses it runs in the sequential collection,
/// since its two threads must run at once, on the two cores a small machine has.
/// </summary>
internal sealed class ContinuationRacer : IDisposable
{
    private const int Stopped = -2;
    private readonly Thread _thread;
    private int _round = -1;     // the round posted to run; Stopped to end
    private int _ran = -1;       // the last round run
    private Func<bool>? _ready;  // the round's step waits for this first, if set
    private Action? _step;
    private int _spins;
    private Exception? _error;

    public ContinuationRacer(string name)
    {
        _thread = new Thread(Loop) { IsBackground = true, Name = name };
        _thread.Start();
    }

    /// <summary>
    /// Runs <paramref name="mine"/> on this thread and <paramref name="theirs"/> on the racing one at once (round
    /// <paramref name="round"/>, numbered from 0 and never repeated), and returns what each threw.
    /// </summary>
    public (Exception? Mine, Exception? Theirs) RunBothAtOnce(int round, Action mine, Action theirs)
    {
        int jitter = round % 16; // spins before this round's step, on one side or the other
        Post(round, ready: null, theirs, jitter % 2 == 1 ? jitter / 2 : 0);
        Spin(jitter % 2 == 0 ? jitter / 2 : 0);
        return (Run(mine), WaitForRun(round));
    }

    /// <summary>Runs <paramref name="source"/>'s continuation on this thread and on the racing one at once, and returns what each run threw.</summary>
    public (Exception? Mine, Exception? Theirs) RunBothAtOnce(int round, RerunningSource source)
        => RunBothAtOnce(round, source.RunAgain, source.RunAgain);

    /// <summary>
    /// As <see cref="RunBothAtOnce(int, RerunningSource)"/>, each side first storing to the cache lines of
    /// <paramref name="lines"/> (<see cref="NewLinePair"/>) the other side wrote last (<see cref="StoreToLines"/>).
    /// </summary>
    public (Exception? Mine, Exception? Theirs) RunBothAtOnce(int round, RerunningSource source, long[][] lines)
        => RunBothAtOnce(
            round,
            () =>
            {
                StoreToLines(lines[round & 1], round);
                source.RunAgain();
            },
            () =>
            {
                StoreToLines(lines[(round & 1) ^ 1], round); // the lines the other side wrote last round
                source.RunAgain();
            });

    /// <summary>
    /// Runs <paramref name="mine"/> on this thread while the racing one waits for <paramref name="ready"/>, then spins
    /// <paramref name="spins"/> iterations and runs <paramref name="theirs"/>. Returns what <paramref name="mine"/> threw,
    /// and what <paramref name="theirs"/> threw once it has run. <paramref name="mine"/> must make <paramref name="ready"/>
    /// true (the racing thread waits for it without a bound).
    /// </summary>
    public (Exception? Mine, Exception? Theirs) RunOnceReady(int round, Func<bool> ready, int spins, Action theirs, Action mine)
    {
        Post(round, ready, theirs, spins);
        return (Run(mine), WaitForRun(round));
    }

    /// <summary>
    /// Calls <paramref name="register"/> on this thread, which hands <paramref name="source"/> a continuation, while the
    /// racing thread waits for that continuation and, the moment it sees it, completes the source and runs it: a source
    /// completed on another thread while its registrant is still between the registration and what follows it. The source
    /// spins after keeping the continuation for a number of iterations that sweeps through the rounds
    /// (<see cref="RerunningSource.SpinsAfterRegistration"/>), so that the run meets the registrant at every small offset.
    /// Returns what the run threw.
    /// </summary>
    public Exception? RunOnceRegistered(int round, RerunningSource source, Action register)
    {
        source.SpinsAfterRegistration = round % 32;
        (Exception? mine, Exception? theirs) = RunOnceReady(round, () => source.IsRegistered, spins: 0, () =>
        {
            source.MarkCompleted();
            source.RunAgain();
        }, register);
        if (mine is not null)
        {
            throw new InvalidOperationException($"round {round}: the registration threw", mine);
        }
        return theirs;
    }

    /// <summary>How many of <paramref name="errors"/> are the refusal of a second run (the misuse's error); null counts as a run that went through.</summary>
    /// <exception cref="InvalidOperationException">A run threw something else.</exception>
    public static int Refusals(int round, params Exception?[] errors)
    {
        int refused = 0;
        foreach (Exception? error in errors)
        {
            if (error is InvalidOperationException ex && ex.Message.Contains("ran a continuation it had already run", StringComparison.Ordinal))
            {
                refused++;
            }
            else if (error is not null)
            {
                throw new InvalidOperationException($"round {round}: a run threw something other than the misuse's error", error);
            }
        }
        return refused;
    }

    /// <summary>
    /// Two sets of 16 cache lines for <see cref="StoreToLines"/>: each round one side writes set <c>round &amp; 1</c> and
    /// the other set <c>(round &amp; 1) ^ 1</c>, so that each writes lines the other wrote the round before.
    /// </summary>
    public static long[][] NewLinePair() => new[] { new long[8 * 16], new long[8 * 16] };

    /// <summary>
    /// Writes <paramref name="value"/> in each cache line of <paramref name="lines"/> (one of <see cref="NewLinePair"/>),
    /// just before a side's step, on lines the other thread wrote last: on x64 the stores wait in the store buffer for the
    /// lines to come over, and the step's own stores, queued behind them, reach the other thread later, while its loads
    /// go ahead (as on a busy machine). A race between a store and a later load of this thread (a missing fence), or a
    /// read and a store of two threads that only a compare-exchange keeps apart, then meets its window far more often.
    /// Stores only: one that read the line first would wait for it here.
    /// </summary>
    public static void StoreToLines(long[] lines, long value)
    {
        for (int i = 0; i < lines.Length; i += 8)
        {
            lines[i] = value;
        }
    }

    /// <summary>Ends the racing thread (30 s bound).</summary>
    public void Dispose()
    {
        Volatile.Write(ref _round, Stopped);
        Assert.True(_thread.Join(TimeSpan.FromSeconds(30)), "the racing thread did not end");
    }

    private void Post(int round, Func<bool>? ready, Action step, int spins)
    {
        _ready = ready;
        _step = step;
        _spins = spins;
        Volatile.Write(ref _round, round); // publishes the fields above
    }

    private Exception? WaitForRun(int round)
    {
        long until = Environment.TickCount64 + 30_000;
        while (Volatile.Read(ref _ran) != round)
        {
            if (Environment.TickCount64 > until)
            {
                throw new TimeoutException($"round {round}: the racing thread did not run its side within 30 s");
            }
            Pause();
        }
        return _error;
    }

    /// <summary>Runs <paramref name="step"/>; returns what it threw.</summary>
    private static Exception? Run(Action step)
    {
        try
        {
            step();
            return null;
        }
        catch (Exception ex)
        {
            return ex;
        }
    }

    internal static void Spin(int iterations)
    {
        if (iterations > 0)
        {
            Thread.SpinWait(iterations);
        }
    }

    /// <summary>One iteration of a wait for another thread: a spin, or on one processor a yield (see the remarks above).</summary>
    internal static void Pause()
    {
        if (Spinning.Helps)
        {
            Thread.SpinWait(1);
        }
        else
        {
            Thread.Yield();
        }
    }

    private void Loop()
    {
        int last = -1;
        while (true)
        {
            int round = Volatile.Read(ref _round);
            if (round == Stopped)
            {
                return;
            }
            if (round == last)
            {
                Pause();
                continue;
            }
            last = round;
            _error = Run(() =>
            {
                if (_ready is { } ready)
                {
                    while (!ready())
                    {
                        Pause();
                    }
                }
                Spin(_spins);
                _step!();
            });
            Volatile.Write(ref _ran, round); // publishes _error
        }
    }
}

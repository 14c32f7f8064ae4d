using System;
using System.Threading;

namespace SpindleLib.Tests.Sources;

/// <summary>
/// Runs a <see cref="RerunningSource"/>'s kept continuation from the calling thread and from a second thread at the same
/// moment, round after round: the misuse of a user's source that completes from two threads at once. The second thread is
/// kept for every round and spins between them, so that neither run is woken from a wait late (two threads released by a
/// Barrier met too seldom to find a claim made of a read and a store, mutation testing mut51 and mut52), and one of the
/// two runs, in turn, first spins for a few iterations that sweep through the rounds, so that the runs meet at every
/// small offset: a claim's window is a few instructions. On one processor a spin never lets the other thread run, so
/// there every wait yields instead: the rounds still check their outcome, though the race itself is rare. Or
/// (<see cref="RunOnceRegistered"/>) the second thread alone runs the continuation, the moment the source is handed it.
/// Used by <c>ChildObserverClaimRaceTests</c>, <see cref="BoxRunClaimRaceTests"/> and <c>ForgetObserverClaimRaceTests</c>;
/// a test that uses it runs in the sequential collection, since its two threads must run at once, on the two cores a
/// small machine has.
/// </summary>
internal sealed class ContinuationRacer : IDisposable
{
    private const int Stopped = -2;
    private readonly Thread _thread;
    private int _round = -1;     // the round posted to run; Stopped to end
    private int _ran = -1;       // the last round run
    private RerunningSource? _source;
    private int _spins;
    private bool _whenRegistered; // the round's run waits for the source to be handed its continuation, then completes it
    private Exception? _error;

    public ContinuationRacer(string name)
    {
        _thread = new Thread(Loop) { IsBackground = true, Name = name };
        _thread.Start();
    }

    /// <summary>
    /// Runs <paramref name="source"/>'s continuation on this thread and on the racing one at once (round
    /// <paramref name="round"/>, numbered from 0 and never repeated), and returns what each run threw.
    /// </summary>
    public (Exception? Mine, Exception? Theirs) RunBothAtOnce(int round, RerunningSource source)
    {
        int jitter = round % 16; // spins before this round's run, on one side or the other
        _source = source;
        _spins = jitter % 2 == 1 ? jitter / 2 : 0;
        _whenRegistered = false;
        Volatile.Write(ref _round, round); // publishes the two fields above
        Spin(jitter % 2 == 0 ? jitter / 2 : 0);
        Exception? mine = null;
        try
        {
            source.RunAgain();
        }
        catch (Exception ex)
        {
            mine = ex;
        }
        return (mine, WaitForRun(round));
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
        _source = source;
        _spins = 0;
        _whenRegistered = true;
        Volatile.Write(ref _round, round); // publishes the fields above
        register();
        return WaitForRun(round);
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

    /// <summary>Ends the racing thread (30 s bound).</summary>
    public void Dispose()
    {
        Volatile.Write(ref _round, Stopped);
        Assert.True(_thread.Join(TimeSpan.FromSeconds(30)), "the racing thread did not end");
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

    private static void Spin(int iterations)
    {
        if (iterations > 0)
        {
            Thread.SpinWait(iterations);
        }
    }

    // On one processor a spin never lets the other thread run (two taskset -c 1 runs hung until their timeout, mut51), so
    // there each wait yields.
    private static void Pause()
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
            Spin(_spins);
            Exception? error = null;
            try
            {
                if (_whenRegistered)
                {
                    while (!_source!.IsRegistered)
                    {
                        Pause();
                    }
                    _source.MarkCompleted();
                }
                _source!.RunAgain();
            }
            catch (Exception ex)
            {
                error = ex;
            }
            _error = error;
            Volatile.Write(ref _ran, round); // publishes _error
        }
    }
}
